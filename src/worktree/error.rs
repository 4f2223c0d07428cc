//! The worktree layer's errors, one per operation family: creating a worktree
//! ([`CreateError`]), committing its files ([`CheckpointError`]), and the check every
//! git call in a worktree makes first, that its files are here ([`NotHereError`]); a
//! step of its life that does several of these (its removal, `grove clean`) fails with
//! [`WorktreeError`], which carries whichever it was.
//!
//! Each wraps a [`GitError`] for the causes any git call shares, and decides
//! `is_disk_full`/`can_retry` from its own variants, delegating to the cause: callers
//! never guess them. Every `Display` is read by the lead and the tests as it stands.

use std::path::PathBuf;
use std::sync::Arc;

use super::overlay::OverlayError;
use crate::git::{AdvanceError, DeleteError, GitError};

/// Why a step of a worktree's life failed: git's part, its creation, its checkpoint,
/// deleting its branch, or the copy-on-write tree's part.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// Registering or unregistering it (see [`GitError`] for what is retried).
    #[error(transparent)]
    Git(#[from] GitError),
    /// Creating or finding it again (see [`CreateError`]).
    #[error(transparent)]
    Create(#[from] CreateError),
    /// Committing its last changes before it goes (see [`CheckpointError`]).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Deleting its branch once its work is kept (see [`DeleteError`]).
    #[error(transparent)]
    Delete(#[from] DeleteError),
    /// Mounting its tree, copying its files out or removing its layers. Not retried.
    #[error(transparent)]
    Tree(#[from] OverlayError),
}

impl WorktreeError {
    /// True when the disk was full, as the step's own error says.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Git(error) => error.is_disk_full(),
            Self::Create(error) => error.is_disk_full(),
            Self::Checkpoint(error) => error.is_disk_full(),
            Self::Delete(error) => error.is_disk_full(),
            Self::Tree(error) => tree_is_disk_full(error),
        }
    }

    /// True when the same step may succeed if made again: only when its cause can pass.
    pub fn can_retry(&self) -> bool {
        match self {
            Self::Git(error) => error.can_retry(),
            Self::Create(error) => error.can_retry(),
            Self::Checkpoint(error) => error.can_retry(),
            Self::Delete(error) => error.can_retry(),
            Self::Tree(error) => tree_is_disk_full(error),
        }
    }
}

/// True when a tree host's step failed for a full disk: its io cause's errno, or the
/// words of one in its text (a helper's output).
fn tree_is_disk_full(error: &OverlayError) -> bool {
    let io =
        std::error::Error::source(error).and_then(|source| source.downcast_ref::<std::io::Error>());
    io.is_some_and(crate::git::io_is_disk_full) || crate::git::says_disk_full(&error.to_string())
}

/// Why git may not run in a worktree: its files are not here. Raised by
/// [`Worktree::check_mounted`](super::Worktree::check_mounted), which every operation
/// that runs git in a worktree calls first. Not retried.
#[derive(Debug, thiserror::Error)]
pub enum NotHereError {
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
}

/// Why a subtask's worktree could not be created, found again, restarted or filled.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Registering, checking out or moving its branch failed (see [`GitError`] for what
    /// is retried).
    #[error(transparent)]
    Git(#[from] GitError),

    /// A worktree to restart has no files here. Not retried.
    #[error(transparent)]
    NotHere(#[from] NotHereError),

    /// The worktree at `path` is registered for its branch `rev`, which does not exist:
    /// a creation cut short (a full disk or a crash between the registration and the
    /// branch), or a branch deleted by hand. Not retried: the directory is not a
    /// worktree grove can use; the caller moves it aside, never deletes it, and creates
    /// the worktree again. Told as [`GitError::UnknownRevision`] is.
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
    /// write into a directory it does not own. Not retried.
    #[error("{path} already exists and is not a worktree grove registered for {branch}")]
    WorktreePathOccupied { path: PathBuf, branch: String },

    /// The background checkout of a worktree failed; the worktree must not be used.
    /// Not retried here: a full disk ([`CreateError::is_disk_full`]) pauses the run.
    #[error("filling the worktree at {path} failed: {reason}")]
    FillFailed {
        path: PathBuf,
        /// The fill's own failure, shared by every handle that waits for it.
        reason: Arc<CreateError>,
    },

    /// The background checkout stopped without reporting (its task was cancelled).
    /// Not retried.
    #[error("filling the worktree at {path} stopped before it finished")]
    FillAborted { path: PathBuf },
}

impl CreateError {
    /// True when the disk was full, here or in the checkout that failed (see
    /// [`GitError::is_disk_full`]).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Git(error) => error.is_disk_full(),
            Self::FillFailed { reason, .. } => reason.is_disk_full(),
            Self::NotHere(_)
            | Self::BranchNeverMade { .. }
            | Self::BranchDiverged { .. }
            | Self::BranchCheckedOutElsewhere { .. }
            | Self::WorktreePathOccupied { .. }
            | Self::FillAborted { .. } => false,
        }
    }

    /// True when creating it again, unchanged, may succeed: only when git's cause can
    /// pass ([`GitError::can_retry`]), the checkout's included.
    pub fn can_retry(&self) -> bool {
        match self {
            Self::Git(error) => error.can_retry(),
            Self::FillFailed { reason, .. } => reason.can_retry(),
            Self::NotHere(_)
            | Self::BranchNeverMade { .. }
            | Self::BranchDiverged { .. }
            | Self::BranchCheckedOutElsewhere { .. }
            | Self::WorktreePathOccupied { .. }
            | Self::FillAborted { .. } => false,
        }
    }
}

/// Why a worktree's files could not be committed onto its branch (a checkpoint, its
/// archive or removal, which commit first), or read as a checkpoint would read them.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Staging, writing or reading failed (see [`GitError`] for what is retried).
    #[error(transparent)]
    Git(#[from] GitError),

    /// Its checkout never completed (see [`CreateError::FillFailed`]): nothing to
    /// commit from. Not retried.
    #[error(transparent)]
    Unfilled(#[from] CreateError),

    /// Its files are not here (not mounted, or on a remote host). Not retried.
    #[error(transparent)]
    NotHere(#[from] NotHereError),

    /// The branch kept moving under a commit of a copy-on-write tree's upper directory
    /// (see [`AdvanceError::RefContended`], retried before it is returned).
    #[error(transparent)]
    Advance(#[from] AdvanceError),

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

    /// A remote host failed a worktree's checkpoint (its words). Not retried: the
    /// branch keeps the last checkpoint that came back.
    #[error("the remote worktree at {path} could not be checkpointed: {reason}")]
    RemoteCheckpoint { path: PathBuf, reason: String },

    /// An overlay upper directory uses a feature the checkpoint does not read (a
    /// redirected directory, a metadata-only copy): committing it could lose data. Not
    /// retried; grove mounts without those features.
    #[error("{path} carries the overlay xattr {xattr}, which grove does not read")]
    UpperUnsupported { path: PathBuf, xattr: &'static str },
}

impl CheckpointError {
    /// True when the disk here was full (see [`GitError::is_disk_full`]). A remote
    /// host's failure is its own, told in its words: its disk is not this run's to wait
    /// for.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Git(error) => error.is_disk_full(),
            Self::Unfilled(error) => error.is_disk_full(),
            Self::Advance(error) => error.is_disk_full(),
            Self::NotHere(_)
            | Self::PathsRefused { .. }
            | Self::RemoteCheckpoint { .. }
            | Self::UpperUnsupported { .. } => false,
        }
    }

    /// True when the same checkpoint may succeed if made again: only when its cause can
    /// pass.
    pub fn can_retry(&self) -> bool {
        match self {
            Self::Git(error) => error.can_retry(),
            Self::Unfilled(error) => error.can_retry(),
            Self::Advance(error) => error.can_retry(),
            Self::NotHere(_)
            | Self::PathsRefused { .. }
            | Self::RemoteCheckpoint { .. }
            | Self::UpperUnsupported { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> GitError {
        GitError::Command {
            op: "reset".into(),
            dir: PathBuf::from("/w/1"),
            status: "exit status: 128".into(),
            stderr: "error: unable to write file 'src/a.rs'".into(),
        }
    }

    #[test]
    fn a_full_disk_in_a_failed_fill_is_told_by_the_creation_and_the_checkpoint() {
        let fill = CreateError::FillFailed {
            path: PathBuf::from("/w/1"),
            reason: Arc::new(full().into()),
        };
        assert!(
            fill.is_disk_full(),
            "the checkout's full disk is the fill's"
        );
        assert!(fill.can_retry(), "and the same call may succeed with room");
        let checkpoint = CheckpointError::from(fill);
        assert!(
            checkpoint.is_disk_full(),
            "a checkpoint of a tree whose fill met a full disk pauses the run too"
        );
        let aborted = CreateError::FillAborted {
            path: PathBuf::from("/w/1"),
        };
        let occupied = CreateError::WorktreePathOccupied {
            path: PathBuf::from("/w/1"),
            branch: "grove/r/1".into(),
        };
        assert_eq!(
            [&aborted, &occupied].map(CreateError::is_disk_full),
            [false, false],
            "a creation's own refusals are never a full disk"
        );
    }

    #[test]
    fn the_texts_are_the_causes_own() {
        let unknown = GitError::UnknownRevision { rev: "x".into() };
        let text = unknown.to_string();
        assert_eq!(CreateError::from(unknown).to_string(), text);
        let never = CreateError::BranchNeverMade {
            path: PathBuf::from("/w/1"),
            rev: "x".into(),
        };
        assert_eq!(
            never.to_string(),
            text,
            "a branch never made reads as an unknown revision"
        );
        let unmounted = CheckpointError::from(NotHereError::TreeNotMounted {
            path: PathBuf::from("/w/1"),
        });
        assert_eq!(
            unmounted.to_string(),
            "the copy-on-write worktree at /w/1 is not mounted; grove will not run git on \
             its empty mount point"
        );
    }
}
