//! Worktrees of a commit no branch owns (HEAD detached): where the project's check runs
//! on the run's merged result, or on the result rebuilt without some subtasks.
//!
//! This file owns those registrations. They never hold work: nothing commits in them, so
//! a removal deletes their files without a checkpoint, and one left by a crash is
//! replaced, never reused. It must never create one on a path that holds anything else
//! than such a worktree of its own.

use std::path::{Path, PathBuf};

use super::base_tree::BaseTree;
use super::create::REGISTRATION;
use super::error::CreateError;
use super::handle::{Worktree, WorktreeSpec};
use crate::git::GitError;
use crate::git::admin_head;
use crate::git::{CommitId, RunId};
use crate::git::{Repo, canonical};

impl Repo {
    /// Creates a worktree of `commit` at `path` with HEAD detached, and returns before its
    /// files are checked out (see [`Worktree::ready`]). The handle's subtask number is 0
    /// and its branch accessors name no branch it has; use it for its path and files
    /// only, and remove it with [`Repo::remove_detached_worktree`].
    ///
    /// A detached registration already at `path` (a crash during a check) is removed
    /// first. Not retried: a path holding anything else is
    /// [`CreateError::WorktreePathOccupied`].
    pub async fn create_detached_worktree(
        &self,
        run: &RunId,
        path: &Path,
        commit: CommitId,
    ) -> Result<Worktree, CreateError> {
        let (admin, real) = self.register_detached(path, commit).await?;
        Ok(self.start_fill(detached_spec(run, path, commit), real, admin, commit))
    }

    /// A worktree registered as [`Repo::create_detached_worktree`] does, at `base`'s
    /// commit, but never checked out: its files are an overlay of `base` (its setup
    /// output included), mounted by a tree host the caller starts at its path.
    pub async fn create_detached_overlay(
        &self,
        run: &RunId,
        path: &Path,
        base: &BaseTree,
    ) -> Result<Worktree, CreateError> {
        let commit = base.commit();
        let (admin, real) = self.register_detached(path, commit).await?;
        let filled = self.fill_overlay(
            detached_spec(run, path, commit),
            real,
            admin.clone(),
            commit,
            base,
        );
        if filled.is_err() {
            let _ = self.delete_worktree(path, &admin).await;
        }
        Ok(filled?)
    }

    /// Registers a detached worktree of `commit` at `path` with nothing checked out: its
    /// admin dir and its canonical path.
    async fn register_detached(
        &self,
        path: &Path,
        commit: CommitId,
    ) -> Result<(PathBuf, PathBuf), CreateError> {
        if !path.is_absolute() {
            return Err(GitError::InvalidName {
                what: "worktree path",
                value: path.display().to_string(),
                reason: "must be absolute",
            }
            .into());
        }
        if let Some(admin) = self.find_admin_dir(path)? {
            if admin_head(&admin).is_some() {
                // On a branch: somebody's work, never ours to replace.
                return Err(occupied(path));
            }
            self.delete_worktree(path, &admin).await?;
        }
        let guard = REGISTRATION.lock().await;
        if self.any_worktree_gone()? {
            self.prune_unlocked().await?;
        }
        if std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(occupied(path));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| GitError::Io {
                action: "create",
                path: parent.to_path_buf(),
                source,
            })?;
        }
        self.git()
            .args(["worktree", "add", "--detach", "--no-checkout", "--quiet"])
            .arg(path)
            .arg(commit.to_string())
            .run()
            .await?;
        let admin = self.find_admin_dir(path)?.ok_or_else(|| GitError::Parse {
            op: "worktree add".to_owned(),
            detail: format!("no registration found for {}", path.display()),
        })?;
        drop(guard);
        Ok((admin, canonical(path)?))
    }

    /// Unregisters a worktree made by [`Repo::create_detached_worktree`] and deletes its
    /// files (what the check left there included: it is never work). Not retried.
    pub async fn remove_detached_worktree(&self, worktree: &Worktree) -> Result<(), CreateError> {
        if admin_head(worktree.admin_dir()).is_some() {
            return Err(occupied(worktree.path()));
        }
        if worktree.path().exists() {
            Ok(self
                .delete_worktree(worktree.path(), worktree.admin_dir())
                .await?)
        } else {
            Ok(self.prune_worktrees().await?)
        }
    }
}

impl Repo {
    /// Moves the detached HEAD of `worktree`, with its index and files, from where it is
    /// to `commit` (`git checkout --force --detach`): only the files that differ are
    /// written, a tracked file changed in the tree (by a setup command) is put back as
    /// `commit` has it, and files git does not track stay unless in the way. Only for a
    /// tree that holds no work of its own. Not retried.
    pub async fn move_detached(
        &self,
        worktree: &Worktree,
        commit: CommitId,
    ) -> Result<(), GitError> {
        worktree
            .git(self.runner())
            .args(["checkout", "--quiet", "--force", "--detach"])
            .arg(commit.to_string())
            .run()
            .await
            .map(drop)
    }

    /// Puts `worktree`'s index and tracked files back as its HEAD has them (`git reset
    /// --hard`): what a command changed in them is gone, files git does not track stay
    /// (those in the way of a tracked one excepted). Only for a tree that holds no work
    /// of its own outside its commits. Not retried.
    pub async fn restore_files(&self, worktree: &Worktree) -> Result<(), GitError> {
        worktree
            .git(self.runner())
            .args(["reset", "--hard", "--quiet", "HEAD"])
            .run()
            .await
            .map(drop)
    }

    /// Moves `worktree`'s index and files from commit `from` to commit `to` (`git
    /// read-tree -m -u`): only the files that differ are written, and those the commits
    /// do not track stay. Not retried: a file changed in the tree that the move would
    /// overwrite is [`GitError::Command`], and the tree is left as it was.
    pub async fn switch_files(
        &self,
        worktree: &Worktree,
        from: CommitId,
        to: CommitId,
    ) -> Result<(), GitError> {
        // Stat data a command left stale would read as a change.
        worktree
            .git(self.runner())
            .args(["update-index", "-q", "--refresh"])
            .allow_codes(&[0, 1])
            .run()
            .await?;
        worktree
            .git(self.runner())
            .args(["read-tree", "-m", "-u"])
            .arg(from.to_string())
            .arg(to.to_string())
            .run()
            .await
            .map(drop)
    }
}

fn detached_spec(run: &RunId, path: &Path, commit: CommitId) -> WorktreeSpec {
    WorktreeSpec {
        run: run.clone(),
        subtask: 0,
        base: commit,
        path: path.to_path_buf(),
    }
}

fn occupied(path: &Path) -> CreateError {
    CreateError::WorktreePathOccupied {
        path: path.to_path_buf(),
        branch: "(a detached check worktree)".to_owned(),
    }
}
