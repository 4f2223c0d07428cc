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

    /// `[blocking]` or `[non-blocking]`: how every rendering marks a finding.
    pub fn severity(&self) -> &'static str {
        if self.blocking {
            "[blocking]"
        } else {
            "[non-blocking]"
        }
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

/// One finding as a model writes it (`submit_verdict`'s, a judge's too).
#[derive(Deserialize)]
pub(crate) struct FindingInput {
    path: String,
    #[serde(default)]
    line: Option<u32>,
    problem: String,
    #[serde(default = "blocking_by_default")]
    blocking: bool,
}

impl From<FindingInput> for Finding {
    fn from(finding: FindingInput) -> Self {
        Finding {
            path: finding.path,
            line: finding.line,
            problem: finding.problem,
            blocking: finding.blocking,
        }
    }
}

/// The schema of `findings`, as every verdict tool takes them.
pub(crate) fn findings_schema() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "line": {"type": "integer", "minimum": 1},
                "problem": {"type": "string"},
                "blocking": {"type": "boolean", "description": "true (default): the diff must not be merged with this problem; false: a remark that need not stop the merge."}
            },
            "required": ["path", "problem"]
        }
    })
}

/// A finding that does not say is a reason to reject, as every finding once was.
fn blocking_by_default() -> bool {
    true
}

/// What a reviewer is told of a rejection none of whose findings blocks: a rejection
/// must name what stops the merge, or the diff is approved with remarks.
pub(crate) const REJECT_WITHOUT_BLOCKING: &str = "every finding of this `reject` is \
     `blocking: false`: a `reject` with findings needs at least one with `blocking: true`, \
     the problem that stops this diff from being merged. Mark the blocking one and submit \
     again, or submit `approve` with your remarks as non-blocking findings. No verdict was \
     recorded.";

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
         `reject`, a one-paragraph summary, and findings (path, optional line, problem, \
         blocking). A finding is `blocking: true` (the default) when the diff must not be \
         merged with it, `false` for a remark worth reading that need not stop the merge. \
         `approve` may carry non-blocking findings; a `reject` with findings needs at least \
         one blocking one."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["approve", "reject"]},
                "summary": {"type": "string", "description": "One paragraph: what the diff does and why you decided so."},
                "findings": findings_schema()
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
            findings: input.findings.into_iter().map(Finding::from).collect(),
        };
        // Findings are optional (DESIGN.md): a rejection without any stands on its
        // summary. One whose every finding is a remark names nothing that stops the merge.
        if verdict.kind == VerdictKind::Reject
            && !verdict.findings.is_empty()
            && !verdict.findings.iter().any(|finding| finding.blocking)
        {
            return Err(ToolError::RespondToModel(REJECT_WITHOUT_BLOCKING.into()));
        }
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
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn ctx() -> ToolContext {
        ToolContext::plain(std::env::temp_dir(), CancellationToken::new())
    }

    #[tokio::test]
    async fn a_remark_never_rejects_and_a_rejection_must_name_what_blocks() {
        let tool = SubmitVerdict::new();
        let remark =
            json!({"path": "a.rs", "problem": "a name could be clearer", "blocking": false});

        let refused = tool
            .run(
                json!({"verdict": "reject", "summary": "Nits.", "findings": [remark]}),
                &ctx(),
            )
            .await;
        let refused = match refused {
            Err(ToolError::RespondToModel(message)) => message,
            other => panic!("expected a message for the reviewer, got {other:?}"),
        };
        assert_eq!(
            (refused.as_str(), tool.verdict()),
            (REJECT_WITHOUT_BLOCKING, None),
            "a rejection whose every finding is a remark is sent back, and nothing is recorded"
        );

        let approved = tool
            .run(
                json!({"verdict": "approve", "summary": "Fine.",
                       "findings": [remark, {"path": "b.rs", "line": 3, "problem": "old"}]}),
                &ctx(),
            )
            .await
            .unwrap();
        assert_eq!(
            (approved, tool.verdict()),
            (
                ToolOutput::last("Verdict recorded."),
                Some(Verdict {
                    kind: VerdictKind::Approve,
                    summary: "Fine.".into(),
                    findings: vec![
                        Finding {
                            path: "a.rs".into(),
                            line: None,
                            problem: "a name could be clearer".into(),
                            blocking: false,
                        },
                        Finding {
                            path: "b.rs".into(),
                            line: Some(3),
                            problem: "old".into(),
                            blocking: true,
                        },
                    ],
                })
            ),
            "an approval stays one whatever its findings; a finding that does not say blocks"
        );
    }

    #[tokio::test]
    async fn a_rejection_with_a_blocking_finding_or_none_at_all_stands() {
        for findings in [
            json!([{"path": "a.rs", "problem": "nit", "blocking": false},
                   {"path": "a.rs", "problem": "wrong", "blocking": true}]),
            json!([]),
        ] {
            let tool = SubmitVerdict::new();
            tool.run(
                json!({"verdict": "reject", "summary": "Wrong.", "findings": findings}),
                &ctx(),
            )
            .await
            .unwrap();
            assert_eq!(
                tool.verdict().map(|verdict| verdict.kind),
                Some(VerdictKind::Reject),
                "a rejection naming a blocking finding, or one without findings (they are \
                 optional), is recorded: {findings}"
            );
        }
    }

    #[test]
    fn a_finding_is_spelled_path_line_problem_and_its_place_alone_without_a_line() {
        let mut finding = Finding {
            path: "src/a.rs".into(),
            line: Some(7),
            problem: "off by one".into(),
            blocking: true,
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
