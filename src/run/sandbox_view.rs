//! What a run tells the sandbox about the user's project and the user's wishes: the
//! checkout's shared directories (`[worktree] share`, or those found) and the read
//! rule's changes (`[sandbox] deny_read`, `allow_read`).
//!
//! This file owns deciding and checking those at a run's start (and a resume's), so that
//! a mistake stops the run before anything is created, with the key and the path named.
//! It must never share a directory git tracks (every tree has its own copy, which the
//! worker may change) nor let `deny_read` hide what the run's commands cannot do
//! without.

use std::path::{Path, PathBuf};

use crate::git::{CommitId, GitError, Repo};
use crate::settings::config::{CopyPathError, check_copy_path};
use crate::settings::options::{SandboxPaths, WorktreeSetup};
use crate::tools::sandbox::{DENIED_IN_HOME, ProjectView};

/// The checkout's directories shared by default, where they exist and git ignores them:
/// the places `python -m venv`, `uv sync` and `npm install` put a project's environment.
/// Any other top-level directory holding a `pyvenv.cfg` (a virtualenv) is shared too.
pub const DEFAULT_SHARES: &[&str] = &[".venv", "venv", "node_modules"];

/// Why the project's environment or the read rule's changes cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxViewError {
    /// The entry itself is unusable. Not retried: the user fixes the list.
    #[error("worktree.share: {path}: {problem}")]
    Entry {
        path: String,
        #[source]
        problem: CopyPathError,
    },
    /// No such directory in the checkout. Not retried.
    #[error(
        "worktree.share: {path}: there is no such directory in {}; `share` lists ignored \
         directories of your checkout such as `.venv` or `node_modules`",
        root.display()
    )]
    Missing { path: String, root: PathBuf },
    /// Git tracks it. Not retried.
    #[error(
        "worktree.share: {path}: git tracks it, so every worktree has its own copy that \
         its worker may change; `share` is for ignored directories such as `.venv` or \
         `node_modules`"
    )]
    Tracked { path: String },
    /// Git could not tell whether it is tracked. Not retried.
    #[error("worktree.share: {path}: {source}")]
    Git {
        path: String,
        #[source]
        source: GitError,
    },
    /// The repository has no work tree to share from. Not retried.
    #[error("worktree.share: {} is a bare repository; there is no checkout to share from", repo.display())]
    Bare { repo: PathBuf },
    /// A `deny_read` path would hide what the commands run in. Not retried.
    #[error(
        "sandbox.deny_read: {path} would hide {what} ({}), where grove's commands run; \
         deny a path beside it instead",
        hidden.display()
    )]
    HidesWorkspace {
        path: String,
        what: &'static str,
        hidden: PathBuf,
    },
    /// A `~/…` path with no home to expand it in. Not retried.
    #[error("sandbox.{key}: {path}: `~` needs HOME, which is not set")]
    NoHome { key: &'static str, path: String },
}

/// The directories of the checkout every tree sees read-only: `setup.share` as
/// configured, each an existing directory git does not track at `base`; without it,
/// those of [`DEFAULT_SHARES`] and every top-level virtualenv found — none when a setup
/// command makes the environment in each tree (a read-only copy over it would stop it).
pub fn resolve_shares(
    repo: &Repo,
    base: CommitId,
    setup: &WorktreeSetup,
) -> Result<Vec<String>, SandboxViewError> {
    let Some(root) = repo.work_tree() else {
        return match &setup.share {
            Some(listed) if !listed.is_empty() => Err(SandboxViewError::Bare {
                repo: repo.common_dir().to_path_buf(),
            }),
            _ => Ok(Vec::new()),
        };
    };
    let tracked = |path: &str| {
        repo.is_tracked(base, path)
            .map_err(|source| SandboxViewError::Git {
                path: path.to_owned(),
                source,
            })
    };
    let Some(listed) = &setup.share else {
        if setup.setup.is_some() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for candidate in found_environments(root) {
            if !tracked(&candidate)? {
                found.push(candidate);
            }
        }
        return Ok(found);
    };
    let mut checked = Vec::with_capacity(listed.len());
    for path in listed {
        let path = check_copy_path(path).map_err(|problem| SandboxViewError::Entry {
            path: path.clone(),
            problem,
        })?;
        if !root.join(&path).is_dir() {
            return Err(SandboxViewError::Missing {
                path,
                root: root.to_path_buf(),
            });
        }
        if tracked(&path)? {
            return Err(SandboxViewError::Tracked { path });
        }
        checked.push(path);
    }
    Ok(checked)
}

/// The top-level directories of `root` that hold a project's environment.
fn found_environments(root: &Path) -> Vec<String> {
    let mut found: Vec<String> = DEFAULT_SHARES
        .iter()
        .filter(|name| root.join(name).is_dir())
        .map(|name| (*name).to_owned())
        .collect();
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut venvs: Vec<String> = entries
            .flatten()
            .filter(|entry| entry.path().join("pyvenv.cfg").is_file())
            .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
            .filter(|name| name != ".git" && !found.contains(name))
            .collect();
        venvs.sort();
        found.extend(venvs);
    }
    found
}

/// Whether grove would share `share` on its own when `share` is unset (one of
/// [`DEFAULT_SHARES`], or a top-level virtualenv of `root`): a run journals the shares
/// it found, and a resume needs no trust for those.
pub fn found_by_grove(root: &Path, share: &str) -> bool {
    DEFAULT_SHARES.contains(&share)
        || (!share.contains('/') && root.join(share).join("pyvenv.cfg").is_file())
}

/// `paths`' `deny_read` and `allow_read`, `~/` expanded in `home`.
pub fn read_rule_paths(
    paths: &SandboxPaths,
    home: Option<&Path>,
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), SandboxViewError> {
    let expand = |key: &'static str, list: &[String]| {
        list.iter()
            .map(|path| match path.strip_prefix("~/") {
                Some(rest) => {
                    home.map(|home| home.join(rest))
                        .ok_or_else(|| SandboxViewError::NoHome {
                            key,
                            path: path.clone(),
                        })
                }
                None => Ok(PathBuf::from(path)),
            })
            .collect::<Result<Vec<_>, _>>()
    };
    Ok((
        expand("deny_read", &paths.deny_read)?,
        expand("allow_read", &paths.allow_read)?,
    ))
}

/// Refuses a `deny_read` path that is, holds or lies in one of `workspace` (`(what it
/// is, path)`: the worktrees' directory, the repository's git data).
pub fn check_deny_read(
    deny: &[PathBuf],
    workspace: &[(&'static str, &Path)],
) -> Result<(), SandboxViewError> {
    let real = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    for path in deny {
        let denied = real(path);
        for (what, place) in workspace {
            let place = real(place);
            if place.starts_with(&denied) || denied.starts_with(&place) {
                return Err(SandboxViewError::HidesWorkspace {
                    path: path.display().to_string(),
                    what,
                    hidden: place,
                });
            }
        }
    }
    Ok(())
}

/// The `allow_read` paths that open one of the built-in secret stores again (said
/// loudly at the run's start).
pub fn secret_stores_opened(allow: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    let Some(home) = home else {
        return Vec::new();
    };
    allow
        .iter()
        .filter(|path| {
            DENIED_IN_HOME.iter().any(|denied| {
                let store = home.join(denied);
                store.starts_with(path.as_path()) || path.starts_with(&store)
            })
        })
        .cloned()
        .collect()
}

/// The project as the sandbox sees it: the checkout, the repository, the shares.
pub fn project_view(repo: &Repo, shares: &[String]) -> ProjectView {
    ProjectView {
        checkout: repo.work_tree().map(Path::to_path_buf),
        common_dir: Some(repo.common_dir().to_path_buf()),
        share: shares.iter().map(PathBuf::from).collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_deny_read_over_the_worktrees_or_the_repository_is_refused_and_beside_them_not() {
        let workspace = [
            ("the worktrees' directory", Path::new("/cache/grove/app")),
            ("the repository's git data", Path::new("/src/app/.git")),
        ];
        let refused = |path: &str| {
            check_deny_read(&[PathBuf::from(path)], &workspace).map_err(|error| error.to_string())
        };
        assert_eq!(
            refused("/cache"),
            Err(
                "sandbox.deny_read: /cache would hide the worktrees' directory \
                 (/cache/grove/app), where grove's commands run; deny a path beside it \
                 instead"
                    .to_owned()
            ),
            "an ancestor of the worktrees is refused"
        );
        assert!(
            refused("/src/app/.git/objects").is_err(),
            "a path inside them too"
        );
        assert_eq!(
            refused("/src/app/secrets"),
            Ok(()),
            "a path beside them is fine"
        );
    }

    #[test]
    fn an_allow_read_of_a_secret_store_is_found_and_others_are_not() {
        let home = Path::new("/home/u");
        let allow = [
            PathBuf::from("/home/u/.ssh/known_hosts"),
            PathBuf::from("/home/u/.config"),
            PathBuf::from("/opt/tools"),
        ];
        assert_eq!(
            secret_stores_opened(&allow, Some(home)),
            vec![
                PathBuf::from("/home/u/.ssh/known_hosts"),
                PathBuf::from("/home/u/.config")
            ],
            "a path in a store, and one holding stores (~/.config/gh), open secrets"
        );
    }
}
