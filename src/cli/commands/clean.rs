//! `grove clean RUN_ID`: removes a run's worktrees, archiving their work first.

use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;

use grove::store::RunStore;

use crate::cli::{drive, render};

/// Arguments of `grove clean`.
#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The run to clean, as `grove runs` lists it.
    pub run_id: String,
}

/// Cleans `args.run_id` unless it is still running.
pub async fn clean(directory: &Path, args: &CleanArgs) -> anyhow::Result<ExitCode> {
    let run = drive::parse_run_id(&args.run_id)?;
    let repo = drive::open_repo(directory).await?;
    let holder = grove::store::lock::read_holder(repo.common_dir())?;
    if let Some(holder) = holder
        && holder.run_id == run.as_str()
        && holder.liveness() != grove::store::lock::Liveness::Dead
    {
        bail!(
            "run {} is still running (pid {}); stop it before cleaning it",
            holder.run_id,
            holder.pid
        );
    }
    let report = repo.clean_run(&run).await?;
    let nothing = report.archived.is_empty()
        && report.removed_worktrees.is_empty()
        && report.deleted_branches.is_empty();
    // A run whose directory is gone may still have left worktrees; only when neither
    // exists is the id wrong.
    if nothing && !RunStore::new(repo.common_dir()).run_dir(&run).exists() {
        bail!("there is no run {run} in this repository; `grove runs` lists them");
    }
    render::clean_report(&report);
    Ok(ExitCode::SUCCESS)
}
