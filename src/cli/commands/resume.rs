//! `grove resume RUN_ID`: continues an interrupted run; it ends like `grove run`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::git::GitOptions;
use grove::run::launch;

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
}

/// Resumes `args.run_id` with the provider and models the run started with.
pub async fn resume(directory: &Path, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    launch::check_resume_trusted(directory, &args.run_id).await?;
    let models = launch::resume_models;
    let run_id = drive::parse_run_id(&args.run_id)?;
    let remote = launch::remote_hosts(&args.remote)?;
    let repo = drive::open_repo(directory).await?;
    render::agent_file_problems(&drive::agent_file_problems(
        repo.work_tree().unwrap_or(repo.common_dir()),
    ));
    let report = drive::drive(Output::of_flag(args.json), |events, cancel| {
        grove::run::resume_on(
            directory,
            run_id.as_str(),
            GitOptions::default(),
            remote,
            models,
            events,
            cancel,
        )
    })
    .await?;
    Ok(drive::exit_code(&report))
}
