//! Request validation as strict as the real APIs: headers, required fields, tool
//! definitions, tool call / result pairing and cache breakpoints.

use std::collections::HashSet;
use std::sync::LazyLock;

use axum::http::HeaderMap;
use regex::Regex;
use serde_json::Value;

/// Why a request was refused: the status and error type the real API would answer with,
/// and every problem found.
pub(super) struct Rejection {
    pub status: u16,
    pub error_type: &'static str,
    pub problems: Vec<String>,
}

impl Rejection {
    pub fn invalid(problems: Vec<String>) -> Self {
        Self {
            status: 400,
            error_type: "invalid_request_error",
            problems,
        }
    }

    fn authentication(problem: String) -> Self {
        Self {
            status: 401,
            error_type: "authentication_error",
            problems: vec![problem],
        }
    }
}

fn tool_name_ok(name: &str) -> bool {
    // Compiled once: it is checked for every tool call of every request's history, and
    // the loop benchmark (examples/bench_loop.rs) runs this server in its own process.
    static TOOL_NAME: LazyLock<Regex> =
        LazyLock::new(|| Regex::new("^[a-zA-Z0-9_-]{1,64}$").expect("tool name pattern"));
    TOOL_NAME.is_match(name)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

fn check_json_content_type(headers: &HeaderMap, problems: &mut Vec<String>) {
    match header(headers, "content-type") {
        Some(kind) if kind.starts_with("application/json") => {}
        other => problems.push(format!(
            "content-type must be application/json, got {other:?}"
        )),
    }
}

fn check_keys(value: &Value, allowed: &[&str], what: &str, problems: &mut Vec<String>) {
    if let Some(object) = value.as_object() {
        for key in object.keys() {
            if !allowed.contains(&key.as_str()) {
                problems.push(format!("{what}.{key}: Extra inputs are not permitted"));
            }
        }
    }
}

/// What OpenAI's own reasoning models refuse on chat completions, as the real API says:
/// `max_tokens` from GPT-5 (and the o-series) on, and function tools with reasoning on
/// from GPT-5.6 on.
fn check_reasoning_model(body: &Value, problems: &mut Vec<String>) {
    let model = body["model"].as_str().unwrap_or_default();
    let name = model.rsplit('/').next().unwrap_or(model);
    let version: Option<(u32, u32)> = name.strip_prefix("gpt-").and_then(|rest| {
        let mut parts = rest.split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts
            .next()
            .and_then(|minor| minor.parse().ok())
            .unwrap_or(0);
        Some((major, minor))
    });
    let Some(version) = version.filter(|(major, _)| *major >= 5) else {
        return;
    };
    if body.get("max_tokens").is_some() {
        problems.push(format!(
            "Unsupported parameter: 'max_tokens' is not supported with {model}. Use \
             'max_completion_tokens' instead."
        ));
    }
    let tools = body["tools"]
        .as_array()
        .is_some_and(|tools| !tools.is_empty());
    if tools && version >= (5, 6) && body["reasoning_effort"] != "none" {
        problems.push(format!(
            "Function tools with reasoning_effort are not supported for {model} in \
             /v1/chat/completions. To use function tools, use /v1/responses or set \
             reasoning_effort to 'none'."
        ));
    }
}

fn check_model_and_max_tokens(body: &Value, problems: &mut Vec<String>, max_tokens_required: bool) {
    match body.get("model").and_then(Value::as_str) {
        Some(model) if !model.is_empty() => {}
        _ => problems.push("model: Field required (a non-empty string)".to_owned()),
    }
    let max_tokens = body
        .get("max_tokens")
        .or_else(|| body.get("max_completion_tokens"));
    match max_tokens {
        Some(value) if value.as_u64().is_some_and(|n| n > 0) => {}
        None if !max_tokens_required => {}
        other => problems.push(format!(
            "max_tokens: must be a positive integer, got {other:?}"
        )),
    }
    if let Some(stream) = body.get("stream")
        && !stream.is_boolean()
    {
        problems.push(format!("stream: must be a boolean, got {stream}"));
    }
}

fn check_object_schema(schema: Option<&Value>, what: &str, problems: &mut Vec<String>) {
    match schema {
        Some(schema) if schema.is_object() && schema.get("type") == Some(&Value::from("object")) => {}
        other => problems.push(format!(
            "{what}: input schema must be a JSON Schema object with \"type\": \"object\", got {other:?}"
        )),
    }
}

fn check_cache_control(value: &Value, what: &str, count: &mut usize, problems: &mut Vec<String>) {
    let Some(cache) = value.get("cache_control") else {
        return;
    };
    *count += 1;
    if cache.get("type") != Some(&Value::from("ephemeral")) {
        problems.push(format!(
            "{what}.cache_control: type must be \"ephemeral\", got {cache}"
        ));
    }
    check_keys(
        cache,
        &["type", "ttl"],
        &format!("{what}.cache_control"),
        problems,
    );
}

/// A tool call's `arguments` in the history: a string, and (as llama.cpp's server and
/// validating proxies insist, refusing the whole request) one that holds a JSON object.
fn check_arguments(arguments: Option<&Value>, what: &str, problems: &mut Vec<String>) {
    match arguments.and_then(Value::as_str) {
        None => problems.push(format!("{what}: must be a string")),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(_)) => {}
            Ok(other) => problems.push(format!(
                "{what}: Failed to parse tool call arguments as a JSON object, got {other}"
            )),
            Err(error) => problems.push(format!(
                "{what}: Failed to parse tool call arguments as JSON: {error}: {text:?}"
            )),
        },
    }
}

/// Validates a Messages API request.
pub(super) fn anthropic(headers: &HeaderMap, body: &Value) -> Result<(), Rejection> {
    match header(headers, "x-api-key") {
        Some(key) if !key.trim().is_empty() => {}
        _ => {
            return Err(Rejection::authentication(
                "x-api-key header is required".to_owned(),
            ));
        }
    }
    let mut problems = Vec::new();
    match header(headers, "anthropic-version") {
        Some("2023-06-01") => {}
        other => problems.push(format!(
            "anthropic-version: must be 2023-06-01, got {other:?}"
        )),
    }
    check_json_content_type(headers, &mut problems);
    if !body.is_object() {
        problems.push("the body must be a JSON object".to_owned());
        return Err(Rejection::invalid(problems));
    }
    check_keys(
        body,
        &[
            "model",
            "max_tokens",
            "messages",
            "system",
            "tools",
            "tool_choice",
            "stream",
            "temperature",
            "top_p",
            "top_k",
            "stop_sequences",
            "metadata",
            "thinking",
            "service_tier",
        ],
        "body",
        &mut problems,
    );
    check_model_and_max_tokens(body, &mut problems, true);
    let mut breakpoints = 0;

    match body.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) => {
            for (i, block) in blocks.iter().enumerate() {
                let what = format!("system.{i}");
                if block.get("type") != Some(&Value::from("text")) {
                    problems.push(format!("{what}: system blocks must be text blocks"));
                }
                match block.get("text").and_then(Value::as_str) {
                    Some(text) if !text.is_empty() => {}
                    _ => problems.push(format!(
                        "{what}.text: text content blocks must be non-empty"
                    )),
                }
                check_keys(
                    block,
                    &["type", "text", "cache_control"],
                    &what,
                    &mut problems,
                );
                check_cache_control(block, &what, &mut breakpoints, &mut problems);
            }
        }
        Some(other) => problems.push(format!(
            "system: must be a string or text blocks, got {other}"
        )),
    }

    if let Some(tools) = body.get("tools") {
        let Some(tools) = tools.as_array() else {
            problems.push("tools: must be an array".to_owned());
            return Err(Rejection::invalid(problems));
        };
        let mut names = HashSet::new();
        for (i, tool) in tools.iter().enumerate() {
            let what = format!("tools.{i}");
            check_keys(
                tool,
                &[
                    "name",
                    "description",
                    "input_schema",
                    "cache_control",
                    "type",
                ],
                &what,
                &mut problems,
            );
            match tool.get("name").and_then(Value::as_str) {
                Some(name) if tool_name_ok(name) => {
                    if !names.insert(name.to_owned()) {
                        problems.push(format!("{what}.name: tool names must be unique ({name})"));
                    }
                }
                other => problems.push(format!(
                    "{what}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$', got {other:?}"
                )),
            }
            if let Some(description) = tool.get("description")
                && !description.is_string()
            {
                problems.push(format!("{what}.description: must be a string"));
            }
            check_object_schema(tool.get("input_schema"), &what, &mut problems);
            check_cache_control(tool, &what, &mut breakpoints, &mut problems);
        }
    }

    let messages = match body.get("messages").and_then(Value::as_array) {
        Some(messages) if !messages.is_empty() => messages.as_slice(),
        _ => {
            problems.push("messages: Field required (a non-empty array)".to_owned());
            return Err(Rejection::invalid(problems));
        }
    };
    if messages[0].get("role") != Some(&Value::from("user")) {
        problems.push("messages.0.role: the first message must use the \"user\" role".to_owned());
    }
    let mut pending: Vec<String> = Vec::new();
    let mut seen_tool_use_ids = HashSet::new();
    let mut previous_role: Option<&str> = None;
    for (i, message) in messages.iter().enumerate() {
        let what = format!("messages.{i}");
        check_keys(message, &["role", "content"], &what, &mut problems);
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "assistant" {
            problems.push(format!(
                "{what}.role: must be \"user\" or \"assistant\", got {role:?}"
            ));
        }
        if previous_role == Some(role) {
            problems.push(format!(
                "{what}: roles must alternate between \"user\" and \"assistant\""
            ));
        }
        previous_role = Some(role);
        let blocks: Vec<Value> = match message.get("content") {
            Some(Value::String(text)) if !text.is_empty() => {
                vec![serde_json::json!({"type": "text", "text": text})]
            }
            Some(Value::Array(blocks)) if !blocks.is_empty() => blocks.clone(),
            other => {
                problems.push(format!(
                    "{what}.content: must be a non-empty string or array, got {other:?}"
                ));
                Vec::new()
            }
        };

        // Results answering the previous assistant turn must lead this message.
        let leading_results: Vec<String> = blocks
            .iter()
            .take_while(|block| block.get("type") == Some(&Value::from("tool_result")))
            .filter_map(|block| {
                block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        if !pending.is_empty() {
            if role != "user" {
                problems.push(format!(
                    "{what}: tool_use ids {pending:?} were found without tool_result blocks immediately after"
                ));
            } else {
                for id in &pending {
                    if leading_results.iter().filter(|r| *r == id).count() != 1 {
                        problems.push(format!(
                            "{what}: tool_use id {id} must be answered by exactly one tool_result at the start of this message"
                        ));
                    }
                }
            }
        }
        let mut seen_other = false;
        let mut this_turn_tool_uses = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let what = format!("{what}.content.{j}");
            let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "text" => {
                    seen_other = true;
                    check_keys(
                        block,
                        &["type", "text", "cache_control", "citations"],
                        &what,
                        &mut problems,
                    );
                    match block.get("text").and_then(Value::as_str) {
                        Some(text) if !text.is_empty() => {}
                        _ => problems.push(format!(
                            "{what}.text: text content blocks must be non-empty"
                        )),
                    }
                }
                "tool_use" => {
                    seen_other = true;
                    check_keys(
                        block,
                        &["type", "id", "name", "input", "cache_control"],
                        &what,
                        &mut problems,
                    );
                    if role != "assistant" {
                        problems.push(format!(
                            "{what}: tool_use blocks are only allowed in assistant messages"
                        ));
                    }
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                    if id.is_empty() {
                        problems.push(format!("{what}.id: Field required"));
                    } else if !seen_tool_use_ids.insert(id.to_owned()) {
                        problems.push(format!("{what}.id: tool_use ids must be unique ({id})"));
                    }
                    match block.get("name").and_then(Value::as_str) {
                        Some(name) if tool_name_ok(name) => {}
                        other => problems.push(format!("{what}.name: invalid tool name {other:?}")),
                    }
                    if !block.get("input").is_some_and(Value::is_object) {
                        problems.push(format!("{what}.input: Input should be a valid dictionary"));
                    }
                    this_turn_tool_uses.push(id.to_owned());
                }
                "tool_result" => {
                    check_keys(
                        block,
                        &[
                            "type",
                            "tool_use_id",
                            "content",
                            "is_error",
                            "cache_control",
                        ],
                        &what,
                        &mut problems,
                    );
                    if seen_other {
                        problems.push(format!(
                            "{what}: tool_result blocks must come first in the user message, before any other content"
                        ));
                    }
                    if role != "user" {
                        problems.push(format!(
                            "{what}: tool_result blocks are only allowed in user messages"
                        ));
                    }
                    let id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if !pending.iter().any(|p| p == id) {
                        problems.push(format!(
                            "{what}: unexpected tool_use_id {id:?} in tool_result blocks: each tool_result must have a corresponding tool_use in the previous message"
                        ));
                    }
                    match block.get("content") {
                        None | Some(Value::String(_)) | Some(Value::Array(_)) => {}
                        Some(other) => problems.push(format!(
                            "{what}.content: must be a string or array, got {other}"
                        )),
                    }
                    if let Some(flag) = block.get("is_error")
                        && !flag.is_boolean()
                    {
                        problems.push(format!("{what}.is_error: must be a boolean"));
                    }
                }
                "image" | "document" | "thinking" | "redacted_thinking" => seen_other = true,
                other => {
                    problems.push(format!("{what}.type: unknown content block type {other:?}"))
                }
            }
            check_cache_control(block, &what, &mut breakpoints, &mut problems);
        }
        pending = this_turn_tool_uses;
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the last message calls tools {pending:?} that no tool_result answers"
        ));
    }
    if breakpoints > 4 {
        problems.push(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Rejection::invalid(problems))
    }
}

/// Validates a chat completions request.
pub(super) fn openai(
    headers: &HeaderMap,
    body: &Value,
    require_auth: bool,
) -> Result<(), Rejection> {
    match header(headers, "authorization") {
        Some(auth) => match auth.strip_prefix("Bearer ") {
            Some(token) if !token.trim().is_empty() => {}
            _ => {
                return Err(Rejection::authentication(format!(
                    "malformed Authorization header (expected \"Bearer <key>\"), got {} characters",
                    auth.len()
                )));
            }
        },
        None if require_auth => {
            return Err(Rejection::authentication(
                "You didn't provide an API key (Authorization: Bearer)".to_owned(),
            ));
        }
        None => {}
    }
    let mut problems = Vec::new();
    check_json_content_type(headers, &mut problems);
    if !body.is_object() {
        problems.push("the body must be a JSON object".to_owned());
        return Err(Rejection::invalid(problems));
    }
    check_keys(
        body,
        &[
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "tools",
            "tool_choice",
            "stream",
            "stream_options",
            "temperature",
            "top_p",
            "n",
            "stop",
            "seed",
            "user",
            "parallel_tool_calls",
            "response_format",
            "reasoning_effort",
            "metadata",
            "store",
            "logprobs",
            "top_logprobs",
            "presence_penalty",
            "frequency_penalty",
            "prompt_cache_key",
        ],
        "body",
        &mut problems,
    );
    check_model_and_max_tokens(body, &mut problems, true);
    check_reasoning_model(body, &mut problems);
    if let Some(key) = body.get("prompt_cache_key")
        && !key.is_string()
    {
        problems.push(format!("prompt_cache_key: must be a string, got {key}"));
    }
    if let Some(options) = body.get("stream_options") {
        if body.get("stream") != Some(&Value::Bool(true)) {
            problems.push(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled"
                    .to_owned(),
            );
        }
        check_keys(
            options,
            &["include_usage", "include_obfuscation"],
            "stream_options",
            &mut problems,
        );
        if let Some(flag) = options.get("include_usage")
            && !flag.is_boolean()
        {
            problems.push("stream_options.include_usage: must be a boolean".to_owned());
        }
    }

    if let Some(tools) = body.get("tools") {
        match tools.as_array() {
            Some(tools) if !tools.is_empty() => {
                let mut names = HashSet::new();
                for (i, tool) in tools.iter().enumerate() {
                    let what = format!("tools[{i}]");
                    check_keys(tool, &["type", "function"], &what, &mut problems);
                    if tool.get("type") != Some(&Value::from("function")) {
                        problems.push(format!("{what}.type: must be \"function\""));
                    }
                    let function = tool.get("function").unwrap_or(&Value::Null);
                    check_keys(
                        function,
                        &["name", "description", "parameters", "strict"],
                        &format!("{what}.function"),
                        &mut problems,
                    );
                    match function.get("name").and_then(Value::as_str) {
                        Some(name) if tool_name_ok(name) => {
                            if !names.insert(name.to_owned()) {
                                problems.push(format!("{what}: duplicate function name {name}"));
                            }
                        }
                        other => problems.push(format!(
                            "Invalid '{what}.function.name': string does not match pattern '^[a-zA-Z0-9_-]+$', got {other:?}"
                        )),
                    }
                    if let Some(description) = function.get("description")
                        && !description.is_string()
                    {
                        problems.push(format!("{what}.function.description: must be a string"));
                    }
                    check_object_schema(
                        function.get("parameters"),
                        &format!("{what}.function.parameters"),
                        &mut problems,
                    );
                }
            }
            _ => problems.push("tools: must be a non-empty array when present".to_owned()),
        }
    }

    let messages = match body.get("messages").and_then(Value::as_array) {
        Some(messages) if !messages.is_empty() => messages.as_slice(),
        _ => {
            problems.push("messages: must be a non-empty array".to_owned());
            return Err(Rejection::invalid(problems));
        }
    };
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let what = format!("messages[{i}]");
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "tool" && !pending.is_empty() {
            problems.push(format!(
                "{what}: An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {pending:?}"
            ));
            pending.clear();
        }
        let content = message.get("content");
        let content_ok = |allow_null: bool| match content {
            Some(Value::String(_)) => true,
            Some(Value::Array(parts)) => !parts.is_empty(),
            Some(Value::Null) | None => allow_null,
            Some(_) => false,
        };
        match role {
            "system" | "developer" | "user" => {
                check_keys(message, &["role", "content", "name"], &what, &mut problems);
                if !content_ok(false) {
                    problems.push(format!(
                        "{what}.content: must be a string or a non-empty array of parts"
                    ));
                }
            }
            "assistant" => {
                check_keys(
                    message,
                    &["role", "content", "name", "tool_calls", "refusal"],
                    &what,
                    &mut problems,
                );
                let calls = message.get("tool_calls");
                if !content_ok(calls.is_some()) {
                    problems.push(format!(
                        "{what}.content: required unless tool_calls is specified"
                    ));
                }
                if let Some(calls) = calls {
                    match calls.as_array() {
                        Some(calls) if !calls.is_empty() => {
                            for (j, call) in calls.iter().enumerate() {
                                let what = format!("{what}.tool_calls[{j}]");
                                check_keys(call, &["id", "type", "function"], &what, &mut problems);
                                let id = call.get("id").and_then(Value::as_str).unwrap_or("");
                                if id.is_empty() {
                                    problems.push(format!("{what}.id: required"));
                                }
                                if call.get("type") != Some(&Value::from("function")) {
                                    problems.push(format!("{what}.type: must be \"function\""));
                                }
                                let function = call.get("function").unwrap_or(&Value::Null);
                                check_keys(
                                    function,
                                    &["name", "arguments"],
                                    &format!("{what}.function"),
                                    &mut problems,
                                );
                                if !function
                                    .get("name")
                                    .and_then(Value::as_str)
                                    .is_some_and(tool_name_ok)
                                {
                                    problems.push(format!("{what}.function.name: invalid"));
                                }
                                check_arguments(
                                    function.get("arguments"),
                                    &format!("{what}.function.arguments"),
                                    &mut problems,
                                );
                                pending.push(id.to_owned());
                            }
                        }
                        _ => problems.push(format!("{what}.tool_calls: must be a non-empty array")),
                    }
                }
            }
            "tool" => {
                check_keys(
                    message,
                    &["role", "content", "tool_call_id"],
                    &what,
                    &mut problems,
                );
                if !content_ok(false) {
                    problems.push(format!(
                        "{what}.content: must be a string or a non-empty array of parts"
                    ));
                }
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match pending.iter().position(|p| p == id) {
                    Some(position) => {
                        pending.remove(position);
                    }
                    None => problems.push(format!(
                        "{what}: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (tool_call_id {id:?})"
                    )),
                }
            }
            other => problems.push(format!("{what}.role: unknown role {other:?}")),
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {pending:?}"
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Rejection::invalid(problems))
    }
}
