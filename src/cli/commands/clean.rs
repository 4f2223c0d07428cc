//! `grove clean RUN_ID`: removes a run's worktrees, archiving their work first.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;

use crate::cli::{drive, render};

/// Arguments of `grove clean`.
#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The run to clean, as `grove runs` lists it.
    pub run_id: String,
}

/// Cleans `args.run_id` unless it is still running.
pub async fn clean(directory: &Path, args: &CleanArgs) -> anyhow::Result<ExitCode> {
    let repo = drive::open_repo(directory).await?;
    let run: grove::store::RunId = args
        .run_id
        .parse()
        .with_context(|| format!("{:?} is not a run id; `grove runs` lists them", args.run_id))?;
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
    render::clean_report(&report);
    Ok(ExitCode::SUCCESS)
}
