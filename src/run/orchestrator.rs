//! The orchestrator: one run from the user's task to an applied result.
//!
//! This file owns the run's lifecycle — checks, lock, journal, the lead's loop, every
//! subtask's pipeline (worktree → worker → commit → isolated review → merge or archive)
//! and the final apply. It is the only place that combines agents with git. It must
//! never let anything but a subtask's short result cross back to the lead, never show a
//! reviewer the worker's messages, and never touch the user's branch before the end.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::agent::roles::{self, ProjectRules, RoleDef, RoleKind};
use crate::agent::{
    AgentError, AgentRun, AgentSpec, Ledger, LoopInput, StopKind, TurnObserver, fork_messages,
    isolated_messages, run_agent,
};
use crate::event::{AgentId, Event, EventSink};
use crate::git::{
    ApplyOutcome, ApplyRequest, BranchDiff, CommitId, GitError, MergeOutcome, Repo,
    RunId as GitRunId, Worktree, WorktreeSpec,
};
use crate::model::Message;
use crate::run::delegate::{Delegate, DelegateRequest};
use crate::run::gate::gate_registry;
use crate::run::journal::{ContextMode, Entry, RunOutcome, SubtaskOutcome, VerdictKind};
use crate::run::lock::{LockError, RepoLock};
use crate::run::options::{ModelChoice, Models, RunOptions};
use crate::run::report::{ApplyReport, RunEnd, RunReport, SubtaskReport, Totals, executes_later};
use crate::run::store::{ActiveRun, RunStart, RunStore, StoreError};
use crate::run::verdict::{SubmitVerdict, Verdict};
use crate::tools::{self, Registry, ToolContext, ToolSet, truncate_chars};

/// The label of the lead in events, ledgers and the journal.
pub const LEAD_LABEL: &str = "lead";

/// The lead reads the repository from its own worktree, numbered 0, so that it sees the
/// base commit (not the user's uncommitted or ignored files, such as `.env`).
const LEAD_WORKTREE: u32 = 0;

/// How much of a worker's final message the lead gets back.
const WORKER_SUMMARY_CHARS: usize = 800;
/// How much of the reviewer's summary the lead gets back.
const REVIEW_SUMMARY_CHARS: usize = 500;
/// How many findings and diffstat lines the lead gets back.
const LISTED_FINDINGS: usize = 6;
const LISTED_FILES: usize = 12;

/// Why a run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not retried: the user must check out a branch.
    #[error(
        "HEAD is detached; grove needs a branch to apply its result to. Check out a branch \
         (`git switch <branch>`) and run again"
    )]
    DetachedHead,
    /// Not retried: there is nothing to branch from.
    #[error(
        "the current branch has no commits yet; grove starts from a commit. Make a first \
         commit and run again"
    )]
    UnbornHead,
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("run journal: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    AgentFile(#[from] roles::AgentFileError),
}

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
    let repo = Repo::open(repo_path, options.git.clone()).await?;
    let head = repo.head()?;
    let branch = head.branch.ok_or(RunError::DetachedHead)?;
    let base = head.commit.ok_or(RunError::UnbornHead)?;

    let store = RunStore::new(repo.common_dir());
    let run_id = store.new_run_id();
    let lock = RepoLock::acquire(repo.common_dir(), run_id.as_str())?;
    if let Some(stale) = lock.taken_over() {
        events.emit(Event::Note {
            message: stale.to_string(),
        });
    }
    let active = store.create_run(
        &lock,
        RunStart {
            task: options.task.clone(),
            base: base.to_string(),
            branch: branch.clone(),
            provider: models.provider.clone(),
            model: models.worker.name.clone(),
            options: serde_json::to_value(&options).unwrap_or_default(),
        },
    )?;
    let git_run = GitRunId::new(run_id.as_str())?;
    let user_root = repo
        .work_tree()
        .map_or_else(|| repo.common_dir().to_path_buf(), Path::to_path_buf);
    let worktrees_dir = options.worktrees_dir.clone().map_or_else(
        || repo.default_worktrees_dir(&git_run),
        |dir| dir.join(run_id.as_str()),
    );
    let orchestrator = Arc::new(Orchestrator {
        rules: read_rules(&user_root),
        repo,
        run: git_run,
        base,
        branch,
        jobs: Semaphore::new(options.jobs.max(1)),
        options,
        models,
        events,
        cancel,
        journal: Mutex::new(active),
        user_root,
        worktrees_dir,
        next_subtask: AtomicU32::new(1),
        spent_tokens: AtomicU64::new(0),
        subtasks: Mutex::new(Vec::new()),
        lead_messages: Mutex::new(Vec::new()),
    });
    let report = orchestrator.clone().execute().await;
    drop(lock);
    report
}

/// One run in progress.
pub(crate) struct Orchestrator {
    repo: Repo,
    run: GitRunId,
    base: CommitId,
    /// The user's branch, as a full ref.
    branch: String,
    options: RunOptions,
    models: Models,
    events: EventSink,
    cancel: CancellationToken,
    journal: Mutex<ActiveRun>,
    rules: Option<ProjectRules>,
    /// The user's work tree, where `.grove/agents` and the rules file are read from.
    user_root: PathBuf,
    worktrees_dir: PathBuf,
    jobs: Semaphore,
    next_subtask: AtomicU32,
    /// Tokens every finished subagent spent, for the run budget.
    spent_tokens: AtomicU64,
    subtasks: Mutex<Vec<SubtaskReport>>,
    /// The lead's history as of its latest tool-calling turn; forks start from it.
    lead_messages: Mutex<Vec<Message>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the project rules (`AGENTS.md`, else `CLAUDE.md`) from the user's work tree.
fn read_rules(root: &Path) -> Option<ProjectRules> {
    roles::RULES_FILES.iter().find_map(|file| {
        let text = std::fs::read_to_string(root.join(file)).ok()?;
        (!text.trim().is_empty()).then(|| ProjectRules {
            file: (*file).to_owned(),
            text,
        })
    })
}

impl Orchestrator {
    fn journal(&self, entry: Entry) -> Result<(), StoreError> {
        lock(&self.journal).append(entry).map(|_| ())
    }

    fn note(&self, message: impl Into<String>) {
        self.events.emit(Event::Note {
            message: message.into(),
        });
    }

    fn worktree_spec(&self, subtask: u32) -> WorktreeSpec {
        WorktreeSpec {
            run: self.run.clone(),
            subtask,
            base: self.base,
            path: self.worktrees_dir.join(subtask.to_string()),
        }
    }

    fn spec(
        &self,
        id: AgentId,
        role: &RoleDef,
        model: &ModelChoice,
        max_turns: u32,
        budget: Option<u64>,
        tools: Registry,
    ) -> AgentSpec {
        AgentSpec {
            id,
            system: roles::system_prompt(role, self.rules.as_ref()),
            model: model.client.clone(),
            model_name: role.model.clone().unwrap_or_else(|| model.name.clone()),
            max_tokens: self.options.max_output_tokens,
            max_turns: role.max_turns.unwrap_or(max_turns),
            budget_tokens: budget,
            max_consecutive_tool_errors: self.options.max_consecutive_tool_errors,
            tools,
        }
    }

    fn spend(&self, ledger: &Ledger) {
        self.spent_tokens
            .fetch_add(ledger.total_tokens(), Ordering::Relaxed);
    }

    fn run_budget_spent(&self) -> bool {
        self.options
            .budget_tokens
            .is_some_and(|budget| self.spent_tokens.load(Ordering::Relaxed) >= budget)
    }

    /// The lead's loop, then the finish; never returns an error once the run exists.
    async fn execute(self: Arc<Self>) -> Result<RunReport, RunError> {
        let result_start = self.repo.create_result_branch(&self.run, self.base).await;
        let (summary, lead_ledger, failure) = match result_start {
            Ok(_) => self.clone().run_lead().await,
            Err(error) => (
                String::new(),
                Ledger::default(),
                Some(LeadFailure::Error(error.to_string())),
            ),
        };
        self.finish(summary, lead_ledger, failure).await
    }

    async fn run_lead(self: Arc<Self>) -> (String, Ledger, Option<LeadFailure>) {
        let worktree = match self
            .repo
            .create_worktree(self.worktree_spec(LEAD_WORKTREE))
            .await
        {
            Ok(worktree) => worktree,
            Err(error) => {
                return (
                    String::new(),
                    Ledger::default(),
                    Some(LeadFailure::Error(format!(
                        "could not create the lead's worktree: {error}"
                    ))),
                );
            }
        };
        let tools = gate_registry(&tools::builtin(ToolSet::ReadOnly), &worktree).with(Arc::new(
            Delegate::new(Arc::downgrade(&self), self.agent_catalogue()),
        ));
        let role = roles::builtin(RoleKind::Lead);
        let spec = self.spec(
            AgentId {
                role: "lead".into(),
                label: LEAD_LABEL.into(),
            },
            &role,
            &self.models.lead,
            self.options.max_turns.lead,
            self.options.budget_tokens,
            tools,
        );
        let brief = format!(
            "# Task\n\n{}\n\nPlan the work, delegate it with `delegate`, and end with a summary.",
            self.options.task
        );
        let outcome = run_agent(
            &spec,
            LoopInput {
                messages: isolated_messages(&brief),
                tool_context: ToolContext {
                    root: worktree.path().to_path_buf(),
                    cancel: self.cancel.child_token(),
                },
                events: self.events.clone(),
                observer: Some(Arc::new(LeadObserver {
                    orchestrator: Arc::downgrade(&self),
                })),
            },
        )
        .await;
        self.spend(&outcome.ledger);
        if let Err(error) = self.repo.remove_worktree(&worktree).await {
            self.note(format!("could not remove the lead's worktree: {error}"));
        }
        self.delete_branch_if_unchanged(LEAD_WORKTREE).await;
        let AgentRun { ledger, result, .. } = outcome;
        match result {
            Ok(outcome) => {
                let failure = match outcome.stop {
                    StopKind::Finished => None,
                    _ if self.cancel.is_cancelled() => Some(LeadFailure::Interrupted),
                    _ => Some(LeadFailure::Stopped(format!(
                        "the lead stopped: {}: {}",
                        outcome.stop, outcome.detail
                    ))),
                };
                (outcome.final_text, ledger, failure)
            }
            Err(AgentError::Cancelled { .. }) => {
                (String::new(), ledger, Some(LeadFailure::Interrupted))
            }
            Err(error) => (
                String::new(),
                ledger,
                Some(LeadFailure::Error(error.to_string())),
            ),
        }
    }

    /// Deletes branch `n` if it still points at the base (it holds no work).
    async fn delete_branch_if_unchanged(&self, subtask: u32) {
        if let Err(error) = self.repo.delete_subtask_branch(&self.run, subtask).await {
            self.note(format!(
                "kept branch {}: {error}",
                self.run.subtask_branch(subtask)
            ));
        }
    }

    /// The user agents the lead may name in `delegate`'s `agent` field.
    fn agent_catalogue(&self) -> Vec<(String, String)> {
        let dir = self.user_root.join(".grove").join("agents");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut agents: Vec<(String, String)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_str()?.strip_suffix(".md")?.to_owned();
                match roles::load_agent(&self.user_root, &name) {
                    Ok(Some(role)) => Some((name, role.description)),
                    _ => None,
                }
            })
            .collect();
        agents.sort();
        agents
    }

    /// Runs one delegated subtask to its end and returns what the lead is told.
    pub(crate) async fn delegate(
        self: Arc<Self>,
        request: DelegateRequest,
    ) -> Result<String, DelegateRefusal> {
        if self.run_budget_spent() {
            return Err(DelegateRefusal::Model(
                "the run's token budget is spent; no more subtasks can start. Finish with a summary."
                    .into(),
            ));
        }
        let role = match request.agent.as_deref() {
            None | Some("worker") => roles::builtin(RoleKind::Worker),
            Some(name @ ("lead" | "reviewer")) => {
                return Err(DelegateRefusal::Model(format!(
                    "`{name}` cannot be delegated to; leave `agent` out for a worker"
                )));
            }
            Some(name) => match roles::load_agent(&self.user_root, name) {
                Ok(Some(role)) => role,
                Ok(None) => {
                    return Err(DelegateRefusal::Model(format!(
                        "there is no agent `{name}` (no .grove/agents/{name}.md); leave `agent` out for a worker"
                    )));
                }
                Err(error) => return Err(DelegateRefusal::Model(error.to_string())),
            },
        };
        let tools = match worker_tools(&role) {
            Ok(tools) => tools,
            Err(message) => return Err(DelegateRefusal::Model(message)),
        };
        let n = self.next_subtask.fetch_add(1, Ordering::Relaxed);
        if n > self.options.max_subtasks {
            return Err(DelegateRefusal::Model(format!(
                "the run's limit of {} subtasks is reached; finish with a summary",
                self.options.max_subtasks
            )));
        }
        let fork_from =
            (request.mode == ContextMode::Fork).then(|| lock(&self.lead_messages).clone());
        let _permit = tokio::select! {
            permit = self.jobs.acquire() => permit.map_err(|_| DelegateRefusal::Model("the run is shutting down".into()))?,
            () = self.cancel.cancelled() => return Err(DelegateRefusal::Model("cancelled".into())),
        };
        let report = self
            .run_subtask(n, &request, &role, tools, fork_from)
            .await
            .map_err(DelegateRefusal::Fatal)?;
        let result = lead_result(&report);
        lock(&self.subtasks).push(report);
        Ok(result)
    }

    /// The pipeline of subtask `n`; an error here is the journal failing (fatal).
    async fn run_subtask(
        self: &Arc<Self>,
        n: u32,
        request: &DelegateRequest,
        role: &RoleDef,
        tools: Registry,
        fork_from: Option<Vec<Message>>,
    ) -> Result<SubtaskReport, StoreError> {
        let label = format!("S{n}");
        let branch = self.run.subtask_branch(n);
        self.journal(Entry::SubtaskStarted {
            subtask: label.clone(),
            task: request.task.clone(),
            branch: branch.clone(),
            mode: request.mode,
            agent: role.name.clone(),
        })?;
        self.events.emit(Event::SubtaskStarted {
            label: label.clone(),
            task: request.task.clone(),
            branch: branch.clone(),
        });
        let mut report = SubtaskReport {
            id: label.clone(),
            task: request.task.clone(),
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
        };
        let worktree = match self.repo.create_worktree(self.worktree_spec(n)).await {
            Ok(worktree) => worktree,
            Err(error) => {
                report.reason = Some(format!("could not create the worktree: {error}"));
                return self.close_subtask(report, None).await;
            }
        };
        let stage = self
            .work_and_review(
                &label,
                request,
                role,
                tools,
                fork_from,
                &worktree,
                &mut report,
            )
            .await?;
        if let Err(reason) = stage {
            report.reason = Some(reason);
        }
        self.close_subtask(report, Some(&worktree)).await
    }

    /// Worker, commit, review, merge. `Err(reason)` when the subtask failed.
    #[allow(clippy::too_many_arguments)]
    async fn work_and_review(
        self: &Arc<Self>,
        label: &str,
        request: &DelegateRequest,
        role: &RoleDef,
        tools: Registry,
        fork_from: Option<Vec<Message>>,
        worktree: &Worktree,
        report: &mut SubtaskReport,
    ) -> Result<Result<(), String>, StoreError> {
        let messages = match &fork_from {
            Some(lead) => fork_messages(lead, &request.task),
            None => isolated_messages(&request.task),
        };
        let observer = Arc::new(CheckpointObserver {
            repo: self.repo.clone(),
            worktree: worktree.clone(),
            label: label.to_owned(),
            journal_error: Mutex::new(None),
            orchestrator: self.clone(),
        });
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
        let worker = run_agent_scoped(
            &spec,
            messages,
            worktree.path(),
            self.cancel.child_token(),
            self.events.clone(),
            observer.clone(),
        )
        .await;
        self.spend(&worker.ledger);
        report.worker_ledger = worker.ledger;
        if let Some(error) = lock(&observer.journal_error).take() {
            return Err(error);
        }
        // The final commit: whatever the worker left, even after a failure, so that
        // nothing it wrote is lost (an archive keeps it if it is not merged).
        let head = match self
            .repo
            .checkpoint(worktree, &format!("{label}: final"))
            .await
        {
            Ok(commit) => commit,
            Err(error) => return Ok(Err(format!("could not commit the worker's files: {error}"))),
        };
        if let Some(commit) = head {
            self.journal(Entry::Checkpoint {
                subtask: label.to_owned(),
                commit: commit.to_string(),
                turn: worker.ledger.steps,
            })?;
        }
        let worker_summary = match &worker.result {
            Ok(outcome) => match outcome.stop {
                StopKind::Finished | StopKind::TurnCap => outcome.final_text.clone(),
                _ => {
                    return Ok(Err(format!(
                        "the worker stopped: {}: {}",
                        outcome.stop, outcome.detail
                    )));
                }
            },
            Err(error) => return Ok(Err(format!("the worker failed: {error}"))),
        };
        report.reason = (!worker_summary.trim().is_empty()).then(|| {
            format!(
                "worker: {}",
                truncate_chars(worker_summary.trim(), WORKER_SUMMARY_CHARS)
            )
        });

        let tip = match self.repo.ref_target(&worktree.branch_ref()) {
            Ok(Some(tip)) => tip,
            Ok(None) => return Ok(Err("the subtask's branch vanished".into())),
            Err(error) => return Ok(Err(error.to_string())),
        };
        if tip == self.base {
            return Ok(Err("the worker changed no file".into()));
        }
        let diff = match self
            .repo
            .diff(self.base, tip, self.options.max_review_patch_bytes)
            .await
        {
            Ok(diff) => diff,
            Err(error) => return Ok(Err(format!("could not diff the subtask: {error}"))),
        };
        report.executes_later = executes_later(&diff.stat);
        report.diffstat = Some(diff.stat.clone());

        let verdict = match self
            .review(label, &request.task, &diff, worktree, report)
            .await
        {
            Ok(verdict) => verdict,
            Err(reason) => return Ok(Err(reason)),
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
            return Ok(Ok(()));
        }
        let message = format!(
            "grove {}: merge {label}\n\n{}\n\nGrove-Run: {}\nGrove-Subtask: {label}\n",
            self.run,
            truncate_chars(request.task.lines().next().unwrap_or_default(), 200),
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
            Err(error) => return Ok(Err(format!("could not merge: {error}"))),
        }
        Ok(Ok(()))
    }

    /// The isolated review of one diff; `Err(reason)` when no review could be had.
    async fn review(
        &self,
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
        let reviewer = run_agent_scoped(
            &spec,
            isolated_messages(&review_brief(brief, diff, &report.executes_later)),
            worktree.path(),
            self.cancel.child_token(),
            self.events.clone(),
            Arc::new(NoObserver),
        )
        .await;
        self.spend(&reviewer.ledger);
        report.reviewer_ledger = reviewer.ledger;
        if let Some(verdict) = submit.verdict() {
            return Ok(verdict);
        }
        match reviewer.result {
            Err(AgentError::Cancelled { .. }) => Err("cancelled during review".into()),
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
        &self,
        mut report: SubtaskReport,
        worktree: Option<&Worktree>,
    ) -> Result<SubtaskReport, StoreError> {
        let n: u32 = report.id[1..].parse().unwrap_or_default();
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
        if let Some(worktree) = worktree
            && !self.options.keep_worktrees
            && let Err(error) = self.repo.remove_worktree(worktree).await
        {
            self.note(format!(
                "{}: could not remove its worktree: {error}",
                report.id
            ));
        }
        if !self.options.keep_worktrees {
            // Merged work lives on in the result, the rest in its archive.
            let keep = report.status == SubtaskOutcome::Merged || report.archive_ref.is_some();
            if keep && let Err(error) = self.repo.delete_subtask_branch(&self.run, n).await {
                self.note(format!("{}: kept its branch: {error}", report.id));
            }
        }
        let ledger = report.ledger();
        report.steps = ledger.steps;
        report.input_tokens = ledger.input_tokens;
        report.output_tokens = ledger.output_tokens;
        report.cache_read_tokens = ledger.cache_read_tokens;
        report.cache_write_tokens = ledger.cache_write_tokens;
        self.journal(Entry::SubtaskFinished {
            subtask: report.id.clone(),
            status: report.status,
            ledger,
        })?;
        self.events.emit(Event::SubtaskFinished {
            label: report.id.clone(),
            status: report.status.as_str().to_owned(),
            verdict: report.verdict.map(|v| v.as_str().to_owned()),
            diffstat: report.diffstat.as_ref().map(crate::git::DiffStat::summary),
        });
        Ok(report)
    }

    async fn finish(
        &self,
        summary: String,
        lead_ledger: Ledger,
        failure: Option<LeadFailure>,
    ) -> Result<RunReport, RunError> {
        let mut subtasks = lock(&self.subtasks).clone();
        subtasks.sort_by_key(|s| s.id[1..].parse::<u32>().unwrap_or(u32::MAX));
        let result_commit = self.repo.ref_target(&self.run.result_ref())?;
        let merged_any = result_commit.is_some_and(|commit| commit != self.base);
        let (status, error) = match &failure {
            None => (RunEnd::Finished, None),
            Some(LeadFailure::Interrupted) => (RunEnd::Interrupted, Some("interrupted".to_owned())),
            Some(LeadFailure::Stopped(reason)) => (RunEnd::Finished, Some(reason.clone())),
            Some(LeadFailure::Error(reason)) => (RunEnd::Failed, Some(reason.clone())),
        };
        let mut applied = false;
        let apply = if !merged_any {
            None
        } else if !self.options.apply || status == RunEnd::Interrupted {
            Some(ApplyReport {
                message: format!(
                    "The result is on {}; your branch was not touched.",
                    self.run.result_branch()
                ),
                command: Some(format!("git merge --ff-only {}", self.run.result_branch())),
            })
        } else {
            let outcome = self
                .repo
                .apply(&ApplyRequest {
                    run: self.run.clone(),
                    branch: self.branch.clone(),
                    base: self.base,
                })
                .await;
            Some(match outcome {
                Ok(ApplyOutcome::Applied {
                    to, merged_on_top, ..
                }) => {
                    applied = true;
                    ApplyReport {
                        message: format!(
                            "{} now has the result ({}{}).",
                            short_branch(&self.branch),
                            short_hex(&to.to_string()),
                            if merged_on_top {
                                ", merged on top of your new commits"
                            } else {
                                ""
                            }
                        ),
                        command: None,
                    }
                }
                Ok(ApplyOutcome::AlreadyApplied) => {
                    applied = true;
                    ApplyReport {
                        message: format!("{} already has the result.", short_branch(&self.branch)),
                        command: None,
                    }
                }
                Ok(ApplyOutcome::Refused { reason, command }) => ApplyReport {
                    message: format!(
                        "Your branch was not touched: {}. The result is on {}.",
                        describe_refusal(&reason),
                        self.run.result_branch()
                    ),
                    command: Some(command),
                },
                Err(error) => ApplyReport {
                    message: format!(
                        "Your branch was not touched: applying failed: {error}. The result is on {}.",
                        self.run.result_branch()
                    ),
                    command: Some(format!("git merge {}", self.run.result_branch())),
                },
            })
        };
        let journal_end = match status {
            RunEnd::Interrupted => Entry::Paused {
                reason: "interrupted".into(),
            },
            RunEnd::Finished | RunEnd::Failed => Entry::RunFinished {
                status: if status == RunEnd::Failed {
                    RunOutcome::Failed
                } else {
                    RunOutcome::Finished
                },
                applied,
                result_commit: result_commit.map(|c| c.to_string()),
                error: error.clone(),
            },
        };
        self.journal(journal_end)?;
        let mut total = lead_ledger;
        for subtask in &subtasks {
            total.add(&subtask.ledger());
        }
        let run_id = self.run.as_str().to_owned();
        Ok(RunReport {
            run_id,
            status,
            base: self.base.to_string(),
            branch: self.branch.clone(),
            result_commit: result_commit.map(|c| c.to_string()),
            result_branch: self.run.result_branch(),
            applied,
            apply,
            summary,
            error,
            subtasks,
            lead_ledger,
            totals: Totals::from(total),
        })
    }
}

/// Why the lead did not finish normally.
enum LeadFailure {
    Interrupted,
    /// The lead stopped itself (turn cap, budget...): the run still finishes.
    Stopped(String),
    Error(String),
}

/// Why a `delegate` call did not produce a subtask.
pub(crate) enum DelegateRefusal {
    /// The lead should read this and adapt.
    Model(String),
    /// The run cannot go on (the journal failed).
    Fatal(StoreError),
}

/// The worker's tools: the kind's default set, or the agent file's `tools` list (which
/// may only name worker tools).
fn worker_tools(role: &RoleDef) -> Result<Registry, String> {
    let all = tools::builtin(ToolSet::Worker);
    let Some(names) = &role.tools else {
        return Ok(all);
    };
    names.iter().try_fold(Registry::new(), |registry, name| {
        all.get(name).cloned().map(|tool| registry.with(tool)).ok_or_else(|| {
            format!(
                "agent `{}` lists tool `{name}`, which workers do not have; worker tools are: {}",
                role.name,
                all.names().join(", ")
            )
        })
    })
}

async fn run_agent_scoped(
    spec: &AgentSpec,
    messages: Vec<Message>,
    root: &Path,
    cancel: CancellationToken,
    events: EventSink,
    observer: Arc<dyn TurnObserver>,
) -> AgentRun {
    run_agent(
        spec,
        LoopInput {
            messages,
            tool_context: ToolContext {
                root: root.to_path_buf(),
                cancel,
            },
            events,
            observer: Some(observer),
        },
    )
    .await
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
            "Attention: this diff changes files that run on the host or in CI later; \
             check that each change is needed and harmless:\n",
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
    text.push_str("```\n\nThe resulting tree is your working directory; read what you need. ");
    text.push_str("Then call `submit_verdict`.");
    text
}

/// The short result a lead gets for one subtask: status, verdict, findings, diffstat.
fn lead_result(report: &SubtaskReport) -> String {
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
        text.push_str(&format!("{}\n", reason));
    }
    if let Some(summary) = &report.review_summary {
        text.push_str(&format!(
            "review: {}\n",
            truncate_chars(summary, REVIEW_SUMMARY_CHARS)
        ));
    }
    for finding in report.findings.iter().take(LISTED_FINDINGS) {
        let place = match finding.line {
            Some(line) => format!("{}:{line}", finding.path),
            None => finding.path.clone(),
        };
        text.push_str(&format!(
            "- {place}: {}\n",
            truncate_chars(&finding.problem, 200)
        ));
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

fn short_branch(full: &str) -> &str {
    full.strip_prefix("refs/heads/").unwrap_or(full)
}

fn short_hex(hex: &str) -> &str {
    &hex[..hex.len().min(10)]
}

fn describe_refusal(reason: &crate::git::RefusalReason) -> String {
    use crate::git::RefusalReason as R;
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

/// The lead's observer: keeps the history forks start from.
struct LeadObserver {
    orchestrator: std::sync::Weak<Orchestrator>,
}

#[async_trait]
impl TurnObserver for LeadObserver {
    async fn before_tools(&self, _turn: u32, messages: &[Message]) -> Result<(), String> {
        if let Some(orchestrator) = self.orchestrator.upgrade() {
            *lock(&orchestrator.lead_messages) = messages.to_vec();
        }
        Ok(())
    }

    async fn after_turn(&self, _turn: u32, _mutated: bool) -> Result<(), String> {
        Ok(())
    }
}

/// A worker's observer: commits a checkpoint after every turn that changed files.
struct CheckpointObserver {
    repo: Repo,
    worktree: Worktree,
    label: String,
    orchestrator: Arc<Orchestrator>,
    /// A journal failure, kept so the subtask ends as fatal rather than as a tool error.
    journal_error: Mutex<Option<StoreError>>,
}

#[async_trait]
impl TurnObserver for CheckpointObserver {
    async fn after_turn(&self, turn: u32, mutated: bool) -> Result<(), String> {
        if !mutated {
            return Ok(());
        }
        let commit = self
            .repo
            .checkpoint(&self.worktree, &format!("{}: turn {turn}", self.label))
            .await
            .map_err(|error| format!("checkpoint commit failed: {error}"))?;
        if let Some(commit) = commit
            && let Err(error) = self.orchestrator.journal(Entry::Checkpoint {
                subtask: self.label.clone(),
                commit: commit.to_string(),
                turn,
            })
        {
            let message = error.to_string();
            *lock(&self.journal_error) = Some(error);
            return Err(message);
        }
        Ok(())
    }
}

struct NoObserver;

#[async_trait]
impl TurnObserver for NoObserver {
    async fn after_turn(&self, _turn: u32, _mutated: bool) -> Result<(), String> {
        Ok(())
    }
}
