//! The worktree's `.git` pointer and what counts as a git dir.
//!
//! This module owns the rule that nothing a model does can send git to a git dir of its
//! making: the pointer file is snapshotted before a tool call and put back after it (and
//! before a worktree is kept), and the file tools ask [`is_git_dir_name`] and
//! [`is_git_repository`] before they write. It must never follow the pointer itself.

use std::path::{Path, PathBuf};

/// True when `name` is a spelling of `.git` some filesystem or git itself takes for it:
/// any case (`.GIT`, `.Git` on case-insensitive filesystems), with trailing dots or
/// spaces (Windows drops them), or the NTFS short name `git~1`.
pub fn is_git_dir_name(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let trimmed = name.trim_end_matches(['.', ' ']);
    trimmed.eq_ignore_ascii_case(".git") || name.eq_ignore_ascii_case("git~1")
}

/// True when `dir` is a git repository's git dir (a bare repository or a `.git` dir):
/// git takes a directory with a `HEAD` file, an `objects` and a `refs` directory for one.
pub fn is_git_repository(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        std::fs::symlink_metadata(dir.join(name)).is_ok_and(|meta| {
            if dir_wanted {
                meta.is_dir()
            } else {
                meta.is_file()
            }
        })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true)
}

/// The worktree's `.git` pointer file as it was before a tool call or command.
#[derive(Debug)]
pub struct GitPointer {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
}

impl GitPointer {
    /// Reads the pointer of `worktree` (nothing to restore later when it is not a file).
    pub fn snapshot(worktree: &Path) -> Self {
        let path = worktree.join(".git");
        let bytes = read_pointer(&path);
        Self { path, bytes }
    }

    /// Puts the pointer back if it changed; a note for the model if it did.
    pub fn restore(&self) -> Option<String> {
        let original = self.bytes.as_ref()?;
        if read_pointer(&self.path).is_some_and(|now| now == *original) {
            return None;
        }
        Some(match replace_pointer(&self.path, original) {
            Ok(()) => RESTORED_NOTE.to_owned(),
            Err(error) => unrestored_note(&error),
        })
    }
}

/// What the model is told when its command changed the worktree's `.git` file.
pub const RESTORED_NOTE: &str = "[the command changed the worktree's `.git` file; grove \
                                 restored it. grove manages git for this worktree: leave \
                                 `.git` alone]";

/// What the model is told when the changed `.git` file could not be put back.
pub fn unrestored_note(error: &std::io::Error) -> String {
    format!(
        "[the command changed the worktree's `.git` file and grove could not restore it \
         ({error}); grove's own git never follows it]"
    )
}

fn read_pointer(path: &Path) -> Option<Vec<u8>> {
    std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .and_then(|_| std::fs::read(path).ok())
}

fn replace_pointer(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }?;
    std::fs::write(path, bytes)
}

/// Makes `worktree`'s `.git` the pointer to `admin_dir` git itself wrote (`gitdir: …`),
/// whatever is there now (a planted file, a link, a directory); true when it had to.
///
/// Call it before a worktree is kept for the user (`--keep-worktrees`, a failed or
/// interrupted subtask): a `git status` of theirs there must reach the repository's own
/// admin dir, never one a model made.
pub fn ensure_git_pointer(worktree: &Path, admin_dir: &Path) -> std::io::Result<bool> {
    let path = worktree.join(".git");
    let mut wanted = b"gitdir: ".to_vec();
    wanted.extend_from_slice(admin_dir.as_os_str().as_encoded_bytes());
    wanted.push(b'\n');
    if read_pointer(&path).is_some_and(|now| now == wanted) {
        return Ok(false);
    }
    replace_pointer(&path, &wanted).map(|()| true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_git_pointer_is_restored_with_a_note() {
        let tree = tempfile::tempdir().unwrap();
        let pointer = tree.path().join(".git");
        std::fs::write(&pointer, "gitdir: /repo/.git/worktrees/1\n").unwrap();
        let snapshot = GitPointer::snapshot(tree.path());
        assert_eq!(
            snapshot.restore(),
            None,
            "an unchanged pointer needs nothing"
        );

        std::fs::remove_file(&pointer).unwrap();
        std::fs::create_dir_all(pointer.join("hooks")).unwrap();
        let note = snapshot.restore();
        assert_eq!(
            (
                note.is_some_and(|note| note.contains("restored")),
                std::fs::read_to_string(&pointer).unwrap()
            ),
            (true, "gitdir: /repo/.git/worktrees/1\n".to_owned()),
            "a pointer replaced by a directory is put back, and the model is told"
        );
    }

    #[test]
    fn every_spelling_of_dot_git_is_a_git_dir_name() {
        let names = [
            ".git",
            ".GIT",
            ".Git",
            ".git.",
            ".git ",
            "GIT~1",
            ".gitignore",
            "git",
        ];
        let verdicts: Vec<bool> = names
            .iter()
            .map(|name| is_git_dir_name(std::ffi::OsStr::new(name)))
            .collect();
        assert_eq!(
            verdicts,
            vec![true, true, true, true, true, true, false, false],
            "case, trailing dots and spaces and the short name are `.git`; others are not"
        );
    }

    #[test]
    fn ensure_git_pointer_replaces_a_planted_link_and_leaves_a_right_one() {
        let tree = tempfile::tempdir().unwrap();
        let admin = Path::new("/repo/.git/worktrees/3");
        std::os::unix::fs::symlink("/elsewhere/evil", tree.path().join(".git")).unwrap();
        let first = ensure_git_pointer(tree.path(), admin).unwrap();
        let second = ensure_git_pointer(tree.path(), admin).unwrap();
        assert_eq!(
            (
                first,
                second,
                std::fs::read_to_string(tree.path().join(".git")).unwrap()
            ),
            (true, false, "gitdir: /repo/.git/worktrees/3\n".to_owned()),
            "a planted link becomes the real pointer; a right pointer is left alone"
        );
    }
}
