//! Commits grove makes in a subtask's worktree: checkpoints and the final commit.
//!
//! This module owns the rule that the model never commits: grove stages everything
//! (respecting `.gitignore`, and never the worktree's local-only files such as a copied
//! `.env`), writes the tree, and moves the branch by compare-and-swap. It must never
//! commit from a worktree whose checkout has not finished, or the commit would record
//! every file not yet written as deleted.

use super::Repo;
use super::error::GitError;
use super::local_files;
use super::names::CommitId;
use super::worktree::Worktree;

impl Repo {
    /// Commits everything that changed in `worktree` since its last commit, with the
    /// message `grove <run>/<n>: <label>`; `None` when nothing changed (no empty commits).
    ///
    /// File bytes, modes, symlinks and line endings are stored as the work tree has
    /// them (the sealed runner disables repository-local clean filters). Waits for the
    /// worktree's fill first.
    pub async fn checkpoint(
        &self,
        worktree: &Worktree,
        label: &str,
    ) -> Result<Option<CommitId>, GitError> {
        worktree.ready().await?;
        let in_worktree = || {
            self.inner
                .runner
                .call(worktree.admin_dir(), worktree.path())
                .work_tree(worktree.path())
        };
        // Local-only files (a copied `.env`) stay out even if something staged them.
        let local = local_files::recorded(worktree.admin_dir())?;
        in_worktree()
            .args(["add", "--all", "--", "."])
            .args(local_files::exclusions(&local))
            .run()
            .await?;
        if !local.is_empty() {
            in_worktree()
                .args(["update-index", "--force-remove", "--"])
                .args(&local)
                .run()
                .await?;
        }
        let tree = in_worktree().arg("write-tree").text().await?;
        let head_and_tree = in_worktree()
            .args(["rev-parse", "HEAD", "HEAD^{tree}"])
            .text()
            .await?;
        let mut lines = head_and_tree.lines();
        let (Some(head), Some(head_tree)) = (lines.next(), lines.next()) else {
            return Err(GitError::Parse {
                op: "rev-parse HEAD".to_owned(),
                detail: format!("expected a commit and a tree, got {head_and_tree:?}"),
            });
        };
        let head = Self::parse_commit("rev-parse HEAD", head)?;
        if tree == head_tree {
            return Ok(None);
        }
        let message = format!(
            "grove {run}/{n}: {label}\n\nGrove-Run: {run}\nGrove-Subtask: {n}\n",
            run = worktree.run(),
            n = worktree.subtask(),
        );
        let commit = in_worktree()
            .args(["commit-tree", &tree, "-p", &head.to_string(), "-F", "-"])
            .stdin(message.into_bytes())
            .text()
            .await?;
        let commit = Self::parse_commit("commit-tree", &commit)?;
        // Through the worktree's HEAD, so the branch it has checked out moves with it.
        in_worktree()
            .args([
                "update-ref",
                "-m",
                "grove: checkpoint",
                "HEAD",
                &commit.to_string(),
                &head.to_string(),
            ])
            .run()
            .await?;
        Ok(Some(commit))
    }
}
