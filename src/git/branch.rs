//! Deleting a subtask branch, only when its work is kept elsewhere, and deleting a ref
//! only where it was seen.
//!
//! This file owns the rule that a branch grove made is deleted only when every commit on
//! it is reachable from the run's result or from an archive ref: a branch that holds
//! work found nowhere else is never deleted. Every ref grove deletes is deleted
//! compare-and-swap: one another writer moved stays.

use super::Repo;
use super::cmd::{LOCK_RETRIES, lock_backoff};
use super::error::GitError;
use super::names::{CommitId, RunId, subtask_ref};

/// Why a branch or another ref grove deletes was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    /// Reading or deleting the ref failed (see [`GitError`] for what is retried; a lock
    /// another process holds is waited out a few times first).
    #[error(transparent)]
    Git(#[from] GitError),

    /// A ref was to be deleted at `expected` and another writer had moved it (or deleted
    /// it: `actual` is `nothing`). Not retried: the ref stays as the other writer left it.
    #[error("{reference} was not deleted: it is at {actual}, not {expected}")]
    RefMoved {
        reference: String,
        expected: String,
        actual: String,
    },

    /// A branch would have been deleted while its work is kept nowhere else. Not retried:
    /// the branch stays.
    #[error(
        "branch {branch} was kept: its tip {tip} is in neither the run's result nor an archive"
    )]
    WorkNotKept { branch: String, tip: String },
}

impl DeleteError {
    /// True when the disk was full (see [`GitError::is_disk_full`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Git(error) => error.is_disk_full(),
            Self::RefMoved { .. } | Self::WorkNotKept { .. } => false,
        }
    }

    /// True when the same call may succeed: only when its cause can pass
    /// ([`GitError::can_retry`]); a moved ref or unkept work stays so.
    pub fn can_retry(&self) -> bool {
        match self {
            Self::Git(error) => error.can_retry(),
            Self::RefMoved { .. } | Self::WorkNotKept { .. } => false,
        }
    }
}

/// Why one attempt at deleting a ref did not delete it.
enum NotDeleted {
    /// Another process holds the ref's lock: retried.
    Locked(git2::Error),
    Failed(DeleteError),
}

impl Repo {
    /// Deletes branch `grove/<run>/<n>` if its tip is contained in the run's result
    /// branch or in one of the run's archive refs; refuses otherwise. A missing branch
    /// is not an error. The deletion is compare-and-swap on the tip that was checked.
    pub async fn delete_subtask_branch(
        &self,
        run: &RunId,
        subtask: u32,
    ) -> Result<(), DeleteError> {
        let branch = subtask_ref(run, subtask);
        let Some(tip) = self.ref_target(&branch)? else {
            return Ok(());
        };
        if !self.keeps(run, tip)? {
            return Err(DeleteError::WorkNotKept {
                branch,
                tip: tip.to_string(),
            });
        }
        self.delete_ref(&branch, tip).await
    }

    /// Whether the run's result or one of its archives holds `tip`.
    pub(crate) fn keeps(&self, run: &RunId, tip: CommitId) -> Result<bool, GitError> {
        let result = run.result_ref();
        if let Some(result_tip) = self.ref_target(&result)?
            && self.in_history_of(&result, result_tip, tip)?
        {
            return Ok(true);
        }
        for (_, archive) in self.refs_under(&run.archive_prefix())? {
            if self.is_ancestor(tip, archive)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes `reference` and its reflog if it still points at `expected`, as `git
    /// update-ref -d <reference> <expected>` does, in process: 32 of those processes at a
    /// run's end competed with the lead's last call. The ref is locked before its value is
    /// compared (libgit2's own `git_reference_delete` drops the reflog before comparing).
    /// A lock held by another process is waited out a few times, as git's own runner does.
    pub(crate) async fn delete_ref(
        &self,
        reference: &str,
        expected: CommitId,
    ) -> Result<(), DeleteError> {
        let mut attempt = 0;
        loop {
            match self.delete_ref_once(reference, expected) {
                Ok(()) => return Ok(()),
                Err(NotDeleted::Locked(_)) if attempt < LOCK_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(lock_backoff(attempt)).await;
                }
                Err(NotDeleted::Locked(source)) => {
                    return Err(GitError::write(format!("delete {reference}"), source).into());
                }
                Err(NotDeleted::Failed(error)) => return Err(error),
            }
        }
    }

    fn delete_ref_once(&self, reference: &str, expected: CommitId) -> Result<(), NotDeleted> {
        let failed = |source: git2::Error| {
            if source.code() == git2::ErrorCode::Locked {
                NotDeleted::Locked(source)
            } else {
                NotDeleted::Failed(GitError::write(format!("delete {reference}"), source).into())
            }
        };
        let repo = self.libgit();
        let mut transaction = repo.transaction().map_err(failed)?;
        transaction.lock_ref(reference).map_err(failed)?;
        let actual = match repo.find_reference(reference) {
            Ok(found) => found.target(),
            Err(error) if error.code() == git2::ErrorCode::NotFound => None,
            Err(error) => return Err(failed(error)),
        };
        if actual != Some(expected.oid()) {
            return Err(NotDeleted::Failed(DeleteError::RefMoved {
                reference: reference.to_owned(),
                expected: expected.to_string(),
                actual: actual.map_or_else(|| "nothing".to_owned(), |oid| oid.to_string()),
            }));
        }
        transaction.remove(reference).map_err(failed)?;
        transaction.commit().map_err(failed)?;
        // The transaction leaves the reflog; git deletes it with the ref.
        match repo.reflog_delete(reference) {
            Err(error) if error.code() != git2::ErrorCode::NotFound => Err(failed(error)),
            _ => Ok(()),
        }
    }
}
