//! `grove mcp` driven line by line, as a client no SDK smooths over: raw JSON-RPC on its
//! stdin, every line of its stdout read back, its stderr (the server's log) kept.
//!
//! For what an SDK cannot send (params that are not an object, text that is not JSON)
//! and what it hides (a request never answered, an exit that never comes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::grove::Grove;

/// How long an answer may take before the test says it never came.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `grove mcp`, initialized.
pub struct McpServer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    log: Arc<Mutex<String>>,
    next_id: i64,
}

impl McpServer {
    /// Starts `grove mcp` with `grove`'s sealed environment and completes the handshake.
    pub async fn start(grove: &Grove) -> Self {
        let mut command = tokio::process::Command::from(grove.command(["mcp"]));
        command.stdin(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = child.stderr.take().unwrap();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut chunk = vec![0u8; 8192];
            while let Ok(read) = stderr.read(&mut chunk).await {
                if read == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..read]));
            }
        });
        let mut server = Self {
            child,
            stdin,
            stdout,
            log,
            next_id: 1000,
        };
        let initialized = server
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "grove-tests", "version": "1"},
                }),
            )
            .await;
        assert!(initialized.get("result").is_some(), "{initialized}");
        server
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .await;
        server
    }

    /// Writes one line to the server's stdin.
    pub async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next message the server writes, or `None` when none comes in time.
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Value> {
        let line = tokio::time::timeout(timeout, self.stdout.next_line())
            .await
            .ok()?
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|error| {
            panic!("grove mcp writes only JSON-RPC on stdout ({error}): {line}")
        }))
    }

    /// Sends `line` and returns the answer (the next message with an `id` or an
    /// `error`; notifications in between are skipped); panics naming the line when
    /// none comes.
    pub async fn answer_to(&mut self, line: &str) -> Value {
        self.send(line).await;
        loop {
            let message = self.next_message(ANSWER_TIMEOUT).await.unwrap_or_else(|| {
                panic!("grove mcp never answered {line}\nits log:\n{}", self.log())
            });
            if message.get("id").is_some() {
                return message;
            }
        }
    }

    /// Sends a request with a fresh id and returns its answer.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        let answer = self.answer_to(&line.to_string()).await;
        assert_eq!(answer["id"], json!(self.next_id), "{answer}");
        answer
    }

    /// `tools/call` of `name` with `arguments`; the whole answer.
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// What the server wrote on stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The server's log once every one of `lines` is in it, or after 10 s as it is: its
    /// stderr is read by a task of its own, which may lag behind the answer on stdout.
    pub async fn log_with(&self, lines: &[String]) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if lines.iter().all(|line| log.contains(line.as_str()))
                || std::time::Instant::now() > deadline
            {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("the server runs")).unwrap()
    }

    /// Waits for the server to exit, at most `timeout`; `None` if it is still running.
    pub async fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()
            .map(Result::unwrap)
    }
}
