//! The git layer's error types: [`GitError`], the low-level causes every git call
//! shares, and [`AdvanceError`], moving a ref onto new work (a merge, a squash, a
//! conflicted merge). An operation with failures of its own has its own enum beside it
//! (deleting a branch: `branch.rs`; a worktree's creation and checkpoint: `worktree`),
//! which wraps a [`GitError`] for the rest.
//!
//! Every variant carries the context a user needs to act on it: the git operation, the
//! directory or ref involved and git's own stderr. Variant docs say whether the layer
//! retries the failure itself before returning it, and the facts callers act on are
//! decided here, where the error is made, never guessed by them from a variant or a
//! message: [`GitError::is_disk_full`] (the run pauses) and [`GitError::can_retry`].

use std::path::{Path, PathBuf};

/// Something grove could not do with git: the causes any git call may meet.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The git executable could not be started at all. Not retried.
    #[error("could not start `git {op}` in {dir}: {source}")]
    Spawn {
        op: String,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A git command exited unsuccessfully. When `stderr` shows another process holding
    /// a `*.lock` file the command was already retried with backoff; other failures are
    /// never retried.
    #[error("`git {op}` failed in {dir} ({status}): {stderr}")]
    Command {
        op: String,
        dir: PathBuf,
        status: String,
        stderr: String,
    },

    /// git succeeded but printed something grove could not make sense of. Not retried.
    #[error("unexpected output from `git {op}`: {detail}")]
    Parse { op: String, detail: String },

    /// An in-process read through libgit2 failed. Not retried.
    #[error("reading {what} failed: {source}")]
    Read {
        what: String,
        #[source]
        source: git2::Error,
    },

    /// An in-process write through libgit2 (an object or a ref) failed. Not retried.
    #[error("writing {what} failed: {source}")]
    Write {
        what: String,
        #[source]
        source: git2::Error,
    },

    /// A filesystem operation on a path grove manages failed. Not retried.
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The path given to [`Repo::open`](crate::git::Repo::open) is not in a git repository.
    #[error(
        "{} is not inside a git repository{}; run grove from your repository or pass -C <dir>",
        path.display(),
        unless_not_found(cause)
    )]
    NotARepository {
        path: PathBuf,
        /// libgit2's reason; shown only when it says more than "not found".
        cause: git2::Error,
    },

    /// A name grove builds refs from (run id, branch) is not usable as a ref component.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: &'static str,
    },

    /// A revision or ref grove needed does not exist.
    #[error("{rev} does not exist in the repository")]
    UnknownRevision { rev: String },
}

/// Why a ref could not be moved onto new work: a merge onto it, a squashed history
/// written to it, or a conflicted merge of two sides named by their refs.
#[derive(Debug, thiserror::Error)]
pub enum AdvanceError {
    /// Reading, merging or writing failed (see [`GitError`] for what is retried).
    #[error(transparent)]
    Git(#[from] GitError),

    /// A compare-and-swap ref update kept losing to another writer. Retried a few times
    /// (recomputing the merge each time) before this is returned.
    #[error("{reference} kept moving while grove tried to update it (last seen at {actual})")]
    RefContended { reference: String, actual: String },

    /// `base` is not on the first-parent history of `reference` (someone moved the ref
    /// by hand), so its commits cannot be told apart from older history. Not retried.
    #[error("{base} is not on the first-parent history of {reference} (at {tip})")]
    NotOnFirstParentChain {
        reference: String,
        tip: String,
        base: String,
    },
}

impl AdvanceError {
    /// True when the disk was full (see [`GitError::is_disk_full`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Git(error) => error.is_disk_full(),
            Self::RefContended { .. } | Self::NotOnFirstParentChain { .. } => false,
        }
    }

    /// True when the same call may succeed: the cause can pass
    /// ([`GitError::can_retry`]), or another writer kept moving the ref.
    pub fn can_retry(&self) -> bool {
        match self {
            Self::Git(error) => error.can_retry(),
            Self::RefContended { .. } => true,
            Self::NotOnFirstParentChain { .. } => false,
        }
    }
}

impl GitError {
    /// The [`GitError::Io`] of `action` on `path`, for `map_err`.
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    /// An in-process libgit2 write that failed: [`GitError::Write`], or, when the
    /// thread's errno is ENOSPC, the full disk it is ([`GitError::Io`]): libgit2 often
    /// loses it from its message (a full disk read "no error", or an earlier call's
    /// "target OID for the reference doesn't match"), so the run closed a subtask as
    /// failed where it must pause.
    pub(crate) fn write(what: String, source: git2::Error) -> Self {
        let errno = std::io::Error::last_os_error();
        if errno.raw_os_error() == Some(nix::errno::Errno::ENOSPC as i32) {
            return Self::Io {
                action: "write",
                path: PathBuf::from(what),
                source: errno,
            };
        }
        Self::Write { what, source }
    }

    /// True when the failure is another process holding one of git's lock files.
    pub(crate) fn is_lock_contention(&self) -> bool {
        match self {
            GitError::Command { stderr, .. } => stderr_shows_lock_contention(stderr),
            _ => false,
        }
    }

    /// True when the disk (or the user's quota) was full: an io source of ENOSPC or
    /// EDQUOT, git's words for it in a command's stderr (see [`says_disk_full`]), libgit2's
    /// message, or a worktree whose checkout failed so. A full disk is never the work's
    /// fault: the run pauses, and `grove resume` does the same call again once there is
    /// room.
    pub fn is_disk_full(&self) -> bool {
        match self {
            GitError::Spawn { source, .. } | GitError::Io { source, .. } => {
                io_is_disk_full(source) || says_disk_full(&source.to_string())
            }
            GitError::Command { stderr, .. } => says_disk_full(stderr),
            GitError::Read { source, .. } | GitError::Write { source, .. } => {
                says_disk_full(source.message())
            }
            GitError::Parse { .. }
            | GitError::NotARepository { .. }
            | GitError::InvalidName { .. }
            | GitError::UnknownRevision { .. } => false,
        }
    }

    /// True when making the same call again, unchanged, may succeed: another process
    /// held one of git's lock files (already retried a few times before it is returned),
    /// or the disk was full. Every other failure would fail the same way again.
    pub fn can_retry(&self) -> bool {
        self.is_lock_contention() || self.is_disk_full()
    }
}

/// The texts git and libgit2 print for a full disk: `strerror(ENOSPC)` and
/// `strerror(EDQUOT)`, git's own words when an object write fails ("sha1 file '…' write
/// error. Out of diskspace"), a checkout that cannot write a file ("error: unable to
/// write file P", which drops errno), and a ref update that cannot write its lock file
/// ("couldn't write '….lock'", errno dropped too: seen when `git worktree add` creates a
/// subtask's branch on a full disk), and one that cannot close it ("couldn't close
/// 'HEAD.lock'": the space is claimed at close). The last three may be another write
/// fault: pausing is the safe side.
const NO_SPACE: [&str; 6] = [
    "No space left on device",
    "Disk quota exceeded",
    "Out of diskspace",
    "error: unable to write file ",
    "couldn't write '",
    "couldn't close '",
];

/// True when `text` (a git command's stderr, libgit2's message) says the disk was full.
pub(crate) fn says_disk_full(text: &str) -> bool {
    NO_SPACE.iter().any(|words| text.contains(words))
}

/// True when `error` is a full disk or quota: kind `StorageFull` or
/// `QuotaExceeded`, or raw os error ENOSPC or EDQUOT.
pub(crate) fn io_is_disk_full(error: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || matches!(
        error.raw_os_error(),
        Some(code) if code == Errno::ENOSPC as i32 || code == Errno::EDQUOT as i32
    )
}

/// git reports a held lock as "Unable to create '<path>.lock': File exists" (index,
/// config and ref locks alike); a compare-and-swap mismatch ("but expected") is not
/// contention and must not be retried blindly.
pub(crate) fn stderr_shows_lock_contention(stderr: &str) -> bool {
    stderr.contains(".lock") && stderr.contains("File exists") && !stderr.contains("but expected")
}

/// ` (reason)` for a libgit2 error other than "not found", which the message says anyway.
fn unless_not_found(cause: &git2::Error) -> String {
    if cause.code() == git2::ErrorCode::NotFound {
        String::new()
    } else {
        format!(" ({})", cause.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(stderr: &str) -> GitError {
        GitError::Command {
            op: "worktree add".into(),
            dir: PathBuf::from("/repo"),
            status: "exit status: 128".into(),
            stderr: stderr.into(),
        }
    }

    fn io(source: std::io::Error) -> GitError {
        GitError::Io {
            action: "write",
            path: PathBuf::from("/repo/x"),
            source,
        }
    }

    #[test]
    fn a_full_disk_is_decided_where_the_error_is_made() {
        let enospc = io(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENOSPC as i32,
        ));
        let edquot = io(std::io::Error::from_raw_os_error(
            nix::errno::Errno::EDQUOT as i32,
        ));
        let kind = io(std::io::Error::from(std::io::ErrorKind::StorageFull));
        let stderr = command("fatal: write error: No space left on device");
        let ref_lock = command(
            "fatal: cannot update ref 'refs/heads/grove/r/2': couldn't write \
             '/repo/.git/refs/heads/grove/r/2.lock'",
        );
        let libgit2 = GitError::Read {
            what: "the index".into(),
            source: git2::Error::from_str("failed to write: No space left on device"),
        };
        let checkout = command("error: unable to write file 'src/a.rs'");
        let not_found = io(std::io::Error::from(std::io::ErrorKind::NotFound));
        let unrelated = command("fatal: invalid reference: main");
        let unknown = GitError::UnknownRevision { rev: "x".into() };
        assert_eq!(
            [
                &enospc, &edquot, &kind, &stderr, &ref_lock, &libgit2, &checkout, &not_found,
                &unrelated, &unknown
            ]
            .map(GitError::is_disk_full),
            [
                true, true, true, true, true, true, true, false, false, false
            ],
            "a full disk by its errno, its kind, git's or libgit2's words, and nothing else"
        );
    }

    #[test]
    fn only_a_held_lock_a_moving_ref_or_a_full_disk_can_be_retried() {
        let held = command("fatal: Unable to create '/repo/.git/index.lock': File exists.");
        let full = command("fatal: write error: No space left on device");
        let mismatch = command(
            "fatal: cannot lock ref 'refs/heads/r': is at abc but expected def \
             (refs/heads/r.lock: File exists)",
        );
        let unknown = GitError::UnknownRevision { rev: "x".into() };
        assert_eq!(
            [&held, &full, &mismatch, &unknown].map(GitError::can_retry),
            [true, true, false, false],
            "a retry helps only when the cause can pass"
        );
        let contended = AdvanceError::RefContended {
            reference: "refs/heads/r".into(),
            actual: "abc".into(),
        };
        let off_chain = AdvanceError::NotOnFirstParentChain {
            reference: "refs/heads/r".into(),
            tip: "abc".into(),
            base: "def".into(),
        };
        assert_eq!(
            [
                &contended,
                &off_chain,
                &AdvanceError::from(held),
                &AdvanceError::from(mismatch)
            ]
            .map(AdvanceError::can_retry),
            [true, false, true, false],
            "a moving ref can be retried, a ref off its chain cannot; the rest is the cause's"
        );
        assert!(
            AdvanceError::from(full).is_disk_full(),
            "a full disk is the cause's to tell"
        );
    }
}
