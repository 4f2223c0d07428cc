//! Why a subtask's pipeline stopped before its end, one variant per cause with its
//! context.
//!
//! This file owns the vocabulary every stage fails with. A failure becomes text only in
//! the subtask's report (`reason`), which the lead and the user read; that text is this
//! file's `Display`, and it must stay as it was (the lead and the tests read it).

use std::path::PathBuf;

use crate::agent::{AgentError, StopKind};
use crate::git::{AdvanceError, GitError};
use crate::run::id::SubtaskId;
use crate::run::observer::SaveError;
use crate::store::StoreError;
use crate::tools::ExecError;
use crate::worktree::{CheckpointError, CreateError, WorktreeError};

/// How a setup command ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupEnd {
    Exited(i32),
    Signalled(i32),
    TimedOut { timeout_s: u64 },
}

impl std::fmt::Display for SetupEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "exited with status {code}"),
            Self::Signalled(signal) => write!(f, "was killed by signal {signal}"),
            Self::TimedOut { timeout_s } => write!(
                f,
                "did not finish within {timeout_s} s (worktree.setup_timeout_s)"
            ),
        }
    }
}

/// A step of a worktree's life: its tree host's part is told as the mount it is, any
/// other as the worktree's.
impl From<WorktreeError> for SubtaskError {
    fn from(error: WorktreeError) -> Self {
        match error {
            WorktreeError::Tree(source) => source.into(),
            source => Self::Worktree { source },
        }
    }
}

/// A worktree's creation has one meaning for a subtask: the worktree.
impl From<CreateError> for SubtaskError {
    fn from(source: CreateError) -> Self {
        Self::Worktree {
            source: source.into(),
        }
    }
}

/// What is wrong with a local-only file in the user's work tree.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("there is no such file in {} (create it, or remove it from worktree.copy)", root.display())]
    Missing { root: PathBuf },
    #[error("cannot resolve it: {source}")]
    Unresolvable {
        #[source]
        source: std::io::Error,
    },
    #[error("it leads to {}, outside the repository's work tree", real.display())]
    Outside { real: PathBuf },
    #[error("it is not a regular file; list the files to copy one by one")]
    NotAFile,
}

/// Why a local-only file could not be copied into a worktree.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The user's file is gone, or no longer a regular file inside the work tree.
    #[error("{0}")]
    Source(#[from] FileProblem),
    #[error("{path} names no file")]
    NoFileName { path: String },
    #[error("{} in the worktree leads to {}, outside the worktree", path.display(), real.display())]
    Escapes { path: PathBuf, real: PathBuf },
    #[error("{} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why a subtask did not reach its end. Nothing here is retried by grove: the subtask
/// is reported (failed, its work archived) and the lead decides whether to delegate a
/// fix. Only [`Interrupted`](Self::Interrupted) leaves it open for `grove resume`, and
/// only [`Journal`](Self::Journal) stops the run.
#[derive(Debug, thiserror::Error)]
pub enum SubtaskError {
    /// Its worktree could not be made, found again, brought here or mounted (see
    /// [`WorktreeError`] for what is retried).
    #[error("could not create the worktree: {source}")]
    Worktree {
        #[source]
        source: WorktreeError,
    },
    /// Its tree could not be opened on a remote host, on a second host either when
    /// the first was lost. Not retried further.
    #[error("could not open the worktree on a remote host: {source}")]
    Remote {
        #[source]
        source: crate::remote::RemoteError,
    },
    #[error("could not mount the copy-on-write worktree: {source}")]
    Tree {
        #[source]
        source: crate::worktree::OverlayError,
    },
    #[error("the worktree was not checked out: {source}")]
    NotCheckedOut {
        #[source]
        source: CreateError,
    },
    #[error("could not record the local-only files: {source}")]
    RecordLocalFiles {
        #[source]
        source: GitError,
    },
    #[error("could not copy {path} into the worktree (worktree.copy): {source}")]
    Copy {
        path: String,
        #[source]
        source: CopyError,
    },
    #[error("the setup command `{command}` could not run: {source}")]
    SetupNotRun {
        command: String,
        #[source]
        source: ExecError,
    },
    /// The mark that the setup command completed cannot be written (a full disk, say).
    /// Not retried: on resume the setup runs again, in a tree no worker touched.
    #[error("could not record that the setup command ran ({}): {source}", path.display())]
    SetupRecord {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A tree beyond the base could not be shown the base's files for the setup command,
    /// or be given its own back after it. Not retried.
    #[error(
        "could not put the base's files in place for the setup command (it runs on the \
         base's inputs, never on a worker's), or the tree's own back after it: {source}"
    )]
    SetupInputs {
        #[source]
        source: GitError,
    },
    #[error(
        "the setup command `{command}` {status} in {subtask}'s worktree; the worker did not \
         start. Its output ends with:\n{tail}"
    )]
    Setup {
        command: String,
        subtask: SubtaskId,
        status: SetupEnd,
        /// The end of its output, where the error usually is.
        tail: String,
    },
    /// The project's check could not be run on the worktree at all (see
    /// [`CheckError`](crate::run::check::CheckError)).
    #[error("{source}")]
    CheckNotRun {
        #[source]
        source: crate::run::check::CheckError,
    },
    #[error("the worker stopped: {stop}: {detail}")]
    WorkerStopped { stop: StopKind, detail: String },
    #[error("the worker failed: {source}")]
    Worker {
        #[source]
        source: Box<AgentError>,
    },
    #[error("the worktree could not be checked out: {source}")]
    CliNotCheckedOut {
        #[source]
        source: CreateError,
    },
    #[error("interrupted before the worker started")]
    CliNotStarted,
    /// The CLI could not run, or ran and failed or was interrupted, in
    /// `agent::external`'s account (its own words or its stderr's tail).
    #[error("{source}")]
    CliFailed {
        #[source]
        source: crate::agent::external::CliFailure,
    },
    /// A checkpoint or transcript save during the work failed.
    #[error("{source}")]
    Save {
        #[source]
        source: SaveError,
    },
    #[error("could not commit the worker's files: {source}")]
    Checkpoint {
        path: PathBuf,
        #[source]
        source: Box<CheckpointError>,
    },
    #[error("the subtask's branch vanished")]
    BranchVanished { branch: String },
    #[error("{source}")]
    Branch {
        #[source]
        source: GitError,
    },
    #[error("the worker changed no file")]
    NoChanges,
    #[error(
        "{count} commit(s) on the branch record a local-only file ({}), first {first}; the \
         branch is archived, never reviewed or merged",
        paths.join(", ")
    )]
    LocalFilesCommitted {
        count: usize,
        paths: Vec<String>,
        first: String,
    },
    #[error("could not check the branch for local-only files: {source}")]
    LocalFilesUnchecked {
        #[source]
        source: GitError,
    },
    #[error("could not diff the subtask: {source}")]
    Diff {
        #[source]
        source: GitError,
    },
    #[error("cancelled during review")]
    ReviewCancelled,
    #[error("the model API failed during review")]
    ReviewModelApi,
    #[error("the review failed: {source}")]
    Review {
        #[source]
        source: Box<AgentError>,
    },
    /// The judge of a subtask's attempts came to no decision (its model failed, or it
    /// stopped); not retried: every attempt it was to judge fails.
    #[error("the judge of its attempts came to no decision: {reason}")]
    Judge { reason: String },
    #[error("could not merge: {source}")]
    Merge {
        #[from]
        source: AdvanceError,
    },
    /// A resolver's starting point (the subtask merged onto the result with conflict
    /// markers) could not be made.
    #[error("could not merge it with conflict markers for a resolver: {source}")]
    ConflictedMerge {
        #[source]
        source: AdvanceError,
    },
    /// A resolver's commit could not be read for conflict markers.
    #[error("could not check the resolution for conflict markers: {source}")]
    MarkersUnchecked {
        #[source]
        source: GitError,
    },
    /// The run was interrupted: the work is checkpointed, the subtask stays open.
    #[error("interrupted")]
    Interrupted,
    /// The journal cannot be written: the run cannot go on.
    #[error("the run journal cannot be written: {source}")]
    Journal {
        #[source]
        source: StoreError,
    },
}

impl SubtaskError {
    /// The journal failing under this error, which ends the run (the one failure no
    /// subtask report can carry, since the report is journaled); any other error back as
    /// it was. The one way every caller asks it: each layer that wraps a
    /// `SubtaskError` answers through this method, never by matching
    /// [`Journal`](Self::Journal) itself. A journal write inside a save
    /// ([`Save`](Self::Save)) is not one: the turn's work is saved on its branch, so the
    /// subtask fails (or, on a full disk, pauses) and the run goes on.
    pub(crate) fn into_journal(self) -> Result<StoreError, Self> {
        match self {
            Self::Journal { source } => Ok(source),
            other => Err(other),
        }
    }
}

/// `result` with the journal failing under its error taken out as the outer error (the
/// run ends: see [`SubtaskError::into_journal`]), for `?`.
pub(crate) fn journal_out<T>(
    result: Result<T, SubtaskError>,
) -> Result<Result<T, SubtaskError>, StoreError> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => match error.into_journal() {
            Ok(journal) => Err(journal),
            Err(error) => Ok(Err(error)),
        },
    }
}

impl From<StoreError> for SubtaskError {
    fn from(source: StoreError) -> Self {
        Self::Journal { source }
    }
}

// A sub-operation whose error has one meaning for a subtask converts with `?` (a
// worktree's creation, a merge onto the result); one whose error means several (git's
// low-level one: the branch, a diff, the local-only files…; a worktree's fill: its
// checkout for the setup or for the CLI) is mapped at its call into the variant that
// names the operation.

impl From<SaveError> for SubtaskError {
    fn from(source: SaveError) -> Self {
        Self::Save { source }
    }
}

impl From<crate::agent::external::CliFailure> for SubtaskError {
    fn from(source: crate::agent::external::CliFailure) -> Self {
        Self::CliFailed { source }
    }
}

impl From<crate::worktree::OverlayError> for SubtaskError {
    fn from(source: crate::worktree::OverlayError) -> Self {
        Self::Tree { source }
    }
}

/// The check on a subtask's tree: stopped by an interruption, the journal failing (the
/// run ends), or not run at all.
impl From<crate::run::check::CheckError> for SubtaskError {
    fn from(error: crate::run::check::CheckError) -> Self {
        match error.into_journal() {
            Ok(source) => Self::Journal { source },
            Err(crate::run::check::CheckError::Interrupted) => Self::Interrupted,
            Err(source) => Self::CheckNotRun { source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> StoreError {
        StoreError::InvalidRunId { id: "x".into() }
    }

    #[test]
    fn only_the_journal_itself_failing_ends_the_run() {
        let journal = SubtaskError::Journal { source: store() };
        let in_a_save = SubtaskError::Save {
            source: SaveError::Journal { source: store() },
        };
        let taken: Vec<bool> = [journal, in_a_save, SubtaskError::Interrupted]
            .into_iter()
            .map(|error| error.into_journal().is_ok())
            .collect();
        assert_eq!(
            taken,
            [true, false, false],
            "the journal's own failure is taken out; a save's is the subtask's to report"
        );
        assert!(
            matches!(
                journal_out(Err::<(), _>(SubtaskError::Journal { source: store() })),
                Err(StoreError::InvalidRunId { .. })
            ),
            "journal_out makes it the outer error"
        );
        assert!(
            matches!(
                journal_out(Err::<(), _>(SubtaskError::NoChanges)),
                Ok(Err(SubtaskError::NoChanges))
            ),
            "any other error stays inside, as it was"
        );
    }

    #[test]
    fn a_check_that_gave_no_verdict_converts_by_its_cause() {
        use crate::run::check::CheckError;
        assert!(
            matches!(
                SubtaskError::from(CheckError::Interrupted),
                SubtaskError::Interrupted
            ),
            "an interrupted check leaves the subtask open"
        );
        let journal = SubtaskError::from(CheckError::Journal(store()));
        assert_eq!(
            journal.to_string(),
            "the run journal cannot be written: `x` is not a grove run id (expected e.g. \
             20261129-215530-7f3a)",
            "the check's journal failing is the subtask's journal failing"
        );
        assert!(journal.into_journal().is_ok(), "and it ends the run");
    }
}
