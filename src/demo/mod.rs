//! `grove demo`: the real pipeline — worktrees, concurrent workers, the project's check
//! on each subtask, the reviewer gate, the merge, the check on the merged result and the
//! apply — on a sample repository, with the model replaced by a
//! scripted replay server on 127.0.0.1.
//!
//! This module owns the demo's setup and what "went as scripted" means. It must never
//! call a real model or reach the network, never touch the user's repositories or git
//! configuration (the sample lives in a directory the caller gives), and never print.

pub mod replay;
pub mod sample;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::git::GitOptions;
use crate::model::{AnthropicClient, AnthropicConfig, ModelError, RetryPolicy};
use crate::run::report::CheckOutcome;
use crate::run::{ModelChoice, Models, RunEnd, RunError, RunOptions, RunReport, SubtaskReport};
use crate::settings::config::ProjectConfig;
use crate::store::journal::{CheckStatus, SubtaskOutcome, VerdictKind};

use replay::ReplayServer;

/// The model name the replay's requests carry.
pub const REPLAY_MODEL: &str = "replay";

/// Why the demo could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Not retried: the user picks another directory.
    #[error(
        "{path} is not empty; the demo writes its sample repository into an empty or new directory"
    )]
    DirNotEmpty { path: PathBuf },
    /// Not retried: the file system or libgit2 refused.
    #[error("cannot {action} for the demo's sample repository at {path}: {reason}")]
    Sample {
        path: PathBuf,
        action: &'static str,
        reason: String,
    },
    /// Not retried: the replay server could not start.
    #[error("cannot start the demo's replay server: {reason}")]
    Replay { reason: String },
    /// Not retried: the client for the replay server could not be built.
    #[error("cannot build the model client for the replay server: {0}")]
    Model(#[from] ModelError),
    /// The run itself failed; see [`RunError`] for what is retried.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// A prepared demo: the sample repository is committed and the replay is listening.
#[derive(Debug)]
pub struct Demo {
    repo: PathBuf,
    options: RunOptions,
    models: Models,
    /// Kept so the server lives as long as the demo.
    _server: ReplayServer,
}

/// A finished demo.
#[derive(Debug)]
pub struct DemoOutcome {
    /// The sample repository (canonical path).
    pub repo: PathBuf,
    pub run_id: String,
    pub report: RunReport,
}

impl Demo {
    /// Writes the sample repository into `dir` (empty or new) and starts the replay.
    pub async fn prepare(dir: &Path) -> Result<Self, DemoError> {
        Self::prepare_with_delay(dir, replay::DEFAULT_DELAY).await
    }

    /// [`Demo::prepare`] with another per-reply delay (zero in tests that need speed).
    pub async fn prepare_with_delay(dir: &Path, delay: Duration) -> Result<Self, DemoError> {
        let repo = sample::write_sample(dir).await?;
        let server = ReplayServer::start(delay).await?;
        let config = AnthropicConfig {
            delivery: crate::model::Delivery::Whole,
            // The replay is local: a failure will not heal by waiting long.
            retry: RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(100),
                max_delay: Duration::from_millis(500),
            },
            request_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            ..AnthropicConfig::new(server.base_url(), REPLAY_MODEL)
        };
        let client: Arc<dyn crate::model::Model> = Arc::new(AnthropicClient::new(config)?);
        let choice = || ModelChoice {
            client: client.clone(),
            name: REPLAY_MODEL.to_owned(),
        };
        let models = Models {
            provider: "anthropic".to_owned(),
            lead: choice(),
            worker: choice(),
            reviewer: choice(),
        };
        // The sample's `[check]`, read the way `grove run` reads a project's.
        let config = ProjectConfig::load(&repo).map_err(|error| DemoError::Sample {
            path: repo.clone(),
            action: "read the sample's .grove/config.toml",
            reason: error.to_string(),
        })?;
        let options = RunOptions {
            jobs: sample::TARGETS.len(),
            model_names: models.names(),
            git: GitOptions::default(),
            check: config.and_then(|config| config.settings.check),
            ..RunOptions::new(sample::TASK)
        };
        Ok(Self {
            repo,
            options,
            models,
            _server: server,
        })
    }

    /// The sample repository.
    pub fn repo(&self) -> &Path {
        &self.repo
    }

    /// What the demo's run is estimated to cost, from its script's subtasks (its plan).
    pub async fn estimate(&self) -> crate::run::estimate::Estimate {
        use crate::run::estimate::{self, EstimateInput};
        let planned = u32::try_from(sample::TARGETS.len()).unwrap_or(u32::MAX);
        let size = match crate::git::Repo::open(&self.repo, GitOptions::default()).await {
            Ok(repo) => estimate::repository_size(&repo).await,
            Err(_) => crate::git::TreeSize::default(),
        };
        estimate::estimate(&EstimateInput {
            subtasks: (planned, planned),
            planned: true,
            repository: size,
            models: &self.options.model_names,
            prices: &self.options.prices,
            max_turns: self.options.max_turns,
            worker_backend: &self.options.worker_backend,
        })
    }

    /// Runs the real pipeline on the sample; the first event says it is a replay.
    pub async fn run(
        &self,
        events: EventSink,
        cancel: CancellationToken,
    ) -> Result<RunReport, RunError> {
        events.emit(Event::Note {
            message: format!(
                "demo: this is a REPLAY — a scripted model on 127.0.0.1 answers instead of a \
                 real one; the repository, worktrees, reviews and merges are real ({})",
                self.repo.display()
            ),
        });
        events.emit(Event::Note {
            message: format!(
                "demo: no money is spent; the scripted model's turns are priced as {} to \
                 show how costs look (SCRIPTED MODEL, not a real bill)",
                crate::settings::config::default_model(crate::model::Provider::Anthropic)
            ),
        });
        let mut options = self.options.clone();
        // The replayed workers run no shell command, so a machine that cannot confine one
        // (no Landlock, not Linux) can still show the demo; the run says so loudly.
        if let Err(error) = crate::tools::sandbox::probe(&options.commands, options.sandbox) {
            events.emit(Event::Note {
                message: format!(
                    "demo: this machine cannot confine shell commands ({error}); the \
                     replayed workers run none, so the demo goes on without the sandbox"
                ),
            });
            options.sandbox = crate::tools::sandbox::SandboxMode::Off;
        }
        // The sample's check runs its tests with python3; without one the demo shows the
        // rest, and says why no check ran.
        if options.check.is_some() && !on_path(&options.commands, "python3") {
            events.emit(Event::Note {
                message: "demo: python3 is not on PATH, so the sample's [check] (its unit \
                          tests) is left out of this demo"
                    .to_owned(),
            });
            options.check = None;
        }
        crate::run::run(&self.repo, options, self.models.clone(), events, cancel).await
    }
}

/// Whether `program` is an executable file in a directory of the commands' `PATH`.
fn on_path(commands: &crate::tools::sandbox::CommandHost, program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = commands
        .env()
        .into_iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value)
        .unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

/// Prepares and runs the demo in `dir` (empty or new).
pub async fn demo(
    dir: &Path,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<DemoOutcome, DemoError> {
    let demo = Demo::prepare(dir).await?;
    let report = demo.run(events, cancel).await?;
    Ok(DemoOutcome {
        repo: demo.repo,
        run_id: report.run_id.clone(),
        report,
    })
}

/// True when the run ended as the script intends: finished and applied, every clean
/// subtask merged, exactly the one with the stray line rejected by its reviewer, and
/// (when the sample's check ran) every subtask's check and the result's green.
pub fn went_as_scripted(report: &RunReport) -> bool {
    // Subtasks may be listed in any order: compare sorted outcomes.
    let sorted = |mut outcomes: Vec<(&'static str, Option<&'static str>)>| {
        outcomes.sort_unstable();
        outcomes
    };
    let expected = sorted(
        sample::TARGETS
            .iter()
            .map(|target| match target.stray_line {
                None => (SubtaskOutcome::Merged, Some(VerdictKind::Approve)),
                Some(_) => (SubtaskOutcome::Rejected, Some(VerdictKind::Reject)),
            })
            .map(|(status, verdict)| (status.as_str(), verdict.map(VerdictKind::as_str)))
            .collect(),
    );
    let actual = sorted(
        report
            .subtasks
            .iter()
            .map(|subtask| {
                (
                    subtask.status.as_str(),
                    subtask.verdict.map(VerdictKind::as_str),
                )
            })
            .collect(),
    );
    // Every check, when the sample's ran, is green — each subtask's and the merged
    // result's: the stray line breaks no test; it is the reviewer that catches it.
    let checks_green = report
        .check
        .runs
        .iter()
        .all(|run| run.status == CheckStatus::Passed)
        && (report.check.command.is_none() || report.check.status == CheckOutcome::Passed);
    report.status == RunEnd::Finished && report.applied && actual == expected && checks_green
}

/// The subtask its reviewer rejected, when there is one.
pub fn rejected(report: &RunReport) -> Option<&SubtaskReport> {
    report
        .subtasks
        .iter()
        .find(|subtask| subtask.status == SubtaskOutcome::Rejected)
}
