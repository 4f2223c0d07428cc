//! `run {command, timeout_s?}`: a reviewer's command, to try the work it judges.
//!
//! This tool owns what a reviewer may run: a shell command in a disposable copy-on-write
//! view of the worktree it reviews (its executor's `disposable` one: the same sandbox, no
//! network, every write thrown away when the command ends), capped in time. It must never
//! run through an executor that writes the worktree: a reviewer's tools are read-only.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::bash::Bash;
use super::exec::CommandExecutor;
use super::{Tool, ToolContext, ToolError, ToolOutput};

/// The longest `timeout_s` a reviewer may ask for.
pub const MAX_TIMEOUT_S: u64 = 300;

/// Runs a reviewer's commands through a disposable executor.
#[derive(Debug, Clone)]
pub struct RunCommand {
    bash: Bash,
}

impl RunCommand {
    /// The tool, its commands run through `disposable` (see
    /// [`CommandExecutor::disposable`]).
    pub fn new(disposable: Arc<dyn CommandExecutor>) -> Self {
        Self {
            bash: Bash::new(disposable),
        }
    }
}

#[async_trait]
impl Tool for RunCommand {
    fn name(&self) -> &'static str {
        "run"
    }

    fn description(&self) -> &str {
        "Run a shell command to try the work you review, in a throwaway copy of the \
         worktree: it sees the worker's changes, its writes are discarded when it ends (the \
         worktree never changes), it has no network, and it is killed after `timeout_s` \
         seconds (default 120, at most 300). Use it for a check the brief names, one test, \
         or an import in a fresh process; the project's check already ran, and its outcome \
         is in your brief."
    }

    fn input_schema(&self) -> Value {
        let mut schema = self.bash.input_schema();
        schema["properties"]["timeout_s"]["maximum"] = MAX_TIMEOUT_S.into();
        schema["properties"]["timeout_s"]["description"] =
            "Seconds before the command is killed (default 120, at most 300).".into();
        schema
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, mut input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if let Some(timeout) = input.get("timeout_s").and_then(Value::as_u64) {
            input["timeout_s"] = timeout.min(MAX_TIMEOUT_S).into();
        }
        self.bash.run(input, ctx).await
    }
}
