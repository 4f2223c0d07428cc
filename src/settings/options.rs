//! What a run is asked to do and with which models: the option types every layer of
//! settings resolves to.
//!
//! This module owns the types and their built-in defaults. It must never read a file or
//! the environment (the project file is `config.rs`, which points down to these types).

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::agent::external::{BackendEnv, WorkerBackend};
use crate::git::GitOptions;
use crate::model::Model;
use crate::prices::{PriceTable, Usd};
use crate::settings::ratchet::RatchetOptions;
use crate::tools::sandbox::{CommandHost, SandboxMode};
use crate::worktree::WorktreeMode;

/// Turn caps per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnCaps {
    pub lead: u32,
    pub worker: u32,
    pub reviewer: u32,
}

impl Default for TurnCaps {
    fn default() -> Self {
        Self {
            lead: 40,
            worker: 60,
            reviewer: 20,
        }
    }
}

/// Everything about a run except its models.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RunOptions {
    /// The user's task, verbatim.
    pub task: String,
    /// How many subtasks may run at once.
    pub jobs: usize,
    pub max_turns: TurnCaps,
    /// Tokens the whole run may spend; delegation stops once they are spent.
    pub budget_tokens: Option<u64>,
    /// Tokens one subagent may spend before it is stopped and its subtask fails.
    pub subagent_budget_tokens: Option<u64>,
    /// US dollars the whole run may spend, counted turn by turn at `prices`: at it the
    /// run pauses, resumable (`--budget-usd`). Journaled only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<Usd>,
    /// US dollars one subagent may spend before it is stopped and its subtask fails
    /// (`--subagent-budget-usd`). Journaled only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_budget_usd: Option<Usd>,
    /// The rates costs are counted at: the built-in table, the user's `prices` file, then
    /// `--prices`. Never journaled: a resume reads them again.
    #[serde(skip)]
    pub prices: PriceTable,
    /// How many subtasks the lead may delegate in total (follow-ups and each attempt
    /// included).
    pub max_subtasks: u32,
    /// How many attempts each delegated subtask gets when its `delegate` call does not
    /// say (`--attempts`); 1: one attempt, no judge.
    #[serde(default = "one_attempt")]
    pub attempts: u32,
    /// The most attempts one `delegate` call may ask for (`max_attempts` in
    /// `.grove/config.toml`).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// `max_tokens` of every model request.
    pub max_output_tokens: u32,
    /// Consecutive failing tool calls after which a subagent gives up.
    pub max_consecutive_tool_errors: u32,
    /// Whether to move the user's branch to the result at the end (when safe).
    pub apply: bool,
    /// Keep every worktree after the run (for inspection) instead of removing them.
    pub keep_worktrees: bool,
    /// Where worktrees go (`<dir>/<run>/<n>`, `[worktree] dir`); default the user's cache
    /// directory, see [`Repo::default_worktrees_dir`](crate::git::Repo::default_worktrees_dir).
    pub worktrees_dir: Option<PathBuf>,
    /// How worktrees are made (`[worktree] mode`); journaled as the mode the run chose
    /// at its start (a run journaled before the key existed made git worktrees).
    #[serde(default)]
    pub worktree_mode: WorktreeMode,
    /// The reviewer's diff is cut to this many bytes, with a note saying what was cut.
    pub max_review_patch_bytes: usize,
    /// The model name of each role, as given on the command line.
    #[serde(default)]
    pub model_names: ModelNames,
    /// How grove runs git (program, identity, extra environment for sealed tests).
    #[serde(skip)]
    pub git: GitOptions,
    /// How each subtask's worktree is prepared before its worker starts.
    #[serde(default)]
    pub worktree_setup: WorktreeSetup,
    /// Who does the workers' job: grove's own loop, or another agent CLI in the worktree
    /// (journaled, so a resumed run uses the same one). The lead and the reviewer are
    /// always grove's own.
    #[serde(default)]
    pub worker_backend: WorkerBackend,
    /// Wall-clock limit of one external worker CLI run, in seconds; past it the CLI's
    /// process group is killed and its subtask fails.
    #[serde(default = "default_worker_backend_timeout_secs")]
    pub worker_backend_timeout_secs: u64,
    /// The environment external worker CLIs start from; `None` is grove's own. Each CLI
    /// gets the scrubbed part of it plus its own credentials. Never journaled.
    #[serde(skip)]
    pub backend_env: Option<BackendEnv>,
    /// Extra variables external worker CLIs get by name (`[workers] pass_env`).
    #[serde(default)]
    pub worker_pass_env: Vec<String>,
    /// Whether workers' shell commands run in the kernel sandbox (`--sandbox`).
    #[serde(default)]
    pub sandbox: SandboxMode,
    /// Let sandboxed commands open internet sockets (`--allow-network`).
    #[serde(default)]
    pub allow_network: bool,
    /// What `[sandbox]` changes of the read rule.
    #[serde(default, skip_serializing_if = "sandbox_paths_unset")]
    pub sandbox_paths: SandboxPaths,
    /// The environment workers' commands start from.
    #[serde(skip)]
    pub commands: CommandHost,
    /// The remote hosts workers' trees go to (`--remote`); none: this machine. Never
    /// journaled: a launcher is this machine's, and a resume names its hosts again.
    #[serde(skip)]
    pub remote: Vec<crate::remote::RemoteHost>,
    /// What the user's branch gets (`history` in `.grove/config.toml`). Journaled; a run
    /// journaled before the key existed resumes with the default.
    #[serde(default)]
    pub history: History,
    /// The project's check (`[check]`), run on each subtask and on the merged result;
    /// `None` when the project has none.
    #[serde(default)]
    pub check: Option<CheckOptions>,
}

/// What `grove resume` may change of a run: its money budgets (raised to finish a run
/// paused at one) and the price table, read again.
#[derive(Debug, Clone, Default)]
pub struct ResumeOverrides {
    pub budget_usd: Option<Usd>,
    pub subagent_budget_usd: Option<Usd>,
    pub prices: PriceTable,
}

/// The history the user's branch gets from a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// One commit per merged subtask, in merge order, authored with the user's identity.
    #[default]
    Squash,
    /// The result's graph as it is: a merge commit per subtask over the workers'
    /// per-turn checkpoint commits.
    Merge,
}

impl RunOptions {
    /// Options for `task` with every other setting at its default.
    pub fn new(task: impl Into<String>) -> Self {
        Self {
            task: task.into(),
            jobs: default_jobs(),
            max_turns: TurnCaps::default(),
            budget_tokens: None,
            subagent_budget_tokens: None,
            budget_usd: None,
            subagent_budget_usd: None,
            prices: PriceTable::builtin(),
            max_subtasks: 16,
            attempts: one_attempt(),
            max_attempts: default_max_attempts(),
            max_output_tokens: 8192,
            max_consecutive_tool_errors: 8,
            apply: true,
            keep_worktrees: false,
            worktrees_dir: None,
            worktree_mode: WorktreeMode::Auto,
            max_review_patch_bytes: 60_000,
            model_names: ModelNames::default(),
            git: GitOptions::default(),
            worktree_setup: WorktreeSetup::default(),
            worker_backend: WorkerBackend::Builtin,
            worker_backend_timeout_secs: default_worker_backend_timeout_secs(),
            backend_env: None,
            worker_pass_env: Vec::new(),
            sandbox: SandboxMode::On,
            allow_network: false,
            sandbox_paths: SandboxPaths::default(),
            commands: CommandHost::default(),
            remote: Vec::new(),
            history: History::default(),
            check: None,
        }
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self::new("")
    }
}

fn one_attempt() -> u32 {
    1
}

/// The most attempts a `delegate` call may ask for by default: past 4, a judge reading
/// every attempt's diff side by side reads more than it compares.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 4;

fn default_max_attempts() -> u32 {
    DEFAULT_MAX_ATTEMPTS
}

/// The setup command's time limit when `.grove/config.toml` does not set one.
pub const DEFAULT_SETUP_TIMEOUT_S: u64 = 600;

/// How a subtask's worktree is prepared, once filled and before its worker's first turn
/// (`[worktree]` in `.grove/config.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorktreeSetup {
    /// Shell command run in the worktree (the user's own, trusted, but given the tools'
    /// scrubbed environment); its failure fails the subtask.
    pub setup: Option<String>,
    /// Seconds the setup command may run before its process group is killed.
    pub setup_timeout_s: u64,
    /// Runs `setup` in every worker's tree even where the workers share a base tree
    /// (`[worktree] per_worker`); without it, copy-on-write trees run it once per base.
    /// Journaled only when set, so runs that do not set it journal what they did before.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub per_worker: bool,
    /// Untracked files, relative to the repository root, copied into each worktree and
    /// never committed.
    pub copy: Vec<String>,
    /// Ignored directories of the checkout (relative) every tree sees read-only, as
    /// `[worktree] share` lists them; `None` before the run's start decided (it journals
    /// what it found), and for runs journaled before the key existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<Vec<String>>,
}

impl WorktreeSetup {
    /// The setup command copy-on-write trees share, run once in their base tree; `None`
    /// when there is none or it must run in each worker's tree (`per_worker`).
    pub fn once_per_base(&self) -> Option<&str> {
        self.setup.as_deref().filter(|_| !self.per_worker)
    }
}

impl Default for WorktreeSetup {
    fn default() -> Self {
        Self {
            setup: None,
            setup_timeout_s: DEFAULT_SETUP_TIMEOUT_S,
            per_worker: false,
            copy: Vec::new(),
            share: None,
        }
    }
}

/// The check's time limit when `.grove/config.toml` does not set one.
pub const DEFAULT_CHECK_TIMEOUT_S: u64 = 900;

/// How many fixer rounds a red result check gets when `.grove/config.toml` does not say.
pub const DEFAULT_FIX_ATTEMPTS: u32 = 2;

/// The project's check (`[check]` in `.grove/config.toml`): the command that says whether
/// a tree is green (`cargo test`, `npm test`, `python -m pytest -q`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// Shell command run in the tree, sandboxed like a worker's `bash`, after the setup.
    pub command: String,
    /// Seconds it may run before its process group is killed (a timeout is a red check).
    #[serde(default = "default_check_timeout_s")]
    pub timeout_s: u64,
    /// Whether it may open internet sockets.
    #[serde(default)]
    pub network: bool,
    /// What a red check on a subtask's own worktree means.
    #[serde(default)]
    pub subtask: SubtaskCheck,
    /// Fixer rounds a red result check gets before the run gives up on it.
    #[serde(default = "default_fix_attempts")]
    pub fix_attempts: u32,
    /// Whether the check must pass on the base before any worker starts.
    #[serde(default)]
    pub base: BaseCheck,
    /// `[[check.ratchet]]`: commands whose findings may not grow past the base's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratchets: Vec<RatchetOptions>,
}

impl CheckOptions {
    /// A check running `command` with every other key at its default.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            timeout_s: DEFAULT_CHECK_TIMEOUT_S,
            network: false,
            subtask: SubtaskCheck::default(),
            fix_attempts: DEFAULT_FIX_ATTEMPTS,
            base: BaseCheck::default(),
            ratchets: Vec::new(),
        }
    }
}

fn sandbox_paths_unset(paths: &SandboxPaths) -> bool {
    *paths == SandboxPaths::default()
}

fn default_check_timeout_s() -> u64 {
    DEFAULT_CHECK_TIMEOUT_S
}

fn default_fix_attempts() -> u32 {
    DEFAULT_FIX_ATTEMPTS
}

/// Whether the check runs on the base first (`[check] base`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaseCheck {
    /// The check runs on the base while the lead plans; red there, the run stops before
    /// any worker makes a model call.
    #[default]
    Require,
    /// Not run on the base: for a project whose suite is known to be red.
    Skip,
}

/// What `[sandbox]` changes of the sandbox's read rule, as written (absolute paths or
/// `~/…`, expanded when commands are confined).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxPaths {
    /// Paths commands may not read, on top of the built-in list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny_read: Vec<String>,
    /// Paths commands may read though the built-in list (or `deny_read`) denies them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_read: Vec<String>,
}

/// What a red check on a subtask's own worktree means (`[check] subtask`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtaskCheck {
    /// Evidence for the reviewer, who weighs it: a piece of a refactor may fail alone.
    #[default]
    Evidence,
    /// A red check rejects the subtask whatever the reviewer says.
    Require,
}

/// The default `--jobs`: model calls wait on the network, but workers also build and
/// test on this machine, and provider rate limits bite early; four is a middle ground,
/// fewer on a single core.
pub fn default_jobs() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    cores.saturating_mul(2).clamp(2, 4)
}

fn default_worker_backend_timeout_secs() -> u64 {
    crate::agent::external::DEFAULT_TIMEOUT_SECS
}

/// The model name of each role, recorded so that a resumed run uses the same ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelNames {
    pub lead: String,
    pub worker: String,
    pub reviewer: String,
}

/// A model client and the model name sent with each request.
#[derive(Clone)]
pub struct ModelChoice {
    pub client: Arc<dyn Model>,
    pub name: String,
}

impl std::fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name, self.client.name())
    }
}

/// The models of a run, per role.
#[derive(Debug, Clone)]
pub struct Models {
    /// `anthropic` or `openai`, for the journal and the report.
    pub provider: String,
    pub lead: ModelChoice,
    pub worker: ModelChoice,
    pub reviewer: ModelChoice,
}

impl Models {
    /// The model name of each role.
    pub fn names(&self) -> ModelNames {
        ModelNames {
            lead: self.lead.name.clone(),
            worker: self.worker.name.clone(),
            reviewer: self.reviewer.name.clone(),
        }
    }
}
