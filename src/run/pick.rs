//! The judge's `submit_verdict`: the verdict on several attempts at one brief — the one
//! picked, or none — and why each other one lost.
//!
//! This file owns that contract: `verdict` `approve` with `pick` (an attempt's label) or
//! `reject` (every attempt), a `summary`, why each attempt not picked lost
//! (`not_picked`), and findings on the pick. It must never record a pick that is not
//! one of the attempts shown, and never let a judge change its decision once given.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::run::verdict::{FindingInput, REJECT_WITHOUT_BLOCKING, findings_schema};
use crate::store::journal::{Finding, VerdictKind};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// A judge's decision on the attempts it was shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JudgePick {
    /// The label of the attempt picked; `None`: every attempt is rejected.
    pub(crate) picked: Option<char>,
    pub(crate) summary: String,
    /// Findings on the pick (remarks), or on why none can be merged.
    pub(crate) findings: Vec<Finding>,
    /// Why each attempt not picked lost, by label, in the judge's words.
    pub(crate) not_picked: Vec<(char, String)>,
}

/// The judge's `submit_verdict`; the decision lands in a slot read once its loop ends.
#[derive(Debug)]
pub(crate) struct SubmitPick {
    /// The labels of the attempts shown, in order.
    labels: Vec<char>,
    slot: Arc<Mutex<Option<JudgePick>>>,
}

#[derive(Deserialize)]
struct PickInput {
    verdict: VerdictKind,
    #[serde(default)]
    pick: Option<String>,
    summary: String,
    #[serde(default)]
    not_picked: Vec<LostInput>,
    #[serde(default)]
    findings: Vec<JudgeFinding>,
}

/// A finding as the judge writes it: on one attempt, named, or on them all.
#[derive(Deserialize)]
struct JudgeFinding {
    #[serde(default)]
    attempt: Option<String>,
    #[serde(flatten)]
    finding: FindingInput,
}

#[derive(Deserialize)]
struct LostInput {
    attempt: String,
    reason: String,
}

impl SubmitPick {
    /// The tool for a judge shown the attempts labelled `labels`.
    pub(crate) fn new(labels: Vec<char>) -> Self {
        Self {
            labels,
            slot: Arc::default(),
        }
    }

    /// The decision submitted so far, if any.
    pub(crate) fn pick(&self) -> Option<JudgePick> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The label `written` names, when it is one of the attempts shown (`B`, `b`,
    /// `attempt B`).
    fn label(&self, written: &str) -> Option<char> {
        let written = written.trim();
        let written = written
            .strip_prefix("attempt ")
            .or_else(|| written.strip_prefix("Attempt "))
            .unwrap_or(written)
            .trim();
        let mut chars = written.chars();
        let label = chars.next()?.to_ascii_uppercase();
        (chars.next().is_none() && self.labels.contains(&label)).then_some(label)
    }

    fn listed(&self) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|label| format!("\"{label}\""))
            .collect();
        labels.join(", ")
    }

    /// The decision `input` makes, or what the judge must fix.
    fn decide(&self, input: PickInput) -> Result<JudgePick, ToolError> {
        let refuse = |message: String| Err(ToolError::RespondToModel(message));
        if input.summary.trim().is_empty() {
            return refuse(
                "the summary must say why you picked the attempt you picked (or none)".into(),
            );
        }
        let picked = match (input.verdict, input.pick.as_deref()) {
            (VerdictKind::Approve, Some(written)) => match self.label(written) {
                Some(label) => Some(label),
                None => {
                    return refuse(format!(
                        "`pick` is `{}`, which is none of the attempts shown ({}); no \
                         verdict was recorded",
                        crate::text::printable(written),
                        self.listed()
                    ));
                }
            },
            (VerdictKind::Approve, None) => {
                return refuse(format!(
                    "`approve` needs `pick`: the label of the attempt to merge ({}); no \
                     verdict was recorded",
                    self.listed()
                ));
            }
            (VerdictKind::Reject, Some(_)) => {
                return refuse(
                    "`reject` rejects every attempt, so it takes no `pick`: submit `approve` \
                     with `pick` to merge one, or `reject` without it; no verdict was recorded"
                        .into(),
                );
            }
            (VerdictKind::Reject, None) => None,
        };
        let findings: Vec<Finding> = input
            .findings
            .into_iter()
            .map(|judged| {
                let mut finding = Finding::from(judged.finding);
                // The attempts change the same files: the label says whose line it is.
                if let Some(label) = judged.attempt.as_deref().and_then(|a| self.label(a)) {
                    finding.problem = format!("(attempt {label}) {}", finding.problem);
                }
                finding
            })
            .collect();
        if picked.is_none() && !findings.is_empty() && !findings.iter().any(|f| f.blocking) {
            return refuse(REJECT_WITHOUT_BLOCKING.into());
        }
        let mut not_picked = Vec::new();
        for lost in input.not_picked {
            if let Some(label) = self.label(&lost.attempt)
                && Some(label) != picked
                && !lost.reason.trim().is_empty()
                && !not_picked.iter().any(|(known, _)| *known == label)
            {
                not_picked.push((label, lost.reason.trim().to_owned()));
            }
        }
        not_picked.sort_by_key(|(label, _)| *label);
        Ok(JudgePick {
            picked,
            summary: input.summary.trim().to_owned(),
            findings,
            not_picked,
        })
    }
}

#[async_trait]
impl Tool for SubmitPick {
    fn name(&self) -> &'static str {
        "submit_verdict"
    }

    fn description(&self) -> &str {
        "Submit your verdict on the attempts, exactly once, as your last action: `approve` \
         with `pick` (the label of the one attempt to merge), or `reject` (none of them may \
         be merged); a one-paragraph `summary` of why; `not_picked`: for each other attempt, \
         one line on why it lost; and findings on the pick (non-blocking remarks) or, for a \
         `reject`, what stops each from being merged."
    }

    fn input_schema(&self) -> Value {
        let labels: Vec<String> = self.labels.iter().map(char::to_string).collect();
        json!({
            "type": "object",
            "properties": {
                "verdict": {"type": "string", "enum": ["approve", "reject"]},
                "pick": {"type": "string", "enum": labels, "description": "With `approve`: the attempt to merge."},
                "summary": {"type": "string", "description": "One paragraph: why this attempt (or none)."},
                "not_picked": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "attempt": {"type": "string", "enum": labels},
                            "reason": {"type": "string", "description": "One line: why it lost."}
                        },
                        "required": ["attempt", "reason"]
                    }
                },
                "findings": judge_findings_schema(&labels)
            },
            "required": ["verdict", "summary"]
        })
    }

    fn mutates(&self) -> bool {
        // Only the first decision counts, so ordering against other calls is moot.
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: PickInput = parse_input(self, input)?;
        let pick = self.decide(input)?;
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_some() {
            return Err(ToolError::RespondToModel(
                "a verdict was already submitted; only the first one counts.".into(),
            ));
        }
        *slot = Some(pick);
        Ok(ToolOutput::last("Verdict recorded."))
    }
}

/// `findings`, each naming the attempt it is about (the attempts change the same files).
fn judge_findings_schema(labels: &[String]) -> Value {
    let mut schema = findings_schema();
    schema["items"]["properties"]["attempt"] = json!({
        "type": "string",
        "enum": labels,
        "description": "The attempt this finding is about (leave out on an approve: findings are on the pick); leave out for all of them."
    });
    schema
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn ctx() -> ToolContext {
        ToolContext::plain(std::env::temp_dir(), CancellationToken::new())
    }

    async fn refusal(tool: &SubmitPick, input: Value) -> String {
        match tool.run(input, &ctx()).await {
            Err(ToolError::RespondToModel(message)) => message,
            other => panic!("expected a message for the judge, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_pick_must_be_an_attempt_shown_and_a_reject_takes_none() {
        let tool = SubmitPick::new(vec!['B', 'C']);
        let unknown = refusal(
            &tool,
            json!({"verdict": "approve", "pick": "A", "summary": "A is best."}),
        )
        .await;
        let missing = refusal(&tool, json!({"verdict": "approve", "summary": "Fine."})).await;
        let both = refusal(
            &tool,
            json!({"verdict": "reject", "pick": "B", "summary": "None."}),
        )
        .await;
        assert_eq!(
            (
                unknown.starts_with("invalid input"),
                missing.contains("\"B\", \"C\""),
                both.contains("takes no `pick`"),
                tool.pick()
            ),
            (true, true, true, None),
            "a pick outside the attempts shown, an approve without one and a reject with one \
             are sent back, and nothing is recorded: {unknown} / {missing} / {both}"
        );
    }

    #[tokio::test]
    async fn the_pick_and_each_losers_reason_are_recorded_once() {
        let tool = SubmitPick::new(vec!['A', 'B', 'C']);
        let first = tool
            .run(
                json!({"verdict": "approve", "pick": "C", "summary": "C handles the edge.",
                       "not_picked": [{"attempt": "B", "reason": "drops the error path"},
                                      {"attempt": "C", "reason": "the pick cannot lose"},
                                      {"attempt": "A", "reason": "  "}]}),
                &ctx(),
            )
            .await
            .unwrap();
        let second = refusal(&tool, json!({"verdict": "reject", "summary": "None."})).await;
        assert_eq!(
            (first, second.as_str(), tool.pick()),
            (
                ToolOutput::last("Verdict recorded."),
                "a verdict was already submitted; only the first one counts.",
                Some(JudgePick {
                    picked: Some('C'),
                    summary: "C handles the edge.".into(),
                    findings: Vec::new(),
                    not_picked: vec![('B', "drops the error path".into())],
                })
            ),
            "a reason given for the pick, or a blank one, is dropped; \
             only the first decision counts"
        );
    }
}
