//! The start of a run (or of its resume): the repository checked, the lock taken, the
//! journal opened, the executor for workers' commands chosen, the run context built.
//!
//! This file owns everything that must hold before any agent runs. It must never start
//! a run it cannot promise to resume (the journal exists before the lead's first call),
//! and never run workers' commands unconfined unless the user said so (loudly).

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::git::{CommitId, GitError, GitOptions, Repo, STALE_REF_LOCK};
use crate::run::agents::read_rules;
use crate::run::check::gate::BaseGate;
use crate::run::context::{
    AgentServices, Budget, Pause, RunContext, RunFacts, RunJournal, RunRecord, TreeServices,
};
use crate::run::sandbox_view::{self, SandboxViewError};
use crate::run::spend::{MeteredModel, RunSpend, SpendSetup};
use crate::run::subtask::prepare::{LocalFileError, check_local_files};
use crate::settings::options::{Models, ResumeOverrides, RunOptions};
use crate::store::journal::Entry;
use crate::store::lock::{LockError, RepoLock};
use crate::store::state::RunState;
use crate::store::{ActiveRun, RecordedOptionsError, RunId, RunStart, RunStore, StoreError};
use crate::tools::sandbox::{self, SandboxError, SandboxMode, SandboxPolicy, SandboxedExecutor};
use crate::tools::{CommandExecutor, LocalExecutor};
use crate::worktree::{OverlayError, WorktreeMode};

/// Why a run could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not retried: the user must check out a branch.
    #[error(
        "HEAD is detached; grove needs a branch to apply its result to. Check out a branch \
         (`git switch <branch>`) and run again"
    )]
    DetachedHead,
    /// Not retried: HEAD is detached because a rebase (or another operation) is under
    /// way; the user finishes or aborts it first.
    #[error(
        "a {operation} is in progress (HEAD is detached meanwhile); grove starts from a \
         branch. Finish it (e.g. `git rebase --continue`) or abort it (`git rebase \
         --abort`), then run again"
    )]
    OperationInProgress { operation: String },
    /// Not retried: there is nothing to branch from.
    #[error(
        "the current branch has no commits yet; grove starts from a commit. Make a first \
         commit and run again"
    )]
    UnbornHead,
    /// Not retried: a bare repository has no files for the agents to read, and no
    /// checkout the result could be applied to safely.
    #[error(
        "the repository has no work tree (it is bare): grove reads its files and applies \
         its result in a checkout; run it in one (a clone, or `git worktree add DIR BRANCH`)"
    )]
    NoWorkTree,
    /// Not retried: the run's journal names a base or options grove cannot read.
    #[error("run {run_id} cannot be resumed: {source}")]
    NotResumable {
        run_id: RunId,
        #[source]
        source: ResumeProblem,
    },
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
    /// Not retried: `[worktree] mode = "overlay"` was asked for (or a resumed run made
    /// copy-on-write worktrees) and this system refuses the overlay mount.
    #[error(
        "copy-on-write worktrees ([worktree] mode = \"overlay\") are unavailable here: \
         {source}. Set `mode = \"git\"` (or \"auto\") in .grove/config.toml to use git \
         worktrees"
    )]
    Overlay {
        #[source]
        source: OverlayError,
    },
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
        source: Box<StoreError>,
    },
    /// Not retried: a `worktree.copy` file is missing, tracked or outside the repository.
    #[error("{0}")]
    LocalFile(#[from] LocalFileError),
    /// `AGENTS.md` or `CLAUDE.md` is not a regular file of bounded size.
    #[error(transparent)]
    Rules(#[from] crate::agent::roles::RulesError),
    /// Not retried: a `[worktree] share` directory or a `[sandbox]` path is unusable.
    #[error("{0}")]
    SandboxView(#[source] Box<SandboxViewError>),
}

impl From<SandboxViewError> for RunError {
    fn from(error: SandboxViewError) -> Self {
        Self::SandboxView(Box::new(error))
    }
}

/// What in a run's journal cannot be resumed from.
#[derive(Debug, thiserror::Error)]
pub enum ResumeProblem {
    #[error("{0}")]
    Options(#[source] RecordedOptionsError),
    /// Its provider is unknown here, or its client cannot be made (no API key, say).
    #[error("{0}")]
    Model(#[source] Box<crate::model::ModelError>),
}

/// A run that started: its context, and the lock held until it ends.
pub(crate) struct Started {
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) run_id: RunId,
    pub(crate) lock: RepoLock,
}

/// Finishes, in the background, the deletions a grove that ended before them left in
/// the trash (a run's end does not wait for its deletions); a failure leaves them for
/// the next start.
fn sweep_trash(repo: &Repo) {
    let repo = repo.clone();
    tokio::spawn(async move {
        let _ = repo.sweep_trash().await;
    });
}

/// Starts a new run of `options.task` in the repository at `repo_path`.
pub(crate) async fn start(
    repo_path: &Path,
    options: RunOptions,
    models: Models,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<Started, RunError> {
    let repo = Repo::open(repo_path, options.git.clone()).await?;
    if repo.work_tree().is_none() {
        return Err(RunError::NoWorkTree);
    }
    sweep_trash(&repo);
    let head = repo.head()?;
    let Some(branch) = head.branch else {
        return Err(match repo.operation_in_progress()? {
            Some(operation) => RunError::OperationInProgress {
                operation: operation.to_lowercase(),
            },
            None => RunError::DetachedHead,
        });
    };
    let base = head.commit.ok_or(RunError::UnbornHead)?;
    check_local_files(&repo, base, &options.worktree_setup.copy)?;
    let mut options = options;
    // Journaled as decided: a resumed run shares the same directories.
    options.worktree_setup.share = Some(sandbox_view::resolve_shares(
        &repo,
        base,
        &options.worktree_setup,
    )?);
    let executor;
    (executor, options.worktree_mode) = executor_and_mode(&options, &repo, &events).await?;

    let store = RunStore::new(repo.common_dir());
    let run_id = store.new_run_id();
    let lock = acquire(&repo, &run_id, &events)?;
    let mut recorded = options.clone();
    recorded.model_names = models.names();
    let active = store.create_run(
        &lock,
        RunStart {
            task: options.task.clone(),
            base,
            branch: branch.clone(),
            provider: models.provider.clone(),
            model: models.worker.name.clone(),
            options: recorded,
        },
    )?;
    let facts = Facts {
        repo,
        base,
        branch,
        options,
        models,
        events,
        cancel,
        executor,
    };
    let ctx = context(facts, &run_id, active)?;
    Ok(Started { ctx, run_id, lock })
}

/// Takes over run `run_id` after a crash or an interrupt; also returns its state as the
/// journal left it.
pub(crate) async fn resume(
    repo_path: &Path,
    run_id: &str,
    git: GitOptions,
    (remote, overrides): (Vec<crate::remote::RemoteHost>, ResumeOverrides),
    models: impl FnOnce(&RunState) -> Result<Models, RunError>,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<(Started, RunState), RunError> {
    let repo = Repo::open(repo_path, git.clone()).await?;
    if repo.work_tree().is_none() {
        return Err(RunError::NoWorkTree);
    }
    sweep_trash(&repo);
    let store = RunStore::new(repo.common_dir());
    let run_id: RunId = run_id.parse()?;
    let lock = acquire(&repo, &run_id, &events)?;
    clear_ref_locks(&repo, &run_id, &events).await?;
    let mut active = store.resume_run(&lock)?;
    active.append(Entry::Resumed {
        pid: std::process::id(),
    })?;
    let state = active.state().clone();
    let not_resumable = |source| RunError::NotResumable {
        run_id: run_id.clone(),
        source,
    };
    let base = state.base;
    let mut options: RunOptions = state
        .options
        .get()
        .map_err(|e| not_resumable(ResumeProblem::Options(e)))?
        .clone();
    options.git = git;
    options.remote = remote;
    options.budget_usd = overrides.budget_usd.or(options.budget_usd);
    options.subagent_budget_usd = overrides
        .subagent_budget_usd
        .or(options.subagent_budget_usd);
    // Not journaled: a later resume without the flags has the budget the run started
    // with.
    options.prices = overrides.prices;
    check_local_files(&repo, base, &options.worktree_setup.copy)?;
    if options.worktree_setup.share.is_none() {
        // Journaled before the key existed: decided as a new run would.
        options.worktree_setup.share = Some(sandbox_view::resolve_shares(
            &repo,
            base,
            &options.worktree_setup,
        )?);
    }
    if options.worktree_mode == WorktreeMode::Auto {
        // Journaled before the key existed: that run made git worktrees.
        options.worktree_mode = WorktreeMode::Git;
    }
    let executor;
    (executor, options.worktree_mode) = executor_and_mode(&options, &repo, &events).await?;
    let models = models(&state)?;
    for call in &state.interrupted_tool_calls {
        events.emit(Event::Note {
            message: format!(
                "{}: tool call {} ({}) was running when grove stopped; it is not run again",
                call.subtask, call.call_id, call.tool
            ),
        });
    }
    let facts = Facts {
        repo,
        base,
        branch: state.branch.clone(),
        options,
        models,
        events,
        cancel,
        executor,
    };
    let ctx = context(facts, &run_id, active)?;
    Ok((Started { ctx, run_id, lock }, state))
}

/// What a run starts from, before its context is built.
struct Facts {
    repo: Repo,
    base: CommitId,
    branch: String,
    options: RunOptions,
    models: Models,
    events: EventSink,
    cancel: CancellationToken,
    executor: Arc<dyn CommandExecutor>,
}

fn context(facts: Facts, run_id: &RunId, active: ActiveRun) -> Result<Arc<RunContext>, RunError> {
    let Facts {
        repo,
        base,
        branch,
        options,
        models,
        events,
        cancel,
        executor,
    } = facts;
    let run = run_id.clone();
    let user_root = repo
        .work_tree()
        .map_or_else(|| repo.common_dir().to_path_buf(), Path::to_path_buf);
    // Where this run's worktrees already are, if any (a resume), else where they go.
    let worktrees_dir = repo.run_worktrees_dir(&run, options.worktrees_dir.as_deref())?;
    let run_dir = active.dir().to_path_buf();
    let pause = Pause::default();
    let spend = RunSpend::new(SpendSetup {
        cap: options.budget_usd,
        prices: options.prices.clone(),
        run: run.clone(),
        run_dir: run_dir.clone(),
        pause: pause.clone(),
        cancel: cancel.clone(),
        events: events.clone(),
    });
    Ok(Arc::new(RunContext {
        agents: AgentServices {
            rules: read_rules(&user_root)?,
            budget: Budget::new(options.budget_tokens),
            models: metered(models, &spend),
        },
        record: RunRecord {
            journal: RunJournal::new(active),
            pause,
            events,
            cancel,
        },
        trees: TreeServices {
            executor,
            base_gate: BaseGate::default(),
            base_findings: crate::run::check::gate::BaseFindings::default(),
            live: Arc::default(),
            hosts: crate::remote::HostPool::new(options.remote.clone()),
        },
        facts: RunFacts {
            run_dir,
            repo,
            run,
            base,
            branch,
            options,
            user_root,
            worktrees_dir,
        },
    }))
}

/// `models` with every turn counted by the run's `spend`.
fn metered(models: Models, spend: &Arc<RunSpend>) -> Models {
    let meter = |choice: crate::settings::ModelChoice| crate::settings::ModelChoice {
        client: Arc::new(MeteredModel {
            inner: choice.client,
            spend: Arc::clone(spend),
        }),
        name: choice.name,
    };
    Models {
        provider: models.provider,
        lead: meter(models.lead),
        worker: meter(models.worker),
        reviewer: meter(models.reviewer),
    }
}

/// The executor of workers' commands and how the run makes its worktrees (see
/// [`command_executor`] and [`worktree_mode`]). Each is checked by starting a confined
/// process (4 and 6 ms on the way to the lead's first call), so the two checks run side
/// by side; the sandbox's failure is reported first.
async fn executor_and_mode(
    options: &RunOptions,
    repo: &Repo,
    events: &EventSink,
) -> Result<(Arc<dyn CommandExecutor>, WorktreeMode), RunError> {
    let sandbox_probe = options.sandbox.confines().then(|| {
        let host = options.commands.clone();
        let mode = options.sandbox;
        tokio::task::spawn_blocking(move || sandbox::probe(&host, mode))
    });
    let overlay_probe = match options.worktree_mode {
        WorktreeMode::Git => None,
        _ => {
            let parent = options
                .worktrees_dir
                .clone()
                .unwrap_or_else(|| repo.worktrees_home().to_path_buf());
            Some(crate::worktree::overlay::probe(&parent).await)
        }
    };
    if let Some(probe) = sandbox_probe {
        probe
            .await
            .unwrap_or_else(|error| {
                Err(SandboxError::Confine {
                    step: "running a probe command confined",
                    detail: format!("the probe stopped: {error}"),
                })
            })
            .map_err(RunError::Sandbox)?;
    }
    let executor = command_executor(options, repo, events)?;
    Ok((executor, worktree_mode(options, overlay_probe, events)?))
}

/// How this run makes its worktrees: `git` as asked; `overlay` when this system allows
/// it (`probe`d once, in a throwaway namespace, where the worktrees go; `None` in git
/// mode), else an error if it was asked for, or git worktrees and one line saying why
/// for `auto`.
fn worktree_mode(
    options: &RunOptions,
    probe: Option<Result<(), OverlayError>>,
    events: &EventSink,
) -> Result<WorktreeMode, RunError> {
    let Some(probe) = probe else {
        return Ok(WorktreeMode::Git);
    };
    match (probe, options.worktree_mode) {
        (Ok(()), _) => Ok(WorktreeMode::Overlay),
        (Err(source), WorktreeMode::Overlay) => Err(RunError::Overlay { source }),
        (Err(error), _) => {
            events.emit(Event::Note {
                message: format!(
                    "copy-on-write worktrees are unavailable here ({error}); using git \
                     worktrees ([worktree] mode = \"git\" skips this check)"
                ),
            });
            Ok(WorktreeMode::Git)
        }
    }
}

/// The executor workers' `bash` runs through, as the options say: the sandbox (checked
/// to work before anything starts, by [`executor_and_mode`]), or (loudly) none.
///
/// Besides the user's secrets, sandboxed commands cannot read the user's work tree (its
/// uncommitted and ignored files, such as `.env`) but for its shared directories, nor the
/// run store (journal, other agents' transcripts, other worktrees): a worker sees its own
/// worktree, the project's environment and the repository's git data, as its isolation
/// promises.
fn command_executor(
    options: &RunOptions,
    repo: &Repo,
    events: &EventSink,
) -> Result<Arc<dyn CommandExecutor>, RunError> {
    let env = options.commands.env();
    if options.sandbox == SandboxMode::Off {
        events.emit(Event::Note {
            message: "WARNING: --sandbox off: workers' shell commands run UNCONFINED, \
                      with your full rights: they can read your secrets (~/.ssh, ~/.aws, \
                      ...), write anywhere you can, use the network and leave processes \
                      behind. This choice is recorded in the run's journal."
                .into(),
        });
        return Ok(Arc::new(LocalExecutor::with_env(env)));
    }
    let policy = SandboxPolicy {
        allow_network: options.allow_network,
        own_loopback: options.sandbox == SandboxMode::On,
        ..SandboxPolicy::default()
    };
    if options.allow_network {
        events.emit(Event::Note {
            message: "the network is open to workers' shell commands (--allow-network): \
                      the host's network, its loopback services included; the rest of the \
                      sandbox holds"
                .into(),
        });
    }
    if options.sandbox == SandboxMode::NoLoopback {
        events.emit(Event::Note {
            message: "--sandbox no-loopback: commands get no loopback of their own, so \
                      every socket is refused (a test server on 127.0.0.1 cannot run)"
                .into(),
        });
    }
    let home = env
        .iter()
        .find(|(name, _)| name == "HOME")
        .map(|(_, value)| std::path::PathBuf::from(value))
        .filter(|home| home.is_absolute());
    let (deny, allow) = sandbox_view::read_rule_paths(&options.sandbox_paths, home.as_deref())?;
    let worktrees = options
        .worktrees_dir
        .clone()
        .unwrap_or_else(|| repo.worktrees_home().to_path_buf());
    sandbox_view::check_deny_read(
        &deny,
        &[
            ("the worktrees' directory", &worktrees),
            ("the repository's git data", repo.common_dir()),
        ],
    )?;
    for opened in sandbox_view::secret_stores_opened(&allow, home.as_deref()) {
        events.emit(Event::Note {
            message: format!(
                "WARNING: [sandbox] allow_read opens {} to workers' commands, which grove \
                 hides by default as a store of secrets; this is recorded in the run's \
                 journal",
                opened.display()
            ),
        });
    }
    // The run store, the trust records and every worktree grove keeps (each command's own
    // worktree stays granted): a worker sees the base and its own work only, wherever
    // the cache or `[worktree] dir` puts the others.
    let mut hidden = vec![
        repo.common_dir().join("grove"),
        repo.worktrees_home().to_path_buf(),
    ];
    hidden.extend(options.worktrees_dir.clone());
    hidden.extend(
        crate::settings::trust::TrustStore::for_user()
            .ok()
            .map(|store| store.dir().to_path_buf()),
    );
    hidden.extend(deny);
    let shares = options.worktree_setup.share.clone().unwrap_or_default();
    // The environments grove's own commands run by path are granted to every command.
    let configured: Vec<String> = options
        .check
        .iter()
        .map(|check| check.command.clone())
        .chain(options.worktree_setup.setup.clone())
        .collect();
    let executor = SandboxedExecutor::new(policy, env)
        .hiding(&hidden, &allow)
        .project(sandbox_view::project_view(repo, &shares))
        .commands(&configured);
    Ok(Arc::new(executor))
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

/// Removes the stale lock files on `run_id`'s refs that a grove (or a git process it
/// started) stopped while it updated them left behind, naming each in a note: with one
/// there, git can never update or delete that ref again. Called under the repository
/// lock, before the run touches a ref; a lock still in use, or a stale
/// `packed-refs.lock` (not the run's alone), is named and left.
async fn clear_ref_locks(repo: &Repo, run_id: &RunId, events: &EventSink) -> Result<(), RunError> {
    let locks = repo.clear_stale_ref_locks(run_id, STALE_REF_LOCK).await?;
    let note = |message: String| events.emit(Event::Note { message });
    for path in &locks.removed {
        note(format!(
            "removed {}, a lock on one of this run's refs that a process stopped with an \
             earlier grove left (git could not update that ref while it was there)",
            path.display()
        ));
    }
    for path in &locks.in_use {
        note(format!(
            "left {}, a lock on one of this run's refs that another process still takes; \
             that ref cannot be updated while it is there",
            path.display()
        ));
    }
    if let Some(path) = &locks.packed_refs {
        note(format!(
            "{} is older than {} s: a git process stopped on this repository may have left \
             it, and no branch can be deleted while it is there; remove it if no git \
             command is running here",
            path.display(),
            STALE_REF_LOCK.as_secs()
        ));
    }
    Ok(())
}
