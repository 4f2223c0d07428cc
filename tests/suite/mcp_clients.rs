//! `grove mcp` driven by the real MCP clients at their pinned versions (Claude Code
//! 2.1.197, Codex 0.171.0, Gemini CLI 0.61.0), headless, each configured as the README
//! says, with the fake model server playing the client's model and a second one grove's.
//!
//! What each client showed when it met grove: Gemini CLI adds `wait_for_previous` to
//! every tool's arguments and warns about `uint` formats; headless Codex runs only tools
//! that say they only read, unless told otherwise; Claude Code and Codex hand their model
//! `structuredContent` alone. A missing or differently versioned CLI skips (with
//! `GROVE_REQUIRE_REAL_CLIS=1`, fails), as in `suite::real_clis`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

use crate::suite::real_clis::{Cli, KEY, is_conversation, side_answer};
use crate::support::fake_server::{
    Endpoint, FakeServer, RecordedRequest, Reply, TEST_API_KEY, Turn,
};
use crate::support::git_fixture::{GitFixture, sealed_env};
use crate::support::grove::{GROVE, Grove};
use crate::support::requests::{Who, who};

/// How long one client may take for its whole session.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(240);

/// grove's own models for a run a client starts: the lead delegates one write, the
/// worker writes, the reviewer approves.
async fn grove_models() -> FakeServer {
    FakeServer::with_responder(|request| {
        let answered = !request.tool_results().is_empty();
        let turn = match who(request) {
            Who::Lead if !answered => {
                Turn::new().tool_use("d1", "delegate", json!({"task": "WRITE a.txt"}))
            }
            Who::Worker if !answered => Turn::new().tool_use(
                "w1",
                "write_file",
                json!({"path": "a.txt", "content": "written\n"}),
            ),
            Who::Reviewer if !answered => Turn::new().tool_use(
                "r1",
                "submit_verdict",
                json!({"verdict": "approve", "summary": "fine"}),
            ),
            _ => Turn::text("done"),
        };
        turn.usage(10, 2, 0, 0).into()
    })
    .await
}

/// The environment `grove mcp` gets from the client's configuration: the sealed one of
/// the tests, and grove's model API.
fn grove_env(fixture: &GitFixture, grove: &FakeServer) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = sealed_env(&fixture.home())
        .into_iter()
        .map(|(key, value)| {
            (
                key.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        })
        .collect();
    env.extend([
        ("NO_COLOR".to_owned(), "1".to_owned()),
        ("ANTHROPIC_BASE_URL".to_owned(), grove.url()),
        ("ANTHROPIC_API_KEY".to_owned(), TEST_API_KEY.to_owned()),
    ]);
    env
}

/// `grove -C REPO mcp`, as the clients' configurations name it.
fn grove_args(fixture: &GitFixture) -> Vec<String> {
    vec![
        "-C".to_owned(),
        fixture.repo.display().to_string(),
        "mcp".to_owned(),
    ]
}

/// Runs `cli` headless in the fixture, its model at `model`, with grove as
/// its MCP server configured as the README says (`extra_codex` adds to Codex's table).
async fn run_client(
    cli: Cli,
    fixture: &GitFixture,
    model: &FakeServer,
    grove: &FakeServer,
    extra_codex: &str,
) -> Output {
    let prompt = "Use grove.";
    let program = cli.installed().unwrap();
    let home = fixture.home();
    let mut command = std::process::Command::new(program);
    Grove::in_repo(fixture).seal(&mut command);
    let mut env: Vec<(&str, String)> = vec![("DISABLE_AUTOUPDATER", "1".to_owned())];
    let server_env = grove_env(fixture, grove);
    match cli {
        Cli::Claude => {
            let config = json!({"mcpServers": {"grove": {
                "command": GROVE,
                "args": grove_args(fixture),
                "env": value_pairs(&server_env).into_iter().collect::<serde_json::Map<String, Value>>(),
            }}});
            env.extend([
                ("ANTHROPIC_BASE_URL", model.url()),
                ("ANTHROPIC_API_KEY", KEY.to_owned()),
                ("ANTHROPIC_MODEL", "claude-sonnet-4-5".to_owned()),
                ("CLAUDE_CODE_MAX_RETRIES", "1".to_owned()),
            ]);
            command.args(["-p", prompt, "--output-format", "stream-json", "--verbose"]);
            command.args(["--mcp-config", &config.to_string(), "--strict-mcp-config"]);
            command.args(["--allowedTools", "mcp__grove"]);
        }
        Cli::Codex => {
            let codex_home = home.join(".codex");
            std::fs::create_dir_all(&codex_home).unwrap();
            let env_table: Vec<String> = server_env
                .iter()
                .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                .collect();
            std::fs::write(
                codex_home.join("config.toml"),
                format!(
                    "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\n\n\
                     [model_providers.fake]\nname = \"fake\"\nbase_url = {}\n\
                     env_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n\
                     request_max_retries = 1\nstream_max_retries = 1\n\n\
                     [mcp_servers.grove]\ncommand = {}\nargs = [{}]\n\
                     env = {{ {} }}\ntool_timeout_sec = 3600\n{extra_codex}",
                    toml_string(&model.openai_url()),
                    toml_string(GROVE),
                    grove_args(fixture)
                        .iter()
                        .map(|arg| toml_string(arg))
                        .collect::<Vec<_>>()
                        .join(", "),
                    env_table.join(", "),
                ),
            )
            .unwrap();
            env.extend([
                ("CODEX_HOME", codex_home.display().to_string()),
                ("OPENAI_API_KEY", KEY.to_owned()),
            ]);
            command.args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--color",
                "never",
            ]);
            command.args(["--", prompt]);
        }
        Cli::Gemini => {
            let settings = home.join(".gemini");
            std::fs::create_dir_all(&settings).unwrap();
            std::fs::write(
                settings.join("settings.json"),
                json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "mcpServers": {"grove": {
                        "command": GROVE,
                        "args": grove_args(fixture),
                        "env": value_pairs(&server_env).into_iter().collect::<serde_json::Map<String, Value>>(),
                        "timeout": 3_600_000,
                        "trust": true,
                    }},
                })
                .to_string(),
            )
            .unwrap();
            env.extend([
                ("GOOGLE_GEMINI_BASE_URL", model.url()),
                ("GEMINI_API_KEY", KEY.to_owned()),
            ]);
            command.args(["-p", prompt, "--output-format", "json", "--skip-trust"]);
        }
        Cli::Aider => unreachable!("aider is no MCP client"),
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command.stdin(std::process::Stdio::null());
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    tokio::time::timeout(CLIENT_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{cli:?} did not finish within {CLIENT_TIMEOUT:?}"))
        .unwrap()
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

fn value_pairs(pairs: &[(String, String)]) -> Vec<(String, Value)> {
    pairs
        .iter()
        .map(|(key, value)| (key.clone(), Value::from(value.clone())))
        .collect()
}

/// The client's model: side requests answered, and in its conversation each of `calls`
/// in turn (a tool name as the client's model names it, and its arguments), then "DONE".
async fn client_model(cli: Cli, calls: Vec<(&'static str, Value)>) -> FakeServer {
    FakeServer::for_clis(move |request| {
        if !is_conversation(cli, request) {
            return side_answer(cli, request).into();
        }
        let done = request.tool_result_count();
        let turn = match calls.get(done) {
            Some((name, arguments)) => {
                Turn::new().tool_use(&format!("call_{done}"), name, arguments.clone())
            }
            None => Turn::text("DONE"),
        };
        Reply::from(turn.usage(5, 1, 0, 0))
    })
    .await
}

/// What the client handed its model as the result of each tool call, in order: the text
/// of Anthropic `tool_result`s, Responses `function_call_output`s, Gemini
/// `functionResponse`s.
fn tool_outputs(request: &RecordedRequest) -> Vec<String> {
    match request.endpoint {
        Endpoint::Anthropic => request
            .tool_results()
            .into_iter()
            .map(|(_, text)| text)
            .collect(),
        Endpoint::Responses => request.body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "function_call_output")
            .map(|item| match &item["output"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect(),
        Endpoint::Gemini => request.body["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|content| content["parts"].as_array().cloned().unwrap_or_default())
            .filter_map(|part| part.get("functionResponse").map(Value::to_string))
            .collect(),
        Endpoint::OpenAi => Vec::new(),
    }
}

/// The outputs the client's model saw by the end of its conversation.
fn outputs_seen(cli: Cli, model: &FakeServer) -> Vec<String> {
    model
        .requests()
        .iter()
        .rev()
        .find(|request| is_conversation(cli, request))
        .map(tool_outputs)
        .unwrap_or_default()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One headless session of `cli` in a fresh repository: its model makes `calls`.
struct Session {
    fixture: GitFixture,
    /// The client's exit, stdout and stderr.
    output: Output,
    /// What the client handed its model as each call's result.
    outputs: Vec<String>,
}

/// Runs a session of `cli` whose model makes `calls` (`None`: the CLI is not installed,
/// the test skips); the client must end well and both servers see no violation.
async fn session(
    cli: Cli,
    calls: Vec<(&'static str, Value)>,
    extra_codex: &str,
) -> Option<Session> {
    cli.installed()?;
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let grove = grove_models().await;
    let model = client_model(cli, calls).await;
    let output = run_client(cli, &fixture, &model, &grove, extra_codex).await;
    assert!(
        output.status.success(),
        "{cli:?} ran its session\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    model.assert_no_violations();
    grove.assert_no_violations();
    let outputs = outputs_seen(cli, &model);
    Some(Session {
        fixture,
        output,
        outputs,
    })
}

/// A client starts a run with grove's `run` tool, as `call` names it; its model must get
/// the run's next steps through what the client passes on.
async fn client_runs_grove(cli: Cli, call: &'static str, extra_codex: &str) {
    let run = (call, json!({"task": "write a", "no_apply": true}));
    let Some(session) = session(cli, vec![run], extra_codex).await else {
        return;
    };
    assert_eq!(
        session.fixture.git(&["show", "HEAD:a.txt"]),
        "a",
        "{cli:?}: no_apply leaves the branch alone"
    );
    let outputs = &session.outputs;
    assert!(
        outputs.len() == 1
            && outputs[0].contains("The `review` tool approves or rejects its subtasks")
            && outputs[0].contains("To apply it: git merge --ff-only grove/"),
        "{cli:?} hands its model the run's next steps (it passes structuredContent alone): \
         {outputs:?}"
    );
    assert!(
        !outputs[0].contains("worker_ledger"),
        "{cli:?}: the per-agent ledgers stay out of the model's context: {outputs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_headless_with_the_readmes_allowed_tools_runs_grove_and_its_model_gets_the_hints()
 {
    client_runs_grove(Cli::Claude, "mcp__grove__run", "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_headless_as_the_readme_configures_it_runs_grove_and_its_model_gets_the_hints() {
    client_runs_grove(
        Cli::Codex,
        "mcp__grove/run",
        "default_tools_approval_mode = \"approve\"\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_codex_lists_and_shows_runs_unasked_as_they_only_read() {
    // No approval setting at all: codex exec runs only tools that say they only read.
    let calls = vec![
        ("mcp__grove/list_runs", json!({})),
        (
            "mcp__grove/show_run",
            json!({"run_id": "20260101-000000-0000"}),
        ),
    ];
    let Some(Session { outputs, .. }) = session(Cli::Codex, calls, "").await else {
        return;
    };
    assert!(
        outputs.len() == 2
            && outputs[0].ends_with("{\"runs\":[]}")
            && outputs[1].contains("20260101-000000-0000")
            && !outputs
                .iter()
                .any(|output| output.contains("requires approval")),
        "list_runs and show_run (readOnlyHint) run without approval: {outputs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_calls_grove_with_its_wait_for_previous_and_finds_no_format_to_warn_of() {
    // Gemini CLI's prompt tells its model to set `wait_for_previous` on every call; it
    // validates the arguments against the tool's schema, warning of formats it lacks.
    let show =
        json!({"run_id": "20260101-000000-0000", "diff_max_chars": 100, "wait_for_previous": true});
    let Some(Session {
        output, outputs, ..
    }) = session(Cli::Gemini, vec![("mcp_grove_show_run", show)], "").await
    else {
        return;
    };
    assert!(
        outputs.len() == 1
            && outputs[0].contains("no grove run 20260101-000000-0000")
            && !outputs[0].contains("unknown field"),
        "Gemini CLI's own argument is ignored: the tool runs (and finds no such run): \
         {outputs:?}"
    );
    let stderr = text(&output.stderr);
    assert!(
        !stderr.contains("uint"),
        "Gemini CLI has no schema format to warn about: {stderr}"
    );
}
