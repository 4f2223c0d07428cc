//! The arguments of the MCP tools, as their JSON schemas show them, and their
//! translation into what the library takes.
//!
//! This file owns the argument names and their checks; each `run` argument means what
//! the `grove run` flag of the same name means, and becomes the same
//! [`RunRequest`]. It also owns which of them a client may give only once a person has
//! trusted the value ([`check_trusted`]). It must never resolve settings itself (that is
//! [`crate::run::launch::prepare`]'s job, shared with the CLI).

use std::path::Path;

use rmcp::schemars::{self, JsonSchema};
use serde::Deserialize;

use crate::agent::external::WorkerBackend;
use crate::git::{GitOptions, Repo};
use crate::model::Provider;
use crate::run::launch::{LaunchError, RunRequest};
use crate::settings::config::{MAX_ATTEMPTS, MAX_JOBS, RoleValues, RunSettings};
use crate::settings::trust::{McpGrant, TrustStore};
use crate::store::journal::VerdictKind;
use crate::tools::sandbox::SandboxMode;

/// The default cap on one subtask's diff in `show_run`, in characters.
pub const DEFAULT_DIFF_CHARS: usize = 20_000;
/// The largest cap a client may ask for; a diff is for reading, not for copying trees.
pub const MAX_DIFF_CHARS: usize = 200_000;

/// An argument the caller must correct; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("argument `{argument}`: {problem}")]
pub struct ArgumentError {
    pub argument: &'static str,
    pub problem: String,
}

impl ArgumentError {
    fn new(argument: &'static str, problem: impl Into<String>) -> Self {
        Self {
            argument,
            problem: problem.into(),
        }
    }
}

/// Turn caps: one number for every role, or one per role.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MaxTurns {
    /// The cap of every role.
    Every(u32),
    /// A cap per role; a role left out keeps its default.
    Roles(RoleTurns),
}

/// A turn cap per role.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleTurns {
    pub lead: Option<u32>,
    pub worker: Option<u32>,
    pub reviewer: Option<u32>,
}

/// The arguments of the `run` tool: `grove run`'s flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// What to do, in plain words, as you would tell an engineer.
    pub task: String,
    /// How many subtasks may run at once, 1 to 64 [default: 2 per core, at most 4].
    pub jobs: Option<u32>,
    /// How many workers try each subtask at once, 1 to 8, a judge merging the best
    /// attempt [default: 1; the lead may ask for more per subtask].
    pub attempts: Option<u32>,
    /// The model API: `anthropic` (ANTHROPIC_API_KEY) or `openai` (OPENAI_API_KEY,
    /// OPENAI_BASE_URL) [default: anthropic].
    pub provider: Option<String>,
    /// The model of every role [default: claude-sonnet-5-5 for anthropic, gpt-5.5 for
    /// openai].
    pub model: Option<String>,
    /// The lead's model (overrides `model`).
    pub lead_model: Option<String>,
    /// The workers' model (overrides `model`).
    pub worker_model: Option<String>,
    /// The reviewers' model (overrides `model`).
    pub reviewer_model: Option<String>,
    /// Turn caps: a number for every role, or `{"lead": N, "worker": N, "reviewer": N}`.
    pub max_turns: Option<MaxTurns>,
    /// Tokens the whole run may spend; no new subtask starts once they are spent.
    pub budget_tokens: Option<u64>,
    /// Tokens one subagent may spend; over it, its subtask fails.
    pub subagent_budget_tokens: Option<u64>,
    /// Leave the result on `grove/<run>/result` instead of moving the branch; the
    /// `review` tool applies it later.
    #[serde(default)]
    pub no_apply: bool,
    /// Keep every worktree after the run, for inspection.
    #[serde(default)]
    pub keep_worktrees: bool,
    /// Who does the workers' job: `builtin` (grove's own), `claude`, `codex`, `gemini`,
    /// `aider`, or `cmd:COMMAND` [default: builtin].
    pub worker_backend: Option<String>,
    /// Wall-clock limit of one external worker CLI run, in seconds [default: 3600].
    pub worker_timeout: Option<u64>,
    /// `on` confines workers' shell commands in the kernel sandbox; `off` runs them with
    /// the user's full rights (recorded in the journal) [default: on].
    pub sandbox: Option<String>,
    /// Let sandboxed shell commands use the network (the rest of the sandbox holds).
    #[serde(default)]
    pub allow_network: bool,
}

impl RunParams {
    /// The request these arguments make, as `grove run` with the same flags would.
    pub fn into_request(self) -> Result<RunRequest, ArgumentError> {
        if let Some(jobs) = self.jobs
            && !(1..=MAX_JOBS).contains(&jobs)
        {
            return Err(ArgumentError::new(
                "jobs",
                format!("expected 1 to {MAX_JOBS}, got {jobs}"),
            ));
        }
        if let Some(attempts) = self.attempts
            && !(1..=MAX_ATTEMPTS).contains(&attempts)
        {
            return Err(ArgumentError::new(
                "attempts",
                format!("expected 1 to {MAX_ATTEMPTS}, got {attempts}"),
            ));
        }
        let provider = match &self.provider {
            Some(name) => Some(
                name.parse::<Provider>()
                    .map_err(|error| ArgumentError::new("provider", error.to_string()))?,
            ),
            None => None,
        };
        let worker_backend = match &self.worker_backend {
            Some(name) => name
                .parse::<WorkerBackend>()
                .map_err(|error| ArgumentError::new("worker_backend", error.to_string()))?,
            None => WorkerBackend::default(),
        };
        let sandbox = match &self.sandbox {
            Some(mode) => mode
                .parse::<SandboxMode>()
                .map_err(|error| ArgumentError::new("sandbox", error.to_string()))?,
            None => SandboxMode::default(),
        };
        if self.worker_timeout == Some(0) {
            return Err(ArgumentError::new("worker_timeout", "expected at least 1"));
        }
        let flags = RunSettings {
            provider,
            model: self.model,
            models: RoleValues {
                lead: self.lead_model,
                worker: self.worker_model,
                reviewer: self.reviewer_model,
            },
            jobs: self.jobs,
            attempts: self.attempts,
            max_turns: turn_caps(self.max_turns)?,
            budget_tokens: self.budget_tokens,
            subagent_budget_tokens: self.subagent_budget_tokens,
            // As `--no-apply`: absent, `.grove/config.toml` decides.
            apply: self.no_apply.then_some(false),
            ..RunSettings::default()
        };
        Ok(RunRequest {
            task: self.task,
            flags,
            keep_worktrees: self.keep_worktrees,
            worker_backend,
            worker_timeout_secs: self.worker_timeout,
            sandbox,
            allow_network: self.allow_network,
            // A launcher runs with the user's credentials: only `grove run --remote`,
            // typed by the user, starts one.
            remote: Vec::new(),
            check_setup_trust: true,
            // The user's configuration's `prices` file still applies.
            prices: None,
        })
    }
}

fn turn_caps(max_turns: Option<MaxTurns>) -> Result<RoleValues<u32>, ArgumentError> {
    let caps = match max_turns {
        None => RoleValues::default(),
        Some(MaxTurns::Every(turns)) => RoleValues {
            lead: Some(turns),
            worker: Some(turns),
            reviewer: Some(turns),
        },
        Some(MaxTurns::Roles(roles)) => RoleValues {
            lead: roles.lead,
            worker: roles.worker,
            reviewer: roles.reviewer,
        },
    };
    if [caps.lead, caps.worker, caps.reviewer].contains(&Some(0)) {
        return Err(ArgumentError::new(
            "max_turns",
            "a turn cap must be a positive whole number",
        ));
    }
    Ok(caps)
}

/// The run arguments that would let a client run what it chose with the user's rights
/// or the network, as the trust records name them.
fn grants(request: &RunRequest) -> Vec<McpGrant> {
    let mut grants = Vec::new();
    if let WorkerBackend::Command(command) = &request.worker_backend {
        grants.push(McpGrant::CmdBackend(command.clone()));
    }
    if request.sandbox == SandboxMode::Off {
        grants.push(McpGrant::SandboxOff);
    }
    if request.allow_network {
        grants.push(McpGrant::AllowNetwork);
    }
    grants
}

/// Refuses `request` unless a person has trusted, in the repository at `directory`,
/// each of its arguments that escalates (a `cmd:` worker backend, `sandbox: off`,
/// `allow_network`), with exactly that value: a client's model may be following text
/// that someone planted for it. The refusal names the `grove trust --mcp` command.
pub async fn check_trusted(directory: &Path, request: &RunRequest) -> Result<(), LaunchError> {
    let grants = grants(request);
    if grants.is_empty() {
        return Ok(());
    }
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let root = repo.work_tree().unwrap_or(repo.common_dir());
    let store = TrustStore::for_user()?;
    for grant in &grants {
        store.check_mcp(root, grant)?;
    }
    Ok(())
}

/// The arguments of the `list_runs` tool: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {}

/// The arguments of the `resume` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeParams {
    /// The run to continue, as `list_runs` shows it.
    pub run_id: String,
}

/// The arguments of the `show_run` tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowParams {
    /// The run to show, as `list_runs` shows it.
    pub run_id: String,
    /// Include each subtask's diff against the run's base.
    #[serde(default)]
    pub diff: bool,
    /// The most characters of one subtask's diff to include [default: 20000, at most
    /// 200000]; a longer diff is cut and marked so.
    pub diff_max_chars: Option<usize>,
}

impl ShowParams {
    /// The cap on one subtask's diff.
    pub fn diff_cap(&self) -> Result<usize, ArgumentError> {
        match self.diff_max_chars {
            None => Ok(DEFAULT_DIFF_CHARS),
            Some(chars) if (1..=MAX_DIFF_CHARS).contains(&chars) => Ok(chars),
            Some(chars) => Err(ArgumentError::new(
                "diff_max_chars",
                format!("expected 1 to {MAX_DIFF_CHARS}, got {chars}"),
            )),
        }
    }
}

/// The arguments of the `review` tool: `grove review`'s flags.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewParams {
    /// The finished run to decide on, as `list_runs` shows it.
    pub run_id: String,
    /// Approve these subtasks whatever the reviewer said, e.g. `["S1", "S3"]`.
    #[serde(default)]
    pub approve: Vec<String>,
    /// Reject these subtasks whatever the reviewer said, e.g. `["S2"]`.
    #[serde(default)]
    pub reject: Vec<String>,
    /// Apply the result to the user's branch afterwards, with `grove run`'s safety (a
    /// dirty work tree or a moved branch is refused and nothing is touched).
    #[serde(default)]
    pub apply: bool,
}

impl ReviewParams {
    /// The decisions, approvals first, as `grove review --approve … --reject …` gives
    /// them; the library refuses unknown and contradictory labels.
    pub fn decisions(&self) -> Vec<(String, VerdictKind)> {
        let approve = self.approve.iter().map(|id| (id, VerdictKind::Approve));
        let reject = self.reject.iter().map(|id| (id, VerdictKind::Reject));
        approve
            .chain(reject)
            .map(|(id, verdict)| (id.trim().to_owned(), verdict))
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn params(json: serde_json::Value) -> RunParams {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn run_arguments_become_the_flags_grove_run_would_give() {
        let request = params(serde_json::json!({
            "task": "fix it",
            "jobs": 3,
            "provider": "openai",
            "model": "m",
            "worker_model": "w",
            "max_turns": {"worker": 7},
            "budget_tokens": 1000,
            "no_apply": true,
            "sandbox": "off",
            "allow_network": true,
            "worker_backend": "codex",
            "worker_timeout": 60,
        }))
        .into_request()
        .unwrap();
        assert_eq!(
            request.flags,
            RunSettings {
                provider: Some(Provider::OpenAi),
                model: Some("m".into()),
                models: RoleValues {
                    lead: None,
                    worker: Some("w".into()),
                    reviewer: None,
                },
                jobs: Some(3),
                max_turns: RoleValues {
                    lead: None,
                    worker: Some(7),
                    reviewer: None,
                },
                budget_tokens: Some(1000),
                apply: Some(false),
                ..RunSettings::default()
            },
            "each argument sets the setting of the flag of the same name, nothing else"
        );
        assert_eq!(
            (
                request.task.as_str(),
                request.sandbox,
                request.allow_network,
                request.worker_backend,
                request.worker_timeout_secs
            ),
            (
                "fix it",
                SandboxMode::Off,
                true,
                WorkerBackend::Codex,
                Some(60)
            )
        );
    }

    #[test]
    fn run_arguments_left_out_leave_the_decision_to_the_project_file() {
        let request = params(serde_json::json!({"task": "t", "max_turns": 5}))
            .into_request()
            .unwrap();
        assert_eq!(
            request.flags,
            RunSettings {
                max_turns: RoleValues {
                    lead: Some(5),
                    worker: Some(5),
                    reviewer: Some(5),
                },
                ..RunSettings::default()
            },
            "no_apply false is no flag at all, so `apply = false` in the file still holds"
        );
    }

    #[test]
    fn bad_run_arguments_are_refused_naming_the_argument() {
        let refused =
            |json: serde_json::Value| params(json).into_request().map(drop).unwrap_err().argument;
        assert_eq!(refused(serde_json::json!({"task": "t", "jobs": 0})), "jobs");
        assert_eq!(
            refused(serde_json::json!({"task": "t", "jobs": 65})),
            "jobs"
        );
        assert_eq!(
            refused(serde_json::json!({"task": "t", "provider": "gemini"})),
            "provider"
        );
        assert_eq!(
            refused(serde_json::json!({"task": "t", "sandbox": "maybe"})),
            "sandbox"
        );
        assert_eq!(
            refused(serde_json::json!({"task": "t", "max_turns": {"lead": 0}})),
            "max_turns"
        );
        assert_eq!(
            refused(serde_json::json!({"task": "t", "worker_backend": "vim"})),
            "worker_backend"
        );
        assert!(
            serde_json::from_value::<RunParams>(serde_json::json!({"task": "t", "jobz": 2}))
                .is_err(),
            "a misspelt argument is an error, not silently ignored"
        );
    }
}
