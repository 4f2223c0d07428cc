//! The one place that says whether a failure is a full disk (ENOSPC).
//!
//! This file owns the classification only: the run decides what to do (pause, never
//! fail). It must never inspect anything but the error chain it is given.

use std::error::Error;

/// The texts git and libgit2 print for ENOSPC: `strerror(ENOSPC)`, git's own words when
/// an object write fails ("sha1 file '…' write error. Out of diskspace"), a checkout
/// that cannot write a file ("error: unable to write file P", which drops errno), and a
/// ref update that cannot write its lock file ("couldn't write '….lock'", errno dropped
/// too: seen when `git worktree add` creates a subtask's branch on a full disk), and one
/// that cannot close it ("couldn't close 'HEAD.lock'": the space is claimed at close).
/// The last three may be another write fault: pausing is the safe side.
const NO_SPACE: [&str; 5] = [
    "No space left on device",
    "Out of diskspace",
    "error: unable to write file ",
    "couldn't write '",
    "couldn't close '",
];
/// ENOSPC.
const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;

/// True when `error`, or any error in its source chain, is a full disk: an
/// `io::Error` of kind `StorageFull` (or raw os error 28), or a git command or libgit2
/// call whose message says "No space left on device".
pub fn is_disk_full(error: &(dyn Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && (io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(ENOSPC))
        {
            return true;
        }
        // A git CLI's stderr and libgit2's messages reach us as text only.
        let text = error.to_string();
        if NO_SPACE.iter().any(|words| text.contains(words)) {
            return true;
        }
        current = error.source();
    }
    false
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
        let raw = Outer(std::io::Error::from_raw_os_error(ENOSPC));
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
}
