//! The end of a run: the result applied to the user's branch when that is safe, the end
//! journaled, the report built.
//!
//! This file owns the only write to the user's branch, and it goes through the git
//! layer's checked apply (fast-forward or compare-and-swap, only into a clean tree). It
//! must never touch the user's branch of an interrupted or paused run, and never journal
//! the end before everything (apply, the lead's cleanup) is done.

use crate::agent::Ledger;
use crate::git::{ApplyOutcome, ApplyRequest, GitError, RefusalReason};
use crate::run::check::base::BASE_RED;
use crate::run::check::result::{ResultCheck, ResultCheckError, held_back};
use crate::run::context::{AgentServices, DISK_FULL, RunContext, RunFacts, RunRecord};
use crate::run::history;
use crate::run::lead::{LeadEnd, LeadFailure};
use crate::run::report::{
    ApplyReport, CheckReport, CostReport, RunEnd, RunReport, SubtaskReport, Totals,
};
use crate::run::spend::BUDGET_SPENT;
use crate::store::StoreError;
use crate::store::journal::Entry;

/// Why the end of a run could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum FinishError {
    /// The result ref cannot be read. Not retried.
    #[error("{0}")]
    Git(#[from] GitError),
    /// The run's end cannot be journaled. Not retried; the run resumes once fixed.
    #[error("run journal: {0}")]
    Store(#[from] StoreError),
}

impl From<ResultCheckError> for FinishError {
    fn from(error: ResultCheckError) -> Self {
        match error {
            ResultCheckError::Journal(source) => Self::Store(source),
            ResultCheckError::Git(source) => Self::Git(source),
        }
    }
}

/// Applies the result if it may, journals the run's end and reports it.
pub(crate) async fn finish(
    ctx: &RunContext,
    mut subtasks: Vec<SubtaskReport>,
    mut lead: LeadEnd,
    checked: ResultCheck,
) -> Result<RunReport, FinishError> {
    let result_commit = ctx.facts.repo.ref_target(&ctx.facts.run.result_ref())?;
    let merged_any = result_commit.is_some_and(|commit| commit != ctx.facts.base);
    if matches!(checked, ResultCheck::Interrupted { .. }) && lead.failure.is_none() {
        // Stopped during the result's check or a fixer: resumable, never applied.
        lead.failure = Some(LeadFailure::Interrupted);
    }
    let (mut status, mut error) = status(&ctx.facts, &ctx.record, lead.failure);
    if let ResultCheck::Unchecked { reason } = &checked {
        error.get_or_insert_with(|| format!("the result was not applied: {reason}"));
    }
    let mut held = held_back(&ctx.facts, &checked);
    // The invariant of every end: no accepted subtask is left without an outcome. If one
    // is, the run is not done: it pauses naming it, resumable, and nothing is applied.
    let missing = unaccounted(&ctx.record, &subtasks);
    if status == RunEnd::Finished && !missing.is_empty() {
        let which = format!(
            "{} accepted but without an outcome: {}",
            if missing.len() == 1 {
                "a subtask was"
            } else {
                "subtasks were"
            },
            missing.join("; ")
        );
        status = RunEnd::Paused;
        error = Some(format!(
            "{which}. The run is paused, not finished; `grove resume {}` runs {}",
            ctx.facts.run,
            if missing.len() == 1 { "it" } else { "them" }
        ));
        held = Some(which);
    }
    let apply = async {
        let resumable = matches!(status, RunEnd::Interrupted | RunEnd::Paused);
        if !merged_any {
            return (false, None);
        }
        if held.is_none() && !resumable && ctx.facts.options.apply {
            return apply(&ctx.facts, &ctx.record, &ctx.agents, &subtasks).await;
        }
        let result_branch = ctx.facts.run.result_branch();
        // Applied by hand in the history the run keeps, interrupted or not (a resume
        // reuses the commits written now).
        let to_apply = by_hand(&ctx.facts, &ctx.record, &ctx.agents, &subtasks).await;
        let message = match &held {
            Some(why) => format!(
                "Your branch was not touched: {why}. The result is on {result_branch}; apply \
                 it only if you accept that."
            ),
            None => format!("The result is on {result_branch}; your branch was not touched."),
        };
        let command = Some(format!("git merge --ff-only {to_apply}"));
        (false, Some(ApplyReport { message, command }))
    };
    // Everything is done before the run's end is journaled.
    let (applied, apply) = apply.await;
    // A run that is over, finished or failed (nothing resumes it), leaves nothing
    // registered; a resumable one keeps what its resume continues in.
    if !ctx.facts.options.keep_worktrees {
        match status {
            RunEnd::Finished => {
                sweep(&ctx.facts, &ctx.record, "an earlier grove of this run").await
            }
            RunEnd::Failed => sweep(&ctx.facts, &ctx.record, "this failed run").await,
            RunEnd::Interrupted | RunEnd::Paused => {}
        }
    }
    let journal_end = match status.recorded() {
        None => Entry::Paused {
            reason: error.clone().unwrap_or_else(|| "interrupted".into()),
        },
        Some(outcome) => Entry::RunFinished {
            status: outcome,
            applied,
            result_commit,
            error: error.clone(),
        },
    };
    ctx.journal(journal_end)?;
    let total = run_total(&lead.ledger, &subtasks);
    Ok(RunReport {
        cost: run_cost(ctx, &lead.ledger, &mut subtasks),
        run_id: ctx.facts.run.as_str().to_owned(),
        status,
        base: ctx.facts.base.to_string(),
        branch: ctx.facts.branch.clone(),
        result_commit: result_commit.map(|c| c.to_string()),
        result_branch: ctx.facts.run.result_branch(),
        applied,
        apply,
        summary: lead.summary,
        error,
        subtasks,
        check: CheckReport {
            culprit: checked.culprit().cloned(),
            ..CheckReport::new(
                ctx.facts
                    .options
                    .check
                    .as_ref()
                    .map(|check| check.command.clone()),
                ctx.record.journal.checks(),
            )
        },
        lead_ledger: lead.ledger,
        totals: Totals::from(total),
        estimate: None,
    })
}

/// What the run cost: its lead's and subtasks' ledgers at its prices (each subtask's
/// `cost_usd` set), and what its turns were counted at as they came.
fn run_cost(ctx: &RunContext, lead: &Ledger, subtasks: &mut [SubtaskReport]) -> CostReport {
    let metered = crate::store::spend::read(&ctx.facts.run_dir);
    CostReport::price(
        &ctx.facts.options,
        (&ctx.agents.models, &metered),
        lead,
        subtasks,
    )
}

/// The lead's and every subtask's tokens summed.
fn run_total(lead: &Ledger, subtasks: &[SubtaskReport]) -> Ledger {
    let mut total = *lead;
    for subtask in subtasks {
        total.add(&subtask.ledger());
    }
    total
}

/// How the run ended, and why it did not finish when it did not (for the person).
fn status(
    facts: &RunFacts,
    record: &RunRecord,
    failure: Option<LeadFailure>,
) -> (RunEnd, Option<String>) {
    match (failure, record.pause.reason()) {
        // A full disk or a red base pauses the run whatever the lead did: never a
        // partial apply; the reason says what to do.
        (_, Some(reason))
            if reason.starts_with(DISK_FULL)
                || reason.starts_with(BASE_RED)
                || reason.starts_with(BUDGET_SPENT) =>
        {
            (RunEnd::Paused, Some(reason))
        }
        (Some(LeadFailure::Interrupted), Some(reason)) => (
            RunEnd::Paused,
            Some(format!(
                "{reason}. The run is paused with its work checkpointed; when the API \
                 answers again, `grove resume {}` continues it",
                facts.run
            )),
        ),
        (None, _) => (RunEnd::Finished, None),
        (Some(LeadFailure::Interrupted), None) => (
            RunEnd::Interrupted,
            Some(format!(
                "interrupted; `grove resume {}` continues the run",
                facts.run
            )),
        ),
        (Some(LeadFailure::Stopped { stop, detail }), _) => (
            RunEnd::Finished,
            Some(format!("the lead stopped: {stop}: {detail}")),
        ),
        (Some(LeadFailure::Error(error)), _) => (RunEnd::Failed, Some(error.to_string())),
    }
}

/// Every subtask the journal holds that has no outcome, or that this run's report does
/// not name, as `S4 (its brief, shortened)`: the lead was told each was accepted.
fn unaccounted(record: &RunRecord, reports: &[SubtaskReport]) -> Vec<String> {
    record
        .journal
        .subtasks()
        .iter()
        .filter(|journaled| {
            journaled.status.outcome().is_none()
                || !reports.iter().any(|report| report.id == journaled.id)
        })
        .map(|journaled| {
            format!(
                "{} ({})",
                journaled.id,
                crate::text::printable(&crate::text::first_line(&journaled.task, 60))
            )
        })
        .collect()
}

/// Removes what the run still has registered, and says what went, as left by `left_by`:
/// an earlier process of a finished run (grove stopped before the cleanups of subtasks
/// it had finished; a run never stopped has nothing left by then), or a failed run.
async fn sweep(facts: &RunFacts, record: &RunRecord, left_by: &str) {
    match facts.repo.sweep_run(&facts.run, &facts.worktrees_dir).await {
        Ok(swept) => {
            let paths = |paths: &[std::path::PathBuf]| {
                let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                shown.join(", ")
            };
            if !swept.removed_worktrees.is_empty() {
                record.note(format!(
                    "removed the worktrees {left_by} left: {}",
                    paths(&swept.removed_worktrees)
                ));
            }
            if !swept.deleted_branches.is_empty() {
                record.note(format!(
                    "deleted the branches {left_by} left (their work is merged or \
                     archived): {}",
                    swept.deleted_branches.join(", ")
                ));
            }
            for problem in &swept.not_removed {
                record.note(format!(
                    "could not remove a worktree {left_by} left: {problem}; `grove clean {}` \
                     removes it",
                    facts.run
                ));
            }
        }
        Err(error) => record.note(format!(
            "could not remove what this run left registered: {error}; `grove clean {}` \
             removes it",
            facts.run
        )),
    }
}

/// The branch a person applies by hand with `git merge --ff-only`: the history the run
/// keeps, written now (one commit per subtask under `history = "squash"`), or the
/// result's merge graph when that cannot be written (noted).
async fn by_hand(
    facts: &RunFacts,
    record: &RunRecord,
    agents: &AgentServices,
    subtasks: &[SubtaskReport],
) -> String {
    match history::applicable(facts, record, agents, subtasks).await {
        Ok(applicable) => applicable
            .source
            .strip_prefix("refs/heads/")
            .unwrap_or(&applicable.source)
            .to_owned(),
        Err(error) => {
            record.note(format!(
                "the run's history could not be written ({error}); its merge graph is \
                 named to apply instead"
            ));
            facts.run.result_branch()
        }
    }
}

/// Moves the user's branch to the result, in the history the run keeps (see
/// [`history`]), when the git layer says it is safe.
async fn apply(
    facts: &RunFacts,
    record: &RunRecord,
    agents: &AgentServices,
    subtasks: &[SubtaskReport],
) -> (bool, Option<ApplyReport>) {
    let branch = facts
        .branch
        .strip_prefix("refs/heads/")
        .unwrap_or(&facts.branch);
    let result_branch = facts.run.result_branch();
    let applicable = match history::applicable(facts, record, agents, subtasks).await {
        Ok(applicable) => applicable,
        Err(error) => {
            let message = format!(
                "Your branch was not touched: writing its history failed: {error}. The \
                 result is on {result_branch}."
            );
            let command = Some(format!("git merge {result_branch}"));
            return (false, Some(ApplyReport { message, command }));
        }
    };
    let outcome = facts
        .repo
        .apply(&ApplyRequest {
            run: facts.run.clone(),
            source: applicable.source.clone(),
            branch: facts.branch.clone(),
            base: facts.base,
        })
        .await;
    let commits = match applicable.commits {
        Some(1) => format!(", 1 commit; the merge graph is on {result_branch}"),
        Some(n) => format!(", {n} commits, one per subtask; the merge graph is on {result_branch}"),
        None => String::new(),
    };
    let (applied, message, command) = match outcome {
        Ok(ApplyOutcome::Applied {
            to, merged_on_top, ..
        }) => {
            let hex = to.to_string();
            let how = if merged_on_top {
                ", merged on top of your new commits"
            } else {
                ""
            };
            (
                true,
                format!(
                    "{branch} now has the result ({}{how}{commits}).",
                    &hex[..hex.len().min(10)]
                ),
                None,
            )
        }
        Ok(ApplyOutcome::AlreadyApplied) => {
            (true, format!("{branch} already has the result."), None)
        }
        Ok(ApplyOutcome::Refused { reason, command }) => (
            false,
            format!(
                "Your branch was not touched: {}. The result is on {result_branch}{}.",
                describe_refusal(&reason),
                match applicable.commits {
                    Some(_) => format!(
                        ", and as one commit per subtask on {}",
                        facts.run.squashed_branch()
                    ),
                    None => String::new(),
                }
            ),
            Some(command),
        ),
        Err(error) => (
            false,
            format!(
                "Your branch was not touched: applying failed: {error}. The result is on \
                 {result_branch}."
            ),
            Some(format!("git merge {result_branch}")),
        ),
    };
    (applied, Some(ApplyReport { message, command }))
}

/// Why the git layer refused to move the user's branch, for the person.
pub(crate) fn describe_refusal(reason: &RefusalReason) -> String {
    use RefusalReason as R;
    match reason {
        R::BranchMovedWithConflicts { paths, .. } => format!(
            "your branch moved during the run and the result conflicts with it in {}",
            paths.join(", ")
        ),
        R::OperationInProgress { operation } => format!("a {operation} is in progress"),
        R::LocalChangesInTheWay { paths } => {
            format!("uncommitted changes are in the way in {}", paths.join(", "))
        }
        R::CheckedOutInAnotherWorktree { path } => format!(
            "the branch is checked out in another worktree at {}",
            path.display()
        ),
        R::GitRefused { stderr } => format!("git refused: {}", stderr.trim()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::run::id::SubtaskId;
    use crate::run::subtask::report_from_state;
    use crate::run::test_support::TestRun;
    use crate::store::journal::SubtaskOutcome;

    fn failed(run: &TestRun, n: u32) {
        run.ctx
            .journal(Entry::SubtaskFinished {
                subtask: SubtaskId(n),
                status: SubtaskOutcome::Failed,
                ledger: Ledger::default(),
                reason: None,
                summary: None,
            })
            .unwrap();
    }

    /// The reports of the journaled subtasks whose id `keep` takes, as a run hands them in.
    fn reported_of(run: &TestRun, keep: impl Fn(SubtaskId) -> bool) -> Vec<SubtaskReport> {
        run.ctx
            .record
            .journal
            .subtasks()
            .iter()
            .filter(|subtask| keep(subtask.id))
            .map(report_from_state)
            .collect()
    }

    fn lead_done() -> LeadEnd {
        LeadEnd {
            summary: "done".into(),
            ledger: Ledger::default(),
            failure: None,
        }
    }

    /// The end as the person and the journal see it: status, error, whether anything
    /// was applied, and the journal's last record type.
    fn end(run: &TestRun, report: &RunReport) -> (RunEnd, Option<String>, bool, String) {
        (
            report.status,
            report.error.clone(),
            report.applied,
            run.journal_types().last().cloned().unwrap_or_default(),
        )
    }

    /// A run whose lead ended well never finishes while a subtask it was told was
    /// accepted has no outcome (journaled but never ended, or ended but not in this
    /// run's report): it pauses, resumable, naming that subtask alone.
    #[tokio::test]
    async fn a_run_never_finishes_while_an_accepted_subtask_has_no_outcome() {
        let run = TestRun::alpha().await;
        run.journal_started(1, "First: write one.txt\nmore of the brief");
        run.journal_started(2, "Second: write two.txt");
        failed(&run, 2);
        run.journal_started(3, "Third: write three.txt");
        failed(&run, 3);
        let reported = reported_of(&run, |id| id == SubtaskId(2));

        let report = finish(&run.ctx, reported, lead_done(), ResultCheck::NotRun)
            .await
            .unwrap();

        let run_id = run.ctx.facts.run.to_string();
        assert_eq!(
            end(&run, &report),
            (
                RunEnd::Paused,
                Some(format!(
                    "subtasks were accepted but without an outcome: S1 (First: write \
                     one.txt); S3 (Third: write three.txt). The run is paused, not finished; \
                     `grove resume {run_id}` runs them"
                )),
                false,
                "paused".to_owned(),
            ),
            "an accepted subtask without an outcome (S1 never ended, S3 is in no report) \
             pauses the run naming each, never a success"
        );
    }

    /// The control: the same run with every subtask ended and reported finishes.
    #[tokio::test]
    async fn a_run_whose_every_accepted_subtask_ended_finishes() {
        let run = TestRun::alpha().await;
        run.journal_started(1, "First: write one.txt");
        failed(&run, 1);
        let reported = reported_of(&run, |_| true);

        let report = finish(&run.ctx, reported, lead_done(), ResultCheck::NotRun)
            .await
            .unwrap();

        assert_eq!(
            end(&run, &report),
            (RunEnd::Finished, None, false, "run_finished".to_owned()),
            "a run whose every accepted subtask ended finishes as before"
        );
    }

    /// A failed run is over (nothing resumes it): as it ends it removes what it still has
    /// registered — a worktree whose work is archived, and its branch — and names them,
    /// as a finished run does.
    #[tokio::test]
    async fn a_failed_run_removes_what_it_left_registered_and_names_it() {
        let mut run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("b.txt"), "beta\n").unwrap();
        worktree
            .archive(&run.ctx.facts.repo, "subtask failed")
            .await
            .unwrap();
        failed(&run, 1);
        let reported = reported_of(&run, |_| true);
        let branch = run.ctx.facts.run.subtask_branch(1);
        let lead = LeadEnd::failed(crate::run::lead::LeadError::ResultBranch {
            source: GitError::UnknownRevision {
                rev: "refs/heads/nowhere".into(),
            },
        });

        let report = finish(&run.ctx, reported, lead, ResultCheck::NotRun)
            .await
            .unwrap();

        let root = run.dir.path().join("repo");
        let registered = run.git(&root, &["worktree", "list", "--porcelain"]);
        let branches = run.git(&root, &["branch", "--list", "grove/*"]);
        assert_eq!(
            (
                report.status,
                worktree.path().exists(),
                registered
                    .lines()
                    .filter(|l| l.starts_with("worktree "))
                    .count(),
                branches,
                run.notes(),
            ),
            (
                RunEnd::Failed,
                false,
                1,
                String::new(),
                vec![
                    format!(
                        "removed the worktrees this failed run left: {}",
                        worktree.path().display()
                    ),
                    format!(
                        "deleted the branches this failed run left (their work is merged or \
                         archived): refs/heads/{branch}"
                    ),
                ],
            ),
            "a failed run leaves no worktree or branch of its own registered, and says which \
             it removed"
        );
    }
}
