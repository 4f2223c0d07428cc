//! A worktree's life through its own methods: created, mounted (a copy-on-write one),
//! checkpointed, archived or kept for the user, and removed.
//!
//! This file owns the order of each step against a full disk or a kill: a tree's upper
//! directory is never deleted before its changes are committed or copied out, its layers
//! go in one rename, and only then is it unregistered. The git side of each step is
//! `create`, `checkpoint` and `sweep`'s; the tree host's is `overlay`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::base_tree::BaseTree;
use super::error::{CheckpointError, CreateError, WorktreeError};
use super::handle::{Files, Worktree, WorktreeSpec};
use super::mounted::{LiveTrees, OverlayTree};
use super::overlay::{self, Layers, OverlayError, TreeHost};
use crate::git::{ArchivedWork, CommitId, Repo};
use crate::tools::tree::TreeAccess;

impl Worktree {
    /// A git worktree for `spec`: registered at once, its files checked out in the
    /// background ([`Worktree::ready`] waits for them).
    pub async fn create(repo: &Repo, spec: WorktreeSpec) -> Result<Self, CreateError> {
        repo.create_worktree(spec).await
    }

    /// A copy-on-write worktree for `spec` over `base` (not mounted yet: see
    /// [`Worktree::mount`]).
    pub async fn create_copy_on_write(
        repo: &Repo,
        spec: WorktreeSpec,
        base: &BaseTree,
    ) -> Result<Self, CreateError> {
        repo.create_overlay_worktree(spec, base).await
    }

    /// Commits what changed in the worktree onto its branch, as `label`; `None` when
    /// nothing changed.
    pub async fn checkpoint(
        &self,
        repo: &Repo,
        label: &str,
    ) -> Result<Option<CommitId>, CheckpointError> {
        repo.checkpoint(self, label).await
    }

    /// Keeps its work under an archive ref (its changes committed first).
    pub async fn archive(
        &self,
        repo: &Repo,
        reason: &str,
    ) -> Result<ArchivedWork, CheckpointError> {
        repo.archive_worktree(self, reason).await
    }

    /// Mounts this copy-on-write worktree over `lower` in a tree host of its own (its
    /// upper directory keeps what an earlier attempt changed), keeps the tree among the
    /// run's live `trees`, and returns the worktree with its git and its commands run
    /// inside.
    pub async fn mount(&self, trees: &LiveTrees, lower: &Path) -> Result<Self, WorktreeError> {
        let layers = Layers::beside(lower, self.path());
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OverlayError::Io {
                action: "give the tree its .git file at",
                path,
                source,
            }
        };
        // The merged tree hides what git left at the path: its `.git` file goes in the
        // upper directory, so that git inside the tree (the worker's, grove's) finds it.
        std::fs::create_dir_all(&layers.upper).map_err(io(&layers.upper))?;
        let pointer = layers.upper.join(".git");
        std::fs::copy(self.path().join(".git"), &pointer).map_err(io(&pointer))?;
        let host = TreeHost::start(layers).await?;
        let tree = Arc::new(OverlayTree::new(host));
        trees.add(&tree);
        Ok(self.clone().mounted(tree))
    }

    /// Removes the worktree once its work is kept (merged or archived), its last changes
    /// committed first: a mounted copy-on-write one has its host stopped, its upper and
    /// work directories removed at once and its registration deleted, never the base or
    /// the repository; a git one is removed by git. `trees` are the run's live trees.
    pub async fn remove(&self, repo: &Repo, trees: &LiveTrees) -> Result<(), WorktreeError> {
        if self.is_remote() {
            // Its last changes come back first; a host out of reach has none to give.
            repo.checkpoint(self, "final state before removal").await?;
            if let Some(tree) = self.remote() {
                tree.close().await;
            }
            return Ok(repo.unregister_worktree(self).await?);
        }
        if !matches!(self.files(), Files::Mounted(_)) {
            // A git worktree, or a copy-on-write one whose host is gone: git's part only
            // (an emptied tree is just unregistered; see `Repo::remove_worktree`).
            return Ok(repo.remove_worktree(self).await?);
        }
        repo.checkpoint(self, "final state before removal").await?;
        if let Some(layers) = self.unmount(trees).await {
            // All at once: stopped before the unregistration below, grove leaves a tree
            // with no upper directory (a resumed run's sweep unregisters it), never with
            // part of one.
            repo.discard_own_dirs(&layers)?;
        }
        Ok(repo.unregister_worktree(self).await?)
    }

    /// Keeps the worktree for the user (`--keep-worktrees`): a copy-on-write one is
    /// copied out of its tree into its own path, a directory their own tools open, its
    /// host stopped, and it is a git worktree from then on; returns it as it now is.
    pub async fn keep(&self, repo: &Repo, trees: &LiveTrees) -> Result<Self, WorktreeError> {
        if self.is_remote() {
            return Ok(self.bring_here(repo).await?);
        }
        let Some(namespace) = self.tree() else {
            return Ok(self.clone());
        };
        copy_out(namespace.grove_root(), self.path()).await?;
        if let Some(layers) = self.unmount(trees).await {
            overlay::remove_own_dirs(&layers)?;
        }
        Ok(repo.mark_materialized(&self.clone().unmounted())?)
    }

    /// Removes a worktree no worker used: a copy-on-write one's registration holds
    /// nothing to commit (its upper directory, if it was mounted ahead, is empty), so its
    /// host and layers go and it is unregistered; a git one is committed and removed.
    pub async fn discard_unused(
        &self,
        repo: &Repo,
        trees: &LiveTrees,
    ) -> Result<(), WorktreeError> {
        if let Some(tree) = self.remote() {
            tree.close().await;
        }
        if self.is_remote() {
            return Ok(repo.unregister_worktree(self).await?);
        }
        if !self.is_copy_on_write() {
            return Ok(repo.remove_worktree(self).await?);
        }
        self.discard_mount(trees).await?;
        Ok(repo.unregister_worktree(self).await?)
    }

    /// Stops the host of a tree no worker used (mounted ahead of its subtask) and
    /// removes its upper and work directories; nothing when it was never mounted.
    pub async fn discard_mount(&self, trees: &LiveTrees) -> Result<(), WorktreeError> {
        match self.unmount(trees).await {
            Some(layers) => Ok(overlay::remove_own_dirs(&layers)?),
            None => Ok(()),
        }
    }

    /// Stops the tree host and forgets the tree; its layers, if it had one the run had
    /// not ended yet.
    async fn unmount(&self, trees: &LiveTrees) -> Option<Layers> {
        let tree = self.overlay()?;
        if !trees.remove(tree) {
            return None;
        }
        let layers = Layers::beside(Path::new("/"), self.path());
        tree.release().await;
        Some(layers)
    }
}

impl LiveTrees {
    /// Hands the user a real directory for every tree still mounted at the run's end
    /// (kept for `grove resume`, or for files git refuses to record): its merged files
    /// copied to its own path, its host stopped, its own directories removed; grove then
    /// treats it as a git worktree, on resume too. A tree that cannot be copied out keeps
    /// its upper directory (`grove resume` mounts it again); each such tree is returned
    /// with why.
    pub async fn release_all(&self, repo: &Repo) -> Vec<(PathBuf, String)> {
        let mut kept = Vec::new();
        for tree in self.take_all() {
            let path = tree.path().to_path_buf();
            let copied = copy_out(&tree.root_for_grove(), &path).await;
            tree.release().await;
            let released = copied
                .and_then(|()| overlay::remove_own_dirs(&Layers::beside(Path::new("/"), &path)));
            let marked = match released {
                Ok(()) => repo
                    .forget_overlay(&path)
                    .map_err(|error| error.to_string()),
                Err(error) => Err(error.to_string()),
            };
            if let Err(error) = marked {
                kept.push((path, error));
            }
        }
        kept
    }
}

/// Copies a tree's merged files (at `from`, as grove sees them) to `to`, off the runtime.
async fn copy_out(from: &Path, to: &Path) -> Result<(), OverlayError> {
    let (from, to_owned) = (from.to_path_buf(), to.to_path_buf());
    tokio::task::spawn_blocking(move || overlay::materialize(&from, &to_owned))
        .await
        .map_err(|error| OverlayError::Io {
            action: "copy out",
            path: to.to_path_buf(),
            source: std::io::Error::other(error),
        })?
}
