//! One subtask, from the lead's `delegate` call to the lead's tool_result, as a pipeline
//! of stages, each a function in its own file:
//!
//! 0. [`Subtasks::delegate`] (here) — the call is checked (budget, role, tools, the
//!    subtask cap), numbered by the merge queue, journaled, and run as a tracked task
//!    under a `--jobs` slot.
//! 1. [`prepare`] — the worktree is created (or recovered) and, copy-on-write, mounted
//!    ([`Worktree::create`](crate::worktree::Worktree::create),
//!    [`Worktree::mount`](crate::worktree::Worktree::mount)); the local-only files are
//!    copied in and the setup command runs. The worker's tools get the tree's access
//!    ([`Worktree::access`](crate::worktree::Worktree::access)) in their context.
//! 2. [`work`] — the worker (grove's loop, or an external CLI) works in the worktree,
//!    its turns checkpointed
//!    ([`Worktree::checkpoint`](crate::worktree::Worktree::checkpoint)).
//! 3. [`commit`] — grove commits what it left and takes the branch's diff.
//! 4. [`check`] — the project's check runs in the worktree (when one is configured),
//!    outside the subtask's `--jobs` slot; its result is evidence for the reviewer, or
//!    under `[check] subtask = "require"` a red one is the rejection.
//! 5. [`reviewer`] — a fresh, read-only reviewer judges the brief and the diff; its
//!    verdict is journaled.
//! 6. [`integrate`] — an approved diff is merged onto the run's result as soon as it is
//!    approved, one merge at a time (the merge queue); a rejected one is not.
//!    An approved subtask that conflicts gets a [`resolve`]r: a subtask of its own that
//!    merges it by hand, reviewed afresh, merged as the conflicting subtask's merge.
//! 7. [`close`] — what is not merged is archived
//!    ([`Worktree::archive`](crate::worktree::Worktree::archive)), the worktree removed
//!    ([`Worktree::remove`](crate::worktree::Worktree::remove), or kept for the user),
//!    the end journaled, and the lead gets one bounded result.
//!
//! A stage takes only the parts of the run's context it reads (see
//! [`context`](crate::run::context)): prepare and check a
//! [`TreeStage`](crate::run::context::TreeStage), commit and integrate the facts and the
//! record; work and review, which run an agent, and close, whose cleanup outlives the
//! call, take the whole [`RunContext`].
//!
//! Each stage returns its own outcome; the pipeline keeps them in a [`Stages`], and one
//! fold ([`outcome`]) makes the subtask's report of them, its status and reason
//! included. A stage that cannot go on returns a [`SubtaskError`]; the pipeline stops
//! there and the subtask is closed as failed (or, interrupted, left open for `grove
//! resume`).
//!
//! This module owns what crosses between the agents of a subtask: the worker sees its
//! brief (or a fork of the lead), the reviewer sees the brief, the diff and the rules —
//! never the worker's messages — and the lead sees one bounded result. It must never
//! merge a diff no reviewer approved, and never delete work that is not kept elsewhere.

pub(crate) mod attempts;
pub(crate) mod check;
pub(crate) mod close;
pub(crate) mod commit;
mod delegation;
pub(crate) mod error;
pub(crate) mod fix;
pub(crate) mod hosts;
pub(crate) mod inspect;
pub(crate) mod integrate;
pub(crate) mod judge;
pub(crate) mod outcome;
pub(crate) mod pipeline;
pub(crate) mod prepare;
pub(crate) mod resolve;
pub mod retry;
pub(crate) mod reviewer;
pub(crate) mod trees;
pub(crate) mod work;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use crate::agent::roles::{self, RoleKind};
use crate::agent::{fork_messages, isolated_messages};
use crate::event::{AgentLabel, Event};
use crate::run::agents::{delegate_role, worker_tools};
use crate::run::context::{LeadHistory, RunContext, RunFacts, RunRecord, lock};
use crate::run::delegate::{DelegateError, DelegateReport};
use crate::run::id::SubtaskId;
use crate::run::merge_queue::MergeQueue;
use crate::run::report::{Resolution, SubtaskReport};
use crate::run::schedule::{self, Placement, Schedule, recorded_scope};
use crate::run::settled::Inbox;
use crate::store::StoreError;
use crate::store::journal::{ContextMode, SubtaskKind, SubtaskOutcome};
use crate::store::state::{RunState, SubtaskState, SubtaskStatus};
use crate::store::transcript::{self, PendingAnswer, Transcript};
use crate::tools::{self, ToolSet};
use crate::worktree::Worktree;
use attempts::Seat;
use outcome::{Landing, Stages, Stop};
use pipeline::Start;

pub use error::SubtaskError;
use integrate::Integration;
use prepare::AheadWorktrees;
use work::Assignment;

/// The subtasks of one run: the [`Delegator`] the lead's `delegate` tool talks to.
#[derive(Clone)]
pub(crate) struct Subtasks {
    ctx: Arc<RunContext>,
    queue: Arc<MergeQueue>,
    /// Who waits for whom, by write scope and `after`.
    schedule: Arc<Schedule>,
    ahead: Arc<AheadWorktrees>,
    /// `--jobs`: how many subtasks work at once.
    jobs: Arc<Semaphore>,
    /// How many subtasks' checks run at once (also `--jobs`; a check holds no job slot).
    checks: Arc<Semaphore>,
    /// Every subtask pipeline, so the run ends only after each one has checkpointed.
    tasks: TaskTracker,
    reports: Arc<Mutex<BTreeMap<SubtaskId, SubtaskReport>>>,
    lead_history: Arc<LeadHistory>,
    /// The delegated subtasks' results the lead has not been given yet.
    inbox: Arc<Inbox>,
}

impl Subtasks {
    pub(crate) fn new(ctx: Arc<RunContext>) -> Self {
        Self {
            queue: Arc::new(MergeQueue::new(ctx.record.cancel.clone())),
            schedule: Arc::new(Schedule::default()),
            ahead: Arc::new(AheadWorktrees::default()),
            jobs: Arc::new(Semaphore::new(ctx.facts.options.jobs.max(1))),
            checks: Arc::new(Semaphore::new(ctx.facts.options.jobs.max(1))),
            tasks: TaskTracker::new(),
            reports: Arc::new(Mutex::new(BTreeMap::new())),
            lead_history: Arc::new(LeadHistory::default()),
            inbox: Arc::new(Inbox::default()),
            ctx,
        }
    }

    /// The lead's history, which its observer keeps and forks start from.
    pub(crate) fn lead_history(&self) -> Arc<LeadHistory> {
        Arc::clone(&self.lead_history)
    }

    /// Registers the worktrees of the next subtasks while the lead's first model call is
    /// in flight.
    pub(crate) fn register_worktrees_ahead(&self) {
        self.ahead
            .register(self.ctx.tree_stage(), self.queue.peek_next());
    }

    /// Waits for every subtask pipeline and cleanup, then removes the unused worktrees.
    pub(crate) async fn wait(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        self.ahead.remove_unused(self.ctx.tree_stage()).await;
    }

    /// Every subtask's report, in subtask order.
    /// Every subtask's report, in subtask order, each replacement linked to what it
    /// replaces (as journaled) and what a merged replacement superseded marked so, and
    /// each attempt's place in its group.
    pub(crate) fn reports(&self) -> Vec<SubtaskReport> {
        let mut reports: Vec<SubtaskReport> = lock(&self.reports).values().cloned().collect();
        let journaled = self.ctx.record.journal.state();
        for report in &mut reports {
            report.replaces = journaled
                .subtask(report.id)
                .and_then(|state| state.replaces);
            report.superseded_by = journaled.superseded_by(report.id);
        }
        crate::run::attempt_report::mark_attempts(&mut reports, &journaled);
        reports
    }

    async fn run_delegated(
        self,
        assignment: Assignment,
        placement: Placement,
        seat: Option<Seat>,
    ) -> Result<DelegateReport, DelegateError> {
        let id = assignment.id;
        let _settle = self.queue.guard(id);
        if !placement.waits_for.is_empty() {
            let (brief, waits_for) = (&assignment.brief, &placement.waits_for);
            if !schedule::wait_for_earlier(&self.ctx.record, &self.queue, id, brief, waits_for)
                .await
            {
                return Err(DelegateError::Interrupted);
            }
        }
        let Some(permit) = self.slot(id, &assignment.brief).await else {
            return Err(DelegateError::Interrupted);
        };
        let report = self
            .run_subtask(assignment, permit, placement, seat)
            .await
            .map_err(|source| DelegateError::Journal { source })?;
        let result = close::lead_result(&report);
        lock(&self.reports).insert(id, report);
        Ok(result)
    }

    /// A `--jobs` slot for subtask `id`, saying so when it must wait for one; `None` when
    /// the run is interrupted first.
    async fn slot(&self, id: SubtaskId, task: &str) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.jobs).try_acquire_owned() {
            return Some(permit);
        }
        self.ctx.record.events.emit(Event::SubtaskWaiting {
            label: id,
            task: task.to_owned(),
            waits_for: Vec::new(),
        });
        tokio::select! {
            permit = Arc::clone(&self.jobs).acquire_owned() => permit.ok(),
            () = self.ctx.record.cancel.cancelled() => None,
        }
    }

    /// The pipeline of one subtask; an error here is the journal failing (fatal).
    async fn run_subtask(
        &self,
        assignment: Assignment,
        permit: OwnedSemaphorePermit,
        placement: Placement,
        seat: Option<Seat>,
    ) -> Result<SubtaskReport, StoreError> {
        let (ctx, id) = (&self.ctx, assignment.id);
        let branch = ctx.facts.run.subtask_branch(id.number());
        // An attempt says whose: the live view and MCP progress show the brief's first
        // line, which is the same for every attempt.
        let task = match ctx.record.journal.attempt_group(id) {
            Some(group) => format!(
                "(attempt {} of {}) {}",
                group.label_of(id).unwrap_or('?'),
                group.group,
                assignment.brief
            ),
            _ => assignment.brief.clone(),
        };
        ctx.record.events.emit(Event::SubtaskStarted {
            label: id,
            task,
            branch: branch.clone(),
        });
        let base = SubtaskReport::new(id, assignment.brief.clone(), branch);
        // One that waited starts from the result as it is now, not from the base; one
        // with a start point recorded (resumed, or a fixer's) starts there.
        let start = match (placement.start, placement.waits_for.is_empty()) {
            (Some(start), _) => Ok(Some(start)),
            (None, true) => Ok(None),
            (None, false) => schedule::start_point(&ctx.facts, &ctx.record, id, None).map(Some),
        };
        let created = match start {
            Ok(start) => {
                let scope = placement.scope.as_deref();
                prepare::create_worktree(ctx.tree_stage(), &self.ahead, id, start, scope).await
            }
            Err(error) => Err(error),
        };
        let worktree = match error::journal_out(created)? {
            Ok(worktree) => worktree,
            Err(error) => {
                let paused = ctx.pause_if_disk_full(&format!("creating {id}'s worktree"), &error);
                let stop = if paused {
                    Stop::Resumable(error.to_string())
                } else {
                    Stop::Failed(error.to_string())
                };
                let mut report = Stages::default().report(base, Some(&stop));
                if paused {
                    report.sum_ledgers();
                    return Ok(report);
                }
                return close::close(ctx, &self.queue, &self.tasks, id, report, None).await;
            }
        };
        if let Some(from) = &placement.start_from
            && let Err(error) = retry::name_start(&ctx.facts, &worktree, from).await
        {
            ctx.note(format!(
                "{id}: its git cannot name {} as `{}`: {error}",
                from.reference,
                from.worktree_ref()
            ));
        }
        let mut found = Stages::default();
        let reached = self
            .stages(
                assignment,
                (permit, seat),
                &placement,
                &worktree,
                &mut found,
            )
            .await;
        // Its merge (if any) is journaled: the next subtask in merge order need not wait
        // for this one's archive and closing records.
        self.queue.settle(id);
        let stop = match error::journal_out(reached)? {
            Ok(()) => None,
            // A full disk, or any failure once the run is stopping, leaves the subtask
            // to `grove resume` like an interruption: never failed, never half merged.
            Err(error)
                if ctx.pause_if_disk_full(&format!("subtask {id}"), &error) || ctx.stopping() =>
            {
                Some(Stop::Resumable(format!(
                    "paused ({error}); its work is checkpointed on {}; `grove resume {}` \
                     continues it",
                    base.branch, ctx.facts.run
                )))
            }
            Err(SubtaskError::Interrupted) => Some(Stop::Resumable(format!(
                "interrupted; its work is checkpointed on {}; `grove resume {}` continues it",
                base.branch, ctx.facts.run
            ))),
            Err(error) => Some(Stop::Failed(error.to_string())),
        };
        let mut report = found.report(base, stop.as_ref());
        if let Some(Stop::Resumable(_)) = stop {
            park_remote(&ctx.facts, &ctx.record, id, &worktree).await;
            report.sum_ledgers();
            return Ok(report);
        }
        close::close(ctx, &self.queue, &self.tasks, id, report, Some(&worktree)).await
    }

    /// Stages 1 to 5 in `worktree` ([`pipeline::judged`]), then stage 6: the merge onto
    /// the result in the subtask's turn, and its resolvers when it conflicts; each
    /// stage's outcome kept in `found`.
    async fn stages(
        &self,
        assignment: Assignment,
        (permit, seat): (OwnedSemaphorePermit, Option<Seat>),
        placement: &Placement,
        worktree: &Worktree,
        found: &mut Stages,
    ) -> Result<(), SubtaskError> {
        let (ctx, id) = (&self.ctx, assignment.id);
        let brief = assignment.brief.clone();
        let start = Start::Delegated {
            assignment: Box::new(assignment),
            permit,
            scope: placement.scope.as_deref(),
            start_from: placement.start_from.as_ref(),
            slots: check::Slots {
                jobs: &self.jobs,
                checks: &self.checks,
            },
            seat,
        };
        let judged = pipeline::judged(ctx, id, &brief, worktree, start, found).await?;
        // The merge may wait for the merge turn, or for a resolver that needs a slot.
        drop(judged.permit);
        let integration = integrate::integrate(
            &ctx.facts,
            &ctx.record,
            &self.queue,
            id,
            &brief,
            judged.verdict,
            judged.tip,
        )
        .await?;
        let Integration::Conflict { paths } = &integration else {
            found.landing = Some(Landing::Integrated(integration));
            return Ok(());
        };
        let paths = paths.clone();
        found.landing = Some(Landing::Integrated(integration));
        found.landing = Some(self.resolve(id, &brief, judged.tip, paths).await?);
        Ok(())
    }

    /// What a resolver needs of the run's subtasks.
    fn resolving(&self) -> resolve::Resolving<'_> {
        resolve::Resolving {
            ctx: &self.ctx,
            queue: &self.queue,
            ahead: &self.ahead,
            jobs: &self.jobs,
            tasks: &self.tasks,
        }
    }

    /// Starts the resolver of subtask `id`, which conflicted in `paths`
    /// (see [`resolve`]); where the subtask landed once its resolvers are done.
    async fn resolve(
        &self,
        id: SubtaskId,
        brief: &str,
        tip: crate::git::CommitId,
        paths: Vec<String>,
    ) -> Result<Landing, SubtaskError> {
        let env = self.resolving();
        let conflict = resolve::Conflict {
            id,
            brief,
            tip,
            paths: &paths,
        };
        let resolution = resolve::resolve_conflict(&env, conflict).await?;
        lock(&self.reports).extend(resolution.resolvers);
        match resolution.end {
            resolve::ResolutionEnd::Merged { by, .. } => Ok(Landing::Resolved {
                paths,
                by: by.to_string(),
            }),
            resolve::ResolutionEnd::Unresolved { reason } => {
                Ok(Landing::Unresolved { paths, reason })
            }
            resolve::ResolutionEnd::Interrupted => Err(SubtaskError::Interrupted),
        }
    }

    /// Restores the subtasks of a resumed run: finished ones as reported, interrupted
    /// ones continued to their end from their checkpoint and transcript.
    pub(crate) async fn resume(&self, state: &RunState) -> Result<(), StoreError> {
        let mut highest = SubtaskId(0);
        let mut continuing = Vec::new();
        let mut resolvers = Vec::new();
        for subtask in &state.subtasks {
            let id = subtask.id;
            highest = highest.max(id);
            self.schedule
                .restore(id, recorded_scope(&self.ctx.record, subtask));
            self.ctx.agents.budget.spend(&subtask.ledger);
            if subtask.status == SubtaskStatus::Running && subtask.kind == SubtaskKind::Resolve {
                resolvers.push((id, subtask.clone()));
            } else if subtask.status == SubtaskStatus::Running {
                continuing.push((id, subtask.clone()));
            } else {
                lock(&self.reports).insert(id, report_from_state(subtask));
            }
        }
        let ids: Vec<SubtaskId> = continuing.iter().map(|(id, _)| *id).collect();
        self.queue.resume_after(highest, &ids);
        // A resolver is never resumed: its conflicting subtask starts the resolution again.
        let env = self.resolving();
        for (id, state) in resolvers {
            let report = resolve::close_interrupted(&env, id, &state).await?;
            lock(&self.reports).insert(id, report);
        }
        let (benches, mut seats) = self.resumed_benches(state, &ids);
        let resumed = continuing
            .iter()
            .map(|(id, state)| self.clone().resume_subtask(*id, state, seats.remove(id)));
        let decided = benches.into_iter().map(|bench| bench.decide(&self.ctx));
        let (ran, decided) = tokio::join!(
            futures_util::future::join_all(resumed),
            futures_util::future::join_all(decided)
        );
        for (id, result) in ids.iter().zip(ran) {
            lock(&self.reports).insert(*id, result?);
        }
        decided
            .into_iter()
            .collect::<Result<Vec<()>, StoreError>>()?;
        self.restore_inbox(&self.ctx.record.journal.state());
        Ok(())
    }

    /// The benches of a resumed run's groups: every attempt still running takes a seat
    /// under its label. An attempt that ended before the stop is out of its group's
    /// judgement; a group left with one running attempt has no bench (its own review
    /// decides it).
    fn resumed_benches(
        &self,
        state: &RunState,
        continuing: &[SubtaskId],
    ) -> (Vec<attempts::Bench>, BTreeMap<SubtaskId, Seat>) {
        let mut benches = Vec::new();
        let mut seats = BTreeMap::new();
        for group in &state.attempts {
            self.schedule
                .restore_group(group.group, group.subtasks.clone());
            let running: Vec<(SubtaskId, char)> = attempts::labelled(&group.subtasks)
                .into_iter()
                .filter(|(id, _)| continuing.contains(id))
                .collect();
            if running.len() < 2 {
                continue;
            }
            let brief = state
                .subtask(group.group)
                .map(|subtask| subtask.task.clone())
                .unwrap_or_default();
            let (bench, group_seats) = attempts::bench(group.group, &running, &brief);
            benches.push(bench);
            seats.extend(running.iter().map(|(id, _)| *id).zip(group_seats));
        }
        (benches, seats)
    }

    /// Continues subtask `id` of a resumed run from its checkpoint and transcript.
    async fn resume_subtask(
        self,
        id: SubtaskId,
        state: &SubtaskState,
        seat: Option<Seat>,
    ) -> Result<SubtaskReport, StoreError> {
        let ctx = &self.ctx;
        let agent = (state.agent != "worker").then_some(state.agent.as_str());
        let start_from = self.resumed_start_from(state);
        let note = self.start_note(start_from.as_ref());
        let placement = Placement {
            scope: recorded_scope(&ctx.record, state),
            waits_for: state.waits_for.clone(),
            start: state.start.or(start_from.as_ref().map(|from| from.commit)),
            start_from,
        };
        let scope = placement.scope.as_ref();
        let found = delegate_role(&ctx.facts.user_root, agent).and_then(|role| {
            worker_tools(&role, &ctx.trees.executor, scope).map(|tools| (role, tools))
        });
        let (role, tools) = found.unwrap_or_else(|reason| {
            // The agent file changed since: the built-in worker carries on.
            ctx.note(format!(
                "{id}: {reason}; continuing with the built-in worker"
            ));
            let tools = tools::builtin_with_executor(ToolSet::Worker, ctx.trees.executor.clone());
            let tools = match scope {
                Some(scope) => tools.with_write_scope(scope),
                None => tools,
            };
            (roles::builtin(RoleKind::Worker), tools)
        });
        let _settle = self.queue.guard(id);
        let mut worker_brief =
            schedule::worker_brief(&state.task, placement.scope.as_deref()) + &note;
        if let Some(group) = ctx.record.journal.attempt_group(id)
            && let Some(label) = group.label_of(id)
        {
            worker_brief.push_str(&attempts::worker_note(label, group.subtasks.len()));
        }
        let start = resumed_start(&ctx.facts, &ctx.record, state, &role.name, &worker_brief);
        let branch = ctx.facts.run.subtask_branch(id.number());
        // A subtask that was still waiting waits again, holding no slot; one that had
        // started goes on from its recorded start point.
        if state.start.is_none()
            && !schedule::wait_for_earlier(
                &ctx.record,
                &self.queue,
                id,
                &state.task,
                &placement.waits_for,
            )
            .await
        {
            return Ok(SubtaskReport::new(id, state.task.clone(), branch));
        }
        let Some(permit) = self.slot(id, &state.task).await else {
            return Ok(SubtaskReport::new(id, state.task.clone(), branch));
        };
        let assignment = Assignment {
            id,
            brief: state.task.clone(),
            worker_brief,
            role,
            tools,
            start,
        };
        let mut report = self
            .run_subtask(assignment, permit, placement, seat)
            .await?;
        // A fixer (or a resolver) goes on as what it was started as.
        report.kind = state.kind;
        // Its resolver merged it before the run stopped: the result holds it already.
        if report.status == SubtaskOutcome::Merged
            && report.resolution.is_none()
            && !state.conflict_paths.is_empty()
        {
            report.resolution = Some(Resolution::Resolver);
            report.conflict_paths = state.conflict_paths.clone();
        }
        Ok(report)
    }
}

/// The conversation a resumed subtask's worker goes on with: its saved transcript, its
/// pending calls answered as interrupted; else (it had not started) its first messages
/// as its delegation gave them: a fork of the lead as the lead was when it delegated.
/// A remote tree left for `grove resume`: what its worker changed since its last
/// checkpoint comes back first, then its connection closes (its host stops what it
/// started there and removes the tree); the resume opens it again from the branch.
async fn park_remote(facts: &RunFacts, record: &RunRecord, id: SubtaskId, worktree: &Worktree) {
    let Some(tree) = worktree.remote() else {
        return;
    };
    if let Err(error) = facts
        .repo
        .checkpoint(worktree, "state when the run stopped")
        .await
    {
        record.note(format!(
            "{id}: its remote tree's last changes could not come back: {error}"
        ));
    }
    tree.close().await;
}

fn resumed_start(
    facts: &RunFacts,
    record: &RunRecord,
    state: &SubtaskState,
    role: &str,
    brief: &str,
) -> Transcript {
    let saved = transcript::load(&facts.transcript_path(AgentLabel::Subtask(state.id), role))
        .unwrap_or_else(|error| {
            record.note(format!("{}: the worker starts over: {error}", state.id));
            None
        });
    if let Some(mut saved) = saved {
        transcript::answer_pending(&mut saved.messages, |_, _, _| PendingAnswer::Interrupted);
        return saved;
    }
    let lead = match state.mode {
        ContextMode::Fork => transcript::load(&facts.transcript_path(AgentLabel::Lead, "lead"))
            .ok()
            .flatten(),
        ContextMode::Isolated => None,
    };
    let delegated = |input: &serde_json::Value| input["task"].as_str() == Some(&state.task);
    let forked = lead
        .as_ref()
        .and_then(|lead| transcript::through_call(&lead.messages, "delegate", delegated));
    if state.mode == ContextMode::Fork && forked.is_none() {
        record.note(format!(
            "{}: it was delegated as a fork, but the lead's conversation of then is gone: \
             its worker starts from its brief alone",
            state.id
        ));
    }
    Transcript {
        messages: match forked {
            Some(lead_messages) => fork_messages(lead_messages, brief),
            None => isolated_messages(brief),
        },
        ..Transcript::default()
    }
}

/// The report of a subtask that had finished before a resume, from the journal.
pub(crate) fn report_from_state(state: &SubtaskState) -> SubtaskReport {
    let mut report = SubtaskReport::new(state.id, state.task.clone(), state.branch.clone());
    // A subtask still running when its run ended never finished: it failed.
    report.status = state.status.outcome().unwrap_or(SubtaskOutcome::Failed);
    if let Some(verdict) = &state.verdict {
        report.verdict = Some(verdict.verdict);
        report.review_summary = Some(verdict.summary.clone());
        report.findings = verdict.findings.clone();
    }
    report.conflict_paths = state.conflict_paths.clone();
    // Merged although it conflicted: only a resolver merges such a subtask.
    if report.status == SubtaskOutcome::Merged && !report.conflict_paths.is_empty() {
        report.resolution = Some(Resolution::Resolver);
    }
    report.kind = state.kind;
    report.check = state.check.clone();
    report.reason = state.reason.clone();
    report.worker_summary = state.worker_summary.clone();
    report.worker_ledger = state.ledger;
    report.sum_ledgers();
    report
}
