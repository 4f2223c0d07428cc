//! The context of one run, in four parts, each handed only to what reads it:
//!
//! - [`RunFacts`] — what the run is (repository, run id, base, branch, options, the
//!   user's tree, the run's and the worktrees' directories); fixed once it started.
//!   Any stage may take it.
//! - [`RunRecord`] — what the run writes down and how it stops: the journal, the
//!   events, the cancel token and why it paused. Any stage that journals, tells the
//!   user or must notice a stop takes it.
//! - [`AgentServices`] — the models, the project rules and the token budget: only what
//!   runs or admits an agent (the lead, the worker, the reviewer, delegation, fixers)
//!   takes it.
//! - [`TreeServices`] — what makes, mounts, moves and runs commands in the run's trees:
//!   the executor, the base's gate, the live copy-on-write trees, the remote hosts.
//!   Only a tree stage takes it, inside a [`TreeStage`] (facts, record and trees,
//!   never the agents').
//!
//! [`RunContext`] composes the four. It is held by the orchestrators (`start`, the
//! lead, `schedule`'s caller `Subtasks` (in the subtask module),
//! `pipeline::judged`, `finish`), by what outlives a call (an agent's observer, the
//! lead's news, the background base check and worktree cleanup) and by the stages that
//! run an agent (work, review); every other stage function takes only its parts.
//!
//! This file owns what every stage of a run may read, and the few small pieces of shared
//! state that are not the merge queue's or a subtask's: the budget spent, why the run
//! paused, the lead's history for forks. Its facts never change once the run started;
//! it must never grow a field only one stage needs (pass that to the stage instead),
//! and a stage must never take the whole context for one part.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::agent::roles::{self, ProjectRules, RoleDef, RoleKind};
use crate::agent::{AgentRun, AgentSpec, Ledger, LoopInput, MoneyBudget, TurnObserver, run_agent};
use crate::event::{AgentId, AgentLabel, Event, EventSink};
use crate::git::{CommitId, Repo, RunId};
use crate::model::{CacheHints, Message};
use crate::run::check::gate::BaseGate;
use crate::run::id::SubtaskId;
use crate::settings::config::check_copy_path;
use crate::settings::options::{ModelChoice, RunOptions};
use crate::store::attempts::AttemptGroup;
use crate::store::disk_full;
use crate::store::durable::{self, Durability};
use crate::store::journal::{CheckRun, Entry, JournalSyncer};
use crate::store::state::RunState;
use crate::store::state::SubtaskState;
use crate::store::transcript;
use crate::store::{ActiveRun, SnapshotWrite, StoreError};
use crate::tools::tree::TreeAccess;
use crate::tools::{CommandExecutor, Registry, ToolContext};
use crate::worktree::LiveTrees;
use crate::worktree::WorktreeSpec;

/// How a pause for a full disk starts: its reason is whole (what failed, what to run).
pub(crate) const DISK_FULL: &str = "the disk is full";

/// Everything a stage of the run may read, and the journal it writes, in four parts
/// (see the module doc for who takes which).
pub(crate) struct RunContext {
    pub(crate) facts: RunFacts,
    pub(crate) record: RunRecord,
    pub(crate) agents: AgentServices,
    pub(crate) trees: TreeServices,
}

/// What the run is: fixed once it started.
pub(crate) struct RunFacts {
    pub(crate) repo: Repo,
    pub(crate) run: RunId,
    /// The commit the run started from.
    pub(crate) base: CommitId,
    /// The user's branch, as a full ref.
    pub(crate) branch: String,
    pub(crate) options: RunOptions,
    /// The user's work tree, where `.grove/agents`, the rules and local files are read.
    pub(crate) user_root: PathBuf,
    /// Where this run's worktrees live (outside every `.git`).
    pub(crate) worktrees_dir: PathBuf,
    /// The run's directory in the store: journal and transcripts.
    pub(crate) run_dir: PathBuf,
}

/// What the run writes down and how it stops: the journal, the events, the cancel
/// token and why it paused.
pub(crate) struct RunRecord {
    pub(crate) journal: RunJournal,
    pub(crate) events: EventSink,
    /// Fires on Ctrl-C or when the run pauses itself; every agent's token is a child.
    pub(crate) cancel: CancellationToken,
    pub(crate) pause: Pause,
}

/// What only running an agent needs: its models, the project rules and the budget.
pub(crate) struct AgentServices {
    pub(crate) models: crate::settings::options::Models,
    /// The project rules every role's system prompt includes.
    pub(crate) rules: Option<ProjectRules>,
    pub(crate) budget: Budget,
}

/// What makes, runs commands in and removes the run's trees.
pub(crate) struct TreeServices {
    /// How workers' `bash` commands, the setup and the check run (the sandbox, unless the
    /// run turned it off).
    pub(crate) executor: Arc<dyn CommandExecutor>,
    /// Open once the check passed on the base (or needs not): workers wait for it.
    pub(crate) base_gate: BaseGate,
    /// The base's `[[check.ratchet]]` findings, known before the gate is decided.
    pub(crate) base_findings: crate::run::check::gate::BaseFindings,
    /// The copy-on-write trees this run mounted and has not ended yet.
    pub(crate) live: Arc<LiveTrees>,
    /// The remote hosts workers' trees go to, with their free slots (empty: here).
    pub(crate) hosts: crate::remote::HostPool,
}

/// The parts a stage that makes, checks or removes trees reads: never the agents'.
#[derive(Clone, Copy)]
pub(crate) struct TreeStage<'a> {
    pub(crate) facts: &'a RunFacts,
    pub(crate) record: &'a RunRecord,
    pub(crate) trees: &'a TreeServices,
}

impl RunContext {
    /// The parts a tree stage takes.
    pub(crate) fn tree_stage(&self) -> TreeStage<'_> {
        TreeStage {
            facts: &self.facts,
            record: &self.record,
            trees: &self.trees,
        }
    }

    /// Journals `entry` (most records are fsynced; see the store).
    pub(crate) fn journal(&self, entry: Entry) -> Result<(), StoreError> {
        self.record.journal(entry)
    }

    /// A status line for the user.
    pub(crate) fn note(&self, message: impl Into<String>) {
        self.record.note(message);
    }

    /// See [`RunRecord::pause_if_disk_full`].
    pub(crate) fn pause_if_disk_full(
        &self,
        what: &str,
        error: &(dyn std::error::Error + 'static),
    ) -> bool {
        self.record.pause_if_disk_full(&self.facts, what, error)
    }

    /// See [`RunRecord::pause`].
    pub(crate) fn pause(&self, reason: String) {
        self.record.pause(reason);
    }

    /// True once the run paused itself or was interrupted.
    pub(crate) fn stopping(&self) -> bool {
        self.record.stopping()
    }

    /// Where the transcript of `role` working on `label` lives.
    pub(crate) fn transcript_path(&self, label: AgentLabel, role: &str) -> PathBuf {
        self.facts.transcript_path(label, role)
    }

    /// Runs the agent `spec` from `messages` with its tools in `root` (inside `tree`
    /// when it is one), observed.
    pub(crate) async fn run_agent(
        &self,
        spec: &AgentSpec,
        messages: Vec<Message>,
        root: &std::path::Path,
        tree: Option<Arc<dyn TreeAccess>>,
        observer: Arc<dyn TurnObserver>,
    ) -> AgentRun {
        // Siblings of one role in this run share a cache group (the key OpenAI routes
        // by, the group the sibling hold keys on).
        let mut spec = spec.clone();
        spec.cache.key = Some(CacheHints::group(
            &self.facts.run.to_string(),
            &spec.id.role,
        ));
        run_agent(
            &spec,
            LoopInput {
                messages,
                tool_context: ToolContext {
                    root: root.to_path_buf(),
                    cancel: self.record.cancel.child_token(),
                    tree,
                    call_id: None,
                },
                events: self.record.events.clone(),
                observer: Some(observer),
            },
        )
        .await
    }

    /// The spec of one agent of this run.
    pub(crate) fn spec(&self, id: AgentId, role: &RoleDef, caps: AgentCaps<'_>) -> AgentSpec {
        agent_spec(
            &self.facts.options,
            self.agents.rules.as_ref(),
            id,
            role,
            caps,
        )
    }
}

impl RunFacts {
    /// Where the transcript of `role` working on `label` (a subtask, or the lead) lives.
    pub(crate) fn transcript_path(&self, label: AgentLabel, role: &str) -> PathBuf {
        transcript::transcript_path(&self.run_dir, &label.to_string(), role)
    }

    /// The worktree of subtask `id` (0 is the lead's).
    pub(crate) fn worktree_spec(&self, id: SubtaskId) -> WorktreeSpec {
        WorktreeSpec {
            run: self.run.clone(),
            subtask: id.number(),
            base: self.base,
            path: self.worktrees_dir.join(id.number().to_string()),
        }
    }

    /// The run's `worktree.copy` entries, normalised as the git layer records them.
    pub(crate) fn local_paths(&self) -> Vec<String> {
        self.options
            .worktree_setup
            .copy
            .iter()
            .map(|path| check_copy_path(path).unwrap_or_else(|_| path.clone()))
            .collect()
    }
}

impl RunRecord {
    /// Journals `entry` (most records are fsynced; see the store).
    pub(crate) fn journal(&self, entry: Entry) -> Result<(), StoreError> {
        self.journal.append(entry)
    }

    /// A status line for the user.
    pub(crate) fn note(&self, message: impl Into<String>) {
        self.events.emit(Event::Note {
            message: message.into(),
        });
    }

    /// Stops the whole run in a resumable state: the model API failed past its retries
    /// (an outage, a revoked key, a spent balance), so no subagent can go on, and nothing
    /// they did is judged a failure. The first reason is kept.
    pub(crate) fn pause(&self, reason: String) {
        self.pause.set(reason);
        self.cancel.cancel();
    }

    /// Pauses the run of `facts` when `error` is a full disk (and says so: true), naming
    /// what failed and what to run next; any other error is the caller's to handle
    /// (false).
    pub(crate) fn pause_if_disk_full(
        &self,
        facts: &RunFacts,
        what: &str,
        error: &(dyn std::error::Error + 'static),
    ) -> bool {
        if !disk_full::is_disk_full(error) {
            return false;
        }
        let mut told = disk_full::one_line(error);
        let free = disk_full::free_space(&[&facts.worktrees_dir, facts.repo.common_dir()]);
        if !free.is_empty() {
            told.push_str(&format!("; {free}"));
        }
        self.pause.set(format!(
            "{DISK_FULL}: {what}: {told}. Nothing was applied; free some space, then \
             `grove resume {}` finishes the run",
            facts.run
        ));
        self.cancel.cancel();
        true
    }

    /// True once the run paused itself or was interrupted: what fails from now on is
    /// the stop, not the work.
    pub(crate) fn stopping(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// The model, turn cap, token budget and tools of one agent.
pub(crate) struct AgentCaps<'a> {
    pub(crate) model: &'a ModelChoice,
    pub(crate) max_turns: u32,
    pub(crate) budget: Option<u64>,
    pub(crate) tools: Registry,
}

/// The one place an agent's spec is built, for the run and the dry run alike: the role's
/// prompt with the project rules, its model and turn cap unless the role names its own.
pub(crate) fn agent_spec(
    options: &RunOptions,
    rules: Option<&ProjectRules>,
    id: AgentId,
    role: &RoleDef,
    caps: AgentCaps<'_>,
) -> AgentSpec {
    let model_name = role
        .model
        .clone()
        .unwrap_or_else(|| caps.model.name.clone());
    // Every agent but the lead is a subagent; the lead spends under the run's budget.
    let budget_usd = options
        .subagent_budget_usd
        .filter(|_| !matches!(id.label, AgentLabel::Lead))
        .map(|usd| MoneyBudget {
            usd,
            price: options.prices.lookup(&model_name).map(|(_, price)| *price),
        });
    AgentSpec {
        id,
        system: roles::system_prompt(role, rules),
        model: caps.model.client.clone(),
        model_name,
        max_tokens: options.max_output_tokens,
        max_turns: role.max_turns.unwrap_or(caps.max_turns),
        budget_tokens: caps.budget,
        budget_usd,
        max_consecutive_tool_errors: options.max_consecutive_tool_errors,
        tools: caps.tools,
        // The lead waits on its subtasks (a worker, the check, a review) between turns.
        cache: CacheHints {
            key: None,
            long_wait: role.name == RoleKind::Lead.as_str(),
        },
    }
}

/// The run's journal, shared by the subtasks that write to it at the same moments.
pub(crate) struct RunJournal {
    run: Mutex<ActiveRun>,
    /// Appends begun and not yet done: the last of a burst writes the snapshot.
    appending: AtomicUsize,
    /// Fsyncs the journal outside `run`'s lock, so that the appends of a burst are
    /// written one after another and share fsyncs (group commit); `None` when the file
    /// could not be opened twice, and each append syncs under the lock.
    syncer: Option<JournalSyncer>,
    /// How many records were written (in the order of the file).
    written: AtomicU64,
    /// How many of them an fsync has covered.
    synced: Mutex<u64>,
}

impl RunJournal {
    pub(crate) fn new(active: ActiveRun) -> Self {
        Self {
            syncer: active.syncer().ok(),
            run: Mutex::new(active),
            appending: AtomicUsize::new(0),
            written: AtomicU64::new(0),
            synced: Mutex::new(0),
        }
    }

    /// Counts this append done: the snapshot is left to the last of a burst.
    fn snapshot_write(&self) -> SnapshotWrite {
        if self.appending.fetch_sub(1, Ordering::SeqCst) > 1 {
            SnapshotWrite::LeftToLast
        } else {
            SnapshotWrite::Now
        }
    }

    /// Appends `entry` off the runtime's threads; when it returns `Ok`, the record is as
    /// durable as its kind needs. Subtasks journal at the same moments: each waits for
    /// the lock only while the others write, not while they fsync, and one fsync covers
    /// every record written before it (32 tool calls starting at once each held the
    /// lock through their own fsync, the last waiting for all of them).
    pub(crate) fn append(&self, entry: Entry) -> Result<(), StoreError> {
        self.appending.fetch_add(1, Ordering::SeqCst);
        let Some(syncer) = &self.syncer else {
            return durable::off_the_runtime(|| {
                let mut run = lock(&self.run);
                run.append_leaving_snapshot(entry, self.snapshot_write())
            });
        };
        durable::off_the_runtime(|| {
            let (durability, seq) = {
                let mut run = lock(&self.run);
                let durability = run.append_unsynced(entry, self.snapshot_write())?;
                (durability, self.written.fetch_add(1, Ordering::SeqCst) + 1)
            };
            if durability == Durability::Buffered {
                return Ok(());
            }
            let mut synced = lock(&self.synced);
            if *synced >= seq {
                return Ok(());
            }
            // Whatever is written by now is in the file before this fsync starts.
            let covered = self.written.load(Ordering::SeqCst);
            syncer.sync()?;
            *synced = covered;
            Ok(())
        })
    }

    /// The run's state after every record journaled so far.
    pub(crate) fn state(&self) -> RunState {
        lock(&self.run).state().clone()
    }

    /// Every run of the project's check journaled so far (this process's and, on a
    /// resume, the earlier ones'), in order.
    pub(crate) fn checks(&self) -> Vec<CheckRun> {
        lock(&self.run).state().checks.clone()
    }

    /// Every subtask journaled so far, merged or not, in the order they started.
    pub(crate) fn subtasks(&self) -> Vec<SubtaskState> {
        lock(&self.run).state().subtasks.clone()
    }

    /// The group of attempts subtask `id` is one of, when it is (without a copy of the
    /// whole state).
    pub(crate) fn attempt_group(&self, id: SubtaskId) -> Option<AttemptGroup> {
        lock(&self.run).state().attempt_group(id).cloned()
    }
}

/// The run's token budget: what every finished subagent spent, against the limit.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: Option<u64>,
    spent: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: Option<u64>) -> Self {
        Self {
            limit,
            spent: AtomicU64::new(0),
        }
    }

    /// Counts what one subagent spent.
    pub(crate) fn spend(&self, ledger: &Ledger) {
        // Saturating, like the ledger: absurd usage must not wrap under the budget.
        let spent = ledger.total_tokens();
        let _ = self
            .spent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                Some(total.saturating_add(spent))
            });
    }

    /// True once the run's budget is spent: no new subtask starts.
    pub(crate) fn is_spent(&self) -> bool {
        self.limit
            .is_some_and(|limit| self.spent.load(Ordering::Relaxed) >= limit)
    }
}

/// Why the run paused itself, if it did (the first reason counts). A clone is the same
/// slot: the run's meter of dollars pauses the run from inside its model clients.
#[derive(Debug, Default, Clone)]
pub(crate) struct Pause(Arc<Mutex<Option<String>>>);

impl Pause {
    pub(crate) fn set(&self, reason: String) {
        lock(&self.0).get_or_insert(reason);
    }

    /// The reason, when the run paused itself.
    pub(crate) fn reason(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// The lead's history as of its latest tool-calling turn; forks start from it.
#[derive(Debug, Default)]
pub(crate) struct LeadHistory(Mutex<Vec<Message>>);

impl LeadHistory {
    pub(crate) fn set(&self, messages: &[Message]) {
        *lock(&self.0) = messages.to_vec();
    }

    pub(crate) fn get(&self) -> Vec<Message> {
        lock(&self.0).clone()
    }
}

/// A poisoned lock still holds consistent data here: every critical section is a
/// single assignment or append.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::test_support::TestRun;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn synced_appends_made_at_once_are_all_journaled_and_covered_by_an_fsync() {
        let run = TestRun::alpha().await;
        let before = run.ctx.record.journal.state().open_tool_calls.len();
        let appends = (0..16).map(|n| {
            let ctx = Arc::clone(&run.ctx);
            tokio::spawn(async move {
                ctx.journal(Entry::ToolCallStarted {
                    subtask: "S1".to_owned(),
                    call_id: format!("call-{n}"),
                    tool: "write_file".to_owned(),
                    mutating: true,
                })
            })
        });
        for append in futures_util::future::join_all(appends).await {
            append.unwrap().unwrap();
        }

        let journal = &run.ctx.record.journal;
        assert!(
            journal.syncer.is_some(),
            "the journal is synced outside its lock"
        );
        assert_eq!(journal.state().open_tool_calls.len(), before + 16);
        let written = journal.written.load(Ordering::SeqCst);
        assert_eq!(
            (*lock(&journal.synced), written),
            (written, 16),
            "each synced append returned only once an fsync had covered it"
        );
        assert_eq!(
            run.journal_types()
                .iter()
                .filter(|t| *t == "tool_call_started")
                .count(),
            16
        );
    }
}
