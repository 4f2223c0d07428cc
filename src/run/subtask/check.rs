//! Stage 4, check: the project's check run on the subtask's committed worktree.
//!
//! This file owns turning a check on one piece of the work into evidence: its result is
//! recorded on the subtask and shown to the reviewer, and under `[check] subtask =
//! "require"` a red one is the subtask's rejection (journaled as its verdict, so a resume
//! and `grove review` read the same decision; the reviewer is not asked, which saves its
//! tokens). While the check runs the subtask gives up its `--jobs` slot: the check needs
//! no model, and the next subtask's worker can use the slot meanwhile (checks are bounded
//! by a pool of their own). It must never skip a configured check, and never run it
//! before the worker's work is committed (the reviewer judges that commit).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::git::BranchDiff;

use crate::run::check::{CheckSite, run_check_at};
use crate::run::context::{RunFacts, RunRecord, TreeStage};
use crate::run::id::SubtaskId;
use crate::run::subtask::error::SubtaskError;
use crate::run::verdict::Verdict;
use crate::settings::options::{CheckOptions, SubtaskCheck};
use crate::store::journal::{CheckRun, CheckStatus, Entry, VerdictKind};
use crate::text::output_tail;
use crate::worktree::Worktree;

/// How much of a red check's output a `require` rejection quotes to the lead.
const REJECTION_TAIL_CHARS: usize = 600;

/// The pools a subtask's check moves between: the `--jobs` slots of subtasks at work,
/// and the slots of checks running at once.
#[derive(Clone, Copy)]
pub(crate) struct Slots<'a> {
    pub(crate) jobs: &'a Arc<Semaphore>,
    pub(crate) checks: &'a Semaphore,
}

/// Runs the project's check in subtask `id`'s worktree; `None` when there is no check.
///
/// `permit` is the subtask's `--jobs` slot: it is given up for the check's duration and
/// the one returned is taken anew (after the subtasks that queued meanwhile).
pub(crate) async fn check_subtask(
    stage: TreeStage<'_>,
    slots: Slots<'_>,
    permit: OwnedSemaphorePermit,
    id: SubtaskId,
    worktree: &Worktree,
    changed: &BranchDiff,
) -> Result<(Option<CheckRun>, OwnedSemaphorePermit), SubtaskError> {
    let Some(check) = &stage.facts.options.check else {
        return Ok((None, permit));
    };
    drop(permit);
    let run = {
        let _check_slot = tokio::select! {
            slot = slots.checks.acquire() => slot.map_err(|_| SubtaskError::Interrupted)?,
            () = stage.record.cancel.cancelled() => return Err(SubtaskError::Interrupted),
        };
        checked(stage, check, id, worktree, changed).await?
    };
    let permit = tokio::select! {
        permit = Arc::clone(slots.jobs).acquire_owned() => {
            permit.map_err(|_| SubtaskError::Interrupted)?
        }
        () = stage.record.cancel.cancelled() => return Err(SubtaskError::Interrupted),
    };
    Ok((Some(run), permit))
}

/// Runs the project's check in subtask `id`'s worktree under whatever slot the caller
/// holds (a resolver keeps its `--jobs` slot throughout); `None` when there is no check.
pub(crate) async fn check_in_slot(
    stage: TreeStage<'_>,
    id: SubtaskId,
    worktree: &Worktree,
    changed: &BranchDiff,
) -> Result<Option<CheckRun>, SubtaskError> {
    match &stage.facts.options.check {
        Some(check) => checked(stage, check, id, worktree, changed).await.map(Some),
        None => Ok(None),
    }
}

/// One run of `check` on subtask `id`'s worktree, its failures in the subtask's terms.
///
/// Never with the network, whatever `[check] network` says: the tree holds code no
/// reviewer has approved yet (a worker's new test could send what it reads anywhere);
/// only the merged result's check may have it.
async fn checked(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    id: SubtaskId,
    worktree: &Worktree,
    changed: &BranchDiff,
) -> Result<CheckRun, SubtaskError> {
    let unreviewed = CheckOptions {
        network: false,
        ..check.clone()
    };
    // Which of the changed files the check runs is evidence for the reviewer.
    let watched: Vec<String> = changed
        .stat
        .files
        .iter()
        .map(|file| file.path.clone())
        .collect();
    let tree = stage.facts.repo.tree_id(changed.head).ok();
    let access = worktree.access();
    let site = CheckSite {
        cwd: worktree.path(),
        on: &id.to_string(),
        tree: tree.as_deref(),
        changed: &watched,
        access: access.as_deref(),
    };
    Ok(run_check_at(stage, &unreviewed, site).await?)
}

/// A subtask rejected by its red check under `[check] subtask = "require"`.
pub(crate) struct Required {
    /// The journaled verdict: a rejection saying why.
    pub(crate) verdict: Verdict,
    /// The report's one-line reason.
    pub(crate) reason: String,
}

/// The rejection a red check is under `[check] subtask = "require"`, journaled as the
/// subtask's verdict; `None` when the reviewer decides (no check, a green one, or
/// `subtask = "evidence"`).
pub(crate) fn required_rejection(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    run: Option<&CheckRun>,
) -> Result<Option<Required>, SubtaskError> {
    let (Some(check), Some(run)) = (&facts.options.check, run) else {
        return Ok(None);
    };
    if check.subtask != SubtaskCheck::Require || run.status == CheckStatus::Passed {
        return Ok(None);
    }
    let verdict = rejection(check, run);
    record.journal(Entry::Verdict {
        subtask: id,
        verdict: verdict.kind,
        summary: verdict.summary.clone(),
        findings: Vec::new(),
    })?;
    Ok(Some(Required {
        verdict,
        reason: format!(
            "rejected because its check `{}` {} ([check] subtask = \"require\"); the \
             reviewer was not asked",
            check.command, run.ended
        ),
    }))
}

/// Why a red check rejected the subtask, for the lead, the report and `grove review`.
fn rejection(check: &CheckOptions, run: &CheckRun) -> Verdict {
    let mut summary = format!(
        "Rejected without review: the check `{}` {} on this subtask's worktree, and \
         `[check] subtask = \"require\"` rejects a subtask whose own check is red.",
        check.command, run.ended
    );
    let tail = output_tail(&run.output_tail, REJECTION_TAIL_CHARS);
    if !tail.is_empty() {
        summary.push_str(&format!(" The end of its output:\n{tail}"));
    }
    Verdict {
        kind: VerdictKind::Reject,
        summary,
        findings: Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::run::test_support::{ScriptedModel, TestRun};
    use crate::settings::options::RunOptions;

    /// The diff of a worktree nothing changed.
    fn unchanged(run: &TestRun) -> BranchDiff {
        BranchDiff {
            base: run.ctx.facts.base,
            head: run.ctx.facts.base,
            stat: crate::git::DiffStat::default(),
            patch: crate::git::Patch {
                text: String::new(),
                omitted: Vec::new(),
            },
        }
    }

    async fn run_with(check: CheckOptions) -> TestRun {
        let options = RunOptions {
            check: Some(check),
            ..RunOptions::new("t")
        };
        TestRun::new(&[("a.txt", "alpha\n")], options, ScriptedModel::new(vec![])).await
    }

    #[tokio::test]
    async fn a_check_gives_its_jobs_slot_to_the_next_subtask_while_it_runs() {
        let run = run_with(CheckOptions::new(
            "while [ ! -f go ]; do sleep 0.02; done; echo checked",
        ))
        .await;
        let worktree = run.worktree(1).await;
        let jobs = Arc::new(Semaphore::new(1));
        let checks = Semaphore::new(1);
        let permit = Arc::clone(&jobs).acquire_owned().await.unwrap();
        let slots = Slots {
            jobs: &jobs,
            checks: &checks,
        };

        let unchanged = unchanged(&run);
        let checking = check_subtask(
            run.ctx.tree_stage(),
            slots,
            permit,
            SubtaskId(1),
            &worktree,
            &unchanged,
        );
        let observe = async {
            // The next subtask gets the only slot while the check runs.
            let next = tokio::time::timeout(Duration::from_secs(10), jobs.acquire())
                .await
                .expect("the check holds the subtask's --jobs slot")
                .unwrap();
            let check_slots_in_use = 1 - checks.available_permits();
            std::fs::write(worktree.path().join("go"), "").unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(next);
            check_slots_in_use
        };
        let ((check, permit), check_slots_in_use) =
            tokio::join!(async { checking.await.unwrap() }, observe);

        assert_eq!(check_slots_in_use, 1, "the check ran under a check slot");
        assert_eq!(
            check.map(|run| (run.status, run.output_tail)),
            Some((CheckStatus::Passed, "checked".to_owned()))
        );
        assert_eq!(
            jobs.available_permits(),
            0,
            "the subtask holds a --jobs slot again for its review"
        );
        drop(permit);
    }

    #[tokio::test]
    async fn without_a_check_the_stage_keeps_the_slot_and_records_nothing() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        let jobs = Arc::new(Semaphore::new(1));
        let checks = Semaphore::new(1);
        let permit = Arc::clone(&jobs).acquire_owned().await.unwrap();
        let slots = Slots {
            jobs: &jobs,
            checks: &checks,
        };

        let (check, _permit) = check_subtask(
            run.ctx.tree_stage(),
            slots,
            permit,
            SubtaskId(1),
            &worktree,
            &unchanged(&run),
        )
        .await
        .unwrap();

        assert!(check.is_none(), "no check configured, none ran");
        assert_eq!(run.journal_types(), vec!["run_started", "subtask_started"]);
    }

    #[tokio::test]
    async fn an_interrupted_check_leaves_no_record_and_the_subtask_open() {
        let run = run_with(CheckOptions::new("sleep 30")).await;
        let worktree = run.worktree(1).await;
        let jobs = Arc::new(Semaphore::new(1));
        let checks = Semaphore::new(1);
        let permit = Arc::clone(&jobs).acquire_owned().await.unwrap();
        let slots = Slots {
            jobs: &jobs,
            checks: &checks,
        };
        let cancel = run.ctx.record.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });

        let started = std::time::Instant::now();
        let result = check_subtask(
            run.ctx.tree_stage(),
            slots,
            permit,
            SubtaskId(1),
            &worktree,
            &unchanged(&run),
        )
        .await;

        assert!(
            matches!(result, Err(SubtaskError::Interrupted)),
            "an interrupted check is an interruption (resume runs it again), not a red check"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "it stopped at once"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started"],
            "no `checked` record: the check never finished"
        );
    }

    #[tokio::test]
    async fn a_check_that_cannot_start_fails_the_subtask_naming_the_command() {
        let run = run_with(CheckOptions::new("true")).await;
        let worktree = run.worktree(1).await;
        // Its directory is gone: the check has nowhere to start.
        std::fs::remove_dir_all(worktree.path()).unwrap();
        let jobs = Arc::new(Semaphore::new(1));
        let checks = Semaphore::new(1);
        let permit = Arc::clone(&jobs).acquire_owned().await.unwrap();
        let slots = Slots {
            jobs: &jobs,
            checks: &checks,
        };

        let error = check_subtask(
            run.ctx.tree_stage(),
            slots,
            permit,
            SubtaskId(1),
            &worktree,
            &unchanged(&run),
        )
        .await
        .map(|_| ())
        .unwrap_err();

        assert!(
            matches!(error, SubtaskError::CheckNotRun { .. }),
            "not a red check: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("the check `true` could not run: "),
            "{error}"
        );
    }

    fn red() -> CheckRun {
        CheckRun {
            on: "S1".into(),
            status: CheckStatus::Failed,
            seconds: 0.5,
            ended: "exited with status 1".into(),
            output_tail: "test_b FAILED\n1 failed".into(),
            opened: Vec::new(),
            tree: None,
            same_as: None,
            ratchets: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_red_required_check_is_a_journaled_rejection_that_says_why() {
        let run = run_with(CheckOptions {
            subtask: SubtaskCheck::Require,
            ..CheckOptions::new("make test")
        })
        .await;
        run.worktree(1).await;

        let required =
            required_rejection(&run.ctx.facts, &run.ctx.record, SubtaskId(1), Some(&red()))
                .unwrap()
                .expect("a red required check rejects");

        assert_eq!(
            required.verdict,
            Verdict {
                kind: VerdictKind::Reject,
                summary: "Rejected without review: the check `make test` exited with status 1 \
                          on this subtask's worktree, and `[check] subtask = \"require\"` \
                          rejects a subtask whose own check is red. The end of its output:\n\
                          test_b FAILED\n1 failed"
                    .into(),
                findings: Vec::new(),
            }
        );
        assert_eq!(
            required.reason,
            "rejected because its check `make test` exited with status 1 ([check] subtask = \
             \"require\"); the reviewer was not asked"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "verdict"],
            "the rejection is journaled as the subtask's verdict (resume and grove review)"
        );
    }

    #[tokio::test]
    async fn the_reviewer_decides_on_evidence_and_on_a_green_required_check() {
        let evidence = run_with(CheckOptions::new("make test")).await;
        let require = run_with(CheckOptions {
            subtask: SubtaskCheck::Require,
            ..CheckOptions::new("make test")
        })
        .await;
        let green = CheckRun {
            status: CheckStatus::Passed,
            ..red()
        };

        assert!(
            required_rejection(
                &evidence.ctx.facts,
                &evidence.ctx.record,
                SubtaskId(1),
                Some(&red())
            )
            .unwrap()
            .is_none(),
            "subtask = \"evidence\": a red check goes to the reviewer"
        );
        assert!(
            required_rejection(
                &require.ctx.facts,
                &require.ctx.record,
                SubtaskId(1),
                Some(&green)
            )
            .unwrap()
            .is_none(),
            "a green required check goes to the reviewer"
        );
        assert!(
            required_rejection(&require.ctx.facts, &require.ctx.record, SubtaskId(1), None)
                .unwrap()
                .is_none()
        );
        assert_eq!(evidence.journal_types(), vec!["run_started"]);
        assert_eq!(require.journal_types(), vec!["run_started"]);
    }
}
