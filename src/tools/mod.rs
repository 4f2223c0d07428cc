//! Tools the models call: one registry, one dispatcher, one file per tool.
//!
//! This module owns what a tool may touch. Every path a tool receives is confined to the
//! context's root; the dispatcher refuses any tool outside the role's allow-list, even if
//! the model names it. It knows nothing of model wire formats, git, or the agent loop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Everything a tool run may use.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The directory every path is confined to (a worktree). Canonical.
    pub root: PathBuf,
    /// Cancelled when the subagent stops; long-running tools must honour it.
    pub cancel: CancellationToken,
}

/// What a tool returns when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// True when the model should read this as a failure (`is_error` tool_result).
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
        }
    }

    /// A failure the model should see and can react to.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
        }
    }
}

/// A tool failure.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model should see this and try something else (bad input, missing file,
    /// path outside the root). Becomes an `is_error` tool_result; the loop goes on.
    #[error("{0}")]
    RespondToModel(String),
    /// The loop itself cannot go on (the worktree vanished, the sandbox failed).
    #[error("{0}")]
    Fatal(String),
}

/// A tool: what the model sees (name, description, schema) next to what it does.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by (a DESIGN.md contract).
    fn name(&self) -> &'static str;
    /// What the model is told the tool does.
    fn description(&self) -> &'static str;
    /// JSON Schema of the input object.
    fn input_schema(&self) -> Value;
    /// True when running it can change files or the world; such calls run one at a time.
    fn mutates(&self) -> bool;
    /// Runs the tool with the model's input.
    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// The schema-level description of a tool, for the model client.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The tools one role may call, and the dispatcher that enforces that list.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`, replacing one of the same name.
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.name(), tool);
        self
    }

    /// The tool names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// The tool called `name`, if this role has it.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// What the model is shown, sorted by name so requests are byte-stable (prompt cache).
    pub fn descriptions(&self) -> Vec<ToolDescription> {
        self.tools
            .values()
            .map(|tool| ToolDescription {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    /// True when the named tool mutates; unknown tools count as mutating so they are
    /// never run concurrently with anything.
    pub fn mutates(&self, name: &str) -> bool {
        self.tools.get(name).is_none_or(|tool| tool.mutates())
    }

    /// Runs the tool `name` with `input` if this role has it.
    ///
    /// Unknown or disallowed tools and invalid input come back as an error output for
    /// the model; only [`ToolError::Fatal`] escapes.
    pub async fn dispatch(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let Some(tool) = self.tools.get(name) else {
            return Ok(ToolOutput::error(format!(
                "tool `{name}` is not available to you; your tools are: {}",
                self.names().join(", ")
            )));
        };
        if !input.is_object() {
            let shown = match &input {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            return Ok(ToolOutput::error(format!(
                "the input to `{name}` must be a JSON object matching its schema; got: {}",
                truncate_chars(&shown, 200)
            )));
        }
        match tool.run(input, ctx).await {
            Ok(output) => Ok(output),
            Err(ToolError::RespondToModel(message)) => Ok(ToolOutput::error(message)),
            Err(fatal @ ToolError::Fatal(_)) => Err(fatal),
        }
    }
}

/// The first `max` characters of `text`, with an ellipsis when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
