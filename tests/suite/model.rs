//! The model clients against the fake server over real HTTP: both providers, streaming
//! and non-streaming, every retry rule, usage, stop reasons and cache breakpoints.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use grove::model::{
    AnthropicClient, AnthropicConfig, ContentBlock, Message, Model, ModelError, ModelNotice,
    OpenAiClient, OpenAiConfig, Provider, Request, Response, RetryNotice, RetryPolicy, Role,
    StopReason, ToolSpec, Usage,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::fake_server::{
    Endpoint, FakeServer, RecordedRequest, Reply, TEST_API_KEY, Turn, fast_retry,
};

/// One provider in one transport mode; every behaviour is checked in all four.
#[derive(Debug, Clone, Copy)]
struct Mode {
    provider: Provider,
    stream: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        provider: Provider::Anthropic,
        stream: true,
    },
    Mode {
        provider: Provider::Anthropic,
        stream: false,
    },
    Mode {
        provider: Provider::OpenAi,
        stream: true,
    },
    Mode {
        provider: Provider::OpenAi,
        stream: false,
    },
];

/// Runs `case` for every mode concurrently (each case starts its own server).
async fn in_every_mode<F, Fut>(case: F)
where
    F: Fn(Mode) -> Fut,
    Fut: Future<Output = ()>,
{
    join_all(MODES.map(case)).await;
}

/// Timeouts and retries a fault test needs instead of the server's defaults.
struct Tuning {
    retry: RetryPolicy,
    request_timeout: Duration,
    idle_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            retry: fast_retry(),
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(10),
        }
    }
}

impl Mode {
    fn client(self, server: &FakeServer) -> Arc<dyn Model> {
        server.model(self.provider, self.stream)
    }

    fn tuned_client(self, server: &FakeServer, tuning: Tuning) -> Arc<dyn Model> {
        match self.provider {
            Provider::Anthropic => {
                let mut config = server.anthropic_config(self.stream);
                config.retry = tuning.retry;
                config.request_timeout = tuning.request_timeout;
                config.idle_timeout = tuning.idle_timeout;
                Arc::new(AnthropicClient::new(config).expect("client"))
            }
            Provider::OpenAi => {
                let mut config = server.openai_config(self.stream);
                config.retry = tuning.retry;
                config.request_timeout = tuning.request_timeout;
                config.idle_timeout = tuning.idle_timeout;
                Arc::new(OpenAiClient::new(config).expect("client"))
            }
        }
    }

    fn endpoint(self) -> Endpoint {
        match self.provider {
            Provider::Anthropic => Endpoint::Anthropic,
            Provider::OpenAi => Endpoint::OpenAi,
        }
    }
}

fn tools() -> Vec<ToolSpec> {
    let tool = |name: &str, description: &str, property: &str| ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {property: {"type": "string"}},
            "required": [property],
        }),
    };
    vec![
        tool("read_file", "Read a file", "path"),
        tool("grep", "Search files", "pattern"),
        tool("write_file", "Write a file", "path"),
    ]
}

fn request(messages: Vec<Message>) -> Request {
    Request {
        model: "test-model".to_owned(),
        system: "You are a careful engineer.".to_owned(),
        messages,
        tools: tools(),
        max_tokens: 1024,
        cache: Default::default(),
    }
}

fn first_request() -> Request {
    request(vec![Message::user_text(
        "Rename Config::load to Config::open.",
    )])
}

/// Runs one turn, collecting the retry notices.
async fn complete(
    model: &dyn Model,
    request: &Request,
) -> (Result<Response, ModelError>, Vec<RetryNotice>) {
    complete_with(model, request, &CancellationToken::new()).await
}

async fn complete_with(
    model: &dyn Model,
    request: &Request,
    cancel: &CancellationToken,
) -> (Result<Response, ModelError>, Vec<RetryNotice>) {
    let (result, notices) = complete_noticing(model, request, cancel).await;
    let retries = notices
        .into_iter()
        .filter_map(|notice| match notice {
            ModelNotice::Retry(retry) => Some(retry),
            ModelNotice::Waiting(_) => None,
        })
        .collect();
    (result, retries)
}

/// Runs one turn, collecting every notice (waits and retries).
async fn complete_noticing(
    model: &dyn Model,
    request: &Request,
    cancel: &CancellationToken,
) -> (Result<Response, ModelError>, Vec<ModelNotice>) {
    let notices = Mutex::new(Vec::new());
    let result = model
        .complete(request, cancel, &|notice| {
            notices.lock().expect("notices").push(notice)
        })
        .await;
    (result, notices.into_inner().expect("notices"))
}

fn assistant(content: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::Assistant,
        content,
    }
}

fn text(text: &str) -> ContentBlock {
    ContentBlock::Text {
        text: text.to_owned(),
    }
}

fn tool_use(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    }
}

fn tool_result(id: &str, content: &str, is_error: bool) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: id.to_owned(),
        content: content.to_owned(),
        is_error,
    }
}

fn a_long_text() -> Turn {
    Turn::text("All call sites are renamed; the tests pass.")
}

#[tokio::test]
async fn parallel_tool_calls_round_trip_in_every_mode() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_script(vec![
            Turn::text("Let me look.")
                .tool_use("call_a", "read_file", json!({"path": "src/config.rs"}))
                .tool_use("call_b", "grep", json!({"pattern": "Config::load"}))
                .usage(120, 30, 0, 0)
                .into(),
            Turn::text("Renamed in 3 places.")
                .usage(200, 12, 0, 0)
                .into(),
        ])
        .await;
        let model = mode.client(&server);

        let mut history = first_request();
        let (first, _) = complete(model.as_ref(), &history).await;
        let first = first.unwrap_or_else(|err| panic!("{mode:?}: turn 1 failed: {err}"));
        assert_eq!(
            first.message,
            assistant(vec![
                text("Let me look."),
                tool_use("call_a", "read_file", json!({"path": "src/config.rs"})),
                tool_use("call_b", "grep", json!({"pattern": "Config::load"})),
            ]),
            "{mode:?}: both parallel tool calls arrive, in order, with parsed arguments"
        );
        assert_eq!(first.stop_reason, StopReason::ToolUse, "{mode:?}");
        assert_eq!(
            first.request_id.as_deref(),
            Some(server.requests()[0].request_id.as_str()),
            "{mode:?}: the request id header is kept"
        );

        history.messages.push(first.message);
        history.messages.push(Message {
            role: Role::User,
            // Text before the results on purpose: the client must put results first.
            content: vec![
                text("Both tools ran."),
                tool_result("call_a", "pub fn load() {}", false),
                tool_result("call_b", "src/main.rs:3: Config::load()", false),
            ],
        });
        let (second, notices) = complete(model.as_ref(), &history).await;
        let second = second.unwrap_or_else(|err| panic!("{mode:?}: turn 2 failed: {err}"));
        assert_eq!(
            (second.message, second.stop_reason),
            (
                assistant(vec![text("Renamed in 3 places.")]),
                StopReason::EndTurn
            ),
            "{mode:?}: turn 2 is the closing text"
        );
        assert!(notices.is_empty(), "{mode:?}: no retries were needed");

        server.assert_no_violations();
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{mode:?}: one request per turn");
        let second_request = &requests[1];
        assert_eq!(second_request.endpoint, mode.endpoint());
        assert_eq!(second_request.stream(), mode.stream, "{mode:?}");
        assert_eq!(
            second_request.tool_calls(),
            vec![
                ("call_a".to_owned(), "read_file".to_owned()),
                ("call_b".to_owned(), "grep".to_owned())
            ],
            "{mode:?}: the assistant turn is echoed with its call ids"
        );
        assert_eq!(
            second_request.tool_results(),
            vec![
                ("call_a".to_owned(), "pub fn load() {}".to_owned()),
                (
                    "call_b".to_owned(),
                    "src/main.rs:3: Config::load()".to_owned()
                ),
            ],
            "{mode:?}: every result is sent, paired with its call id, in order"
        );
        assert_eq!(
            second_request.system_text(),
            "You are a careful engineer.",
            "{mode:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn rate_limit_waits_at_least_retry_after() {
    in_every_mode(|mode| async move {
        let server =
            FakeServer::with_script(vec![Reply::rate_limited(1), a_long_text().into()]).await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        assert!(result.is_ok(), "{mode:?}: 429 is retried: {result:?}");
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{mode:?}: one retry");
        let gap = requests[1].received_at - requests[0].received_at;
        assert!(
            gap >= Duration::from_secs(1),
            "{mode:?}: the retry came {gap:?} after the 429, before retry-after: 1"
        );
        assert_eq!(notices.len(), 1, "{mode:?}");
        assert!(
            notices[0].attempt == 1 && notices[0].delay >= Duration::from_secs(1),
            "{mode:?}: the notice announces the wait: {:?}",
            notices[0]
        );
        server.assert_no_violations();
    })
    .await;
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried_then_succeed() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_script(vec![
            Reply::overloaded(),
            Reply::error(500, "api_error", "Internal server error"),
            a_long_text().into(),
        ])
        .await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        let response = result.unwrap_or_else(|err| panic!("{mode:?}: {err}"));
        assert_eq!(
            response.message,
            assistant(vec![text("All call sites are renamed; the tests pass.")])
        );
        assert_eq!(server.requests().len(), 3, "{mode:?}: 529, 500, success");
        assert_eq!(
            notices.iter().map(|n| n.attempt).collect::<Vec<_>>(),
            vec![1, 2],
            "{mode:?}: each retry is announced"
        );
        server.assert_no_violations();
    })
    .await;
}

#[tokio::test]
async fn overloaded_forever_exhausts_retries() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_responder(|_| Reply::overloaded()).await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        let max_retries = fast_retry().max_retries;
        match result {
            Err(ModelError::RetriesExhausted { attempts, last }) => {
                assert_eq!(attempts, max_retries + 1, "{mode:?}");
                let api = last
                    .api_error()
                    .expect("the last error is the API's answer");
                assert_eq!(
                    (api.status, api.error_type.as_deref()),
                    (529, Some("overloaded_error"))
                );
            }
            other => panic!("{mode:?}: expected RetriesExhausted, got {other:?}"),
        }
        assert_eq!(
            server.requests().len() as u32,
            max_retries + 1,
            "{mode:?}: exactly max_retries + 1 requests"
        );
        assert_eq!(notices.len() as u32, max_retries, "{mode:?}");
    })
    .await;
}

#[tokio::test]
async fn client_errors_are_never_retried_and_say_what_the_api_said() {
    in_every_mode(|mode| async move {
        let cases = [
            (400, "invalid_request_error", "max_tokens: too large"),
            (
                401,
                "authentication_error",
                &*format!("invalid x-api-key {TEST_API_KEY}"),
            ),
            (403, "permission_error", "not allowed"),
            (404, "not_found_error", "model: test-model"),
            (413, "request_too_large", "Request exceeds the maximum size"),
        ];
        for (status, kind, message) in cases {
            let server = FakeServer::with_script(vec![Reply::error(status, kind, message)]).await;
            let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
            let requests = server.requests();
            assert_eq!(requests.len(), 1, "{mode:?}: {status} is never retried");
            assert!(notices.is_empty(), "{mode:?}: {status}");
            let Err(ModelError::Api(api)) = &result else {
                panic!("{mode:?}: expected an API error for {status}, got {result:?}");
            };
            assert_eq!(
                (
                    api.status,
                    api.error_type.as_deref(),
                    api.request_id.as_deref()
                ),
                (status, Some(kind), Some(requests[0].request_id.as_str())),
                "{mode:?}: status, type and request id are reported"
            );
            let shown = format!("{} {:?}", result.as_ref().expect_err("error"), result);
            assert!(
                !shown.contains(TEST_API_KEY),
                "{mode:?}: the API key never appears in an error: {shown}"
            );
            let expected_message = message.replace(TEST_API_KEY, "[redacted]");
            assert_eq!(api.message, expected_message, "{mode:?}: the API's message");
        }
    })
    .await;
}

#[tokio::test]
async fn spend_limit_429_is_not_retried() {
    in_every_mode(|mode| async move {
        let reply = match mode.provider {
            Provider::Anthropic => Reply::error(
                429,
                "rate_limit_error",
                "You have reached your specified API usage limits. You will regain access on 2026-12-01.",
            ),
            Provider::OpenAi => Reply::error(
                429,
                "insufficient_quota",
                "You exceeded your current quota, please check your plan and billing details.",
            ),
        };
        let server = FakeServer::with_script(vec![reply.with_header("retry-after", "1")]).await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        assert!(
            matches!(&result, Err(ModelError::Api(api)) if api.status == 429),
            "{mode:?}: the spend limit is reported as is: {result:?}"
        );
        assert_eq!(server.requests().len(), 1, "{mode:?}: no retry");
        assert!(notices.is_empty(), "{mode:?}");
    })
    .await;
}

#[tokio::test]
async fn error_event_mid_stream_retries_the_whole_turn() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_script(vec![
            Reply::ErrorEvent {
                turn: a_long_text(),
                error_type: "overloaded_error".to_owned(),
                message: "Overloaded".to_owned(),
            },
            a_long_text().into(),
        ])
        .await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        let response = result.unwrap_or_else(|err| panic!("{mode:?}: {err}"));
        assert_eq!(
            response.message,
            assistant(vec![text("All call sites are renamed; the tests pass.")]),
            "{mode:?}: the retried turn is whole, nothing of the failed one kept"
        );
        assert_eq!(server.requests().len(), 2, "{mode:?}");
        assert_eq!(notices.len(), 1, "{mode:?}");
        assert!(
            notices[0].reason.contains("Overloaded"),
            "{mode:?}: the reason quotes the API: {}",
            notices[0].reason
        );
        server.assert_no_violations();
    })
    .await;
}

#[tokio::test]
async fn cut_stream_retries_the_whole_turn() {
    in_every_mode(|mode| async move {
        let turn = Turn::text("Starting the edit now.").tool_use(
            "call_w",
            "write_file",
            json!({"path": "src/config.rs"}),
        );
        let server =
            FakeServer::with_script(vec![Reply::Cut(turn.clone()), turn.clone().into()]).await;
        let (result, notices) = complete(mode.client(&server).as_ref(), &first_request()).await;
        let response = result.unwrap_or_else(|err| panic!("{mode:?}: {err}"));
        assert_eq!(
            response.message,
            assistant(vec![
                text("Starting the edit now."),
                tool_use("call_w", "write_file", json!({"path": "src/config.rs"})),
            ]),
            "{mode:?}"
        );
        assert_eq!(
            server.requests().len(),
            2,
            "{mode:?}: the cut attempt and its retry"
        );
        assert_eq!(notices.len(), 1, "{mode:?}");
        server.assert_no_violations();
    })
    .await;
}

#[tokio::test]
async fn malformed_tool_arguments_are_kept_raw_and_sent_back_as_a_record() {
    in_every_mode(|mode| async move {
        let raw = r#"{"path": "src/a.rs", "content": "unterminated"#;
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use_raw("call_bad", "write_file", raw)
                .into(),
            Turn::text("Sorry, fixed.").into(),
        ])
        .await;
        let model = mode.client(&server);
        let mut history = first_request();
        let (first, _) = complete(model.as_ref(), &history).await;
        let first = first.unwrap_or_else(|err| panic!("{mode:?}: {err}"));
        assert_eq!(
            first.message,
            assistant(vec![tool_use(
                "call_bad",
                "write_file",
                Value::String(raw.to_owned())
            )]),
            "{mode:?}: invalid JSON arguments are kept verbatim as a string"
        );

        history.messages.push(first.message);
        history.messages.push(Message {
            role: Role::User,
            content: vec![tool_result(
                "call_bad",
                "the arguments are not valid JSON",
                true,
            )],
        });
        let (second, _) = complete(model.as_ref(), &history).await;
        assert!(second.is_ok(), "{mode:?}: {second:?}");
        server.assert_no_violations();
        let echoed = &server.requests()[1];
        let sent_back = match mode.provider {
            Provider::Anthropic => echoed.messages()[1]["content"][0]["input"].clone(),
            Provider::OpenAi => serde_json::from_str(
                echoed.messages()[2]["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap(),
        };
        assert_eq!(
            sent_back,
            json!({ "unparsed_arguments": raw }),
            "{mode:?}: the history never echoes text that is not a JSON object as arguments; \
             it sends an object recording the model's exact text"
        );
    })
    .await;
}

#[tokio::test]
async fn stalled_responses_time_out_and_are_retried() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_responder(|_| Reply::Stall(a_long_text())).await;
        let tuning = Tuning {
            retry: RetryPolicy {
                max_retries: 1,
                ..fast_retry()
            },
            request_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
        };
        let (result, notices) = complete(
            mode.tuned_client(&server, tuning).as_ref(),
            &first_request(),
        )
        .await;
        let Err(ModelError::RetriesExhausted { attempts, last }) = &result else {
            panic!("{mode:?}: expected RetriesExhausted, got {result:?}");
        };
        assert_eq!(*attempts, 2, "{mode:?}");
        if mode.stream {
            assert!(
                matches!(**last, ModelError::Stream(ref why) if why.contains("idle")),
                "{mode:?}: a silent stream is an idle-timeout stream error: {last:?}"
            );
        } else {
            assert!(
                matches!(**last, ModelError::Timeout { .. }),
                "{mode:?}: a body that never comes is a request timeout: {last:?}"
            );
        }
        // The client's count is the invariant; on a loaded machine the retry's request
        // may time out before the server has read it, so the server sees one or two.
        let seen = server.requests().len();
        assert!((1..=2).contains(&seen), "{mode:?}: the server saw {seen}");
        assert_eq!(notices.len(), 1, "{mode:?}");
    })
    .await;
}

#[tokio::test]
async fn slow_but_live_streams_are_not_idle() {
    in_every_mode(|mode| async move {
        let long_text = "A long answer, streamed slowly in many small frames, so that the \
                         whole stream lasts well beyond the idle timeout while no single \
                         gap between two frames comes anywhere near it.";
        let gap = Duration::from_millis(20);
        let idle_timeout = Duration::from_millis(400);
        let server = FakeServer::with_script(vec![Reply::Slow {
            turn: Turn::text(long_text),
            gap,
        }])
        .await;
        let tuning = Tuning {
            idle_timeout,
            ..Tuning::default()
        };
        let started = std::time::Instant::now();
        let (result, notices) = complete(
            mode.tuned_client(&server, tuning).as_ref(),
            &first_request(),
        )
        .await;
        let response = result.unwrap_or_else(|err| panic!("{mode:?}: {err}"));
        assert_eq!(
            response.message,
            assistant(vec![text(long_text)]),
            "{mode:?}"
        );
        assert!(notices.is_empty(), "{mode:?}: no retry for a live stream");
        if mode.stream {
            // Sleeps only ever overshoot, so this holds on any machine: the timeout
            // measured silence, not the length of the whole stream.
            assert!(
                started.elapsed() > idle_timeout,
                "{mode:?}: the stream outlasted the idle timeout"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn unreachable_servers_are_retried_then_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let config = AnthropicConfig {
        retry: RetryPolicy {
            max_retries: 2,
            ..fast_retry()
        },
        ..AnthropicConfig::new(format!("http://{address}"), TEST_API_KEY)
    };
    let model = AnthropicClient::new(config).expect("client");
    let (result, notices) = complete(&model, &first_request()).await;
    let Err(ModelError::RetriesExhausted { attempts, last }) = &result else {
        panic!("expected RetriesExhausted, got {result:?}");
    };
    assert_eq!(*attempts, 3, "connection errors are retried");
    assert!(
        matches!(**last, ModelError::Transport { ref url, .. } if url.ends_with("/v1/messages")),
        "the error names where grove tried to connect: {last:?}"
    );
    assert_eq!(notices.len(), 2);
}

#[tokio::test]
async fn cancellation_aborts_a_request_at_once() {
    in_every_mode(|mode| async move {
        let server = FakeServer::with_responder(|_| Reply::Hang).await;
        let tuning = Tuning {
            request_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3600),
            ..Tuning::default()
        };
        let model = mode.tuned_client(&server, tuning);
        let cancel = CancellationToken::new();
        let request = first_request();
        let turn = complete_with(model.as_ref(), &request, &cancel);
        let cancel_once_sent = async {
            while server.requests().is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            cancel.cancel();
        };
        // The bound only keeps a broken build from hanging the suite; the request
        // itself would wait an hour.
        let ((result, notices), ()) = tokio::time::timeout(
            Duration::from_secs(30),
            futures_util::future::join(turn, cancel_once_sent),
        )
        .await
        .expect("cancellation ends the turn");
        assert!(
            matches!(result, Err(ModelError::Cancelled)),
            "{mode:?}: {result:?}"
        );
        assert!(
            notices.is_empty(),
            "{mode:?}: a cancelled turn is not retried"
        );
        assert_eq!(server.requests().len(), 1, "{mode:?}");
    })
    .await;
}

#[tokio::test]
async fn usage_is_parsed_including_cache_counts() {
    in_every_mode(|mode| async move {
        let server =
            FakeServer::with_script(vec![a_long_text().usage(100, 20, 300, 40).into()]).await;
        let (result, _) = complete(mode.client(&server).as_ref(), &first_request()).await;
        let usage = result.unwrap_or_else(|err| panic!("{mode:?}: {err}")).usage;
        let expected = match mode.provider {
            Provider::Anthropic => Usage {
                input_tokens: 100,
                output_tokens: 20,
                cache_read_input_tokens: 300,
                cache_creation_input_tokens: 40,
                cache_creation_1h_input_tokens: 0,
            },
            // prompt_tokens = 440 with 300 cached: OpenAI has no cache-write count.
            Provider::OpenAi => Usage {
                input_tokens: 140,
                output_tokens: 20,
                cache_read_input_tokens: 300,
                cache_creation_input_tokens: 0,
                cache_creation_1h_input_tokens: 0,
            },
        };
        assert_eq!(usage, expected, "{mode:?}");
    })
    .await;
}

#[tokio::test]
async fn every_stop_reason_is_mapped() {
    in_every_mode(|mode| async move {
        let cases: Vec<(&str, StopReason)> = match mode.provider {
            Provider::Anthropic => vec![
                ("end_turn", StopReason::EndTurn),
                ("tool_use", StopReason::ToolUse),
                ("max_tokens", StopReason::MaxTokens),
                ("stop_sequence", StopReason::StopSequence),
                ("pause_turn", StopReason::PauseTurn),
                ("refusal", StopReason::Refusal),
                ("brand_new", StopReason::Other("brand_new".to_owned())),
            ],
            Provider::OpenAi => vec![
                ("stop", StopReason::EndTurn),
                ("tool_calls", StopReason::ToolUse),
                ("length", StopReason::MaxTokens),
                ("content_filter", StopReason::Refusal),
                ("brand_new", StopReason::Other("brand_new".to_owned())),
            ],
        };
        let server = FakeServer::with_script(
            cases
                .iter()
                .map(|(wire, _)| a_long_text().stop(wire).into())
                .collect(),
        )
        .await;
        let model = mode.client(&server);
        for (wire, expected) in cases {
            let (result, _) = complete(model.as_ref(), &first_request()).await;
            let response = result.unwrap_or_else(|err| panic!("{mode:?} {wire}: {err}"));
            assert_eq!(response.stop_reason, expected, "{mode:?}: {wire}");
        }
        server.assert_no_violations();
    })
    .await;
}

fn count_cache_controls(value: &Value) -> usize {
    match value {
        Value::Object(map) => {
            usize::from(map.contains_key("cache_control"))
                + map.values().map(count_cache_controls).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_cache_controls).sum(),
        _ => 0,
    }
}

fn prefix_before_messages(request: &RecordedRequest) -> &str {
    let end = request
        .raw_body
        .find("\"messages\"")
        .expect("the body has messages");
    &request.raw_body[..end]
}

#[tokio::test]
async fn anthropic_cache_breakpoints_sit_on_the_stable_prefix() {
    for stream in [true, false] {
        let mode = Mode {
            provider: Provider::Anthropic,
            stream,
        };
        let server = FakeServer::with_script(vec![
            Turn::new()
                .tool_use("call_1", "grep", json!({"pattern": "x"}))
                .into(),
            Turn::text("done").into(),
        ])
        .await;
        let model = mode.client(&server);
        let mut history = first_request();
        let (first, _) = complete(model.as_ref(), &history).await;
        history.messages.push(
            first
                .unwrap_or_else(|err| panic!("{mode:?}: {err}"))
                .message,
        );
        history.messages.push(Message {
            role: Role::User,
            content: vec![tool_result("call_1", "no matches", false)],
        });
        // The registry may list tools in any order; the cached prefix must not care.
        history.tools.reverse();
        let (second, _) = complete(model.as_ref(), &history).await;
        assert!(second.is_ok(), "{mode:?}: {second:?}");
        server.assert_no_violations();

        let requests = server.requests();
        for (turn, recorded) in requests.iter().enumerate() {
            let body = &recorded.body;
            assert_eq!(
                count_cache_controls(body),
                3,
                "{mode:?} turn {turn}: last tool, system, newest block — never more than 4"
            );
            let tools = body["tools"].as_array().expect("tools");
            let marked: Vec<bool> = tools
                .iter()
                .map(|tool| tool.get("cache_control").is_some())
                .collect();
            assert_eq!(
                marked,
                vec![false, false, true],
                "{mode:?} turn {turn}: only the last tool"
            );
            assert_eq!(
                body["system"],
                json!([{"type": "text", "text": "You are a careful engineer.", "cache_control": {"type": "ephemeral"}}]),
                "{mode:?} turn {turn}: the system prompt is a cached text block"
            );
            let messages = recorded.messages();
            for (index, message) in messages.iter().enumerate() {
                let blocks = message["content"].as_array().expect("content blocks");
                for (position, block) in blocks.iter().enumerate() {
                    let newest = index == messages.len() - 1 && position == blocks.len() - 1;
                    assert_eq!(
                        block.get("cache_control").is_some(),
                        newest,
                        "{mode:?} turn {turn}: only the newest message's last block is marked \
                         (message {index}, block {position})"
                    );
                }
            }
        }
        assert_eq!(
            prefix_before_messages(&requests[0]),
            prefix_before_messages(&requests[1]),
            "{mode:?}: tools + system are byte-identical across turns"
        );
    }
}

#[tokio::test]
async fn responder_routes_concurrent_requests_by_content() {
    let server = FakeServer::with_responder(|request| {
        Turn::text(format!("reply to {}", request.last_user_text())).into()
    })
    .await;
    let model = Mode {
        provider: Provider::Anthropic,
        stream: true,
    }
    .client(&server);
    let asks = ["first", "second", "third"].map(|ask| {
        let model = Arc::clone(&model);
        async move {
            let (result, _) =
                complete(model.as_ref(), &request(vec![Message::user_text(ask)])).await;
            result.expect("turn").message.text()
        }
    });
    assert_eq!(
        join_all(asks).await,
        vec!["reply to first", "reply to second", "reply to third"],
        "each concurrent agent gets the answer routed to it"
    );
    server.assert_no_violations();
}

#[tokio::test]
async fn local_openai_server_needs_no_key() {
    let server = FakeServer::with_script(vec![a_long_text().into()]).await;
    server.require_openai_auth(false);
    let config = OpenAiConfig {
        api_key: String::new(),
        ..server.openai_config(true)
    };
    let model = OpenAiClient::new(config).expect("an empty key is fine off api.openai.com");
    let (result, _) = complete(&model, &first_request()).await;
    assert!(result.is_ok(), "{result:?}");
    let requests = server.requests();
    assert_eq!(
        requests[0].header("authorization"),
        None,
        "no Authorization header without a key"
    );
    server.assert_no_violations();
}

#[tokio::test]
async fn openai_reasoning_models_are_sent_the_fields_they_take() {
    let models = ["gpt-4.1", "gpt-5.5", "gpt-6.1-sol"];
    let server =
        FakeServer::with_script(models.iter().map(|_| Reply::from(a_long_text())).collect()).await;
    let model = Mode {
        provider: Provider::OpenAi,
        stream: true,
    }
    .client(&server);
    for name in models {
        let asked = Request {
            model: name.to_owned(),
            ..first_request()
        };
        let (result, _) = complete(model.as_ref(), &asked).await;
        assert!(result.is_ok(), "{name}: {result:?}");
    }
    server.assert_no_violations();
    let sent: Vec<(Value, Value, Value)> = server
        .requests()
        .iter()
        .map(|request| {
            let body: Value = serde_json::from_str(&request.raw_body).unwrap();
            (
                body["max_tokens"].clone(),
                body["max_completion_tokens"].clone(),
                body["reasoning_effort"].clone(),
            )
        })
        .collect();
    let bound = json!(first_request().max_tokens);
    assert_eq!(
        sent,
        vec![
            (bound.clone(), Value::Null, Value::Null),
            (Value::Null, bound.clone(), Value::Null),
            (Value::Null, bound, json!("none")),
        ],
        "GPT-4.1 takes max_tokens; GPT-5 on refuse it for max_completion_tokens; from \
         GPT-5.6 on, function tools on chat completions need reasoning_effort none (the \
         fake server refuses otherwise, as the real API does)"
    );
}

#[tokio::test]
async fn unreadable_error_bodies_are_quoted() {
    let server = FakeServer::with_script(vec![Reply::Raw {
        status: 404,
        body: "<html><body>no such route</body></html>".to_owned(),
        headers: Vec::new(),
    }])
    .await;
    let model = Mode {
        provider: Provider::OpenAi,
        stream: true,
    }
    .client(&server);
    let (result, _) = complete(model.as_ref(), &first_request()).await;
    let Err(ModelError::Api(api)) = result else {
        panic!("expected an API error, got {result:?}");
    };
    assert_eq!(
        (api.status, api.error_type, api.message.as_str()),
        (404, None, "<html><body>no such route</body></html>"),
        "a non-JSON body is quoted as the message"
    );
}

/// Posts `body` to the fake server as a client would, returning the status.
async fn post_raw(server: &FakeServer, endpoint: Endpoint, body: Value) -> u16 {
    let client = reqwest::Client::new();
    let builder = match endpoint {
        Endpoint::Anthropic => client
            .post(format!("{}/v1/messages", server.url()))
            .header("x-api-key", TEST_API_KEY)
            .header("anthropic-version", "2023-06-01"),
        Endpoint::OpenAi => client
            .post(format!("{}/chat/completions", server.openai_url()))
            .bearer_auth(TEST_API_KEY),
        other => panic!("post_raw speaks grove's own APIs, not {other:?}"),
    };
    builder
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the fake server answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn fake_server_rejects_what_the_real_apis_reject() {
    let user = json!({"role": "user", "content": "hi"});
    let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "grep", "input": {}}]});
    let anthropic_cases = [
        (
            "no messages",
            json!({"model": "m", "max_tokens": 5, "messages": []}),
        ),
        ("no max_tokens", json!({"model": "m", "messages": [user]})),
        (
            "assistant first",
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": "x"}]}),
        ),
        (
            "roles do not alternate",
            json!({"model": "m", "max_tokens": 5, "messages": [user, user]}),
        ),
        (
            "bad tool name",
            json!({"model": "m", "max_tokens": 5, "messages": [user], "tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}),
        ),
        (
            "schema not an object schema",
            json!({"model": "m", "max_tokens": 5, "messages": [user], "tools": [{"name": "t", "input_schema": {"type": "string"}}]}),
        ),
        (
            "tool_use unanswered",
            json!({"model": "m", "max_tokens": 5, "messages": [user, call, {"role": "user", "content": "and?"}]}),
        ),
        (
            "tool_result not first",
            json!({"model": "m", "max_tokens": 5, "messages": [user, call, {"role": "user", "content": [
                {"type": "text", "text": "here"},
                {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]}]}),
        ),
        (
            "tool_result without tool_use",
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "nope", "content": "r"}]}]}),
        ),
        (
            "five cache breakpoints",
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "1", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "2", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "3", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "4", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "5", "cache_control": {"type": "ephemeral"}}]}]}),
        ),
    ];
    let openai_call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]});
    let openai_cases = [
        ("no model", json!({"max_tokens": 5, "messages": [user]})),
        (
            "call unanswered",
            json!({"model": "m", "max_tokens": 5, "messages": [user, openai_call, {"role": "user", "content": "and?"}]}),
        ),
        (
            "tool message without call",
            json!({"model": "m", "max_tokens": 5, "messages": [user, {"role": "tool", "tool_call_id": "zz", "content": "r"}]}),
        ),
        (
            "arguments not a string",
            json!({"model": "m", "max_tokens": 5, "messages": [user, {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "grep", "arguments": {}}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "r"}]}),
        ),
        (
            "stream_options without stream",
            json!({"model": "m", "max_tokens": 5, "messages": [user], "stream_options": {"include_usage": true}}),
        ),
    ];
    let cases = anthropic_cases
        .into_iter()
        .map(|(name, body)| (Endpoint::Anthropic, name, body))
        .chain(
            openai_cases
                .into_iter()
                .map(|(name, body)| (Endpoint::OpenAi, name, body)),
        );
    for (endpoint, name, body) in cases {
        let server = FakeServer::with_script(vec![a_long_text().into()]).await;
        let status = post_raw(&server, endpoint, body).await;
        assert_eq!(
            status, 400,
            "{endpoint:?} {name}: answered like the real API"
        );
        assert!(
            !server.violations().is_empty(),
            "{endpoint:?} {name}: the violation is recorded"
        );
    }

    let server = FakeServer::start().await;
    let unauthenticated = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.url()))
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(json!({"model": "m", "max_tokens": 5, "messages": [user]}).to_string())
        .send()
        .await
        .expect("answer");
    assert_eq!(
        unauthenticated.status().as_u16(),
        401,
        "no x-api-key is a 401"
    );
}
