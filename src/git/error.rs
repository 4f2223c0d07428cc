//! The git layer's error type.
//!
//! Every variant carries the context a user needs to act on it: the git operation, the
//! directory or ref involved and git's own stderr. Variant docs say whether the layer
//! retries the failure itself before returning it.

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
