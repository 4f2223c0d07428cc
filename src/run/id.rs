//! A subtask's number and the label it is known by (`S3`).
//!
//! This file owns the one spelling of a subtask label. The journal, events and reports
//! keep writing the label as text (`"S3"`); the run itself counts with numbers and never
//! parses a label it wrote back, except when it reads a journal.

use std::fmt;
use std::str::FromStr;

/// Subtask `n` of a run, numbered from 1 in the order the lead delegated; 0 is the lead's
/// own worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubtaskId(pub u32);

impl SubtaskId {
    /// The number, as the git layer names branches and worktrees with it.
    pub fn number(self) -> u32 {
        self.0
    }
}

impl fmt::Display for SubtaskId {
    /// `S3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "S{}", self.0)
    }
}

/// A journal's subtask label that is not `S<number>`.
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
    }
}
