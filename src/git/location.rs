//! The repository's folder in the user's cache directory, `<cache>/grove/<repo
//! name>-<hash>`, where its runs' worktrees live (their layout is `worktree::location`'s).
//!
//! This module owns how that folder is named: readable, stable for one repository, and
//! never a dot folder. It never creates or deletes anything.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::Repo;

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
pub(crate) fn cache_home(overrides: &[(OsString, OsString)]) -> PathBuf {
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

impl Repo {
    /// The folder of this repository's worktrees under the user's cache directory,
    /// `<cache>/grove/<name>-<hash>` (see [`Repo::default_worktrees_dir`]).
    pub fn worktrees_home(&self) -> &Path {
        &self.inner.worktrees_home
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
