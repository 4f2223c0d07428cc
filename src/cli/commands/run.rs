//! `grove run TASK`: runs one task in the current repository (or, with `--dry-run`,
//! shows the lead's plan).

use std::io::{IsTerminal as _, Read as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use grove::agent::external::WorkerBackend;
use grove::model::{self, Provider};
use grove::prices::Usd;
use grove::run::estimate::{self, EstimateInput};
use grove::run::launch::{self, Launch, LaunchError, RunRequest};
use grove::settings::config::{RoleValues, RunSettings};

use crate::cli::drive::{self, UsageError};
use crate::cli::exit::EXIT_INTERRUPTED;
use crate::cli::render::{self, Output};

/// Arguments of `grove run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to do, in plain words.
    #[arg(required_unless_present = "task_file")]
    pub task: Option<String>,
    /// Read the task from FILE (`-`: standard input) instead of the command line, for a
    /// task longer than a command line holds (128 KiB).
    #[arg(long, value_name = "FILE", conflicts_with = "task")]
    pub task_file: Option<PathBuf>,
    /// How many subtasks may run at once [default: 2 per core, at most 4].
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
    /// How many workers try each subtask at once, a judge merging the best attempt
    /// [default: 1; the lead may ask for more per subtask, up to `max_attempts`].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=8))]
    pub attempts: Option<u32>,
    /// The model API: anthropic (ANTHROPIC_API_KEY) or openai (OPENAI_API_KEY, OPENAI_BASE_URL)
    /// [default: anthropic].
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// The model of every role [default: claude-sonnet-5-5 for anthropic, gpt-5.5 for openai].
    #[arg(long)]
    pub model: Option<String>,
    /// The lead's model (overrides --model).
    #[arg(long)]
    pub lead_model: Option<String>,
    /// The workers' model (overrides --model).
    #[arg(long)]
    pub worker_model: Option<String>,
    /// The reviewers' model (overrides --model).
    #[arg(long)]
    pub reviewer_model: Option<String>,
    /// Turn caps: N for every role, or ROLE=N (lead, worker, reviewer); repeatable.
    #[arg(long, value_name = "N|ROLE=N")]
    pub max_turns: Vec<String>,
    /// Tokens the whole run may spend; no new subtask starts once they are spent.
    #[arg(long, value_name = "TOKENS")]
    pub budget_tokens: Option<u64>,
    /// Tokens one subagent may spend; over it, its subtask fails.
    #[arg(long, value_name = "TOKENS")]
    pub subagent_budget_tokens: Option<u64>,
    /// US dollars the whole run may spend, counted turn by turn at list prices; at it the
    /// run pauses (`grove resume RUN --budget-usd HIGHER` finishes it).
    #[arg(long, value_name = "USD", allow_negative_numbers = true, value_parser = parse_usd)]
    pub budget_usd: Option<Usd>,
    /// US dollars one subagent may spend; over it, its subtask fails.
    #[arg(long, value_name = "USD", allow_negative_numbers = true, value_parser = parse_usd)]
    pub subagent_budget_usd: Option<Usd>,
    /// A TOML file of model prices in US dollars per million tokens, added to (or
    /// replacing) the built-in ones and your configuration's `prices` file.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Leave the result on grove/<run>/result instead of moving your branch.
    #[arg(long, conflicts_with = "apply")]
    pub no_apply: bool,
    /// Move your branch to the result when safe (the default; beats `apply = false` in
    /// .grove/config.toml).
    #[arg(long)]
    pub apply: bool,
    /// Keep every worktree after the run, for inspection.
    #[arg(long)]
    pub keep_worktrees: bool,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
    /// Show the lead's plan (the subtasks it would delegate) without running any worker:
    /// no worktree, branch or run is created.
    #[arg(long)]
    pub dry_run: bool,
    /// Who does the workers' job: builtin (grove's own), claude, codex, gemini, aider, or
    /// cmd:"COMMAND" (the brief in $GROVE_BRIEF and on stdin). Lead and reviewer stay grove's.
    #[arg(long, value_name = "BACKEND", default_value = "builtin", value_parser = parse_worker_backend)]
    pub worker_backend: WorkerBackend,
    /// Wall-clock limit of one external worker CLI run, in seconds [default: 3600].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub worker_timeout: Option<u64>,
    /// Confine workers' shell commands in the kernel sandbox (on); confine them without
    /// namespaces on a system that allows none (no-loopback: every socket refused); or run
    /// them with your full rights (off: loud, and recorded in the run's journal).
    #[arg(long, value_name = "on|no-loopback|off", default_value = "on", value_parser = clap::builder::ValueParser::new(|text: &str| text.parse::<grove::tools::sandbox::SandboxMode>()))]
    pub sandbox: grove::tools::sandbox::SandboxMode,
    /// Let sandboxed shell commands use the host's network, its loopback services
    /// included (the rest of the sandbox holds).
    #[arg(long)]
    pub allow_network: bool,
    /// Run workers on these remote hosts (`[remote.NAME]` in ~/.config/grove/config.toml),
    /// placed by free slots; repeat the flag or separate names with commas.
    #[arg(long, value_name = "NAME")]
    pub remote: Vec<String>,
}

/// A budget in dollars: positive, at most a million (`5`, `2.50`, `$2.50`).
pub fn parse_usd(text: &str) -> Result<Usd, String> {
    text.parse()
}

fn parse_worker_backend(text: &str) -> Result<WorkerBackend, String> {
    text.parse()
        .map_err(|error: grove::agent::external::BackendParseError| error.to_string())
}

fn parse_provider(text: &str) -> Result<Provider, String> {
    text.parse()
        .map_err(|error: model::ModelError| error.to_string())
}

/// `--max-turns` values, in order: `N` sets every role, `ROLE=N` one role.
fn turn_caps(values: &[String]) -> Result<RoleValues<u32>, UsageError> {
    let mut caps = RoleValues::default();
    for value in values {
        let (role, number) = match value.split_once('=') {
            Some((role, number)) => (Some(role.trim()), number),
            None => (None, value.as_str()),
        };
        let turns: u32 = number
            .trim()
            .parse()
            .ok()
            .filter(|turns| *turns > 0)
            .ok_or_else(|| {
                UsageError(format!(
                    "--max-turns {value}: expected a positive whole number"
                ))
            })?;
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
                return Err(UsageError(format!(
                    "--max-turns {value}: unknown role {other:?} (lead, worker, reviewer)"
                )));
            }
        }
    }
    Ok(caps)
}

/// Runs the task with the settings of the flags over `.grove/config.toml`.
pub async fn run(directory: &Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    let task = task(directory, &args)?;
    let flags = flag_settings(&args)?;
    let repo = drive::open_repo(directory).await?;
    let root = repo.work_tree().unwrap_or(repo.common_dir());
    // Flags beat .grove/config.toml, which beats the built-in defaults; what the file asks
    // to run or to open to workers must be trusted (not for a dry run, which creates
    // nothing).
    let Launch { options, models } = launch::prepare(
        directory,
        RunRequest {
            task,
            flags,
            keep_worktrees: args.keep_worktrees,
            worker_backend: args.worker_backend.clone(),
            worker_timeout_secs: args.worker_timeout,
            sandbox: args.sandbox,
            allow_network: args.allow_network,
            remote: args.remote.clone(),
            check_setup_trust: !args.dry_run,
            prices: args.prices.as_ref().map(|file| directory.join(file)),
        },
    )
    .await
    .map_err(usage_or_error)?;
    render::agent_file_problems(&drive::agent_file_problems(root));

    let json = args.json;
    if args.dry_run {
        let (plan, ledgers) = drive::drive_live(|events, cancel| {
            grove::run::dry_run::plan(directory, options, models, events, cancel)
        })
        .await;
        let plan = plan?;
        render::plan(&plan, &ledgers);
        if json {
            render::json(&plan)?;
        }
        return Ok(match plan.stopped.as_deref() {
            None => ExitCode::SUCCESS,
            Some("interrupted") => ExitCode::from(EXIT_INTERRUPTED),
            Some(_) => ExitCode::FAILURE,
        });
    }
    let estimate = estimate::estimate(&EstimateInput {
        // Each attempt costs what a subtask does; the judge, about a review.
        subtasks: {
            let (low, high) = estimate::GUESSED_SUBTASKS;
            (low * options.attempts, high * options.attempts)
        },
        planned: false,
        repository: estimate::repository_size(&repo).await,
        models: &options.model_names,
        prices: &options.prices,
        max_turns: options.max_turns,
        worker_backend: &options.worker_backend,
    });
    if std::io::stderr().is_terminal() {
        eprintln!("{}", render::cost::estimate_line(&estimate));
    }
    let report = drive::drive(Output::of_flag(json), Some(estimate), |events, cancel| {
        grove::run::run(directory, options, models, events, cancel)
    })
    .await?;
    Ok(drive::exit_code(&report))
}

/// A launch error as the CLI reports it: what the user got wrong in the request or its
/// files (a price file, a money budget) is a usage error, exit 2.
pub fn usage_or_error(error: LaunchError) -> anyhow::Error {
    if error.is_usage() {
        UsageError(error.to_string()).into()
    } else {
        error.into()
    }
}

/// The task: the argument, or the contents of `--task-file` (`-` reads stdin). An empty
/// task is a usage error.
fn task(directory: &Path, args: &RunArgs) -> anyhow::Result<String> {
    let task = match (&args.task, &args.task_file) {
        (Some(task), _) => task.clone(),
        (None, Some(file)) if file.as_os_str() == "-" => {
            let mut task = String::new();
            std::io::stdin()
                .read_to_string(&mut task)
                .context("cannot read the task from standard input")?;
            task
        }
        (None, Some(file)) => {
            let path = directory.join(file);
            std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read the task file {}", path.display()))?
        }
        (None, None) => String::new(),
    };
    if task.trim().is_empty() {
        return Err(UsageError(
            "the task is empty; say what grove should do, e.g. grove run \"fix the failing test\""
                .to_owned(),
        )
        .into());
    }
    Ok(task)
}

/// The settings the flags give (unset keys fall through to the project file).
fn flag_settings(args: &RunArgs) -> Result<RunSettings, UsageError> {
    Ok(RunSettings {
        provider: args.provider,
        model: args.model.clone(),
        models: RoleValues {
            lead: args.lead_model.clone(),
            worker: args.worker_model.clone(),
            reviewer: args.reviewer_model.clone(),
        },
        jobs: args.jobs,
        attempts: args.attempts,
        max_turns: turn_caps(&args.max_turns)?,
        budget_tokens: args.budget_tokens,
        subagent_budget_tokens: args.subagent_budget_tokens,
        budget_usd: args.budget_usd,
        subagent_budget_usd: args.subagent_budget_usd,
        apply: match (args.no_apply, args.apply) {
            (true, _) => Some(false),
            (false, true) => Some(true),
            (false, false) => None,
        },
        ..RunSettings::default()
    })
}
