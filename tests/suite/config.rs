//! Project configuration: `.grove/config.toml` errors, the template `grove init` writes,
//! flag > file > default for every key, and the `[worktree]` preparation — the setup
//! command and local-only files that must never be committed, reviewed or merged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::prices::Usd;
use grove::run::{
    ModelChoice, ModelNames, Models, RunEnd, RunError, RunOptions, RunReport, TurnCaps,
    WorktreeSetup,
};
use grove::settings::config::{
    self, CONFIG_PATH, ProjectConfig, ResolvedRun, RoleValues, RunSettings,
};
use grove::settings::options::{CheckOptions, History, default_jobs};
use grove::settings::ratchet::{RatchetOptions, Tool};
use grove::settings::template::{self, AGENT_SAMPLE, AGENT_SAMPLE_PATH};
use grove::store::journal::{SubtaskOutcome, VerdictKind};
use grove::store::{RunId, RunStore};

use crate::support::fake_server::{Endpoint, FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::Grove;
use crate::support::requests::{Who, heard_by_lead, who};
use crate::support::scripted_run::{first_user_text, own_review_text};

const FILE: &str = "/repo/.grove/config.toml";

fn parse_error(text: &str) -> String {
    match ProjectConfig::parse(Path::new(FILE), text) {
        Ok(config) => panic!("{text:?} must be refused, parsed as {config:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn invalid_config_errors_name_the_file_line_column_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "# comment\n\njobs = \"four\"\n",
            "3:8: jobs: expected an integer from 1 to 64, got \"four\"",
        ),
        (
            "jobs = 0",
            "1:8: jobs: expected an integer from 1 to 64, got 0",
        ),
        (
            "jobs = 65",
            "1:8: jobs: expected an integer from 1 to 64, got 65",
        ),
        (
            "jobs = 2.5",
            "1:8: jobs: expected an integer from 1 to 64, got 2.5",
        ),
        (
            "attempts = 0",
            "1:12: attempts: expected an integer from 1 to 8, got 0",
        ),
        (
            "max_attempts = 9",
            "1:16: max_attempts: expected an integer from 1 to 8, got 9",
        ),
        (
            "provider = \"claude\"",
            "1:12: provider: expected \"anthropic\" or \"openai\", got \"claude\"",
        ),
        (
            "model = \"\"",
            "1:9: model: expected a model name (a non-empty string without spaces), got \"\"",
        ),
        (
            "[models]\nlead = 3",
            "2:8: models.lead: expected a model name (a non-empty string without spaces), got 3",
        ),
        (
            "[max_turns]\nworker = 0",
            "2:10: max_turns.worker: expected an integer from 1 to 4294967295, got 0",
        ),
        (
            "budget_tokens = -5",
            "1:17: budget_tokens: expected a positive number of tokens, got -5",
        ),
        (
            "subagent_budget_tokens = \"lots\"",
            "1:26: subagent_budget_tokens: expected a positive number of tokens, got \"lots\"",
        ),
        (
            "apply = \"yes\"",
            "1:9: apply: expected true or false, got \"yes\"",
        ),
        (
            "\nhistory = \"rebase\"",
            "2:11: history: expected \"squash\" or \"merge\", got \"rebase\"",
        ),
        (
            "[worktree]\nsetup = \"  \"",
            "2:9: worktree.setup: expected a shell command (a non-empty string), got \"  \"",
        ),
        (
            "[worktree]\nsetup_timeout_s = 0",
            "2:19: worktree.setup_timeout_s: expected an integer from 1 to 86400, got 0",
        ),
        (
            "[worktree]\ncopy = \".env\"",
            "2:8: worktree.copy: expected an array of paths such as [\".env\"], got \".env\"",
        ),
        (
            "[worktree]\ncopy = [\"../secrets.env\"]",
            "2:8: worktree.copy: \"../secrets.env\" leaves the repository (`..`); list paths \
             inside it",
        ),
        (
            "[worktree]\ncopy = [\"/etc/passwd\"]",
            "2:8: worktree.copy: \"/etc/passwd\" is absolute; list paths relative to the \
             repository root",
        ),
        (
            "[worktree]\ncopy = [\".git/config\"]",
            "2:8: worktree.copy: \".git/config\" is inside .git; list files of the work tree",
        ),
        (
            "[worktree]\ncopy = [\".env\", \"./.env\"]",
            "2:8: worktree.copy: \".env\" is listed twice",
        ),
        (
            "jobz = 4",
            "1:1: jobz: unknown field `jobz`, expected one of `provider`, `model`, `models`, \
             `jobs`, `attempts`, `max_attempts`, `max_turns`, `budget_tokens`, `subagent_budget_tokens`, `budget_usd`, \
             `subagent_budget_usd`, `apply`, \
             `worktree`, `workers`, `sandbox`, `history`, `check`",
        ),
        (
            "[check]\ntimeout_s = 60",
            "1:1: check: the table needs `command`",
        ),
        (
            "[check]\ncommand = \"\"",
            "2:11: check.command: expected a shell command (a non-empty string), got \"\"",
        ),
        (
            "[check]\ncommand = \"make test\"\nsubtask = \"strict\"",
            "3:11: check.subtask: expected \"evidence\" or \"require\", got \"strict\"",
        ),
        (
            "[check]\ncommand = \"make test\"\nfix_attempts = 11",
            "3:16: check.fix_attempts: expected an integer from 0 to 10, got 11",
        ),
        (
            "[check]\ncommand = \"make test\"\nnetwork = \"no\"",
            "3:11: check.network: expected true or false, got \"no\"",
        ),
        (
            "[check]\ncommand = \"make test\"\nretries = 2",
            "3:1: check.retries: unknown field `retries`, expected one of `command`, \
             `timeout_s`, `network`, `subtask`, `fix_attempts`, `base`, `ratchet`",
        ),
        (
            "[models]\nleed = \"x\"",
            "2:1: models.leed: unknown field `leed`, expected one of `lead`, `worker`, \
             `reviewer`",
        ),
        (
            "models = 3",
            "1:10: models: invalid type: integer `3`, expected a table with the keys lead, \
             worker and reviewer",
        ),
        ("jobs = 4\njobs = 5", "2:1: jobs: duplicate key"),
    ];
    for (text, expected) in cases {
        assert_eq!(
            parse_error(text),
            format!("{FILE}:{expected}"),
            "the error for {text:?} names the file, line, column and key"
        );
    }
}

#[test]
fn syntax_errors_point_at_where_the_parser_stopped() {
    let cases: &[(&str, &str)] = &[
        (
            "provider = \"openai\"\njobs = [1,\n",
            "2:11: jobs: unclosed array, expected `]`",
        ),
        (
            "provider = \"openai\nx = 1\n",
            "1:19: provider: invalid basic string, expected `\"`",
        ),
        (
            "[worktree\nsetup = \"x\"\n",
            "1:10: unclosed table, expected `]`",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(parse_error(text), format!("{FILE}:{expected}"), "{text:?}");
    }
}

#[test]
fn load_is_none_without_a_file_and_names_the_file_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        ProjectConfig::load(dir.path()).unwrap(),
        None,
        "no file: no config"
    );

    std::fs::create_dir_all(dir.path().join(".grove/config.toml")).unwrap();
    let error = ProjectConfig::load(dir.path()).unwrap_err().to_string();
    assert!(
        error.starts_with(&format!(
            "cannot read {}",
            dir.path().join(CONFIG_PATH).display()
        )),
        "{error}"
    );

    std::fs::remove_dir(dir.path().join(CONFIG_PATH)).unwrap();
    std::fs::write(
        dir.path().join(CONFIG_PATH),
        b"jobs = 2\nmodel = \"\xff\"\n",
    )
    .unwrap();
    assert_eq!(
        ProjectConfig::load(dir.path()).unwrap_err().to_string(),
        format!(
            "{}:2:10: the file is not valid UTF-8",
            dir.path().join(CONFIG_PATH).display()
        )
    );
}

/// The template with every commented-out key and table header uncommented.
fn uncommented_template() -> String {
    template::template()
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    }) =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_generated_file_changes_nothing_and_documents_the_defaults() {
    let written = ProjectConfig::parse(Path::new(FILE), &template::template()).unwrap();
    assert_eq!(
        written.settings,
        RunSettings::default(),
        "as written, every key is commented out"
    );

    let uncommented = ProjectConfig::parse(Path::new(FILE), &uncommented_template()).unwrap();
    let model = config::default_model(Provider::Anthropic).to_owned();
    let caps = TurnCaps::default();
    assert_eq!(
        uncommented.settings,
        RunSettings {
            provider: Some(Provider::Anthropic),
            model: Some(model.clone()),
            models: RoleValues {
                lead: Some(model.clone()),
                worker: Some(model.clone()),
                reviewer: Some(model),
            },
            jobs: Some(default_jobs() as u32),
            attempts: Some(1),
            max_attempts: Some(4),
            max_turns: RoleValues {
                lead: Some(caps.lead),
                worker: Some(caps.worker),
                reviewer: Some(caps.reviewer),
            },
            budget_tokens: Some(2_000_000),
            subagent_budget_tokens: Some(400_000),
            budget_usd: Usd::from_dollars(20.0),
            subagent_budget_usd: Usd::from_dollars(4.0),
            apply: Some(true),
            setup: Some("npm ci".into()),
            setup_timeout_s: Some(config::DEFAULT_SETUP_TIMEOUT_S),
            setup_per_worker: Some(false),
            copy: Some(vec![".env".into()]),
            share: Some(vec![".venv".into()]),
            deny_read: Some(vec!["~/private".into()]),
            allow_read: Some(vec!["~/.m2/settings.xml".into()]),
            worktrees_dir: Some("/var/tmp/grove-worktrees".into()),
            worktree_mode: Some(grove::worktree::WorktreeMode::Auto),
            pass_env: Some(vec!["DISABLE_AUTOUPDATER".into()]),
            history: Some(History::Squash),
            check: Some(CheckOptions {
                ratchets: vec![RatchetOptions {
                    command: "mypy src".into(),
                    parse: Tool::Mypy.parse(),
                }],
                ..CheckOptions::new("cargo test")
            }),
        },
        "every key is documented, each line parses"
    );

    // The keys without a default carry an example; every other line is the default.
    let defaults_only = RunSettings {
        budget_tokens: None,
        subagent_budget_tokens: None,
        budget_usd: None,
        subagent_budget_usd: None,
        setup: None,
        copy: None,
        share: None,
        deny_read: None,
        allow_read: None,
        worktrees_dir: None,
        pass_env: None,
        check: None,
        ..uncommented.settings
    };
    assert_eq!(
        comparable(&defaults_only.resolve("t")),
        comparable(&RunSettings::default().resolve("t")),
        "each value shown in the file is the built-in default"
    );
}

/// What a resolution decides, in a form that compares whole.
fn comparable(resolved: &ResolvedRun) -> Value {
    json!({
        "provider": resolved.provider.as_str(),
        "models": resolved.models,
        "options": resolved.options,
    })
}

/// One key's three layers: its built-in default, a file value, a flag value.
struct Layered {
    key: &'static str,
    file: RunSettings,
    flag: RunSettings,
    read: fn(&ResolvedRun) -> Value,
    default: Value,
}

#[test]
fn every_key_is_default_then_file_then_flag() {
    let model = config::default_model(Provider::Anthropic);
    let caps = TurnCaps::default();
    let layered = [
        Layered {
            key: "provider",
            file: RunSettings {
                provider: Some(Provider::OpenAi),
                ..RunSettings::default()
            },
            flag: RunSettings {
                provider: Some(Provider::Anthropic),
                ..RunSettings::default()
            },
            read: |r| json!(r.provider.as_str()),
            default: json!("anthropic"),
        },
        Layered {
            key: "model",
            file: RunSettings {
                model: Some("file-model".into()),
                ..RunSettings::default()
            },
            flag: RunSettings {
                model: Some("flag-model".into()),
                ..RunSettings::default()
            },
            read: |r| json!(r.models.worker),
            default: json!(model),
        },
        Layered {
            key: "models.lead",
            file: RunSettings {
                models: RoleValues {
                    lead: Some("file-lead".into()),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            flag: RunSettings {
                models: RoleValues {
                    lead: Some("flag-lead".into()),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            read: |r| json!(r.models.lead),
            default: json!(model),
        },
        Layered {
            key: "models.reviewer",
            file: RunSettings {
                models: RoleValues {
                    reviewer: Some("file-reviewer".into()),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            flag: RunSettings {
                models: RoleValues {
                    reviewer: Some("flag-reviewer".into()),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            read: |r| json!(r.options.model_names.reviewer),
            default: json!(model),
        },
        Layered {
            key: "jobs",
            file: RunSettings {
                jobs: Some(7),
                ..RunSettings::default()
            },
            flag: RunSettings {
                jobs: Some(9),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.jobs),
            default: json!(default_jobs()),
        },
        Layered {
            key: "max_turns.worker",
            file: RunSettings {
                max_turns: RoleValues {
                    worker: Some(11),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            flag: RunSettings {
                max_turns: RoleValues {
                    worker: Some(13),
                    ..RoleValues::default()
                },
                ..RunSettings::default()
            },
            read: |r| json!(r.options.max_turns),
            default: json!(caps),
        },
        Layered {
            key: "budget_tokens",
            file: RunSettings {
                budget_tokens: Some(1000),
                ..RunSettings::default()
            },
            flag: RunSettings {
                budget_tokens: Some(2000),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.budget_tokens),
            default: json!(null),
        },
        Layered {
            key: "subagent_budget_tokens",
            file: RunSettings {
                subagent_budget_tokens: Some(100),
                ..RunSettings::default()
            },
            flag: RunSettings {
                subagent_budget_tokens: Some(200),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.subagent_budget_tokens),
            default: json!(null),
        },
        Layered {
            key: "apply",
            file: RunSettings {
                apply: Some(false),
                ..RunSettings::default()
            },
            flag: RunSettings {
                apply: Some(true),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.apply),
            default: json!(true),
        },
        Layered {
            key: "worktree",
            file: RunSettings {
                setup: Some("make deps".into()),
                setup_timeout_s: Some(30),
                copy: Some(vec![".env".into()]),
                ..RunSettings::default()
            },
            flag: RunSettings {
                setup: Some("true".into()),
                setup_timeout_s: Some(5),
                copy: Some(Vec::new()),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.worktree_setup),
            default: json!(WorktreeSetup::default()),
        },
        Layered {
            key: "history",
            file: RunSettings {
                history: Some(History::Merge),
                ..RunSettings::default()
            },
            flag: RunSettings {
                history: Some(History::Squash),
                ..RunSettings::default()
            },
            read: |r| json!(r.options.history),
            default: json!("squash"),
        },
    ];
    for layer in layered {
        let only_default = (layer.read)(&RunSettings::default().resolve("t"));
        let from_file = (layer.read)(&RunSettings::default().over(layer.file.clone()).resolve("t"));
        let from_flag = (layer.read)(&layer.flag.clone().over(layer.file.clone()).resolve("t"));
        let expected_file = (layer.read)(&layer.file.resolve("t"));
        let expected_flag = (layer.read)(&layer.flag.resolve("t"));
        assert_eq!(
            only_default, layer.default,
            "{}: built-in default",
            layer.key
        );
        assert_ne!(
            expected_file, layer.default,
            "{}: the file value differs",
            layer.key
        );
        assert_ne!(
            expected_flag, expected_file,
            "{}: the flag value differs",
            layer.key
        );
        assert_eq!(
            from_file, expected_file,
            "{}: the file beats the default",
            layer.key
        );
        assert_eq!(
            from_flag, expected_flag,
            "{}: the flag beats the file",
            layer.key
        );
    }
}

#[test]
fn a_flag_model_beats_the_files_role_models_and_a_provider_switch_drops_them() {
    let file = RunSettings {
        provider: Some(Provider::OpenAi),
        model: Some("local-coder".into()),
        models: RoleValues {
            reviewer: Some("local-reviewer".into()),
            ..RoleValues::default()
        },
        ..RunSettings::default()
    };
    let names = |flags: RunSettings| flags.over(file.clone()).resolve("t").models;

    assert_eq!(
        names(RunSettings::default()),
        ModelNames {
            lead: "local-coder".into(),
            worker: "local-coder".into(),
            reviewer: "local-reviewer".into(),
        },
        "the file alone: its model, its reviewer model"
    );
    assert_eq!(
        names(RunSettings {
            model: Some("flag-model".into()),
            ..RunSettings::default()
        }),
        ModelNames {
            lead: "flag-model".into(),
            worker: "flag-model".into(),
            reviewer: "flag-model".into(),
        },
        "--model is every role's model, the file's per-role models included"
    );
    assert_eq!(
        names(RunSettings {
            provider: Some(Provider::Anthropic),
            ..RunSettings::default()
        }),
        ModelNames {
            lead: "claude-sonnet-5-5".into(),
            worker: "claude-sonnet-5-5".into(),
            reviewer: "claude-sonnet-5-5".into(),
        },
        "--provider switching away from the file's provider drops its model names"
    );
    assert_eq!(
        names(RunSettings {
            provider: Some(Provider::OpenAi),
            ..RunSettings::default()
        })
        .worker,
        "local-coder",
        "--provider naming the file's own provider keeps its model names"
    );
}

#[test]
fn options_journaled_before_worktree_setup_existed_still_read() {
    let mut recorded = serde_json::to_value(RunOptions::new("old task")).unwrap();
    recorded.as_object_mut().unwrap().remove("worktree_setup");
    let read: RunOptions = serde_json::from_value(recorded).unwrap();
    assert_eq!(read.worktree_setup, WorktreeSetup::default());

    let with = RunOptions {
        worktree_setup: WorktreeSetup {
            setup: Some("npm ci".into()),
            setup_timeout_s: 42,
            per_worker: true,
            copy: vec![".env".into()],
            share: Some(vec![".venv".into()]),
        },
        ..RunOptions::new("t")
    };
    let back: RunOptions = serde_json::from_value(serde_json::to_value(&with).unwrap()).unwrap();
    assert_eq!(
        back.worktree_setup, with.worktree_setup,
        "a resumed run reads back the setup it started with"
    );
}

// ---------------------------------------------------------------------------------------
// The binary: layers end to end, errors, `grove init`.

async fn grove_in(dir: &Path, home: &Path, server: Option<&FakeServer>, args: &[&str]) -> Output {
    let mut grove = Grove::new(dir, home);
    if let Some(server) = server {
        grove = grove.with_server(server);
    }
    grove.grove_async(args).await
}

async fn grove(fixture: &GitFixture, server: Option<&FakeServer>, args: &[&str]) -> Output {
    grove_in(&fixture.repo, &fixture.home(), server, args).await
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What `grove run` decided, seen from outside: the endpoint and model of the one
/// request a lead that answers at once makes, and the options the run journaled (which
/// a resume reads back).
async fn decided(
    fixture: &GitFixture,
    config: Option<&str>,
    flags: &[&str],
) -> (Endpoint, String, Value) {
    if let Some(config) = config {
        fixture.write(CONFIG_PATH, config);
        // A setup command in the file runs only once trusted.
        let trusted = grove(fixture, None, &["trust"]).await;
        assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    }
    let server = FakeServer::with_responder(|_| Turn::text("Nothing to do.").into()).await;
    let mut args = vec!["run", "--json"];
    args.extend_from_slice(flags);
    args.push("look around");
    let output = grove(fixture, Some(&server), &args).await;
    // The lead delegates nothing: finished, but not everything was done (DESIGN.md).
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "one lead turn");
    let model = requests[0].body["model"].as_str().unwrap().to_owned();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let run_id: RunId = report["run_id"].as_str().unwrap().parse().unwrap();
    let state = RunStore::new(&fixture.repo.join(".git"))
        .read_state(&run_id)
        .unwrap();
    let options = serde_json::to_value(&state.options).unwrap();
    let journaled = json!({
        "jobs": options["jobs"],
        "max_turns": options["max_turns"],
        "budget_tokens": options["budget_tokens"],
        "subagent_budget_tokens": options["subagent_budget_tokens"],
        "apply": options["apply"],
        "worktree_setup": options["worktree_setup"],
        "model_names": options["model_names"],
    });
    (requests[0].endpoint, model, journaled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_run_takes_the_default_then_the_file_then_the_flag() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let default_model = "claude-sonnet-5-5";
    assert_eq!(
        decided(&fixture, None, &[]).await,
        (
            Endpoint::Anthropic,
            default_model.to_owned(),
            json!({
                "jobs": default_jobs(),
                "max_turns": { "lead": 40, "worker": 60, "reviewer": 20 },
                "budget_tokens": null,
                "subagent_budget_tokens": null,
                "apply": true,
                "worktree_setup": { "setup": null, "setup_timeout_s": 600, "copy": [], "share": [] },
                "model_names": { "lead": default_model, "worker": default_model, "reviewer": default_model },
            })
        ),
        "no file, no flag: the built-in defaults"
    );

    let file = "provider = \"openai\"\nmodel = \"file-model\"\njobs = 3\nbudget_tokens = 5000\n\
                subagent_budget_tokens = 700\napply = false\n[models]\nlead = \"file-lead\"\n\
                [max_turns]\nworker = 9\n[worktree]\nsetup = \"true\"\nsetup_timeout_s = 30\n";
    assert_eq!(
        decided(&fixture, Some(file), &[]).await,
        (
            Endpoint::OpenAi,
            "file-lead".to_owned(),
            json!({
                "jobs": 3,
                "max_turns": { "lead": 40, "worker": 9, "reviewer": 20 },
                "budget_tokens": 5000,
                "subagent_budget_tokens": 700,
                "apply": false,
                "worktree_setup": { "setup": "true", "setup_timeout_s": 30, "copy": [], "share": [] },
                "model_names": { "lead": "file-lead", "worker": "file-model", "reviewer": "file-model" },
            })
        ),
        "the file beats the defaults"
    );
    assert_eq!(
        decided(
            &fixture,
            Some(file),
            &[
                "--lead-model",
                "flag-lead",
                "--jobs",
                "2",
                "--max-turns",
                "5",
                "--max-turns",
                "worker=4",
                "--budget-tokens",
                "6000",
                "--subagent-budget-tokens",
                "800",
                "--apply",
            ],
        )
        .await,
        (
            Endpoint::OpenAi,
            "flag-lead".to_owned(),
            json!({
                "jobs": 2,
                "max_turns": { "lead": 5, "worker": 4, "reviewer": 5 },
                "budget_tokens": 6000,
                "subagent_budget_tokens": 800,
                "apply": true,
                "worktree_setup": { "setup": "true", "setup_timeout_s": 30, "copy": [], "share": [] },
                "model_names": { "lead": "flag-lead", "worker": "file-model", "reviewer": "file-model" },
            })
        ),
        "each flag beats the file; the file's other keys still apply"
    );
    let (endpoint, model, journaled) = decided(
        &fixture,
        Some(file),
        &["--provider", "anthropic", "--no-apply"],
    )
    .await;
    assert_eq!(
        (
            endpoint,
            model,
            &journaled["model_names"],
            &journaled["apply"]
        ),
        (
            Endpoint::Anthropic,
            default_model.to_owned(),
            &json!({ "lead": default_model, "worker": default_model, "reviewer": default_model }),
            &json!(false),
        ),
        "--provider beats the file, and the file's openai model names go with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_run_with_an_invalid_config_exits_1_naming_file_line_and_key() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    fixture.write(CONFIG_PATH, "# team settings\njobs = \"four\"\n");
    let server = FakeServer::start().await;
    let output = grove(&fixture, Some(&server), &["run", "do something"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let path = std::fs::canonicalize(&fixture.repo)
        .unwrap()
        .join(CONFIG_PATH);
    assert_eq!(
        stderr(&output).trim_end(),
        format!(
            "grove: {}:2:8: jobs: expected an integer from 1 to 64, got \"four\"",
            path.display()
        )
    );
    assert!(server.requests().is_empty(), "no model is called");
}

/// What stands at a path grove reads from the repository, in place of a file.
#[derive(Debug, Clone, Copy)]
enum Special {
    /// A symbolic link to `/dev/zero` (read whole, it fills the memory).
    DevZero,
    /// A FIFO with no writer (opened for reading, it blocks forever).
    Fifo,
    /// A regular file over the bound.
    Huge,
}

impl Special {
    fn plant(self, path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match self {
            Special::DevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
            Special::Fifo => nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap(),
            Special::Huge => std::fs::write(path, vec![b'#'; 2 * 1024 * 1024]).unwrap(),
        }
    }

    fn problem(self) -> &'static str {
        match self {
            // Out of the work tree: refused as a link, before its target is opened.
            Special::DevZero => {
                "it is a symbolic link to /dev/zero, outside the repository; grove reads no \
                 file outside the repository's work tree"
            }
            Special::Fifo => "it is a FIFO (named pipe), not a regular file",
            Special::Huge => "it is larger than 1048576 bytes, the most grove reads of such a file",
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_special_file_as_config_rules_or_agent_file_is_refused_naming_it_never_read() {
    let cases = [
        (CONFIG_PATH, Special::DevZero, "cannot read"),
        (CONFIG_PATH, Special::Fifo, "cannot read"),
        (CONFIG_PATH, Special::Huge, "cannot read"),
        ("AGENTS.md", Special::Fifo, "cannot read the project rules"),
        (
            "CLAUDE.md",
            Special::DevZero,
            "cannot read the project rules",
        ),
    ];
    for (file, special, what) in cases {
        let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
        special.plant(&fixture.repo.join(file));
        let server = FakeServer::start().await;
        // On a FIFO grove used to block forever; on /dev/zero it grew to gigabytes.
        let output = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            grove(&fixture, Some(&server), &["run", "do something"]),
        )
        .await
        .unwrap_or_else(|_| panic!("{file} as {special:?}: grove run never ended"));
        let path = std::fs::canonicalize(&fixture.repo).unwrap().join(file);
        assert_eq!(
            (output.status.code(), stderr(&output).trim_end()),
            (
                Some(1),
                format!("grove: {what} {}: {}", path.display(), special.problem()).as_str()
            ),
            "{file} as {special:?}: refused at once, naming the file and what it is"
        );
        assert!(
            server.requests().is_empty() && !fixture.repo.join(".git/grove/runs").exists(),
            "{file} as {special:?}: no model is called and no run is made"
        );
    }

    // An agent file is read when the lead names it: the lead is told, the run goes on.
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    Special::Fifo.plant(&fixture.repo.join(".grove/agents/docs.md"));
    let server = FakeServer::with_script(vec![
        Turn::new()
            .tool_use(
                "d1",
                "delegate",
                json!({"task": "write docs", "agent": "docs"}),
            )
            .into(),
        Turn::text("nothing to do").into(),
    ])
    .await;
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        grove(&fixture, Some(&server), &["run", "do something"]),
    )
    .await
    .expect("an agent file that is a FIFO never blocks the run");
    server.assert_no_violations();
    let path = std::fs::canonicalize(&fixture.repo)
        .unwrap()
        .join(".grove/agents/docs.md");
    assert_eq!(
        (output.status.code(), server.requests()[1].tool_results()),
        (
            Some(3),
            vec![(
                "d1".to_owned(),
                format!(
                    "cannot read agent file {}: {}",
                    path.display(),
                    Special::Fifo.problem()
                )
            )]
        ),
        "the lead learns which file cannot be read and why: {}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_init_writes_a_config_that_runs_and_refuses_to_overwrite_it() {
    // A repository with no commits yet.
    let fixture = GitFixture::empty();
    let output = grove(&fixture, None, &["init"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8(fixture.read(CONFIG_PATH)).unwrap(),
        template::template()
    );
    assert_eq!(
        String::from_utf8(fixture.read(AGENT_SAMPLE_PATH)).unwrap(),
        AGENT_SAMPLE
    );
    let printed = stdout(&output);
    assert!(
        printed.contains("wrote .grove/config.toml") && printed.contains("Next:"),
        "it says what it wrote and what comes next: {printed}"
    );

    fixture.write(CONFIG_PATH, "jobs = 2\n");
    let again = grove(&fixture, None, &["init"]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already exists") && stderr(&again).contains("--force"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        fixture.read(CONFIG_PATH),
        b"jobs = 2\n",
        "an existing file is kept"
    );

    let forced = grove(&fixture, None, &["init", "--force"]).await;
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(
        String::from_utf8(fixture.read(CONFIG_PATH)).unwrap(),
        template::template(),
        "--force replaces it"
    );

    // The file as written runs: commit it and make a run that changes nothing.
    fixture.write("a.txt", "a\n");
    fixture.commit_all("first");
    let server = FakeServer::with_responder(|_| Turn::text("Nothing to do.").into()).await;
    let run = grove(&fixture, Some(&server), &["run", "look around"]).await;
    // It ran to the end; the lead delegated nothing, which is exit 3 (DESIGN.md).
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_init_outside_a_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = grove_in(dir.path(), &home, None, &["init"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output)
            .starts_with("grove: grove init writes .grove/config.toml into a git repository"),
        "{}",
        stderr(&output)
    );
    assert!(!dir.path().join(".grove").exists(), "nothing is written");
}

// ---------------------------------------------------------------------------------------
// `[worktree]`: setup command and local-only files, in real runs.

const SECRET: &str = "FAKE-SECRET-4242";

/// A lead that delegates `briefs` at once; workers that do the brief's `BASH <command>`
/// and `WRITE <path> <content>` lines in order, one per turn; reviewers that approve.
fn script(briefs: &'static [&'static str]) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let done = request.tool_results().len();
        let turn = match who(request) {
            Who::Lead if done == 0 => {
                briefs
                    .iter()
                    .enumerate()
                    .fold(Turn::text("Delegating."), |turn, (i, brief)| {
                        turn.tool_use(&format!("d{i}"), "delegate", json!({ "task": brief }))
                    })
            }
            Who::Lead => Turn::text("All done."),
            Who::Worker => {
                let brief = first_user_text(request);
                let steps: Vec<&str> = brief
                    .lines()
                    .filter(|line| line.starts_with("BASH ") || line.starts_with("WRITE "))
                    .collect();
                match steps.get(done) {
                    None => Turn::text("Finished."),
                    Some(step) => match step.split_once(' ').unwrap() {
                        ("BASH", command) => Turn::new().tool_use(
                            &format!("w{done}"),
                            "bash",
                            json!({ "command": command }),
                        ),
                        (_, rest) => {
                            let (path, content) = rest.split_once(' ').unwrap();
                            Turn::new().tool_use(
                                &format!("w{done}"),
                                "write_file",
                                json!({ "path": path, "content": format!("{content}\n") }),
                            )
                        }
                    },
                }
            }
            Who::Reviewer if done == 0 => Turn::new().tool_use(
                "r1",
                "submit_verdict",
                json!({ "verdict": "approve", "summary": "Fine." }),
            ),
            Who::Reviewer => Turn::text("Verdict given."),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

fn models(server: &FakeServer) -> Models {
    let choice = || ModelChoice {
        client: server.model(Provider::Anthropic, true),
        name: "test-model".into(),
    };
    Models {
        provider: "anthropic".into(),
        lead: choice(),
        worker: choice(),
        reviewer: choice(),
    }
}

fn setup_options(fixture: &GitFixture, setup: WorktreeSetup) -> RunOptions {
    RunOptions {
        jobs: 3,
        git: fixture.options(),
        worktree_setup: setup,
        ..RunOptions::new("the user's task")
    }
}

async fn run(
    fixture: &GitFixture,
    server: &FakeServer,
    options: RunOptions,
) -> Result<RunReport, RunError> {
    grove::run::run(
        &fixture.repo,
        options,
        models(server),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
}

/// A repository whose `.env` and `config/local.yml` are untracked and NOT ignored, so
/// only grove's own exclusion keeps them out of commits; `*.log` is ignored.
fn repo_with_secrets() -> GitFixture {
    let fixture = GitFixture::with_files(&[
        ("a.txt", "a\n"),
        ("b.txt", "b\n"),
        (".gitignore", "*.log\n"),
    ]);
    fixture.write(".env", format!("API_TOKEN={SECRET}\n"));
    fixture.write("config/local.yml", format!("password: {SECRET}\n"));
    fixture
}

fn worktree_of(fixture: &GitFixture, report: &RunReport, n: u32) -> PathBuf {
    fixture.worktree_dir(&report.run_id, n)
}

/// Every commit in `range` with its patch and full tree listing, as one text.
fn history(fixture: &GitFixture, range: &str) -> String {
    let patches = fixture.git(&["log", "-p", "--format=commit %H", range]);
    let trees: Vec<String> = fixture
        .git(&["rev-list", range])
        .lines()
        .map(|commit| fixture.git(&["ls-tree", "-r", "--name-only", commit]))
        .collect();
    format!("{patches}\n{}", trees.join("\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_files_reach_every_worktree_and_never_a_commit_a_review_or_the_result() {
    let fixture = repo_with_secrets();
    let base = fixture.rev("HEAD").to_string();
    let server = FakeServer::with_responder(script(&[
        // Stages the secrets itself: grove's commits must still leave them out.
        "Change a.\nBASH git add -f .env config/local.yml\nWRITE a.txt ALPHA",
        // Commits them itself: the branch must be refused before any review.
        "Change b.\nBASH git add -f .env && git -c user.name=w -c user.email=w@example.com -c commit.gpgSign=false commit -q -m leak\nWRITE b.txt BETA",
    ]))
    .await;
    let mut options = setup_options(
        &fixture,
        WorktreeSetup {
            // Fails unless the files are copied before it runs.
            setup: Some(
                "test -f .env && test -f config/local.yml && echo ready > setup.log".into(),
            ),
            copy: vec![".env".into(), "./config/local.yml".into()],
            ..WorktreeSetup::default()
        },
    );
    options.keep_worktrees = true;
    // The worker must be able to stage and commit by itself here, which the sandbox
    // forbids: this is the defence for `--sandbox off`.
    options.sandbox = grove::tools::sandbox::SandboxMode::Off;
    let report = run(&fixture, &server, options).await.unwrap();
    server.assert_no_violations();

    let outcomes: Vec<_> = report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status, s.verdict))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (
                "S1".to_owned(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            ),
            ("S2".to_owned(), SubtaskOutcome::Failed, None),
        ],
        "{report:#?}"
    );
    let reason = report.subtasks[1].reason.clone().unwrap();
    assert!(
        reason.contains("record a local-only file (.env, config/local.yml)")
            && reason.contains("never reviewed or merged"),
        "S2 is refused for the commit its worker made: {reason}"
    );
    assert!(report.applied, "{report:#?}");

    for n in [1, 2] {
        let worktree = worktree_of(&fixture, &report, n);
        assert_eq!(
            std::fs::read_to_string(worktree.join(".env")).unwrap(),
            format!("API_TOKEN={SECRET}\n"),
            "S{n}: the file is in the worktree"
        );
        assert_eq!(
            std::fs::read_to_string(worktree.join("config/local.yml")).unwrap(),
            format!("password: {SECRET}\n")
        );
        assert_eq!(
            std::fs::read_to_string(worktree.join("setup.log")).unwrap(),
            "ready\n",
            "S{n}: the setup command ran after the copy"
        );
    }

    let branch = format!("grove/{}/1", report.run_id);
    let result = format!("grove/{}/result", report.run_id);
    for range in [
        format!("{base}..{branch}"),
        format!("{base}..{result}"),
        format!("{base}..main"),
    ] {
        let text = history(&fixture, &range);
        assert!(text.contains("ALPHA"), "{range} holds S1's work:\n{text}");
        assert!(
            !text.contains(SECRET) && !text.contains(".env") && !text.contains("local.yml"),
            "no commit in {range} holds a local-only file:\n{text}"
        );
    }
    assert_eq!(fixture.read("b.txt"), b"b\n", "S2's work is not merged");

    let reviewers: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| who(r) == Who::Reviewer)
        .collect();
    assert!(!reviewers.is_empty());
    for request in &reviewers {
        assert!(
            !request.raw_body.contains(SECRET),
            "the reviewer never sees a local-only file"
        );
        assert!(
            !own_review_text(request).contains("Change b."),
            "S2's branch is never reviewed"
        );
    }
    for request in server.requests() {
        assert!(
            !request.raw_body.contains(SECRET),
            "no model request carries the secret ({:?})",
            who(&request)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_setup_command_fails_its_subtask_before_the_worker_starts() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(script(&["Change a.\nWRITE a.txt ALPHA"])).await;
    let report = run(
        &fixture,
        &server,
        setup_options(
            &fixture,
            WorktreeSetup {
                setup: Some(
                    "echo installing; echo 'npm ERR! missing: left-pad' >&2; exit 3".into(),
                ),
                ..WorktreeSetup::default()
            },
        ),
    )
    .await
    .unwrap();
    server.assert_no_violations();

    assert_eq!(report.status, RunEnd::Finished);
    let subtask = &report.subtasks[0];
    assert_eq!(subtask.status, SubtaskOutcome::Failed);
    assert_eq!(
        subtask.reason.as_deref().unwrap(),
        "the setup command `echo installing; echo 'npm ERR! missing: left-pad' >&2; exit 3` \
         exited with status 3 in S1's worktree; the worker did not start. Its output ends \
         with:\ninstalling\nnpm ERR! missing: left-pad"
    );
    let roles: Vec<Who> = server.requests().iter().map(who).collect();
    assert_eq!(
        roles,
        vec![Who::Lead, Who::Lead, Who::Lead],
        "no worker or reviewer ever starts (the lead delegates, ends, is told the result)"
    );
    let told = heard_by_lead(&server.requests()[2]);
    assert!(
        told.contains("S1 failed") && told.contains("npm ERR! missing: left-pad"),
        "the lead is told why: {told}"
    );
    assert_eq!(fixture.read("a.txt"), b"a\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_setup_command_past_its_timeout_fails_its_subtask() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(script(&["Change a.\nWRITE a.txt ALPHA"])).await;
    let report = run(
        &fixture,
        &server,
        setup_options(
            &fixture,
            WorktreeSetup {
                setup: Some("echo waiting; sleep 60".into()),
                setup_timeout_s: 1,
                ..WorktreeSetup::default()
            },
        ),
    )
    .await
    .unwrap();
    let reason = report.subtasks[0].reason.clone().unwrap();
    assert!(
        reason.contains("did not finish within 1 s (worktree.setup_timeout_s)")
            && reason.contains("waiting"),
        "{reason}"
    );
    assert!(server.requests().iter().all(|r| who(r) == Who::Lead));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_that_is_missing_tracked_or_outside_stops_the_run_at_its_start() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "KEY").unwrap();
    std::os::unix::fs::symlink(outside.path().join("id_rsa"), fixture.repo.join(".env")).unwrap();
    std::fs::create_dir_all(fixture.repo.join("certs")).unwrap();
    let root = std::fs::canonicalize(&fixture.repo).unwrap();
    let real_outside = std::fs::canonicalize(outside.path())
        .unwrap()
        .join("id_rsa");
    let cases = [
        (
            "missing.env",
            format!(
                "worktree.copy: missing.env: there is no such file in {} (create it, or remove \
                 it from worktree.copy)",
                root.display()
            ),
        ),
        (
            "a.txt",
            "worktree.copy: a.txt: git tracks it, so every worktree has it already; `copy` is \
             for files git does not track"
                .to_owned(),
        ),
        (
            ".env",
            format!(
                "worktree.copy: .env: it leads to {}, outside the repository's work tree",
                real_outside.display()
            ),
        ),
        (
            "certs",
            "worktree.copy: certs: it is not a regular file; list the files to copy one by one"
                .to_owned(),
        ),
    ];
    let server = FakeServer::start().await;
    for (path, expected) in cases {
        let error = run(
            &fixture,
            &server,
            setup_options(
                &fixture,
                WorktreeSetup {
                    copy: vec![path.into()],
                    ..WorktreeSetup::default()
                },
            ),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, RunError::LocalFile(_)), "{error:?}");
        assert_eq!(error.to_string(), expected, "{path}");
    }
    assert!(server.requests().is_empty(), "no run starts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_prepares_a_recreated_worktree_with_the_config_the_run_started_with() {
    let fixture = repo_with_secrets();
    let base = fixture.rev("HEAD").to_string();
    let cancel = CancellationToken::new();
    let trip = cancel.clone();
    let scripted = script(&["Change a.\nWRITE a.txt ALPHA"]);
    let server = FakeServer::with_responder(move |request| {
        if who(request) == Who::Worker && !request.tool_results().is_empty() {
            // Ctrl-C once the worker's write ran.
            trip.cancel();
        }
        scripted(request)
    })
    .await;
    let mut options = setup_options(
        &fixture,
        WorktreeSetup {
            setup: Some("echo prepared >> setup.log".into()),
            copy: vec![".env".into()],
            ..WorktreeSetup::default()
        },
    );
    options.keep_worktrees = true;
    let report = grove::run::run(
        &fixture.repo,
        options,
        models(&server),
        EventSink::discard(),
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunEnd::Interrupted, "{report:#?}");

    // The worktree is lost while the run is stopped; resume makes it anew from the
    // branch and must copy and set up again, from the journaled options alone.
    let worktree = worktree_of(&fixture, &report, 1);
    std::fs::remove_dir_all(&worktree).unwrap();
    let server = FakeServer::with_responder(script(&["unused"])).await;
    let resumed = grove::run::resume(
        &fixture.repo,
        &report.run_id,
        fixture.options(),
        |_| Ok(models(&server)),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(resumed.status, RunEnd::Finished, "{resumed:#?}");
    assert_eq!(resumed.subtasks[0].status, SubtaskOutcome::Merged);
    assert_eq!(
        std::fs::read_to_string(worktree.join(".env")).unwrap(),
        format!("API_TOKEN={SECRET}\n"),
        "the re-created worktree has the local-only file"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("setup.log")).unwrap(),
        "prepared\n",
        "the setup command ran once in the re-created worktree"
    );
    let text = history(&fixture, &format!("{base}..main"));
    assert!(text.contains("ALPHA") && !text.contains(SECRET), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_the_setup_command_leaves_for_the_commit_are_named_in_a_note() {
    let fixture = repo_with_secrets();
    let server = FakeServer::with_responder(script(&["Change a.\nWRITE a.txt ALPHA"])).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = grove::run::run(
        &fixture.repo,
        setup_options(
            &fixture,
            WorktreeSetup {
                setup: Some("echo x > generated.txt; echo y > setup.log".into()),
                copy: vec![".env".into()],
                // In every worker's tree, as with git worktrees: what it makes is committed.
                per_worker: true,
                ..WorktreeSetup::default()
            },
        ),
        models(&server),
        EventSink::new(tx),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    let mut notes = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let grove::event::Event::Note { message } = event {
            notes.push(message);
        }
    }
    assert_eq!(
        notes,
        vec![
            "S1: running the setup command `echo x > generated.txt; echo y > setup.log`".to_owned(),
            "S1: the setup command changed files that will be committed with the worker's \
             work and reviewed as part of it: generated.txt; have .gitignore ignore them to \
             keep them out"
                .to_owned(),
        ],
        "ignored (setup.log) and local-only (.env) files are not named"
    );
}
