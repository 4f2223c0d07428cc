//! Archives, worktree removal, `grove clean` and `grove gc`.
//!
//! This module owns the rule that nothing is deleted by surprise: a subtask's work
//! (uncommitted changes committed first) is kept under `refs/grove/archive/<run>/<n>`
//! before its worktree or branch goes, and only [`Repo::gc_archives`] deletes archives.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::Repo;
use super::error::GitError;
use super::names::{CommitId, RunId, subtask_ref};
use super::worktree::Worktree;

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

/// What [`Repo::clean_run`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CleanReport {
    /// Every subtask's archive, sorted by ref name.
    pub archived: Vec<ArchivedWork>,
    /// Worktree directories removed.
    pub removed_worktrees: Vec<PathBuf>,
    /// Subtask branches deleted (each held by its archive).
    pub deleted_branches: Vec<String>,
}

impl Repo {
    /// Keeps the subtask's work under an archive ref: commits uncommitted changes first
    /// (only if the worktree's checkout finished; a half-filled tree has no work of its
    /// own), then points the archive ref at the branch tip.
    pub async fn archive_worktree(
        &self,
        worktree: &Worktree,
        reason: &str,
    ) -> Result<ArchivedWork, GitError> {
        if worktree.ready().await.is_ok() && worktree.path().exists() {
            self.checkpoint(worktree, &format!("archived: {reason}"))
                .await?;
        }
        self.archive_branch(worktree.run(), worktree.subtask())
            .await
    }

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

    /// Removes a subtask's worktree after committing anything uncommitted to its branch
    /// (the branch itself stays). A hand-deleted worktree is just unregistered.
    pub async fn remove_worktree(&self, worktree: &Worktree) -> Result<(), GitError> {
        if worktree.path().exists() {
            if worktree.ready().await.is_ok() {
                self.checkpoint(worktree, "final state before removal")
                    .await?;
            }
            self.delete_worktree(worktree.path(), worktree.admin_dir())
                .await?;
        } else {
            self.prune_worktrees().await?;
        }
        Ok(())
    }

    /// The library side of `grove clean RUN`: archives every subtask of `run` (its
    /// worktree's uncommitted changes first), removes the run's worktrees wherever they
    /// are registered (the cache directory, a `[worktree] dir`, or `.git/grove/runs/` for
    /// runs started before worktrees moved out of `.git`), and deletes the subtask
    /// branches (each now held by its archive). The result branch is kept.
    pub async fn clean_run(&self, run: &RunId) -> Result<CleanReport, GitError> {
        let mut report = CleanReport::default();
        self.prune_worktrees().await?;
        self.sweep_trash().await?;
        let mut dirs = vec![
            self.default_worktrees_dir(run),
            self.legacy_worktrees_dir(run),
        ];
        for registered in self.run_registrations(run)? {
            let (subtask, admin, path) = (registered.subtask, registered.admin, registered.path);
            let Some(tip) = self.ref_target(&subtask_ref(run, subtask))? else {
                continue;
            };
            // The base only matters for new branches; this one exists.
            if let Some(worktree) = self.find_worktree(run, subtask, tip, &path)? {
                report
                    .archived
                    .push(self.archive_worktree(&worktree, "run cleaned").await?);
                self.delete_worktree(worktree.path(), &admin).await?;
                dirs.extend(path.parent().map(Path::to_path_buf));
                report.removed_worktrees.push(path);
            }
        }
        let prefix = format!("refs/heads/grove/{run}/");
        for (branch, commit) in self.refs_under(&prefix)? {
            let Some(subtask) = branch
                .strip_prefix(&prefix)
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let archived = match report.archived.iter().find(|a| a.subtask == subtask) {
                Some(archived) if archived.commit == commit => archived.clone(),
                _ => {
                    let archived = self.archive_branch(run, subtask).await?;
                    report.archived.push(archived.clone());
                    archived
                }
            };
            self.git()
                .args(["update-ref", "-d", &branch, &archived.commit.to_string()])
                .run()
                .await?;
            report.deleted_branches.push(branch);
        }
        // Only empty directories go; anything left in one is not grove's to delete.
        for dir in &dirs {
            let _ = std::fs::remove_dir(dir);
        }
        report
            .archived
            .sort_by(|a, b| a.reference.cmp(&b.reference));
        report.archived.dedup();
        Ok(report)
    }

    /// The library side of `grove gc --older-than DAYS`: deletes archive refs whose
    /// commit is older than `older_than` (compare-and-swap, so a re-archived ref stays).
    /// The only operation in grove that deletes archived work. Returns the deleted refs.
    pub async fn gc_archives(&self, older_than: Duration) -> Result<Vec<String>, GitError> {
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
                self.git()
                    .args(["update-ref", "-d", &reference, &commit.to_string()])
                    .run()
                    .await?;
                deleted.push(reference);
            }
        }
        Ok(deleted)
    }
}
