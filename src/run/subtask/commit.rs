//! Stage 3, commit: the orchestrator (not the model) commits what the worker left, and
//! the branch's diff is taken for the review.
//!
//! This file owns the final commit and what must hold before a diff is reviewed: the
//! worker finished, it changed something, and no commit on the branch records a
//! local-only file. It must never lose what a worker wrote: the final commit is made
//! even after a failure or an interrupt.

use crate::git::{BranchDiff, CommitId, DiffStat};

use crate::run::context::{RunFacts, RunRecord};
use crate::run::id::SubtaskId;
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::work::WorkEnd;
use crate::store::journal::Entry;
use crate::tools::WriteScope;
use crate::worktree::Worktree;

/// The worker's work, committed and ready for review.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The branch's tip.
    pub(crate) tip: CommitId,
    /// The branch against its start point (the base, or the result a waiting subtask
    /// started from).
    pub(crate) diff: BranchDiff,
    /// The worker's final message.
    pub(crate) summary: String,
}

/// Commits whatever the worker left in `worktree`, then checks that its work can be
/// reviewed.
pub(crate) async fn commit(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    worktree: &Worktree,
    work: WorkEnd,
) -> Result<Committed, SubtaskError> {
    let head = worktree
        .checkpoint(&facts.repo, &format!("{id}: final"))
        .await
        .map_err(|source| SubtaskError::Checkpoint {
            path: worktree.path().to_path_buf(),
            source: Box::new(source),
        })?;
    if let Some(commit) = head {
        record.journal(Entry::Checkpoint {
            subtask: id,
            commit,
            turn: work.ledger.steps,
        })?;
    }
    if record.cancel.is_cancelled() {
        return Err(SubtaskError::Interrupted);
    }
    work.saved?;
    let summary = work.summary?;
    let tip = facts
        .repo
        .ref_target(&worktree.branch_ref())
        .map_err(|source| SubtaskError::Branch { source })?
        .ok_or_else(|| SubtaskError::BranchVanished {
            branch: worktree.branch_ref(),
        })?;
    // Against where the branch started: a subtask that waited started from the result,
    // and the work merged before it is not its to review.
    let start = worktree.base();
    if tip == start {
        return Err(SubtaskError::NoChanges);
    }
    no_local_files_in_history(facts, start, tip).await?;
    let diff = facts
        .repo
        .diff(start, tip, facts.options.max_review_patch_bytes)
        .await
        .map_err(|source| SubtaskError::Diff { source })?;
    Ok(Committed { tip, diff, summary })
}

/// The changed paths of `stat` (both sides of a rename) that `scope` does not allow:
/// written through `bash` or an agent CLI, which the file tools' refusal does not reach.
/// Flagged to the reviewer and listed in the report, not rejected.
pub(crate) fn outside_scope(stat: &DiffStat, scope: &WriteScope) -> Vec<String> {
    let mut outside = Vec::new();
    for file in &stat.files {
        for path in std::iter::once(&file.path).chain(file.old_path.as_ref()) {
            if !scope.allows(path) && !outside.contains(path) {
                outside.push(path.clone());
            }
        }
    }
    outside
}

/// Fails when a commit in the history `start..tip` records a local-only file: something
/// other than grove committed it (e.g. a `git commit` in the worker's shell), so the
/// branch is archived, never reviewed or merged.
async fn no_local_files_in_history(
    facts: &RunFacts,
    start: CommitId,
    tip: CommitId,
) -> Result<(), SubtaskError> {
    let local = facts.local_paths();
    let commits = facts
        .repo
        .commits_touching(start, tip, &local)
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::agent::Ledger;
    use crate::run::test_support::TestRun;

    fn finished(steps: u32, summary: Result<String, SubtaskError>) -> WorkEnd {
        WorkEnd {
            ledger: Ledger {
                steps,
                ..Ledger::default()
            },
            saved: Ok(()),
            summary,
        }
    }

    #[tokio::test]
    async fn what_the_worker_left_is_committed_and_diffed_against_the_base() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("a.txt"), "ALPHA\n").unwrap();

        let committed = commit(
            &run.ctx.facts,
            &run.ctx.record,
            SubtaskId(1),
            &worktree,
            finished(3, Ok("done".into())),
        )
        .await
        .unwrap();

        assert_eq!(committed.summary, "done");
        assert_eq!(committed.tip, run.rev(&worktree.branch_ref()));
        assert_eq!(
            run.git(worktree.path(), &["log", "-1", "--format=%s"]),
            format!("grove {}/1: S1: final", run.ctx.facts.run)
        );
        assert_eq!(
            committed.diff.stat.summary(),
            "1 file changed, 1 insertion(+), 1 deletion(-)"
        );
        assert!(
            committed.diff.patch.text.contains("+ALPHA"),
            "{}",
            committed.diff.patch.text
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "checkpoint"]
        );
    }

    #[tokio::test]
    async fn a_failed_worker_fails_the_subtask_but_its_files_are_committed_first() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("half.txt"), "half done\n").unwrap();
        let stopped = Err(SubtaskError::WorkerStopped {
            stop: crate::agent::StopKind::ToolErrors,
            detail: "8 tool errors in a row".into(),
        });

        let error = commit(
            &run.ctx.facts,
            &run.ctx.record,
            SubtaskId(1),
            &worktree,
            finished(1, stopped),
        )
        .await
        .unwrap_err();

        assert_eq!(
            error.to_string(),
            "the worker stopped: tool errors: 8 tool errors in a row"
        );
        assert_eq!(
            run.git(
                worktree.path(),
                &["show", "--format=%s", "--name-only", "HEAD"]
            ),
            format!("grove {}/1: S1: final\n\nhalf.txt", run.ctx.facts.run),
            "nothing the worker wrote is lost"
        );
    }

    #[tokio::test]
    async fn a_worker_that_changed_nothing_has_nothing_to_review() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        let error = commit(
            &run.ctx.facts,
            &run.ctx.record,
            SubtaskId(1),
            &worktree,
            finished(1, Ok("nothing to do".into())),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, SubtaskError::NoChanges), "{error:?}");
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started"],
            "no commit, no checkpoint record"
        );
    }
}
