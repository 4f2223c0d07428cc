//! Stage 3, commit: the orchestrator (not the model) commits what the worker left, and
//! the branch's diff is taken for the review.
//!
//! This file owns the final commit and what must hold before a diff is reviewed: the
//! worker finished, it changed something, and no commit on the branch records a
//! local-only file. It must never lose what a worker wrote: the final commit is made
//! even after a failure or an interrupt.

use crate::git::{BranchDiff, CommitId, Worktree};
use crate::run::context::RunContext;
use crate::run::id::SubtaskId;
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::work::WorkEnd;
use crate::store::journal::Entry;

/// The worker's work, committed and ready for review.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The branch's tip.
    pub(crate) tip: CommitId,
    /// The branch against the base.
    pub(crate) diff: BranchDiff,
    /// The worker's final message.
    pub(crate) summary: String,
}

/// Commits whatever the worker left in `worktree`, then checks that its work can be
/// reviewed.
pub(crate) async fn commit(
    ctx: &RunContext,
    id: SubtaskId,
    worktree: &Worktree,
    work: WorkEnd,
) -> Result<Committed, SubtaskError> {
    let head = ctx
        .repo
        .checkpoint(worktree, &format!("{id}: final"))
        .await
        .map_err(|source| SubtaskError::Checkpoint {
            path: worktree.path().to_path_buf(),
            source,
        })?;
    if let Some(commit) = head {
        ctx.journal(Entry::Checkpoint {
            subtask: id.to_string(),
            commit: commit.to_string(),
            turn: work.ledger.steps,
        })?;
    }
    if ctx.cancel.is_cancelled() {
        return Err(SubtaskError::Interrupted);
    }
    work.saved.map_err(|source| SubtaskError::Save { source })?;
    let summary = work.summary?;
    let tip = ctx
        .repo
        .ref_target(&worktree.branch_ref())
        .map_err(|source| SubtaskError::Branch { source })?
        .ok_or_else(|| SubtaskError::BranchVanished {
            branch: worktree.branch_ref(),
        })?;
    if tip == ctx.base {
        return Err(SubtaskError::NoChanges);
    }
    no_local_files_in_history(ctx, tip).await?;
    let diff = ctx
        .repo
        .diff(ctx.base, tip, ctx.options.max_review_patch_bytes)
        .await
        .map_err(|source| SubtaskError::Diff { source })?;
    Ok(Committed { tip, diff, summary })
}

/// Fails when a commit in the history `base..tip` records a local-only file: something
/// other than grove committed it (e.g. a `git commit` in the worker's shell), so the
/// branch is archived, never reviewed or merged.
async fn no_local_files_in_history(ctx: &RunContext, tip: CommitId) -> Result<(), SubtaskError> {
    let local = ctx.local_paths();
    let commits = ctx
        .repo
        .commits_touching(ctx.base, tip, &local)
        .await
        .map_err(|source| SubtaskError::LocalFilesUnchecked { source })?;
    match commits.last() {
        None => Ok(()),
        Some(first) => Err(SubtaskError::LocalFilesCommitted {
            count: commits.len(),
            paths: local,
            first: first.to_string(),
        }),
    }
}
