//! The run's state as a value: what the journal's records add up to, and its snapshot
//! file `state.json`.
//!
//! This module owns folding records into a [`RunState`] and the rules a record sequence
//! must follow. The journal is the truth; the snapshot is a cache of the fold that can
//! always be rebuilt. It must never change the journal.

use serde::{Deserialize, Serialize};

use crate::git::{CommitId, RunId};
use crate::ledger::Ledger;
use crate::status::SubtaskId;
use crate::store::attempts::{AttemptGroup, add_group, group_of, record_pick};

use crate::store::journal::{
    CheckRun, ContextMode, Entry, Finding, RebuiltSubtask, Record, RunOutcome, SubtaskKind,
    SubtaskOutcome, VerdictKind,
};
use crate::store::recorded::RecordedOptions;

/// The subtask label tool calls of the lead itself are journaled under.
pub const LEAD_SUBTASK: &str = "lead";

pub use crate::store::run_status::RunStatus;

/// Where a subtask stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtaskStatus {
    Running,
    Merged,
    Rejected,
    Conflict,
    Failed,
}

impl SubtaskStatus {
    /// The name used in JSON and in messages, e.g. `merged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Merged => "merged",
            Self::Rejected => "rejected",
            Self::Conflict => "conflict",
            Self::Failed => "failed",
        }
    }
}

impl SubtaskStatus {
    /// How the subtask ended, as its report says; `None` while it runs.
    pub fn outcome(self) -> Option<SubtaskOutcome> {
        match self {
            Self::Running => None,
            Self::Merged => Some(SubtaskOutcome::Merged),
            Self::Rejected => Some(SubtaskOutcome::Rejected),
            Self::Conflict => Some(SubtaskOutcome::Conflict),
            Self::Failed => Some(SubtaskOutcome::Failed),
        }
    }
}

impl From<SubtaskOutcome> for SubtaskStatus {
    fn from(outcome: SubtaskOutcome) -> Self {
        match outcome {
            SubtaskOutcome::Merged => Self::Merged,
            SubtaskOutcome::Rejected => Self::Rejected,
            SubtaskOutcome::Conflict => Self::Conflict,
            SubtaskOutcome::Failed => Self::Failed,
        }
    }
}

/// The latest commit the orchestrator made of a worker's worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub commit: CommitId,
    pub turn: u32,
}

/// The reviewer's verdict as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictState {
    pub verdict: VerdictKind,
    pub summary: String,
    pub findings: Vec<Finding>,
}

/// A subtask's merge onto the run's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeState {
    /// The subtask's commit that was merged.
    pub commit: CommitId,
    /// The run's result commit after the merge.
    pub result: CommitId,
}

/// One delegated subtask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubtaskState {
    pub id: SubtaskId,
    pub task: String,
    pub branch: String,
    pub mode: ContextMode,
    pub agent: String,
    pub status: SubtaskStatus,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    pub last_checkpoint: Option<CheckpointState>,
    pub verdict: Option<VerdictState>,
    pub merge: Option<MergeState>,
    /// Paths of the last merge conflict, if merging conflicted.
    pub conflict_paths: Vec<String>,
    pub ledger: Ledger,
    /// A person's latest decision in `grove review`; it outranks `verdict` for what the
    /// result holds.
    #[serde(default)]
    pub human_verdict: Option<VerdictKind>,
    /// The globs it may change; empty: any file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The subtasks its `after` named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<SubtaskId>,
    /// The earlier subtasks it waits for before it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<SubtaskId>,
    /// The commit it started from when that is not the base (it waited for others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<CommitId>,
    /// Who started it and why: the lead's task, a fixer or a resolver.
    #[serde(default)]
    pub kind: SubtaskKind,
    /// The project's check on its worktree, when one ran.
    #[serde(default)]
    pub check: Option<CheckRun>,
    /// Its report's one sentence, as its `subtask_finished` record says.
    #[serde(default)]
    pub reason: Option<String>,
    /// Its worker's whole final message (bounded), as the same record keeps it.
    #[serde(default)]
    pub worker_summary: Option<String>,
    /// The earlier subtask it replaces (`replaces`, or `start_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<SubtaskId>,
    /// The subtask whose archived work its tree started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_from: Option<SubtaskId>,
}

impl SubtaskState {
    /// A subtask as its `subtask_started` record leaves it.
    fn started(
        id: SubtaskId,
        task: &str,
        branch: &str,
        mode: ContextMode,
        agent: &str,
        ts: u64,
    ) -> SubtaskState {
        SubtaskState {
            id,
            task: task.to_string(),
            branch: branch.to_string(),
            mode,
            agent: agent.to_string(),
            status: SubtaskStatus::Running,
            started_ms: ts,
            finished_ms: None,
            last_checkpoint: None,
            verdict: None,
            merge: None,
            conflict_paths: Vec::new(),
            ledger: Ledger::default(),
            human_verdict: None,
            paths: Vec::new(),
            after: Vec::new(),
            waits_for: Vec::new(),
            start: None,
            kind: SubtaskKind::Task,
            check: None,
            reason: None,
            worker_summary: None,
            replaces: None,
            start_from: None,
        }
    }

    /// The decision that counts: a person's, else the reviewer's; `None` when neither
    /// decided (the subtask failed before its review).
    pub fn decision(&self) -> Option<VerdictKind> {
        self.human_verdict
            .or_else(|| self.verdict.as_ref().map(|v| v.verdict))
    }
}

/// A tool call that was journaled as started but not as finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallState {
    /// The subtask label, or [`LEAD_SUBTASK`].
    pub subtask: String,
    pub call_id: String,
    pub tool: String,
    pub mutating: bool,
    pub started_ms: u64,
}

/// Everything the journal says about a run, folded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub run_id: RunId,
    pub task: String,
    pub base: CommitId,
    pub branch: String,
    pub provider: String,
    pub model: String,
    pub options: RecordedOptions,
    pub status: RunStatus,
    pub started_ms: u64,
    /// The timestamp of the last record.
    pub updated_ms: u64,
    pub finished_ms: Option<u64>,
    /// Why the run is paused, while it is.
    pub pause_reason: Option<String>,
    /// Why the run failed, if it did.
    pub error: Option<String>,
    /// The run's latest result commit (after the last merge, or as finished).
    pub result_commit: Option<CommitId>,
    /// Whether the result was applied to the user's branch.
    pub applied: bool,
    /// In the order they were started.
    pub subtasks: Vec<SubtaskState>,
    /// Tool calls running right now — or, if the process died, calls that may have had
    /// effects and must be reported rather than run again.
    pub open_tool_calls: Vec<ToolCallState>,
    /// Calls that were open when a resume took over: they never finished, and they are
    /// never replayed.
    pub interrupted_tool_calls: Vec<ToolCallState>,
    /// How many times the run was resumed.
    pub resumes: u32,
    /// How many journal records this state folds; a snapshot with fewer than the journal
    /// holds is stale.
    pub journal_records: u64,
    /// Every run of the project's check, in order (subtasks' and the result's).
    #[serde(default)]
    pub checks: Vec<CheckRun>,
    /// The culprit of a red result check, as `subtasks`, `found_by` and `at` (the last
    /// one found), when one was.
    #[serde(default)]
    pub culprit: Option<(Vec<String>, String, Option<String>)>,
    /// The subtasks' results the lead was given, in the order it got them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
    /// The groups of subtasks that are attempts at one brief (best of N).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptGroup>,
}

/// Results the lead was given at once (a `results_delivered` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub subtasks: Vec<SubtaskId>,
    /// The lead's `wait` call they answered; `None`: a message after it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

pub use crate::store::replay::{ReplayError, ReplayReason};

impl RunState {
    /// Folds a whole journal into the state it describes. The first record must be
    /// `run_started`.
    pub fn replay<'a>(
        records: impl IntoIterator<Item = &'a Record>,
    ) -> Result<RunState, ReplayError> {
        let mut records = records.into_iter();
        let Some(first) = records.next() else {
            return Err(ReplayError {
                record: 1,
                record_type: "none",
                reason: ReplayReason::EmptyJournal,
            });
        };
        let mut state = RunState::start(first)?;
        for record in records {
            state.apply(record)?;
        }
        Ok(state)
    }

    /// The state after the first record, which must be `run_started`.
    pub fn start(record: &Record) -> Result<RunState, ReplayError> {
        let Entry::RunStarted {
            run_id,
            task,
            base,
            branch,
            provider,
            model,
            options,
        } = &record.entry
        else {
            return Err(ReplayError {
                record: 1,
                record_type: record.entry.type_name(),
                reason: ReplayReason::NotStartedFirst,
            });
        };
        Ok(RunState {
            run_id: run_id.clone(),
            task: task.clone(),
            base: *base,
            branch: branch.clone(),
            provider: provider.clone(),
            model: model.clone(),
            options: options.clone(),
            status: RunStatus::Running,
            started_ms: record.ts_ms,
            updated_ms: record.ts_ms,
            finished_ms: None,
            pause_reason: None,
            error: None,
            result_commit: None,
            applied: false,
            subtasks: Vec::new(),
            open_tool_calls: Vec::new(),
            interrupted_tool_calls: Vec::new(),
            resumes: 0,
            journal_records: 1,
            checks: Vec::new(),
            culprit: None,
            deliveries: Vec::new(),
            attempts: Vec::new(),
        })
    }

    /// Subtask `id`.
    pub fn subtask(&self, id: SubtaskId) -> Option<&SubtaskState> {
        self.subtasks.iter().find(|s| s.id == id)
    }

    /// The later subtask that superseded the unmerged subtask `id`: one naming it in its
    /// `replaces` (or `start_from`) that merged, or was superseded in turn. A
    /// replacement that did not get done supersedes nothing.
    ///
    /// Attempts at one brief stand or fall together: naming one attempt replaces its
    /// whole group, and a group of replacements got done when one of its attempts did.
    pub fn superseded_by(&self, id: SubtaskId) -> Option<SubtaskId> {
        if self.subtask(id)?.status == SubtaskStatus::Merged {
            return None;
        }
        let replaced = self.attempts_at(id);
        let last = replaced.iter().copied().max().unwrap_or(id);
        self.subtasks
            .iter()
            .filter(|later| later.id > last)
            .filter(|later| {
                later
                    .replaces
                    .is_some_and(|named| replaced.contains(&named))
            })
            .find_map(|later| {
                self.attempts_at(later.id).into_iter().find(|attempt| {
                    self.subtask(*attempt)
                        .is_some_and(|done| done.status == SubtaskStatus::Merged)
                        || self.superseded_by(*attempt).is_some()
                })
            })
    }

    /// Every attempt of `id`'s group, or `id` alone when it is none.
    pub fn attempts_at(&self, id: SubtaskId) -> Vec<SubtaskId> {
        self.attempt_group(id)
            .map_or_else(|| vec![id], |group| group.subtasks.clone())
    }

    /// The attempt group subtask `id` belongs to, when it is an attempt.
    pub fn attempt_group(&self, id: SubtaskId) -> Option<&AttemptGroup> {
        group_of(&self.attempts, id)
    }

    /// Whether a `run_finished` record ended the run.
    pub fn is_finished(&self) -> bool {
        self.finished_ms.is_some()
    }

    /// Folds one more record in. On error the state is unchanged, so a caller can check
    /// a record before journaling it.
    pub fn apply(&mut self, record: &Record) -> Result<(), ReplayError> {
        self.fold(&record.entry, record.ts_ms)
            .map_err(|reason| ReplayError {
                record: self.journal_records + 1,
                record_type: record.entry.type_name(),
                reason,
            })?;
        self.updated_ms = self.updated_ms.max(record.ts_ms);
        self.journal_records += 1;
        Ok(())
    }

    /// Folds `entry`, journaled at `ts`, into the state; each kind of record has its own
    /// function below, and each checks before it changes anything.
    fn fold(&mut self, entry: &Entry, ts: u64) -> Result<(), ReplayReason> {
        self.admit(entry)?;
        match entry {
            Entry::RunStarted { .. } => Err(ReplayReason::AlreadyStarted),
            Entry::Resumed { .. } => {
                self.resume();
                Ok(())
            }
            Entry::SubtaskStarted {
                subtask,
                task,
                branch,
                mode,
                agent,
                paths,
                after,
                waits_for,
                kind,
                replaces,
                start_from,
            } => {
                let mut state = SubtaskState::started(*subtask, task, branch, *mode, agent, ts);
                state.kind = *kind;
                state.replaces = *replaces;
                state.start_from = *start_from;
                state.paths = paths.clone();
                state.after = after.clone();
                state.waits_for = waits_for.clone();
                self.start_subtask(state)
            }
            Entry::Culprit {
                subtasks,
                found_by,
                at,
            } => {
                self.culprit = Some((subtasks.clone(), found_by.clone(), at.clone()));
                Ok(())
            }
            Entry::Checked { run } => {
                let on_subtask = |s: &&mut SubtaskState| s.id.to_string() == run.on;
                if let Some(subtask) = self.subtasks.iter_mut().find(on_subtask) {
                    subtask.check = Some(run.clone());
                }
                self.checks.push(run.clone());
                Ok(())
            }
            Entry::ToolCallStarted {
                subtask,
                call_id,
                tool,
                mutating,
            } => self.open_call(subtask, call_id, tool, *mutating, ts),
            Entry::ToolCallFinished {
                subtask, call_id, ..
            } => self.close_call(subtask, call_id),
            Entry::Checkpoint { subtask, .. }
            | Entry::StartPoint { subtask, .. }
            | Entry::Verdict { subtask, .. }
            | Entry::Merged { subtask, .. }
            | Entry::Conflict { subtask, .. }
            | Entry::SubtaskFinished { subtask, .. } => {
                let state = self.running_subtask(*subtask)?;
                let merged = record_subtask_fact(state, entry, ts);
                if merged.is_some() {
                    self.result_commit = merged;
                }
                Ok(())
            }
            Entry::Attempts { group, subtasks } => add_group(&mut self.attempts, *group, subtasks)
                .map_err(|subtask| ReplayReason::SubtaskAlreadyStarted { subtask }),
            Entry::Picked { group, pick } => record_pick(&mut self.attempts, *group, pick)
                .map_err(|group| ReplayReason::NoAttemptGroup { group }),
            Entry::ResultsDelivered { subtasks, call_id } => {
                self.deliveries.push(Delivery {
                    subtasks: subtasks.clone(),
                    call_id: call_id.clone(),
                });
                Ok(())
            }
            Entry::Paused { reason } => {
                self.status = RunStatus::Paused;
                self.pause_reason = Some(reason.clone());
                Ok(())
            }
            Entry::HumanVerdict { .. }
            | Entry::ResultRebuilt { .. }
            | Entry::ResultApplied { .. } => self.fold_review(entry, ts),
            Entry::RunFinished {
                status,
                applied,
                result_commit,
                error,
            } => {
                self.finish(*status, *applied, *result_commit, error.as_ref(), ts);
                Ok(())
            }
        }
    }

    /// Folds a record `grove review` wrote after the run finished.
    fn fold_review(&mut self, entry: &Entry, ts: u64) -> Result<(), ReplayReason> {
        match entry {
            Entry::HumanVerdict {
                subtask, verdict, ..
            } => self.subtask_mut(*subtask)?.human_verdict = Some(*verdict),
            Entry::ResultRebuilt { result, subtasks } => self.rebuild(*result, subtasks, ts)?,
            Entry::ResultApplied { result } => {
                self.applied = true;
                self.result_commit = Some(*result);
            }
            _ => {}
        }
        Ok(())
    }

    /// Refuses a record that comes at the wrong point of the run's life: `grove review`'s
    /// records only after the run finished (and before its result was applied), every
    /// other record only before.
    fn admit(&self, entry: &Entry) -> Result<(), ReplayReason> {
        let from_review = matches!(
            entry,
            Entry::HumanVerdict { .. } | Entry::ResultRebuilt { .. } | Entry::ResultApplied { .. }
        );
        if from_review {
            if !self.is_finished() {
                return Err(ReplayReason::NotFinished {
                    status: self.status,
                });
            }
            if self.applied {
                return Err(ReplayReason::AlreadyApplied);
            }
        } else if self.is_finished() {
            return Err(ReplayReason::AlreadyFinished);
        }
        Ok(())
    }

    /// A resume takes over: calls still open never finished, and are never replayed.
    fn resume(&mut self) {
        self.status = RunStatus::Running;
        self.pause_reason = None;
        self.resumes += 1;
        let open = std::mem::take(&mut self.open_tool_calls);
        self.interrupted_tool_calls.extend(open);
    }

    fn start_subtask(&mut self, started: SubtaskState) -> Result<(), ReplayReason> {
        if self.subtask(started.id).is_some() {
            return Err(ReplayReason::SubtaskAlreadyStarted {
                subtask: started.id,
            });
        }
        self.subtasks.push(started);
        Ok(())
    }

    fn open_call(
        &mut self,
        subtask: &str,
        call_id: &str,
        tool: &str,
        mutating: bool,
        ts: u64,
    ) -> Result<(), ReplayReason> {
        if self.open_call_index(subtask, call_id).is_some() {
            return Err(ReplayReason::ToolCallAlreadyStarted {
                subtask: subtask.to_string(),
                call_id: call_id.to_string(),
            });
        }
        self.open_tool_calls.push(ToolCallState {
            subtask: subtask.to_string(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            mutating,
            started_ms: ts,
        });
        Ok(())
    }

    fn close_call(&mut self, subtask: &str, call_id: &str) -> Result<(), ReplayReason> {
        let Some(index) = self.open_call_index(subtask, call_id) else {
            return Err(ReplayReason::ToolCallNeverStarted {
                subtask: subtask.to_string(),
                call_id: call_id.to_string(),
            });
        };
        self.open_tool_calls.remove(index);
        Ok(())
    }

    /// `grove review` rebuilt the result: the record is checked whole before any of it is
    /// folded in, so that a bad record leaves the state unchanged.
    fn rebuild(
        &mut self,
        result: CommitId,
        subtasks: &[RebuiltSubtask],
        ts: u64,
    ) -> Result<(), ReplayReason> {
        self.check_rebuilt(subtasks)?;
        for rebuilt in subtasks {
            if let Some(state) = self.subtasks.iter_mut().find(|s| s.id == rebuilt.subtask) {
                state.status = rebuilt.status.into();
                state.finished_ms = state.finished_ms.or(Some(ts));
                state.merge = match (rebuilt.commit, rebuilt.result) {
                    (Some(commit), Some(result)) => Some(MergeState { commit, result }),
                    _ => None,
                };
                state.conflict_paths = rebuilt.conflict_paths.clone();
            }
        }
        self.result_commit = Some(result);
        Ok(())
    }

    fn finish(
        &mut self,
        status: RunOutcome,
        applied: bool,
        result_commit: Option<CommitId>,
        error: Option<&String>,
        ts: u64,
    ) {
        self.status = match status {
            RunOutcome::Finished => RunStatus::Finished,
            RunOutcome::Failed => RunStatus::Failed,
        };
        self.pause_reason = None;
        self.applied = applied;
        if let Some(result_commit) = result_commit {
            self.result_commit = Some(result_commit);
        }
        self.error = error.cloned();
        self.finished_ms = Some(ts);
    }

    fn subtask_mut(&mut self, id: SubtaskId) -> Result<&mut SubtaskState, ReplayReason> {
        self.subtasks
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(ReplayReason::SubtaskNeverStarted { subtask: id })
    }

    fn running_subtask(&mut self, id: SubtaskId) -> Result<&mut SubtaskState, ReplayReason> {
        let state = self.subtask_mut(id)?;
        if state.status != SubtaskStatus::Running {
            return Err(ReplayReason::SubtaskAlreadyFinished { subtask: id });
        }
        Ok(state)
    }

    /// Checks a `result_rebuilt` record before any of it is folded in.
    fn check_rebuilt(&self, subtasks: &[RebuiltSubtask]) -> Result<(), ReplayReason> {
        for rebuilt in subtasks {
            if self.subtask(rebuilt.subtask).is_none() {
                return Err(ReplayReason::SubtaskNeverStarted {
                    subtask: rebuilt.subtask,
                });
            }
            if rebuilt.status == SubtaskOutcome::Merged
                && (rebuilt.commit.is_none() || rebuilt.result.is_none())
            {
                return Err(ReplayReason::MergedWithoutCommit {
                    subtask: rebuilt.subtask,
                });
            }
        }
        Ok(())
    }

    fn open_call_index(&self, subtask: &str, call_id: &str) -> Option<usize> {
        self.open_tool_calls
            .iter()
            .position(|c| c.subtask == subtask && c.call_id == call_id)
    }
}

/// Folds a record about one running subtask into its state; returns the run's new
/// result commit when the record is a merge.
fn record_subtask_fact(state: &mut SubtaskState, entry: &Entry, ts: u64) -> Option<CommitId> {
    match entry {
        Entry::Checkpoint { commit, turn, .. } => {
            state.last_checkpoint = Some(CheckpointState {
                commit: *commit,
                turn: *turn,
            });
        }
        Entry::Verdict {
            verdict,
            summary,
            findings,
            ..
        } => {
            state.verdict = Some(VerdictState {
                verdict: *verdict,
                summary: summary.clone(),
                findings: findings.clone(),
            });
        }
        Entry::Merged { commit, result, .. } => {
            state.merge = Some(MergeState {
                commit: *commit,
                result: *result,
            });
            return Some(*result);
        }
        Entry::Conflict { paths, .. } => state.conflict_paths = paths.clone(),
        Entry::StartPoint { commit, .. } => state.start = Some(*commit),
        Entry::SubtaskFinished {
            status,
            ledger,
            reason,
            summary,
            ..
        } => {
            state.status = (*status).into();
            state.finished_ms = Some(ts);
            state.ledger = *ledger;
            state.reason = reason.clone();
            state.worker_summary = summary.clone();
        }
        _ => {}
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn status_names_match_their_json() {
        for status in [
            RunStatus::Running,
            RunStatus::Paused,
            RunStatus::Interrupted,
            RunStatus::Finished,
            RunStatus::Failed,
            RunStatus::Unreadable,
        ] {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::from(status.as_str()),
                "messages and `grove runs --json` use the same status names"
            );
        }
    }

    #[test]
    fn a_subtask_is_superseded_only_through_a_replacement_that_got_done() {
        let subtask = |n: u32, status: SubtaskStatus, replaces: Option<u32>| {
            let mut state =
                SubtaskState::started(SubtaskId(n), "t", "b", ContextMode::Isolated, "worker", 0);
            state.status = status;
            state.replaces = replaces.map(SubtaskId);
            state
        };
        use SubtaskStatus::{Merged, Rejected};
        let mut run = RunState::start(&Record::now(Entry::RunStarted {
            run_id: "20261207-000000-abcd".parse().unwrap(),
            task: "t".into(),
            base: CommitId::parse(&"a".repeat(40)).unwrap(),
            branch: "refs/heads/main".into(),
            provider: "anthropic".into(),
            model: "m".into(),
            options: RecordedOptions::default(),
        }))
        .unwrap();
        run.subtasks = vec![
            subtask(1, Rejected, None),
            subtask(2, Rejected, Some(1)),
            subtask(3, Merged, Some(2)),
            subtask(4, Rejected, None),
            subtask(5, Rejected, Some(4)),
            subtask(6, Merged, None),
        ];
        let superseded: Vec<Option<u32>> = (1..=6)
            .map(|n| run.superseded_by(SubtaskId(n)).map(SubtaskId::number))
            .collect();
        assert_eq!(
            superseded,
            vec![Some(2), Some(3), None, None, None, None],
            "S1 is superseded by S2, itself superseded by S3 that merged; S4's replacement \
             was rejected too, so neither counts; a merged subtask is never superseded"
        );

        // S1–S3 are attempts that all lost; S4–S5 attempts at replacing S2, of which S5
        // merged.
        run.subtasks = vec![
            subtask(1, Rejected, None),
            subtask(2, Rejected, None),
            subtask(3, Rejected, None),
            subtask(4, Rejected, Some(2)),
            subtask(5, Merged, Some(2)),
        ];
        run.attempts = vec![
            AttemptGroup {
                group: SubtaskId(1),
                subtasks: vec![SubtaskId(1), SubtaskId(2), SubtaskId(3)],
                pick: None,
            },
            AttemptGroup {
                group: SubtaskId(4),
                subtasks: vec![SubtaskId(4), SubtaskId(5)],
                pick: None,
            },
        ];
        let superseded: Vec<Option<u32>> = (1..=5)
            .map(|n| run.superseded_by(SubtaskId(n)).map(SubtaskId::number))
            .collect();
        assert_eq!(
            superseded,
            vec![Some(5), Some(5), Some(5), None, None],
            "a replacement naming one attempt replaces its whole group, and a group of \
             replacements is done once one of its attempts merged: the one that merged \
             supersedes"
        );
    }

    use crate::store::journal::{CheckStatus, ON_RESULT};

    #[test]
    fn a_check_is_kept_on_its_subtask_and_in_the_run_and_a_fixers_kind_survives() {
        let check = |on: &str, status| CheckRun {
            on: on.into(),
            status,
            seconds: 1.5,
            ended: "exited with status 0".into(),
            output_tail: "ok".into(),
            opened: Vec::new(),
            tree: None,
            same_as: None,
            ratchets: Vec::new(),
        };
        let entries = [
            Entry::RunStarted {
                run_id: RunId::new("r").unwrap(),
                task: "t".into(),
                base: CommitId::parse(&"b".repeat(40)).unwrap(),
                branch: "main".into(),
                provider: "anthropic".into(),
                model: "m".into(),
                options: RecordedOptions::default(),
            },
            Entry::SubtaskStarted {
                subtask: SubtaskId(1),
                task: "fix the build".into(),
                branch: "grove/r/1".into(),
                mode: ContextMode::Isolated,
                agent: "worker".into(),
                paths: Vec::new(),
                after: Vec::new(),
                waits_for: Vec::new(),
                kind: SubtaskKind::Fix,
                replaces: None,
                start_from: None,
            },
            Entry::Checked {
                run: check("S1", CheckStatus::Passed),
            },
            Entry::Checked {
                run: check(ON_RESULT, CheckStatus::Failed),
            },
        ];
        let records: Vec<Record> = entries
            .into_iter()
            .map(|entry| Record { ts_ms: 1, entry })
            .collect();
        let state = RunState::replay(&records).unwrap();
        assert_eq!(
            (state.subtasks[0].kind, state.subtasks[0].check.clone()),
            (SubtaskKind::Fix, Some(check("S1", CheckStatus::Passed))),
            "a subtask keeps its kind and its own check"
        );
        assert_eq!(
            state.checks,
            vec![
                check("S1", CheckStatus::Passed),
                check(ON_RESULT, CheckStatus::Failed)
            ],
            "the run keeps every check in order"
        );
    }
}
