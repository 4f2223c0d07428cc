//! Model clients: provider-neutral wire types, the [`Model`] trait the agent loop talks
//! to, and its implementations (Anthropic Messages, OpenAI-compatible chat completions).
//!
//! This module owns everything about talking to a model over HTTP: request shapes,
//! streaming, retries and typed errors. It knows nothing of tools' behaviour, git, or
//! the agent loop; it never prints.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub mod anthropic;
mod arguments;
mod cache;
mod client;
mod error;
mod http;
pub mod openai;
pub mod retry;
mod turn;
mod url;

pub use anthropic::{AnthropicClient, AnthropicConfig};
pub use arguments::UNPARSED_ARGUMENTS_KEY;
pub use cache::{CacheHints, CacheRates, CacheTtl};
pub use client::{DEFAULT_SIBLING_HOLD, SIBLING_HOLD_VAR};
pub use error::{ApiError, ModelError};
pub use http::Delivery;
pub use openai::{OpenAiClient, OpenAiConfig};
pub use retry::RetryPolicy;
pub use turn::{ModelNotice, TimeoutEnv, WaitNotice, WaitPhase};
pub use url::redact_userinfo;

/// Who authored a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One block of message content, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A tool call by the model.
    ///
    /// `input` is the parsed JSON arguments. Real APIs always send an object; when a
    /// model produced arguments that are not a JSON object, the client keeps the raw
    /// text as a `Value::String` so the dispatcher can answer it as a tool error; the
    /// history sends it back as `{"unparsed_arguments": TEXT}`, never as arguments.
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// The answer to a [`ContentBlock::ToolUse`] with the same id.
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// The concatenated text blocks of this message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &serde_json::Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the tool's input object.
    pub input_schema: serde_json::Value,
}

/// One request for one model turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    /// Its prompt-cache group and whether its conversation waits long after this turn.
    pub cache: CacheHints,
}

/// Why the model stopped producing output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    PauseTurn,
    Refusal,
    /// A stop reason this version of grove does not know, kept verbatim.
    Other(String),
}

/// Token usage of one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens not read from or written to the prompt cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

/// One complete model turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The assistant message to append to the history.
    pub message: Message,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// The provider's request id, when it sent one.
    pub request_id: Option<String>,
}

/// A retry the client is about to make, reported so the caller can show it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// 1 for the first retry.
    pub attempt: u32,
    pub delay: std::time::Duration,
    pub reason: String,
}

/// What the agent loop talks to: one turn in, one turn out.
///
/// Implementations handle retries themselves (reporting each retry, and every long wait
/// for the API, through `on_notice`) and return an error only when the turn cannot be
/// had: a non-retryable API answer, retries exhausted, the turn's deadline passed, or
/// cancellation.
#[async_trait]
pub trait Model: Send + Sync {
    /// A short name for logs and ledgers, e.g. `anthropic/claude-sonnet-4-5`.
    fn name(&self) -> String;

    /// Runs one turn.
    async fn complete(
        &self,
        request: &Request,
        cancel: &CancellationToken,
        on_notice: &(dyn Fn(ModelNotice) + Send + Sync),
    ) -> Result<Response, ModelError>;
}

/// Which wire format and service to talk to (`--provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provider {
    /// The Anthropic Messages API.
    #[default]
    Anthropic,
    /// Any OpenAI-compatible chat completions API.
    OpenAi,
}

impl Provider {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Provider {
    type Err = ModelError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "anthropic" => Ok(Provider::Anthropic),
            "openai" => Ok(Provider::OpenAi),
            other => Err(ModelError::Config(format!(
                "unknown provider {other:?}: expected \"anthropic\" or \"openai\""
            ))),
        }
    }
}

/// A client for `provider` configured from the environment (see
/// [`AnthropicConfig::from_env`] and [`OpenAiConfig::from_env`]).
pub fn connect(provider: Provider) -> Result<Arc<dyn Model>, ModelError> {
    Ok(match provider {
        Provider::Anthropic => Arc::new(AnthropicClient::new(AnthropicConfig::from_env()?)?),
        Provider::OpenAi => Arc::new(OpenAiClient::new(OpenAiConfig::from_env()?)?),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn providers_parse_from_the_command_line_names() {
        assert_eq!(
            "anthropic".parse::<Provider>().unwrap(),
            Provider::Anthropic
        );
        assert_eq!("OpenAI".parse::<Provider>().unwrap(), Provider::OpenAi);
        let err = "gemini".parse::<Provider>().unwrap_err();
        assert!(err.to_string().contains("gemini"), "{err}");
        for provider in [Provider::Anthropic, Provider::OpenAi] {
            assert_eq!(provider.as_str().parse::<Provider>().unwrap(), provider);
        }
    }
}
