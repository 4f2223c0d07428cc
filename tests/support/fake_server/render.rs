//! Renders replies in the real wire formats: Anthropic message JSON and SSE events,
//! OpenAI `chat.completion` / `chat.completion.chunk` objects and `data: [DONE]`.

use std::io;

use axum::body::{Body, Bytes};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};

use super::{Endpoint, Reply, Turn, TurnBlock};

/// How many SSE frames a cut or stalled stream sends: for Anthropic that is
/// message_start, ping, the first content_block_start and one delta (mid-block); for
/// OpenAI the role chunk and the first content pieces.
const FRAMES_BEFORE_FAULT: usize = 4;

/// Text and argument pieces are this many characters, so clients must join deltas.
const PIECE_CHARS: usize = 6;

/// How a stream's frames are written.
#[derive(Clone, Copy)]
pub(super) enum Writes {
    /// Each frame on its own, so that a client reads them across many reads.
    PerFrame,
    /// All frames of a complete stream in one write.
    One,
}

pub(super) fn status(
    code: u16,
    body: &str,
    headers: &[(String, String)],
    request_id: &str,
) -> Response {
    let mut response = Response::new(Body::from(body.to_owned()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let map = response.headers_mut();
    map.insert("content-type", HeaderValue::from_static("application/json"));
    if !request_id.is_empty() {
        for name in ["request-id", "x-request-id"] {
            map.insert(
                name,
                HeaderValue::from_str(request_id).expect("request id header"),
            );
        }
    }
    for (name, value) in headers {
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).expect("scripted header name"),
            HeaderValue::from_str(value).expect("scripted header value"),
        );
    }
    response
}

/// The provider's error envelope with `status`.
pub(super) fn error(
    endpoint: Endpoint,
    code: u16,
    error_type: &str,
    message: &str,
    headers: &[(String, String)],
    request_id: &str,
) -> Response {
    let body = error_body(endpoint, code, error_type, message, request_id);
    status(code, &body.to_string(), headers, request_id)
}

fn error_body(
    endpoint: Endpoint,
    code: u16,
    error_type: &str,
    message: &str,
    request_id: &str,
) -> Value {
    match endpoint {
        Endpoint::Anthropic => json!({
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id,
        }),
        Endpoint::OpenAi | Endpoint::Responses => json!({
            "error": {"message": message, "type": error_type, "param": null, "code": null},
        }),
        // Google's envelope: `status` is the error's kind, e.g. UNAUTHENTICATED.
        Endpoint::Gemini => json!({
            "error": {"code": code, "message": message, "status": error_type},
        }),
    }
}

/// Renders `reply` for a request to `endpoint` that asked for `stream` (its frames
/// written as `writes` says).
pub(super) async fn reply(
    endpoint: Endpoint,
    reply: Reply,
    stream: bool,
    writes: Writes,
    model: &str,
    request_id: &str,
) -> Response {
    match reply {
        Reply::Turn(turn) if stream => sse(
            frames(endpoint, &turn, model, request_id),
            Ending::Complete(writes),
            request_id,
        ),
        Reply::Turn(turn) => status(
            200,
            &json_body(endpoint, &turn, model, request_id).to_string(),
            &[],
            request_id,
        ),
        Reply::Error {
            status: code,
            error_type,
            message,
            headers,
        } => error(endpoint, code, &error_type, &message, &headers, request_id),
        Reply::Raw {
            status: code,
            body,
            headers,
        } => {
            let typed = headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
            let mut response = status(code, &body, &headers, request_id);
            if !typed {
                response
                    .headers_mut()
                    .insert("content-type", HeaderValue::from_static("text/html"));
            }
            response
        }
        Reply::ErrorEvent {
            turn,
            error_type,
            message,
        } => {
            if !stream {
                return error(endpoint, 500, &error_type, &message, &[], request_id);
            }
            let mut frames = frames(endpoint, &turn, model, request_id);
            frames.truncate(FRAMES_BEFORE_FAULT);
            let payload = error_body(endpoint, 500, &error_type, &message, request_id);
            frames.push(match endpoint {
                Endpoint::Anthropic => format!("event: error\ndata: {payload}\n\n"),
                Endpoint::OpenAi | Endpoint::Responses | Endpoint::Gemini => {
                    format!("data: {payload}\n\n")
                }
            });
            sse(frames, Ending::Complete(writes), request_id)
        }
        Reply::Cut(turn) => {
            if stream {
                let mut frames = frames(endpoint, &turn, model, request_id);
                frames.truncate(FRAMES_BEFORE_FAULT);
                sse(frames, Ending::Drop, request_id)
            } else {
                let body = json_body(endpoint, &turn, model, request_id).to_string();
                let half = body[..body.len() / 2].to_owned();
                let chunks = stream::iter([Ok(Bytes::from(half))]).chain(dropped());
                streaming_response(Body::from_stream(chunks), "application/json", request_id)
            }
        }
        Reply::Stall(turn) => {
            if stream {
                let mut frames = frames(endpoint, &turn, model, request_id);
                frames.truncate(FRAMES_BEFORE_FAULT);
                sse(frames, Ending::Stall, request_id)
            } else {
                let chunks = stream::pending::<Result<Bytes, io::Error>>();
                streaming_response(Body::from_stream(chunks), "application/json", request_id)
            }
        }
        Reply::Slow { turn, gap } => {
            if stream {
                let frames = frames(endpoint, &turn, model, request_id);
                let paced = stream::iter(frames).then(move |frame| async move {
                    tokio::time::sleep(gap).await;
                    Ok::<_, io::Error>(Bytes::from(frame))
                });
                streaming_response(Body::from_stream(paced), "text/event-stream", request_id)
            } else {
                tokio::time::sleep(gap).await;
                let body = json_body(endpoint, &turn, model, request_id).to_string();
                status(200, &body, &[], request_id)
            }
        }
        Reply::Hang => std::future::pending().await,
        Reply::Drip { gap } => {
            let frames = frames(endpoint, &Turn::text("drip"), model, request_id);
            let (first, keep_alive) = if !stream {
                (String::new(), " ".to_owned())
            } else {
                match endpoint {
                    // message_start, then `ping` again and again.
                    Endpoint::Anthropic => (frames[0].clone(), frames[1].clone()),
                    // The role chunk, then it again (an empty delta).
                    // The first frame, then it again.
                    Endpoint::OpenAi | Endpoint::Responses | Endpoint::Gemini => {
                        (frames[0].clone(), frames[0].clone())
                    }
                }
            };
            let drip = stream::iter([Ok::<_, io::Error>(Bytes::from(first))]).chain(
                stream::repeat(keep_alive).then(move |frame| async move {
                    tokio::time::sleep(gap).await;
                    Ok::<_, io::Error>(Bytes::from(frame))
                }),
            );
            let content_type = if stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            streaming_response(Body::from_stream(drip), content_type, request_id)
        }
        Reply::Delayed { reply, .. } | Reply::Gated { reply, .. } => {
            // `handle` waits these out before rendering; render what they wrap.
            Box::pin(self::reply(
                endpoint, *reply, stream, writes, model, request_id,
            ))
            .await
        }
    }
}

enum Ending {
    Complete(Writes),
    Drop,
    Stall,
}

fn dropped() -> impl Stream<Item = Result<Bytes, io::Error>> {
    stream::once(async {
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "fake server: connection cut on purpose",
        ))
    })
}

fn sse(frames: Vec<String>, ending: Ending, request_id: &str) -> Response {
    if let Ending::Complete(Writes::One) = ending {
        return streaming_response(Body::from(frames.concat()), "text/event-stream", request_id);
    }
    let frames = stream::iter(frames.into_iter().map(|frame| Ok(Bytes::from(frame))));
    let body = match ending {
        Ending::Complete(_) => Body::from_stream(frames),
        Ending::Drop => Body::from_stream(frames.chain(dropped())),
        Ending::Stall => Body::from_stream(frames.chain(stream::pending())),
    };
    streaming_response(body, "text/event-stream", request_id)
}

fn streaming_response(body: Body, content_type: &'static str, request_id: &str) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static(content_type));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    for name in ["request-id", "x-request-id"] {
        headers.insert(
            name,
            HeaderValue::from_str(request_id).expect("request id header"),
        );
    }
    response
}

pub(super) fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(PIECE_CHARS)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

fn anthropic_stop(turn: &Turn) -> String {
    turn.stop.clone().unwrap_or_else(|| {
        if turn.has_tool_use() {
            "tool_use"
        } else {
            "end_turn"
        }
        .to_owned()
    })
}

fn openai_finish(turn: &Turn) -> String {
    turn.stop.clone().unwrap_or_else(|| {
        if turn.has_tool_use() {
            "tool_calls"
        } else {
            "stop"
        }
        .to_owned()
    })
}

fn anthropic_usage(turn: &Turn) -> Value {
    let (input, output, cache_read, cache_write) = turn.usage;
    json!({
        "input_tokens": input,
        "output_tokens": output,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
        "cache_creation": cache_creation(turn),
    })
}

/// Anthropic's split of the cache write by time to live.
fn cache_creation(turn: &Turn) -> Value {
    let one_hour = turn.cache_write_1h.min(turn.usage.3);
    json!({
        "ephemeral_5m_input_tokens": turn.usage.3 - one_hour,
        "ephemeral_1h_input_tokens": one_hour,
    })
}

fn openai_usage(turn: &Turn) -> Value {
    let (input, output, cache_read, cache_write) = turn.usage;
    // Saturating: a test may send absurd usage (u64::MAX) on purpose.
    let prompt = input.saturating_add(cache_read).saturating_add(cache_write);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt.saturating_add(output),
        "prompt_tokens_details": {"cached_tokens": cache_read},
    })
}

fn json_body(endpoint: Endpoint, turn: &Turn, model: &str, request_id: &str) -> Value {
    match endpoint {
        Endpoint::Responses => super::cli_render::responses_body(turn, model, request_id),
        Endpoint::Gemini => super::cli_render::gemini_body(turn, model, request_id),
        Endpoint::Anthropic => {
            let content: Vec<Value> = turn
                .blocks
                .iter()
                .map(|block| match block {
                    TurnBlock::Text(text) => json!({"type": "text", "text": text}),
                    TurnBlock::ToolUse {
                        id,
                        name,
                        arguments,
                    } => json!({
                        "type": "tool_use",
                        "id": id,
                        "name": name,
                        // The real API always sends an object; arguments that are not
                        // one can only be played here as their text, a string.
                        "input": serde_json::from_str::<Value>(arguments)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| Value::String(arguments.clone())),
                    }),
                })
                .collect();
            json!({
                "id": format!("msg_{request_id}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": anthropic_stop(turn),
                "stop_sequence": null,
                "usage": anthropic_usage(turn),
            })
        }
        Endpoint::OpenAi => {
            let text: String = turn
                .blocks
                .iter()
                .filter_map(|block| match block {
                    TurnBlock::Text(text) => Some(text.as_str()),
                    TurnBlock::ToolUse { .. } => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            let calls: Vec<Value> = turn
                .blocks
                .iter()
                .filter_map(|block| match block {
                    TurnBlock::ToolUse {
                        id,
                        name,
                        arguments,
                    } => Some(json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    })),
                    TurnBlock::Text(_) => None,
                })
                .collect();
            let mut message = json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { Value::String(text) },
                "refusal": null,
            });
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            json!({
                "id": format!("chatcmpl-{request_id}"),
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": openai_finish(turn)}],
                "usage": openai_usage(turn),
                "system_fingerprint": "fp_fake",
            })
        }
    }
}

/// Every SSE frame of a complete streamed turn.
fn frames(endpoint: Endpoint, turn: &Turn, model: &str, request_id: &str) -> Vec<String> {
    match endpoint {
        Endpoint::Anthropic => anthropic_frames(turn, model, request_id),
        Endpoint::OpenAi => openai_frames(turn, model, request_id),
        Endpoint::Responses => super::cli_render::responses_frames(turn, model, request_id),
        Endpoint::Gemini => super::cli_render::gemini_frames(turn, model, request_id),
    }
}

fn anthropic_frames(turn: &Turn, model: &str, request_id: &str) -> Vec<String> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let (input, _, cache_read, cache_write) = turn.usage;
    let mut frames = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": format!("msg_{request_id}"), "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 1,
                          "cache_read_input_tokens": cache_read,
                          "cache_creation_input_tokens": cache_write,
                          "cache_creation": cache_creation(turn)},
            }}),
        ),
        event("ping", json!({"type": "ping"})),
    ];
    for (index, block) in turn.blocks.iter().enumerate() {
        match block {
            TurnBlock::Text(text) => {
                frames.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                ));
                for piece in pieces(text) {
                    frames.push(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
                    ));
                }
            }
            TurnBlock::ToolUse {
                id,
                name,
                arguments,
            } => {
                frames.push(event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                ));
                for piece in pieces(arguments) {
                    frames.push(event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
            }
        }
        frames.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    frames.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(turn), "stop_sequence": null},
               "usage": {"output_tokens": turn.usage.1}}),
    ));
    frames.push(event("message_stop", json!({"type": "message_stop"})));
    frames
}

fn openai_frames(turn: &Turn, model: &str, request_id: &str) -> Vec<String> {
    let chunk = |choices: Value, usage: Value| {
        let data = json!({
            "id": format!("chatcmpl-{request_id}"),
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
            "usage": usage,
        });
        format!("data: {data}\n\n")
    };
    let delta = |delta: Value| {
        chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]),
            Value::Null,
        )
    };
    let mut frames = vec![delta(
        json!({"role": "assistant", "content": "", "refusal": null}),
    )];
    let mut first_text = true;
    let mut call_index = 0;
    for block in &turn.blocks {
        match block {
            TurnBlock::Text(text) => {
                if !first_text {
                    frames.push(delta(json!({"content": "\n"})));
                }
                first_text = false;
                for piece in pieces(text) {
                    frames.push(delta(json!({"content": piece})));
                }
            }
            TurnBlock::ToolUse {
                id,
                name,
                arguments,
            } => {
                frames.push(delta(
                    json!({"tool_calls": [{"index": call_index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                ));
                for piece in pieces(arguments) {
                    frames.push(delta(json!({"tool_calls": [{"index": call_index,
                        "function": {"arguments": piece}}]})));
                }
                call_index += 1;
            }
        }
    }
    frames.push(chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": openai_finish(turn)}]),
        Value::Null,
    ));
    frames.push(chunk(json!([]), openai_usage(turn)));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}
