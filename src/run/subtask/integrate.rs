//! Stage 5, integrate: an approved subtask merged onto the run's result in its turn; a
//! rejected one goes no further.
//!
//! This file owns the only write to the run's result ref. It must never merge a diff no
//! reviewer approved, never merge out of turn (the [`MergeQueue`] orders merges by
//! subtask number), and never leave the result half-merged: a conflict leaves it as it
//! was.

use crate::git::{CommitId, MergeOutcome};
use crate::run::context::RunContext;
use crate::run::id::SubtaskId;
use crate::run::merge_queue::MergeQueue;
use crate::run::subtask::error::SubtaskError;
use crate::store::journal::{Entry, SubtaskOutcome, VerdictKind};
use crate::tools::truncate_chars;

/// Where the subtask's work ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Integration {
    /// The reviewer rejected it; nothing was merged.
    Rejected,
    /// It is on the run's result.
    Merged,
    /// Merging it conflicted on these paths; the result is unchanged.
    Conflict { paths: Vec<String> },
}

impl Integration {
    /// The subtask's status in the report and the journal.
    pub(crate) fn outcome(&self) -> SubtaskOutcome {
        match self {
            Self::Rejected => SubtaskOutcome::Rejected,
            Self::Merged => SubtaskOutcome::Merged,
            Self::Conflict { .. } => SubtaskOutcome::Conflict,
        }
    }
}

/// Merges subtask `id`'s `tip` onto the result once every lower-numbered subtask has
/// settled, if the reviewer approved it.
pub(crate) async fn integrate(
    ctx: &RunContext,
    queue: &MergeQueue,
    id: SubtaskId,
    brief: &str,
    verdict: VerdictKind,
    tip: CommitId,
) -> Result<Integration, SubtaskError> {
    if verdict == VerdictKind::Reject {
        return Ok(Integration::Rejected);
    }
    if !queue.wait_for_turn(id).await {
        return Err(SubtaskError::Interrupted);
    }
    let message = format!(
        "grove {}: merge {id}\n\n{}\n\nGrove-Run: {}\nGrove-Subtask: {id}\n",
        ctx.run,
        truncate_chars(brief.lines().next().unwrap_or_default(), 200),
        ctx.run
    );
    let merged = ctx
        .repo
        .merge_onto(&ctx.run.result_ref(), tip, &message)
        .await
        .map_err(|source| SubtaskError::Merge { source })?;
    match merged {
        MergeOutcome::Merged { commit } => {
            ctx.journal(Entry::Merged {
                subtask: id.to_string(),
                commit: tip.to_string(),
                result: commit.to_string(),
            })?;
            Ok(Integration::Merged)
        }
        MergeOutcome::AlreadyMerged => Ok(Integration::Merged),
        MergeOutcome::Conflict { paths } => {
            ctx.journal(Entry::Conflict {
                subtask: id.to_string(),
                paths: paths.clone(),
            })?;
            Ok(Integration::Conflict { paths })
        }
    }
}
