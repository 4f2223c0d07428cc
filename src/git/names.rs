//! The names grove gives to things in the user's repository: run ids, commit ids, and
//! the branches and refs built from them.
//!
//! This module owns the ref layout. Nothing else formats `grove/...` names by hand.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::GitError;

/// A run's identifier, validated so it is one safe ref path component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

impl RunId {
    /// Validates `id`: 1–64 characters of ASCII letters, digits, `-` and `_`, not
    /// starting with `-`.
    pub fn new(id: impl Into<String>) -> Result<Self, GitError> {
        let id = id.into();
        let reason = if id.is_empty() || id.len() > 64 {
            Some("must be 1 to 64 characters long")
        } else if id.starts_with('-') {
            Some("must not start with '-'")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Some("may only contain ASCII letters, digits, '-' and '_'")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(GitError::InvalidName {
                what: "run id",
                value: id,
                reason,
            }),
            None => Ok(Self(id)),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Short name of the branch of subtask `n`: `grove/<run>/<n>`.
    pub fn subtask_branch(&self, subtask: u32) -> String {
        format!("grove/{}/{subtask}", self.0)
    }

    /// Short name of the run's result branch: `grove/<run>/result`.
    pub fn result_branch(&self) -> String {
        format!("grove/{}/result", self.0)
    }

    /// Full name of the run's result ref: `refs/heads/grove/<run>/result`.
    pub fn result_ref(&self) -> String {
        format!("refs/heads/{}", self.result_branch())
    }

    /// Prefix of the run's archive refs: `refs/grove/archive/<run>/`.
    pub fn archive_prefix(&self) -> String {
        format!("refs/grove/archive/{}/", self.0)
    }
}

impl TryFrom<String> for RunId {
    type Error = GitError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<RunId> for String {
    fn from(value: RunId) -> Self {
        value.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Full name of the branch ref of subtask `n`: `refs/heads/grove/<run>/<n>`.
pub fn subtask_ref(run: &RunId, subtask: u32) -> String {
    format!("refs/heads/{}", run.subtask_branch(subtask))
}

/// A full hexadecimal commit id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CommitId(git2::Oid);

impl CommitId {
    /// Parses a full hexadecimal object id.
    pub fn parse(hex: &str) -> Result<Self, GitError> {
        let valid_length = hex.len() == 40 || hex.len() == 64;
        match git2::Oid::from_str(hex) {
            Ok(oid) if valid_length => Ok(Self(oid)),
            _ => Err(GitError::InvalidName {
                what: "commit id",
                value: hex.to_owned(),
                reason: "must be a full hexadecimal object id",
            }),
        }
    }

    pub(crate) fn from_oid(oid: git2::Oid) -> Self {
        Self(oid)
    }

    pub(crate) fn oid(self) -> git2::Oid {
        self.0
    }
}

impl TryFrom<String> for CommitId {
    type Error = GitError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<CommitId> for String {
    fn from(value: CommitId) -> Self {
        value.0.to_string()
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_that_could_escape_a_ref_component_are_refused() {
        for bad in ["", "a/b", "..", "-x", "a b", "a.lock", "ü"] {
            assert!(RunId::new(bad).is_err(), "{bad:?} must be refused");
        }
        let run = RunId::new("20261129-ab_1").unwrap();
        assert_eq!(run.subtask_branch(3), "grove/20261129-ab_1/3");
        assert_eq!(run.result_ref(), "refs/heads/grove/20261129-ab_1/result");
    }

    #[test]
    fn commit_ids_must_be_full_hex() {
        assert!(CommitId::parse("abc").is_err(), "abbreviations are refused");
        let hex = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(CommitId::parse(hex).unwrap().to_string(), hex);
    }
}
