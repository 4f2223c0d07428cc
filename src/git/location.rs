//! Where a run's worktrees live: by default under the user's cache directory, one
//! folder per repository, run and subtask — outside every `.git` directory (agent CLIs
//! refuse to edit any path with a `.git` component) and outside the user's work tree.
//!
//! This module owns the layout `<cache>/grove/<repo name>-<hash>/<run>/<n>` and the
//! rule that finds the worktrees of a run started before the move (under
//! `<common dir>/grove/runs/<run>/worktrees/`). It never creates or deletes anything.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::Repo;
use super::error::GitError;
use super::names::{RunId, subtask_ref};
use super::worktree::admin_head;

/// Longest readable part of a repository's folder name.
const MAX_NAME: usize = 40;

/// Environment variable `name`, non-empty: the last of `overrides` that sets it, else
/// grove's own environment's.
pub(super) fn env_var(overrides: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    overrides
        .iter()
        .rev()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.clone())
        .or_else(|| std::env::var_os(name))
        .filter(|value| !value.is_empty())
}

/// The cache directory grove's worktrees go under, from the environment git runs with
/// (`overrides` first, then the process): `$XDG_CACHE_HOME/grove` (if absolute), else
/// `~/Library/Caches/grove` on macOS and `~/.cache/grove` elsewhere; without a home,
/// a per-user directory in the system's temp dir.
pub(super) fn cache_home(overrides: &[(OsString, OsString)]) -> PathBuf {
    let var = |name: &str| env_var(overrides, name);
    if let Some(xdg) = var("XDG_CACHE_HOME").map(PathBuf::from)
        && xdg.is_absolute()
    {
        return xdg.join("grove");
    }
    if let Some(home) = var("HOME").map(PathBuf::from)
        && home.is_absolute()
    {
        return if cfg!(target_os = "macos") {
            home.join("Library").join("Caches").join("grove")
        } else {
            home.join(".cache").join("grove")
        };
    }
    std::env::temp_dir().join(format!("grove-{}", nix::unistd::getuid()))
}

/// `<name>-<hash>`: a readable name for the repository (its work tree's directory name,
/// reduced to `[A-Za-z0-9._-]`) and the first 12 hex digits of the SHA-1 of its common
/// dir's path, so two clones of the same name never share a folder.
pub(super) fn repository_folder(common_dir: &Path, work_tree: Option<&Path>) -> String {
    let named = work_tree.or_else(|| {
        common_dir
            .file_name()
            .filter(|name| *name == ".git")
            .and_then(|_| common_dir.parent())
    });
    let raw = named
        .unwrap_or(common_dir)
        .file_name()
        .map(OsStr::to_string_lossy)
        .unwrap_or_default();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME)
        .collect();
    // Never a dot-folder or an empty name.
    name = name.trim_start_matches('.').to_owned();
    if name.is_empty() {
        name = "repo".to_owned();
    }
    let hash = git2::Oid::hash_object(
        git2::ObjectType::Blob,
        common_dir.as_os_str().as_encoded_bytes(),
    )
    .map(|oid| oid.to_string())
    .unwrap_or_default();
    format!("{name}-{}", hash.get(..12).unwrap_or("0"))
}

/// One registered worktree of a run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct RunWorktree {
    pub subtask: u32,
    /// Its admin dir under `<common>/worktrees/`.
    pub admin: PathBuf,
    /// Its directory, as registered.
    pub path: PathBuf,
}

impl Repo {
    /// The folder of this repository's worktrees under the user's cache directory,
    /// `<cache>/grove/<name>-<hash>` (see [`Repo::default_worktrees_dir`]).
    pub fn worktrees_home(&self) -> &Path {
        &self.inner.worktrees_home
    }

    /// The default home of a run's worktrees, `<cache>/grove/<name>-<hash>/<run>`
    /// (`$XDG_CACHE_HOME`, else `~/.cache`; `~/Library/Caches` on macOS): outside every
    /// `.git` directory, since agent CLIs refuse to edit such paths, and outside the
    /// user's work tree, so no build tool, editor or `git status` sees them.
    pub fn default_worktrees_dir(&self, run: &RunId) -> PathBuf {
        self.inner.worktrees_home.join(run.as_str())
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
    pub(super) fn run_registrations(&self, run: &RunId) -> Result<Vec<RunWorktree>, GitError> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_home_follows_xdg_then_home() {
        let env = |pairs: &[(&str, &str)]| -> Vec<(OsString, OsString)> {
            pairs
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect()
        };
        assert_eq!(
            cache_home(&env(&[("XDG_CACHE_HOME", "/x/cache"), ("HOME", "/h")])),
            PathBuf::from("/x/cache/grove")
        );
        let home_cache = if cfg!(target_os = "macos") {
            "/h/Library/Caches/grove"
        } else {
            "/h/.cache/grove"
        };
        assert_eq!(
            cache_home(&env(&[("XDG_CACHE_HOME", "relative"), ("HOME", "/h")])),
            PathBuf::from(home_cache),
            "a relative XDG_CACHE_HOME is ignored, as the spec says"
        );
    }

    #[test]
    fn a_repository_folder_is_readable_stable_and_never_a_dot_folder() {
        let common = Path::new("/work/my project/.git");
        let folder = repository_folder(common, Some(Path::new("/work/my project")));
        assert_eq!(folder.len(), "my_project-".len() + 12, "{folder}");
        assert!(folder.starts_with("my_project-"), "{folder}");
        assert_eq!(
            folder,
            repository_folder(common, None),
            "the work tree's name, found from the common dir too"
        );
        assert_ne!(
            folder,
            repository_folder(
                Path::new("/other/my project/.git"),
                Some(Path::new("/other/my project"))
            ),
            "two clones of one name get two folders"
        );
        let bare = repository_folder(Path::new("/srv/.hidden.git"), None);
        assert!(bare.starts_with("hidden.git-"), "{bare}");
    }
}
