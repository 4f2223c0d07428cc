//! The lead's side of the run's subtasks: [`Subtasks`] as the [`Delegator`] its
//! `delegate` and `wait` tools talk to. A call is checked (budget, role, tools, what it
//! replaces or starts from, the subtask cap), numbered, journaled, started as a tracked
//! task — and answered at once; its result goes to the run's [`Inbox`] when it settles,
//! and `wait` (or, when the lead ends with results unheard, the run) delivers it.
//!
//! This file owns what the lead is told of its subtasks and when. It must never deliver a
//! result the journal does not record as delivered first (a resumed run answers a
//! pending `wait` with the same results), and never let a subtask that stopped unexpectedly
//! go unheard.

use std::sync::Arc;

use async_trait::async_trait;

use crate::agent::{fork_messages, isolated_messages};
use crate::run::agents::{delegate_role, worker_tools};
use crate::run::context::lock;
use crate::run::delegate::{
    DelegateError, DelegateReport, DelegateRequest, Delegator, WaitRequest,
};
use crate::run::id::SubtaskId;
use crate::run::schedule::{self, Placement, labels, scope_of};
use crate::run::settled::{Settled, Taken, Wanted};
use crate::store::journal::{ContextMode, Entry, SubtaskKind};
use crate::store::state::{RunState, SubtaskStatus};
use crate::store::transcript::Transcript;
use crate::text::printable;

use super::Subtasks;
use super::attempts;
use super::close::lead_result;
use super::retry::{self, StartFrom};
use super::work::Assignment;

impl Subtasks {
    /// What `request` replaces and starts from, checked against the run's subtasks.
    fn follow_up(&self, request: &DelegateRequest) -> Result<Option<StartFrom>, DelegateError> {
        let Some(replaced) = request.replaces else {
            return Ok(None);
        };
        let journaled = self.ctx.record.journal.subtasks();
        let field = match request.start_from {
            Some(_) => "start_from",
            None => "replaces",
        };
        retry::check_replaced(&journaled, field, replaced)?;
        let Some(from) = request.start_from else {
            return Ok(None);
        };
        let report = lock(&self.reports).get(&from).cloned();
        let start = retry::start_from(&self.ctx.facts, from, report.as_ref(), &journaled)?;
        Ok(Some(start))
    }

    /// Journals the start of `request`'s subtasks `attempts` (a group first, so that no
    /// attempt is ever without it); on failure their numbers are settled, so that no
    /// later merge waits for them.
    fn journal_started(
        &self,
        request: &DelegateRequest,
        attempts: &[SubtaskId],
        assignment: &Assignment,
        placement: &Placement,
    ) -> Result<(), DelegateError> {
        let ctx = &self.ctx;
        let mut journaled = Ok(());
        if let [group, _, ..] = attempts {
            journaled = ctx.journal(Entry::Attempts {
                group: *group,
                subtasks: attempts.to_vec(),
            });
        }
        for attempt in attempts {
            journaled = journaled.and_then(|()| {
                ctx.journal(Entry::SubtaskStarted {
                    subtask: *attempt,
                    task: request.task.clone(),
                    branch: ctx.facts.run.subtask_branch(attempt.number()),
                    mode: request.mode,
                    agent: assignment.role.name.clone(),
                    paths: request.paths.clone(),
                    after: request.after.clone(),
                    waits_for: placement.waits_for.clone(),
                    kind: SubtaskKind::Task,
                    replaces: request.replaces,
                    start_from: request.start_from,
                })
            });
        }
        journaled.map_err(|source| {
            for attempt in attempts {
                self.queue.settle(*attempt);
            }
            DelegateError::Journal { source }
        })
    }

    /// How many attempts `request` gets: its own `attempts`, else the run's; more than
    /// the run's maximum is refused.
    fn attempts_of(&self, request: &DelegateRequest) -> Result<u32, DelegateError> {
        let options = &self.ctx.facts.options;
        let max = options.max_attempts.max(1);
        match request.attempts {
            Some(asked) if asked > max => Err(DelegateError::TooManyAttempts { asked, max }),
            Some(asked) => Ok(asked.max(1)),
            None => Ok(options.attempts.clamp(1, max)),
        }
    }

    /// The archived work a resumed subtask `state` starts from, when it was delegated
    /// with `start_from` (its earlier subtask settled before it was accepted, so a resume
    /// finds it again); `None` when it was not, or that work is gone (noted: its tree
    /// then starts where it would have without it).
    pub(crate) fn resumed_start_from(
        &self,
        state: &crate::store::state::SubtaskState,
    ) -> Option<StartFrom> {
        let from = state.start_from?;
        let journaled = self.ctx.record.journal.subtasks();
        let report = lock(&self.reports).get(&from).cloned();
        match retry::start_from(&self.ctx.facts, from, report.as_ref(), &journaled) {
            Ok(start) => Some(start),
            Err(error) => {
                self.ctx.note(format!("{}: {error}", state.id));
                None
            }
        }
    }

    /// The note a `start_from` subtask's worker gets after its brief.
    pub(crate) fn start_note(&self, from: Option<&StartFrom>) -> String {
        let Some(from) = from else {
            return String::new();
        };
        let earlier = lock(&self.reports).get(&from.id).cloned();
        retry::worker_note(from, earlier.as_ref())
    }

    /// Journals `taken` as delivered (to `call_id`) and words it for the lead; a journal
    /// that cannot be written (now, or by a subtask as it ended) ends the run.
    pub(crate) fn deliver(
        &self,
        taken: Taken,
        call_id: Option<String>,
    ) -> Result<DelegateReport, DelegateError> {
        let mut parts = Vec::new();
        let mut ids = Vec::new();
        for Settled { id, result } in taken.settled {
            match result {
                Ok(report) => parts.push(report.text),
                Err(DelegateError::Journal { source }) => {
                    return Err(DelegateError::Journal { source });
                }
                // The run stops: the subtask is resumed, and its result comes then.
                Err(DelegateError::Interrupted | DelegateError::ShuttingDown) => continue,
                Err(error) => parts.push(format!("{id} ended without a result: {error}\n")),
            }
            ids.push(id);
        }
        if !ids.is_empty() {
            let delivered = Entry::ResultsDelivered {
                subtasks: ids,
                call_id,
            };
            self.ctx
                .journal(delivered)
                .map_err(|source| DelegateError::Journal { source })?;
        }
        let mut text = parts.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&match (parts.is_empty(), taken.running.is_empty()) {
            (_, false) => format!(
                "Still running: {}; `wait` again for {}.",
                self.standing(&taken.running),
                if taken.running.len() == 1 {
                    "its result"
                } else {
                    "their results"
                }
            ),
            (false, true) => "No other subtask is running.".to_owned(),
            (true, true) => {
                "No subtask is running, and you have had every result already.".to_owned()
            }
        });
        Ok(DelegateReport { text })
    }

    /// Where each of the `running` subtasks stands, as the journal has it: `S2 (working,
    /// turn 4)`, `S3 (checked, in review)`, `S5 (3 attempts)`; so that a lead deciding
    /// whether to wait knows how far each has got.
    fn standing(&self, running: &[SubtaskId]) -> String {
        let state = self.ctx.record.journal.state();
        let stands = |id: SubtaskId| -> String {
            if let Some(group) = state.attempt_group(id) {
                return format!("{} attempts", group.subtasks.len());
            }
            let Some(subtask) = state.subtask(id) else {
                return "starting".to_owned();
            };
            match (&subtask.verdict, &subtask.check, &subtask.last_checkpoint) {
                (Some(_), _, _) => "reviewed, merging".to_owned(),
                (None, Some(_), _) => "checked, in review".to_owned(),
                (None, None, Some(checkpoint)) => format!("working, turn {}", checkpoint.turn),
                (None, None, None) if subtask.start.is_none() && !subtask.waits_for.is_empty() => {
                    format!("waits for {}", labels(&subtask.waits_for).join(", "))
                }
                (None, None, None) => "starting".to_owned(),
            }
        };
        let standing: Vec<String> = running
            .iter()
            .map(|id| format!("{id} ({})", stands(*id)))
            .collect();
        standing.join(", ")
    }

    /// Whether a result is still to come to the lead, or has come and not been given.
    pub(crate) fn has_unheard(&self) -> bool {
        self.inbox.has_news()
    }

    /// Every result the lead has not heard, once all running subtasks settled, worded as
    /// grove's message to a lead that ended; `None` when it heard them all (or the run
    /// stops).
    pub(crate) async fn unheard(&self) -> Result<Option<String>, DelegateError> {
        if !self.inbox.has_news() {
            return Ok(None);
        }
        let Some(taken) = self.inbox.take(Wanted::All, &self.ctx.record.cancel).await else {
            return Ok(None);
        };
        if taken.settled.is_empty() {
            return Ok(None);
        }
        let report = self.deliver(taken, None)?;
        Ok(Some(format!(
            "grove: you ended while subtasks you delegated were still running or had \
             results you had not seen. Every one has settled now; their results:\n\n{}\n\n\
             Delegate a follow-up (`start_from` builds on a rejected subtask's work) if \
             something is left to do, or end with your summary.",
            // The results quote model text: printable only, as any tool result.
            printable(&report.text)
        )))
    }

    /// The lead's inbox after a resume: every subtask it delegated that has settled and
    /// whose result it was never given, in the order they ended (`state`: the journal
    /// once the resumed subtasks ran).
    pub(crate) fn restore_inbox(&self, state: &RunState) {
        let delivered: Vec<SubtaskId> = state
            .deliveries
            .iter()
            .flat_map(|delivery| delivery.subtasks.iter().copied())
            .collect();
        // A group is heard of once, under its first attempt's id, when every attempt
        // ended, as the last of them did.
        let ended = |id: SubtaskId| {
            state
                .subtask(id)
                .is_some_and(|subtask| subtask.status != SubtaskStatus::Running)
        };
        let mut unheard: Vec<_> = state
            .subtasks
            .iter()
            .filter(|subtask| {
                subtask.kind == SubtaskKind::Task
                    && state
                        .attempt_group(subtask.id)
                        .is_none_or(|group| group.group == subtask.id)
                    && state.attempts_at(subtask.id).into_iter().all(ended)
                    && !delivered.contains(&subtask.id)
            })
            .map(|subtask| {
                let last = state
                    .attempts_at(subtask.id)
                    .into_iter()
                    .filter_map(|id| state.subtask(id).and_then(|s| s.finished_ms))
                    .max();
                (last, subtask.id)
            })
            .collect();
        unheard.sort();
        for (_, id) in unheard {
            let attempts = state.attempts_at(id);
            let result = if attempts.len() > 1 {
                Some(self.group_result(id, &attempts))
            } else {
                lock(&self.reports).get(&id).map(lead_result)
            };
            if let Some(result) = result {
                self.inbox.settle(id, Ok(result));
            }
        }
    }
}

impl Subtasks {
    /// The attempts of one group (the first names it), each a subtask's pipeline with a
    /// seat on the group's bench, and the bench deciding them; the group's one result.
    pub(crate) async fn run_attempts(
        self,
        assignments: Vec<Assignment>,
        placement: Placement,
    ) -> Result<DelegateReport, DelegateError> {
        let ids: Vec<SubtaskId> = assignments.iter().map(|assignment| assignment.id).collect();
        let group = ids.first().copied().unwrap_or(SubtaskId(0));
        let brief = assignments
            .first()
            .map(|assignment| assignment.brief.clone())
            .unwrap_or_default();
        let (bench, seats) = attempts::bench(group, &attempts::labelled(&ids), &brief);
        let runs = assignments
            .into_iter()
            .zip(seats)
            .map(|(assignment, seat)| {
                self.clone()
                    .run_delegated(assignment, placement.clone(), Some(seat))
            });
        let (decided, ran) = tokio::join!(
            bench.decide(&self.ctx),
            futures_util::future::join_all(runs)
        );
        decided.map_err(|source| DelegateError::Journal { source })?;
        for result in ran {
            result?;
        }
        if self.ctx.stopping() {
            return Err(DelegateError::Interrupted);
        }
        Ok(self.group_result(group, &ids))
    }

    /// The lead's result for group `group` of attempts `ids`, from their reports.
    fn group_result(&self, group: SubtaskId, ids: &[SubtaskId]) -> DelegateReport {
        // Only a judge writes the group's `picked` record.
        let judged = self
            .ctx
            .record
            .journal
            .attempt_group(group)
            .is_some_and(|known| known.pick.is_some());
        let reports = lock(&self.reports);
        let attempts: Vec<_> = ids
            .iter()
            .filter_map(|id| reports.get(id).cloned())
            .collect();
        attempts::group_result(group, &attempts, judged)
    }
}

#[async_trait]
impl Delegator for Subtasks {
    /// Accepts one delegated subtask and starts its pipeline as a tracked task of its
    /// own; returns at once. When the run is interrupted the subtask still checkpoints
    /// its work and reports, and the run waits for it before it finishes.
    async fn delegate(&self, request: DelegateRequest) -> Result<DelegateReport, DelegateError> {
        let ctx = &self.ctx;
        if ctx.agents.budget.is_spent() {
            return Err(DelegateError::BudgetSpent);
        }
        let role = delegate_role(&ctx.facts.user_root, request.agent.as_deref())?;
        let scope = scope_of(&request.paths);
        let tools = worker_tools(&role, &ctx.trees.executor, scope.as_ref())?;
        let start_from = self.follow_up(&request)?;
        let attempts = self.attempts_of(&request)?;
        // Numbered before anything awaits, so subtasks are numbered in call order.
        let admitted = self.schedule.admit(
            &self.queue,
            ctx.facts.options.max_subtasks,
            scope.as_ref(),
            (&request.after, attempts),
        )?;
        let id = admitted.id;
        if request.mode == ContextMode::Fork && !ctx.facts.options.worker_backend.is_builtin() {
            ctx.note(format!(
                "{id}: a fork was asked for, but the {} worker starts from its brief alone",
                ctx.facts.options.worker_backend.name()
            ));
        }
        // The worker is told its scope up front, not only when a write is refused, and
        // what it starts from.
        let mut worker_brief = schedule::worker_brief(&request.task, scope.as_deref());
        worker_brief.push_str(&self.start_note(start_from.as_ref()));
        let messages = match request.mode {
            ContextMode::Fork => fork_messages(&self.lead_history.get(), &worker_brief),
            ContextMode::Isolated => isolated_messages(&worker_brief),
        };
        let assignment = Assignment {
            id,
            brief: request.task.clone(),
            worker_brief,
            role,
            tools,
            start: Transcript {
                messages,
                ..Transcript::default()
            },
        };
        let placement = Placement {
            scope,
            waits_for: admitted.waits_for,
            start: start_from.as_ref().map(|from| from.commit),
            start_from,
        };
        // Journaled on acceptance, before anything awaits: a subtask still waiting for
        // earlier ones or for a `--jobs` slot when grove stops is resumed like any other.
        self.journal_started(&request, &admitted.attempts, &assignment, &placement)?;
        self.inbox.expect(id);
        let waits_for = placement.waits_for.clone();
        let pipeline = if admitted.attempts.len() > 1 {
            let count = admitted.attempts.len();
            let lead = self.lead_history.get();
            let assignments = attempts::labelled(&admitted.attempts)
                .into_iter()
                .map(|(attempt, label)| {
                    let worker_brief = format!(
                        "{}{}",
                        assignment.worker_brief,
                        attempts::worker_note(label, count)
                    );
                    let messages = match request.mode {
                        ContextMode::Fork => fork_messages(&lead, &worker_brief),
                        ContextMode::Isolated => isolated_messages(&worker_brief),
                    };
                    Assignment {
                        id: attempt,
                        worker_brief,
                        start: Transcript {
                            messages,
                            ..Transcript::default()
                        },
                        ..assignment.clone()
                    }
                })
                .collect();
            self.tasks
                .spawn(self.clone().run_attempts(assignments, placement))
        } else {
            self.tasks
                .spawn(self.clone().run_delegated(assignment, placement, None))
        };
        let inbox = Arc::clone(&self.inbox);
        // Whatever becomes of the pipeline, even a panic, the lead hears of it.
        self.tasks.spawn(async move {
            let result = pipeline
                .await
                .unwrap_or_else(|source| Err(DelegateError::Stopped { source }));
            inbox.settle(id, result);
        });
        let when = if waits_for.is_empty() {
            "it starts now".to_owned()
        } else {
            format!("it starts once {} settled", labels(&waits_for).join(", "))
        };
        let tried = if admitted.attempts.len() > 1 {
            format!(
                " as {} attempts ({}), judged together",
                admitted.attempts.len(),
                labels(&admitted.attempts).join(", ")
            )
        } else {
            String::new()
        };
        Ok(DelegateReport {
            text: format!(
                "{id} accepted{tried}: {when}. `wait` gives its result when it settles; \
                 delegate more meanwhile if you have independent work."
            ),
        })
    }

    async fn wait(&self, request: WaitRequest) -> Result<DelegateReport, DelegateError> {
        let wanted = if request.all {
            Wanted::All
        } else {
            Wanted::Next
        };
        let taken = self
            .inbox
            .take(wanted, &self.ctx.record.cancel)
            .await
            .ok_or(DelegateError::Interrupted)?;
        self.deliver(taken, request.call_id)
    }
}
