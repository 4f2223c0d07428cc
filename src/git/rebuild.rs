//! Rebuilding a run's result after a person changed which subtasks are approved, and
//! archiving a subtask's commit that no branch holds any more.
//!
//! This file owns recomputing `grove/<run>/result` from the base: every merge is done in
//! memory (`merge-tree`, `commit-tree`) and the result ref moves once, by
//! compare-and-swap, at the end. It must never touch a work tree, an index or the
//! user's branch, and never leave a commit it dropped from the result unreachable: the
//! caller archives it with [`Repo::archive_commit`] first.

use serde::Serialize;

use super::Repo;
use super::archive::ArchivedWork;
use super::error::GitError;
use super::merge::MergeCheck;
use super::names::{CommitId, RunId};

/// One subtask's commit to merge onto the rebuilt result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildPick {
    /// The subtask number (its label without the `S`).
    pub subtask: u32,
    /// The subtask's work.
    pub commit: CommitId,
    /// The merge commit's message.
    pub message: String,
}

/// What happened to one pick while the result was rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RebuildStep {
    /// A merge commit was written; `result` is the result after it.
    Merged { result: CommitId },
    /// The commit was already contained in the result so far; nothing was written.
    AlreadyMerged { result: CommitId },
    /// The commit conflicts with the picks merged before it; it was left out.
    Conflict { paths: Vec<String> },
}

/// A rebuilt result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rebuilt {
    /// Where the result ref now points (the base when nothing merged).
    pub result: CommitId,
    /// One step per pick, in the order given.
    pub steps: Vec<(u32, RebuildStep)>,
}

impl Repo {
    /// Recomputes the run's result: starts from `base`, merges each pick in the order
    /// given (a conflicting pick is reported and skipped, the ones after it still
    /// merge), then moves `grove/<run>/result` to the outcome by compare-and-swap from
    /// `expected` (`None`: the ref must not exist). Not retried: a result ref that moved
    /// meanwhile is a [`GitError::Command`] and nothing was changed.
    pub async fn rebuild_result(
        &self,
        run: &RunId,
        base: CommitId,
        picks: &[RebuildPick],
        expected: Option<CommitId>,
    ) -> Result<Rebuilt, GitError> {
        let rebuilt = self.merge_picks(base, picks).await?;
        let reference = run.result_ref();
        if expected != Some(rebuilt.result) {
            self.update_ref(
                &reference,
                rebuilt.result,
                expected,
                "grove review: rebuild result",
            )
            .await?;
        }
        Ok(rebuilt)
    }

    /// Merges each pick onto `base` in the order given, in memory (a conflicting pick is
    /// reported and skipped), and returns the outcome without moving any ref: the
    /// commits are written, the caller decides what points at them. Not retried.
    pub async fn merge_picks(
        &self,
        base: CommitId,
        picks: &[RebuildPick],
    ) -> Result<Rebuilt, GitError> {
        let mut tip = base;
        let mut steps = Vec::with_capacity(picks.len());
        for pick in picks {
            if self.is_ancestor(pick.commit, tip)? {
                steps.push((pick.subtask, RebuildStep::AlreadyMerged { result: tip }));
                continue;
            }
            // Even a pick that could fast-forward gets a merge commit, as in a run: every
            // subtask stays visible as its own parent in the result's history.
            let step = self.merge_commit(tip, pick).await?;
            if let RebuildStep::Merged { result } = &step {
                tip = *result;
            }
            steps.push((pick.subtask, step));
        }
        Ok(Rebuilt { result: tip, steps })
    }

    async fn merge_commit(
        &self,
        tip: CommitId,
        pick: &RebuildPick,
    ) -> Result<RebuildStep, GitError> {
        match self.check_merge(tip, pick.commit).await? {
            MergeCheck::Conflict { paths } => Ok(RebuildStep::Conflict { paths }),
            MergeCheck::Clean { tree } => {
                let result = self
                    .commit_tree(&tree, &[tip, pick.commit], &pick.message)
                    .await?;
                Ok(RebuildStep::Merged { result })
            }
        }
    }

    /// Keeps `commit` under an archive ref of subtask `subtask` of `run`, like
    /// [`Repo::archive_branch`] but for a commit no branch points at any more (a merged
    /// subtask a person rejected after its branch was deleted). An archive of the same
    /// subtask that already holds `commit` is reused; one holding other work is never
    /// overwritten (the new one gets a `-2`, `-3`... suffix).
    pub async fn archive_commit(
        &self,
        run: &RunId,
        subtask: u32,
        commit: CommitId,
    ) -> Result<ArchivedWork, GitError> {
        let mut suffix = 1u32;
        loop {
            let reference = if suffix == 1 {
                format!("{}{subtask}", run.archive_prefix())
            } else {
                format!("{}{subtask}-{suffix}", run.archive_prefix())
            };
            match self.ref_target(&reference)? {
                Some(existing) if existing == commit => {
                    return Ok(ArchivedWork {
                        subtask,
                        reference,
                        commit,
                    });
                }
                Some(_) => suffix += 1,
                None => {
                    self.update_ref(&reference, commit, None, "grove: archive")
                        .await?;
                    return Ok(ArchivedWork {
                        subtask,
                        reference,
                        commit,
                    });
                }
            }
        }
    }

    /// The archive refs of subtask `subtask` of `run` with their commits, oldest archive
    /// first (`<n>`, then `<n>-2`, `<n>-3`...).
    pub fn subtask_archives(
        &self,
        run: &RunId,
        subtask: u32,
    ) -> Result<Vec<(String, CommitId)>, GitError> {
        let prefix = format!("{}{subtask}", run.archive_prefix());
        let mut found: Vec<(u32, String, CommitId)> = self
            .refs_under(&prefix)?
            .into_iter()
            .filter_map(|(reference, commit)| {
                let rest = reference.strip_prefix(&prefix)?;
                let suffix = match rest {
                    "" => 1,
                    _ => rest.strip_prefix('-')?.parse().ok()?,
                };
                Some((suffix, reference, commit))
            })
            .collect();
        found.sort();
        Ok(found
            .into_iter()
            .map(|(_, reference, commit)| (reference, commit))
            .collect())
    }

    /// `commit`, or `None` when the repository does not hold it (never written, or
    /// garbage-collected).
    pub fn find_commit(&self, commit: CommitId) -> Result<Option<CommitId>, GitError> {
        self.read(&commit.to_string(), |repo| {
            match repo.find_commit(commit.oid()) {
                Ok(_) => Ok(Some(commit)),
                Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}
