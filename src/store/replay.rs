//! Why a journal record cannot be folded into the run's state.

use crate::status::SubtaskId;
use crate::store::run_status::RunStatus;

/// A record that does not fit the records before it. Never retried: the journal (or the
/// caller about to journal the record) is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal record {record} (`{record_type}`) cannot be applied: {reason}")]
pub struct ReplayError {
    /// 1-based position of the record in the journal (its line, for an intact journal).
    pub record: u64,
    pub record_type: &'static str,
    pub reason: ReplayReason,
}

/// Why a record does not fit the records before it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayReason {
    #[error("the journal is empty; it must start with `run_started`")]
    EmptyJournal,
    #[error("a journal must start with `run_started`")]
    NotStartedFirst,
    #[error("the run already started")]
    AlreadyStarted,
    #[error("the run already finished")]
    AlreadyFinished,
    /// A `grove review` record (a person's verdict, a rebuilt or applied result) before
    /// the run finished.
    #[error("the run is {status}, not finished; `grove review` changes only finished runs")]
    NotFinished { status: RunStatus },
    #[error("the run's result was already applied")]
    AlreadyApplied,
    #[error("subtask `{subtask}` already started")]
    SubtaskAlreadyStarted { subtask: SubtaskId },
    #[error("subtask `{subtask}` was never started")]
    SubtaskNeverStarted { subtask: SubtaskId },
    #[error("subtask `{subtask}` already finished")]
    SubtaskAlreadyFinished { subtask: SubtaskId },
    #[error("tool call `{call_id}` of `{subtask}` already started")]
    ToolCallAlreadyStarted { subtask: String, call_id: String },
    #[error("tool call `{call_id}` of `{subtask}` finished but never started")]
    ToolCallNeverStarted { subtask: String, call_id: String },
    #[error("subtask `{subtask}` is merged without its commit and result")]
    MergedWithoutCommit { subtask: SubtaskId },
    #[error("`{group}` is no group of attempts")]
    NoAttemptGroup { group: SubtaskId },
}
