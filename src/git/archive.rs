//! Archives and `grove gc`.
//!
//! This module owns the rule that nothing is deleted by surprise: a subtask's work is
//! kept under `refs/grove/archive/<run>/<n>` before its worktree or branch goes, and only
//! [`Repo::gc_archives`] deletes archives.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Repo;
use super::branch::DeleteError;
use super::error::GitError;
use super::names::{CommitId, RunId, subtask_ref};

/// Where one subtask's work was kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchivedWork {
    /// The subtask number.
    pub subtask: u32,
    /// The archive ref, `refs/grove/archive/<run>/<n>` (with `-2`, `-3`... when an
    /// earlier archive of the same subtask holds different work).
    pub reference: String,
    /// The archived commit.
    pub commit: CommitId,
}

impl Repo {
    /// Points an archive ref at the tip of subtask `n`'s branch (never overwriting an
    /// archive that holds different work).
    pub async fn archive_branch(
        &self,
        run: &RunId,
        subtask: u32,
    ) -> Result<ArchivedWork, GitError> {
        let branch = subtask_ref(run, subtask);
        let commit = self
            .ref_target(&branch)?
            .ok_or(GitError::UnknownRevision { rev: branch })?;
        self.archive_commit(run, subtask, commit).await
    }

    /// Points the per-worktree ref `reference` (`refs/worktree/…`) of the linked
    /// worktree whose admin dir is `admin` at `commit`. Such a ref lives in that admin
    /// dir, which the tree's sandboxed git reads while grove's own refs are hidden from
    /// it.
    pub async fn name_in_worktree(
        &self,
        admin: &std::path::Path,
        reference: &str,
        commit: CommitId,
    ) -> Result<(), GitError> {
        self.inner
            .runner
            .call(admin, admin)
            .args(["update-ref", reference, &commit.to_string()])
            .run()
            .await
            .map(drop)
    }

    /// The subtask branches of `run` (`refs/heads/grove/<run>/<n>`): each ref, its
    /// number and its tip.
    pub(crate) fn subtask_branches(
        &self,
        run: &RunId,
    ) -> Result<Vec<(String, u32, CommitId)>, GitError> {
        let prefix = format!("refs/heads/grove/{run}/");
        Ok(self
            .refs_under(&prefix)?
            .into_iter()
            .filter_map(|(branch, tip)| {
                let subtask = branch.strip_prefix(&prefix)?.parse::<u32>().ok()?;
                Some((branch, subtask, tip))
            })
            .collect())
    }

    /// The library side of `grove gc --older-than DAYS`: deletes archive refs whose
    /// commit is older than `older_than` (compare-and-swap, so a re-archived ref stays).
    /// The only operation in grove that deletes archived work. Returns the deleted refs.
    pub async fn gc_archives(&self, older_than: Duration) -> Result<Vec<String>, DeleteError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let cutoff = i64::try_from(now.saturating_sub(older_than.as_secs())).unwrap_or(i64::MAX);
        let mut deleted = Vec::new();
        for (reference, commit) in self.refs_under("refs/grove/archive/")? {
            let time = self.read(&reference, |repo| {
                Ok(repo.find_commit(commit.oid())?.committer().when().seconds())
            })?;
            if time < cutoff {
                self.delete_ref(&reference, commit).await?;
                deleted.push(reference);
            }
        }
        Ok(deleted)
    }
}
