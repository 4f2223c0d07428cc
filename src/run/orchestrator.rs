//! The orchestrator: one run from the user's task to an applied result.
//!
//! This file owns the run's lifecycle — checks, lock, journal, the lead's loop, resume
//! after a crash or an interrupt, and the final apply; `subtask.rs` owns one subtask's
//! pipeline. It is the only place that combines agents with git. It must never let
//! anything but a subtask's short result cross back to the lead, and never touch the
//! user's branch before the end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::roles::{self, ProjectRules, RoleDef, RoleKind};
use crate::agent::{
    AgentError, AgentRun, AgentSpec, Ledger, StopKind, TurnObserver, TurnState, isolated_messages,
};
use crate::event::{AgentId, Event, EventSink};
use crate::git::{
    ApplyOutcome, ApplyRequest, CommitId, GitError, GitOptions, Repo, RunId as GitRunId, Worktree,
    WorktreeSpec,
};
use crate::model::Message;
use crate::run::delegate::Delegate;
use crate::run::gate::gate_registry;
use crate::run::prepare::{LocalFileError, check_local_files};
use crate::run::report::{ApplyReport, RunEnd, RunReport, SubtaskReport, Totals};
use crate::run::subtask::{self, DelegateRequest};
use crate::settings::options::{ModelChoice, Models, RunOptions};
use crate::store::durable::{self, Durability};
use crate::store::journal::{self, Entry, RunOutcome};
use crate::store::lock::{LockError, RepoLock};
use crate::store::state::{RunState, SubtaskStatus};
use crate::store::transcript::{self, AgentEnd, AgentTiming, Transcript};
use crate::store::{ActiveRun, RunId, RunStart, RunStore, StoreError};
use crate::tools::sandbox::{self, SandboxError, SandboxMode, SandboxPolicy, SandboxedExecutor};
use crate::tools::{self, CommandExecutor, LocalExecutor, Registry, ToolSet};

/// The label of the lead in events, ledgers, transcripts and the journal.
pub const LEAD_LABEL: &str = "lead";

/// The lead reads the repository from its own worktree, numbered 0, so that it sees the
/// base commit (not the user's uncommitted or ignored files, such as `.env`).
const LEAD_WORKTREE: u32 = 0;
/// The longest a finished subtask's worktree cleanup waits for the others to settle.
const CLEANUP_HOLD: std::time::Duration = std::time::Duration::from_secs(30);
/// At most this many worktrees are registered ahead of the lead's delegations.
const MAX_PREPARED_WORKTREES: u32 = 8;

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
    /// Not retried: a bare repository has no files for the agents to read.
    #[error("the repository has no work tree (it is bare); run grove in a checkout")]
    NoWorkTree,
    /// Not retried: the run's journal names a base or branch grove cannot read.
    #[error("run {run_id} cannot be resumed: {reason}")]
    NotResumable { run_id: String, reason: String },
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("{0}")]
    Lock(#[from] LockError),
    #[error("run journal: {0}")]
    Store(#[from] StoreError),
    /// Not retried: this system cannot confine workers' commands; the message says how to
    /// proceed (a capable kernel, or `--sandbox off`).
    #[error("{}", sandbox::refusal_advice(.0))]
    Sandbox(#[source] SandboxError),
    /// Not retried: writing the run's state failed mid-run (a full disk, say). What was
    /// reported durable is intact, so the run resumes once the cause is fixed.
    #[error(
        "run {run_id} stopped: its state could not be written: {source}. Everything \
         recorded before is intact; fix the cause (e.g. free disk space), then \
         `grove resume {run_id}` continues the run"
    )]
    StateNotWritten {
        run_id: String,
        #[source]
        source: StoreError,
    },
    /// Not retried: a `worktree.copy` file is missing, tracked or outside the repository.
    #[error("{0}")]
    LocalFile(#[from] LocalFileError),
}

/// The executor workers' `bash` runs through, as the options say: the sandbox, checked to
/// work before anything starts, or (loudly) none.
///
/// Besides the user's secrets, sandboxed commands cannot read the user's work tree (its
/// uncommitted and ignored files, such as `.env`) nor the run store (journal, other
/// agents' transcripts, other worktrees): a worker sees its own worktree and the
/// repository's git data, as its isolation promises.
fn command_executor(
    options: &RunOptions,
    repo: &Repo,
    events: &EventSink,
) -> Result<Arc<dyn CommandExecutor>, RunError> {
    let env = options.commands.env();
    match options.sandbox {
        SandboxMode::On => {
            sandbox::probe(&options.commands).map_err(RunError::Sandbox)?;
            let policy = SandboxPolicy {
                allow_network: options.allow_network,
                ..SandboxPolicy::default()
            };
            if options.allow_network {
                events.emit(Event::Note {
                    message: "the network is open to workers' shell commands \
                              (--allow-network); the rest of the sandbox holds"
                        .into(),
                });
            }
            // The run store, the user's work tree, and every worktree grove keeps (each
            // command's own worktree stays granted): a worker sees the base and its own
            // work only, wherever the cache or `[worktree] dir` puts the others.
            let mut hidden = vec![
                repo.common_dir().join("grove"),
                repo.worktrees_home().to_path_buf(),
            ];
            hidden.extend(options.worktrees_dir.clone());
            hidden.extend(repo.work_tree().map(Path::to_path_buf));
            let readable = [repo.common_dir().to_path_buf()];
            Ok(Arc::new(
                SandboxedExecutor::new(policy, env).hiding(&hidden, &readable),
            ))
        }
        SandboxMode::Off => {
            events.emit(Event::Note {
                message: "WARNING: --sandbox off: workers' shell commands run UNCONFINED, \
                          with your full rights: they can read your secrets (~/.ssh, ~/.aws, \
                          ...), write anywhere you can, use the network and leave processes \
                          behind. This choice is recorded in the run's journal."
                    .into(),
            });
            Ok(Arc::new(LocalExecutor::with_env(env)))
        }
    }
}

/// Names the run in a state-write failure that happened after the run started.
fn resumable_on_store_error(
    run_id: &RunId,
    report: Result<RunReport, RunError>,
) -> Result<RunReport, RunError> {
    report.map_err(|error| match error {
        RunError::Store(source) => RunError::StateNotWritten {
            run_id: run_id.to_string(),
            source,
        },
        other => other,
    })
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
    check_local_files(&repo, base, &options.worktree_setup.copy)?;
    let executor = command_executor(&options, &repo, &events)?;

    let store = RunStore::new(repo.common_dir());
    let run_id = store.new_run_id();
    let lock = acquire(&repo, &run_id, &events)?;
    let mut recorded = options.clone();
    recorded.model_names = models.names();
    let active = store.create_run(
        &lock,
        RunStart {
            task: options.task.clone(),
            base: base.to_string(),
            branch: branch.clone(),
            provider: models.provider.clone(),
            model: models.worker.name.clone(),
            options: recorded,
        },
    )?;
    let orchestrator = Orchestrator::new(
        repo, &run_id, base, branch, options, models, events, cancel, active, executor,
    )?;
    let report = orchestrator.execute(None).await;
    drop(lock);
    resumable_on_store_error(&run_id, report)
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
    let repo = Repo::open(repo_path, git.clone()).await?;
    let store = RunStore::new(repo.common_dir());
    let run_id: RunId = run_id.parse()?;
    let lock = acquire(&repo, &run_id, &events)?;
    let mut active = store.resume_run(&lock)?;
    active.append(Entry::Resumed {
        pid: std::process::id(),
    })?;
    let state = active.state().clone();
    let not_resumable = |reason: String| RunError::NotResumable {
        run_id: run_id.to_string(),
        reason,
    };
    let base = CommitId::parse(&state.base).map_err(|error| not_resumable(error.to_string()))?;
    let mut options: RunOptions = state
        .options
        .get()
        .map_err(|error| not_resumable(error.to_string()))?
        .clone();
    options.git = git;
    check_local_files(&repo, base, &options.worktree_setup.copy)?;
    let executor = command_executor(&options, &repo, &events)?;
    let models = models(&state)?;
    for call in &state.interrupted_tool_calls {
        events.emit(Event::Note {
            message: format!(
                "{}: tool call {} ({}) was running when grove stopped; it is not run again",
                call.subtask, call.call_id, call.tool
            ),
        });
    }
    let orchestrator = Orchestrator::new(
        repo,
        &run_id,
        base,
        state.branch.clone(),
        options,
        models,
        events,
        cancel,
        active,
        executor,
    )?;
    let report = orchestrator.execute(Some(state)).await;
    drop(lock);
    resumable_on_store_error(&run_id, report)
}

fn acquire(repo: &Repo, run_id: &RunId, events: &EventSink) -> Result<RepoLock, RunError> {
    let lock = RepoLock::acquire(repo.common_dir(), run_id.as_str())?;
    if let Some(stale) = lock.taken_over() {
        events.emit(Event::Note {
            message: stale.to_string(),
        });
    }
    Ok(lock)
}

/// One run in progress.
pub(crate) struct Orchestrator {
    pub(crate) repo: Repo,
    pub(crate) run: GitRunId,
    pub(crate) base: CommitId,
    /// The user's branch, as a full ref.
    branch: String,
    pub(crate) options: RunOptions,
    pub(crate) models: Models,
    pub(crate) events: EventSink,
    pub(crate) cancel: CancellationToken,
    journal: Mutex<ActiveRun>,
    run_dir: PathBuf,
    rules: Option<ProjectRules>,
    /// The user's work tree, where `.grove/agents` and the rules file are read from.
    pub(crate) user_root: PathBuf,
    worktrees_dir: PathBuf,
    pub(crate) jobs: Semaphore,
    /// Every subtask pipeline, so the run ends only after each one has checkpointed.
    pub(crate) tasks: TaskTracker,
    pub(crate) next_subtask: AtomicU32,
    /// Tokens every finished subagent spent, for the run budget.
    spent_tokens: AtomicU64,
    pub(crate) subtasks: Mutex<Vec<SubtaskReport>>,
    /// The lead's history as of its latest tool-calling turn; forks start from it.
    pub(crate) lead_messages: Mutex<Vec<Message>>,
    /// Why the run paused itself (the model API failed), if it did.
    pause_reason: Mutex<Option<String>>,
    /// Worktrees registered ahead of the lead's delegations (while its first model call is
    /// in flight), by subtask number; unused ones are removed when the run ends.
    prepared: Mutex<BTreeMap<u32, JoinHandle<Result<Worktree, GitError>>>>,
    /// Subtask numbers whose outcome is settled; approved subtasks merge in number order.
    settled: Mutex<BTreeSet<u32>>,
    settled_changed: Notify,
    /// How workers' `bash` commands run (the sandbox, unless the run turned it off).
    pub(crate) executor: Arc<dyn CommandExecutor>,
    /// The removal of the lead's worktree and branch once its loop ended; the finish
    /// awaits it (alongside the apply) before the run's end is journaled.
    lead_cleanup: Mutex<Option<JoinHandle<()>>>,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The user agents (name, description) in `root`'s `.grove/agents` that a lead may name.
pub(crate) fn agent_catalogue(root: &Path) -> Vec<(String, String)> {
    let dir = root.join(".grove").join("agents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut agents: Vec<(String, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.strip_suffix(".md")?.to_owned();
            match roles::load_agent(root, &name) {
                Ok(Some(role)) => Some((name, role.description)),
                _ => None,
            }
        })
        .collect();
    agents.sort();
    agents
}

/// The role a `delegate` call names, refused with a message for the lead.
pub(crate) fn delegate_role(root: &Path, request: &DelegateRequest) -> Result<RoleDef, String> {
    match request.agent.as_deref() {
        None | Some("worker") => Ok(roles::builtin(RoleKind::Worker)),
        Some(name @ ("lead" | "reviewer")) => Err(format!(
            "`{name}` cannot be delegated to; leave `agent` out for a worker"
        )),
        Some(name) => match roles::load_agent(root, name) {
            Ok(Some(role)) => Ok(role),
            Ok(None) => Err(format!(
                "there is no agent `{name}` (no .grove/agents/{name}.md); leave `agent` out \
                 for a worker"
            )),
            Err(error) => Err(error.to_string()),
        },
    }
}

/// Reads the project rules (`AGENTS.md`, else `CLAUDE.md`) from the user's work tree.
pub(crate) fn read_rules(root: &Path) -> Option<ProjectRules> {
    roles::RULES_FILES.iter().find_map(|file| {
        let text = std::fs::read_to_string(root.join(file)).ok()?;
        (!text.trim().is_empty()).then(|| ProjectRules {
            file: (*file).to_owned(),
            text,
        })
    })
}

/// Why the lead did not finish normally.
enum LeadFailure {
    Interrupted,
    /// The lead stopped itself (turn cap, budget...): the run still finishes.
    Stopped(String),
    Error(String),
}

impl Orchestrator {
    #[allow(clippy::too_many_arguments)]
    fn new(
        repo: Repo,
        run_id: &RunId,
        base: CommitId,
        branch: String,
        options: RunOptions,
        models: Models,
        events: EventSink,
        cancel: CancellationToken,
        active: ActiveRun,
        executor: Arc<dyn CommandExecutor>,
    ) -> Result<Arc<Self>, RunError> {
        let run = run_id.clone();
        let user_root = repo
            .work_tree()
            .map_or_else(|| repo.common_dir().to_path_buf(), Path::to_path_buf);
        // Where this run's worktrees already are, if any (a resume), else where they go.
        let worktrees_dir = repo.run_worktrees_dir(&run, options.worktrees_dir.as_deref())?;
        Ok(Arc::new(Self {
            rules: read_rules(&user_root),
            run_dir: active.dir().to_path_buf(),
            repo,
            run,
            base,
            branch,
            jobs: Semaphore::new(options.jobs.max(1)),
            tasks: TaskTracker::new(),
            options,
            models,
            events,
            cancel,
            journal: Mutex::new(active),
            user_root,
            worktrees_dir,
            next_subtask: AtomicU32::new(1),
            prepared: Mutex::new(BTreeMap::new()),
            spent_tokens: AtomicU64::new(0),
            subtasks: Mutex::new(Vec::new()),
            lead_messages: Mutex::new(Vec::new()),
            pause_reason: Mutex::new(None),
            settled: Mutex::new(BTreeSet::new()),
            settled_changed: Notify::new(),
            executor,
            lead_cleanup: Mutex::new(None),
        }))
    }

    /// Journals `entry` (most records are fsynced; see the store), off the runtime's
    /// threads: subtasks journal at the same moments, and wait for each other here.
    pub(crate) fn journal(&self, entry: Entry) -> Result<(), StoreError> {
        durable::off_the_runtime(|| lock(&self.journal).append(entry).map(|_| ()))
    }

    /// Marks subtask `n` as settled: it will not merge anything (any more).
    pub(crate) fn settle(&self, n: u32) {
        lock(&self.settled).insert(n);
        self.settled_changed.notify_waiters();
    }

    /// Waits until every subtask numbered below `n` is settled, so that approved work
    /// merges in a deterministic order (subtask number) whatever the timing; `false`
    /// when the run was interrupted meanwhile.
    pub(crate) async fn wait_for_merge_turn(&self, n: u32) -> bool {
        loop {
            let notified = self.settled_changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if (1..n).all(|k| lock(&self.settled).contains(&k)) {
                return true;
            }
            tokio::select! {
                () = notified => {}
                () = self.cancel.cancelled() => return false,
            }
        }
    }

    /// Waits until every subtask delegated so far is settled (or the run is cancelled, or
    /// a while has passed): worktree cleanups wait for it, so their git processes do not
    /// compete with the merges that the lead is waiting for.
    pub(crate) async fn all_settled(&self) {
        let wait = async {
            loop {
                let notified = self.settled_changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let delegated = self.next_subtask.load(Ordering::Relaxed);
                if (1..delegated).all(|k| lock(&self.settled).contains(&k)) {
                    return;
                }
                tokio::select! {
                    () = notified => {}
                    () = self.cancel.cancelled() => return,
                }
            }
        };
        // A cleanup is never held back for long, whatever happens to the other subtasks.
        let _ = tokio::time::timeout(CLEANUP_HOLD, wait).await;
    }

    /// Stops the whole run in a resumable state: the model API failed past its retries
    /// (an outage, a revoked key, a spent balance), so no subagent can go on, and nothing
    /// they did is judged a failure. The first reason is kept.
    pub(crate) fn pause(&self, reason: String) {
        lock(&self.pause_reason).get_or_insert(reason);
        self.cancel.cancel();
    }

    pub(crate) fn note(&self, message: impl Into<String>) {
        self.events.emit(Event::Note {
            message: message.into(),
        });
    }

    pub(crate) fn worktree_spec(&self, subtask: u32) -> WorktreeSpec {
        WorktreeSpec {
            run: self.run.clone(),
            subtask,
            base: self.base,
            path: self.worktrees_dir.join(subtask.to_string()),
        }
    }

    /// Registers the worktrees of the next subtasks in the background, as many as may run
    /// at once: registrations are serialised, so doing them while the lead's first model
    /// call is in flight keeps them off the workers' critical path.
    fn prepare_worktrees(&self) {
        let next = self.next_subtask.load(Ordering::Relaxed);
        let remaining = (self.options.max_subtasks + 1).saturating_sub(next);
        let count = u32::try_from(self.options.jobs)
            .unwrap_or(u32::MAX)
            .min(remaining)
            .min(MAX_PREPARED_WORKTREES);
        let mut prepared = lock(&self.prepared);
        for n in next..next + count {
            let repo = self.repo.clone();
            let spec = self.worktree_spec(n);
            prepared.insert(
                n,
                tokio::spawn(async move { repo.create_worktree(spec).await }),
            );
        }
    }

    /// The worktree registered ahead for subtask `n`, if there is one.
    pub(crate) async fn take_prepared_worktree(
        &self,
        n: u32,
    ) -> Option<Result<Worktree, GitError>> {
        let handle = lock(&self.prepared).remove(&n)?;
        handle.await.ok()
    }

    /// Removes the worktrees registered ahead that no subtask used, with their branches
    /// (which hold nothing but the base).
    async fn remove_unused_worktrees(&self) {
        let unused = std::mem::take(&mut *lock(&self.prepared));
        for (n, handle) in unused {
            let Ok(Ok(worktree)) = handle.await else {
                continue;
            };
            if let Err(error) = self.repo.remove_worktree(&worktree).await {
                self.note(format!("could not remove unused worktree {n}: {error}"));
            }
            if let Err(error) = self.repo.delete_subtask_branch(&self.run, n).await {
                self.note(format!("kept unused branch {n}: {error}"));
            }
        }
    }

    pub(crate) fn transcript_path(&self, label: &str, role: &str) -> PathBuf {
        transcript::transcript_path(&self.run_dir, label, role)
    }

    pub(crate) fn spec(
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

    pub(crate) fn spend(&self, ledger: &Ledger) {
        // Saturating, like the ledger: absurd usage must not wrap under the budget.
        let spent = ledger.total_tokens();
        let _ = self
            .spent_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                Some(total.saturating_add(spent))
            });
    }

    pub(crate) fn run_budget_spent(&self) -> bool {
        self.options
            .budget_tokens
            .is_some_and(|budget| self.spent_tokens.load(Ordering::Relaxed) >= budget)
    }

    /// The lead's loop (after resuming interrupted subtasks), then the finish; never
    /// returns an error once the run exists.
    async fn execute(self: Arc<Self>, resumed: Option<RunState>) -> Result<RunReport, RunError> {
        if let Err(error) = self.repo.create_result_branch(&self.run, self.base).await {
            let failure = LeadFailure::Error(error.to_string());
            return self
                .finish(String::new(), Ledger::default(), Some(failure))
                .await;
        }
        let mut lead_history = None;
        if let Some(state) = &resumed {
            match self.clone().resume_subtasks(state).await {
                Ok(history) => lead_history = history,
                Err(error) => {
                    let failure = LeadFailure::Error(format!("the run journal failed: {error}"));
                    return self
                        .finish(String::new(), Ledger::default(), Some(failure))
                        .await;
                }
            }
        }
        let (summary, lead_ledger, failure) = self.clone().run_lead(lead_history).await;
        self.tasks.close();
        self.tasks.wait().await;
        self.remove_unused_worktrees().await;
        self.finish(summary, lead_ledger, failure).await
    }

    /// Restores the subtasks of a resumed run: finished ones as reported, interrupted
    /// ones continued to their end. Returns the lead's saved transcript with its pending
    /// calls answered (delegate calls with their subtask's result).
    async fn resume_subtasks(
        self: Arc<Self>,
        state: &RunState,
    ) -> Result<Option<Transcript>, StoreError> {
        let mut highest = 0;
        let mut continuing = Vec::new();
        for subtask in &state.subtasks {
            let n: u32 = subtask.id.trim_start_matches('S').parse().unwrap_or(0);
            highest = highest.max(n);
            self.spend(&subtask.ledger);
            if subtask.status == SubtaskStatus::Running {
                continuing.push((n, subtask.clone()));
            } else {
                lock(&self.subtasks).push(subtask::report_from_state(subtask));
            }
        }
        self.next_subtask.store(highest + 1, Ordering::Relaxed);
        // Numbers that never started a subtask (refused, or lost in a crash before the
        // journal had them) have nothing to merge.
        for k in 1..=highest {
            if !continuing.iter().any(|(n, _)| *n == k) {
                self.settle(k);
            }
        }
        let mut tasks = Vec::new();
        for (n, state) in continuing {
            let orchestrator = self.clone();
            tasks.push(async move { orchestrator.resume_subtask(n, &state).await });
        }
        for result in futures_util::future::join_all(tasks).await {
            let report = result?;
            lock(&self.subtasks).push(report);
        }

        let lead = match transcript::load(&self.transcript_path(LEAD_LABEL, "lead")) {
            Ok(lead) => lead,
            Err(error) => {
                self.note(format!("the lead starts over: {error}"));
                None
            }
        };
        Ok(lead.map(|mut lead| {
            let subtasks = lock(&self.subtasks).clone();
            let mut used = vec![false; subtasks.len()];
            transcript::answer_pending(&mut lead.messages, |_, name, input| {
                if name != "delegate" {
                    return None;
                }
                let task = input.get("task")?.as_str()?;
                let index = subtasks
                    .iter()
                    .enumerate()
                    .position(|(i, s)| !used[i] && s.task == task)?;
                used[index] = true;
                Some(subtask::lead_result(&subtasks[index]))
            });
            lead
        }))
    }

    async fn run_lead(
        self: Arc<Self>,
        resumed: Option<Transcript>,
    ) -> (String, Ledger, Option<LeadFailure>) {
        let worktree = match self
            .repo
            .create_worktree(self.worktree_spec(LEAD_WORKTREE))
            .await
        {
            Ok(worktree) => worktree,
            Err(error) => {
                let failure =
                    LeadFailure::Error(format!("could not create the lead's worktree: {error}"));
                return (String::new(), Ledger::default(), Some(failure));
            }
        };
        self.prepare_worktrees();
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
        let (messages, earlier, earlier_timing) = match resumed {
            Some(transcript) => (transcript.messages, transcript.ledger, transcript.timing),
            None => (
                isolated_messages(&format!(
                    "# Task\n\n{}\n\nPlan the work, delegate it with `delegate`, and end with \
                     a summary.",
                    self.options.task
                )),
                Ledger::default(),
                AgentTiming::default(),
            ),
        };
        let observer = Arc::new(
            AgentObserver::new(
                &self,
                LEAD_LABEL,
                self.transcript_path(LEAD_LABEL, "lead"),
                earlier,
                None,
                true,
            )
            .with_timing(&spec.model_name, earlier_timing),
        );
        let outcome = self
            .run_agent_in(&spec, messages, &worktree, observer.clone())
            .await;
        observer.finished(&outcome.ledger);
        self.spend(&outcome.ledger);
        // Off the way to the apply, which runs meanwhile: nothing the lead touched is in
        // the result or the user's branch.
        let (repo, run, events) = (self.repo.clone(), self.run.clone(), self.events.clone());
        let cleanup = tokio::spawn(async move {
            let note = |message: String| events.emit(Event::Note { message });
            if let Err(error) = repo.remove_worktree(&worktree).await {
                note(format!("could not remove the lead's worktree: {error}"));
            }
            if let Err(error) = repo.delete_subtask_branch(&run, LEAD_WORKTREE).await {
                note(format!("kept the lead's branch: {error}"));
            }
        });
        *lock(&self.lead_cleanup) = Some(cleanup);
        let AgentRun { result, .. } = outcome;
        let mut ledger = earlier;
        ledger.add(&outcome.ledger);
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
            Err(AgentError::Model { source, .. }) => {
                self.pause(format!("the model API failed for the lead: {source}"));
                (String::new(), ledger, Some(LeadFailure::Interrupted))
            }
            Err(error) => (
                String::new(),
                ledger,
                Some(LeadFailure::Error(error.to_string())),
            ),
        }
    }

    /// The user agents the lead may name in `delegate`'s `agent` field.
    fn agent_catalogue(&self) -> Vec<(String, String)> {
        agent_catalogue(&self.user_root)
    }

    /// The role a `delegate` call names, refused with a message for the lead.
    pub(crate) fn delegate_role(&self, request: &DelegateRequest) -> Result<RoleDef, String> {
        delegate_role(&self.user_root, request)
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
        let paused = lock(&self.pause_reason).clone();
        let (status, error) = match (&failure, paused) {
            (Some(LeadFailure::Interrupted), Some(reason)) => (
                RunEnd::Paused,
                Some(format!(
                    "{reason}. The run is paused with its work checkpointed; when the API \
                     answers again, `grove resume {}` continues it",
                    self.run
                )),
            ),
            (None, _) => (RunEnd::Finished, None),
            (Some(LeadFailure::Interrupted), None) => (
                RunEnd::Interrupted,
                Some(format!(
                    "interrupted; `grove resume {}` continues the run",
                    self.run
                )),
            ),
            (Some(LeadFailure::Stopped(reason)), _) => (RunEnd::Finished, Some(reason.clone())),
            (Some(LeadFailure::Error(reason)), _) => (RunEnd::Failed, Some(reason.clone())),
        };
        let apply = async {
            if !merged_any {
                (false, None)
            } else if !self.options.apply || matches!(status, RunEnd::Interrupted | RunEnd::Paused)
            {
                let report = ApplyReport {
                    message: format!(
                        "The result is on {}; your branch was not touched.",
                        self.run.result_branch()
                    ),
                    command: Some(format!("git merge --ff-only {}", self.run.result_branch())),
                };
                (false, Some(report))
            } else {
                self.apply().await
            }
        };
        let lead_cleanup = lock(&self.lead_cleanup).take();
        let cleaned = async {
            if let Some(cleanup) = lead_cleanup
                && let Err(error) = cleanup.await
            {
                self.note(format!("the lead's worktree cleanup stopped: {error}"));
            }
        };
        // Everything is done before the run's end is journaled.
        let ((applied, apply), ()) = tokio::join!(apply, cleaned);
        let journal_end = match status {
            RunEnd::Interrupted | RunEnd::Paused => Entry::Paused {
                reason: error.clone().unwrap_or_else(|| "interrupted".into()),
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
        Ok(RunReport {
            run_id: self.run.as_str().to_owned(),
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

    /// Moves the user's branch to the result when the git layer says it is safe.
    async fn apply(&self) -> (bool, Option<ApplyReport>) {
        let branch = self
            .branch
            .strip_prefix("refs/heads/")
            .unwrap_or(&self.branch);
        let result_branch = self.run.result_branch();
        let outcome = self
            .repo
            .apply(&ApplyRequest {
                run: self.run.clone(),
                branch: self.branch.clone(),
                base: self.base,
            })
            .await;
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
                        "{branch} now has the result ({}{how}).",
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
                    "Your branch was not touched: {}. The result is on {result_branch}.",
                    describe_refusal(&reason)
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
}

pub(crate) fn describe_refusal(reason: &crate::git::RefusalReason) -> String {
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

/// Every agent's observer: saves its transcript around each tool-calling turn, keeps
/// the lead's history for forks, and commits a worker's checkpoint after each turn
/// that changed files.
pub(crate) struct AgentObserver {
    pub(crate) orchestrator: std::sync::Weak<Orchestrator>,
    pub(crate) label: String,
    pub(crate) transcript: PathBuf,
    /// What the agent spent before a resume, so the saved ledger stays whole.
    pub(crate) earlier: Ledger,
    pub(crate) checkpoint: Option<(Repo, Worktree)>,
    pub(crate) is_lead: bool,
    /// The checkpoint commit of the latest mutating turn, running while the next model
    /// call is in flight: it is off the critical path, and awaited before any further
    /// tool runs or the subtask goes on, so it never races the files it commits.
    pub(crate) pending_checkpoint: tokio::sync::Mutex<Option<JoinHandle<Result<(), String>>>>,
    /// When the agent started and answered, saved with its transcript for reports.
    pub(crate) timing: Mutex<AgentTiming>,
}

impl AgentObserver {
    /// An observer for the agent `label`, saving its transcript at `transcript`.
    pub(crate) fn new(
        orchestrator: &Arc<Orchestrator>,
        label: &str,
        transcript: PathBuf,
        earlier: Ledger,
        checkpoint: Option<(Repo, Worktree)>,
        is_lead: bool,
    ) -> Self {
        Self {
            orchestrator: Arc::downgrade(orchestrator),
            label: label.to_owned(),
            transcript,
            earlier,
            checkpoint,
            is_lead,
            pending_checkpoint: tokio::sync::Mutex::new(None),
            timing: Mutex::new(AgentTiming {
                started_ms: Some(journal::now_ms()),
                ..AgentTiming::default()
            }),
        }
    }

    /// Records `model` as the agent's model and carries on the timing of its earlier
    /// run (before a resume), keeping its first start.
    pub(crate) fn with_timing(self, model: &str, earlier: AgentTiming) -> Self {
        {
            let mut timing = lock(&self.timing);
            timing.started_ms = earlier.started_ms.or(timing.started_ms);
            timing.turn_ms = earlier.turn_ms;
            timing.model = Some(model.to_owned());
        }
        self
    }

    /// Saves when the agent's loop ended and what it cost in all (`loop_ledger` is this
    /// run's; earlier runs are added). A failure is noted, not fatal: only reports lose.
    pub(crate) fn finished(&self, loop_ledger: &Ledger) {
        let mut ledger = self.earlier;
        ledger.add(loop_ledger);
        let end = AgentEnd {
            ended_ms: journal::now_ms(),
            ledger,
        };
        if let Err(error) = transcript::save_end(&transcript::end_path(&self.transcript), &end)
            && let Some(orchestrator) = self.orchestrator.upgrade()
        {
            orchestrator.note(format!("{}: {error}", self.label));
        }
    }

    fn save(&self, state: TurnState<'_>, durability: Durability) -> Result<(), String> {
        let mut ledger = self.earlier;
        ledger.add(state.ledger);
        let transcript = Transcript {
            messages: state.messages.to_vec(),
            ledger,
            timing: lock(&self.timing).clone(),
        };
        durable::off_the_runtime(|| {
            transcript::save_with(&self.transcript, &transcript, durability)
        })
        .map_err(|error| format!("cannot save the transcript: {error}"))
    }

    /// Waits for the checkpoint commit in flight, if any; its failure, if it failed.
    pub(crate) async fn flush(&self) -> Result<(), String> {
        let pending = self.pending_checkpoint.lock().await.take();
        match pending {
            None => Ok(()),
            Some(task) => task
                .await
                .map_err(|error| format!("the checkpoint task failed: {error}"))?,
        }
    }
}

#[async_trait]
impl TurnObserver for AgentObserver {
    async fn before_tools(&self, state: TurnState<'_>) -> Result<(), String> {
        // Called once per turn that calls tools, right after its answer arrived.
        lock(&self.timing).turn_ms.push(journal::now_ms());
        self.flush().await?;
        if self.is_lead
            && let Some(orchestrator) = self.orchestrator.upgrade()
        {
            *lock(&orchestrator.lead_messages) = state.messages.to_vec();
        }
        // Synced: the tool calls about to run must be on disk before they run, so that
        // after any crash they are answered as interrupted, never run a second time.
        self.save(state, Durability::Synced)
    }

    async fn after_turn(&self, state: TurnState<'_>, mutated: bool) -> Result<(), String> {
        self.flush().await?;
        if let Some((repo, worktree)) = &self.checkpoint
            && mutated
        {
            let (repo, worktree) = (repo.clone(), worktree.clone());
            let orchestrator = self.orchestrator.clone();
            let label = self.label.clone();
            let turn = state.turn;
            let task = tokio::spawn(async move {
                let commit = repo
                    .checkpoint(&worktree, &format!("{label}: turn {turn}"))
                    .await
                    .map_err(|error| format!("checkpoint commit failed: {error}"))?;
                if let (Some(commit), Some(orchestrator)) = (commit, orchestrator.upgrade()) {
                    orchestrator
                        .journal(Entry::Checkpoint {
                            subtask: label,
                            commit: commit.to_string(),
                            turn,
                        })
                        .map_err(|error| format!("the run journal cannot be written: {error}"))?;
                }
                Ok(())
            });
            *self.pending_checkpoint.lock().await = Some(task);
        }
        // Not synced: were these results lost in a machine crash, the calls would read as
        // interrupted from the synced save before them — reported, never run again.
        self.save(state, Durability::Buffered)
    }
}
