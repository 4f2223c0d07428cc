//! Journal entries that tests write by hand.

use grove::status::SubtaskId;
use grove::store::journal::{ContextMode, Entry, SubtaskKind};

/// The `subtask_started` record of `S<n>`: the `worker` role in an isolated context,
/// briefed with `task`, on `branch`, with no write scope and waiting for nothing.
pub fn subtask_started(n: u32, task: &str, branch: &str) -> Entry {
    Entry::SubtaskStarted {
        subtask: SubtaskId(n),
        task: task.to_owned(),
        branch: branch.to_owned(),
        mode: ContextMode::Isolated,
        agent: "worker".into(),
        paths: Vec::new(),
        after: Vec::new(),
        waits_for: Vec::new(),
        kind: SubtaskKind::Task,
        replaces: None,
        start_from: None,
    }
}
