//! `grove mcp` at the protocol's edges, driven with raw JSON-RPC lines
//! (`support::mcp_stdio`): every request answered as JSON-RPC says, arguments checked as
//! the README says, signals obeyed while a client keeps stdin open, and what an MCP
//! client may not ask for without a person's trust.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::git_fixture::GitFixture;
use crate::support::grove::Grove;
use crate::support::mcp_stdio::McpServer;

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_mcp_request_is_answered_with_its_id_as_json_rpc_says() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let mut server = McpServer::start(&Grove::in_repo(&fixture)).await;
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":77,"method":"tools/call","params":[1]}"#,
            error(
                json!(77),
                -32602,
                "Invalid params: `params` must be an object, got an array",
            ),
        ),
        (
            r#"{"jsonrpc":"2.0","id":78,"method":"tools/call","params":"list_runs"}"#,
            error(
                json!(78),
                -32602,
                "Invalid params: `params` must be an object, got a string",
            ),
        ),
        (
            r#"{"jsonrpc":"2.0","id":79,"method":"tools/call"}"#,
            error(
                json!(79),
                -32602,
                "Invalid params: `tools/call` needs `params`, an object",
            ),
        ),
        (
            r#"{"jsonrpc":"2.0","id":80,"method":"tools/call","params":{"name":"list_runs","arguments":[]}}"#,
            error(
                json!(80),
                -32602,
                "Invalid params: `arguments` must be an object, got an array",
            ),
        ),
        (
            r#"{"jsonrpc":"2.0","id":81}"#,
            error(json!(81), -32600, "Invalid Request: `method` is missing"),
        ),
        (
            r#"{"id":82,"method":"tools/list"}"#,
            error(
                json!(82),
                -32600,
                "Invalid Request: `jsonrpc` must be \"2.0\"",
            ),
        ),
        (
            "not json at all",
            error(
                Value::Null,
                -32700,
                "Parse error: expected ident at line 1 column 2",
            ),
        ),
    ];
    for (line, expected) in cases {
        assert_eq!(
            server.answer_to(line).await,
            expected,
            "every request gets an answer carrying its id, with JSON-RPC's code: {line}"
        );
    }
    // The server is still in service afterwards.
    let listed = server.call_tool("list_runs", json!({})).await;
    assert_eq!(listed["result"]["structuredContent"], json!({"runs": []}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_grove_mcp_exits_on_sigterm_or_sigint_while_its_client_keeps_stdin_open() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    for signal in [nix::sys::signal::SIGTERM, nix::sys::signal::SIGINT] {
        let mut server = McpServer::start(&Grove::in_repo(&fixture)).await;
        // Answered: the handshake is over and the server is idle.
        server.request("tools/list", json!({})).await;
        let sent = Instant::now();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(server.pid()), signal).unwrap();
        let status = server.wait(Duration::from_secs(10)).await;
        assert_eq!(
            status.map(|status| status.code()),
            Some(Some(0)),
            "{signal}: grove mcp stops at once, stdin open or not (it took {:?}); its log:\n{}",
            sent.elapsed(),
            server.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_typed_mcp_arguments_are_invalid_params_and_unknown_ones_are_ignored_and_logged() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let mut server = McpServer::start(&Grove::in_repo(&fixture)).await;
    let wrong = server
        .call_tool("show_run", json!({"run_id": 5, "diff": true}))
        .await;
    assert_eq!(
        wrong["error"],
        json!({
            "code": -32602,
            "message": "invalid arguments for `show_run`: invalid type: integer `5`, expected a string",
        }),
        "a wrong type is JSON-RPC invalid params, as the README says, not an isError result: {wrong}"
    );
    // Gemini CLI adds `wait_for_previous` to every tool it offers its model.
    let listed = server
        .call_tool(
            "list_runs",
            json!({"wait_for_previous": true, "verbose": true}),
        )
        .await;
    let note =
        |name: &str| format!("`list_runs` ignored the argument `{name}`, which it does not take");
    assert_eq!(
        listed["result"]["structuredContent"],
        json!({"runs": [], "hints": [note("verbose")]}),
        "unknown arguments are ignored; the caller is told of any but a client's own: {listed}"
    );
    let logged: Vec<String> = ["wait_for_previous", "verbose"]
        .iter()
        .map(|name| format!("grove: {}", note(name)))
        .collect();
    let log = server.log_with(&logged).await;
    assert!(
        logged.iter().all(|line| log.contains(line.as_str())),
        "and each is logged: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_marks_the_read_only_tools_and_has_no_unsigned_formats() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let mut server = McpServer::start(&Grove::in_repo(&fixture)).await;
    let listed = server.request("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let annotations: Vec<(&str, &Value)> = tools
        .iter()
        .map(|tool| (tool["name"].as_str().unwrap(), &tool["annotations"]))
        .collect();
    let read_only = json!({"readOnlyHint": true});
    assert_eq!(
        annotations,
        vec![
            ("list_runs", &read_only),
            ("resume", &Value::Null),
            ("review", &Value::Null),
            ("run", &Value::Null),
            ("show_run", &read_only),
        ],
        "list_runs and show_run say they only read (headless Codex runs only such tools \
         unasked)"
    );
    let schemas = serde_json::to_string(&listed).unwrap();
    assert!(
        !schemas.contains("\"format\":\"uint"),
        "no schema carries a uint32/uint64 format, which Gemini CLI warns about: {schemas}"
    );
}

/// The `cmd:` backend a prompt-injected client would ask for: it edits the user's file.
const INJECTED: &str = "cmd:sed -i s/alpha/ALPHA/ src/a.txt";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_run_that_escalates_is_refused_before_anything_runs_until_a_person_trusts_it() {
    let fixture = crate::suite::backends::repo();
    let model = crate::suite::backends::server().await;
    let grove = Grove::in_repo(&fixture).with_server(&model);
    let mut server = McpServer::start(&grove).await;
    let root = std::fs::canonicalize(&fixture.repo).unwrap();
    let refusal = |argument: &str, consequence: &str, command: &str| {
        format!(
            "the MCP client asked for `{argument}`, which {consequence}; a person has not \
             trusted that in this repository (a client can be steered by text it read). If \
             you asked for it, run in {}: grove trust --mcp {command}",
            root.display()
        )
    };
    let cases = [
        (
            json!({"task": "make it shout", "worker_backend": INJECTED}),
            refusal(
                &format!("worker_backend={INJECTED}"),
                "runs that command as every worker, with your rights",
                &format!("'worker_backend={INJECTED}'"),
            ),
        ),
        (
            json!({"task": "make it shout", "sandbox": "off"}),
            refusal(
                "sandbox=off",
                "runs every worker's commands with your full rights",
                "'sandbox=off'",
            ),
        ),
        (
            json!({"task": "make it shout", "allow_network": true}),
            refusal(
                "allow_network=true",
                "lets every worker's commands reach the network",
                "'allow_network=true'",
            ),
        ),
    ];
    for (arguments, expected) in &cases {
        let answer = server.call_tool("run", arguments.clone()).await;
        assert_eq!(
            answer["result"],
            json!({"content": [{"type": "text", "text": expected}], "isError": true}),
            "refused, naming the command that trusts it: {arguments}"
        );
    }
    assert_eq!(
        (
            model.requests().len(),
            fixture.repo.join(".git/grove/runs").exists(),
            fixture.read("src/a.txt")
        ),
        (0, false, b"alpha\n".to_vec()),
        "nothing ran: no model call, no run, the file untouched"
    );

    let trusted = grove
        .grove_async(["trust", "--mcp", &format!("worker_backend={INJECTED}")])
        .await;
    assert_eq!(trusted.status.code(), Some(0), "{trusted:?}");
    let other = server
        .call_tool(
            "run",
            json!({"task": "make it shout", "worker_backend": "cmd:true"}),
        )
        .await;
    assert_eq!(
        other["result"]["isError"], true,
        "trust is for that exact value: {other}"
    );
    let ran = server
        .call_tool(
            "run",
            json!({"task": "make it shout", "worker_backend": INJECTED}),
        )
        .await;
    assert_eq!(
        (
            &ran["result"]["isError"],
            &ran["result"]["structuredContent"]["status"],
            fixture.read("src/a.txt")
        ),
        (&json!(false), &json!("finished"), b"ALPHA\n".to_vec()),
        "once trusted, the same call runs: {ran}"
    );
}
