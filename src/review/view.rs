//! A run and its subtasks as a person reviews them, and why a review cannot go on.
//!
//! This file owns the review's data types and the one rule of when decisions may be
//! recorded ([`RunReview::refusal`]). It must never read or write the store or git
//! beyond rendering a subtask's diff.

use serde::Serialize;

use crate::git::trailers::Trailer;
use crate::git::{Colour, CommitId, DiffStat, GitError, Repo, RunId};
use crate::settings::options::History;
use crate::status::SubtaskId;
use crate::store::StoreError;
use crate::store::attempt_status::AttemptOf;
use crate::store::attempts::AttemptGroup;
use crate::store::journal::{CheckRun, JournalError, VerdictKind};
use crate::store::lock::LockError;
use crate::store::snapshot::SnapshotError;
use crate::store::state::{ReplayError, RunStatus, SubtaskStatus, VerdictState};

/// Why a review could not load, record or apply. None of these are retried.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The run is still going, paused or interrupted: its subtasks may still change.
    #[error(
        "run {run_id} is {status}, not finished, so its subtasks may still change; \
         `grove resume {run_id}` finishes it first (`grove review {run_id} --list` shows it \
         as it is)"
    )]
    NotFinished { run_id: RunId, status: RunStatus },
    /// The result is on the user's branch already; taking part of it back is a git
    /// operation on the user's history, which grove leaves to the user.
    #[error(
        "run {run_id} was already applied to {branch}, so grove review can no longer change \
         it; undo it yourself: {undo}, or `git reset` {branch} to where you want it"
    )]
    AlreadyApplied {
        run_id: RunId,
        branch: String,
        /// How to take the run's commits back, as the history it gave the branch has
        /// them.
        undo: String,
    },
    /// A decision names a subtask the run does not have.
    #[error("run {run_id} has no subtask {subtask} (it has: {known})")]
    UnknownSubtask {
        run_id: RunId,
        subtask: String,
        known: String,
    },
    /// The same subtask is both approved and rejected in one review.
    #[error("{subtask} is both approved and rejected; decide once")]
    ContradictoryDecisions { subtask: String },
    /// `--pick` names a subtask that is no attempt at a brief tried several ways.
    #[error(
        "{subtask} is not one of a group's attempts, so there is nothing to pick it over; \
         --approve {subtask} approves it"
    )]
    NotAnAttempt { subtask: String },
    /// The decisions approve two attempts at one brief: the same work done two ways,
    /// which must never both merge.
    #[error(
        "{first} and {second} are attempts at one brief (the group {group}), so approving \
         both would merge that work twice; keep one: `--pick {first}` approves {first} and \
         rejects {second}"
    )]
    TwoAttempts {
        group: String,
        first: String,
        second: String,
    },
    /// A subtask that left no commit has no work that could be merged.
    #[error(
        "{subtask} cannot be approved: it {status} before producing a commit, so there is no \
         work to merge"
    )]
    NoCommit {
        subtask: String,
        status: &'static str,
    },
    /// An approved subtask started from the result with a rejected one's merged work in
    /// it (it waited for that one: `after`, or overlapping `paths`), so merging it would
    /// bring the rejected work back.
    #[error(
        "{subtask} was built on {on}'s work (it started from the result once {on} was \
         merged), so approving {subtask} while rejecting {on} would bring {on}'s changes \
         back; reject {subtask} too, or approve {on}"
    )]
    BuiltOnRejected { subtask: String, on: String },
    /// The journal refused a record (a bug, or a journal edited by hand). The journal is
    /// unchanged.
    #[error("run {run_id}: refused to journal a record: {source}")]
    RecordRejected {
        run_id: RunId,
        #[source]
        source: ReplayError,
    },
    /// Applying failed after the decisions were recorded and the result rebuilt; those
    /// stay, and `grove review RUN --apply` tries the apply again.
    #[error(
        "run {run_id}: the decisions are recorded and the result is on {result_branch}, but \
         applying it failed: {source}; `grove review {run_id} --apply` tries again"
    )]
    ApplyFailed {
        run_id: RunId,
        result_branch: String,
        #[source]
        source: Box<crate::git::AdvanceError>,
    },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("run journal: {0}")]
    Journal(#[from] JournalError),
    #[error("run snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
}

/// Where a subtask's commit was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CommitSource {
    /// The commit that was merged onto the result.
    Merged,
    /// The subtask's branch, still there (`--keep-worktrees`, or not cleaned up).
    Branch { reference: String },
    /// An archive ref (rejected, failed or conflicting work, or work a person rejected).
    Archive { reference: String },
    /// The last checkpoint the journal recorded.
    Checkpoint,
}

/// One subtask as a person reviews it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubtaskReview {
    /// The label, e.g. `S2`.
    pub id: SubtaskId,
    pub task: String,
    pub status: SubtaskStatus,
    /// The reviewer's verdict, summary and findings.
    pub reviewer: Option<VerdictState>,
    /// A person's latest decision, if any.
    pub human_verdict: Option<VerdictKind>,
    /// The decision that counts: the person's, else the reviewer's.
    pub decision: Option<VerdictKind>,
    /// The subtask's work; `None` when it failed before producing a commit.
    pub commit: Option<CommitId>,
    pub commit_source: Option<CommitSource>,
    /// Where its work starts when that is not the run's base: the result it started
    /// from after waiting for earlier subtasks (`after`, overlapping `paths`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<CommitId>,
    /// The diffstat of `commit` against its start (the run's base, or `start`).
    pub diffstat: Option<DiffStat>,
    /// Changed paths that run on the host or in CI later.
    pub executes_later: Vec<String>,
    /// Paths that conflicted when it was last merged, if it conflicted.
    pub conflict_paths: Vec<String>,
    /// The project's check on its worktree, when one ran.
    pub check: Option<CheckRun>,
    /// Its place among the attempts at one brief (best of N): the group, its label,
    /// picked or not and why. Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AttemptOf>,
}

impl SubtaskReview {
    /// Whether a person may approve it (it has work to merge).
    pub fn approvable(&self) -> bool {
        self.commit.is_some()
    }
}

/// A run as a person reviews it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReview {
    pub run_id: RunId,
    pub task: String,
    pub status: RunStatus,
    /// The commit the run started from; every subtask's diff is against it.
    pub base: CommitId,
    /// The user's branch, as a full ref.
    pub branch: String,
    /// `grove/<run>/result`.
    pub result_branch: String,
    pub result_commit: Option<CommitId>,
    pub applied: bool,
    /// The history the run gives the branch.
    pub history: History,
    /// Why the run failed, if it did.
    pub error: Option<String>,
    /// In subtask order.
    pub subtasks: Vec<SubtaskReview>,
    /// The groups of attempts at one brief, with the judge's pick and summary. Absent
    /// from the JSON when the run has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempt_groups: Vec<AttemptGroup>,
}

impl RunReview {
    /// The subtask labelled `id`.
    pub fn subtask(&self, id: &str) -> Option<&SubtaskReview> {
        self.subtasks.iter().find(|s| s.id.to_string() == id)
    }

    /// The error for a decision naming `subtask`, which the run does not have.
    pub fn unknown(&self, subtask: &str) -> ReviewError {
        ReviewError::UnknownSubtask {
            run_id: self.run_id.clone(),
            subtask: subtask.to_owned(),
            known: self
                .subtasks
                .iter()
                .map(|s| s.id.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Why decisions cannot be recorded on this run, if they cannot.
    pub fn refusal(&self) -> Option<ReviewError> {
        refusal(Standing {
            run_id: &self.run_id,
            status: self.status,
            applied: self.applied,
            branch: &self.branch,
            finished: self.status == RunStatus::Finished || self.status == RunStatus::Failed,
            history: self.history,
        })
    }

    /// The subtask's diff for a terminal (file headers, hunks, word-level highlights in
    /// [`Colour::Always`]); `None` when the subtask has no commit.
    pub fn render_diff(
        &self,
        repo: &Repo,
        subtask: &SubtaskReview,
        colour: Colour,
    ) -> Result<Option<String>, GitError> {
        match (&subtask.commit, &subtask.diffstat) {
            (Some(commit), Some(stat)) => {
                let start = subtask.start.unwrap_or(self.base);
                repo.render_diff(start, *commit, stat, colour).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// What a run's state says of whether a review may change it.
pub(super) struct Standing<'a> {
    pub(super) run_id: &'a RunId,
    pub(super) status: RunStatus,
    pub(super) applied: bool,
    pub(super) branch: &'a str,
    pub(super) finished: bool,
    /// The history the apply gave the branch (squashed commits, or the merge graph).
    pub(super) history: History,
}

pub(super) fn refusal(standing: Standing<'_>) -> Option<ReviewError> {
    let Standing {
        run_id,
        status,
        applied,
        branch,
        finished,
        history,
    } = standing;
    if applied {
        let branch = short_branch(branch);
        let found = format!(
            "git log --format=%H --grep='^{}: {run_id}$' {branch}",
            Trailer::Run.key()
        );
        let undo = match history {
            History::Squash => format!(
                "`git revert --no-edit $({found})` reverts its commits, one per subtask, \
                 newest first"
            ),
            History::Merge => format!(
                "`git revert -m 1` each of its merge commits, newest first (`{found} --merges` \
                 lists them)"
            ),
        };
        return Some(ReviewError::AlreadyApplied {
            run_id: run_id.clone(),
            branch: branch.to_owned(),
            undo,
        });
    }
    (!finished).then(|| ReviewError::NotFinished {
        run_id: run_id.clone(),
        status,
    })
}

pub(super) fn short_branch(branch: &str) -> &str {
    branch.strip_prefix("refs/heads/").unwrap_or(branch)
}
