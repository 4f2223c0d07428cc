//! From a caller's request to a run's inputs: the flags of `grove run` and the
//! arguments of the MCP `run` tool become [`RunOptions`] and [`Models`] the same way.
//!
//! This module owns layering a request over `.grove/config.toml` and the built-in
//! defaults, parsing turn caps (`N` or `ROLE=N`), and connecting the model clients of a
//! new or a resumed run. It must never print, start a run, or write anything.

use std::path::Path;

use crate::agent::external::WorkerBackend;
use crate::git::{GitError, GitOptions, Repo};
use crate::model::{self, ModelError, Provider};
use crate::run::orchestrator::RunError;
use crate::settings::config::{ConfigError, ProjectConfig, RoleValues, RunSettings};
use crate::settings::{ModelChoice, ModelNames, Models, RunOptions};
use crate::store::state::RunState;
use crate::tools::sandbox::SandboxMode;

/// Why a request could not become a run. None of these are retried: the caller fixes
/// the request, the file or the environment.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The task is empty or only blanks.
    #[error("the task is empty; say what grove should do, e.g. grove run \"fix the failing test\"")]
    EmptyTask,
    /// A turn cap is not `N` or `ROLE=N` with a positive `N` and a known role.
    #[error("--max-turns {value}: {problem}")]
    TurnCap { value: String, problem: String },
    /// The directory is not a git repository (or git failed reading it).
    #[error(transparent)]
    Repo(#[from] GitError),
    /// `.grove/config.toml` cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The provider's client cannot be configured (missing key, bad base URL).
    #[error(transparent)]
    Model(#[from] ModelError),
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
        }
    }
}

/// A run's inputs, ready for [`crate::run::run`] or [`crate::run::plan::plan`].
#[derive(Debug, Clone)]
pub struct Launch {
    pub options: RunOptions,
    pub models: Models,
}

/// Layers `request` over the `.grove/config.toml` of the repository at `directory`
/// (flags beat the file, which beats the built-in defaults) and connects the models.
pub async fn prepare(directory: &Path, request: RunRequest) -> Result<Launch, LaunchError> {
    if request.task.trim().is_empty() {
        return Err(LaunchError::EmptyTask);
    }
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let root = repo.work_tree().unwrap_or(repo.common_dir());
    let settings = match ProjectConfig::load(root)? {
        Some(file) => request.flags.over(file.settings),
        None => request.flags,
    };
    let resolved = settings.resolve(request.task);
    let mut options = resolved.options;
    options.keep_worktrees = request.keep_worktrees;
    options.worker_backend = request.worker_backend;
    if let Some(seconds) = request.worker_timeout_secs {
        options.worker_backend_timeout_secs = seconds;
    }
    options.sandbox = request.sandbox;
    options.allow_network = request.allow_network;

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

/// The models a run recorded, connected again for [`crate::run::resume`]; a run that
/// predates per-role names uses its one model for every role.
pub fn resume_models(state: &RunState) -> Result<Models, RunError> {
    let not_resumable = |reason: String| RunError::NotResumable {
        run_id: state.run_id.clone(),
        reason,
    };
    let provider: Provider = state
        .provider
        .parse()
        .map_err(|error: ModelError| not_resumable(error.to_string()))?;
    let client = model::connect(provider).map_err(|error| not_resumable(error.to_string()))?;
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

/// Turn caps given as `N` (every role) or `ROLE=N` (lead, worker, reviewer), applied in
/// order.
pub fn parse_turn_caps(values: &[String]) -> Result<RoleValues<u32>, LaunchError> {
    let mut caps = RoleValues::default();
    for value in values {
        let problem = |problem: &str| LaunchError::TurnCap {
            value: value.clone(),
            problem: problem.to_owned(),
        };
        let (role, number) = match value.split_once('=') {
            Some((role, number)) => (Some(role.trim()), number),
            None => (None, value.as_str()),
        };
        let turns: u32 = number
            .trim()
            .parse()
            .ok()
            .filter(|turns| *turns > 0)
            .ok_or_else(|| problem("expected a positive whole number"))?;
        match role {
            None => {
                caps = RoleValues {
                    lead: Some(turns),
                    worker: Some(turns),
                    reviewer: Some(turns),
                };
            }
            Some("lead") => caps.lead = Some(turns),
            Some("worker") => caps.worker = Some(turns),
            Some("reviewer") => caps.reviewer = Some(turns),
            Some(other) => {
                return Err(problem(&format!(
                    "unknown role {other:?} (lead, worker, reviewer)"
                )));
            }
        }
    }
    Ok(caps)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn caps(values: &[&str]) -> Result<RoleValues<u32>, String> {
        let values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        parse_turn_caps(&values).map_err(|error| error.to_string())
    }

    #[test]
    fn turn_caps_apply_in_order_a_number_for_every_role_then_one_role() {
        assert_eq!(
            caps(&["5", "worker=9"]),
            Ok(RoleValues {
                lead: Some(5),
                worker: Some(9),
                reviewer: Some(5),
            }),
            "N sets every role; a later ROLE=N overrides that role only"
        );
    }

    #[test]
    fn turn_caps_refuse_zero_words_and_unknown_roles_naming_the_value() {
        assert_eq!(
            caps(&["0"]),
            Err("--max-turns 0: expected a positive whole number".to_owned())
        );
        assert_eq!(
            caps(&["judge=3"]),
            Err("--max-turns judge=3: unknown role \"judge\" (lead, worker, reviewer)".to_owned())
        );
    }
}
