//! A worktree on a remote host: registered here with no files (its branch, its admin
//! dir), its tree opened there, its checkpoints' trees committed here.
//!
//! This file owns that a remote tree's work reaches its branch only as the commits grove
//! writes here, with the message and author a local checkpoint has; the host's own
//! commits are never referenced. It must never run git in the tree's empty path here.

use std::path::PathBuf;

use super::checkpoint::checkpoint_message;
use super::error::{CheckpointError, CreateError};
use super::handle::{Files, REMOTE_RECORD, Worktree, WorktreeSpec};
use crate::git::{CommitId, GitError, Repo};
use crate::remote::protocol::SandboxSpec;
use crate::remote::{OpenSpec, Placement, RemoteError, RemoteTree};

impl Repo {
    /// Marks a newly registered worktree as a remote one: no files here.
    pub(super) fn fill_remote(
        &self,
        spec: WorktreeSpec,
        path: PathBuf,
        admin: PathBuf,
        start: CommitId,
    ) -> Result<Worktree, GitError> {
        let record = admin.join(REMOTE_RECORD);
        std::fs::write(&record, b"").map_err(|source| GitError::Io {
            action: "write",
            path: record,
            source,
        })?;
        Ok(Worktree::filled(spec, path, admin, start, Files::Unreached))
    }

    /// The checkpoint of a remote worktree: its host commits the tree's state and sends
    /// its objects, and grove commits that tree onto the branch here. `None` when nothing
    /// changed, or when the tree was already out of reach (its branch then holds the last
    /// checkpoint that came back).
    pub(super) async fn checkpoint_remote(
        &self,
        worktree: &Worktree,
        label: &str,
    ) -> Result<Option<CommitId>, CheckpointError> {
        let Files::Remote(tree) = worktree.files() else {
            return Ok(None);
        };
        if tree.is_lost() {
            return Ok(None);
        }
        let failed = |reason: String| CheckpointError::RemoteCheckpoint {
            path: worktree.path().to_path_buf(),
            reason,
        };
        let Some(state) = tree
            .checkpoint(self, label)
            .await
            .map_err(|error| failed(error.to_string()))?
        else {
            return Ok(None);
        };
        let state = git2::Oid::from_str(&state)
            .map_err(|_| failed(format!("the host named `{state}` as the tree")))?;
        let branch = worktree.branch_ref();
        let tip = self.ref_target(&branch)?.unwrap_or(worktree.start());
        let tip_tree = self.read("a checkpoint's tip", |repo| {
            Ok(repo.find_commit(tip.oid())?.tree_id())
        })?;
        if tip_tree == state {
            return Ok(None);
        }
        let message = checkpoint_message(worktree.run(), worktree.subtask(), label);
        match self.commit_onto(&branch, state, tip, &[], &message)? {
            Some(commit) => Ok(Some(commit)),
            None => Err(failed(format!("{branch} moved while it was checkpointed"))),
        }
    }
}

impl Repo {
    /// Checks a remote worktree's branch out into its own path here (`--keep-worktrees`):
    /// from then on it is a git worktree the user's tools open.
    pub(super) async fn check_out_here(&self, worktree: &Worktree) -> Result<Worktree, GitError> {
        worktree
            .git(self.runner())
            .args(["reset", "--hard", "--quiet"])
            .run()
            .await?;
        let record = worktree.admin_dir().join(REMOTE_RECORD);
        std::fs::remove_file(&record).map_err(|source| GitError::Io {
            action: "remove",
            path: record,
            source,
        })?;
        let mut here = worktree.clone();
        here.files = Files::Checkout;
        Ok(here)
    }
}

impl Worktree {
    /// A worktree for `spec` whose files will be on a remote host: registered here, its
    /// branch made, nothing checked out (see [`Worktree::reach`]).
    pub async fn create_remote(repo: &Repo, spec: WorktreeSpec) -> Result<Self, CreateError> {
        repo.create_remote_worktree(spec).await
    }

    /// Opens this remote worktree's tree on `placement`'s host, at its branch's tip (the
    /// base, or its last checkpoint after a resume or a lost host), with the run's
    /// `sandbox` and the subtask's write `scope` applied there.
    pub async fn reach(
        &self,
        repo: &Repo,
        placement: Placement,
        sandbox: SandboxSpec,
        scope: Option<Vec<String>>,
    ) -> Result<Self, RemoteError> {
        let host = placement.host.name.clone();
        let start = repo
            .ref_target(&self.branch_ref())
            .map_err(|source| RemoteError::Git {
                host: host.clone(),
                source,
            })?
            .unwrap_or(self.start);
        let spec = OpenSpec {
            run: self.run.clone(),
            subtask: self.subtask,
            start,
            sandbox,
            scope,
            local: self.path.clone(),
        };
        let tree = RemoteTree::open(repo, placement, spec).await?;
        let mut reached = self.clone();
        reached.files = Files::Remote(tree);
        Ok(reached)
    }

    /// This remote worktree's branch checked out in its own path here (its tree's host
    /// closed first, its last changes checkpointed): a git worktree from then on.
    pub async fn bring_here(&self, repo: &Repo) -> Result<Self, CheckpointError> {
        repo.checkpoint(self, "final state before it came here")
            .await?;
        if let Some(tree) = self.remote() {
            tree.close().await;
        }
        Ok(repo.check_out_here(self).await?)
    }

    /// The remote tree, while it is reached.
    pub fn remote(&self) -> Option<&RemoteTree> {
        match &self.files {
            Files::Remote(tree) => Some(tree),
            _ => None,
        }
    }
}
