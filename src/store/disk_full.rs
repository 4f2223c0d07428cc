//! The one place that says whether an error chain is a full disk (ENOSPC, EDQUOT).
//!
//! This file owns that classification (each git or worktree error decides its own, where
//! it is made: [`GitError::is_disk_full`] and its operations' errors'), and how a full
//! disk is told in one line (what
//! could not be written, the space left): the run decides what to do (pause, never
//! fail). It must never classify by anything but the error chain it is given.

use std::error::Error;
use std::path::Path;

use crate::git::{self, AdvanceError, DeleteError, GitError};
use crate::worktree::{CheckpointError, CreateError, WorktreeError};

/// True when `error`, or any error in its source chain, is a full disk: a git or
/// worktree error that says so ([`GitError::is_disk_full`] and its operations' own,
/// decided where it was made), an `io::Error` of a full disk or quota, or another error
/// whose message carries git's or libgit2's words for it (a command's output tail kept
/// as text).
pub fn is_disk_full(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(full) = told_where_made(error) {
            if full {
                return true;
            }
        } else if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if git::io_is_disk_full(io) || git::says_disk_full(&io.to_string()) {
                return true;
            }
        } else if git::says_disk_full(&error.to_string()) {
            // A git CLI's stderr and libgit2's messages reach us as text only.
            return true;
        }
        current = error.source();
    }
    false
}

/// Whether `error` is a full disk, when it is one of the git or worktree layers' errors,
/// which decide it where they are made; `None` for any other error.
fn told_where_made(error: &(dyn Error + 'static)) -> Option<bool> {
    if let Some(error) = error.downcast_ref::<GitError>() {
        Some(error.is_disk_full())
    } else if let Some(error) = error.downcast_ref::<AdvanceError>() {
        Some(error.is_disk_full())
    } else if let Some(error) = error.downcast_ref::<DeleteError>() {
        Some(error.is_disk_full())
    } else if let Some(error) = error.downcast_ref::<CreateError>() {
        Some(error.is_disk_full())
    } else if let Some(error) = error.downcast_ref::<CheckpointError>() {
        Some(error.is_disk_full())
    } else if let Some(error) = error.downcast_ref::<Box<CheckpointError>>() {
        // Boxed where a subtask's error carries it, to keep that error small.
        Some(error.is_disk_full())
    } else {
        error
            .downcast_ref::<WorktreeError>()
            .map(WorktreeError::is_disk_full)
    }
}

/// How git names each file a checkout could not write.
const UNWRITTEN_FILE: &str = "error: unable to write file ";

/// A full disk's `error` on one line: git prints a line for every file a checkout could
/// not write (56 for 80 files), so the first is kept and the others counted.
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    let text = error.to_string();
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let mut summary = lines.next().unwrap_or_default().to_owned();
    let (mut unwritten, mut others) = (0, Vec::new());
    for line in lines {
        if line.starts_with(UNWRITTEN_FILE) {
            unwritten += 1;
        } else {
            others.push(line);
        }
    }
    match unwritten {
        0 => {}
        1 => summary.push_str(" (and 1 more file)"),
        n => summary.push_str(&format!(" (and {n} more files)")),
    }
    for other in others {
        summary.push_str("; ");
        summary.push_str(other);
    }
    summary
}

/// What is left on the file systems of `dirs` (the nearest existing ancestor of each,
/// each file system once): `12.0 KiB free on /cache/grove/…`, for the person who must
/// make room. Empty when none can be told.
pub fn free_space(dirs: &[&Path]) -> String {
    let mut seen = Vec::new();
    let mut told = Vec::new();
    for dir in dirs {
        let Some(existing) = dir.ancestors().find(|ancestor| ancestor.exists()) else {
            continue;
        };
        let Ok(stats) = nix::sys::statvfs::statvfs(existing) else {
            continue;
        };
        if seen.contains(&stats.filesystem_id()) {
            continue;
        }
        seen.push(stats.filesystem_id());
        // Both are narrower than u64 on some systems (macOS).
        #[allow(clippy::useless_conversion)]
        let free = u64::from(stats.blocks_available()) * u64::from(stats.fragment_size());
        told.push(format!("{} free on {}", bytes(free), dir.display()));
    }
    told.join(", ")
}

/// `512 B`, `12.0 KiB`, `3.4 GiB`.
fn bytes(count: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if count < 1024 {
        return format!("{count} B");
    }
    let mut value = count as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("save failed")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn enospc_is_recognised_by_kind_raw_code_and_git_text_anywhere_in_the_chain() {
        let raw = Outer(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENOSPC as i32,
        ));
        let kind = Outer(std::io::Error::from(std::io::ErrorKind::StorageFull));
        let git = std::io::Error::other("fatal: write error: No space left on device");
        let ref_lock = std::io::Error::other(
            "fatal: cannot update ref 'refs/heads/grove/r/2': couldn't write \
             '/repo/.git/refs/heads/grove/r/2.lock'",
        );
        let closing = std::io::Error::other("error: couldn't close 'HEAD.lock'");
        let other = Outer(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(
            [&raw as &dyn Error, &kind, &git, &ref_lock, &closing, &other].map(is_disk_full),
            [true, true, true, true, true, false],
            "ENOSPC by its code, its kind or git's text, and nothing else"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("could not commit: {0}")]
    struct Committing(#[source] Box<CheckpointError>);

    #[test]
    fn an_operations_error_tells_its_own_full_disk_wherever_it_is_in_the_chain() {
        let enospc = || GitError::Io {
            action: "write",
            path: "/w/1/x".into(),
            source: std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32),
        };
        let fill = CreateError::FillFailed {
            path: "/w/1".into(),
            reason: std::sync::Arc::new(enospc().into()),
        };
        let unfilled = Committing(Box::new(CheckpointError::from(fill)));
        let merge = AdvanceError::from(enospc());
        let remote = CheckpointError::RemoteCheckpoint {
            path: "/w/2".into(),
            reason: "fatal: write error: No space left on device".into(),
        };
        let moved = DeleteError::RefMoved {
            reference: "refs/heads/x".into(),
            expected: "a".into(),
            actual: "b".into(),
        };
        assert_eq!(
            [&unfilled as &dyn Error, &merge, &remote, &moved].map(is_disk_full),
            [true, true, false, false],
            "a fill or a merge that met a full disk pauses the run; the error a remote \
             host's checkpoint makes says its disk is not this run's"
        );
    }

    #[test]
    fn a_checkout_that_could_not_write_many_files_is_one_line_counting_them() {
        let checkout = std::io::Error::other(
            "`git read-tree` failed in /c/tree (exit status: 128): error: unable to write \
             file 'src/f37.txt'\nerror: unable to write file 'src/f38.txt'\nerror: unable to \
             write file 'src/f39.txt'\nfatal: cannot create directory at 'src/x'\n",
        );
        assert_eq!(
            [
                one_line(&checkout),
                bytes(512),
                bytes(12 * 1024 + 100),
                bytes(3 << 30)
            ],
            [
                "`git read-tree` failed in /c/tree (exit status: 128): error: unable to write \
                 file 'src/f37.txt' (and 2 more files); fatal: cannot create directory at \
                 'src/x'"
                    .to_owned(),
                "512 B".to_owned(),
                "12.1 KiB".to_owned(),
                "3.0 GiB".to_owned(),
            ],
            "the first file named, the others counted, any other line kept"
        );
    }
}
