//! The words every layer speaks of a subtask: its label (`S3`), how it ended and what its
//! reviewer decided. Typed from the journal to the events and the JSON report, each
//! spelled in one place (`Display`/`as_str`, and serde's names, which are the same).
//!
//! This file owns those spellings: the journal's records and `grove run --json` are
//! contracts (DESIGN.md), so a variant is added, never renamed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Subtask `n` of a run, numbered from 1 in the order the lead delegated; 0 is the lead's
/// own worktree. Written as its label (`S3`) wherever it is text: the journal, events,
/// reports; serde reads and writes exactly that label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SubtaskId(pub u32);

impl SubtaskId {
    /// The number, as the git layer names branches and worktrees with it.
    pub fn number(self) -> u32 {
        self.0
    }
}

impl fmt::Display for SubtaskId {
    /// `S3`; honours width and alignment (`{:<5}`) as the label's text would.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format!("S{}", self.0))
    }
}

/// A subtask label that is not `S<number>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{label}` is not a subtask label (S1, S2, …)")]
pub struct BadSubtaskLabel {
    pub label: String,
}

impl FromStr for SubtaskId {
    type Err = BadSubtaskLabel;

    /// Reads a label written by [`Display`](fmt::Display), as a journal holds it.
    fn from_str(label: &str) -> Result<Self, Self::Err> {
        label
            .strip_prefix('S')
            .and_then(|digits| digits.parse().ok())
            .map(SubtaskId)
            .ok_or_else(|| BadSubtaskLabel {
                label: label.to_owned(),
            })
    }
}

impl TryFrom<String> for SubtaskId {
    type Error = BadSubtaskLabel;
    fn try_from(label: String) -> Result<Self, Self::Error> {
        label.parse()
    }
}

impl From<SubtaskId> for String {
    fn from(id: SubtaskId) -> Self {
        id.to_string()
    }
}

/// The reviewer's decision on a subtask's diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    Approve,
    Reject,
}

/// How a subtask ended (the `status` of a subtask in `grove run --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtaskOutcome {
    /// Approved and merged onto the run's result.
    Merged,
    /// The reviewer rejected it.
    Rejected,
    /// Approved, but merging it onto the result conflicted.
    Conflict,
    /// The worker or the review could not complete.
    Failed,
}

impl SubtaskOutcome {
    /// The name used in JSON and messages, e.g. `merged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Merged => "merged",
            Self::Rejected => "rejected",
            Self::Conflict => "conflict",
            Self::Failed => "failed",
        }
    }
}

impl VerdictKind {
    /// `approve` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }
}

impl std::fmt::Display for SubtaskOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for VerdictKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_reads_back_as_the_id_that_wrote_it() {
        assert_eq!(SubtaskId(3).to_string(), "S3");
        assert_eq!("S12".parse(), Ok(SubtaskId(12)));
        assert_eq!(
            "lead".parse::<SubtaskId>(),
            Err(BadSubtaskLabel {
                label: "lead".into()
            }),
            "only S<number> is a subtask label"
        );
        assert!("S".parse::<SubtaskId>().is_err(), "a label has a number");
        assert_eq!(
            format!("{:<5}|", SubtaskId(2)),
            "S2   |",
            "padded like its text"
        );
    }

    #[test]
    fn serde_writes_and_reads_the_label() {
        assert_eq!(
            serde_json::to_string(&SubtaskId(3)).ok(),
            Some("\"S3\"".into())
        );
        assert_eq!(
            serde_json::from_str::<SubtaskId>("\"S12\"").ok(),
            Some(SubtaskId(12))
        );
        assert!(
            serde_json::from_str::<SubtaskId>("\"lead\"").is_err(),
            "a label that is not S<number> is an error, not a panic"
        );
    }
}
