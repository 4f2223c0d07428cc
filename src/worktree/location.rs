//! Where a run's worktrees live: by default under the repository's folder in the user's
//! cache directory ([`Repo::worktrees_home`]), one folder per run and subtask — outside
//! every `.git` directory (agent CLIs refuse to edit any path with a `.git` component)
//! and outside the user's work tree.
//!
//! This module owns the layout `<cache>/grove/<repo name>-<hash>/<run>/<n>` and the
//! rule that finds the worktrees of a run started before the move (under
//! `<common dir>/grove/runs/<run>/worktrees/`). It never creates or deletes anything.

use std::path::{Path, PathBuf};

use crate::git::admin_head;
use crate::git::{GitError, Repo, RunId, subtask_ref};

/// One registered worktree of a run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RunWorktree {
    pub subtask: u32,
    /// Its admin dir under `<common>/worktrees/`.
    pub admin: PathBuf,
    /// Its directory, as registered.
    pub path: PathBuf,
}

impl Repo {
    /// The default home of a run's worktrees, `<cache>/grove/<name>-<hash>/<run>`
    /// (`$XDG_CACHE_HOME`, else `~/.cache`; `~/Library/Caches` on macOS): outside every
    /// `.git` directory, since agent CLIs refuse to edit such paths, and outside the
    /// user's work tree, so no build tool, editor or `git status` sees them.
    pub fn default_worktrees_dir(&self, run: &RunId) -> PathBuf {
        self.worktrees_home().join(run.as_str())
    }

    /// Where runs started before the move kept their worktrees:
    /// `<common git dir>/grove/runs/<run>/worktrees`.
    pub fn legacy_worktrees_dir(&self, run: &RunId) -> PathBuf {
        self.common_dir()
            .join("grove")
            .join("runs")
            .join(run.as_str())
            .join("worktrees")
    }

    /// The directory `run`'s worktrees are in: where one of them is registered (a run
    /// resumed after the default moved, or after `[worktree] dir` changed), else the
    /// legacy directory if it exists, else `configured/<run>`, else the default.
    pub fn run_worktrees_dir(
        &self,
        run: &RunId,
        configured: Option<&Path>,
    ) -> Result<PathBuf, GitError> {
        if let Some(RunWorktree { path, .. }) = self.run_registrations(run)?.into_iter().next()
            && let Some(parent) = path.parent()
        {
            return Ok(parent.to_path_buf());
        }
        let legacy = self.legacy_worktrees_dir(run);
        if legacy.is_dir() {
            return Ok(legacy);
        }
        Ok(configured.map_or_else(
            || self.default_worktrees_dir(run),
            |dir| dir.join(run.as_str()),
        ))
    }

    /// Every registered worktree of `run`, by subtask. A registration counts when its
    /// directory is named `<n>` and its `HEAD` names the subtask branch `grove/<run>/<n>`,
    /// wherever the directory is.
    pub(crate) fn run_registrations(&self, run: &RunId) -> Result<Vec<RunWorktree>, GitError> {
        let mut found: Vec<RunWorktree> = self
            .registered_worktrees()?
            .into_iter()
            .filter_map(|(admin, path)| {
                let subtask = path.file_name()?.to_str()?.parse::<u32>().ok()?;
                (admin_head(&admin).as_deref() == Some(subtask_ref(run, subtask).as_str()))
                    .then_some(RunWorktree {
                        subtask,
                        admin,
                        path,
                    })
            })
            .collect();
        found.sort();
        Ok(found)
    }
}
