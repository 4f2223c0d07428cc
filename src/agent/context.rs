//! A child agent's first messages: isolated (the brief alone) or forked from the lead.
//!
//! This file owns what a child sees of the conversation before its own first turn. It
//! must never add anything a context mode does not promise: an isolated child sees its
//! brief and nothing else (the system prompt is the role's business, not this file's).

use crate::model::{ContentBlock, Message, Role};

/// The messages of an isolated child: its brief alone, as one user message.
pub fn isolated_messages(brief: &str) -> Vec<Message> {
    vec![Message::user_text(brief)]
}

/// The messages of a forked child: the lead's conversation so far, then the brief.
///
/// The lead forks while one of its own tool calls (the `delegate` call) is pending, so
/// its history ends with an assistant turn whose tool calls have no results yet. A
/// provider rejects tool calls without results, so those tool_use blocks are dropped,
/// and the whole message when nothing else is left in it. The brief then follows as a
/// user message, or as a text block appended to the last message when that is already a
/// user message, because providers require user and assistant turns to alternate.
pub fn fork_messages(lead_messages: &[Message], brief: &str) -> Vec<Message> {
    let mut messages = lead_messages.to_vec();
    if let Some(last) = messages.last_mut()
        && last.role == Role::Assistant
    {
        last.content
            .retain(|block| !matches!(block, ContentBlock::ToolUse { .. }));
        if last.content.is_empty() {
            messages.pop();
        }
    }
    append_user_text(&mut messages, brief);
    messages
}

/// Appends `text` as the user's next words: a new user message, or a text block at the
/// end of the last message when that is already a user message, because providers
/// require user and assistant turns to alternate (tool results stay first).
pub(crate) fn append_user_text(messages: &mut Vec<Message>, text: &str) {
    let block = ContentBlock::Text {
        text: text.to_owned(),
    };
    match messages.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(block),
        _ => messages.push(Message {
            role: Role::User,
            content: vec![block],
        }),
    }
}
