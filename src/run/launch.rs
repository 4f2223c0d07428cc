//! From a caller's request to a run's inputs: the flags of `grove run` and the
//! arguments of the MCP `run` tool become [`RunOptions`] and [`Models`] the same way.
//!
//! This module owns layering a request over `.grove/config.toml` and the built-in
//! defaults, the trust that the file's setup command, network check and widenings of the
//! sandbox need, and connecting the model clients of a new or a resumed run. It must
//! never print, start a run, or write anything.

use std::path::Path;

use crate::agent::external::WorkerBackend;
use crate::agent::roles::RulesError;
use crate::git::{GitError, GitOptions, Repo};
use crate::model::{self, ModelError, Provider};
use crate::prices::{Unpriced, Usd};
use crate::run::agents::read_rules;
use crate::run::sandbox_view;
use crate::run::start::{ResumeProblem, RunError};
use crate::settings::config::{CONFIG_PATH, ConfigError, ProjectConfig, RunSettings};
pub use crate::settings::options::ResumeOverrides;
use crate::settings::prices::{PricesError, price_table};
use crate::settings::trust::{TrustError, TrustStore};
use crate::settings::widening::{file_widenings, journaled_widenings};
use crate::settings::{ModelChoice, ModelNames, Models, RunOptions};
use crate::store::state::RunState;
use crate::store::{RunId, RunStore};
use crate::tools::sandbox::SandboxMode;

/// Why a request could not become a run. None of these are retried: the caller fixes
/// the request, the file or the environment.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The task is empty or only blanks.
    #[error("the task is empty; say what grove should do, e.g. grove run \"fix the failing test\"")]
    EmptyTask,
    /// The directory is not a git repository (or git failed reading it).
    #[error(transparent)]
    Repo(#[from] GitError),
    /// `.grove/config.toml` cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The provider's client cannot be configured (missing key, bad base URL).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The setup command, network check or a widening of the sandbox of
    /// `.grove/config.toml` (or of the run being resumed) is not trusted in this
    /// repository; nothing was created.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// `AGENTS.md` or `CLAUDE.md` is not a regular file of bounded size; nothing was
    /// created.
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// A `--remote` host is not in the user's configuration, or that file is invalid.
    #[error(transparent)]
    Remote(#[from] crate::settings::remote::RemoteChoiceError),
    /// Remote hosts run grove's own workers only: an agent CLI works on this machine.
    #[error(
        "--remote runs grove's own workers on the remote hosts; --worker-backend {backend} \
         runs its CLI on this machine: use one or the other"
    )]
    RemoteBackend { backend: String },
    /// The price table cannot be built: the user's configuration or a price file is
    /// invalid; nothing was created.
    #[error(transparent)]
    Prices(#[from] PricesError),
    /// A money budget over a model without a price; nothing was created.
    #[error(transparent)]
    Unpriced(#[from] Unpriced),
    /// A money budget counts grove's own agents turn by turn; an agent CLI's spending is
    /// not priced.
    #[error(
        "{flag} counts what grove's own agents spend, turn by turn; --worker-backend \
         {backend} runs its own CLI, whose spending grove cannot price: drop one or the other"
    )]
    MoneyBudgetBackend { flag: String, backend: String },
    /// `--attempts` over the project's `max_attempts`; nothing was created.
    #[error(
        "--attempts {attempts} is over this project's max_attempts of {max} \
         (.grove/config.toml); ask for fewer, or raise max_attempts"
    )]
    AttemptsOverMax { attempts: u32, max: u32 },
}

impl LaunchError {
    /// True for what the caller got wrong in its request or files (a usage error, exit 2),
    /// as opposed to a failure of the machine or the repository.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::EmptyTask
                | Self::Prices(_)
                | Self::Unpriced(_)
                | Self::MoneyBudgetBackend { .. }
                | Self::AttemptsOverMax { .. }
        )
    }
}

/// The overrides of a resume of `run_id` with the budgets `budget_usd` and
/// `subagent_budget_usd` (`None`: as the run had them) and the price file `prices`,
/// refused (nothing resumed) when a model of the run has no price under a money budget.
pub async fn resume_overrides(
    directory: &Path,
    run_id: &str,
    budget_usd: Option<Usd>,
    subagent_budget_usd: Option<Usd>,
    prices: Option<&Path>,
) -> Result<ResumeOverrides, LaunchError> {
    let env: Vec<_> = std::env::vars_os().collect();
    let overrides = ResumeOverrides {
        budget_usd,
        subagent_budget_usd,
        prices: price_table(&env, prices)?,
    };
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let Ok(run_id) = run_id.parse::<RunId>() else {
        return Ok(overrides);
    };
    let Ok(state) = RunStore::new(repo.common_dir()).read_state(&run_id) else {
        return Ok(overrides);
    };
    if let Ok(journaled) = state.options.get() {
        let mut options = journaled.clone();
        options.budget_usd = budget_usd.or(options.budget_usd);
        options.subagent_budget_usd = subagent_budget_usd.or(options.subagent_budget_usd);
        options.prices = overrides.prices.clone();
        let names = &options.model_names;
        let models = [
            names.lead.as_str(),
            names.worker.as_str(),
            names.reviewer.as_str(),
        ];
        check_money(&options, models.into_iter().filter(|m| !m.is_empty()))?;
    }
    Ok(overrides)
}

/// Refuses a money budget the run cannot count: a model without a price, or an agent
/// CLI doing the workers' job.
fn check_money<'a>(
    options: &RunOptions,
    models: impl IntoIterator<Item = &'a str>,
) -> Result<(), LaunchError> {
    let flag = match (options.budget_usd, options.subagent_budget_usd) {
        (Some(_), _) => "--budget-usd (budget_usd)",
        (None, Some(_)) => "--subagent-budget-usd (subagent_budget_usd)",
        (None, None) => return Ok(()),
    };
    if options.worker_backend != WorkerBackend::Builtin {
        return Err(LaunchError::MoneyBudgetBackend {
            flag: flag.to_owned(),
            backend: options.worker_backend.name().to_owned(),
        });
    }
    options.prices.check_priced(flag, models)?;
    Ok(())
}

/// What a caller asks of a new run, before the project file and the defaults: each
/// `None` in `flags` lets the layer below decide.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub task: String,
    /// The settings the caller gives; they beat `.grove/config.toml`.
    pub flags: RunSettings,
    pub keep_worktrees: bool,
    pub worker_backend: WorkerBackend,
    /// Wall-clock limit of one external worker CLI run; `None` keeps the default.
    pub worker_timeout_secs: Option<u64>,
    pub sandbox: SandboxMode,
    pub allow_network: bool,
    /// Remote hosts (`[remote.NAME]` of the user's configuration) workers' trees go to;
    /// each entry may name several, comma-separated.
    pub remote: Vec<String>,
    /// Refuse what the file asks for that the user has not trusted here: a setup command,
    /// a network check, a widening of the sandbox (off only for a dry run, which creates
    /// nothing and runs no command).
    pub check_setup_trust: bool,
    /// A price file added over the built-in table and the user's own (`--prices`).
    pub prices: Option<std::path::PathBuf>,
}

impl RunRequest {
    /// A request for `task` that leaves every setting to the file and the defaults.
    pub fn new(task: impl Into<String>) -> Self {
        Self {
            task: task.into(),
            flags: RunSettings::default(),
            keep_worktrees: false,
            worker_backend: WorkerBackend::default(),
            worker_timeout_secs: None,
            sandbox: SandboxMode::default(),
            allow_network: false,
            remote: Vec::new(),
            check_setup_trust: true,
            prices: None,
        }
    }
}

/// A run's inputs, ready for [`crate::run::run`] or [`crate::run::plan::plan`].
#[derive(Debug, Clone)]
pub struct Launch {
    pub options: RunOptions,
    pub models: Models,
}

/// The hosts `names` (`--remote`, each possibly comma-separated) from the user's own
/// configuration; none for no names.
pub fn remote_hosts(names: &[String]) -> Result<Vec<crate::remote::RemoteHost>, LaunchError> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let env: Vec<_> = std::env::vars_os().collect();
    let path = crate::settings::remote::user_config_path(&env)
        .ok_or(crate::settings::remote::RemoteChoiceError::NoConfigHome)?;
    Ok(crate::settings::remote::choose(&path, names)?)
}

/// Layers `request` over the `.grove/config.toml` of the repository at `directory`
/// (flags beat the file, which beats the built-in defaults) and connects the models.
pub async fn prepare(directory: &Path, request: RunRequest) -> Result<Launch, LaunchError> {
    if request.task.trim().is_empty() {
        return Err(LaunchError::EmptyTask);
    }
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let root = repo.work_tree().unwrap_or(repo.common_dir());
    let file = ProjectConfig::load(root)?;
    // Read again when the run starts; refused here, a bad file leaves no run behind.
    read_rules(root)?;
    // Before anything is created: a setup command the file asks for runs only once the
    // user has trusted its exact text here (a worker could have written the file).
    if request.check_setup_trust
        && let Some(file) = &file
        && let Some(command) = &file.settings.setup
    {
        TrustStore::for_user()?.check(root, &file.path, command)?;
    }
    // The same for a check that may reach the network; one without it needs no trust.
    if request.check_setup_trust
        && let Some(file) = &file
        && let Some(check) = file.settings.check.as_ref().filter(|check| check.network)
    {
        TrustStore::for_user()?.check_network_check(root, &file.path, &check.command)?;
    }
    // And for what widens the files workers' commands see (`allow_read`, `copy`, a listed
    // `share`): a merged config could otherwise open the user's keys to the next run.
    if request.check_setup_trust
        && let Some(file) = &file
    {
        let widenings = file_widenings(&file.settings, &request.flags);
        if !widenings.is_empty() {
            TrustStore::for_user()?.check_widenings(root, &file.path, &widenings)?;
        }
    }
    let settings = match file {
        Some(file) => request.flags.over(file.settings),
        None => request.flags,
    };
    let resolved = settings.resolve(request.task);
    let mut options = resolved.options;
    if options.attempts > options.max_attempts {
        return Err(LaunchError::AttemptsOverMax {
            attempts: options.attempts,
            max: options.max_attempts,
        });
    }
    options.keep_worktrees = request.keep_worktrees;
    options.worker_backend = request.worker_backend;
    if let Some(seconds) = request.worker_timeout_secs {
        options.worker_backend_timeout_secs = seconds;
    }
    options.sandbox = request.sandbox;
    options.allow_network = request.allow_network;
    options.remote = remote_hosts(&request.remote)?;
    if !options.remote.is_empty() && options.worker_backend != WorkerBackend::Builtin {
        return Err(LaunchError::RemoteBackend {
            backend: options.worker_backend.name().to_owned(),
        });
    }

    let env: Vec<_> = std::env::vars_os().collect();
    options.prices = price_table(&env, request.prices.as_deref())?;
    let names = &resolved.models;
    check_money(
        &options,
        [
            names.lead.as_str(),
            names.worker.as_str(),
            names.reviewer.as_str(),
        ],
    )?;
    let client = model::connect(resolved.provider)?;
    let choice = |name: &str| ModelChoice {
        client: client.clone(),
        name: name.to_owned(),
    };
    let models = Models {
        provider: resolved.provider.as_str().to_owned(),
        lead: choice(&resolved.models.lead),
        worker: choice(&resolved.models.worker),
        reviewer: choice(&resolved.models.reviewer),
    };
    Ok(Launch { options, models })
}

/// Refuses to resume a run whose journaled setup command, network check, or widening of
/// what workers' commands see (`allow_read`, `copy`, a listed `share`), the user has not
/// trusted here (a run started before grove asked for trust, or whose trust record was
/// since removed). A run started since had them trusted at its start. Problems reading
/// the run are left to the resume to report.
pub async fn check_resume_trusted(directory: &Path, run_id: &str) -> Result<(), LaunchError> {
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let (Some(root), Ok(run_id)) = (repo.work_tree(), run_id.parse::<RunId>()) else {
        return Ok(());
    };
    let Ok(state) = RunStore::new(repo.common_dir()).read_state(&run_id) else {
        return Ok(());
    };
    if let Ok(options) = state.options.get()
        && let Some(command) = &options.worktree_setup.setup
    {
        TrustStore::for_user()?.check(root, &root.join(CONFIG_PATH), command)?;
    }
    if let Ok(options) = state.options.get()
        && let Some(check) = options.check.as_ref().filter(|check| check.network)
    {
        TrustStore::for_user()?.check_network_check(
            root,
            &root.join(CONFIG_PATH),
            &check.command,
        )?;
    }
    if let Ok(options) = state.options.get() {
        let widenings =
            journaled_widenings(options, |share| sandbox_view::found_by_grove(root, share));
        if !widenings.is_empty() {
            TrustStore::for_user()?.check_widenings(root, &root.join(CONFIG_PATH), &widenings)?;
        }
    }
    Ok(())
}

/// The models a run recorded, connected again for [`crate::run::resume`]; a run that
/// predates per-role names uses its one model for every role.
pub fn resume_models(state: &RunState) -> Result<Models, RunError> {
    let not_resumable = |error: ModelError| RunError::NotResumable {
        run_id: state.run_id.clone(),
        source: ResumeProblem::Model(Box::new(error)),
    };
    let provider: Provider = state.provider.parse().map_err(not_resumable)?;
    let client = model::connect(provider).map_err(not_resumable)?;
    // Runs journaled before per-role models name only one model.
    let names: ModelNames = state
        .options
        .get()
        .map(|options| options.model_names.clone())
        .unwrap_or_default();
    let pick = |name: String| ModelChoice {
        client: client.clone(),
        name: if name.is_empty() {
            state.model.clone()
        } else {
            name
        },
    };
    Ok(Models {
        provider: provider.as_str().to_owned(),
        lead: pick(names.lead),
        worker: pick(names.worker),
        reviewer: pick(names.reviewer),
    })
}
