//! The real agent CLIs as workers, pinned: Claude Code 2.1.197, Codex 0.171.0, Gemini CLI
//! 0.61.0 and aider 0.86.2, each against the fake model server speaking its own protocol
//! (Anthropic Messages SSE, the OpenAI Responses API, Gemini's streamGenerateContent,
//! OpenAI chat completions). grove's lead and reviewer are played by a second fake
//! server, so the CLI's server sees the CLI's requests only and its usage is what the
//! worker's ledger must equal.
//!
//! For each CLI: an edit that is committed, reviewed and merged with the ledger equal to
//! the usage served; a transient fault (a 500 or a cut stream) the CLI recovers from;
//! and a 401 that fails the subtask with the CLI's own words as the reason, losing
//! nothing. A missing (or differently versioned) CLI skips its tests with a message;
//! with `GROVE_REQUIRE_REAL_CLIS=1` (CI) it fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A skip, and each run's time, must be visible in the test output.
#![allow(clippy::print_stderr)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use grove::agent::external::{BackendEnv, WorkerBackend};
use grove::settings::RunOptions;
use grove::store::journal::{SubtaskOutcome, VerdictKind};

use crate::suite::backends::{repo, run, server, statuses};
use crate::support::fake_server::{Endpoint, FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};

pub(crate) const KEY: &str = "sk-fake-cli-key-0123456789";
/// Text of the brief the lead delegates (`suite::backends::BRIEF`).
const BRIEF_MARK: &str = "BRIEF-MARK-7";
/// aider's answer, its banner and chatter left out.
const AIDER_SUMMARY: &str = "I will make it shout.\n\nsrc/a.txt\n```\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n>>>>>>> REPLACE\n```";

/// One pinned CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cli {
    Claude,
    Codex,
    Gemini,
    Aider,
}

/// What the CLI's server does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// The first request of the conversation fails once (a 500 or a cut stream).
    Transient,
    /// Every request is refused with a 401.
    Unauthorized,
}

impl Cli {
    fn backend(self) -> WorkerBackend {
        match self {
            Cli::Claude => WorkerBackend::Claude,
            Cli::Codex => WorkerBackend::Codex,
            Cli::Gemini => WorkerBackend::Gemini,
            Cli::Aider => WorkerBackend::Aider,
        }
    }

    fn program(self) -> &'static str {
        self.backend().name()
    }

    /// The version `.ci/run` installs, as `--version` prints it.
    fn version(self) -> &'static str {
        match self {
            Cli::Claude => "2.1.197",
            Cli::Codex => "0.171.0",
            Cli::Gemini => "0.61.0",
            Cli::Aider => "0.86.2",
        }
    }

    /// The program on PATH if it is the pinned version; otherwise a skip (or, with
    /// `GROVE_REQUIRE_REAL_CLIS=1`, a failure). Checked once per CLI: `--version` alone
    /// takes aider seconds.
    pub(crate) fn installed(self) -> Option<PathBuf> {
        static CHECKED: [OnceLock<Result<PathBuf, String>>; 4] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let checked = CHECKED[self as usize].get_or_init(|| self.find());
        match checked {
            Ok(program) => Some(program.clone()),
            Err(problem) => {
                assert!(
                    std::env::var_os("GROVE_REQUIRE_REAL_CLIS").is_none(),
                    "GROVE_REQUIRE_REAL_CLIS is set but {problem}"
                );
                eprintln!("skipped: {problem} (`.ci/run` installs it)");
                None
            }
        }
    }

    fn find(self) -> Result<PathBuf, String> {
        let found = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(self.program()))
                .find(|candidate| candidate.is_file())
        });
        let problem = match &found {
            None => format!("{} is not on PATH", self.program()),
            Some(program) => {
                let output = std::process::Command::new(program)
                    .arg("--version")
                    .output()
                    .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                    .unwrap_or_default();
                if output.contains(self.version()) {
                    return Ok(program.clone());
                }
                format!(
                    "{} is {:?}, not the pinned {}",
                    program.display(),
                    output.trim(),
                    self.version()
                )
            }
        };
        Err(problem)
    }
}

/// The worktree path Claude Code states in its system prompt (its tools want absolute
/// paths).
fn claude_cwd(request: &RecordedRequest) -> String {
    let system = request.system_text();
    system
        .split("orking directory: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// A side request the CLI makes for itself (a title, a routing decision): answered
/// with what it asks for.
pub(crate) fn side_answer(cli: Cli, request: &RecordedRequest) -> Turn {
    let schema = &request.body["generationConfig"]["responseJsonSchema"];
    let text = match cli {
        Cli::Gemini if schema.is_object() => answer_schema(schema).to_string(),
        _ => json!({"title": "Shout alpha"}).to_string(),
    };
    Turn::text(text).usage(20, 5, 0, 0)
}

/// A value that satisfies a simple JSON schema (objects, strings, integers, booleans).
fn answer_schema(schema: &Value) -> Value {
    match schema["type"]
        .as_str()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("object") => Value::Object(
            schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(key, value)| (key.clone(), answer_schema(value)))
                .collect(),
        ),
        Some("integer" | "number") => json!(10),
        Some("boolean") => json!(false),
        Some("array") => json!([]),
        _ => match schema["enum"].as_array().and_then(|values| values.first()) {
            Some(first) => first.clone(),
            None => json!("simple"),
        },
    }
}

/// The conversation's next turn: the edit, then the final answer.
fn main_turn(cli: Cli, request: &RecordedRequest) -> Turn {
    let done = request.tool_result_count();
    match cli {
        Cli::Claude => {
            let file = format!("{}/src/a.txt", claude_cwd(request));
            match done {
                0 => Turn::text("Reading the file.").tool_use(
                    "toolu_read",
                    "Read",
                    json!({ "file_path": file }),
                ),
                1 => Turn::new().tool_use(
                    "toolu_edit",
                    "Edit",
                    json!({"file_path": file, "old_string": "alpha", "new_string": "ALPHA"}),
                ),
                _ => Turn::text("CLAUDE-DONE: src/a.txt now shouts."),
            }
            .usage(300, 40, 120, 30)
        }
        Cli::Codex if done == 0 => Turn::new()
            .tool_use_raw(
                "call_patch",
                "apply_patch",
                "*** Begin Patch\n*** Update File: src/a.txt\n@@\n-alpha\n+ALPHA\n*** End Patch\n",
            )
            .usage(900, 60, 300, 0),
        Cli::Codex => Turn::text("CODEX-DONE: src/a.txt now shouts.").usage(950, 20, 400, 0),
        Cli::Gemini if done == 0 => Turn::new()
            .tool_use(
                "g1",
                "replace",
                json!({
                    "file_path": "src/a.txt", "old_string": "alpha", "new_string": "ALPHA",
                    "instruction": "Make the word shout.",
                }),
            )
            .usage(700, 30, 200, 0),
        Cli::Gemini => Turn::text("GEMINI-DONE: src/a.txt now shouts.").usage(800, 25, 300, 0),
        Cli::Aider => Turn::text(
            "I will make it shout.\n\nsrc/a.txt\n```\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n\
             >>>>>>> REPLACE\n```\n",
        )
        .usage(1000, 50, 0, 0),
    }
}

/// Whether `request` is of the CLI's conversation (not a side request of its own).
pub(crate) fn is_conversation(cli: Cli, request: &RecordedRequest) -> bool {
    match cli {
        Cli::Claude | Cli::Gemini => request.offers_tools(),
        Cli::Codex | Cli::Aider => true,
    }
}

/// The CLI's server: the conversation, side requests answered, and `fault` played.
async fn cli_server(cli: Cli, fault: Fault) -> FakeServer {
    let faulted = Arc::new(AtomicBool::new(false));
    FakeServer::for_clis(move |request| {
        if fault == Fault::Unauthorized {
            return match request.endpoint {
                Endpoint::Anthropic => {
                    Reply::error(401, "authentication_error", "invalid x-api-key")
                }
                Endpoint::Gemini => Reply::error(
                    401,
                    "UNAUTHENTICATED",
                    "API key not valid. Please pass a valid API key.",
                ),
                _ => Reply::error(
                    401,
                    "invalid_request_error",
                    "Incorrect API key provided: sk-fake…6789.",
                ),
            };
        }
        if !is_conversation(cli, request) {
            return side_answer(cli, request).into();
        }
        let turn = main_turn(cli, request);
        if fault == Fault::Transient && !faulted.swap(true, Ordering::SeqCst) {
            return match cli {
                // A stream cut mid-response: codex reconnects.
                Cli::Codex => Reply::Cut(turn),
                _ => Reply::error(500, "api_error", "Internal server error"),
            };
        }
        turn.into()
    })
    .await
}

/// The environment of a run whose worker is `cli` at `server`: the system PATH, a temp
/// HOME with the CLI's own config, its key and endpoint, retries kept short.
fn cli_env(cli: Cli, server: &FakeServer, home: &Path) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), home.display().to_string()),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
        ("LITELLM_LOCAL_MODEL_COST_MAP".into(), "True".into()),
    ];
    match cli {
        Cli::Claude => env.extend([
            ("ANTHROPIC_BASE_URL".into(), server.url()),
            ("ANTHROPIC_API_KEY".into(), KEY.into()),
            ("ANTHROPIC_MODEL".into(), "claude-sonnet-4-5".into()),
            ("CLAUDE_CODE_MAX_RETRIES".into(), "1".into()),
        ]),
        Cli::Codex => {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            // The model is the user's choice; the provider grove defines from
            // OPENAI_BASE_URL takes the user's retry settings.
            std::fs::write(
                codex_home.join("config.toml"),
                "model = \"gpt-5.5\"\n\n[model_providers.grove]\nrequest_max_retries = 1\n\
                 stream_max_retries = 1\n",
            )
            .unwrap();
            env.extend([
                ("OPENAI_BASE_URL".into(), server.openai_url()),
                ("OPENAI_API_KEY".into(), KEY.into()),
                ("CODEX_HOME".into(), codex_home.display().to_string()),
            ]);
        }
        Cli::Gemini => {
            let settings = home.join(".gemini");
            std::fs::create_dir_all(&settings).unwrap();
            // 0.61 takes GOOGLE_GEMINI_BASE_URL for its "gateway" auth, which headless
            // mode then refuses; an API key selected in settings.json works.
            std::fs::write(
                settings.join("settings.json"),
                r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
            )
            .unwrap();
            env.extend([
                ("GOOGLE_GEMINI_BASE_URL".into(), server.url()),
                ("GEMINI_API_KEY".into(), KEY.into()),
            ]);
        }
        Cli::Aider => env.extend([
            ("OPENAI_API_BASE".into(), server.openai_url()),
            ("OPENAI_API_KEY".into(), KEY.into()),
            ("AIDER_MODEL".into(), "openai/gpt-4.1".into()),
        ]),
    }
    env.into_iter()
        .map(|(name, value)| (OsString::from(name), OsString::from(value)))
        .collect()
}

/// The ledger a CLI that counts right reports for the usage `server` sent.
fn ledger_sent(server: &FakeServer) -> (u64, u64, u64, u64) {
    server.usage_sent()
}

struct Outcome {
    fixture: GitFixture,
    report: grove::run::RunReport,
    cli: FakeServer,
    base: String,
}

/// Runs grove on the fixture with `cli` as the worker against a server playing `fault`.
async fn run_cli(cli: Cli, fault: Fault) -> Option<Outcome> {
    run_cli_in(cli, fault, None, &[], 1).await
}

/// [`run_cli`] with the worktrees under `worktrees_in` (a path in the fixture's repo)
/// instead of a directory of their own, and the variables `unset` left out of the CLI's
/// environment.
async fn run_cli_in(
    cli: Cli,
    fault: Fault,
    worktrees_in: Option<&str>,
    unset: &[&str],
    attempts: u32,
) -> Option<Outcome> {
    cli.installed()?;
    let started = Instant::now();
    let fixture = repo();
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let grove = if attempts > 1 {
        judging_server().await
    } else {
        server().await
    };
    let cli_server = cli_server(cli, fault).await;
    let home = tempfile::tempdir().unwrap();
    let worktrees = tempfile::tempdir().unwrap();
    let options = RunOptions {
        jobs: 1,
        git: fixture.options(),
        worker_backend: cli.backend(),
        backend_env: Some(BackendEnv(
            cli_env(cli, &cli_server, home.path())
                .into_iter()
                .filter(|(name, _)| !unset.iter().any(|unset| name == unset))
                .collect(),
        )),
        worker_pass_env: vec![
            "DISABLE_AUTOUPDATER".into(),
            "LITELLM_LOCAL_MODEL_COST_MAP".into(),
        ],
        // Claude Code refuses every edit under a .git directory.
        worktrees_dir: Some(match worktrees_in {
            Some(path) => fixture.repo.join(path),
            None => worktrees.path().to_path_buf(),
        }),
        worker_backend_timeout_secs: 120,
        attempts,
        ..RunOptions::new("USER-TASK: make a shout")
    };
    let (report, _events) = run(&fixture, &grove, options).await;
    grove.assert_no_violations();
    cli_server.assert_no_violations();
    eprintln!(
        "{} {} ({fault:?}): {:.1}s",
        cli.program(),
        cli.version(),
        started.elapsed().as_secs_f64()
    );
    Some(Outcome {
        fixture,
        report,
        cli: cli_server,
        base,
    })
}

/// grove's own side of a run whose subtask is tried twice: `backends::server`'s lead,
/// and a judge that picks attempt A.
async fn judging_server() -> FakeServer {
    FakeServer::with_responder(|request| {
        let turn = match (who(request), request.tool_results().len()) {
            (Who::Lead, 0) => Turn::text("Delegating.").tool_use(
                "lead_call_0",
                "delegate",
                json!({ "task": crate::suite::backends::BRIEF }),
            ),
            (Who::Lead, _) => Turn::text("All done."),
            (Who::Reviewer, 0) => Turn::new().tool_use(
                "judge_call_1",
                "submit_verdict",
                json!({"verdict": "approve", "pick": "A", "summary": "A does what the brief asks.",
                       "not_picked": [{"attempt": "B", "reason": "the same edit; A is as good"}]}),
            ),
            (Who::Reviewer, _) => Turn::text("Verdict given."),
            (Who::Worker, _) => Turn::text("BUILTIN-WORKER-CALLED"),
        };
        turn.usage(50, 5, 0, 0).into()
    })
    .await
}

/// The edit is committed, reviewed and merged, with the ledger the server's usage.
async fn edit_is_merged(cli: Cli, fault: Fault, summary: &str) {
    let Some(outcome) = run_cli(cli, fault).await else {
        return;
    };
    let report = &outcome.report;
    assert_eq!(
        statuses(report),
        vec![(
            "S1".into(),
            SubtaskOutcome::Merged,
            Some(VerdictKind::Approve)
        )],
        "{cli:?} ({fault:?}): the edit is reviewed and merged: {report:#?}"
    );
    let subtask = &report.subtasks[0];
    let ledger = subtask.worker_ledger;
    assert_eq!(
        (
            ledger.input_tokens,
            ledger.output_tokens,
            ledger.cache_read_tokens,
            ledger.cache_write_tokens
        ),
        ledger_sent(&outcome.cli),
        "{cli:?} ({fault:?}): the worker's ledger is what the server sent, side requests \
         included"
    );
    assert!(ledger.steps >= 1, "{cli:?}: it took steps: {ledger:?}");
    assert!(
        outcome.cli.requests().iter().any(|request| {
            request.raw_body.contains(BRIEF_MARK) && request.raw_body.contains("House rule")
        }),
        "{cli:?}: the CLI's prompt holds the brief and the project rules"
    );
    let first_requests = outcome
        .cli
        .requests()
        .iter()
        .filter(|request| is_conversation(cli, request) && request.tool_result_count() == 0)
        .count();
    assert_eq!(
        first_requests,
        if fault == Fault::Transient { 2 } else { 1 },
        "{cli:?} ({fault:?}): the conversation's first request was sent once, or again after \
         the fault"
    );
    assert_eq!(
        subtask.reason.as_deref(),
        Some(format!("worker: {summary}").as_str()),
        "{cli:?}: the CLI's final answer is the worker's summary"
    );
    assert!(report.applied, "{cli:?}: the result reaches the branch");
    assert_eq!(outcome.fixture.read("src/a.txt"), b"ALPHA\n");
    assert_eq!(
        outcome
            .fixture
            .git(&["ls-tree", "-r", "--name-only", "HEAD"]),
        "AGENTS.md\nsrc/a.txt\nsrc/b.txt",
        "{cli:?}: nothing but the edit is committed (no CLI scratch files)"
    );
}

/// A 401 fails the subtask with the CLI's own words, and nothing is lost or merged.
async fn unauthorized_fails(cli: Cli, words: &str) {
    let Some(outcome) = run_cli(cli, Fault::Unauthorized).await else {
        return;
    };
    let subtask = &outcome.report.subtasks[0];
    let reason = subtask.reason.clone().unwrap_or_default();
    assert_eq!(
        (subtask.status, subtask.verdict),
        (SubtaskOutcome::Failed, None),
        "{cli:?}: a refused key fails the subtask: {subtask:#?}"
    );
    assert!(
        reason.contains(words) && !reason.contains('\u{1b}'),
        "{cli:?}: the reason is the CLI's own error, without escapes: {reason:?}"
    );
    assert_eq!(
        (
            outcome.fixture.read("src/a.txt"),
            outcome.fixture.git(&["rev-parse", "HEAD"]),
            outcome.fixture.git(&["status", "--porcelain"])
        ),
        (b"alpha\n".to_vec(), outcome.base.clone(), String::new()),
        "{cli:?}: the user's branch and tree are as they were"
    );
    assert!(
        outcome.cli.requests().iter().any(|request| {
            request.raw_body.contains(BRIEF_MARK) && request.raw_body.contains("House rule")
        }),
        "{cli:?}: it reached its server with the brief and the project rules"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_edit_is_reviewed_and_merged_with_its_ledger() {
    edit_is_merged(
        Cli::Claude,
        Fault::None,
        "CLAUDE-DONE: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_works_each_of_two_attempts_in_a_run_of_its_own_and_the_judge_picks() {
    let Some(outcome) = run_cli_in(Cli::Claude, Fault::None, None, &[], 2).await else {
        return;
    };
    let report = &outcome.report;
    let conversations = outcome
        .cli
        .requests()
        .iter()
        .filter(|request| is_conversation(Cli::Claude, request) && request.tool_result_count() == 0)
        .count();
    assert_eq!(
        (statuses(report), conversations),
        (
            vec![
                (
                    "S1".into(),
                    SubtaskOutcome::Merged,
                    Some(VerdictKind::Approve)
                ),
                (
                    "S2".into(),
                    SubtaskOutcome::Rejected,
                    Some(VerdictKind::Reject)
                ),
            ],
            2
        ),
        "the real Claude Code works each attempt in a run of its own (two conversations), and \
         only the judge's pick merges: {report:#?}"
    );
    assert_eq!(outcome.fixture.read("src/a.txt"), b"ALPHA\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_recovers_from_a_500() {
    edit_is_merged(
        Cli::Claude,
        Fault::Transient,
        "CLAUDE-DONE: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_401_fails_the_subtask_in_its_words() {
    unauthorized_fails(Cli::Claude, "API error 401: Invalid API key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_retrying_a_401_is_stopped_at_its_second_retry_with_the_apis_words() {
    // Claude Code's own default: ten retries of a 401, 171 s before grove heard of it.
    let started = Instant::now();
    let Some(outcome) = run_cli_in(
        Cli::Claude,
        Fault::Unauthorized,
        None,
        &["CLAUDE_CODE_MAX_RETRIES"],
        1,
    )
    .await
    else {
        return;
    };
    let subtask = &outcome.report.subtasks[0];
    let attempts = outcome
        .cli
        .requests()
        .iter()
        .filter(|request| is_conversation(Cli::Claude, request))
        .count();
    assert_eq!(
        (subtask.status, subtask.reason.as_deref(), attempts),
        (
            SubtaskOutcome::Failed,
            Some(
                "claude: the model API refused every request with 401 \
                 authentication_failed; claude would retry it 10 times, so grove stopped it \
                 after 2 attempts"
            ),
            2
        ),
        "the subtask fails as soon as claude's api_retry events show the key refused again, \
         in the API's terms: after the first request and one retry"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "stopped within a minute, not after claude's ten retries: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_refusal_to_edit_under_git_is_the_reason() {
    let Some(outcome) = run_cli_in(
        Cli::Claude,
        Fault::None,
        Some(".git/grove-worktrees"),
        &[],
        1,
    )
    .await
    else {
        return;
    };
    let subtask = &outcome.report.subtasks[0];
    let reason = subtask.reason.clone().unwrap_or_default();
    assert_eq!(
        (subtask.status, subtask.verdict),
        (SubtaskOutcome::Failed, None),
        "a refused edit fails the subtask: {subtask:#?}"
    );
    assert!(
        reason.starts_with("claude was refused by its own permission rules: Edit ")
            && reason.contains("/.git/grove-worktrees/")
            && reason.contains("src/a.txt"),
        "the reason names the refused tool and path, not \"changed no file\": {reason:?}"
    );
    assert_eq!(
        outcome.fixture.read("src/a.txt"),
        b"alpha\n",
        "nothing is merged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_edit_is_reviewed_and_merged_with_its_ledger() {
    edit_is_merged(Cli::Codex, Fault::None, "CODEX-DONE: src/a.txt now shouts.").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reconnects_after_a_cut_stream_and_its_notice_is_no_failure() {
    edit_is_merged(
        Cli::Codex,
        Fault::Transient,
        "CODEX-DONE: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_401_fails_the_subtask_in_its_words() {
    unauthorized_fails(Cli::Codex, "401 Unauthorized: Incorrect API key provided").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_edit_is_reviewed_and_merged_with_its_ledger() {
    edit_is_merged(
        Cli::Gemini,
        Fault::None,
        "GEMINI-DONE: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_recovers_from_a_500() {
    edit_is_merged(
        Cli::Gemini,
        Fault::Transient,
        "GEMINI-DONE: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_401_fails_the_subtask_in_its_words() {
    unauthorized_fails(Cli::Gemini, "401 UNAUTHENTICATED: API key not valid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aider_edit_is_reviewed_and_merged_with_its_ledger() {
    edit_is_merged(Cli::Aider, Fault::None, AIDER_SUMMARY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aider_recovers_from_a_500() {
    edit_is_merged(Cli::Aider, Fault::Transient, AIDER_SUMMARY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aider_401_fails_the_subtask_in_its_words() {
    unauthorized_fails(Cli::Aider, "litellm.AuthenticationError").await;
}
