//! Local-only files of subtask worktrees: files git does not track (such as `.env`) that
//! the user asks to have copied into every worktree, and that grove must never commit.
//!
//! This module owns the per-worktree record of those paths, kept in the worktree's admin
//! dir so that every commit grove makes from the worktree honours it — the worker's
//! checkpoints, the final commit, a resumed run's and `grove clean`'s archive commits —
//! and the checks that they stay out of history. It never reads or copies the files.

use std::path::{Path, PathBuf};

use super::error::CheckpointError;
use super::handle::Worktree;
use crate::git::CommitId;
use crate::git::GitError;
use crate::git::Repo;

/// The record in a worktree's admin dir: a JSON array of paths relative to its root.
const LOCAL_FILES: &str = "grove-local-files";

impl Repo {
    /// Records `paths` (relative to the worktree root, `/`-separated) as local to
    /// `worktree`: from now on [`Repo::checkpoint`] never stages them, and unstages them
    /// if something else did. Call it before the files appear in the worktree.
    pub fn set_local_files(&self, worktree: &Worktree, paths: &[String]) -> Result<(), GitError> {
        let record = worktree.admin_dir().join(LOCAL_FILES);
        let staged = worktree.admin_dir().join(format!("{LOCAL_FILES}.new"));
        let json = serde_json::to_vec(paths).map_err(|error| GitError::Parse {
            op: "record local files".to_owned(),
            detail: error.to_string(),
        })?;
        // Written aside and renamed, so a crash never leaves a half record behind.
        std::fs::write(&staged, json).map_err(|source| GitError::Io {
            action: "write",
            path: staged.clone(),
            source,
        })?;
        std::fs::rename(&staged, &record).map_err(|source| GitError::Io {
            action: "rename",
            path: record,
            source,
        })
    }

    /// True when `path` (relative to the repository root, `/`-separated) is in `commit`'s
    /// tree or in the user's index.
    pub fn is_tracked(&self, commit: CommitId, path: &str) -> Result<bool, GitError> {
        self.read(path, |repo| {
            let tree = repo.find_commit(commit.oid())?.tree()?;
            match tree.get_path(Path::new(path)) {
                Ok(_) => return Ok(true),
                Err(error) if error.code() == git2::ErrorCode::NotFound => {}
                Err(error) => return Err(error),
            }
            let index = repo.index()?;
            Ok(index.get_path(Path::new(path), 0).is_some())
        })
    }

    /// The commits in `from..to` that touch any of `paths`, newest first; an empty list
    /// when `paths` is empty.
    pub async fn commits_touching(
        &self,
        from: CommitId,
        to: CommitId,
        paths: &[String],
    ) -> Result<Vec<CommitId>, GitError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let listing = self
            .git()
            .args(["rev-list", &format!("{from}..{to}"), "--"])
            .args(paths.iter().map(|path| format!(":(top,literal){path}")))
            .text()
            .await?;
        listing
            .lines()
            .map(|line| Self::parse_commit("rev-list", line))
            .collect()
    }
}

impl Repo {
    /// The paths in `worktree` that the next [`Repo::checkpoint`] would commit: changed,
    /// deleted or new files, not ignored and not local-only; sorted.
    pub async fn uncommitted_paths(
        &self,
        worktree: &Worktree,
    ) -> Result<Vec<String>, CheckpointError> {
        worktree.ready().await?;
        worktree.check_mounted()?;
        let local = recorded(worktree.admin_dir())?;
        let output = worktree
            .git(self.runner())
            .args([
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--",
                ".",
            ])
            .args(exclusions(&local))
            .no_optional_locks()
            .run()
            .await?;
        let mut paths = Vec::new();
        let mut entries = output.stdout.split(|byte| *byte == 0);
        while let Some(entry) = entries.next() {
            if entry.len() < 4 {
                continue;
            }
            paths.push(String::from_utf8_lossy(&entry[3..]).into_owned());
            // A rename or copy is followed by its source path, which is not a change.
            if matches!(entry[0], b'R' | b'C') {
                entries.next();
            }
        }
        paths.sort();
        Ok(paths)
    }
}

/// The local-only paths recorded for the worktree whose admin dir is `admin_dir`; empty
/// when none were recorded. A record that cannot be read is an error, never "none": a
/// commit that might include a secret must not be made.
pub(super) fn recorded(admin_dir: &Path) -> Result<Vec<String>, GitError> {
    let record: PathBuf = admin_dir.join(LOCAL_FILES);
    let bytes = match std::fs::read(&record) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(GitError::Io {
                action: "read",
                path: record,
                source,
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|error| GitError::Parse {
        op: format!("read {}", record.display()),
        detail: error.to_string(),
    })
}

/// Pathspecs that keep `paths` out of a `git add`.
pub(super) fn exclusions(paths: &[String]) -> impl Iterator<Item = String> + '_ {
    paths
        .iter()
        .map(|path| format!(":(top,exclude,literal){path}"))
}
