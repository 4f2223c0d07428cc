//! Stage 4, check: the project's check run on the subtask's committed worktree.
//!
//! This file owns turning a check on one piece of the work into evidence: its result is
//! recorded on the subtask and shown to the reviewer; what a red check means is decided
//! after the review (`[check] subtask`). It must never skip a configured check, and never
//! run it before the worker's work is committed (the reviewer judges that commit).

use crate::git::Worktree;
use crate::run::check::{CheckError, run_check};
use crate::run::context::RunContext;
use crate::run::id::SubtaskId;
use crate::run::subtask::error::SubtaskError;
use crate::store::journal::CheckRun;

/// Runs the project's check in subtask `id`'s worktree; `None` when there is no check.
pub(crate) async fn check_subtask(
    ctx: &RunContext,
    id: SubtaskId,
    worktree: &Worktree,
) -> Result<Option<CheckRun>, SubtaskError> {
    let Some(check) = &ctx.options.check else {
        return Ok(None);
    };
    match run_check(ctx, check, worktree.path(), &id.to_string()).await {
        Ok(run) => Ok(Some(run)),
        Err(CheckError::Interrupted) => Err(SubtaskError::Interrupted),
        Err(CheckError::Journal(source)) => Err(SubtaskError::Journal { source }),
        Err(source) => Err(SubtaskError::CheckNotRun { source }),
    }
}
