//! An in-process [`Model`] for agent-loop tests: replays scripted turns, records every
//! request it gets, and checks that every tool call was answered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use grove::model::{
    ContentBlock, Message, Model, ModelError, ModelNotice, Request, Response, RetryNotice, Role,
    StopReason, Usage,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What the scripted model does for one request.
pub enum Step {
    /// Answers with this turn.
    Respond(Response),
    /// Reports these retries through `on_retry`, then answers with the turn.
    RetryThenRespond(Vec<RetryNotice>, Response),
    /// Fails the turn.
    Fail(ModelError),
    /// Waits until the token is cancelled, then fails with [`ModelError::Cancelled`].
    BlockUntilCancelled,
    /// Never answers and ignores the token, like a client that does not honour it.
    Hang,
}

/// A [`Model`] that plays a script, one [`Step`] per request, in order.
pub struct ScriptedModel {
    steps: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<Request>>,
    blocked: Notify,
}

impl ScriptedModel {
    /// A model that plays `steps` in order and fails once they are used up.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Arc<Self> {
        Arc::new(Self {
            steps: Mutex::new(steps.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
            blocked: Notify::new(),
        })
    }

    /// A model that answers with these turns in order.
    pub fn replying(responses: impl IntoIterator<Item = Response>) -> Arc<Self> {
        Self::new(responses.into_iter().map(Step::Respond))
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// Returns once a [`Step::BlockUntilCancelled`] or [`Step::Hang`] step has begun.
    pub async fn wait_until_blocked(&self) {
        self.blocked.notified().await;
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> String {
        "scripted/test".to_owned()
    }

    async fn complete(
        &self,
        request: &Request,
        cancel: &CancellationToken,
        on_retry: &(dyn Fn(ModelNotice) + Send + Sync),
    ) -> Result<Response, ModelError> {
        let number = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len()
        };
        let step = self.steps.lock().unwrap().pop_front();
        match step {
            Some(Step::Respond(response)) => Ok(response),
            Some(Step::RetryThenRespond(notices, response)) => {
                for notice in notices {
                    on_retry(ModelNotice::Retry(notice));
                }
                Ok(response)
            }
            Some(Step::Fail(error)) => Err(error),
            Some(Step::BlockUntilCancelled) => {
                self.blocked.notify_one();
                cancel.cancelled().await;
                Err(ModelError::Cancelled)
            }
            Some(Step::Hang) => {
                self.blocked.notify_one();
                std::future::pending().await
            }
            None => Err(ModelError::Decode(format!(
                "the scripted model has no step left for request {number}"
            ))),
        }
    }
}

/// An assistant turn that ends with text.
pub fn reply(text: &str) -> Response {
    turn(
        vec![ContentBlock::Text {
            text: text.to_owned(),
        }],
        StopReason::EndTurn,
    )
}

/// An assistant turn that calls these tools: `(id, name, input)`.
pub fn tool_turn(calls: &[(&str, &str, Value)]) -> Response {
    turn(
        calls
            .iter()
            .map(|(id, name, input)| tool_use(id, name, input.clone()))
            .collect(),
        StopReason::ToolUse,
    )
}

/// An assistant turn with this content and stop reason, and no usage.
pub fn turn(content: Vec<ContentBlock>, stop_reason: StopReason) -> Response {
    Response {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason,
        usage: Usage::default(),
        request_id: None,
    }
}

/// `response` with this usage.
pub fn costing(mut response: Response, usage: Usage) -> Response {
    response.usage = usage;
    response
}

/// A tool_use block.
pub fn tool_use(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        input,
    }
}

/// A tool_result block.
pub fn tool_result(id: &str, content: &str, is_error: bool) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: id.to_owned(),
        content: content.to_owned(),
        is_error,
    }
}

/// Panics unless every assistant message with tool calls in `messages` is followed by a
/// user message that holds exactly one tool_result per call, same ids, same order, and
/// nothing else. A trailing assistant message may leave its calls unanswered.
pub fn assert_every_tool_use_answered(messages: &[Message]) {
    for (index, message) in messages.iter().enumerate() {
        let call_ids: Vec<&str> = message.tool_uses().map(|(id, _, _)| id).collect();
        if message.role != Role::Assistant || call_ids.is_empty() {
            continue;
        }
        let Some(next) = messages.get(index + 1) else {
            continue;
        };
        let answered: Vec<Option<&str>> = next
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        let expected: Vec<Option<&str>> = call_ids.iter().copied().map(Some).collect();
        assert_eq!(
            (next.role, answered),
            (Role::User, expected),
            "message {} must be a user message answering the tool calls of message {index} \
             one by one, in order, with nothing else",
            index + 1
        );
    }
}
