//! `grove runs`: lists this repository's runs, oldest first.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::store::RunStore;

use crate::cli::{drive, render};

/// Arguments of `grove runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the runs as a table, or as a JSON array with `--json`.
pub async fn runs(directory: &Path, args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let repo = drive::open_repo(directory).await?;
    let mut runs = RunStore::new(repo.common_dir()).list_runs()?;
    for run in &mut runs {
        run.status = run.shown_status();
    }
    if args.json {
        render::json(&runs)?;
    } else {
        render::runs_table(&runs);
    }
    Ok(ExitCode::SUCCESS)
}
