//! The OpenAI-compatible chat completions client (`POST {base}/chat/completions`): how
//! grove reaches OpenAI, gateways and local servers (llama.cpp, vLLM, Ollama).
//!
//! This module owns the chat-completions wire format in both directions: strict in what
//! it sends, lenient about optional fields in what it reads. It must never retry on its
//! own (every attempt goes through [`RetryPolicy::run`]), never print, and never put the
//! API key anywhere but the `Authorization` header.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::arguments;
use super::client::{Client, ClientConfig, Wire};
use super::http::{self, Delivery, SseEvents};
use super::{ContentBlock, Message, ModelError, Request, Response, Role, StopReason, Usage};

/// The OpenAI-compatible chat completions wire format.
#[derive(Debug, Default, Clone, Copy)]
pub struct OpenAi;

/// How to reach an OpenAI-compatible chat completions API.
pub type OpenAiConfig = ClientConfig<OpenAi>;

/// A [`Model`](super::Model) speaking OpenAI-compatible chat completions.
pub type OpenAiClient = Client<OpenAi>;

#[async_trait]
impl Wire for OpenAi {
    const CONFIG_NAME: &'static str = "OpenAiConfig";
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const BASE_URL_VAR: &'static str = "OPENAI_BASE_URL";
    const KEY_VAR: &'static str = "OPENAI_API_KEY";
    const PATH: &'static str = "/chat/completions";
    const REQUEST_ID_HEADER: &'static str = "x-request-id";

    /// The key may be absent only when the base URL is not api.openai.com (local
    /// servers and gateways without auth).
    fn check_key(base_url: &str, api_key: &str) -> Result<(), ModelError> {
        if api_key.trim().is_empty() && is_official_api(base_url) {
            return Err(ModelError::Config(
                "no OpenAI API key: set OPENAI_API_KEY (it may stay unset only when \
                 OPENAI_BASE_URL points at a local server)"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    fn headers(api_key: &str) -> Result<HeaderMap, ModelError> {
        let mut headers = HeaderMap::new();
        if !api_key.is_empty() {
            let bearer = format!("Bearer {api_key}");
            headers.insert(AUTHORIZATION, http::secret_header(&bearer, Self::KEY_VAR)?);
        }
        Ok(headers)
    }

    fn name(base_url: &str, endpoint: &reqwest::Url) -> String {
        if is_official_api(base_url) {
            return "openai".to_owned();
        }
        match (endpoint.host_str(), endpoint.port()) {
            (Some(host), Some(port)) => format!("openai@{host}:{port}"),
            (Some(host), None) => format!("openai@{host}"),
            _ => "openai".to_owned(),
        }
    }

    /// The wire has no breakpoints: its cache is automatic, steered by
    /// `prompt_cache_key`, so `ttl` has nothing to change.
    fn encode(
        request: &Request,
        delivery: Delivery,
        _ttl: super::CacheTtl,
    ) -> Result<Vec<u8>, ModelError> {
        encode_request(request, delivery)
    }

    fn decode(body: &[u8], secret: &str) -> Result<Response, ModelError> {
        decode_response(body, secret)
    }

    async fn read_stream(events: &mut SseEvents<'_>, secret: &str) -> Result<Response, ModelError> {
        read_stream(events, secret).await
    }
}

fn is_official_api(base_url: &str) -> bool {
    reqwest::Url::parse(base_url.trim())
        .ok()
        .and_then(|url| url.host_str().map(str::to_ascii_lowercase))
        .is_some_and(|host| host == "api.openai.com")
}

// ---------------------------------------------------------------------------------------
// Request encoding

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    /// `"auto"` whenever tools are offered. It is the API's default, but some
    /// OpenAI-compatible servers (llama-cpp-python's `chatml-function-calling`) leave
    /// the tools out of the prompt entirely unless it is sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    /// The request's cache group (one role of one run): OpenAI routes requests with
    /// one key to the same cache, so siblings read the prefix the first one wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: String,
    },
    Assistant {
        /// Empty when the turn was only tool calls. The API itself answers `null` there,
        /// but llama-cpp-python's server refuses both a `null` and a missing content
        /// with a 500, while every server accepts an empty string.
        content: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCall<'a>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    name: &'a str,
    arguments: String,
}

fn joined_text(blocks: &[ContentBlock]) -> String {
    let mut text = String::new();
    for block in blocks {
        if let ContentBlock::Text { text: piece } = block {
            if piece.is_empty() {
                continue;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(piece);
        }
    }
    text
}

/// Encodes `request` as a chat completions body.
pub(crate) fn encode_request(request: &Request, delivery: Delivery) -> Result<Vec<u8>, ModelError> {
    let stream = delivery.is_streamed();
    if request.messages.is_empty() {
        return Err(ModelError::InvalidRequest(
            "a request needs at least one message".to_owned(),
        ));
    }
    let mut tools: Vec<&super::ToolSpec> = request.tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut seen = HashSet::new();
    for tool in &tools {
        if !seen.insert(tool.name.as_str()) {
            return Err(ModelError::InvalidRequest(format!(
                "tool {:?} is defined twice",
                tool.name
            )));
        }
    }
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(WireMessage::System {
            content: &request.system,
        });
    }
    for (index, message) in request.messages.iter().enumerate() {
        encode_message(index, message, &mut messages)?;
    }
    let wire = WireRequest {
        model: &request.model,
        max_tokens: request.max_tokens,
        tool_choice: (!tools.is_empty()).then_some("auto"),
        tools: tools
            .iter()
            .map(|tool| WireTool {
                kind: "function",
                function: WireFunction {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.input_schema,
                },
            })
            .collect(),
        messages,
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
        prompt_cache_key: request.cache.key.as_deref(),
    };
    serde_json::to_vec(&wire)
        .map_err(|err| ModelError::InvalidRequest(format!("could not encode the request: {err}")))
}

/// The content of a `tool` message. The format has no error flag, so a failed call
/// says so in words (unless its text already opens with "error"): the model must not
/// mistake a failure for output.
fn tool_content(content: &str, is_error: bool) -> Cow<'_, str> {
    let already_says_so = content
        .get(..5)
        .is_some_and(|head| head.eq_ignore_ascii_case("error"));
    if is_error && !already_says_so {
        Cow::Owned(format!("Error: {content}"))
    } else {
        Cow::Borrowed(content)
    }
}

fn encode_message<'a>(
    index: usize,
    message: &'a Message,
    out: &mut Vec<WireMessage<'a>>,
) -> Result<(), ModelError> {
    let text = joined_text(&message.content);
    match message.role {
        Role::User => {
            let before = out.len();
            // One `tool` message per result, in order, before any user text: the API
            // wants every call answered right after the assistant turn that made it.
            for block in &message.content {
                if let ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } = block
                {
                    out.push(WireMessage::Tool {
                        tool_call_id: tool_use_id,
                        content: tool_content(content, *is_error),
                    });
                }
            }
            if !text.is_empty() {
                out.push(WireMessage::User { content: text });
            }
            if out.len() == before {
                return Err(ModelError::InvalidRequest(format!(
                    "message {index} (user) has no content to send"
                )));
            }
        }
        Role::Assistant => {
            let tool_calls: Vec<WireToolCall<'_>> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::ToolUse { id, name, input } => Some(WireToolCall {
                        id,
                        kind: "function",
                        function: WireCall {
                            name,
                            arguments: arguments::for_history(input).to_string(),
                        },
                    }),
                    _ => None,
                })
                .collect();
            out.push(WireMessage::Assistant {
                content: text,
                tool_calls,
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Response decoding

#[derive(Deserialize, Default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize, Default)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0).saturating_sub(cached),
            output_tokens: self.completion_tokens.unwrap_or(0),
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
        }
    }
}

/// Maps `finish_reason`; `None` (servers that omit it) is inferred from the content.
pub fn finish_reason(wire: Option<&str>, has_tool_calls: bool) -> StopReason {
    match wire {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
        None if has_tool_calls => StopReason::ToolUse,
        None => StopReason::EndTurn,
    }
}

/// An id for a tool call the server sent without one, unique within the response.
fn fallback_call_id(position: usize) -> String {
    format!("call_{position}")
}

fn assemble(
    text: String,
    calls: Vec<ContentBlock>,
    reason: Option<&str>,
    usage: Usage,
) -> Response {
    let stop_reason = finish_reason(reason, !calls.is_empty());
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }
    content.extend(calls);
    Response {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason,
        usage,
        request_id: None,
    }
}

fn error_in_body(value: &Value, secret: &str) -> Option<String> {
    let error = value.get("error")?;
    if error.is_null() {
        return None;
    }
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    Some(http::redact(&message, secret))
}

/// Parses a non-streaming `chat.completion` body.
pub(crate) fn decode_response(body: &[u8], secret: &str) -> Result<Response, ModelError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| ModelError::Decode(format!("the response body is not JSON: {err}")))?;
    if let Some(message) = error_in_body(&value, secret) {
        return Err(ModelError::Stream(format!(
            "the server answered 200 with an error: {message}"
        )));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| ModelError::Decode(format!("the response has no choices: {value}")))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let text = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut calls = Vec::new();
    for (position, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
            .ok_or_else(|| ModelError::Decode(format!("a tool call has no name: {call}")))?;
        calls.push(ContentBlock::ToolUse {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map_or_else(|| fallback_call_id(position), str::to_owned),
            name: name.to_owned(),
            input: arguments::from_value(function.get("arguments")),
        });
    }
    let usage = match value.get("usage") {
        Some(usage) if !usage.is_null() => usage_from(usage)?.to_usage(),
        _ => Usage::default(),
    };
    Ok(assemble(
        text,
        calls,
        choice.get("finish_reason").and_then(Value::as_str),
        usage,
    ))
}

fn usage_from(value: &Value) -> Result<WireUsage, ModelError> {
    WireUsage::deserialize(value)
        .map_err(|err| ModelError::Decode(format!("unreadable usage {value}: {err}")))
}

/// A tool call still receiving argument pieces.
#[derive(Default)]
struct OpenCall {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed completion, fed chunk by chunk.
#[derive(Default)]
struct StreamedCompletion {
    text: String,
    calls: BTreeMap<u64, OpenCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
}

impl StreamedCompletion {
    fn apply(&mut self, chunk: &Value, secret: &str) -> Result<(), ModelError> {
        if let Some(message) = error_in_body(chunk, secret) {
            return Err(ModelError::Stream(format!(
                "the server sent an error mid-stream: {message}"
            )));
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| !usage.is_null()) {
            self.usage = Some(usage_from(usage)?.to_usage());
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
        else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(text);
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            // Servers that stream one call at a time sometimes omit the index.
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let open = self.calls.entry(index).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str)
                && open.id.is_empty()
            {
                id.clone_into(&mut open.id);
            }
            let function = call.get("function").unwrap_or(&Value::Null);
            if let Some(name) = function.get("name").and_then(Value::as_str)
                && open.name.is_empty()
            {
                name.clone_into(&mut open.name);
            }
            if let Some(piece) = function.get("arguments").and_then(Value::as_str) {
                open.arguments.push_str(piece);
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Response, ModelError> {
        if !self.done {
            return Err(ModelError::Stream(
                "the stream ended before data: [DONE] (connection cut)".to_owned(),
            ));
        }
        let mut calls = Vec::new();
        for (position, (index, call)) in self.calls.into_iter().enumerate() {
            if call.name.is_empty() {
                return Err(ModelError::Decode(format!(
                    "streamed tool call {index} has no name"
                )));
            }
            calls.push(ContentBlock::ToolUse {
                id: if call.id.is_empty() {
                    fallback_call_id(position)
                } else {
                    call.id
                },
                name: call.name,
                input: arguments::parse(&call.arguments),
            });
        }
        Ok(assemble(
            self.text,
            calls,
            self.finish_reason.as_deref(),
            self.usage.unwrap_or_default(),
        ))
    }
}

async fn read_stream(events: &mut SseEvents<'_>, secret: &str) -> Result<Response, ModelError> {
    let mut completion = StreamedCompletion::default();
    while let Some(event) = events.next().await? {
        let data = event.data.trim();
        if data.is_empty() {
            continue;
        }
        if data == "[DONE]" {
            completion.done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|err| ModelError::Decode(format!("a stream chunk is not JSON: {err}")))?;
        completion.apply(&chunk, secret)?;
    }
    completion.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn streamed_tool_calls_join_per_index() {
        let mut completion = StreamedCompletion::default();
        let chunks = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "grep", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "bash", "arguments": "{\"comm"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"pattern\":1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "and\": \"ls\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 60}}}),
        ];
        for chunk in &chunks {
            completion.apply(chunk, "").unwrap();
        }
        completion.done = true;
        let response = completion.finish().unwrap();
        assert_eq!(
            response,
            Response {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::ToolUse {
                            id: "a".into(),
                            name: "grep".into(),
                            input: json!({"pattern": 1}),
                        },
                        ContentBlock::ToolUse {
                            id: "b".into(),
                            name: "bash".into(),
                            input: json!({"command": "ls"}),
                        },
                    ],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 40,
                    output_tokens: 9,
                    cache_read_input_tokens: 60,
                    cache_creation_input_tokens: 0,
                },
                request_id: None,
            }
        );
    }

    #[test]
    fn lenient_about_optional_fields() {
        let body = json!({"choices": [{"message": {"content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}}]});
        let response = decode_response(body.to_string().as_bytes(), "").unwrap();
        assert_eq!(
            response.message.content,
            vec![ContentBlock::ToolUse {
                id: "call_0".into(),
                name: "f".into(),
                input: Value::String("{oops".into()),
            }],
            "missing id generated, invalid arguments kept raw"
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse, "inferred");
        assert_eq!(response.usage, Usage::default(), "missing usage is zero");
    }

    #[test]
    fn every_finish_reason_is_mapped() {
        let cases = [
            (Some("stop"), StopReason::EndTurn),
            (Some("tool_calls"), StopReason::ToolUse),
            (Some("length"), StopReason::MaxTokens),
            (Some("content_filter"), StopReason::Refusal),
            (
                Some("function_call"),
                StopReason::Other("function_call".into()),
            ),
            (None, StopReason::EndTurn),
        ];
        for (wire, expected) in cases {
            assert_eq!(
                finish_reason(wire, false),
                expected,
                "finish_reason {wire:?}"
            );
        }
    }

    #[test]
    fn encoding_splits_results_into_tool_messages() {
        let request = Request {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::ToolUse {
                            id: "a".into(),
                            name: "f".into(),
                            input: json!({"x": 1}),
                        },
                        ContentBlock::ToolUse {
                            id: "b".into(),
                            name: "f".into(),
                            input: Value::String("{raw".into()),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: "a".into(),
                            content: "A".into(),
                            is_error: false,
                        },
                        ContentBlock::ToolResult {
                            tool_use_id: "b".into(),
                            content: "B".into(),
                            is_error: true,
                        },
                    ],
                },
            ],
            tools: vec![],
            max_tokens: 10,
            cache: crate::model::CacheHints {
                key: Some("grove-r1-worker".into()),
                long_wait: true,
            },
        };
        let body: Value =
            serde_json::from_slice(&encode_request(&request, Delivery::Streamed).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 10,
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
                        {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{\"unparsed_arguments\":\"{raw\"}"}},
                    ]},
                    {"role": "tool", "tool_call_id": "a", "content": "A"},
                    {"role": "tool", "tool_call_id": "b", "content": "Error: B"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "prompt_cache_key": "grove-r1-worker",
            }),
            "one tool message per result, the cache group as prompt_cache_key"
        );
    }

    #[test]
    fn key_is_optional_only_off_the_official_api() {
        let err = OpenAiConfig::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
        let local = OpenAiConfig::from_lookup(|name| {
            (name == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:8080/v1".to_owned())
        })
        .unwrap();
        assert_eq!(local.api_key, "");
        assert!(!OpenAiClient::new(local).unwrap().sends_key());
    }
}
