//! The git layer's error type.
//!
//! Every variant carries the context a user needs to act on it: the git operation, the
//! directory or ref involved and git's own stderr. Variant docs say whether the layer
//! retries the failure itself before returning it, and the facts callers act on are
//! decided here, where the error is made, never guessed by them from a variant or a
//! message: [`GitError::is_disk_full`] (the run pauses) and [`GitError::can_retry`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Something grove could not do with git.
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

    /// A ref was to be deleted at `expected` and another writer had moved it (or deleted
    /// it: `actual` is `nothing`). Not retried: the ref stays as the other writer left it.
    #[error("{reference} was not deleted: it is at {actual}, not {expected}")]
    RefMoved {
        reference: String,
        expected: String,
        actual: String,
    },

    /// A branch would have been deleted while its work is kept nowhere else. Not retried:
    /// the branch stays.
    #[error(
        "branch {branch} was kept: its tip {tip} is in neither the run's result nor an archive"
    )]
    WorkNotKept { branch: String, tip: String },

    /// git refuses to record some paths of a worktree (names it treats as `.git` under
    /// another spelling, such as `x/git~1/y`). Everything else was committed; these stay
    /// only in the worktree, which must therefore be kept, never removed. Not retried.
    #[error(
        "git refuses to record {} in {} (everything else is committed); the worktree is \
         kept so that they are not lost",
        paths.join(", "),
        worktree.display()
    )]
    PathsRefused {
        worktree: PathBuf,
        paths: Vec<String>,
    },

    /// A revision or ref grove needed does not exist.
    #[error("{rev} does not exist in the repository")]
    UnknownRevision { rev: String },

    /// The worktree at `path` is registered for its branch `rev`, which does not exist:
    /// a creation cut short (a full disk or a crash between the registration and the
    /// branch), or a branch deleted by hand. Not retried: the directory is not a
    /// worktree grove can use; the caller moves it aside, never deletes it, and creates
    /// the worktree again. Told as [`UnknownRevision`](Self::UnknownRevision) is.
    #[error("{rev} does not exist in the repository")]
    BranchNeverMade { path: PathBuf, rev: String },

    /// The subtask branch already exists and does not contain the run's base commit, so
    /// reusing it would silently drop or mix in unrelated history. Not retried.
    #[error("branch {branch} already exists at {tip}, which does not contain the base {base}")]
    BranchDiverged {
        branch: String,
        tip: String,
        base: String,
    },

    /// The subtask branch is checked out in another worktree that still exists on disk.
    /// Not retried: grove never lets two worktrees commit to one branch.
    #[error("branch {branch} is already checked out in the worktree at {path}")]
    BranchCheckedOutElsewhere { branch: String, path: PathBuf },

    /// The worktree path exists but is not a worktree of this repository; grove will not
    /// write into a directory it does not own.
    #[error("{path} already exists and is not a worktree grove registered for {branch}")]
    WorktreePathOccupied { path: PathBuf, branch: String },

    /// The background checkout of a worktree failed; the worktree must not be used.
    #[error("filling the worktree at {path} failed: {reason}")]
    FillFailed {
        path: PathBuf,
        reason: Arc<GitError>,
    },

    /// A copy-on-write worktree was to be committed or read while its tree host is not
    /// running: its path shows only its `.git` file here. Not retried: the caller starts
    /// the host again (a resume) or keeps the worktree.
    #[error(
        "the copy-on-write worktree at {path} is not mounted; grove will not run git on \
         its empty mount point"
    )]
    TreeNotMounted { path: PathBuf },

    /// Git was asked to run in a worktree whose files are on a remote host (its path
    /// here holds only the `.git` file). Not retried.
    #[error(
        "the worktree at {path} is on a remote host; grove will not run git on its empty \
         path here"
    )]
    Elsewhere { path: PathBuf },

    /// A remote host failed a worktree's checkpoint (its words). Not retried: the
    /// branch keeps the last checkpoint that came back.
    #[error("the remote worktree at {path} could not be checkpointed: {reason}")]
    RemoteCheckpoint { path: PathBuf, reason: String },

    /// The background checkout stopped without reporting (its task was cancelled).
    #[error("filling the worktree at {path} stopped before it finished")]
    FillAborted { path: PathBuf },

    /// An overlay upper directory uses a feature the checkpoint does not read (a
    /// redirected directory, a metadata-only copy): committing it could lose data. Not
    /// retried; grove mounts without those features.
    #[error("{path} carries the overlay xattr {xattr}, which grove does not read")]
    UpperUnsupported { path: PathBuf, xattr: &'static str },

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
            GitError::FillFailed { reason, .. } => reason.is_disk_full(),
            _ => false,
        }
    }

    /// True when making the same call again, unchanged, may succeed: another process
    /// held one of git's lock files, or another writer kept moving the ref (each already
    /// retried a few times before it is returned), or the disk was full. Every other
    /// failure would fail the same way again.
    pub fn can_retry(&self) -> bool {
        self.is_lock_contention()
            || matches!(self, GitError::RefContended { .. })
            || self.is_disk_full()
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
        let fill = GitError::FillFailed {
            path: PathBuf::from("/w/1"),
            reason: Arc::new(command("error: unable to write file 'src/a.rs'")),
        };
        let not_found = io(std::io::Error::from(std::io::ErrorKind::NotFound));
        let unrelated = command("fatal: invalid reference: main");
        let unknown = GitError::UnknownRevision { rev: "x".into() };
        assert_eq!(
            [
                &enospc, &edquot, &kind, &stderr, &ref_lock, &libgit2, &fill, &not_found,
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
        let contended = GitError::RefContended {
            reference: "refs/heads/r".into(),
            actual: "abc".into(),
        };
        let full = command("fatal: write error: No space left on device");
        let mismatch = command(
            "fatal: cannot lock ref 'refs/heads/r': is at abc but expected def \
             (refs/heads/r.lock: File exists)",
        );
        let unknown = GitError::UnknownRevision { rev: "x".into() };
        assert_eq!(
            [&held, &contended, &full, &mismatch, &unknown].map(GitError::can_retry),
            [true, true, true, false, false],
            "a retry helps only when the cause can pass"
        );
    }
}
