//! `grove run TASK`: runs one task in the current repository (or, with `--dry-run`,
//! shows the lead's plan).

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::agent::external::WorkerBackend;
use grove::model::{self, Provider};
use grove::run::launch::{self, Launch, RunRequest, parse_turn_caps};
use grove::settings::config::{RoleValues, RunSettings};

use crate::cli::exit::EXIT_INTERRUPTED;
use crate::cli::{drive, render};

/// Arguments of `grove run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to do, in plain words.
    pub task: String,
    /// How many subtasks may run at once [default: 2 per core, at most 4].
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
    /// The model API: anthropic (ANTHROPIC_API_KEY) or openai (OPENAI_API_KEY, OPENAI_BASE_URL)
    /// [default: anthropic].
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// The model of every role [default: claude-sonnet-4-5 for anthropic, gpt-4.1 for openai].
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
    /// Confine workers' shell commands in the kernel sandbox (on), or run them with your
    /// full rights (off: loud, and recorded in the run's journal).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = clap::builder::ValueParser::new(|text: &str| text.parse::<grove::tools::sandbox::SandboxMode>()))]
    pub sandbox: grove::tools::sandbox::SandboxMode,
    /// Let sandboxed shell commands use the network (the rest of the sandbox holds).
    #[arg(long)]
    pub allow_network: bool,
}

fn parse_worker_backend(text: &str) -> Result<WorkerBackend, String> {
    text.parse()
        .map_err(|error: grove::agent::external::BackendParseError| error.to_string())
}

fn parse_provider(text: &str) -> Result<Provider, String> {
    text.parse()
        .map_err(|error: model::ModelError| error.to_string())
}

/// Runs the task with the settings of the flags over `.grove/config.toml`.
pub async fn run(directory: &Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    // Flags beat .grove/config.toml, which beats the built-in defaults (RunSettings::over).
    let flags = RunSettings {
        provider: args.provider,
        model: args.model.clone(),
        models: RoleValues {
            lead: args.lead_model.clone(),
            worker: args.worker_model.clone(),
            reviewer: args.reviewer_model.clone(),
        },
        jobs: args.jobs,
        max_turns: parse_turn_caps(&args.max_turns)?,
        budget_tokens: args.budget_tokens,
        subagent_budget_tokens: args.subagent_budget_tokens,
        apply: match (args.no_apply, args.apply) {
            (true, _) => Some(false),
            (false, true) => Some(true),
            (false, false) => None,
        },
        ..RunSettings::default()
    };
    let Launch { options, models } = launch::prepare(
        directory,
        RunRequest {
            task: args.task.clone(),
            flags,
            keep_worktrees: args.keep_worktrees,
            worker_backend: args.worker_backend.clone(),
            worker_timeout_secs: args.worker_timeout,
            sandbox: args.sandbox,
            allow_network: args.allow_network,
        },
    )
    .await?;

    let json = args.json;
    if args.dry_run {
        let (plan, ledgers) = drive::drive_live(|events, cancel| {
            grove::run::plan::plan(directory, options, models, events, cancel)
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
    let report = drive::drive(json, |events, cancel| {
        grove::run::run(directory, options, models, events, cancel)
    })
    .await?;
    Ok(drive::exit_code(&report))
}
