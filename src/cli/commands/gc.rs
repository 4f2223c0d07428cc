//! `grove gc --older-than DAYS`: deletes archived work older than a number of days (the
//! only command that deletes archives), and base trees unused for as long.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::cli::{drive, render};

/// Arguments of `grove gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Delete archives whose commit is older than this many days.
    #[arg(long, value_name = "DAYS")]
    pub older_than: u64,
}

/// Deletes the archives older than `args.older_than` days and lists them.
pub async fn gc(directory: &Path, args: &GcArgs) -> anyhow::Result<ExitCode> {
    let repo = drive::open_repo(directory).await?;
    let older_than = Duration::from_secs(args.older_than.saturating_mul(86_400));
    let deleted = repo.gc_archives(older_than).await?;
    // Base trees no run has used for as long go too (never one a run holds).
    let bases = repo.remove_unused_bases(Some(older_than))?;
    render::gc_report(&deleted, &bases);
    Ok(ExitCode::SUCCESS)
}
