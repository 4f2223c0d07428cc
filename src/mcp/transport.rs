//! `grove mcp`'s stdio: JSON-RPC messages in, one a line, on stdin; answers and
//! notifications out on stdout.
//!
//! This file owns the lines and what happens to a line the server cannot take: every
//! request gets an answer, as JSON-RPC 2.0 says, with the request's id whenever the line
//! has one — a parse error (-32700) for text that is not JSON, an invalid request
//! (-32600) for JSON that is not a request, invalid params (-32602) for params that are
//! not an object or a `tools/call` without a tool name — and a notification never gets
//! one. It must never hold the process up: stdin is read on a thread of its own that
//! nothing waits for, so a server asked to stop (a signal) exits while the client keeps
//! stdin open, and the end of stdin cancels `on_eof` at once.

use std::io::{BufRead as _, Read as _, Write as _};

use rmcp::RoleServer;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// The longest message read; a longer line is answered as an invalid request, unread.
const MAX_LINE_BYTES: u64 = 32 * 1024 * 1024;
/// JSON-RPC 2.0's error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
/// Methods whose params are required (rmcp would take them without as an unknown
/// method and answer "method not found").
const PARAMS_REQUIRED: [&str; 2] = ["initialize", "tools/call"];

/// Why the transport could not write.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot write to stdout: {0}")]
    Write(#[source] std::io::Error),
    #[error("cannot encode a message: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("stdout is closed")]
    Closed,
}

/// One line of stdin.
enum Line {
    Text(Vec<u8>),
    /// Longer than [`MAX_LINE_BYTES`]; skipped.
    Oversized,
}

/// A line for stdout, and who waits for it to be written.
struct Outgoing {
    line: Vec<u8>,
    written: Option<oneshot::Sender<std::io::Result<()>>>,
}

/// What a line of stdin is to the server.
#[derive(Debug)]
enum Incoming {
    /// A message for the server.
    Message(Box<ClientJsonRpcMessage>),
    /// An error response to send back instead.
    Answer(Value),
    /// Nothing to do: a malformed notification or response gets no answer.
    Ignore,
}

/// The server's side of stdio.
pub struct Stdio {
    lines: mpsc::Receiver<Line>,
    out: std::sync::mpsc::Sender<Outgoing>,
    on_eof: CancellationToken,
}

/// Starts reading stdin and writing stdout; `on_eof` is cancelled when stdin ends.
pub fn stdio(on_eof: CancellationToken) -> Stdio {
    let (line_tx, lines) = mpsc::channel(64);
    // Detached: a read that never returns must not keep the process alive.
    std::thread::spawn(move || read_stdin(&line_tx));
    let (out, out_rx) = std::sync::mpsc::channel::<Outgoing>();
    std::thread::spawn(move || write_stdout(&out_rx));
    Stdio { lines, out, on_eof }
}

fn read_stdin(lines: &mpsc::Sender<Line>) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    loop {
        let mut line = Vec::new();
        match (&mut reader)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let item = if line.len() as u64 > MAX_LINE_BYTES && line.last() != Some(&b'\n') {
            // The rest of the line is skipped up to its newline.
            let mut rest = Vec::new();
            while !matches!(
                (&mut reader)
                    .take(MAX_LINE_BYTES)
                    .read_until(b'\n', &mut rest),
                Ok(0) | Err(_)
            ) && rest.last() != Some(&b'\n')
            {
                rest.clear();
            }
            Line::Oversized
        } else {
            Line::Text(line)
        };
        if lines.blocking_send(item).is_err() {
            return;
        }
    }
}

fn write_stdout(out: &std::sync::mpsc::Receiver<Outgoing>) {
    let stdout = std::io::stdout();
    while let Ok(Outgoing { line, written }) = out.recv() {
        let mut handle = stdout.lock();
        let result = handle.write_all(&line).and_then(|()| handle.flush());
        if let Some(written) = written {
            let _ = written.send(result);
        }
    }
}

impl Stdio {
    fn answer(&self, response: &Value) {
        let mut line = response.to_string().into_bytes();
        line.push(b'\n');
        // A closed stdout ends the server through `send` soon enough.
        let _ = self.out.send(Outgoing {
            line,
            written: None,
        });
    }
}

impl Transport<RoleServer> for Stdio {
    type Error = TransportError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let queued = serde_json::to_vec(&item)
            .map_err(TransportError::Encode)
            .and_then(|mut line| {
                line.push(b'\n');
                let (written, done) = oneshot::channel();
                self.out
                    .send(Outgoing {
                        line,
                        written: Some(written),
                    })
                    .map(|()| done)
                    .map_err(|_| TransportError::Closed)
            });
        async move {
            match queued?.await {
                Ok(result) => result.map_err(TransportError::Write),
                Err(_) => Err(TransportError::Closed),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let Some(line) = self.lines.recv().await else {
                self.on_eof.cancel();
                return None;
            };
            let incoming = match line {
                Line::Text(text) => classify(&text),
                Line::Oversized => Incoming::Answer(error_response(
                    &Value::Null,
                    INVALID_REQUEST,
                    format!("Invalid Request: the message is over {MAX_LINE_BYTES} bytes"),
                )),
            };
            match incoming {
                Incoming::Message(message) => return Some(*message),
                Incoming::Answer(response) => self.answer(&response),
                Incoming::Ignore => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.lines.close();
        Ok(())
    }
}

/// What `line` is to the server; blank lines are ignored.
fn classify(line: &[u8]) -> Incoming {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.trim_ascii().is_empty() {
        return Incoming::Ignore;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(error) => {
            return Incoming::Answer(error_response(
                &Value::Null,
                PARSE_ERROR,
                format!("Parse error: {error}"),
            ));
        }
    };
    let Value::Object(message) = &value else {
        return Incoming::Answer(error_response(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message is a JSON object (batches are not supported)".into(),
        ));
    };
    let id = message.get("id");
    let is_response = message.contains_key("result") || message.contains_key("error");
    let refuse = |code: i64, problem: String| match id {
        // A malformed notification or response is never answered.
        None => Incoming::Ignore,
        Some(id) => Incoming::Answer(error_response(id, code, problem)),
    };
    if let Some(problem) = request_problem(message, is_response) {
        return match problem {
            Problem::Request(problem) => {
                refuse(INVALID_REQUEST, format!("Invalid Request: {problem}"))
            }
            Problem::Params(problem) => {
                refuse(INVALID_PARAMS, format!("Invalid params: {problem}"))
            }
        };
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(message) => Incoming::Message(Box::new(message)),
        Err(_) if is_response => Incoming::Ignore,
        Err(error) => refuse(INVALID_PARAMS, format!("Invalid params: {error}")),
    }
}

/// What is wrong with a message, as JSON-RPC names it.
enum Problem {
    Request(String),
    Params(String),
}

fn request_problem(message: &serde_json::Map<String, Value>, is_response: bool) -> Option<Problem> {
    let request = |problem: &str| Some(Problem::Request(problem.to_owned()));
    if message.get("jsonrpc") != Some(&Value::from("2.0")) {
        return request("`jsonrpc` must be \"2.0\"");
    }
    match message.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(number)) if number.is_i64() => {}
        Some(_) => return request("`id` must be a string or an integer"),
    }
    if is_response {
        return None;
    }
    let Some(method) = message.get("method") else {
        return request("`method` is missing");
    };
    let Some(method) = method.as_str() else {
        return request("`method` must be a string");
    };
    match message.get("params") {
        None if PARAMS_REQUIRED.contains(&method) => Some(Problem::Params(format!(
            "`{method}` needs `params`, an object"
        ))),
        None | Some(Value::Object(_)) => tool_call_problem(method, message.get("params")),
        Some(other) => Some(Problem::Params(format!(
            "`params` must be an object, got {}",
            kind(other)
        ))),
    }
}

/// A `tools/call` must name its tool, and its `arguments`, if any, are an object.
fn tool_call_problem(method: &str, params: Option<&Value>) -> Option<Problem> {
    let params = params.filter(|_| method == "tools/call")?;
    if !params.get("name").is_some_and(Value::is_string) {
        return Some(Problem::Params(
            "`tools/call` needs `name`, the tool's name (a string)".to_owned(),
        ));
    }
    match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => None,
        Some(other) => Some(Problem::Params(format!(
            "`arguments` must be an object, got {}",
            kind(other)
        ))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn error_response(id: &Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match classify(line.as_bytes()) {
            Incoming::Answer(response) => response,
            other => panic!("{line} must be answered, got {other:?}"),
        }
    }

    #[test]
    fn every_malformed_request_is_answered_with_its_id_and_the_codes_json_rpc_names() {
        let error = |id: Value, code: i64, message: &str| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        assert_eq!(
            [
                r#"{"jsonrpc":"2.0","id":77,"method":"tools/call","params":[1]}"#,
                r#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":5}"#,
                r#"{"jsonrpc":"2.0","id":81,"method":"tools/call"}"#,
                r#"{"jsonrpc":"2.0","id":82,"method":"tools/call","params":{"arguments":{}}}"#,
                r#"{"jsonrpc":"2.0","id":83,"method":"tools/call","params":{"name":"list_runs","arguments":[]}}"#,
                r#"{"jsonrpc":"2.0","id":86}"#,
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                r#"{"id":87,"method":"ping"}"#,
                r#"[{"jsonrpc":"2.0","id":88,"method":"ping"}]"#,
                "garbage",
            ]
            .map(answer),
            [
                error(json!(77), -32602, "Invalid params: `params` must be an object, got an array"),
                error(json!("a"), -32602, "Invalid params: `params` must be an object, got a number"),
                error(json!(81), -32602, "Invalid params: `tools/call` needs `params`, an object"),
                error(
                    json!(82),
                    -32602,
                    "Invalid params: `tools/call` needs `name`, the tool's name (a string)"
                ),
                error(json!(83), -32602, "Invalid params: `arguments` must be an object, got an array"),
                error(json!(86), -32600, "Invalid Request: `method` is missing"),
                error(json!(1.5), -32600, "Invalid Request: `id` must be a string or an integer"),
                error(json!(87), -32600, "Invalid Request: `jsonrpc` must be \"2.0\""),
                error(
                    Value::Null,
                    -32600,
                    "Invalid Request: a message is a JSON object (batches are not supported)"
                ),
                error(
                    Value::Null,
                    -32700,
                    "Parse error: expected value at line 1 column 1"
                ),
            ]
        );
    }

    #[test]
    fn well_formed_messages_pass_and_malformed_notifications_are_not_answered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":{"task":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Incoming::Message(_)),
                "{line} reaches the server"
            );
        }
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}"#,
            "  ",
        ] {
            assert!(
                matches!(classify(line.as_bytes()), Incoming::Ignore),
                "{line} is not answered"
            );
        }
    }
}
