//! The worktrees git has registered (`<common dir>/worktrees/<name>/`, each naming its
//! directory in `gitdir` and its branch in `HEAD`), read as plain files: which exist,
//! where, and which holds a branch.
//!
//! This module only reads; creating and removing registrations is `worktree`'s.

use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use super::Repo;
use super::error::GitError;

impl Repo {
    /// The admin dir under `<common>/worktrees/` whose `gitdir` names `path/.git`, by
    /// any spelling. An existing `path` is compared by file identity (a `stat` per
    /// registration, where canonicalising each was most of a registration's time at 32
    /// of them); a missing one can only be a registration whose path is missing too.
    pub(crate) fn find_admin_dir(&self, path: &Path) -> Result<Option<PathBuf>, GitError> {
        use std::os::unix::fs::MetadataExt as _;
        let identity = |path: &Path| std::fs::metadata(path).map(|meta| (meta.dev(), meta.ino()));
        let wanted = identity(path).ok();
        let mut normalized = None;
        for (admin, recorded) in self.recorded_worktrees()? {
            let same = match (wanted, identity(&recorded)) {
                (Some(wanted), Ok(found)) => wanted == found,
                (None, Err(_)) => {
                    normalize(&recorded) == *normalized.get_or_insert_with(|| normalize(path))
                }
                _ => false,
            };
            if same {
                return Ok(Some(admin));
            }
        }
        Ok(None)
    }

    /// True when a registration's directory is gone, so that `git worktree prune` has
    /// something to do.
    pub(crate) fn any_worktree_gone(&self) -> Result<bool, GitError> {
        Ok(self
            .recorded_worktrees()?
            .iter()
            .any(|(_, recorded)| !recorded.exists()))
    }

    /// Every linked worktree registration: (admin dir, worktree path canonicalised as
    /// far as it exists).
    pub(crate) fn registered_worktrees(&self) -> Result<Vec<(PathBuf, PathBuf)>, GitError> {
        Ok(self
            .recorded_worktrees()?
            .into_iter()
            .map(|(admin, recorded)| (admin, normalize(&recorded)))
            .collect())
    }

    /// Every linked worktree registration: (admin dir, worktree path as recorded).
    fn recorded_worktrees(&self) -> Result<Vec<(PathBuf, PathBuf)>, GitError> {
        let root = self.common_dir().join("worktrees");
        let entries = match std::fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(GitError::Io {
                    action: "list",
                    path: root,
                    source,
                });
            }
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let admin = entry.path();
            // Bytes, not text: a repository path need not be UTF-8.
            let Ok(gitdir) = std::fs::read(admin.join("gitdir")) else {
                continue;
            };
            let mut line: &[u8] = &gitdir;
            while let Some(rest) = line
                .strip_suffix(b"\n")
                .or_else(|| line.strip_suffix(b"\r"))
            {
                line = rest;
            }
            let dot_git = PathBuf::from(std::ffi::OsStr::from_bytes(line));
            if let Some(worktree) = dot_git.parent() {
                found.push((admin, worktree.to_path_buf()));
            }
        }
        found.sort();
        Ok(found)
    }

    /// The path of a live worktree (main or linked) that has `branch_ref` checked out.
    pub(crate) fn checked_out_at(&self, branch_ref: &str) -> Result<Option<PathBuf>, GitError> {
        for (admin, worktree) in self.registered_worktrees()? {
            if admin_head(&admin).as_deref() == Some(branch_ref) && worktree.exists() {
                return Ok(Some(worktree));
            }
        }
        // The main worktree's HEAD lives in the common dir; a bare repository has none.
        let main_worktree = self
            .common_dir()
            .file_name()
            .filter(|name| *name == ".git")
            .and_then(|_| self.common_dir().parent());
        if let Some(main) = main_worktree
            && admin_head(self.common_dir()).as_deref() == Some(branch_ref)
        {
            return Ok(Some(main.to_path_buf()));
        }
        Ok(None)
    }
}

/// The ref a git dir's `HEAD` names, read as plain text (never followed further).
pub(crate) fn admin_head(git_dir: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    head.strip_prefix("ref: ").map(|r| r.trim_end().to_owned())
}

/// Canonicalises as much of `path` as exists, so a deleted worktree still compares equal.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => normalize(parent).join(name),
        _ => path.to_path_buf(),
    }
}
