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
