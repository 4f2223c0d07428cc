//! The demo's scripted model: an HTTP server on 127.0.0.1 that answers the Anthropic
//! Messages API (non-streaming) from a fixed script instead of a model.
//!
//! It owns the script — which role says what, told apart by the system prompt and by how
//! many tool results the conversation already holds — and the server that serves it.
//! It must never reach the network, never panic on a request it did not expect (those
//! get a plain `end_turn` saying the replay has no script for them), and every text it
//! returns says it is a replay.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::DemoError;
use super::sample::{TARGETS, Target};

/// The prefix of every text the replay sends, so no one mistakes it for a model.
pub const LABEL: &str = "[replay]";

/// How long each reply waits, so the live view shows the workers side by side.
pub const DEFAULT_DELAY: Duration = Duration::from_millis(250);

/// The running replay server; stops when dropped.
#[derive(Debug)]
pub struct ReplayServer {
    address: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How long a worker's first reply waits for the other workers' first requests.
const GATHER_TIMEOUT: Duration = Duration::from_secs(10);

struct Shared {
    delay: Duration,
    replies: AtomicU64,
    /// How many workers have sent their first request: the first replies wait until
    /// every target's worker is in flight, so the demo always shows them side by side.
    first_requests: tokio::sync::watch::Sender<usize>,
}

impl Shared {
    /// Holds a worker's first reply until every worker has asked (or a timeout passed,
    /// so a run with fewer slots than targets is slowed, never stuck).
    async fn gather_workers(&self) {
        self.first_requests.send_modify(|count| *count += 1);
        let mut arrivals = self.first_requests.subscribe();
        let everyone = arrivals.wait_for(|count| *count >= TARGETS.len());
        let _ = tokio::time::timeout(GATHER_TIMEOUT, everyone).await;
    }
}

impl ReplayServer {
    /// Binds a random port on 127.0.0.1 and serves the script until dropped.
    pub async fn start(delay: Duration) -> Result<Self, DemoError> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|error| DemoError::Replay {
                reason: format!("cannot listen on 127.0.0.1: {error}"),
            })?;
        let address = listener.local_addr().map_err(|error| DemoError::Replay {
            reason: format!("cannot read the listening address: {error}"),
        })?;
        let shared = Arc::new(Shared {
            delay,
            replies: AtomicU64::new(0),
            first_requests: tokio::sync::watch::Sender::new(0),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .fallback(not_found)
            .with_state(shared);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            // A failed accept loop only means the run's requests fail, which the run
            // reports; there is no one else to tell.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(Self { address, shutdown })
    }

    /// The base URL to give an Anthropic client, e.g. `http://127.0.0.1:40123`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }
}

async fn messages(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if role(&request) == Some(Role::Worker) && tool_results(&request) == 0 {
        shared.gather_workers().await;
    }
    tokio::time::sleep(shared.delay).await;
    let number = shared.replies.fetch_add(1, Ordering::Relaxed) + 1;
    let turn = answer(&request);
    let content = turn.content();
    let output_bytes = content.to_string().len();
    let body = json!({
        "id": format!("msg_replay_{number}"),
        "type": "message",
        "role": "assistant",
        "model": request.get("model").and_then(Value::as_str).unwrap_or("replay"),
        "content": content,
        "stop_reason": turn.stop_reason(),
        "stop_sequence": null,
        "usage": {
            // A rough token count (four bytes a token), so the ledgers show real sizes.
            "input_tokens": body.len() / 4,
            "output_tokens": output_bytes / 4,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0
        }
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn not_found() -> Response {
    let body = json!({
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": format!("{LABEL} the replay serves only POST /v1/messages")
        }
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// One scripted assistant turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub text: String,
    /// Tool calls: name and input, in order.
    pub calls: Vec<(String, Value)>,
}

impl Turn {
    fn text(text: impl Into<String>) -> Self {
        Self {
            text: format!("{LABEL} {}", text.into()),
            calls: Vec::new(),
        }
    }

    fn call(mut self, name: &str, input: Value) -> Self {
        self.calls.push((name.to_owned(), input));
        self
    }

    /// The Anthropic content blocks of this turn.
    fn content(&self) -> Value {
        let mut blocks = vec![json!({ "type": "text", "text": self.text })];
        for (index, (name, input)) in self.calls.iter().enumerate() {
            blocks.push(json!({
                "type": "tool_use",
                "id": format!("toolu_replay_{}_{index}", fastrand::u64(..)),
                "name": name,
                "input": input
            }));
        }
        Value::Array(blocks)
    }

    fn stop_reason(&self) -> &'static str {
        if self.calls.is_empty() {
            "end_turn"
        } else {
            "tool_use"
        }
    }
}

/// Which built-in role sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Lead,
    Worker,
    Reviewer,
}

fn role(request: &Value) -> Option<Role> {
    let system = text_of(request.get("system").unwrap_or(&Value::Null));
    if system.starts_with("You are the lead engineer") {
        Some(Role::Lead)
    } else if system.starts_with("You are a software engineer") {
        Some(Role::Worker)
    } else if system.starts_with("You are an independent code reviewer") {
        Some(Role::Reviewer)
    } else {
        None
    }
}

/// The text of a string or of a list of content blocks (tool results not included).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn messages_of(request: &Value) -> &[Value] {
    request
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// How many tool results the conversation holds: the script's step counter.
fn tool_results(request: &Value) -> usize {
    messages_of(request)
        .iter()
        .filter_map(|message| message.get("content").and_then(Value::as_array))
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .count()
}

/// Every user text of the conversation: the brief, and for a reviewer the diff.
fn user_text(request: &Value) -> String {
    messages_of(request)
        .iter()
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| text_of(message.get("content").unwrap_or(&Value::Null)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The target a worker's or reviewer's brief names.
fn target_in(text: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|target| text.contains(target.path))
}

/// The scripted answer to one request body.
pub fn answer(request: &Value) -> Turn {
    let step = tool_results(request);
    let script = match role(request) {
        Some(Role::Lead) => Some(lead(step)),
        Some(Role::Worker) => target_in(&user_text(request)).map(|target| worker(target, step)),
        Some(Role::Reviewer) => {
            let text = crate::run::subtask::reviewer::without_others(&user_text(request));
            target_in(&text).map(|target| reviewer(target, &text, step))
        }
        None => None,
    };
    script.unwrap_or_else(|| {
        Turn::text("The replay has no script for this request; nothing was done.")
    })
}

/// The brief the lead writes for `target`.
pub fn brief(target: &Target) -> String {
    format!(
        "In {path}, replace every `log_old(...)` call with `log.info(...)` (the module \
already defines `log = logging.getLogger(__name__)`), and remove the now unused line \
`from shop.compat import log_old`. Change nothing else. Check: `grep -n log_old {path}` \
prints nothing.",
        path = target.path
    )
}

fn lead(step: usize) -> Turn {
    if step > 0 {
        return Turn::text(
            "Summary: the three modules were handed to three workers in parallel. Every \
approved change is merged into the result; a rejected one is archived, not merged, and can \
be redone with a follow-up subtask.",
        );
    }
    let mut turn = Turn::text(format!(
        "Three modules call log_old: {}. One worker per file, all at once.",
        TARGETS
            .iter()
            .map(|target| target.path)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for target in TARGETS {
        turn = turn.call("delegate", json!({ "task": brief(target) }));
    }
    turn
}

fn worker(target: &Target, step: usize) -> Turn {
    match step {
        0 => Turn::text(format!("Reading {} first.", target.path))
            .call("read_file", json!({ "path": target.path })),
        1 => {
            let mut turn = Turn::text(format!("Editing {}.", target.path));
            for edit in target.edits {
                turn = turn.call(
                    "edit_file",
                    json!({
                        "path": target.path,
                        "old_string": edit.old,
                        "new_string": edit.new,
                        "replace_all": edit.replace_all
                    }),
                );
            }
            turn
        }
        _ => Turn::text(match target.stray_line {
            None => format!(
                "Replaced the log_old calls in {} with log.info and removed the import.",
                target.path
            ),
            Some(_) => format!(
                "Replaced the log_old calls in {} with log.info and removed the import; \
also added a debug print in charge() to check the amounts.",
                target.path
            ),
        }),
    }
}

fn reviewer(target: &Target, review_text: &str, step: usize) -> Turn {
    if step > 0 {
        return Turn::text("Verdict submitted.");
    }
    let stray = target
        .stray_line
        .filter(|line| review_text.contains(line.trim()));
    // The project's check, when the brief shows one (`passed in` is its green line).
    let check = if review_text.contains("` passed in ") {
        " Its check passed."
    } else {
        ""
    };
    let input = match stray {
        None => json!({
            "verdict": "approve",
            "summary": format!(
                "{LABEL} {} now logs through log.info and no longer imports log_old; \
        nothing else changed.{check}",
                target.path
            ),
        }),
        Some(line) => {
            let mut finding = json!({
                "path": target.path,
                "problem": format!(
                    "adds `{}`: print debugging the brief did not ask for, against the house rules",
                    line.trim()
                ),
            });
            if let Some(number) = target.stray_line_number() {
                finding["line"] = json!(number);
            }
            json!({
                "verdict": "reject",
                "summary": format!(
                    "{LABEL} The log_old calls are replaced, but the diff also adds a debug \
            print to {}, which the brief did not ask for and AGENTS.md forbids.",
                    target.path
                ),
                "findings": [finding],
            })
        }
    };
    Turn::text(format!("Reviewing the diff of {}.", target.path)).call("submit_verdict", input)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::agent::roles::{RoleKind, builtin};
    use crate::demo::sample::STRAY_LINE;

    fn request(kind: RoleKind, messages: Value) -> Value {
        json!({
            "model": "replay",
            "system": [{ "type": "text", "text": builtin(kind).prompt }],
            "messages": messages
        })
    }

    fn tool_result(id: &str) -> Value {
        json!({ "role": "user", "content": [
            { "type": "tool_result", "tool_use_id": id, "content": "ok" }
        ]})
    }

    #[test]
    fn the_lead_delegates_one_subtask_per_target_then_summarises() {
        let first = answer(&request(
            RoleKind::Lead,
            json!([{ "role": "user", "content": "the task" }]),
        ));
        let delegated: Vec<_> = first
            .calls
            .iter()
            .map(|(name, input)| (name.as_str(), input["task"].as_str().unwrap().to_owned()))
            .collect();
        let expected: Vec<_> = TARGETS.iter().map(|t| ("delegate", brief(t))).collect();
        assert_eq!(
            delegated, expected,
            "one delegate call per target, in one turn"
        );

        let done = answer(&request(
            RoleKind::Lead,
            json!([{ "role": "user", "content": "the task" }, tool_result("a")]),
        ));
        assert!(done.calls.is_empty(), "the lead ends after the results");
        assert!(done.text.starts_with(LABEL), "{}", done.text);
    }

    #[test]
    fn a_worker_reads_then_edits_then_reports() {
        let target = &TARGETS[0];
        let brief =
            json!({ "role": "user", "content": [{ "type": "text", "text": brief(target) }] });
        let names = |turn: &Turn| {
            turn.calls
                .iter()
                .map(|(name, _)| name.clone())
                .collect::<Vec<_>>()
        };
        let read = answer(&request(RoleKind::Worker, json!([brief])));
        assert_eq!(names(&read), vec!["read_file"]);
        let edit = answer(&request(RoleKind::Worker, json!([brief, tool_result("r")])));
        assert_eq!(names(&edit), vec!["edit_file"; target.edits.len()]);
        let done = answer(&request(
            RoleKind::Worker,
            json!([
                brief,
                tool_result("r"),
                tool_result("e1"),
                tool_result("e2")
            ]),
        ));
        assert_eq!(names(&done), Vec::<String>::new());
        assert!(done.text.starts_with(LABEL), "{}", done.text);
    }

    #[test]
    fn the_reviewer_rejects_the_stray_line_with_a_finding_and_approves_the_rest() {
        let verdict = |target: &Target, diff: &str| {
            let text = format!("{}\n\n{diff}", brief(target));
            let turn = answer(&request(
                RoleKind::Reviewer,
                json!([{ "role": "user", "content": text }]),
            ));
            assert_eq!(turn.calls.len(), 1, "one submit_verdict");
            assert_eq!(turn.calls[0].0, "submit_verdict");
            turn.calls[0].1.clone()
        };
        let clean = verdict(&TARGETS[0], "-log_old(\n+log.info(");
        assert_eq!(clean["verdict"], "approve");
        let payments = &TARGETS[1];
        let stray = verdict(payments, &format!("+{STRAY_LINE}"));
        assert_eq!(stray["verdict"], "reject");
        assert_eq!(
            stray["findings"],
            json!([{
                "path": "shop/payments.py",
                "line": 9,
                "problem": "adds `print(\"DEBUG charge\", order_id, amount_cents)`: print \
            debugging the brief did not ask for, against the house rules"
            }])
        );
        // The verdict follows the diff, not the file name: without the line, approve.
        assert_eq!(verdict(payments, "+log.info(")["verdict"], "approve");
    }

    #[test]
    fn an_unexpected_request_gets_a_plain_end_turn() {
        for body in [
            Value::Null,
            json!({ "system": "You are a poet." }),
            json!({ "system": 3, "messages": "nope" }),
            request(
                RoleKind::Worker,
                json!([{ "role": "user", "content": "no file" }]),
            ),
        ] {
            let turn = answer(&body);
            assert_eq!(
                turn,
                Turn::text("The replay has no script for this request; nothing was done."),
                "{body}"
            );
        }
    }

    #[tokio::test]
    async fn the_server_answers_over_http_with_usage_and_rejects_other_paths() {
        let server = ReplayServer::start(Duration::ZERO).await.unwrap();
        let client = reqwest::Client::new();
        let body = request(
            RoleKind::Lead,
            json!([{ "role": "user", "content": "the task" }]),
        );
        let reply: Value = client
            .post(format!("{}/v1/messages", server.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(reply["stop_reason"], "tool_use");
        assert_eq!(
            reply["content"].as_array().unwrap().len(),
            1 + TARGETS.len()
        );
        assert!(reply["usage"]["input_tokens"].as_u64().unwrap() > 0);
        let missing = client
            .get(format!("{}/v1/models", server.base_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), reqwest::StatusCode::NOT_FOUND);
    }
}
