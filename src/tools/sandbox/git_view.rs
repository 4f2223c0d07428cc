//! The repository's git data as one tree's commands see it: the files that stand in for
//! the repository's own (its `config` sanitized, its `packed-refs` without grove's other
//! refs, a `.git` pointer naming the view's git data, hooks that say why `git commit` is
//! grove's) and the private directories the command's git writes in.
//!
//! This file owns making those in grove's process, once per prepared worktree. It must
//! never let a command's git write the repository: everything it writes lands in the
//! worktree's private directories, gone with the preparation.

use std::path::{Path, PathBuf};

use super::SandboxError;
use super::paths::{self, GitView};
use super::view;

/// The files a tree's commands see in place of the repository's own: its `config`
/// sanitized, its `packed-refs` without grove's other refs, and a `.git` pointer naming
/// the view's git data.
pub(super) struct GitCopies {
    pub dir: tempfile::TempDir,
    pub copies: Vec<(PathBuf, PathBuf)>,
    pub pointer: PathBuf,
    pub hooks: PathBuf,
    pub uppers: view::GitUppers,
}

/// Writes the [`GitCopies`] of `git` into a new private directory of `root`; none for a
/// tree git did not register.
pub(super) fn git_copies(root: &Path, git: &GitView) -> Result<Option<GitCopies>, SandboxError> {
    let (Some(admin), Some(common)) = (&git.admin, &git.common) else {
        return Ok(None);
    };
    let dir = paths::private_dir(root, "git-")?;
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text)
            .map(|()| path)
            .map_err(|source| SandboxError::TempDir {
                parent: dir.path().to_path_buf(),
                source,
            })
    };
    let mut copies = Vec::new();
    if let Some(config) = &git.config {
        let text = std::fs::read_to_string(config).unwrap_or_default();
        let hooks = format!("[core]\n\thooksPath = {}\n", view::GIT_HOOKS_VIEW);
        // An identity of its own, so that `git commit` reaches the hook that says why.
        let sanitized = paths::sanitized_config(&text).replacen("[core]\n", &hooks, 1)
            + "[user]\n\tname = grove worker\n\temail = worker@grove.invalid\n";
        copies.push((write("config", sanitized)?, PathBuf::from("config")));
    }
    let packed = common.join("packed-refs");
    if git.hide.contains(&packed) {
        let own = git
            .own_ref
            .as_ref()
            .and_then(|file| file.strip_prefix(common).ok())
            .and_then(Path::to_str);
        let text = std::fs::read_to_string(&packed).unwrap_or_default();
        let sanitized = paths::sanitized_packed_refs(&text, own);
        copies.push((
            write("packed-refs", sanitized)?,
            PathBuf::from("packed-refs"),
        ));
    }
    let name = admin.file_name().map(Path::new).unwrap_or(Path::new(""));
    let view_admin = Path::new(view::GIT_VIEW).join("worktrees").join(name);
    let pointer = write("dot-git", format!("gitdir: {}\n", view_admin.display()))?;
    let made = |path: PathBuf| {
        std::fs::create_dir_all(&path)
            .map(|()| path)
            .map_err(|source| SandboxError::TempDir {
                parent: dir.path().to_path_buf(),
                source,
            })
    };
    let hooks = made(dir.path().join("hooks"))?;
    for hook in ["pre-commit", "pre-merge-commit", "pre-push"] {
        let path = hooks.join(hook);
        std::fs::write(&path, REFUSING_HOOK).map_err(|source| SandboxError::TempDir {
            parent: hooks.clone(),
            source,
        })?;
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o555));
    }
    let mut covers = Vec::new();
    for (n, covered) in covered_dirs(git).iter().enumerate() {
        let cover = made(dir.path().join(format!("cover-{n}")))?;
        // The tree's own branch ref, copied where it lies: a stash or a reset moves it
        // here, never in the repository.
        if let Some(own) = &git.own_ref
            && let Ok(rest) = own.strip_prefix(covered)
        {
            let copy = cover.join(rest);
            let copied = copy
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::copy(own, &copy).map(drop));
            copied.map_err(|source| SandboxError::TempDir {
                parent: cover.clone(),
                source,
            })?;
        }
        covers.push(cover);
    }
    let uppers = view::GitUppers {
        common: (
            made(dir.path().join("common-upper"))?,
            made(dir.path().join("common-work"))?,
        ),
        admin: (
            made(dir.path().join("admin-upper"))?,
            made(dir.path().join("admin-work"))?,
        ),
        covers,
    };
    Ok(Some(GitCopies {
        dir,
        copies,
        pointer,
        hooks,
        uppers,
    }))
}

/// The hook a command's `git commit` (or merge, or push) runs: grove makes the commits
/// that count, from the worktree, when the worker's turn ends.
const REFUSING_HOOK: &str = r#"#!/bin/sh
echo "grove: commits are grove's to make: it commits this worktree as it is when your turn ends, so leave your changes in it. git add, rm, mv, stash, branch and checkout work here, in a copy of the repository only this worktree sees; nothing reaches the repository or a remote." >&2
exit 1
"#;

/// The directories of the common dir the view covers whole (grove's refs, reflogs and
/// the worktrees' admin dirs), in a fixed order.
fn covered_dirs(git: &GitView) -> Vec<PathBuf> {
    git.hide
        .iter()
        .filter(|path| path.is_dir())
        .cloned()
        .collect()
}

/// The git part of a tree's view.
pub(super) fn git_mounts(git: &GitView, copies: &GitCopies) -> Option<view::GitMounts> {
    let common = git.common.clone()?;
    let own_ref = git.own_ref.as_ref().and_then(|file| {
        let relative = file.strip_prefix(&common).ok()?.to_path_buf();
        Some((file.clone(), relative))
    });
    Some(view::GitMounts {
        admin: git.admin.clone()?,
        own_ref,
        covered: covered_dirs(git),
        copies: copies.copies.clone(),
        pointer: copies.pointer.clone(),
        writable: Some(copies.uppers.clone()),
        hooks: Some(copies.hooks.clone()),
        common,
    })
}
