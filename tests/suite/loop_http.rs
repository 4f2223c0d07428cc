//! The agent loop over real HTTP with the real tools: `run_agent` drives a real model
//! client against the fake model server, in a temp dir, for both providers in both
//! streaming and non-streaming mode.
//!
//! The unit-level loop tests (tests/suite/agent.rs) use an in-process scripted model;
//! these tests prove that the loop, the clients' wire formats and the built-in tools
//! fit together: ids round-trip, results come back in call order, errors reach the
//! model as `is_error` results and the files on disk change exactly as the model asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use grove::agent::{AgentOutcome, AgentRun, AgentSpec, Ledger, LoopInput, StopKind, run_agent};
use grove::event::{AgentId, AgentLabel, EventSink};
use grove::model::{ContentBlock, Message, Model, Provider};
use grove::status::SubtaskId;
use grove::tools::{Registry, ToolContext, ToolSet, builtin};
use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};

/// A deadlock guard, not a timing assertion: only a hung loop ever gets near it.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Every client configuration the loop must work through.
const CASES: [(Provider, bool); 4] = [
    (Provider::Anthropic, true),
    (Provider::Anthropic, false),
    (Provider::OpenAi, true),
    (Provider::OpenAi, false),
];

const LIB_RS: &str = "pub fn greet() -> &'static str {\n    \"hello\"\n}\n";
const EDITED_LIB_RS: &str = "pub fn greet() -> &'static str {\n    \"hello, grove\"\n}\n";
const NOTES: &str = "TODO: make greet say hello to grove\n";

/// Names one case in assertion messages.
fn case_name(provider: Provider, stream: bool) -> String {
    let mode = if stream { "streaming" } else { "non-streaming" };
    format!("{provider} {mode}")
}

/// A temp dir holding a tiny crate-like tree; `root` is canonical, as tools require.
struct Sandbox {
    _dir: TempDir,
    root: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), LIB_RS).unwrap();
        std::fs::write(root.join("NOTES.md"), NOTES).unwrap();
        Self { _dir: dir, root }
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.root.join(relative)).unwrap()
    }

    fn exists(&self, relative: &str) -> bool {
        self.root.join(relative).exists()
    }
}

fn spec(model: Arc<dyn Model>, tools: Registry, max_consecutive_tool_errors: u32) -> AgentSpec {
    AgentSpec {
        id: AgentId {
            role: "worker".to_owned(),
            label: AgentLabel::Subtask(SubtaskId(1)),
        },
        system: "You are a worker. Use the tools.".to_owned(),
        model,
        model_name: "fake-model".to_owned(),
        max_tokens: 1024,
        max_turns: 10,
        budget_tokens: None,
        budget_usd: None,
        max_consecutive_tool_errors,
        tools,
        cache: Default::default(),
    }
}

fn input(root: &Path) -> LoopInput {
    LoopInput {
        messages: vec![Message::user_text("Make greet() say hello to grove.")],
        tool_context: ToolContext::plain(root.to_path_buf(), CancellationToken::new()),
        events: EventSink::discard(),
        observer: None,
    }
}

/// Runs one loop to its end against `server`.
async fn run(
    server: &FakeServer,
    provider: Provider,
    stream: bool,
    tools: Registry,
    max_consecutive_tool_errors: u32,
    root: &Path,
) -> AgentRun {
    let spec = spec(
        server.model(provider, stream),
        tools,
        max_consecutive_tool_errors,
    );
    tokio::time::timeout(HANG_GUARD, run_agent(&spec, input(root)))
        .await
        .expect("the loop hung")
}

/// The outcome of a loop that must not have failed.
fn outcome(run: &AgentRun, case: &str) -> AgentOutcome {
    match &run.result {
        Ok(outcome) => outcome.clone(),
        Err(error) => panic!("{case}: the loop failed: {error}"),
    }
}

/// Every tool result of the transcript as `(tool_use_id, content, is_error)`, in order.
fn transcript_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .flat_map(|message| &message.content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// The tool results of the wire request, ids only.
fn result_ids(request: &RecordedRequest) -> Vec<String> {
    request
        .tool_results()
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// Checks, on the wire, that every request after the first answers every tool call of
/// its history with a result of the same id, in call order, and that request `k + 1`
/// answers exactly the calls turn `k` made.
fn assert_calls_answered_in_order(
    requests: &[RecordedRequest],
    calls_per_turn: &[Vec<&str>],
    case: &str,
) {
    for (index, request) in requests.iter().enumerate() {
        let call_ids: Vec<String> = request.tool_calls().into_iter().map(|(id, _)| id).collect();
        assert_eq!(
            result_ids(request),
            call_ids,
            "{case}: request {index} must answer every tool call of its history, same ids, \
             in call order"
        );
        let expected: Vec<String> = calls_per_turn[..index]
            .iter()
            .flatten()
            .map(|id| (*id).to_owned())
            .collect();
        assert_eq!(
            call_ids, expected,
            "{case}: request {index} must echo exactly the tool calls of the turns before it"
        );
    }
}

#[tokio::test]
async fn read_edit_bash_finish_over_http_with_real_tools() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let sandbox = Sandbox::new();
        let server = FakeServer::with_script(vec![
            Turn::text("Let me look around.")
                .tool_use("read_1", "read_file", json!({"path": "src/lib.rs"}))
                .tool_use("grep_1", "grep", json!({"pattern": "TODO"}))
                .usage(100, 20, 0, 50)
                .into(),
            Turn::new()
                .tool_use(
                    "edit_1",
                    "edit_file",
                    json!({
                        "path": "src/lib.rs",
                        "old_string": "\"hello\"",
                        "new_string": "\"hello, grove\"",
                    }),
                )
                .usage(30, 40, 150, 0)
                .into(),
            Turn::text("Checking the result.")
                .tool_use("bash_1", "bash", json!({"command": "cat src/lib.rs"}))
                .usage(20, 10, 200, 0)
                .into(),
            Turn::text("greet() now says hello to grove.")
                .usage(10, 8, 250, 0)
                .into(),
        ])
        .await;

        let run = run(
            &server,
            provider,
            stream,
            builtin(ToolSet::Worker),
            5,
            &sandbox.root,
        )
        .await;

        server.assert_no_violations();
        assert_eq!(
            outcome(&run, &case),
            AgentOutcome {
                stop: StopKind::Finished,
                final_text: "greet() now says hello to grove.".to_owned(),
                detail: "the model ended its turn 4".to_owned(),
            },
            "{case}: the loop finishes with the final turn's text"
        );
        assert_eq!(
            sandbox.read("src/lib.rs"),
            EDITED_LIB_RS,
            "{case}: the file on disk changed exactly as edited"
        );
        assert_eq!(
            sandbox.read("NOTES.md"),
            NOTES,
            "{case}: untouched files stay untouched"
        );
        // OpenAI's usage has no cache-write counter: those tokens arrive as prompt tokens.
        let expected_ledger = match provider {
            Provider::Anthropic => Ledger {
                steps: 4,
                input_tokens: 160,
                output_tokens: 78,
                cache_read_tokens: 600,
                cache_write_tokens: 50,
            },
            Provider::OpenAi => Ledger {
                steps: 4,
                input_tokens: 210,
                output_tokens: 78,
                cache_read_tokens: 600,
                cache_write_tokens: 0,
            },
        };
        assert_eq!(
            run.ledger, expected_ledger,
            "{case}: the ledger sums the scripted usage of all four turns"
        );

        let requests = server.requests();
        assert_eq!(requests.len(), 4, "{case}: one request per model turn");
        assert!(
            requests.iter().all(|request| request.stream() == stream),
            "{case}: every request uses the configured mode"
        );
        assert_calls_answered_in_order(
            &requests,
            &[vec!["read_1", "grep_1"], vec!["edit_1"], vec!["bash_1"]],
            &case,
        );
        if provider == Provider::OpenAi {
            // Interop with llama-cpp-python's server, which ignores tools without an
            // explicit tool_choice and refuses a null or missing assistant content.
            assert!(
                requests
                    .iter()
                    .all(|request| request.body["tool_choice"] == "auto"),
                "{case}: every request offering tools says tool_choice \"auto\""
            );
            let edit_turn = &requests[2].messages()[5];
            assert_eq!(
                (&edit_turn["role"], &edit_turn["content"]),
                (&json!("assistant"), &json!("")),
                "{case}: a turn of only tool calls is echoed with an empty string content"
            );
        }

        let results = transcript_results(&run.messages);
        let summary: Vec<(&str, bool)> = results
            .iter()
            .map(|(id, _, is_error)| (id.as_str(), *is_error))
            .collect();
        assert_eq!(
            summary,
            [
                ("read_1", false),
                ("grep_1", false),
                ("edit_1", false),
                ("bash_1", false)
            ],
            "{case}: every call succeeded, results in call order"
        );
        assert!(
            results[0].1.contains("\"hello\""),
            "{case}: read_file shows the file before the edit: {:?}",
            results[0].1
        );
        assert!(
            results[1].1.contains("NOTES.md") && results[1].1.contains("TODO"),
            "{case}: grep finds the TODO line: {:?}",
            results[1].1
        );
        assert!(
            results[3].1.contains("\"hello, grove\""),
            "{case}: bash's `cat` shows the edited file: {:?}",
            results[3].1
        );
        let last_request_results = requests[3].tool_results();
        assert!(
            last_request_results[3].1.contains("\"hello, grove\""),
            "{case}: the bash result on the wire carries the edited text: {:?}",
            last_request_results[3].1
        );
    }
}

#[tokio::test]
async fn a_tool_outside_the_read_only_registry_is_refused_and_nothing_is_written() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let sandbox = Sandbox::new();
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use(
                    "write_1",
                    "write_file",
                    json!({"path": "pwned.txt", "content": "reviewers do not write"}),
                )
                .into(),
            Turn::text("I cannot write files here.").into(),
        ])
        .await;

        let run = run(
            &server,
            provider,
            stream,
            builtin(ToolSet::ReadOnly),
            5,
            &sandbox.root,
        )
        .await;

        server.assert_no_violations();
        assert_eq!(
            outcome(&run, &case).stop,
            StopKind::Finished,
            "{case}: a refused tool call is the model's problem, not the loop's"
        );
        assert!(
            !sandbox.exists("pwned.txt"),
            "{case}: a read-only agent must not create files"
        );
        let results = transcript_results(&run.messages);
        assert_eq!(results.len(), 1, "{case}: one call, one result");
        let (id, content, is_error) = &results[0];
        assert_eq!(id, "write_1", "{case}: the result answers the call");
        assert!(*is_error, "{case}: the refusal is an error result");
        assert!(
            content.contains("write_file") && content.contains("grep, list_files, read_file"),
            "{case}: the refusal names the tool and the available tools: {content:?}"
        );
        let requests = server.requests();
        assert_eq!(
            requests[0].tool_names(),
            ["grep", "list_files", "read_file"],
            "{case}: the read-only role is only offered read-only tools"
        );
        assert_calls_answered_in_order(&requests, &[vec!["write_1"]], &case);
    }
}

/// Runs a worker whose first turn is `first` (calls with malformed arguments) and whose
/// second writes `out.txt` with well-formed ones, against a server that refuses (and
/// records as a violation) a history that would not validate; checks that the loop went
/// on and only the well-formed call wrote.
async fn malformed_then_fixed(
    provider: Provider,
    stream: bool,
    first: Turn,
) -> (AgentRun, FakeServer) {
    let case = case_name(provider, stream);
    let sandbox = Sandbox::new();
    let server = FakeServer::with_script(vec![
        first.into(),
        Turn::new()
            .tool_use(
                "good_1",
                "write_file",
                json!({"path": "out.txt", "content": "fixed\n"}),
            )
            .into(),
        Turn::text("Written on the second try.").into(),
    ])
    .await;
    let run = run(
        &server,
        provider,
        stream,
        builtin(ToolSet::Worker),
        5,
        &sandbox.root,
    )
    .await;
    server.assert_no_violations();
    assert_eq!(
        outcome(&run, &case).stop,
        StopKind::Finished,
        "{case}: the loop recovers from malformed arguments"
    );
    assert_eq!(
        sandbox.read("out.txt"),
        "fixed\n",
        "{case}: only the well-formed call wrote the file"
    );
    (run, server)
}

#[tokio::test]
async fn malformed_tool_arguments_get_an_error_result_and_the_loop_goes_on() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let first = Turn::new().tool_use_raw(
            "bad_1",
            "write_file",
            "{\"path\": \"out.txt\", \"content\": \"unterminated",
        );
        let (run, server) = malformed_then_fixed(provider, stream, first).await;
        let results = transcript_results(&run.messages);
        let summary: Vec<(&str, bool)> = results
            .iter()
            .map(|(id, _, is_error)| (id.as_str(), *is_error))
            .collect();
        assert_eq!(
            summary,
            [("bad_1", true), ("good_1", false)],
            "{case}: the malformed call is answered as an error, the next call runs"
        );
        assert!(
            results[0].1.contains("JSON object") && results[0].1.contains("unterminated"),
            "{case}: the error says what was wrong and quotes the raw arguments: {:?}",
            results[0].1
        );
        assert_calls_answered_in_order(&server.requests(), &[vec!["bad_1"], vec!["good_1"]], &case);
    }
}

#[tokio::test]
async fn tool_arguments_that_are_not_a_json_object_go_back_as_a_record_a_strict_server_accepts() {
    // What the model sent: text that is not JSON, a JSON array, a JSON string.
    let sent = [
        (
            "bad_1",
            "{\"path\": \"out.txt\", \"content\": \"unterminated",
        ),
        ("bad_2", "[\"out.txt\", \"x\"]"),
        ("bad_3", "\"out.txt\""),
    ];
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let first = sent.iter().fold(Turn::new(), |turn, (id, arguments)| {
            turn.tool_use_raw(id, "write_file", arguments)
        });
        // Before, a strict server answered the second request with a 400.
        let (run, server) = malformed_then_fixed(provider, stream, first).await;
        let records: Vec<(String, serde_json::Value)> = sent
            .iter()
            .map(|(id, arguments)| ((*id).to_owned(), json!({ "unparsed_arguments": arguments })))
            .chain([(
                "good_1".to_owned(),
                json!({"path": "out.txt", "content": "fixed\n"}),
            )])
            .collect();
        assert_eq!(
            server.requests()[2].tool_call_inputs(),
            records,
            "{case}: each call whose arguments were not a JSON object goes back as a JSON \
             object recording the model's exact text; a well-formed call goes back as it came"
        );
        let results = transcript_results(&run.messages);
        for ((id, arguments), (result_id, content, is_error)) in sent.iter().zip(&results) {
            assert!(
                result_id == id && *is_error && content.contains(arguments),
                "{case}: the model is told its call {id} failed, quoting what it sent: {content:?}"
            );
        }
    }
}

#[tokio::test]
async fn five_failing_calls_in_a_row_stop_the_loop_with_tool_errors() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let sandbox = Sandbox::new();
        // Five different ways to fail, across two turns: the streak spans turns. A third
        // request would find the script empty and be recorded as a violation.
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use("e1", "delete_everything", json!({}))
                .tool_use_raw("e2", "read_file", "{path: src/lib.rs}")
                .tool_use("e3", "read_file", json!({"path": "missing.rs"}))
                .into(),
            Turn::new()
                .tool_use(
                    "e4",
                    "edit_file",
                    json!({"path": "src/lib.rs", "old_string": "absent", "new_string": "x"}),
                )
                .tool_use("e5", "bash", json!({"command": "exit 3"}))
                .into(),
        ])
        .await;

        let run = run(
            &server,
            provider,
            stream,
            builtin(ToolSet::Worker),
            5,
            &sandbox.root,
        )
        .await;

        server.assert_no_violations();
        let outcome = outcome(&run, &case);
        assert_eq!(
            outcome.stop,
            StopKind::ToolErrors,
            "{case}: five errors in a row stop the loop"
        );
        assert!(
            outcome
                .detail
                .starts_with("5 tool calls in a row failed; last: `bash`"),
            "{case}: the detail counts the streak and quotes the last failure: {:?}",
            outcome.detail
        );
        assert_eq!(
            server.requests().len(),
            2,
            "{case}: no model turn after the streak"
        );
        let results = transcript_results(&run.messages);
        let errors: Vec<(&str, bool)> = results
            .iter()
            .map(|(id, _, is_error)| (id.as_str(), *is_error))
            .collect();
        assert_eq!(
            errors,
            [
                ("e1", true),
                ("e2", true),
                ("e3", true),
                ("e4", true),
                ("e5", false)
            ],
            "{case}: four calls were answered as errors, in call order; the command that ran \
             and exited 3 is its output and status, not a failed call (it still counts in \
             the streak)"
        );
        assert_eq!(
            results.last().map(|(_, content, _)| content.as_str()),
            Some("(no output)\n[exit code: 3]\n"),
            "{case}: the model reads the command's exit status"
        );
        assert_eq!(
            sandbox.read("src/lib.rs"),
            LIB_RS,
            "{case}: failed calls change nothing"
        );
        assert_eq!(run.ledger.steps, 2, "{case}: two model turns were taken");
    }
}

#[tokio::test]
async fn a_rejected_request_fails_the_loop_and_keeps_the_ledger() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let sandbox = Sandbox::new();
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use("read_1", "read_file", json!({"path": "src/lib.rs"}))
                .usage(7, 3, 0, 0)
                .into(),
            Reply::error(400, "invalid_request_error", "prompt is too long"),
        ])
        .await;

        let run = run(
            &server,
            provider,
            stream,
            builtin(ToolSet::Worker),
            5,
            &sandbox.root,
        )
        .await;

        let error = run.result.as_ref().expect_err("a 400 ends the loop");
        assert!(
            error.to_string().contains("prompt is too long"),
            "{case}: the loop's error carries the API's message: {error}"
        );
        assert_eq!(
            run.ledger,
            Ledger {
                steps: 1,
                input_tokens: 7,
                output_tokens: 3,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            },
            "{case}: a failed loop keeps what it cost"
        );
        assert_eq!(server.requests().len(), 2, "{case}: a 400 is not retried");
    }
}

#[tokio::test]
async fn absurd_usage_saturates_the_ledger_and_flags_it_instead_of_wrapping() {
    for (provider, stream) in CASES {
        let case = case_name(provider, stream);
        let sandbox = Sandbox::new();
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use("read_1", "read_file", json!({"path": "src/lib.rs"}))
                .usage(u64::MAX, 3, 0, 0)
                .into(),
            Turn::text("done").usage(u64::MAX, 4, 0, 0).into(),
        ])
        .await;

        let run = run(
            &server,
            provider,
            stream,
            builtin(ToolSet::Worker),
            5,
            &sandbox.root,
        )
        .await;

        outcome(&run, &case);
        assert_eq!(
            (run.ledger, run.ledger.is_saturated()),
            (
                Ledger {
                    steps: 2,
                    input_tokens: u64::MAX,
                    output_tokens: 7,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                },
                true
            ),
            "{case}: two turns of u64::MAX input stop at u64::MAX and are flagged"
        );
        assert_eq!(run.ledger.total_tokens(), u64::MAX, "{case}: no wrap");
    }
}
