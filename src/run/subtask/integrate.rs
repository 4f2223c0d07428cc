//! Stage 5, integrate: an approved subtask merged onto the run's result in its turn; a
//! rejected one goes no further.
//!
//! This file owns the write to the run's result ref (a conflicting subtask's resolver,
//! `resolve.rs`, writes it too, in this subtask's turn). It must never merge a diff no
//! reviewer approved, never merge out of turn (the [`MergeQueue`] orders merges by
//! subtask number), and never leave the result half-merged: a conflict leaves it as it
//! was.

use crate::git::{CommitId, MergeOutcome};
use crate::run::context::RunContext;
use crate::run::id::SubtaskId;
use crate::run::merge_queue::MergeQueue;
use crate::run::subtask::error::SubtaskError;
use crate::store::journal::{Entry, SubtaskOutcome, VerdictKind};
use crate::text::truncate;

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
        truncate(brief.lines().next().unwrap_or_default(), 200),
        ctx.run
    );
    match merge_journaled(ctx, id, tip, &message).await? {
        MergeOutcome::Merged { .. } | MergeOutcome::AlreadyMerged => Ok(Integration::Merged),
        MergeOutcome::Conflict { paths } => Ok(Integration::Conflict { paths }),
    }
}

/// Merges `tip` onto the result for subtask `id` (`message` for the merge commit) and
/// journals what came of it: a merge or a conflict. The caller holds the merge turn.
pub(crate) async fn merge_journaled(
    ctx: &RunContext,
    id: SubtaskId,
    tip: CommitId,
    message: &str,
) -> Result<MergeOutcome, SubtaskError> {
    let merged = ctx
        .repo
        .merge_onto(&ctx.run.result_ref(), tip, message)
        .await
        .map_err(|source| SubtaskError::Merge { source })?;
    match &merged {
        MergeOutcome::Merged { commit } => ctx.journal(Entry::Merged {
            subtask: id.to_string(),
            commit: tip.to_string(),
            result: commit.to_string(),
        })?,
        MergeOutcome::AlreadyMerged => {}
        MergeOutcome::Conflict { paths } => ctx.journal(Entry::Conflict {
            subtask: id.to_string(),
            paths: paths.clone(),
        })?,
    }
    Ok(merged)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::run::test_support::TestRun;

    /// A run with its result branch, and S1's branch changing `a.txt` to `content`.
    async fn approved_work(content: &str) -> (TestRun, CommitId) {
        let run = TestRun::alpha().await;
        run.ctx
            .repo
            .create_result_branch(&run.ctx.run, run.ctx.base)
            .await
            .unwrap();
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("a.txt"), content).unwrap();
        run.ctx
            .repo
            .checkpoint(&worktree, "S1: final")
            .await
            .unwrap();
        let tip = run.rev(&worktree.branch_ref());
        (run, tip)
    }

    #[tokio::test]
    async fn an_approved_subtask_is_merged_onto_the_result_in_its_turn() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = MergeQueue::new(run.ctx.cancel.clone());
        let id = queue.next_id();

        let integration = integrate(
            &run.ctx,
            &queue,
            id,
            "shout alpha\nmore",
            VerdictKind::Approve,
            tip,
        )
        .await
        .unwrap();

        assert_eq!(integration, Integration::Merged);
        let result = run.ctx.run.result_ref();
        assert_eq!(
            run.git(&run.ctx.user_root, &["show", &format!("{result}:a.txt")]),
            "ALPHA"
        );
        assert_eq!(
            run.git(&run.ctx.user_root, &["log", "-1", "--format=%B", &result]),
            format!(
                "grove {0}: merge S1\n\nshout alpha\n\nGrove-Run: {0}\nGrove-Subtask: S1",
                run.ctx.run
            )
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "merged"]
        );
    }

    #[tokio::test]
    async fn a_rejected_subtask_leaves_the_result_as_it_was() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = MergeQueue::new(run.ctx.cancel.clone());
        let id = queue.next_id();

        let integration = integrate(&run.ctx, &queue, id, "shout", VerdictKind::Reject, tip)
            .await
            .unwrap();

        assert_eq!(integration, Integration::Rejected);
        assert_eq!(
            run.rev(&run.ctx.run.result_ref()),
            run.ctx.base,
            "nothing merged"
        );
        assert_eq!(run.journal_types(), vec!["run_started", "subtask_started"]);
    }

    #[tokio::test]
    async fn an_approved_subtask_waits_for_the_lower_ones_and_an_interrupt_merges_nothing() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = Arc::new(MergeQueue::new(run.ctx.cancel.clone()));
        let _s1 = queue.next_id();
        let s2 = queue.next_id();
        let ctx = Arc::clone(&run.ctx);
        let waiting = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                integrate(&ctx, &queue, s2, "shout", VerdictKind::Approve, tip).await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "S2 waits while S1 is unsettled");
        run.ctx.cancel.cancel();
        let error = waiting.await.unwrap().unwrap_err();
        assert!(matches!(error, SubtaskError::Interrupted), "{error:?}");
        assert_eq!(
            run.rev(&run.ctx.run.result_ref()),
            run.ctx.base,
            "nothing merged"
        );
    }
}
