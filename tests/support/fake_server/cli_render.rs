//! Renders replies in the wire formats only the agent CLIs speak: the OpenAI Responses
//! API over SSE (`POST /v1/responses`, `response.*` events, as codex reads them) and
//! Gemini's `generateContent` / `streamGenerateContent?alt=sse` (as Gemini CLI reads
//! them). A tool call named `apply_patch` is a Responses `custom_tool_call` whose input
//! is the call's raw arguments (codex's freeform patch tool); any other is a
//! `function_call`. Gemini tool calls are `functionCall` parts with parsed `args`.

use serde_json::{Value, json};

use super::{Turn, TurnBlock};

/// The Responses API usage object of `turn`: `input_tokens` counts cached ones too.
fn responses_usage(turn: &Turn) -> Value {
    let (input, output, cache_read, cache_write) = turn.usage;
    let prompt = input + cache_read + cache_write;
    json!({
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cache_read},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    })
}

/// The output items of `turn`, in order.
fn responses_items(turn: &Turn, request_id: &str) -> Vec<Value> {
    turn.blocks
        .iter()
        .enumerate()
        .map(|(index, block)| match block {
            TurnBlock::Text(text) => json!({
                "type": "message", "id": format!("msg_{request_id}_{index}"),
                "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }),
            TurnBlock::ToolUse {
                id,
                name,
                arguments,
            } if name == "apply_patch" => json!({
                "type": "custom_tool_call", "id": format!("ctc_{id}"), "call_id": id,
                "name": name, "input": arguments, "status": "completed",
            }),
            // `NAMESPACE/NAME`: a tool of a namespace (codex's MCP servers).
            TurnBlock::ToolUse {
                id,
                name,
                arguments,
            } if name.contains('/') => {
                let (namespace, name) = name.split_once('/').unwrap_or_default();
                json!({
                    "type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                    "namespace": namespace, "name": name, "arguments": arguments,
                    "status": "completed",
                })
            }
            TurnBlock::ToolUse {
                id,
                name,
                arguments,
            } => json!({
                "type": "function_call", "id": format!("fc_{id}"), "call_id": id,
                "name": name, "arguments": arguments, "status": "completed",
            }),
        })
        .collect()
}

/// The whole response object (the `response` of `response.completed`).
pub(super) fn responses_body(turn: &Turn, model: &str, request_id: &str) -> Value {
    json!({
        "id": format!("resp_{request_id}"), "object": "response", "status": "completed",
        "model": model, "output": responses_items(turn, request_id),
        "usage": responses_usage(turn),
    })
}

/// SSE frames of a streamed response: created, each item added (text as deltas) and
/// done, completed.
pub(super) fn responses_frames(turn: &Turn, model: &str, request_id: &str) -> Vec<String> {
    let event = |data: Value| {
        let name = data["type"].as_str().unwrap_or_default().to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    };
    let id = format!("resp_{request_id}");
    let mut frames = vec![event(json!({
        "type": "response.created",
        "response": {"id": id, "object": "response", "status": "in_progress", "model": model},
    }))];
    for (index, item) in responses_items(turn, request_id).into_iter().enumerate() {
        let mut added = item.clone();
        if added["type"] == "message" {
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
        }
        frames.push(event(json!({
            "type": "response.output_item.added", "output_index": index, "item": added,
        })));
        if let Some(text) = item["content"][0]["text"].as_str() {
            for piece in super::render::pieces(text) {
                frames.push(event(json!({
                    "type": "response.output_text.delta", "item_id": item["id"],
                    "output_index": index, "content_index": 0, "delta": piece,
                })));
            }
        }
        frames.push(event(json!({
            "type": "response.output_item.done", "output_index": index, "item": item,
        })));
    }
    frames.push(event(json!({
        "type": "response.completed",
        "response": responses_body(turn, model, request_id),
    })));
    frames
}

/// The parts of one Gemini candidate for `block`.
fn gemini_part(block: &TurnBlock) -> Value {
    match block {
        TurnBlock::Text(text) => json!({"text": text}),
        TurnBlock::ToolUse {
            name, arguments, ..
        } => json!({"functionCall": {
            "name": name,
            "args": serde_json::from_str::<Value>(arguments).unwrap_or(Value::Null),
        }}),
    }
}

fn gemini_usage(turn: &Turn) -> Value {
    let (input, output, cache_read, _) = turn.usage;
    json!({
        "promptTokenCount": input + cache_read,
        "cachedContentTokenCount": cache_read,
        "candidatesTokenCount": output,
        "totalTokenCount": input + cache_read + output,
    })
}

fn gemini_chunk(parts: Vec<Value>, last: Option<&Turn>, model: &str, request_id: &str) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    let mut chunk = json!({"modelVersion": model, "responseId": request_id});
    if let Some(turn) = last {
        candidate["finishReason"] = json!(turn.stop.clone().unwrap_or_else(|| "STOP".into()));
        chunk["usageMetadata"] = gemini_usage(turn);
    }
    chunk["candidates"] = json!([candidate]);
    chunk
}

/// A whole `generateContent` answer.
pub(super) fn gemini_body(turn: &Turn, model: &str, request_id: &str) -> Value {
    let parts = turn.blocks.iter().map(gemini_part).collect();
    gemini_chunk(parts, Some(turn), model, request_id)
}

/// `streamGenerateContent?alt=sse` frames: one chunk per block, the last with the
/// finish reason and the usage.
pub(super) fn gemini_frames(turn: &Turn, model: &str, request_id: &str) -> Vec<String> {
    let count = turn.blocks.len();
    if count == 0 {
        return vec![format!(
            "data: {}\n\n",
            gemini_body(turn, model, request_id)
        )];
    }
    turn.blocks
        .iter()
        .enumerate()
        .map(|(index, block)| {
            let last = (index + 1 == count).then_some(turn);
            let chunk = gemini_chunk(vec![gemini_part(block)], last, model, request_id);
            format!("data: {chunk}\n\n")
        })
        .collect()
}
