//! The names grove gives to things in the user's repository: run ids, commit ids, and
//! the branches and refs built from them.
//!
//! This module owns the ref layout. Nothing else formats `grove/...` names by hand.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::GitError;

/// A run's identifier, validated so it is one safe ref path component: the one run id
/// type of grove, used by the git layer for ref names and by the store for run
/// directories.
///
/// Runs get ids of the form `YYYYMMDD-HHMMSS-xxxx` ([`RunId::generate`]), the UTC start
/// time and four random hex digits, so that they sort in start order. Parsing one a user
/// typed (`str::parse`) belongs to the store (`store::runs`), which accepts exactly that
/// shape; [`RunId::new`] accepts any safe ref component (tests and benches use short ones).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

/// The latest start time a run id can spell with a four-digit year (9999-12-31 23:59:59 UTC).
const MAX_RUN_ID_SECONDS: i64 = 253_402_300_799;

impl RunId {
    /// A fresh id for a run starting now.
    pub fn generate() -> RunId {
        let unix_seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| {
                i64::try_from(elapsed.as_secs()).unwrap_or(MAX_RUN_ID_SECONDS)
            });
        RunId::from_parts(unix_seconds, fastrand::u16(..))
    }

    /// The id for a run started at `unix_seconds` (UTC) with random `suffix`. Times
    /// outside 1970..=9999 are clamped, so the id always has its fixed shape.
    pub fn from_parts(unix_seconds: i64, suffix: u16) -> RunId {
        let unix_seconds = unix_seconds.clamp(0, MAX_RUN_ID_SECONDS);
        let days = unix_seconds.div_euclid(86_400);
        let seconds_of_day = unix_seconds.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        RunId(format!(
            "{year:04}{month:02}{day:02}-{:02}{:02}{:02}-{suffix:04x}",
            seconds_of_day / 3600,
            seconds_of_day / 60 % 60,
            seconds_of_day % 60,
        ))
    }

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

    /// Short name of the branch holding the run's squashed history, one commit per merged
    /// subtask over the base: `grove/<run>/squashed`.
    pub fn squashed_branch(&self) -> String {
        format!("grove/{}/squashed", self.0)
    }

    /// Full name of the run's squashed history ref: `refs/heads/grove/<run>/squashed`.
    pub fn squashed_ref(&self) -> String {
        format!("refs/heads/{}", self.squashed_branch())
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
    /// The id; honours width, alignment and precision as its text would.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// Converts days since 1970-01-01 to a proleptic Gregorian (year, month, day).
/// (Howard Hinnant's `civil_from_days`.)
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
    /// The full hex id; honours width, alignment and precision (`{:.10}`) as its text would.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0.to_string())
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
        assert_eq!(
            run.squashed_ref(),
            "refs/heads/grove/20261129-ab_1/squashed"
        );
    }

    #[test]
    fn run_ids_render_utc_time_and_hex_suffix() {
        // 2026-11-29 21:55:30 UTC
        assert_eq!(
            RunId::from_parts(1_795_989_330, 0x7f3a).as_str(),
            "20261129-215530-7f3a"
        );
        assert_eq!(RunId::from_parts(0, 0).as_str(), "19700101-000000-0000");
        // A leap day, to exercise the calendar arithmetic.
        assert_eq!(
            RunId::from_parts(951_782_400, 0xffff).as_str(),
            "20000229-000000-ffff"
        );
    }

    #[test]
    fn run_ids_keep_their_shape_and_ref_safety_at_any_time() {
        for seconds in [i64::MIN, -1, MAX_RUN_ID_SECONDS + 1, i64::MAX] {
            let id = RunId::from_parts(seconds, 0xabcd);
            assert_eq!(
                id.as_str().len(),
                20,
                "{seconds}: the id keeps its fixed width"
            );
            assert_eq!(
                RunId::new(id.as_str()).unwrap(),
                id,
                "{seconds}: a generated id is a valid ref component"
            );
        }
        assert_eq!(RunId::from_parts(-1, 0).as_str(), "19700101-000000-0000");
        assert_eq!(
            RunId::from_parts(i64::MAX, 0).as_str(),
            "99991231-235959-0000"
        );
    }

    #[test]
    fn commit_ids_must_be_full_hex() {
        assert!(CommitId::parse("abc").is_err(), "abbreviations are refused");
        let hex = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(CommitId::parse(hex).unwrap().to_string(), hex);
        assert_eq!(format!("{:.7}", CommitId::parse(hex).unwrap()), "0123456");
        assert_eq!(format!("{:<6}|", RunId::new("r1").unwrap()), "r1    |");
    }
}
