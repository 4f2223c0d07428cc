//! `bash {command, timeout_s?}`: runs a shell command in the worktree.
//!
//! This tool owns what the model is told about a command: its exit code, its capped
//! output, and whether it timed out or was cancelled. How the command runs (process
//! groups, environment, sandboxing) belongs to the [`CommandExecutor`] it holds; this
//! file must never spawn a process itself.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::exec::{CommandExecutor, ExecError, ExecOutcome, ExecRequest, OutputCap};
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Seconds a command may run when the model gives no `timeout_s`.
pub const DEFAULT_TIMEOUT_S: u64 = 120;
/// The longest `timeout_s` the model may ask for.
pub const MAX_TIMEOUT_S: u64 = 600;

/// Runs shell commands through an executor.
#[derive(Debug, Clone)]
pub struct Bash {
    executor: Arc<dyn CommandExecutor>,
}

impl Bash {
    /// A bash tool that runs its commands through `executor`.
    pub fn new(executor: Arc<dyn CommandExecutor>) -> Self {
        Self { executor }
    }
}

#[derive(Debug, Deserialize)]
struct Input {
    command: String,
    timeout_s: Option<u64>,
}

/// True for the result of a command that ran to its end and exited with a status other
/// than 0: its last line is grove's `[exit code: N]` (written after all of the command's
/// output, so no output can stand there), N not 0. A remote host's grove writes the same.
pub fn exited_non_zero(content: &str) -> bool {
    content
        .lines()
        .last()
        .and_then(|line| line.strip_prefix("[exit code: "))
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|code| code != "0")
}

#[async_trait]
impl Tool for Bash {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn description(&self) -> &str {
        "Run a shell command with `bash -c` in the worktree root. stdin is empty; stdout and \
         stderr are merged, and long output keeps its start and end with the middle cut. \
         The command is killed, with every process it started, after `timeout_s` seconds \
         (default 120, at most 600); background processes do not outlive the command. \
         Secrets are not in the environment."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to run."},
                "timeout_s": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TIMEOUT_S,
                    "description": "Seconds before the command is killed (default 120, at most 600)."
                }
            },
            "required": ["command"]
        })
    }

    fn mutates(&self) -> bool {
        true
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self, input)?;
        if input.command.trim().is_empty() {
            return Err(ToolError::RespondToModel(
                "`command` is empty; give a shell command to run".to_owned(),
            ));
        }
        let timeout_s = input
            .timeout_s
            .unwrap_or(DEFAULT_TIMEOUT_S)
            .clamp(1, MAX_TIMEOUT_S);
        let request = ExecRequest {
            command: input.command,
            cwd: ctx.root.clone(),
            timeout: Duration::from_secs(timeout_s),
            cancel: ctx.cancel.child_token(),
            output_cap: OutputCap::default(),
        };
        // A copy-on-write tree's commands run inside its namespaces, never beside them.
        let executed = async { ctx.executor(&self.executor)?.execute(request).await };
        let result = match executed.await {
            Ok(result) => result,
            // The model should know why nothing ran; the file tools still work.
            Err(err @ ExecError::Sandbox { .. }) => {
                return Err(ToolError::RespondToModel(format!(
                    "{err}. Nothing of the command ran; the file tools still work, and the \
                     user can rerun grove with `--sandbox off` to run commands unconfined"
                )));
            }
            Err(err) => {
                return Err(ToolError::Fatal(format!(
                    "the bash tool cannot run commands: {err}"
                )));
            }
        };

        let mut content = result.output_text();
        if result.total_bytes == 0 {
            content.push_str("(no output)\n");
        } else if !content.ends_with('\n') {
            content.push('\n');
        }
        for note in &result.notes {
            content.push_str(note);
            content.push('\n');
        }
        if result.output_abandoned {
            content.push_str(
                "[stopped reading output: a process that left the command's process group still holds it open]\n",
            );
        }
        let is_error = match result.outcome {
            ExecOutcome::Exited(code) => {
                let _ = writeln!(content, "[exit code: {code}]");
                code != 0
            }
            ExecOutcome::Signalled(signal) => {
                let _ = writeln!(content, "[killed by signal {signal}]");
                true
            }
            ExecOutcome::TimedOut => {
                let _ = writeln!(
                    content,
                    "[timed out after {timeout_s} s: the command and every process it started were killed; \
                     pass a larger timeout_s (at most {MAX_TIMEOUT_S}) or run less at once]"
                );
                true
            }
            ExecOutcome::Cancelled => {
                content.push_str(
                    "[cancelled: the command and every process it started were killed]\n",
                );
                true
            }
        };
        if let Some(over) = result.disk_over_budget {
            let _ = writeln!(content, "[failed: {over}]");
        }
        let is_error = is_error || result.disk_over_budget.is_some();
        Ok(ToolOutput {
            content,
            is_error,
            ends_loop: false,
        })
    }
}
