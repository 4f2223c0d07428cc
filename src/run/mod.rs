//! One run, from the user's task to an applied result, as a pipeline:
//!
//! - [`start`] — repository checks, base = HEAD, the lock, the journal, the executor for
//!   workers' commands; the result is one immutable [`context::RunContext`].
//! - [`base_check`] — the check on the base while the lead plans: red, the run pauses
//!   before any worker makes a model call, saying why ([`check_diagnosis`]).
//! - [`lead`] — the lead's loop: read-only tools plus `delegate` ([`delegate`]), which
//!   hands each call to [`subtask`], one subtask's pipeline of stages; approved work
//!   merges as soon as it is approved, one merge at a time, through the [`merge_queue`].
//! - [`check`] — the project's check on a tree (a subtask's, the result's), as evidence.
//! - [`result_check`] — before the branch moves, the check on the merged result; red,
//!   the [`culprit`] search and [`fixer`] subtasks, at most `[check] fix_attempts` rounds.
//! - [`finish`] — the result applied to the user's branch when that is safe, as one
//!   commit per subtask or as the merge graph ([`history`]), the end journaled, the
//!   report ([`report`]).
//!
//! `grove run --dry-run` is [`dry_run`]: the same lead, its delegations recorded.
//!
//! This module is the only place that combines agents with git. It never prints; it
//! emits events. It must never let anything but a subtask's short result cross back to
//! the lead, and never touch the user's branch before the end.

pub mod agents;
pub mod attempt_report;
pub mod check;
pub(crate) mod check_output;
pub mod checkout;
pub(crate) mod context;
pub mod delegate;
pub mod dry_run;
pub mod estimate;
pub mod finish;
pub(crate) mod history;
pub mod id;
pub mod launch;
pub mod lead;
mod lead_news;
pub(crate) mod merge_queue;
pub(crate) mod observer;
pub(crate) mod pick;
pub mod report;
pub mod sandbox_view;
pub(crate) mod schedule;
pub(crate) mod settled;
pub(crate) mod show_subtask;
pub(crate) mod spend;
pub mod start;
pub mod subtask;
#[cfg(test)]
pub(crate) mod test_support;
pub mod verdict;

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::git::GitOptions;
use crate::run::check::result::ResultCheck;
use crate::run::context::RunContext;
use crate::run::finish::FinishError;
use crate::run::lead::{LeadEnd, LeadError, LeadFailure};
use crate::run::start::Started;
use crate::run::subtask::Subtasks;
use crate::store::state::RunState;

pub use id::SubtaskId;
// The inputs of `run`, re-exported so that callers of the pipeline need one path.
pub use crate::settings::{ModelChoice, ModelNames, Models, RunOptions, TurnCaps, WorktreeSetup};
pub use report::{RunEnd, RunReport, SubtaskReport};
pub use start::RunError;

/// Runs `options.task` in the repository at `repo_path` and returns its report.
///
/// An error here means the run could not start (not a repository, detached HEAD, lock
/// held). Once started, failures end in a report whose `status` says what happened.
pub async fn run(
    repo_path: &Path,
    options: RunOptions,
    models: Models,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<RunReport, RunError> {
    let started = start::start(repo_path, options, models, events, cancel).await?;
    execute(started, None).await
}

/// Continues run `run_id` after a crash or an interrupt: finished subtasks keep their
/// outcome, interrupted ones continue from their last checkpoint and transcript, and
/// the lead continues its conversation. Tool calls that were pending when the process
/// stopped are answered as interrupted, never run again.
pub async fn resume(
    repo_path: &Path,
    run_id: &str,
    git: GitOptions,
    models: impl FnOnce(&RunState) -> Result<Models, RunError>,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<RunReport, RunError> {
    let overrides = launch::ResumeOverrides::default();
    resume_on(
        repo_path,
        run_id,
        git,
        (Vec::new(), overrides),
        models,
        events,
        cancel,
    )
    .await
}

/// [`resume`], its workers' trees on `remote` hosts (`--remote`; without any, a tree an
/// earlier attempt had on a remote host continues here from its last checkpoint), with
/// the money budgets and prices of `overrides`.
pub async fn resume_on(
    repo_path: &Path,
    run_id: &str,
    git: GitOptions,
    (remote, overrides): (Vec<crate::remote::RemoteHost>, launch::ResumeOverrides),
    models: impl FnOnce(&RunState) -> Result<Models, RunError>,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<RunReport, RunError> {
    let (started, state) = start::resume(
        repo_path,
        run_id,
        git,
        (remote, overrides),
        models,
        events,
        cancel,
    )
    .await?;
    execute(started, Some(state)).await
}

/// The lead's loop (after resuming interrupted subtasks), then the finish; an error is
/// a state write failing, which names the run so it can be resumed.
async fn execute(started: Started, resumed: Option<RunState>) -> Result<RunReport, RunError> {
    let Started { ctx, run_id, lock } = started;
    ctx.record.events.emit(Event::RunStarted {
        run_id: run_id.clone(),
        resumed: resumed.is_some(),
    });
    let report = lead_then_finish(&ctx, resumed).await;
    drop(lock);
    report.map_err(|error| match error {
        FinishError::Store(source) => RunError::StateNotWritten {
            run_id: run_id.to_string(),
            source: Box::new(source),
        },
        FinishError::Git(source) => RunError::Git(source),
    })
}

async fn lead_then_finish(
    ctx: &Arc<RunContext>,
    resumed: Option<RunState>,
) -> Result<RunReport, FinishError> {
    let subtasks = Subtasks::new(Arc::clone(ctx));
    if let Err(source) = ctx
        .facts
        .repo
        .create_result_branch(&ctx.facts.run, ctx.facts.base)
        .await
    {
        let lead = LeadEnd::failed(LeadError::ResultBranch { source });
        return finish::finish(ctx, Vec::new(), lead, ResultCheck::NotRun).await;
    }
    // The base's ratchet findings come before the lead's first token: a ratchet that gives
    // nothing to compare there (its JUnit file not written, not XML) stops the run while
    // it has cost nothing. They are cached per base commit: only a base's first run waits.
    let findings_known = check::base::base_findings(ctx)
        .await
        .map_err(FinishError::Store)?;
    // While the lead plans; workers wait for its verdict.
    let base_checked = tokio::spawn(check::base::check_base(Arc::clone(ctx), findings_known));
    let mut history = None;
    if let Some(state) = &resumed {
        if let Err(source) = subtasks.resume(state).await {
            let lead = LeadEnd::failed(LeadError::Journal { source });
            return finish::finish(ctx, subtasks.reports(), lead, ResultCheck::NotRun).await;
        }
        history = lead::resumed_history(&ctx.facts, &ctx.record, &subtasks.reports());
    }
    let lead = lead::run_lead(ctx, &subtasks, history).await;
    subtasks.wait().await;
    match base_checked.await {
        Ok(Ok(())) => {}
        Ok(Err(source)) => return Err(FinishError::Store(source)),
        Err(error) => ctx.note(format!("the check on the base stopped: {error}")),
    }
    // Before the branch may move: the check on the merged result, and its fixers.
    let course = if matches!(lead.failure, Some(LeadFailure::Interrupted)) {
        check::result::RunCourse::Stopped
    } else {
        check::result::RunCourse::ToItsEnd
    };
    let checked =
        check::result::check_result(ctx.tree_stage(), &ctx.agents, &subtasks, course).await?;
    subtasks.wait().await;
    // Copy-on-write trees live only as long as grove: those the run leaves become
    // directories the user (and a resume) can open.
    subtask::trees::release_trees(ctx.tree_stage()).await;
    finish::finish(ctx, subtasks.reports(), lead, checked).await
}
