//! `grove resume RUN_ID`: continues an interrupted run; it ends like `grove run`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::git::GitOptions;
use grove::run::launch;

use crate::cli::drive;

/// Arguments of `grove resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue, as `grove runs` lists it.
    pub run_id: String,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// Resumes `args.run_id` with the provider and models the run started with.
pub async fn resume(directory: &Path, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let models = launch::resume_models;
    let report = drive::drive(args.json, |events, cancel| {
        grove::run::resume(
            directory,
            &args.run_id,
            GitOptions::default(),
            models,
            events,
            cancel,
        )
    })
    .await?;
    Ok(drive::exit_code(&report))
}
