//! `grove resume RUN_ID`: continues an interrupted run; it ends like `grove run`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use grove::git::GitOptions;
use grove::prices::Usd;
use grove::run::launch;

use crate::cli::commands::run::{parse_usd, usage_or_error};
use crate::cli::drive;
use crate::cli::render::{self, Output};

/// Arguments of `grove resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue, as `grove runs` lists it.
    pub run_id: String,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
    /// Run the remaining workers on these remote hosts (`[remote.NAME]` in
    /// ~/.config/grove/config.toml); without it, they continue on this machine.
    #[arg(long, value_name = "NAME")]
    pub remote: Vec<String>,
    /// US dollars the whole run may spend, replacing the budget it had (a run paused at
    /// its budget finishes with a higher one); counted from what it spent so far.
    #[arg(long, value_name = "USD", allow_negative_numbers = true, value_parser = parse_usd)]
    pub budget_usd: Option<Usd>,
    /// US dollars one subagent may spend, replacing the run's.
    #[arg(long, value_name = "USD", allow_negative_numbers = true, value_parser = parse_usd)]
    pub subagent_budget_usd: Option<Usd>,
    /// A TOML file of model prices added to (or replacing) the built-in ones and your
    /// configuration's `prices` file.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

/// Resumes `args.run_id` with the provider and models the run started with.
pub async fn resume(directory: &Path, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    launch::check_resume_trusted(directory, &args.run_id).await?;
    let overrides = launch::resume_overrides(
        directory,
        &args.run_id,
        args.budget_usd,
        args.subagent_budget_usd,
        args.prices
            .as_ref()
            .map(|file| directory.join(file))
            .as_deref(),
    )
    .await
    .map_err(usage_or_error)?;
    let models = launch::resume_models;
    let run_id = drive::parse_run_id(&args.run_id)?;
    let remote = launch::remote_hosts(&args.remote)?;
    let repo = drive::open_repo(directory).await?;
    render::agent_file_problems(&drive::agent_file_problems(
        repo.work_tree().unwrap_or(repo.common_dir()),
    ));
    let report = drive::drive(Output::of_flag(args.json), None, |events, cancel| {
        grove::run::resume_on(
            directory,
            run_id.as_str(),
            GitOptions::default(),
            (remote, overrides),
            models,
            events,
            cancel,
        )
    })
    .await?;
    Ok(drive::exit_code(&report))
}
