//! `grove runs`: lists this repository's runs, oldest first.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::store::state::RunStatus;
use grove::store::{RunStore, RunSummary};

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
        run.status = shown_status(run);
    }
    if args.json {
        render::json(&runs)?;
    } else {
        render::runs_table(&runs);
    }
    Ok(ExitCode::SUCCESS)
}

/// The status a listing shows: a run stopped by Ctrl-C is journaled as a pause whose
/// reason starts with "interrupted", and `grove run --json` said `interrupted` for it;
/// the listing says the same (a crashed run is `interrupted` too: both resume alike).
fn shown_status(run: &RunSummary) -> RunStatus {
    let interrupted = run
        .details
        .as_ref()
        .and_then(|details| details.pause_reason.as_deref())
        .is_some_and(|reason| reason.starts_with("interrupted"));
    match run.status {
        RunStatus::Paused if interrupted => RunStatus::Interrupted,
        status => status,
    }
}
