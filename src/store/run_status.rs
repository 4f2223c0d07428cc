//! Where a run stands, as its journal (and a listing's lock check) says.

use serde::{Deserialize, Serialize};

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A grove process is working on it (or, in a bare replay, was when it last wrote).
    Running,
    /// Stopped in a resumable state on purpose.
    Paused,
    /// The journal says running, but no live grove process holds the lock for it: the
    /// process crashed or was killed. Never produced by [`RunState::replay`], only by
    /// a listing that checks the lock.
    Interrupted,
    /// Went through to the end.
    Finished,
    /// Stopped on an error it cannot resume from.
    Failed,
    /// The run's journal cannot be read. Only produced by a listing, which reports the
    /// problem instead of hiding the run.
    Unreadable,
}

impl RunStatus {
    /// The name used in JSON and in messages, e.g. `interrupted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Finished => "finished",
            RunStatus::Failed => "failed",
            RunStatus::Unreadable => "unreadable",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
