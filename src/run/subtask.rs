//! One subtask's pipeline: worktree → worker → commit → isolated review → merge or
//! archive, and the short result the lead gets back.
//!
//! This file owns what crosses between the agents of a subtask: the worker sees its
//! brief (or a fork of the lead; an external worker CLI, `--worker-backend`, sees its role
//! prompt, the rules and the brief), the reviewer sees the brief, the diff and the rules —
//! never the worker's messages — and the lead sees one bounded result. It must never
//! merge a diff no reviewer approved, and never delete work that is not kept elsewhere.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::SemaphorePermit;

use crate::agent::external::{self, BackendEnv, Progress};
use crate::agent::roles::{self, RoleDef, RoleKind};
use crate::agent::{
    AgentError, AgentRun, AgentSpec, Ledger, LoopInput, StopKind, fork_messages, isolated_messages,
    run_agent,
};
use crate::event::{AgentId, Event};
use crate::git::{BranchDiff, DiffStat, GitError, MergeOutcome, Worktree};
use crate::model::{ContentBlock, Message, Role};
use crate::run::gate::gate_registry;
use crate::run::orchestrator::{AgentObserver, Orchestrator, lock};
use crate::run::prepare::PrepareFailure;
use crate::run::report::{SubtaskReport, executes_later};
use crate::run::verdict::{SubmitVerdict, Verdict};
use crate::store::StoreError;
use crate::store::journal::{ContextMode, Entry, SubtaskOutcome, VerdictKind};
use crate::store::state::{SubtaskState, SubtaskStatus};
use crate::store::transcript::{self, AgentTiming, Transcript};
use crate::text::truncate;
use crate::tools::git_pointer::ensure_git_pointer;
use crate::tools::{self, CommandExecutor, Registry, ToolContext, ToolSet};

/// How much of a worker's final message the lead gets back.
const WORKER_SUMMARY_CHARS: usize = 800;
/// How much of the reviewer's summary the lead gets back.
const REVIEW_SUMMARY_CHARS: usize = 500;
/// How many findings and diffstat lines the lead gets back.
const LISTED_FINDINGS: usize = 6;
const LISTED_FILES: usize = 12;

/// One `delegate` call, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateRequest {
    /// The brief: everything the worker will know about its subtask.
    pub task: String,
    pub mode: ContextMode,
    /// A user agent from `.grove/agents/<name>.md`; `None` for the built-in worker.
    pub agent: Option<String>,
}

/// Why a `delegate` call did not produce a subtask.
pub(crate) enum DelegateRefusal {
    /// The lead should read this and adapt.
    Model(String),
    /// The run cannot go on (the journal failed).
    Fatal(StoreError),
}

/// How far a subtask's pipeline got.
enum Stage {
    /// Its outcome is in the report.
    Done,
    /// It failed, for this reason.
    Failed(String),
    /// The run was interrupted: the work is checkpointed, the subtask stays open for
    /// `grove resume`.
    Interrupted,
}

/// How a worker (built-in or external) ended, before its work is committed.
struct WorkerEnd {
    /// What this attempt spent (earlier attempts are in the saved transcript).
    ledger: Ledger,
    /// Whether every checkpoint and transcript save during the work succeeded.
    checkpointed: Result<(), String>,
    /// The worker's final message, or why its subtask fails.
    summary: Result<String, String>,
}

impl Orchestrator {
    /// Runs one delegated subtask to its end and returns what the lead is told.
    ///
    /// The pipeline runs as a tracked task of its own: when the run is interrupted the
    /// lead's loop drops this call at once, but the subtask still checkpoints its work
    /// and reports, and the run waits for it before it finishes.
    pub(crate) async fn delegate(
        self: Arc<Self>,
        request: DelegateRequest,
    ) -> Result<String, DelegateRefusal> {
        if self.run_budget_spent() {
            return Err(DelegateRefusal::Model(
                "the run's token budget is spent; no more subtasks can start. Finish with a \
                 summary."
                    .into(),
            ));
        }
        let role = self
            .delegate_role(&request)
            .map_err(DelegateRefusal::Model)?;
        let tools = worker_tools(&role, &self.executor).map_err(DelegateRefusal::Model)?;
        // Numbered before anything awaits, so subtasks are numbered in call order.
        let n = self
            .next_subtask
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n > self.options.max_subtasks {
            self.settle(n);
            return Err(DelegateRefusal::Model(format!(
                "the run's limit of {} subtasks is reached; finish with a summary",
                self.options.max_subtasks
            )));
        }
        if request.mode == ContextMode::Fork && !self.options.worker_backend.is_builtin() {
            self.note(format!(
                "S{n}: a fork was asked for, but the {} worker starts from its brief alone",
                self.options.worker_backend.name()
            ));
        }
        let messages = match request.mode {
            ContextMode::Fork => fork_messages(&lock(&self.lead_messages), &request.task),
            ContextMode::Isolated => isolated_messages(&request.task),
        };
        let orchestrator = self.clone();
        let task = self.tasks.spawn(async move {
            orchestrator
                .run_delegated(n, request, role, tools, messages)
                .await
        });
        match task.await {
            Ok(result) => result,
            Err(error) => Err(DelegateRefusal::Model(format!(
                "the subtask stopped unexpectedly: {error}"
            ))),
        }
    }

    async fn run_delegated(
        self: Arc<Self>,
        n: u32,
        request: DelegateRequest,
        role: RoleDef,
        tools: Registry,
        messages: Vec<Message>,
    ) -> Result<String, DelegateRefusal> {
        let _settle = SettleOnDrop(self.clone(), n);
        let permit = tokio::select! {
            permit = self.jobs.acquire() => permit
                .map_err(|_| DelegateRefusal::Model("the run is shutting down".into()))?,
            () = self.cancel.cancelled() => {
                return Err(DelegateRefusal::Model("the run was interrupted".into()));
            }
        };
        let label = format!("S{n}");
        self.journal(Entry::SubtaskStarted {
            subtask: label.clone(),
            task: request.task.clone(),
            branch: self.run.subtask_branch(n),
            mode: request.mode,
            agent: role.name.clone(),
        })
        .map_err(DelegateRefusal::Fatal)?;
        let start = Transcript {
            messages,
            ..Transcript::default()
        };
        let report = self
            .run_subtask(n, &request.task, &role, tools, start, permit)
            .await
            .map_err(DelegateRefusal::Fatal)?;
        let result = lead_result(&report);
        lock(&self.subtasks).push(report);
        Ok(result)
    }

    /// Continues subtask `n` of a resumed run from its checkpoint and transcript.
    pub(crate) async fn resume_subtask(
        self: Arc<Self>,
        n: u32,
        state: &SubtaskState,
    ) -> Result<SubtaskReport, StoreError> {
        let request = DelegateRequest {
            task: state.task.clone(),
            mode: state.mode,
            agent: (state.agent != "worker").then(|| state.agent.clone()),
        };
        let (role, tools) = match self
            .delegate_role(&request)
            .and_then(|role| worker_tools(&role, &self.executor).map(|tools| (role, tools)))
        {
            Ok(found) => found,
            Err(reason) => {
                // The agent file changed since: the built-in worker carries on.
                self.note(format!(
                    "S{n}: {reason}; continuing with the built-in worker"
                ));
                (
                    roles::builtin(RoleKind::Worker),
                    tools::builtin_with_executor(ToolSet::Worker, self.executor.clone()),
                )
            }
        };
        let _settle = SettleOnDrop(self.clone(), n);
        let label = format!("S{n}");
        let saved = match transcript::load(&self.transcript_path(&label, &role.name)) {
            Ok(saved) => saved,
            Err(error) => {
                self.note(format!("{label}: the worker starts over: {error}"));
                None
            }
        };
        let start = match saved {
            Some(mut saved) => {
                transcript::answer_pending(&mut saved.messages, |_, _, _| None);
                saved
            }
            None => Transcript {
                messages: isolated_messages(&state.task),
                ..Transcript::default()
            },
        };
        let Ok(permit) = self.jobs.acquire().await else {
            return Ok(empty_report(
                &label,
                &state.task,
                self.run.subtask_branch(n),
            ));
        };
        self.run_subtask(n, &state.task, &role, tools, start, permit)
            .await
    }

    /// The pipeline of subtask `n`; an error here is the journal failing (fatal).
    async fn run_subtask(
        self: &Arc<Self>,
        n: u32,
        brief: &str,
        role: &RoleDef,
        tools: Registry,
        start: Transcript,
        permit: SemaphorePermit<'_>,
    ) -> Result<SubtaskReport, StoreError> {
        let label = format!("S{n}");
        let branch = self.run.subtask_branch(n);
        self.events.emit(Event::SubtaskStarted {
            label: label.clone(),
            task: brief.to_owned(),
            branch: branch.clone(),
        });
        let mut report = empty_report(&label, brief, branch);
        let worktree = match self.create_worktree(n).await {
            Ok(worktree) => worktree,
            Err(error) => {
                report.reason = Some(format!("could not create the worktree: {error}"));
                return self.close_subtask(report, n, None).await;
            }
        };
        let stage = self
            .work_and_review(n, brief, role, tools, start, permit, &worktree, &mut report)
            .await?;
        // Its merge (if any) is journaled: the next subtask in merge order need not wait
        // for this one's archive and closing records.
        self.settle(n);
        match stage {
            Stage::Done => {}
            Stage::Failed(reason) => report.reason = Some(reason),
            Stage::Interrupted => {
                report.reason = Some(format!(
                    "interrupted; its work is checkpointed on {}; `grove resume {}` continues it",
                    report.branch, self.run
                ));
                finish_ledger(&mut report);
                return Ok(report);
            }
        }
        self.close_subtask(report, n, Some(&worktree)).await
    }

    /// Creates (or, on resume, recovers) subtask `n`'s worktree. A directory grove does
    /// not own at that path (left by a crash, or by hand) is moved aside and kept, never
    /// deleted, and the worktree is made anew from its branch.
    async fn create_worktree(&self, n: u32) -> Result<Worktree, GitError> {
        let spec = self.worktree_spec(n);
        let created = match self.take_prepared_worktree(n).await {
            Some(prepared) => prepared,
            None => self.repo.create_worktree(spec.clone()).await,
        };
        match created {
            Err(GitError::WorktreePathOccupied { path, .. }) => {
                let aside =
                    path.with_file_name(format!("{}.stray-{}", n, crate::store::journal::now_ms()));
                std::fs::rename(&path, &aside).map_err(|source| GitError::Io {
                    action: "move aside",
                    path: path.clone(),
                    source,
                })?;
                self.note(format!(
                    "S{n}: {} was not a worktree grove knows; it was kept at {}",
                    path.display(),
                    aside.display()
                ));
                self.repo.create_worktree(spec).await
            }
            other => other,
        }
    }

    /// Worker, commit, review, merge.
    #[allow(clippy::too_many_arguments)]
    async fn work_and_review(
        self: &Arc<Self>,
        n: u32,
        brief: &str,
        role: &RoleDef,
        tools: Registry,
        start: Transcript,
        permit: SemaphorePermit<'_>,
        worktree: &Worktree,
        report: &mut SubtaskReport,
    ) -> Result<Stage, StoreError> {
        let label = &format!("S{n}");
        match self.prepare_worktree(label, worktree).await {
            Ok(()) => {}
            Err(PrepareFailure::Failed(reason)) => return Ok(Stage::Failed(reason)),
            Err(PrepareFailure::Interrupted) => return Ok(Stage::Interrupted),
        }
        let earlier = start.ledger;
        let worker = if self.options.worker_backend.is_builtin() {
            self.builtin_worker(label, role, tools, start, worktree)
                .await
        } else {
            self.external_worker(label, brief, role, earlier, worktree)
                .await
        };
        report.worker_ledger = earlier;
        report.worker_ledger.add(&worker.ledger);

        // The final commit: whatever the worker left, even after a failure or an
        // interrupt, so that nothing it wrote is lost.
        let head = match self
            .repo
            .checkpoint(worktree, &format!("{label}: final"))
            .await
        {
            Ok(commit) => commit,
            Err(error) => {
                return Ok(Stage::Failed(format!(
                    "could not commit the worker's files: {error}"
                )));
            }
        };
        if let Some(commit) = head {
            self.journal(Entry::Checkpoint {
                subtask: label.to_owned(),
                commit: commit.to_string(),
                turn: report.worker_ledger.steps,
            })?;
        }
        if self.cancel.is_cancelled() {
            return Ok(Stage::Interrupted);
        }
        if let Err(reason) = worker.checkpointed {
            return Ok(Stage::Failed(reason));
        }
        let worker_summary = match worker.summary {
            Ok(summary) => summary,
            Err(reason) => return Ok(Stage::Failed(reason)),
        };
        report.reason = (!worker_summary.trim().is_empty()).then(|| {
            format!(
                "worker: {}",
                truncate(worker_summary.trim(), WORKER_SUMMARY_CHARS)
            )
        });

        let tip = match self.repo.ref_target(&worktree.branch_ref()) {
            Ok(Some(tip)) => tip,
            Ok(None) => return Ok(Stage::Failed("the subtask's branch vanished".into())),
            Err(error) => return Ok(Stage::Failed(error.to_string())),
        };
        if tip == self.base {
            return Ok(Stage::Failed("the worker changed no file".into()));
        }
        if let Some(reason) = self.local_files_in_history(tip).await {
            return Ok(Stage::Failed(reason));
        }
        let diff = match self
            .repo
            .diff(self.base, tip, self.options.max_review_patch_bytes)
            .await
        {
            Ok(diff) => diff,
            Err(error) => {
                return Ok(Stage::Failed(format!(
                    "could not diff the subtask: {error}"
                )));
            }
        };
        report.executes_later = executes_later(&diff.stat);
        report.diffstat = Some(diff.stat.clone());

        let verdict = match self.review(label, brief, &diff, worktree, report).await {
            Ok(verdict) => verdict,
            Err(_) if self.cancel.is_cancelled() => return Ok(Stage::Interrupted),
            Err(reason) => return Ok(Stage::Failed(reason)),
        };
        self.journal(Entry::Verdict {
            subtask: label.to_owned(),
            verdict: verdict.kind,
            summary: verdict.summary.clone(),
            findings: verdict.findings.clone(),
        })?;
        report.verdict = Some(verdict.kind);
        report.review_summary = Some(verdict.summary.clone());
        report.findings = verdict.findings.clone();
        if verdict.kind == VerdictKind::Reject {
            report.status = SubtaskOutcome::Rejected;
            return Ok(Stage::Done);
        }
        // The merge may wait for lower-numbered subtasks; they may need this slot.
        drop(permit);
        if !self.wait_for_merge_turn(n).await {
            return Ok(Stage::Interrupted);
        }
        let message = format!(
            "grove {}: merge {label}\n\n{}\n\nGrove-Run: {}\nGrove-Subtask: {label}\n",
            self.run,
            truncate(brief.lines().next().unwrap_or_default(), 200),
            self.run
        );
        match self
            .repo
            .merge_onto(&self.run.result_ref(), tip, &message)
            .await
        {
            Ok(MergeOutcome::Merged { commit }) => {
                self.journal(Entry::Merged {
                    subtask: label.to_owned(),
                    commit: tip.to_string(),
                    result: commit.to_string(),
                })?;
                report.status = SubtaskOutcome::Merged;
            }
            Ok(MergeOutcome::AlreadyMerged) => report.status = SubtaskOutcome::Merged,
            Ok(MergeOutcome::Conflict { paths }) => {
                self.journal(Entry::Conflict {
                    subtask: label.to_owned(),
                    paths: paths.clone(),
                })?;
                report.status = SubtaskOutcome::Conflict;
                report.reason = Some(format!(
                    "approved, but it conflicts with work merged before it in: {}",
                    paths.join(", ")
                ));
                report.conflict_paths = paths;
            }
            Err(error) => return Ok(Stage::Failed(format!("could not merge: {error}"))),
        }
        Ok(Stage::Done)
    }

    /// grove's own worker loop, with a checkpoint commit after every turn that changed
    /// files.
    async fn builtin_worker(
        self: &Arc<Self>,
        label: &str,
        role: &RoleDef,
        tools: Registry,
        start: Transcript,
        worktree: &Worktree,
    ) -> WorkerEnd {
        let Transcript {
            messages,
            ledger: earlier,
            timing,
        } = start;
        let spec = self.spec(
            AgentId {
                role: role.name.clone(),
                label: label.to_owned(),
            },
            role,
            &self.models.worker,
            self.options.max_turns.worker,
            self.options.subagent_budget_tokens,
            gate_registry(&tools, worktree),
        );
        let observer = Arc::new(
            AgentObserver::new(
                self,
                label,
                self.transcript_path(label, &role.name),
                earlier,
                Some((self.repo.clone(), worktree.clone())),
                false,
            )
            .with_timing(&spec.model_name, timing),
        );
        let worker = self
            .run_agent_in(&spec, messages, worktree, observer.clone())
            .await;
        observer.finished(&worker.ledger);
        let checkpointed = observer.flush().await;
        self.spend(&worker.ledger);
        if let Err(AgentError::Model { source, .. }) = &worker.result {
            self.pause(format!("the model API failed for {label}: {source}"));
        }
        let summary = match worker.result {
            Ok(outcome) => match outcome.stop {
                StopKind::Finished | StopKind::TurnCap => Ok(outcome.final_text),
                _ => Err(format!(
                    "the worker stopped: {}: {}",
                    outcome.stop, outcome.detail
                )),
            },
            Err(error) => Err(format!("the worker failed: {error}")),
        };
        WorkerEnd {
            ledger: worker.ledger,
            checkpointed,
            summary,
        }
    }

    /// Another agent CLI (`--worker-backend`) in the worktree, given the role's prompt,
    /// the project rules and the brief. Its conversation cannot be resumed: after an
    /// interrupt it starts again on the brief, from the subtask's last checkpoint.
    async fn external_worker(
        self: &Arc<Self>,
        label: &str,
        brief: &str,
        role: &RoleDef,
        earlier: Ledger,
        worktree: &Worktree,
    ) -> WorkerEnd {
        let backend = self.options.worker_backend.clone();
        let name = backend.name();
        let agent = AgentId {
            role: role.name.clone(),
            label: label.to_owned(),
        };
        // The very system prompt a built-in worker would get: role and project rules.
        let system = self
            .spec(
                agent.clone(),
                role,
                &self.models.worker,
                0,
                None,
                Registry::new(),
            )
            .system;
        // The CLI sees the whole tree at once: it must wait for the background checkout.
        let ready = tokio::select! {
            ready = worktree.ready() => ready
                .map_err(|error| format!("the worktree could not be checked out: {error}")),
            () = self.cancel.cancelled() => Err("interrupted before the worker started".into()),
        };
        let started_ms = crate::store::journal::now_ms();
        if let Err(reason) = ready {
            return WorkerEnd {
                ledger: Ledger::default(),
                checkpointed: Ok(()),
                summary: Err(reason),
            };
        }
        let rerun = worktree.start() != self.base;
        if rerun {
            self.note(format!(
                "{label}: {name} starts again on the brief from the subtask's last \
                 checkpoint (a CLI's own conversation is not resumed)"
            ));
        }
        let transcript_path = self.transcript_path(label, &role.name);
        self.events.emit(Event::AgentStarted {
            agent: agent.clone(),
        });
        let events = self.events.clone();
        let job = external::ExternalWork {
            backend: &backend,
            system: &system,
            brief,
            rerun,
            cwd: worktree.path(),
            transcript: &transcript_path,
            env: self
                .options
                .backend_env
                .clone()
                .unwrap_or_else(BackendEnv::from_process),
            pass_env: &self.options.worker_pass_env,
            timeout: Duration::from_secs(self.options.worker_backend_timeout_secs.max(1)),
            max_turns: role.max_turns.unwrap_or(self.options.max_turns.worker),
            budget_tokens: self.options.subagent_budget_tokens,
            cancel: self.cancel.child_token(),
        };
        let done = external::work(job, |progress| match progress {
            Progress::Turn { turn, ledger } => events.emit(Event::TurnCompleted {
                agent: agent.clone(),
                turn,
                ledger,
            }),
            Progress::Tool { name, is_error } => events.emit(Event::ToolCalled {
                agent: agent.clone(),
                tool: name,
                is_error,
            }),
        })
        .await;
        if let Some(note) = &done.note {
            self.note(format!("{label}: {note}"));
        }
        let (ledger, summary, described, final_message, prompt) = (
            done.ledger,
            done.summary,
            done.described,
            done.final_message,
            done.prompt,
        );
        self.spend(&ledger);
        self.events.emit(Event::AgentFinished {
            agent,
            ledger,
            outcome: described,
        });
        let mut total = earlier;
        total.add(&ledger);
        let timing = AgentTiming {
            started_ms: Some(started_ms),
            turn_ms: Vec::new(),
            model: Some(format!("{backend} (external CLI)")),
        };
        let checkpointed =
            save_cli_transcript(&transcript_path, prompt, final_message, total, timing);
        WorkerEnd {
            ledger,
            checkpointed,
            summary,
        }
    }

    pub(crate) async fn run_agent_in(
        &self,
        spec: &AgentSpec,
        messages: Vec<Message>,
        worktree: &Worktree,
        observer: Arc<AgentObserver>,
    ) -> AgentRun {
        run_agent(
            spec,
            LoopInput {
                messages,
                tool_context: ToolContext {
                    root: worktree.path().to_path_buf(),
                    cancel: self.cancel.child_token(),
                },
                events: self.events.clone(),
                observer: Some(observer),
            },
        )
        .await
    }

    /// The isolated review of one diff; `Err(reason)` when no review could be had.
    async fn review(
        self: &Arc<Self>,
        label: &str,
        brief: &str,
        diff: &BranchDiff,
        worktree: &Worktree,
        report: &mut SubtaskReport,
    ) -> Result<Verdict, String> {
        let submit = Arc::new(SubmitVerdict::new());
        let tools =
            gate_registry(&tools::builtin(ToolSet::ReadOnly), worktree).with(submit.clone());
        let role = roles::builtin(RoleKind::Reviewer);
        let spec = self.spec(
            AgentId {
                role: "reviewer".into(),
                label: label.to_owned(),
            },
            &role,
            &self.models.reviewer,
            self.options.max_turns.reviewer,
            self.options.subagent_budget_tokens,
            tools,
        );
        // A review always starts from a clean context and is never resumed: its saved
        // transcript is for the report only.
        let observer = Arc::new(
            AgentObserver::new(
                self,
                label,
                self.transcript_path(label, "reviewer"),
                Ledger::default(),
                None,
                false,
            )
            .with_timing(&spec.model_name, AgentTiming::default()),
        );
        let reviewer = self
            .run_agent_in(
                &spec,
                isolated_messages(&review_brief(brief, diff, &report.executes_later)),
                worktree,
                observer.clone(),
            )
            .await;
        observer.finished(&reviewer.ledger);
        self.spend(&reviewer.ledger);
        report.reviewer_ledger = reviewer.ledger;
        if let Some(verdict) = submit.verdict() {
            return Ok(verdict);
        }
        match reviewer.result {
            Err(AgentError::Cancelled { .. }) => Err("cancelled during review".into()),
            Err(AgentError::Model { source, .. }) => {
                self.pause(format!(
                    "the model API failed for the reviewer of {label}: {source}"
                ));
                Err("the model API failed during review".into())
            }
            Err(error) => Err(format!("the review failed: {error}")),
            Ok(outcome) => Ok(Verdict {
                kind: VerdictKind::Reject,
                summary: format!(
                    "The reviewer gave no verdict ({}: {}); an unreviewed diff is never merged.",
                    outcome.stop, outcome.detail
                ),
                findings: Vec::new(),
            }),
        }
    }

    /// Archives what is not merged, removes the worktree, journals the end.
    async fn close_subtask(
        self: &Arc<Self>,
        mut report: SubtaskReport,
        n: u32,
        worktree: Option<&Worktree>,
    ) -> Result<SubtaskReport, StoreError> {
        if report.status != SubtaskOutcome::Merged {
            let archived = match worktree {
                Some(worktree) => {
                    self.repo
                        .archive_worktree(worktree, report.status.as_str())
                        .await
                }
                None => self.repo.archive_branch(&self.run, n).await,
            };
            match archived {
                Ok(archived) => report.archive_ref = Some(archived.reference),
                Err(error) => self.note(format!("{}: could not archive: {error}", report.id)),
            }
        }
        // A kept worktree must send the user's git to the repository, never to a git dir
        // a model planted.
        if let Some(worktree) = worktree
            && let Err(error) = ensure_git_pointer(worktree.path(), worktree.admin_dir())
        {
            self.note(format!(
                "{}: could not restore its `.git` file: {error}",
                report.id
            ));
        }
        if !self.options.keep_worktrees {
            // The outcome is settled and its work kept (merged into the result, or
            // archived above), so the lead need not wait for the cleanup: it runs as a
            // tracked task the run waits for before it ends.
            let repo = self.repo.clone();
            let run = self.run.clone();
            let events = self.events.clone();
            let worktree = worktree.cloned();
            let id = report.id.clone();
            let orchestrator = Arc::clone(self);
            self.tasks.spawn(async move {
                orchestrator.all_settled().await;
                let note = |message: String| events.emit(Event::Note { message });
                if let Some(worktree) = worktree
                    && let Err(error) = repo.remove_worktree(&worktree).await
                {
                    note(format!("{id}: could not remove its worktree: {error}"));
                }
                // The git layer refuses to delete a branch whose work is kept nowhere else.
                if let Err(error) = repo.delete_subtask_branch(&run, n).await {
                    note(format!("{id}: kept its branch: {error}"));
                }
            });
        }
        finish_ledger(&mut report);
        self.journal(Entry::SubtaskFinished {
            subtask: report.id.clone(),
            status: report.status,
            ledger: report.ledger(),
        })?;
        self.events.emit(Event::SubtaskFinished {
            label: report.id.clone(),
            status: report.status.as_str().to_owned(),
            verdict: report.verdict.map(|v| v.as_str().to_owned()),
            diffstat: report.diffstat.as_ref().map(DiffStat::summary),
        });
        Ok(report)
    }
}

/// Settles subtask `n` however its pipeline ends (done, failed, interrupted, or an
/// error), so that no later subtask waits forever for its turn to merge.
struct SettleOnDrop(Arc<Orchestrator>, u32);

impl Drop for SettleOnDrop {
    fn drop(&mut self) {
        self.0.settle(self.1);
    }
}

/// Saves an external worker's transcript: what it was asked, what it answered, and the
/// ledger of every attempt so far (so a resume keeps counting from there).
fn save_cli_transcript(
    path: &std::path::Path,
    prompt: String,
    final_message: Option<String>,
    ledger: Ledger,
    timing: AgentTiming,
) -> Result<(), String> {
    let mut messages = vec![Message::user_text(prompt)];
    if let Some(text) = final_message {
        messages.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text }],
        });
    }
    let transcript = Transcript {
        messages,
        ledger,
        timing,
    };
    transcript::save(path, &transcript)
        .map_err(|error| format!("cannot save the transcript: {error}"))
}

fn empty_report(label: &str, brief: &str, branch: String) -> SubtaskReport {
    SubtaskReport {
        id: label.to_owned(),
        task: brief.to_owned(),
        branch,
        status: SubtaskOutcome::Failed,
        verdict: None,
        steps: 0,
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reason: None,
        review_summary: None,
        findings: Vec::new(),
        diffstat: None,
        conflict_paths: Vec::new(),
        archive_ref: None,
        executes_later: Vec::new(),
        worker_ledger: Ledger::default(),
        reviewer_ledger: Ledger::default(),
    }
}

/// Copies the summed ledger into the report's flat token fields.
fn finish_ledger(report: &mut SubtaskReport) {
    let ledger = report.ledger();
    report.steps = ledger.steps;
    report.input_tokens = ledger.input_tokens;
    report.output_tokens = ledger.output_tokens;
    report.cache_read_tokens = ledger.cache_read_tokens;
    report.cache_write_tokens = ledger.cache_write_tokens;
}

/// The report of a subtask that had finished before a resume, from the journal.
pub(crate) fn report_from_state(state: &SubtaskState) -> SubtaskReport {
    let mut report = empty_report(&state.id, &state.task, state.branch.clone());
    report.status = match state.status {
        SubtaskStatus::Merged => SubtaskOutcome::Merged,
        SubtaskStatus::Rejected => SubtaskOutcome::Rejected,
        SubtaskStatus::Conflict => SubtaskOutcome::Conflict,
        SubtaskStatus::Failed | SubtaskStatus::Running => SubtaskOutcome::Failed,
    };
    if let Some(verdict) = &state.verdict {
        report.verdict = Some(verdict.verdict);
        report.review_summary = Some(verdict.summary.clone());
        report.findings = verdict.findings.clone();
    }
    report.conflict_paths = state.conflict_paths.clone();
    report.worker_ledger = state.ledger;
    finish_ledger(&mut report);
    report
}

/// The worker's tools: the kind's default set, or the agent file's `tools` list (which
/// may only name worker tools).
fn worker_tools(role: &RoleDef, executor: &Arc<dyn CommandExecutor>) -> Result<Registry, String> {
    let all = tools::builtin_with_executor(ToolSet::Worker, executor.clone());
    let Some(names) = &role.tools else {
        return Ok(all);
    };
    names.iter().try_fold(Registry::new(), |registry, name| {
        all.get(name)
            .cloned()
            .map(|tool| registry.with(tool))
            .ok_or_else(|| {
                format!(
                    "agent `{}` lists tool `{name}`, which workers do not have; worker tools \
                     are: {}",
                    role.name,
                    all.names().join(", ")
                )
            })
    })
}

/// The reviewer's first message: the brief, the flagged paths, the diff. Nothing else.
fn review_brief(brief: &str, diff: &BranchDiff, executes_later: &[String]) -> String {
    let mut text = format!(
        "# The subtask's brief\n\n{}\n\n# The diff against the base ({})\n\n",
        brief.trim(),
        diff.stat.summary()
    );
    if !executes_later.is_empty() {
        text.push_str(
            "Attention: this diff changes files that run on the host or in CI later; check \
             that each change is needed and harmless:\n",
        );
        for path in executes_later {
            text.push_str(&format!("- {path}\n"));
        }
        text.push('\n');
    }
    text.push_str("```diff\n");
    text.push_str(&diff.patch.text);
    if !diff.patch.text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(
        "```\n\nThe resulting tree is your working directory; read what you need. Then call \
         `submit_verdict`.",
    );
    text
}

/// The short result a lead gets for one subtask: status, verdict, findings, diffstat.
pub(crate) fn lead_result(report: &SubtaskReport) -> String {
    let mut text = format!(
        "{} {} ({})",
        report.id,
        report.status.as_str(),
        report.branch
    );
    if let Some(verdict) = report.verdict {
        text.push_str(&format!("; reviewer: {}", verdict.as_str()));
    }
    text.push('\n');
    if let Some(reason) = &report.reason {
        text.push_str(&format!("{reason}\n"));
    }
    if let Some(summary) = &report.review_summary {
        text.push_str(&format!(
            "review: {}\n",
            truncate(summary, REVIEW_SUMMARY_CHARS)
        ));
    }
    for finding in report.findings.iter().take(LISTED_FINDINGS) {
        let place = match finding.line {
            Some(line) => format!("{}:{line}", finding.path),
            None => finding.path.clone(),
        };
        text.push_str(&format!("- {place}: {}\n", truncate(&finding.problem, 200)));
    }
    if report.findings.len() > LISTED_FINDINGS {
        text.push_str(&format!(
            "- … {} more findings\n",
            report.findings.len() - LISTED_FINDINGS
        ));
    }
    if !report.conflict_paths.is_empty() {
        text.push_str(&format!(
            "conflicts in: {}\n",
            report.conflict_paths.join(", ")
        ));
    }
    if let Some(stat) = &report.diffstat {
        text.push_str(&format!("diff: {}\n", stat.summary()));
        for file in stat.files.iter().take(LISTED_FILES) {
            if file.binary {
                text.push_str(&format!("  {} (binary)\n", file.path));
            } else {
                text.push_str(&format!(
                    "  {} +{} -{}\n",
                    file.path, file.added, file.removed
                ));
            }
        }
        if stat.files.len() > LISTED_FILES {
            text.push_str(&format!(
                "  … {} more files\n",
                stat.files.len() - LISTED_FILES
            ));
        }
    }
    if let Some(archive) = &report.archive_ref {
        text.push_str(&format!("work kept at {archive}\n"));
    }
    text
}
