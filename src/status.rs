//! The words every layer speaks of a subtask's end: how it ended and what its reviewer
//! decided. Typed from the journal to the events and the JSON report, each spelled in
//! one place (`as_str`, and serde's snake_case names, which are the same).
//!
//! This file owns those spellings: the journal's records and `grove run --json` are
//! contracts (DESIGN.md), so a variant is added, never renamed.

use serde::{Deserialize, Serialize};

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
