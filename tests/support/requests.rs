//! Reading the requests the fake model server recorded: whose request it was.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::fake_server::RecordedRequest;

/// The role that sent `request`, from its system prompt: `lead`, `reviewer` or `worker`.
pub fn role(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if system.starts_with("You are an independent code reviewer") {
        "reviewer"
    } else {
        "worker"
    }
}

/// Which built-in role sent a request, told by its system prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Who {
    Lead,
    Worker,
    Reviewer,
}

pub fn who(request: &RecordedRequest) -> Who {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        Who::Lead
    } else if system.starts_with("You are an independent code reviewer") {
        Who::Reviewer
    } else {
        assert!(
            system.starts_with("You are a software engineer"),
            "unknown role: {system}"
        );
        Who::Worker
    }
}

/// Everything the lead was told in `request`'s conversation, joined: its tool results
/// (`delegate`, `wait`, …) and the text of every user message (its task, and grove's
/// message with the results it had not heard when it ended).
pub fn heard_by_lead(request: &RecordedRequest) -> String {
    let mut heard: Vec<String> = request
        .tool_results()
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    for message in request.messages().iter().filter(|m| m["role"] == "user") {
        match message["content"].as_array() {
            Some(blocks) => heard.extend(
                blocks
                    .iter()
                    .filter(|block| block["type"] == "text")
                    .filter_map(|block| block["text"].as_str().map(str::to_owned)),
            ),
            None => heard.extend(message["content"].as_str().map(str::to_owned)),
        }
    }
    heard.join("\n")
}
