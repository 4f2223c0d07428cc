//! Stage 6, integrate: an approved subtask merged onto the run's result as soon as it is
//! approved; a rejected one goes no further.
//!
//! This file owns the write to the run's result ref (a conflicting subtask's resolver,
//! `resolve.rs`, writes it too, holding the merge turn). It must never merge a diff no
//! reviewer approved, never write the result ref without the merge turn (the
//! [`MergeQueue`] serializes merges, not by subtask number: a subtask never waits for a
//! neighbour to merge), and never leave the result half-merged: a conflict leaves it as
//! it was.
//!
//! A subtask waiting for the merge turn offers its merge to the queue; the one that gets
//! the turn merges every offer waiting with its own in one batch and journals each, so
//! that reviews ending together do not merge one at a time.

use crate::git::trailers::{CommitMessage, Trailer};
use crate::git::{AdvanceError, BatchItem, CommitId, MergeOutcome, RunId};
use crate::run::context::{RunFacts, RunRecord};
use crate::run::id::SubtaskId;
use crate::run::merge_queue::{Batched, Follower, MergeQueue};
use crate::run::subtask::error::SubtaskError;
use crate::store::journal::{Entry, SubtaskOutcome, VerdictKind};
use crate::text::first_line;
use tokio::sync::MutexGuard;

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

/// Merges subtask `id`'s `tip` onto the result as soon as the merge turn is free, if the
/// reviewer approved it.
pub(crate) async fn integrate(
    facts: &RunFacts,
    record: &RunRecord,
    queue: &MergeQueue,
    id: SubtaskId,
    brief: &str,
    verdict: VerdictKind,
    tip: CommitId,
) -> Result<Integration, SubtaskError> {
    if verdict == VerdictKind::Reject {
        return Ok(Integration::Rejected);
    }
    let message = merge_message(&facts.run, &format!("merge {id}"), id, brief);
    let item = BatchItem {
        commit: tip,
        message,
    };
    let outcome = match wait_for_merge(queue, id, item).await? {
        Turn::Heard(outcome) => outcome,
        Turn::Lead(item, _turn) => lead_batch(facts, record, queue, id, item).await?,
    };
    match outcome {
        MergeOutcome::Merged { .. } | MergeOutcome::AlreadyMerged => Ok(Integration::Merged),
        MergeOutcome::Conflict { paths } => Ok(Integration::Conflict { paths }),
    }
}

/// How an offered merge ends its wait.
enum Turn<'q> {
    /// A batch led by another subtask merged it.
    Heard(MergeOutcome),
    /// The merge turn came with its offer still there: it merges, and leads a batch,
    /// holding the turn.
    Lead(BatchItem, MutexGuard<'q, ()>),
}

/// Offers subtask `id`'s merge and waits until a batch merged it or the merge turn came.
async fn wait_for_merge(
    queue: &MergeQueue,
    id: SubtaskId,
    item: BatchItem,
) -> Result<Turn<'_>, SubtaskError> {
    loop {
        let mut heard = queue.offer(id, item.clone());
        let answer = tokio::select! {
            biased;
            answer = &mut heard => answer,
            turn = queue.merge_turn() => {
                let offered = queue.withdraw(id);
                let Some(turn) = turn else {
                    return Err(SubtaskError::Interrupted);
                };
                match offered {
                    Some(item) => return Ok(Turn::Lead(item, turn)),
                    // A batch took it while its holder had the turn, and answered before
                    // giving the turn up.
                    None => {
                        drop(turn);
                        heard.await
                    }
                }
            }
        };
        match answer {
            Ok(Batched::Merged(outcome)) => return Ok(Turn::Heard(outcome)),
            // Left out, or the batch's subtask ended before merging: offered again.
            Ok(Batched::LeftOut) | Err(_) => {}
        }
    }
}

/// Merges subtask `id`'s `own` merge, holding the merge turn, with every offer waiting,
/// and journals and answers each; a merge the batch leaves out is merged alone when it is
/// this subtask's own (its conflict then reported), and offered again when a follower's.
async fn lead_batch(
    facts: &RunFacts,
    record: &RunRecord,
    queue: &MergeQueue,
    id: SubtaskId,
    own: BatchItem,
) -> Result<MergeOutcome, SubtaskError> {
    let followers = queue.take_offers();
    let mut items = vec![own.clone()];
    items.extend(followers.iter().map(|follower| follower.item.clone()));
    // On an error the followers' answers are dropped: each then offers again.
    let outcomes = facts
        .repo
        .merge_batch_onto(&facts.run.result_ref(), &items)
        .await
        .map_err(AdvanceError::from)?;
    let mut outcomes = outcomes.into_iter();
    let own_outcome = match outcomes.next() {
        Some(outcome) => {
            journal_merge(record, id, own.commit, &outcome)?;
            outcome
        }
        None => merge_journaled(facts, record, id, own.commit, &own.message).await?,
    };
    for Follower { id, item, reply } in followers {
        let answer = match outcomes.next() {
            Some(outcome) => {
                journal_merge(record, id, item.commit, &outcome)?;
                Batched::Merged(outcome)
            }
            None => Batched::LeftOut,
        };
        // A follower that is gone (interrupted) needs no answer.
        let _ = reply.send(answer);
    }
    Ok(own_outcome)
}

/// Merges `tip` onto the result for subtask `id` (`message` for the merge commit) and
/// journals what came of it: a merge or a conflict. The caller holds the merge turn
/// ([`MergeQueue::merge_turn`]).
pub(crate) async fn merge_journaled(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    tip: CommitId,
    message: &str,
) -> Result<MergeOutcome, SubtaskError> {
    let merged = facts
        .repo
        .merge_onto(&facts.run.result_ref(), tip, message)
        .await?;
    journal_merge(record, id, tip, &merged)?;
    Ok(merged)
}

/// Journals what came of merging subtask `id`'s `tip`: a merge or a conflict.
fn journal_merge(
    record: &RunRecord,
    id: SubtaskId,
    tip: CommitId,
    outcome: &MergeOutcome,
) -> Result<(), SubtaskError> {
    match outcome {
        MergeOutcome::Merged { commit } => record.journal(Entry::Merged {
            subtask: id,
            commit: tip,
            result: *commit,
        })?,
        MergeOutcome::AlreadyMerged => {}
        MergeOutcome::Conflict { paths } => record.journal(Entry::Conflict {
            subtask: id,
            paths: paths.clone(),
        })?,
    }
    Ok(())
}

/// The message of the merge of subtask `id` onto the result (`what`: `merge S2`, or
/// `merge S2, resolved by S3`): the first line of its brief, quoted, then the trailers.
pub(crate) fn merge_message(run: &RunId, what: &str, id: SubtaskId, brief: &str) -> String {
    CommitMessage::new(&format!("grove {run}: {what}"))
        .quoted("", &first_line(brief, 200))
        .with_trailers(&[
            (Trailer::Run, run.to_string()),
            (Trailer::Subtask, id.to_string()),
        ])
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
            .facts
            .repo
            .create_result_branch(&run.ctx.facts.run, run.ctx.facts.base)
            .await
            .unwrap();
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("a.txt"), content).unwrap();
        worktree
            .checkpoint(&run.ctx.facts.repo, "S1: final")
            .await
            .unwrap();
        let tip = run.rev(&worktree.branch_ref());
        (run, tip)
    }

    #[tokio::test]
    async fn an_approved_subtask_is_merged_onto_the_result_in_its_turn() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = MergeQueue::new(run.ctx.record.cancel.clone());
        let id = queue.next_id();

        let integration = integrate(
            &run.ctx.facts,
            &run.ctx.record,
            &queue,
            id,
            "shout alpha\nmore",
            VerdictKind::Approve,
            tip,
        )
        .await
        .unwrap();

        assert_eq!(integration, Integration::Merged);
        let result = run.ctx.facts.run.result_ref();
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["show", &format!("{result}:a.txt")]
            ),
            "ALPHA"
        );
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["log", "-1", "--format=%B", &result]
            ),
            format!(
                "grove {0}: merge S1\n\n    shout alpha\n\nGrove-Run: {0}\nGrove-Subtask: S1",
                run.ctx.facts.run
            ),
            "the brief's first line is quoted: no brief can add or hide a trailer"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "merged"]
        );
    }

    #[tokio::test]
    async fn merges_waiting_for_the_turn_are_merged_in_one_batch_with_one_ref_move() {
        let run = TestRun::alpha().await;
        let result = run.ctx.facts.run.result_ref();
        run.ctx
            .facts
            .repo
            .create_result_branch(&run.ctx.facts.run, run.ctx.facts.base)
            .await
            .unwrap();
        let queue = Arc::new(MergeQueue::new(run.ctx.record.cancel.clone()));
        let mut tips = Vec::new();
        for n in 1..=3 {
            let worktree = run.worktree(n).await;
            std::fs::write(worktree.path().join(format!("s{n}.txt")), "new\n").unwrap();
            worktree
                .checkpoint(&run.ctx.facts.repo, "work")
                .await
                .unwrap();
            tips.push((queue.next_id(), run.rev(&worktree.branch_ref())));
        }
        let integrating = |(id, tip): (SubtaskId, CommitId)| {
            let (ctx, queue) = (Arc::clone(&run.ctx), Arc::clone(&queue));
            tokio::spawn(async move {
                let brief = format!("task {id}");
                integrate(
                    &ctx.facts,
                    &ctx.record,
                    &queue,
                    id,
                    &brief,
                    VerdictKind::Approve,
                    tip,
                )
                .await
            })
        };
        // Another merge holds the turn while the three reviews end, S3's before S2's.
        let held = queue.merge_turn().await.unwrap();
        let s1 = integrating(tips[0]);
        while !queue.offered(SubtaskId(1)) {
            tokio::task::yield_now().await;
        }
        let s3 = integrating(tips[2]);
        let s2 = integrating(tips[1]);
        while !(queue.offered(SubtaskId(2)) && queue.offered(SubtaskId(3))) {
            tokio::task::yield_now().await;
        }
        drop(held);
        let outcomes = [
            s1.await.unwrap().unwrap(),
            s2.await.unwrap().unwrap(),
            s3.await.unwrap().unwrap(),
        ];

        assert_eq!(
            outcomes,
            [
                Integration::Merged,
                Integration::Merged,
                Integration::Merged
            ]
        );
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["log", "--first-parent", "--format=%s", &result]
            ),
            format!(
                "grove {0}: merge S3\ngrove {0}: merge S2\ngrove {0}: merge S1\ninitial",
                run.ctx.facts.run
            ),
            "one merge commit per subtask: the first to ask for the turn, then the offers \
             it took in number order"
        );
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["reflog", "--format=%gs", &result]
            ),
            "grove: 3 merges\ngrove: start run",
            "the result ref moved once for the three"
        );
        assert_eq!(
            run.journal_types()[4..],
            ["merged", "merged", "merged"],
            "each merge journaled"
        );
    }

    #[tokio::test]
    async fn a_rejected_subtask_leaves_the_result_as_it_was() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = MergeQueue::new(run.ctx.record.cancel.clone());
        let id = queue.next_id();

        let integration = integrate(
            &run.ctx.facts,
            &run.ctx.record,
            &queue,
            id,
            "shout",
            VerdictKind::Reject,
            tip,
        )
        .await
        .unwrap();

        assert_eq!(integration, Integration::Rejected);
        assert_eq!(
            run.rev(&run.ctx.facts.run.result_ref()),
            run.ctx.facts.base,
            "nothing merged"
        );
        assert_eq!(run.journal_types(), vec!["run_started", "subtask_started"]);
    }

    #[tokio::test]
    async fn an_approved_subtask_merges_while_a_lower_one_still_works() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = MergeQueue::new(run.ctx.record.cancel.clone());
        let (_s1, s2) = (queue.next_id(), queue.next_id());
        run.journal_started(2, "shout");

        let integrating = integrate(
            &run.ctx.facts,
            &run.ctx.record,
            &queue,
            s2,
            "shout",
            VerdictKind::Approve,
            tip,
        );
        let integration = tokio::time::timeout(std::time::Duration::from_secs(30), integrating)
            .await
            .expect("S2 does not wait for S1, which never settles here")
            .unwrap();

        assert_eq!(
            integration,
            Integration::Merged,
            "S2 merged with S1 unsettled"
        );
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["show", &format!("{}:a.txt", run.ctx.facts.run.result_ref())]
            ),
            "ALPHA",
            "S2's work is on the result"
        );
    }

    #[tokio::test]
    async fn an_interrupt_while_waiting_for_the_merge_turn_merges_nothing() {
        let (run, tip) = approved_work("ALPHA\n").await;
        let queue = Arc::new(MergeQueue::new(run.ctx.record.cancel.clone()));
        let s1 = queue.next_id();
        let held = queue.merge_turn().await.unwrap();
        let ctx = Arc::clone(&run.ctx);
        let waiting = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                integrate(
                    &ctx.facts,
                    &ctx.record,
                    &queue,
                    s1,
                    "shout",
                    VerdictKind::Approve,
                    tip,
                )
                .await
            })
        };
        while !queue.offered(s1) {
            tokio::task::yield_now().await;
        }
        run.ctx.record.cancel.cancel();
        let error = waiting.await.unwrap().unwrap_err();
        drop(held);
        assert!(matches!(error, SubtaskError::Interrupted), "{error:?}");
        assert_eq!(
            run.rev(&run.ctx.facts.run.result_ref()),
            run.ctx.facts.base,
            "nothing merged"
        );
    }
}
