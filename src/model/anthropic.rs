//! The Anthropic Messages API client (`POST {base}/v1/messages`), streaming over SSE or
//! not, with prompt-cache breakpoints on the stable prefix.
//!
//! This module owns the Anthropic wire format in both directions. It must never retry
//! on its own (every attempt goes through [`RetryPolicy::run`]), never print, and never
//! put the API key anywhere but the `x-api-key` header.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::arguments;
use super::client::{Client, ClientConfig, Wire};
use super::http::{self, Delivery, SseEvents};
use super::{
    CacheTtl, ContentBlock, Message, ModelError, Request, Response, Role, StopReason, Usage,
};

/// The API version grove speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Anthropic Messages API's wire format.
#[derive(Debug, Default, Clone, Copy)]
pub struct Anthropic;

/// How to reach the Anthropic Messages API.
pub type AnthropicConfig = ClientConfig<Anthropic>;

/// A [`Model`](super::Model) speaking the Anthropic Messages API.
pub type AnthropicClient = Client<Anthropic>;

#[async_trait]
impl Wire for Anthropic {
    const CONFIG_NAME: &'static str = "AnthropicConfig";
    const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    const BASE_URL_VAR: &'static str = "ANTHROPIC_BASE_URL";
    const KEY_VAR: &'static str = "ANTHROPIC_API_KEY";
    const PATH: &'static str = "/v1/messages";
    const REQUEST_ID_HEADER: &'static str = "request-id";

    fn check_key(_base_url: &str, api_key: &str) -> Result<(), ModelError> {
        if api_key.trim().is_empty() {
            return Err(ModelError::Config(
                "no Anthropic API key: set ANTHROPIC_API_KEY (or use --provider openai)".to_owned(),
            ));
        }
        Ok(())
    }

    fn headers(api_key: &str) -> Result<HeaderMap, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", http::secret_header(api_key, Self::KEY_VAR)?);
        headers.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(headers)
    }

    fn name(_base_url: &str, _endpoint: &reqwest::Url) -> String {
        "anthropic".to_owned()
    }

    fn encode(request: &Request, delivery: Delivery, ttl: CacheTtl) -> Result<Vec<u8>, ModelError> {
        encode_request(request, delivery, ttl)
    }

    fn decode(body: &[u8], secret: &str) -> Result<Response, ModelError> {
        decode_response(body, secret)
    }

    async fn read_stream(events: &mut SseEvents<'_>, secret: &str) -> Result<Response, ModelError> {
        read_stream(events, secret).await
    }
}

// ---------------------------------------------------------------------------------------
// Request encoding

#[derive(Serialize, Clone, Copy)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
    /// `"1h"`, or absent for the API's default of 5 minutes (whose bytes stay those of
    /// every request before the TTL was chosen).
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'static str>,
}

impl CacheControl {
    /// A breakpoint living `ttl`. Every breakpoint of one request lives the same: the
    /// API refuses a 1-hour breakpoint after a 5-minute one.
    fn ephemeral(ttl: CacheTtl) -> Self {
        CacheControl {
            kind: "ephemeral",
            ttl: match ttl {
                CacheTtl::FiveMinutes => None,
                CacheTtl::OneHour => Some("1h"),
            },
        }
    }
}

/// The request body. Field order is the cache order (tools, system, messages), so the
/// bytes before `"messages"` are the cached prefix and identical for identical inputs.
#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    stream: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<WireBlock<'a>>,
    messages: Vec<WireMessage<'a>>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
}

impl WireBlock<'_> {
    fn set_cache_control(&mut self, control: CacheControl) {
        let (WireBlock::Text { cache_control, .. }
        | WireBlock::ToolUse { cache_control, .. }
        | WireBlock::ToolResult { cache_control, .. }) = self;
        *cache_control = Some(control);
    }
}

/// Encodes `request` as the Messages API body, with cache breakpoints on the last tool,
/// the system prompt and the newest message's last block (three at most; the API
/// allows four), each living `ttl`.
pub(crate) fn encode_request(
    request: &Request,
    delivery: Delivery,
    ttl: CacheTtl,
) -> Result<Vec<u8>, ModelError> {
    let stream = delivery.is_streamed();
    let control = CacheControl::ephemeral(ttl);
    let mut tools: Vec<&super::ToolSpec> = request.tools.iter().collect();
    // A stable order keeps the cached prefix byte-identical whatever order the
    // registry listed the tools in.
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
    let mut wire_tools: Vec<WireTool<'_>> = tools
        .iter()
        .map(|tool| WireTool {
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
            cache_control: None,
        })
        .collect();
    if let Some(last) = wire_tools.last_mut() {
        last.cache_control = Some(control);
    }

    let system = if request.system.is_empty() {
        Vec::new()
    } else {
        vec![WireBlock::Text {
            text: &request.system,
            cache_control: Some(control),
        }]
    };

    if request.messages.is_empty() {
        return Err(ModelError::InvalidRequest(
            "a request needs at least one message".to_owned(),
        ));
    }
    let mut messages = request
        .messages
        .iter()
        .enumerate()
        .map(|(index, message)| encode_message(index, message))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(block) = messages
        .last_mut()
        .and_then(|message| message.content.last_mut())
    {
        block.set_cache_control(control);
    }

    let wire = WireRequest {
        model: &request.model,
        max_tokens: request.max_tokens,
        stream,
        tools: wire_tools,
        system,
        messages,
    };
    serde_json::to_vec(&wire)
        .map_err(|err| ModelError::InvalidRequest(format!("could not encode the request: {err}")))
}

fn encode_block(block: &ContentBlock) -> Option<WireBlock<'_>> {
    match block {
        // The API rejects empty text blocks; an empty text carries nothing anyway.
        ContentBlock::Text { text } if text.is_empty() => None,
        ContentBlock::Text { text } => Some(WireBlock::Text {
            text,
            cache_control: None,
        }),
        ContentBlock::ToolUse { id, name, input } => Some(WireBlock::ToolUse {
            id,
            name,
            input: arguments::for_history(input),
            cache_control: None,
        }),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => Some(WireBlock::ToolResult {
            tool_use_id,
            content,
            is_error: *is_error,
            cache_control: None,
        }),
    }
}

fn encode_message(index: usize, message: &Message) -> Result<WireMessage<'_>, ModelError> {
    // Tool results must open the user message that answers the calls.
    let results = message
        .content
        .iter()
        .filter(|block| matches!(block, ContentBlock::ToolResult { .. }));
    let others = message
        .content
        .iter()
        .filter(|block| !matches!(block, ContentBlock::ToolResult { .. }));
    let content: Vec<WireBlock<'_>> = results.chain(others).filter_map(encode_block).collect();
    if content.is_empty() {
        return Err(ModelError::InvalidRequest(format!(
            "message {index} ({:?}) has no content to send",
            message.role
        )));
    }
    Ok(WireMessage {
        role: match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        },
        content,
    })
}

// ---------------------------------------------------------------------------------------
// Response decoding

#[derive(Deserialize, Default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Overwrites the counts `self` carries; `message_delta` may repeat or omit any.
    fn apply_to(&self, usage: &mut Usage) {
        let fields = [
            (self.input_tokens, &mut usage.input_tokens),
            (self.output_tokens, &mut usage.output_tokens),
            (
                self.cache_read_input_tokens,
                &mut usage.cache_read_input_tokens,
            ),
            (
                self.cache_creation_input_tokens,
                &mut usage.cache_creation_input_tokens,
            ),
        ];
        for (value, slot) in fields {
            if let Some(value) = value {
                *slot = value;
            }
        }
    }
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    content: Vec<Value>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Maps the API's `stop_reason`.
pub fn stop_reason(wire: &str) -> StopReason {
    match wire {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "pause_turn" => StopReason::PauseTurn,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
}

fn required_str(value: &Value, field: &str, what: &str) -> Result<String, ModelError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ModelError::Decode(format!("{what} has no string {field:?}: {value}")))
}

/// Parses a non-streaming response body.
pub(crate) fn decode_response(body: &[u8], secret: &str) -> Result<Response, ModelError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| ModelError::Decode(format!("the response body is not JSON: {err}")))?;
    // Some gateways answer 200 with an error envelope; it is an attempt that failed.
    if value.get("type").and_then(Value::as_str) == Some("error") {
        let error = value.get("error").unwrap_or(&Value::Null);
        let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(ModelError::Stream(http::redact(
            &format!("the API answered 200 with an error: {kind}: {message}"),
            secret,
        )));
    }
    let wire = WireResponse::deserialize(&value).map_err(|err| {
        ModelError::Decode(format!(
            "the response body is not a Messages API message: {err}"
        ))
    })?;
    let mut content = Vec::new();
    for block in &wire.content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => content.push(ContentBlock::Text {
                text: required_str(block, "text", "a text block")?,
            }),
            Some("tool_use") => content.push(ContentBlock::ToolUse {
                id: required_str(block, "id", "a tool_use block")?,
                name: required_str(block, "name", "a tool_use block")?,
                input: arguments::from_value(block.get("input")),
            }),
            // Thinking and server-tool blocks are not part of grove's conversation.
            _ => {}
        }
    }
    let stop = wire
        .stop_reason
        .ok_or_else(|| ModelError::Decode("the response has no stop_reason".to_owned()))?;
    let mut usage = Usage::default();
    if let Some(wire_usage) = &wire.usage {
        wire_usage.apply_to(&mut usage);
    }
    Ok(Response {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason: stop_reason(&stop),
        usage,
        request_id: None,
    })
}

/// A content block still receiving deltas.
enum OpenBlock {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// A block kind grove does not use (thinking, server tools): read and dropped.
    Ignored,
}

/// The state of one streamed message, fed event by event.
#[derive(Default)]
struct StreamedMessage {
    started: bool,
    open: BTreeMap<u64, OpenBlock>,
    finished: BTreeMap<u64, ContentBlock>,
    usage: Usage,
    stop_reason: Option<String>,
    stopped: bool,
}

fn index_of(data: &Value) -> Result<u64, ModelError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| ModelError::Decode(format!("an event has no block index: {data}")))
}

impl StreamedMessage {
    /// Applies one event; `Err` for an `error` event or an impossible sequence.
    fn apply(&mut self, kind: &str, data: &Value, secret: &str) -> Result<(), ModelError> {
        match kind {
            "message_start" => {
                self.started = true;
                if let Some(usage) = data.get("message").and_then(|m| m.get("usage")) {
                    usage_from(usage)?.apply_to(&mut self.usage);
                }
            }
            "content_block_start" => {
                let index = index_of(data)?;
                let block = data.get("content_block").ok_or_else(|| {
                    ModelError::Decode(format!("content_block_start without a block: {data}"))
                })?;
                let open = match block.get("type").and_then(Value::as_str) {
                    Some("text") => OpenBlock::Text(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    ),
                    Some("tool_use") => OpenBlock::ToolUse {
                        id: required_str(block, "id", "a tool_use block")?,
                        name: required_str(block, "name", "a tool_use block")?,
                        json: String::new(),
                    },
                    _ => OpenBlock::Ignored,
                };
                if self.open.insert(index, open).is_some() || self.finished.contains_key(&index) {
                    return Err(ModelError::Decode(format!(
                        "content block {index} was started twice"
                    )));
                }
            }
            "content_block_delta" => {
                let index = index_of(data)?;
                let block = self.open.get_mut(&index).ok_or_else(|| {
                    ModelError::Decode(format!(
                        "a delta for content block {index}, which is not open"
                    ))
                })?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match (block, delta.get("type").and_then(Value::as_str)) {
                    (OpenBlock::Text(text), Some("text_delta")) => {
                        text.push_str(delta.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    (OpenBlock::ToolUse { json, .. }, Some("input_json_delta")) => {
                        json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        );
                    }
                    // Citations, signatures, thinking: not part of grove's conversation.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(data)?;
                let block = self.open.remove(&index).ok_or_else(|| {
                    ModelError::Decode(format!("content block {index} stopped but never started"))
                })?;
                let finished = match block {
                    OpenBlock::Text(text) => Some(ContentBlock::Text { text }),
                    OpenBlock::ToolUse { id, name, json } => Some(ContentBlock::ToolUse {
                        id,
                        name,
                        input: arguments::parse(&json),
                    }),
                    OpenBlock::Ignored => None,
                };
                if let Some(block) = finished {
                    self.finished.insert(index, block);
                }
            }
            "message_delta" => {
                if let Some(reason) = data
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = data.get("usage") {
                    usage_from(usage)?.apply_to(&mut self.usage);
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = data.get("error").unwrap_or(data);
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                return Err(ModelError::Stream(http::redact(
                    &format!("the API sent an error event: {kind}: {message}"),
                    secret,
                )));
            }
            // `ping` keeps the connection alive; unknown events are future additions.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Response, ModelError> {
        if !self.started {
            return Err(ModelError::Stream(
                "the stream ended before message_start".to_owned(),
            ));
        }
        if !self.stopped {
            return Err(ModelError::Stream(
                "the stream ended before message_stop (connection cut)".to_owned(),
            ));
        }
        if let Some(index) = self.open.keys().next() {
            return Err(ModelError::Stream(format!(
                "content block {index} was never finished"
            )));
        }
        let stop = self.stop_reason.ok_or_else(|| {
            ModelError::Decode("the stream ended without a stop_reason".to_owned())
        })?;
        Ok(Response {
            message: Message {
                role: Role::Assistant,
                content: self.finished.into_values().collect(),
            },
            stop_reason: stop_reason(&stop),
            usage: self.usage,
            request_id: None,
        })
    }
}

fn usage_from(value: &Value) -> Result<WireUsage, ModelError> {
    WireUsage::deserialize(value)
        .map_err(|err| ModelError::Decode(format!("unreadable usage {value}: {err}")))
}

async fn read_stream(events: &mut SseEvents<'_>, secret: &str) -> Result<Response, ModelError> {
    let mut message = StreamedMessage::default();
    while let Some(event) = events.next().await? {
        if event.data.trim().is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|err| {
            ModelError::Decode(format!(
                "event {:?} carries data that is not JSON: {err}",
                event.event
            ))
        })?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str())
            .to_owned();
        message.apply(&kind, &data, secret)?;
        if message.stopped {
            break;
        }
    }
    message.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::ToolSpec;

    fn feed(events: &[Value]) -> Result<Response, ModelError> {
        let mut message = StreamedMessage::default();
        for event in events {
            let kind = event["type"].as_str().unwrap();
            message.apply(kind, event, "")?;
        }
        message.finish()
    }

    #[test]
    fn stream_events_join_into_one_message() {
        let response = feed(&[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 5}}}),
            json!({"type": "ping"}),
            json!({"type": "something_new", "x": 1}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "grep", "input": {}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pat"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "tern\": \"x\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ])
        .unwrap();
        assert_eq!(
            response,
            Response {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Text {
                            text: "Hello".into()
                        },
                        ContentBlock::ToolUse {
                            id: "t1".into(),
                            name: "grep".into(),
                            input: json!({"pattern": "x"}),
                        },
                    ],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 7,
                    cache_read_input_tokens: 5,
                    cache_creation_input_tokens: 0,
                },
                request_id: None,
            },
            "blocks are ordered by index, deltas joined per index, usage merged"
        );
    }

    #[test]
    fn unfinished_streams_are_stream_errors() {
        let start = json!({"type": "message_start", "message": {"usage": {}}});
        let open = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
        let stop = json!({"type": "message_stop"});
        assert!(matches!(
            feed(&[start.clone(), open.clone()]),
            Err(ModelError::Stream(_))
        ));
        assert!(matches!(
            feed(&[start, open, stop]),
            Err(ModelError::Stream(_))
        ));
        assert!(matches!(
            feed(&[json!({"type": "content_block_delta", "index": 3, "delta": {}})]),
            Err(ModelError::Decode(_))
        ));
    }

    #[test]
    fn every_stop_reason_is_mapped() {
        let cases = [
            ("end_turn", StopReason::EndTurn),
            ("tool_use", StopReason::ToolUse),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
            (
                "model_context_window_exceeded",
                StopReason::Other("model_context_window_exceeded".into()),
            ),
        ];
        for (wire, expected) in cases {
            assert_eq!(stop_reason(wire), expected, "stop_reason {wire}");
        }
    }

    #[test]
    fn encoding_puts_results_first_and_breakpoints_on_the_prefix() {
        let request = Request {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![
                Message::user_text("go"),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "b".into(),
                        input: Value::String("{not json".into()),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::Text { text: "and".into() },
                        ContentBlock::ToolResult {
                            tool_use_id: "t1".into(),
                            content: "bad args".into(),
                            is_error: true,
                        },
                    ],
                },
            ],
            tools: vec![
                ToolSpec {
                    name: "b".into(),
                    description: "B".into(),
                    input_schema: json!({"type": "object"}),
                },
                ToolSpec {
                    name: "a".into(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                },
            ],
            max_tokens: 100,
            cache: crate::model::CacheHints::default(),
        };
        let body: Value = serde_json::from_slice(
            &encode_request(&request, Delivery::Whole, CacheTtl::FiveMinutes).unwrap(),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 100,
                "stream": false,
                "tools": [
                    {"name": "a", "input_schema": {"type": "object"}},
                    {"name": "b", "description": "B", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
                ],
                "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "b", "input": {"unparsed_arguments": "{not json"}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "bad args", "is_error": true},
                        {"type": "text", "text": "and", "cache_control": {"type": "ephemeral"}},
                    ]},
                ],
            }),
            "tools sorted, results first, invalid args sent as {{}}, three breakpoints"
        );
        let long: Value = serde_json::from_slice(
            &encode_request(&request, Delivery::Whole, CacheTtl::OneHour).unwrap(),
        )
        .unwrap();
        let one_hour = json!({"type": "ephemeral", "ttl": "1h"});
        assert_eq!(
            [
                &long["tools"][1]["cache_control"],
                &long["system"][0]["cache_control"],
                &long["messages"][2]["content"][1]["cache_control"],
            ],
            [&one_hour, &one_hour, &one_hour],
            "a conversation that waits long asks for the 1-hour TTL on every breakpoint \
             (the API refuses a 1-hour one after a 5-minute one)"
        );
    }

    #[test]
    fn config_from_env_names_the_missing_variable() {
        let err = AnthropicConfig::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        let config = AnthropicConfig::from_lookup(|name| {
            (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-secret".to_owned())
        })
        .unwrap();
        assert_eq!(config.base_url, Anthropic::DEFAULT_BASE_URL);
        assert!(
            !format!("{config:?}").contains("sk-ant-secret"),
            "Debug never shows the key"
        );
    }
}
