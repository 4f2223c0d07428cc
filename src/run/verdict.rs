//! The reviewer's `submit_verdict` tool and the verdict it records.
//!
//! This file owns the structured verdict contract (DESIGN.md): `verdict`
//! `approve|reject`, a `summary`, and optional `findings`. It must never let a reviewer
//! change its verdict once given: the first one counts.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::store::journal::{Finding, VerdictKind};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// A reviewer's decision on one diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: VerdictKind,
    pub summary: String,
    pub findings: Vec<Finding>,
}

/// Where a finding is: `path:line`, or the path alone.
pub struct FindingPlace<'a>(&'a Finding);

impl std::fmt::Display for FindingPlace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.line {
            Some(line) => write!(f, "{}:{line}", self.0.path),
            None => f.write_str(&self.0.path),
        }
    }
}

impl Finding {
    /// Where the finding is, as `path:line` (the one spelling of it).
    pub fn place(&self) -> FindingPlace<'_> {
        FindingPlace(self)
    }
}

impl std::fmt::Display for Finding {
    /// `path:line: problem`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place(), self.problem)
    }
}

/// The `submit_verdict` tool; the verdict lands in a slot the orchestrator reads after
/// the reviewer's loop ends.
#[derive(Debug, Default)]
pub struct SubmitVerdict {
    slot: Arc<Mutex<Option<Verdict>>>,
}

#[derive(Deserialize)]
struct VerdictInput {
    verdict: VerdictKind,
    summary: String,
    #[serde(default)]
    findings: Vec<FindingInput>,
}

#[derive(Deserialize)]
struct FindingInput {
    path: String,
    #[serde(default)]
    line: Option<u32>,
    problem: String,
}

impl SubmitVerdict {
    /// A tool with an empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The verdict submitted so far, if any.
    pub fn verdict(&self) -> Option<Verdict> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Tool for SubmitVerdict {
    fn name(&self) -> &'static str {
        "submit_verdict"
    }

    fn description(&self) -> &str {
        "Submit your verdict on the diff, exactly once, as your last action: `approve` or \
         `reject`, a one-paragraph summary, and findings (path, optional line, problem)."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["approve", "reject"]},
                "summary": {"type": "string", "description": "One paragraph: what the diff does and why you decided so."},
                "findings": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string"},
                            "line": {"type": "integer", "minimum": 1},
                            "problem": {"type": "string"}
                        },
                        "required": ["path", "problem"]
                    }
                }
            },
            "required": ["verdict", "summary"]
        })
    }

    fn mutates(&self) -> bool {
        // It changes nothing on disk; ordering against other calls does not matter
        // because only the first verdict counts.
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: VerdictInput = parse_input(self, input)?;
        if input.summary.trim().is_empty() {
            return Err(ToolError::RespondToModel(
                "the summary must say what the diff does and why you decided so".into(),
            ));
        }
        let verdict = Verdict {
            kind: input.verdict,
            summary: input.summary.trim().to_owned(),
            findings: input
                .findings
                .into_iter()
                .map(|finding| Finding {
                    path: finding.path,
                    line: finding.line,
                    problem: finding.problem,
                })
                .collect(),
        };
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return Err(ToolError::RespondToModel(
                "a verdict was already submitted; only the first one counts.".into(),
            ));
        }
        *slot = Some(verdict);
        Ok(ToolOutput::last("Verdict recorded."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_spelled_path_line_problem_and_its_place_alone_without_a_line() {
        let mut finding = Finding {
            path: "src/a.rs".into(),
            line: Some(7),
            problem: "off by one".into(),
        };
        assert_eq!(finding.to_string(), "src/a.rs:7: off by one");
        finding.line = None;
        assert_eq!(
            (finding.place().to_string(), finding.to_string()),
            ("src/a.rs".to_owned(), "src/a.rs: off by one".to_owned()),
            "a finding without a line names its file alone"
        );
    }
}
