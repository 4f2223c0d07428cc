//! A fake model server on 127.0.0.1 that speaks the Anthropic Messages API and OpenAI
//! chat completions (JSON and SSE) the way the real services do, and for the agent CLIs
//! also the OpenAI Responses API (codex) and Gemini's generateContent (Gemini CLI).
//!
//! It validates every request as strictly as the real APIs (answering violations with a
//! 400 and recording them), records every request, and plays scripted [`Reply`]s: a FIFO
//! script, or a responder closure that routes by request content, which concurrent
//! agents need. Faults (error statuses, error events, cut and stalled streams, malformed
//! tool arguments) are replies too. It never touches the network beyond 127.0.0.1.
//!
//! ```ignore
//! let server = FakeServer::with_script(vec![
//!     Turn::text("looking").tool_use("t1", "read_file", json!({"path": "a"})).into(),
//!     Turn::text("done").into(),
//! ]).await;
//! let model = server.model(Provider::Anthropic, true);
//! // ... drive `model`, then:
//! server.assert_no_violations();
//! ```

// Shared by every suite; not every suite uses every helper. Test code: a broken
// fixture should panic loudly.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod cache;
mod cli_render;
mod render;
mod validate;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::Response;
use axum::routing::post;
use grove::model::{
    AnthropicClient, AnthropicConfig, Model, OpenAiClient, OpenAiConfig, Provider, RetryPolicy,
};
use serde_json::Value;

/// The API key the configs from [`FakeServer`] carry.
pub const TEST_API_KEY: &str = "sk-fake-test-key-0123456789";

/// A retry policy for tests: three retries, millisecond waits.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

/// Which API a request was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/chat/completions` (or `/chat/completions`).
    OpenAi,
    /// `POST /v1/responses` (codex).
    Responses,
    /// `POST /v1beta/models/{model}:generateContent` or `:streamGenerateContent`.
    Gemini,
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub endpoint: Endpoint,
    /// The path and query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed body (`Value::Null` if it was not JSON).
    pub body: Value,
    /// The body exactly as sent, for byte-level comparisons.
    pub raw_body: String,
    pub received_at: Instant,
    /// The request id the server answered with (`request-id` / `x-request-id`).
    pub request_id: String,
}

impl RecordedRequest {
    /// The value of header `name` (case-insensitive), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether the request asked for SSE.
    pub fn stream(&self) -> bool {
        match self.endpoint {
            Endpoint::Gemini => self.path.contains(":streamGenerateContent"),
            _ => self.body.get("stream").and_then(Value::as_bool) == Some(true),
        }
    }

    /// How many tool results the conversation holds, in any of the four formats.
    pub fn tool_result_count(&self) -> usize {
        match self.endpoint {
            Endpoint::Anthropic | Endpoint::OpenAi => self.tool_results().len(),
            Endpoint::Responses => self
                .body
                .get("input")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|item| {
                    matches!(
                        item["type"].as_str(),
                        Some("function_call_output" | "custom_tool_call_output")
                    )
                })
                .count(),
            Endpoint::Gemini => self
                .body
                .get("contents")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .flat_map(|content| content["parts"].as_array().cloned().unwrap_or_default())
                .filter(|part| part.get("functionResponse").is_some())
                .count(),
        }
    }

    /// Whether the request offers tools (Gemini: function declarations).
    pub fn offers_tools(&self) -> bool {
        match self.endpoint {
            Endpoint::Gemini => self.body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|tool| tool.get("functionDeclarations").is_some()),
            _ => self.body["tools"]
                .as_array()
                .is_some_and(|tools| !tools.is_empty()),
        }
    }

    /// The messages array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The system prompt: Anthropic's `system` (string or text blocks, joined) or the
    /// OpenAI `system` messages, joined.
    pub fn system_text(&self) -> String {
        match self.endpoint {
            Endpoint::Anthropic => content_text(self.body.get("system").unwrap_or(&Value::Null)),
            Endpoint::Responses | Endpoint::Gemini => String::new(),
            Endpoint::OpenAi => self
                .messages()
                .iter()
                .filter(|m| m["role"] == "system")
                .map(|m| content_text(&m["content"]))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The text of the first user message: a subagent's brief.
    pub fn first_user_text(&self) -> String {
        self.messages()
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| user_text(&m["content"]))
            .unwrap_or_default()
    }

    /// The text of the last user message (tool results not included).
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| user_text(&m["content"]))
            .unwrap_or_default()
    }

    /// Every tool result in the conversation as `(tool call id, content)`, in order.
    pub fn tool_results(&self) -> Vec<(String, String)> {
        let mut results = Vec::new();
        for message in self.messages() {
            match self.endpoint {
                Endpoint::Anthropic => {
                    for block in message["content"].as_array().into_iter().flatten() {
                        if block["type"] == "tool_result" {
                            results.push((
                                block["tool_use_id"].as_str().unwrap_or("").to_owned(),
                                content_text(&block["content"]),
                            ));
                        }
                    }
                }
                Endpoint::Responses | Endpoint::Gemini => {}
                Endpoint::OpenAi => {
                    if message["role"] == "tool" {
                        results.push((
                            message["tool_call_id"].as_str().unwrap_or("").to_owned(),
                            content_text(&message["content"]),
                        ));
                    }
                }
            }
        }
        results
    }

    /// Every tool call in the conversation's assistant messages as `(id, name)`, in order.
    pub fn tool_calls(&self) -> Vec<(String, String)> {
        self.tool_call_blocks()
            .into_iter()
            .map(|(id, name, _)| (id, name))
            .collect()
    }

    /// Every tool call in the conversation's assistant messages as `(id, input)`, in
    /// order: Anthropic's `input`, or OpenAI's `arguments` parsed (kept as a string when
    /// they are not JSON).
    pub fn tool_call_inputs(&self) -> Vec<(String, Value)> {
        self.tool_call_blocks()
            .into_iter()
            .map(|(id, _, input)| (id, input))
            .collect()
    }

    /// Every tool call of the assistant messages as `(id, name, input)`.
    fn tool_call_blocks(&self) -> Vec<(String, String, Value)> {
        let text = |value: &Value| value.as_str().unwrap_or("").to_owned();
        let mut calls = Vec::new();
        for message in self.messages().iter().filter(|m| m["role"] == "assistant") {
            match self.endpoint {
                Endpoint::Anthropic => {
                    for block in message["content"].as_array().into_iter().flatten() {
                        if block["type"] == "tool_use" {
                            calls.push((
                                text(&block["id"]),
                                text(&block["name"]),
                                block["input"].clone(),
                            ));
                        }
                    }
                }
                Endpoint::Responses | Endpoint::Gemini => {}
                Endpoint::OpenAi => {
                    for call in message["tool_calls"].as_array().into_iter().flatten() {
                        let arguments = &call["function"]["arguments"];
                        let input = arguments
                            .as_str()
                            .and_then(|raw| serde_json::from_str(raw).ok())
                            .unwrap_or_else(|| arguments.clone());
                        calls.push((text(&call["id"]), text(&call["function"]["name"]), input));
                    }
                }
            }
        }
        calls
    }

    /// The names of the tools offered, in the order sent.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                tool.get("name")
                    .or_else(|| tool.get("function").and_then(|f| f.get("name")))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }
}

/// A user message's text blocks, joined by newlines (tool results not included).
fn user_text(content: &Value) -> String {
    match content.as_array() {
        Some(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .map(|b| b["text"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join("\n"),
        None => content_text(content),
    }
}

/// The text of a string or an array of text blocks/parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One scripted model turn, rendered in whichever format and mode the request used.
#[derive(Debug, Clone)]
pub struct Turn {
    pub(crate) blocks: Vec<TurnBlock>,
    pub(crate) stop: Option<String>,
    /// input, output, cache read, cache write.
    pub(crate) usage: (u64, u64, u64, u64),
    /// The part of the cache write that lives an hour (Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`; the rest lives 5 minutes).
    pub(crate) cache_write_1h: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum TurnBlock {
    Text(String),
    /// `arguments` is raw JSON text (possibly invalid, on purpose).
    ToolUse {
        id: String,
        name: String,
        arguments: String,
    },
}

impl Default for Turn {
    fn default() -> Self {
        Self::new()
    }
}

impl Turn {
    /// An empty turn (add blocks with the builder methods).
    pub fn new() -> Self {
        Self {
            blocks: Vec::new(),
            stop: None,
            usage: (10, 5, 0, 0),
            cache_write_1h: 0,
        }
    }

    /// A turn holding one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new().with_text(text)
    }

    /// Appends a text block.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.blocks.push(TurnBlock::Text(text.into()));
        self
    }

    /// Appends a tool call with JSON arguments.
    pub fn tool_use(self, id: &str, name: &str, input: Value) -> Self {
        let arguments = input.to_string();
        self.tool_use_raw(id, name, &arguments)
    }

    /// Appends a tool call whose arguments are sent as this raw text (may be invalid
    /// JSON: streamed as `partial_json` pieces / an `arguments` string).
    pub fn tool_use_raw(mut self, id: &str, name: &str, arguments: &str) -> Self {
        self.blocks.push(TurnBlock::ToolUse {
            id: id.to_owned(),
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        });
        self
    }

    /// Sets the token counts: input (uncached), output, cache read, cache write.
    /// OpenAI renders `prompt_tokens = input + cache_read + cache_write` with
    /// `cached_tokens = cache_read`.
    pub fn usage(mut self, input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        self.usage = (input, output, cache_read, cache_write);
        self
    }

    /// Sets the wire stop reason verbatim (`stop_reason` / `finish_reason`); by default
    /// it is inferred: tool calls → `tool_use` / `tool_calls`, else `end_turn` / `stop`.
    pub fn stop(mut self, reason: &str) -> Self {
        self.stop = Some(reason.to_owned());
        self
    }

    pub(crate) fn has_tool_use(&self) -> bool {
        self.blocks
            .iter()
            .any(|block| matches!(block, TurnBlock::ToolUse { .. }))
    }
}

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A successful turn.
    Turn(Turn),
    /// An error status with the provider's error envelope (`type`, `message`).
    Error {
        status: u16,
        error_type: String,
        message: String,
        headers: Vec<(String, String)>,
    },
    /// A status with this body verbatim (e.g. an HTML page from a proxy), as
    /// `text/html` unless `headers` name another `content-type`.
    Raw {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// 200, the start of `turn`, then an `error` event (OpenAI: a chunk holding
    /// `error`). Non-streaming requests get HTTP 500 with that error instead.
    ErrorEvent {
        turn: Turn,
        error_type: String,
        message: String,
    },
    /// 200, the start of `turn` (mid-block), then the connection is dropped.
    /// Non-streaming requests get half the JSON body, then the drop.
    Cut(Turn),
    /// 200, the start of `turn`, then nothing ever again (idle timeout).
    /// Non-streaming requests get the headers and no body.
    Stall(Turn),
    /// 200 and the whole of `turn`, with `gap` between SSE frames (a slow but live
    /// stream). Non-streaming requests get the body after one `gap`.
    Slow { turn: Turn, gap: Duration },
    /// No response at all, not even headers (request timeout, cancellation).
    Hang,
    /// 200 and the stream's first frame, then a keep-alive frame every `gap` forever
    /// (Anthropic `ping`, an empty OpenAI delta): never idle, never done.
    /// Non-streaming requests get the headers, then a space every `gap`.
    Drip { gap: Duration },
    /// `reply`, after `delay` (a model's latency).
    Delayed { delay: Duration, reply: Box<Reply> },
    /// `reply`, once `gate`'s other parties have arrived too: a request answered only
    /// while others are in flight, which proves they overlap. If the gate does not open
    /// within [`GATE_TIMEOUT`] that is recorded as a violation and answered with a 500.
    Gated {
        gate: Arc<tokio::sync::Barrier>,
        reply: Box<Reply>,
    },
}

/// How long a [`Reply::Gated`] waits for the others.
pub const GATE_TIMEOUT: Duration = Duration::from_secs(20);

impl From<Turn> for Reply {
    fn from(turn: Turn) -> Self {
        Reply::Turn(turn)
    }
}

impl Reply {
    /// An error status with the provider's error envelope.
    pub fn error(status: u16, error_type: &str, message: &str) -> Self {
        Reply::Error {
            status,
            error_type: error_type.to_owned(),
            message: message.to_owned(),
            headers: Vec::new(),
        }
    }

    /// Anthropic's 529 `overloaded_error`.
    pub fn overloaded() -> Self {
        Reply::error(529, "overloaded_error", "Overloaded")
    }

    /// A 429 `rate_limit_error` asking for `retry_after_secs` of patience.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Reply::error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        )
        .with_header("retry-after", &retry_after_secs.to_string())
    }

    /// Adds a response header (only to `Error` and `Raw` replies).
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Reply::Error { headers, .. } | Reply::Raw { headers, .. } = &mut self {
            headers.push((name.to_owned(), value.to_owned()));
        }
        self
    }
}

type Responder = dyn Fn(&RecordedRequest) -> Reply + Send + Sync;

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    responder: Mutex<Option<Arc<Responder>>>,
    requests: Mutex<Vec<RecordedRequest>>,
    violations: Mutex<Vec<String>>,
    next_id: AtomicU64,
    require_openai_auth: AtomicBool,
    /// Accept the extra fields agent CLIs send (their requests are checked only for
    /// auth and shape, not against grove's stricter expectations).
    lenient: AtomicBool,
    /// Write a whole stream's frames at once (see [`FakeServer::stream_in_one_write`]).
    one_write: AtomicBool,
    /// Summed usage of every turn served whole: input, output, cache read, cache write.
    usage_sent: Mutex<(u64, u64, u64, u64)>,
    /// Of the cache writes summed in `usage_sent`, those that live an hour.
    cache_write_1h_sent: AtomicU64,
    /// Anthropic's prompt cache, when a test turned it on ([`FakeServer::prompt_cache`]):
    /// then it, not the script, says a turn's input and cache figures.
    prompt_cache: Mutex<Option<cache::PromptCache>>,
    /// Each request's lookup in the prompt cache, by request id, in arrival order.
    cache_lookups: Mutex<Vec<(String, cache::Lookup)>>,
    clock: Arc<cache::FakeClock>,
}

/// The running server; stops when dropped.
pub struct FakeServer {
    shared: Arc<Shared>,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    /// Starts a server with an empty script.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            require_openai_auth: AtomicBool::new(true),
            lenient: AtomicBool::new(false),
            one_write: AtomicBool::new(false),
            usage_sent: Mutex::new((0, 0, 0, 0)),
            cache_write_1h_sent: AtomicU64::new(0),
            prompt_cache: Mutex::new(None),
            cache_lookups: Mutex::new(Vec::new()),
            clock: Arc::new(cache::FakeClock::default()),
        });
        let app = Router::new()
            .route("/v1/messages", post(anthropic_handler))
            .route("/v1/chat/completions", post(openai_handler))
            .route("/chat/completions", post(openai_handler))
            .route("/v1/responses", post(responses_handler))
            .route("/responses", post(responses_handler))
            .route("/v1beta/models/{*action}", post(gemini_handler))
            // Claude Code probes the base URL before its first request.
            .route("/", axum::routing::get(reachable).head(reachable))
            .fallback(unknown_route)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake model server to 127.0.0.1");
        let address = listener.local_addr().expect("local address");
        let task = tokio::spawn(async move {
            // Ends only when the task is aborted (the server dropped).
            use axum::serve::ListenerExt;
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, app).await;
        });
        Self {
            shared,
            address,
            task,
        }
    }

    /// Starts a server that plays `replies` in order, one per request.
    pub async fn with_script(replies: Vec<Reply>) -> Self {
        let server = Self::start().await;
        for reply in replies {
            server.push(reply);
        }
        server
    }

    /// Starts a server that asks `responder` for every reply the script does not hold.
    pub async fn with_responder(
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let server = Self::start().await;
        server.set_responder(responder);
        server
    }

    /// Sends each complete stream's frames in one write, as an answer that is all there
    /// when its latency has passed. By default each frame is written on its own, so that
    /// clients meet frames split across reads; a benchmark that holds every answer back
    /// for a fixed latency sets this, since a thousand writes of a few bytes each are the
    /// fake server's cost, not the client's (a real API streams them while it generates).
    pub fn stream_in_one_write(&self) {
        self.shared.one_write.store(true, Ordering::SeqCst);
    }

    /// Appends a reply to the FIFO script (which is served before the responder).
    pub fn push(&self, reply: impl Into<Reply>) {
        lock(&self.shared.script).push_back(reply.into());
    }

    /// Installs (or replaces) the responder closure.
    pub fn set_responder(
        &self,
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) {
        *lock(&self.shared.responder) = Some(Arc::new(responder));
    }

    /// A server for agent CLIs driven by `responder`: their requests carry fields grove's
    /// own never sends, so they are checked for auth and shape only.
    pub async fn for_clis(
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let server = Self::with_responder(responder).await;
        server.shared.lenient.store(true, Ordering::SeqCst);
        server
    }

    /// The usage of every turn served whole so far, summed: (input, output, cache
    /// read, cache write) — what a client that counts right must have spent.
    pub fn usage_sent(&self) -> (u64, u64, u64, u64) {
        *lock(&self.shared.usage_sent)
    }

    /// Plays Anthropic's prompt cache (see [`cache`]) on `/v1/messages`: from now on a
    /// turn's input, cache read and cache write figures are the cache's, not the
    /// script's (its output tokens stay). Off by default, so that the scripted usage
    /// other tests count on stays as written.
    pub fn prompt_cache(&self) {
        *lock(&self.shared.prompt_cache) = Some(cache::PromptCache::default());
    }

    /// The clock the prompt cache lives by: [`cache::FakeClock::advance`] moves it on.
    pub fn clock(&self) -> Arc<cache::FakeClock> {
        Arc::clone(&self.shared.clock)
    }

    /// What the prompt cache found for the request with id `request_id`, if it looked.
    pub fn cache_lookup(&self, request_id: &str) -> Option<cache::Lookup> {
        lock(&self.shared.cache_lookups)
            .iter()
            .find(|(id, _)| id == request_id)
            .map(|(_, lookup)| lookup.clone())
    }

    /// Of the cache writes in [`FakeServer::usage_sent`], those that live an hour.
    pub fn cache_write_1h_sent(&self) -> u64 {
        self.shared.cache_write_1h_sent.load(Ordering::SeqCst)
    }

    /// Whether OpenAI requests must carry `Authorization: Bearer` (default true; false
    /// plays a local server without auth).
    pub fn require_openai_auth(&self, required: bool) {
        self.shared
            .require_openai_auth
            .store(required, Ordering::SeqCst);
    }

    /// The base URL for both clients: `ANTHROPIC_BASE_URL` (the client appends
    /// `/v1/messages`) or `OPENAI_BASE_URL` (the server also serves `/chat/completions`
    /// at the root).
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The OpenAI-style base URL including `/v1`.
    pub fn openai_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Every protocol violation seen so far.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.shared.violations).clone()
    }

    /// Panics listing every violation, if there were any.
    #[track_caller]
    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "the fake model server saw {} protocol violation(s):\n  {}",
            violations.len(),
            violations.join("\n  ")
        );
    }

    /// An Anthropic config for this server: test key, [`fast_retry`], 10 s timeouts, no
    /// sibling hold (see [`FakeServer::openai_config`]).
    pub fn anthropic_config(&self, stream: bool) -> AnthropicConfig {
        AnthropicConfig {
            delivery: delivery(stream),
            retry: fast_retry(),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(10),
            sibling_hold: Duration::ZERO,
            ..AnthropicConfig::new(self.url(), TEST_API_KEY)
        }
    }

    /// An OpenAI config for this server: test key, [`fast_retry`], 10 s timeouts, no
    /// sibling hold: a test that holds one scripted reply (a gate) to prove requests
    /// overlap would hold its siblings too. The suites about the cache turn it on.
    pub fn openai_config(&self, stream: bool) -> OpenAiConfig {
        OpenAiConfig {
            delivery: delivery(stream),
            retry: fast_retry(),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(10),
            sibling_hold: Duration::ZERO,
            ..OpenAiConfig::new(self.openai_url(), TEST_API_KEY)
        }
    }

    /// A client of `provider` for this server with the configs above.
    pub fn model(&self, provider: Provider, stream: bool) -> Arc<dyn Model> {
        match provider {
            Provider::Anthropic => Arc::new(
                AnthropicClient::new(self.anthropic_config(stream)).expect("anthropic client"),
            ),
            Provider::OpenAi => {
                Arc::new(OpenAiClient::new(self.openai_config(stream)).expect("openai client"))
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking test thread must not hide the recorded requests from the others.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn anthropic_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Endpoint::Anthropic, &uri, &headers, &body).await
}

async fn openai_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Endpoint::OpenAi, &uri, &headers, &body).await
}

async fn responses_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Endpoint::Responses, &uri, &headers, &body).await
}

async fn gemini_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&shared, Endpoint::Gemini, &uri, &headers, &body).await
}

async fn reachable() -> Response {
    render::status(200, "", &[], "")
}

/// The checks of a request from an agent CLI: its credentials and the shape of its
/// body, in each API's own terms.
fn validate_cli(
    endpoint: Endpoint,
    headers: &HeaderMap,
    uri: &Uri,
    body: &Value,
) -> Result<(), validate::Rejection> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (authorized, shaped) = match endpoint {
        Endpoint::Anthropic => (
            header("x-api-key").is_some() || header("authorization").is_some(),
            body["messages"].is_array(),
        ),
        Endpoint::OpenAi | Endpoint::Responses => (
            header("authorization").is_some_and(|value| value.starts_with("Bearer ")),
            body["messages"].is_array() || body["input"].is_array(),
        ),
        Endpoint::Gemini => (
            header("x-goog-api-key").is_some()
                || uri.query().is_some_and(|query| query.contains("key=")),
            body["contents"].is_array(),
        ),
    };
    if !authorized {
        return Err(validate::Rejection::invalid(vec![
            "the request carries no credentials".to_owned(),
        ]));
    }
    if !shaped {
        return Err(validate::Rejection::invalid(vec![format!(
            "the body has no {}",
            match endpoint {
                Endpoint::Gemini => "contents",
                Endpoint::Responses => "input",
                _ => "messages",
            }
        )]));
    }
    Ok(())
}

async fn unknown_route(State(shared): State<Arc<Shared>>, method: Method, uri: Uri) -> Response {
    lock(&shared.violations).push(format!("request to an unknown endpoint: {method} {uri}"));
    render::status(
        404,
        "{\"error\":{\"type\":\"not_found_error\",\"message\":\"Not found\"}}",
        &[],
        "",
    )
}

async fn handle(
    shared: &Shared,
    endpoint: Endpoint,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let received_at = Instant::now();
    let request_id = format!("req_fake_{}", shared.next_id.fetch_add(1, Ordering::SeqCst));
    let raw_body = String::from_utf8_lossy(body).into_owned();
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let recorded = RecordedRequest {
        endpoint,
        path: uri
            .path_and_query()
            .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: parsed.clone().unwrap_or(Value::Null),
        raw_body,
        received_at,
        request_id: request_id.clone(),
    };
    lock(&shared.requests).push(recorded.clone());

    let verdict = match &parsed {
        None => Err(validate::Rejection::invalid(vec![
            "the body is not valid JSON".to_owned(),
        ])),
        Some(body) if shared.lenient.load(Ordering::SeqCst) => {
            validate_cli(endpoint, headers, uri, body)
        }
        Some(_) if matches!(endpoint, Endpoint::Responses | Endpoint::Gemini) => {
            Err(validate::Rejection::invalid(vec![format!(
                "{endpoint:?} is served only by FakeServer::for_clis"
            )]))
        }
        Some(body) => match endpoint {
            Endpoint::Responses | Endpoint::Gemini => Ok(()),
            Endpoint::Anthropic => validate::anthropic(headers, body),
            Endpoint::OpenAi => validate::openai(
                headers,
                body,
                shared.require_openai_auth.load(Ordering::SeqCst),
            ),
        },
    };
    if let Err(rejection) = verdict {
        let mut violations = lock(&shared.violations);
        for problem in &rejection.problems {
            violations.push(format!("{request_id} ({endpoint:?}): {problem}"));
        }
        drop(violations);
        return render::error(
            endpoint,
            rejection.status,
            rejection.error_type,
            &rejection.problems.join("; "),
            &[],
            &request_id,
        );
    }

    let scripted = lock(&shared.script).pop_front();
    let reply = match scripted {
        Some(reply) => reply,
        None => {
            let responder = lock(&shared.responder).clone();
            match responder {
                Some(responder) => responder(&recorded),
                None => {
                    lock(&shared.violations).push(format!(
                        "{request_id} ({endpoint:?}): no scripted reply left for this request"
                    ));
                    Reply::error(500, "api_error", "fake server: the script is exhausted")
                }
            }
        }
    };
    let lookup = match endpoint {
        Endpoint::Anthropic => lock(&shared.prompt_cache)
            .as_mut()
            .map(|cache| cache.lookup(&recorded.body, shared.clock.now())),
        _ => None,
    };
    let lookup = match lookup {
        Some(Err(problem)) => {
            lock(&shared.violations).push(format!("{request_id} ({endpoint:?}): {problem}"));
            return render::error(
                endpoint,
                400,
                "invalid_request_error",
                &problem,
                &[],
                &request_id,
            );
        }
        Some(Ok(lookup)) => {
            lock(&shared.cache_lookups).push((request_id.clone(), lookup.clone()));
            Some(lookup)
        }
        None => None,
    };
    let mut reply = wait_for_release(shared, endpoint, &request_id, reply).await;
    if let Some(lookup) = &lookup {
        cached_usage(shared, &mut reply, lookup);
    }
    if let Reply::Turn(turn) = &reply {
        shared
            .cache_write_1h_sent
            .fetch_add(turn.cache_write_1h, Ordering::SeqCst);
        let mut sent = lock(&shared.usage_sent);
        let (input, output, cache_read, cache_write) = turn.usage;
        *sent = (
            sent.0.saturating_add(input),
            sent.1.saturating_add(output),
            sent.2.saturating_add(cache_read),
            sent.3.saturating_add(cache_write),
        );
    }
    let gemini_model = (endpoint == Endpoint::Gemini)
        .then(|| {
            uri.path()
                .rsplit('/')
                .next()
                .and_then(|action| action.split(':').next())
                .map(str::to_owned)
        })
        .flatten();
    let model = gemini_model
        .as_deref()
        .or_else(|| recorded.body["model"].as_str())
        .unwrap_or("fake-model");
    let writes = if shared.one_write.load(Ordering::SeqCst) {
        render::Writes::One
    } else {
        render::Writes::PerFrame
    };
    render::reply(
        endpoint,
        reply,
        recorded.stream(),
        writes,
        model,
        &request_id,
    )
    .await
}

/// When `reply` begins a response, the prompt cache's entries of `lookup` exist from
/// now on, and its turn's usage is the cache's.
fn cached_usage(shared: &Shared, reply: &mut Reply, lookup: &cache::Lookup) {
    let turn = match reply {
        Reply::Turn(turn)
        | Reply::Slow { turn, .. }
        | Reply::Stall(turn)
        | Reply::Cut(turn)
        | Reply::ErrorEvent { turn, .. } => Some(turn),
        Reply::Drip { .. } => None,
        // No response begins: nothing is written.
        _ => return,
    };
    if let Some(cache) = lock(&shared.prompt_cache).as_mut() {
        cache.commit(lookup, shared.clock.now());
    }
    if let Some(turn) = turn {
        turn.usage = (
            lookup.input,
            turn.usage.1,
            lookup.read,
            lookup.write_5m + lookup.write_1h,
        );
        turn.cache_write_1h = lookup.write_1h;
    }
}

/// Unwraps [`Reply::Delayed`] and [`Reply::Gated`], waiting as they say.
async fn wait_for_release(
    shared: &Shared,
    endpoint: Endpoint,
    request_id: &str,
    mut reply: Reply,
) -> Reply {
    loop {
        reply = match reply {
            Reply::Delayed { delay, reply } => {
                tokio::time::sleep(delay).await;
                *reply
            }
            Reply::Gated { gate, reply } => {
                if tokio::time::timeout(GATE_TIMEOUT, gate.wait())
                    .await
                    .is_err()
                {
                    lock(&shared.violations).push(format!(
                        "{request_id} ({endpoint:?}): gated reply: the other requests never came"
                    ));
                    return Reply::error(500, "api_error", "fake server: gate timed out");
                }
                *reply
            }
            other => return other,
        }
    }
}

/// The client's delivery for a test case that streams or not.
pub fn delivery(stream: bool) -> grove::model::Delivery {
    if stream {
        grove::model::Delivery::Streamed
    } else {
        grove::model::Delivery::Whole
    }
}
