//! Archives, worktree removal, `grove clean` and `grove gc`.
//!
//! This module owns the rule that nothing is deleted by surprise: a subtask's work
//! (uncommitted changes committed first) is kept under `refs/grove/archive/<run>/<n>`
//! before its worktree or branch goes, and only [`Repo::gc_archives`] deletes archives.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{CheckpointError, WorktreeError};
use super::handle::Worktree;
use super::overlay::{Layers, open_scratch};
use super::trash::discard_in_background;
use crate::git::GitError;
use crate::git::Repo;
use crate::git::{ArchivedWork, RunId, subtask_ref};
use crate::git::{admin_head, normalize};

/// What [`Repo::clean_run`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CleanReport {
    /// Every subtask's archive, sorted by ref name.
    pub archived: Vec<ArchivedWork>,
    /// Worktree directories removed.
    pub removed_worktrees: Vec<PathBuf>,
    /// Subtask branches deleted (each held by its archive).
    pub deleted_branches: Vec<String>,
    /// Worktrees kept because they hold files git refuses to record (their branches
    /// stay too). Absent from the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept_worktrees: Vec<KeptWorktree>,
    /// Base trees of copy-on-write worktrees removed (no run held them). Absent from
    /// the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_bases: Vec<PathBuf>,
    /// Stale lock files on the run's refs a stopped process left, removed first
    /// ([`Repo::clear_stale_ref_locks`]). Absent from the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_locks: Vec<PathBuf>,
    /// What a sweep of a finished run ([`Repo::sweep_run`]) could not remove, each with
    /// why (the sweep goes on with the rest); the branch of each stays with it.
    #[serde(skip)]
    pub not_removed: Vec<String>,
}

/// A worktree `grove clean` kept, and the files in it that git refuses to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptWorktree {
    pub path: PathBuf,
    pub paths: Vec<String>,
}

impl Repo {
    /// Keeps the subtask's work under an archive ref: commits uncommitted changes first
    /// (only if the worktree's checkout finished; a half-filled tree has no work of its
    /// own), then points the archive ref at the branch tip.
    ///
    /// Paths git refuses to record do not stop the archive of everything else; they stay
    /// in the worktree, which [`Repo::remove_worktree`] then refuses to remove.
    pub async fn archive_worktree(
        &self,
        worktree: &Worktree,
        reason: &str,
    ) -> Result<ArchivedWork, CheckpointError> {
        Ok(self.archive_worktree_noting(worktree, reason).await?.0)
    }

    /// [`Repo::archive_worktree`], and the paths left only in the worktree, if any.
    async fn archive_worktree_noting(
        &self,
        worktree: &Worktree,
        reason: &str,
    ) -> Result<(ArchivedWork, Vec<String>), CheckpointError> {
        let mut refused = Vec::new();
        if worktree.ready().await.is_ok() && worktree.path().exists() {
            match self
                .checkpoint(worktree, &format!("archived: {reason}"))
                .await
            {
                Ok(_) => {}
                Err(CheckpointError::PathsRefused { paths, .. }) => refused = paths,
                Err(error) => return Err(error),
            }
        }
        let archived = self
            .archive_branch(worktree.run(), worktree.subtask())
            .await?;
        Ok((archived, refused))
    }

    /// Removes a subtask's worktree after committing anything uncommitted to its branch
    /// (the branch itself stays). A hand-deleted worktree is just unregistered, and so is
    /// a copy-on-write one whose layers its cleanup already discarded
    /// ([`Worktree::is_emptied`]): there is nothing of its own left to commit.
    pub async fn remove_worktree(&self, worktree: &Worktree) -> Result<(), CheckpointError> {
        if worktree.path().exists() {
            if !worktree.is_emptied() && worktree.ready().await.is_ok() {
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
    /// branches (each now held by its archive), then the run's folder and the
    /// repository's folder in the cache when empty. The result branch is kept. Stale
    /// lock files a stopped process left on the run's refs go first (the caller knows
    /// the run is not running); without that, its branches could not be deleted.
    pub async fn clean_run(&self, run: &RunId) -> Result<CleanReport, WorktreeError> {
        let mut report = CleanReport {
            removed_locks: self
                .clear_stale_ref_locks(run, crate::git::ref_locks::STALE_REF_LOCK)
                .await?
                .removed,
            ..CleanReport::default()
        };
        let mut kept_subtasks = Vec::new();
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
                let (archived, refused) = self
                    .archive_worktree_noting(&worktree, "run cleaned")
                    .await?;
                report.archived.push(archived);
                if !refused.is_empty() {
                    // Files git refuses to record live only there: the directory (and
                    // its branch, so that the next clean finds it) stays.
                    kept_subtasks.push(subtask);
                    report.kept_worktrees.push(KeptWorktree {
                        path,
                        paths: refused,
                    });
                    continue;
                }
                self.delete_worktree(worktree.path(), &admin).await?;
                // Its upper and work directories, committed above.
                self.discard_layers(&worktree)?;
                dirs.extend(path.parent().map(Path::to_path_buf));
                report.removed_worktrees.push(path);
            }
        }
        for (branch, subtask, commit) in self.subtask_branches(run)? {
            if kept_subtasks.contains(&subtask) {
                continue;
            }
            let archived = match report.archived.iter().find(|a| a.subtask == subtask) {
                Some(archived) if archived.commit == commit => archived.clone(),
                _ => {
                    let archived = self.archive_branch(run, subtask).await?;
                    report.archived.push(archived.clone());
                    archived
                }
            };
            self.delete_ref(&branch, archived.commit).await?;
            report.deleted_branches.push(branch);
        }
        report.removed_bases = self.remove_unused_bases(None)?;
        report
            .removed_worktrees
            .extend(self.remove_detached_in(&dirs).await?);
        // The repository's folder in the cache too, when the run was its last.
        dirs.push(self.worktrees_home().to_path_buf());
        remove_empty(&dirs);
        report
            .archived
            .sort_by(|a, b| a.reference.cmp(&b.reference));
        report.archived.dedup();
        Ok(report)
    }

    /// What a finished `run` still has registered, removed as its own cleanups would
    /// have removed it had grove not been stopped first (a kill while they waited for
    /// their turn): the worktree of each subtask whose work is kept (merged onto the
    /// result or archived; its last changes committed to its branch first, a
    /// copy-on-write one's layers with it) and its branch, the detached worktrees of its
    /// checks in `dir`, then `dir` itself and the repository's folder when empty. Work
    /// kept nowhere else stays with its branch, as do files git refuses to record. A
    /// worktree that cannot be removed keeps its branch and is named in
    /// [`CleanReport::not_removed`]; the sweep goes on with the others.
    pub async fn sweep_run(&self, run: &RunId, dir: &Path) -> Result<CleanReport, GitError> {
        let mut report = CleanReport::default();
        let mut kept_subtasks = Vec::new();
        let mut dirs = vec![normalize(dir)];
        for registered in self.run_registrations(run)? {
            let (subtask, path) = (registered.subtask, registered.path);
            let Some(tip) = self.ref_target(&subtask_ref(run, subtask))? else {
                continue;
            };
            if !self.keeps(run, tip)? {
                continue;
            }
            let Some(worktree) = self.find_worktree(run, subtask, tip, &path)? else {
                continue;
            };
            // One tree that cannot go keeps its branch, never the others from going.
            match self.remove_worktree(&worktree).await {
                Ok(()) => {}
                Err(CheckpointError::PathsRefused { paths, .. }) => {
                    kept_subtasks.push(subtask);
                    report.kept_worktrees.push(KeptWorktree { path, paths });
                    continue;
                }
                Err(error) => {
                    kept_subtasks.push(subtask);
                    report
                        .not_removed
                        .push(format!("{}: {error}", path.display()));
                    continue;
                }
            }
            if let Err(error) = self.discard_layers(&worktree) {
                report
                    .not_removed
                    .push(format!("{}: {error}", path.display()));
            }
            dirs.extend(path.parent().map(Path::to_path_buf));
            report.removed_worktrees.push(path);
        }
        for (branch, subtask, _) in self.subtask_branches(run)? {
            // The git layer refuses a branch whose work is kept nowhere else: it stays.
            if !kept_subtasks.contains(&subtask)
                && self.delete_subtask_branch(run, subtask).await.is_ok()
            {
                report.deleted_branches.push(branch);
            }
        }
        report
            .removed_worktrees
            .extend(self.remove_detached_in(&dirs).await?);
        dirs.push(self.worktrees_home().to_path_buf());
        remove_empty(&dirs);
        Ok(report)
    }

    /// Deletes the upper and work directories of a copy-on-write `worktree` that is no
    /// longer mounted nor registered (its changes committed); nothing for a git one.
    fn discard_layers(&self, worktree: &Worktree) -> Result<(), GitError> {
        if !worktree.is_copy_on_write() {
            return Ok(());
        }
        self.discard_own_dirs(&Layers::beside(Path::new("/"), worktree.path()))
    }

    /// Deletes the own directory of a copy-on-write tree (its upper and work directories,
    /// the tree unmounted) at once for any later reader: renamed into the trash, then
    /// deleted in the background. Grove stopped at any instant leaves all of its upper
    /// directory or none of it, never a part that a later checkpoint would commit as the
    /// worker's changes; none is a tree [`Repo::remove_worktree`] just unregisters.
    pub fn discard_own_dirs(&self, layers: &Layers) -> Result<(), GitError> {
        if let Some(own) = layers.own_dir() {
            open_scratch(&layers.work);
            discard_in_background(own, &self.common_dir().join("grove/trash"))?;
        }
        Ok(())
    }

    /// Removes the detached worktrees (where checks ran: they never hold work) registered
    /// directly in one of `dirs`; returns their paths.
    async fn remove_detached_in(&self, dirs: &[PathBuf]) -> Result<Vec<PathBuf>, GitError> {
        let dirs: Vec<PathBuf> = dirs.iter().map(|dir| normalize(dir)).collect();
        let mut removed = Vec::new();
        for (admin, path) in self.registered_worktrees()? {
            let inside = path
                .parent()
                .is_some_and(|parent| dirs.iter().any(|dir| dir == parent));
            if inside && admin_head(&admin).is_none() {
                self.delete_worktree(&path, &admin).await?;
                removed.push(path);
            }
        }
        Ok(removed)
    }
}

/// Removes each of `dirs` that is empty, in order; anything left in one is not grove's
/// to delete.
fn remove_empty(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = std::fs::remove_dir(dir);
    }
}
