//! The lead's `delegate` tool: one call, one subtask.
//!
//! This file owns the tool's contract (DESIGN.md: `delegate {task, mode?:
//! "isolated"|"fork", agent?}`) and what crosses back to the lead: one short result per
//! subtask, never a transcript. It lives in `run/` because it needs the orchestrator,
//! and is handed to the lead's registry so no import runs back up.

use std::sync::Weak;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::run::orchestrator::Orchestrator;
use crate::run::subtask::{DelegateRefusal, DelegateRequest};
use crate::store::journal::ContextMode;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// The `delegate` tool of one run.
pub(crate) struct Delegate {
    orchestrator: Weak<Orchestrator>,
    /// Built once per run: it lists the project's agents.
    description: String,
}

impl Delegate {
    /// The tool for the run behind `orchestrator`; `agents` lists the user agents
    /// (name, description) the lead may name.
    pub(crate) fn new(orchestrator: Weak<Orchestrator>, agents: Vec<(String, String)>) -> Self {
        Self {
            orchestrator,
            description: description(&agents),
        }
    }
}

/// What the lead is told `delegate` does; `agents` lists the user agents (name,
/// description) it may name.
pub(crate) fn description(agents: &[(String, String)]) -> String {
    let mut description = String::from(
        "Hand one subtask to a worker that runs in its own git worktree, concurrently with \
         the other delegate calls of the same response. The worker sees only `task` (and \
         the project rules) unless `mode` is \"fork\", which also gives it this \
         conversation so far. Its diff is reviewed by an independent reviewer and merged \
         if approved. Returns the outcome: merged, rejected (with findings), conflict or \
         failed, and a diffstat.",
    );
    if !agents.is_empty() {
        description.push_str(" Agents you may name in `agent`:");
        for (name, about) in agents {
            description.push_str(&format!(" `{name}`: {about};"));
        }
    }
    description
}

/// The `delegate` input schema (DESIGN.md).
pub(crate) fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "The complete brief: files, the exact change wanted, how to check it."
            },
            "mode": {"type": "string", "enum": ["isolated", "fork"]},
            "agent": {"type": "string", "description": "A project agent's name; leave out for a worker."}
        },
        "required": ["task"]
    })
}

/// The fields of a `delegate` call.
#[derive(Deserialize)]
pub(crate) struct DelegateInput {
    pub(crate) task: String,
    #[serde(default)]
    pub(crate) mode: Option<ContextMode>,
    #[serde(default)]
    pub(crate) agent: Option<String>,
}

impl DelegateInput {
    /// The request this call makes; an empty task is the model's mistake to fix.
    pub(crate) fn into_request(self) -> Result<DelegateRequest, ToolError> {
        if self.task.trim().is_empty() {
            return Err(ToolError::RespondToModel(
                "`task` is empty; write the complete brief for the worker".into(),
            ));
        }
        Ok(DelegateRequest {
            task: self.task,
            mode: self.mode.unwrap_or(ContextMode::Isolated),
            agent: self.agent.filter(|agent| !agent.trim().is_empty()),
        })
    }
}

#[async_trait]
impl Tool for Delegate {
    fn name(&self) -> &'static str {
        "delegate"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        input_schema()
    }

    fn mutates(&self) -> bool {
        // Every subtask works in its own worktree and merges through one queue, so
        // several delegate calls of one response run concurrently — the point of grove.
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let request = parse_input::<DelegateInput>(self, input)?.into_request()?;
        let Some(orchestrator) = self.orchestrator.upgrade() else {
            return Err(ToolError::Fatal("the run is over".into()));
        };
        match orchestrator.delegate(request).await {
            // The report quotes a worker's summary and a reviewer's findings: model text
            // that may carry terminal escapes (issue 12 item 17).
            Ok(result) => Ok(ToolOutput::ok(crate::text::printable(&result).into_owned())),
            Err(DelegateRefusal::Model(message)) => Err(ToolError::RespondToModel(
                crate::text::printable(&message).into_owned(),
            )),
            Err(DelegateRefusal::Fatal(error)) => Err(ToolError::Fatal(format!(
                "the run journal cannot be written: {error}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegate_calls_of_one_response_run_concurrently() {
        // The agent loop runs the non-mutating calls of one response concurrently; were
        // `delegate` mutating, a lead's subtasks would run one after another.
        let tool = Delegate::new(Weak::new(), vec![("docs".into(), "writes docs".into())]);
        assert!(!tool.mutates());
        assert!(tool.description().ends_with(" `docs`: writes docs;"));
    }
}
