//! `grove demo`: the real pipeline on a sample repository, with a replayed model.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use grove::run::RunEnd;

use crate::cli::drive;
use crate::cli::exit::EXIT_INTERRUPTED;
use crate::cli::render::{self, Output};

/// Arguments of `grove demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Create the sample repository in DIR (empty or new) instead of a new temp dir.
    #[arg(long, value_name = "DIR")]
    pub keep_dir: Option<PathBuf>,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// `grove demo`: the real pipeline on a sample repository and a replayed model.
///
/// Exit code 0 means the demo went as scripted, its one rejection included: the
/// rejection is the point of the demo, and a first command that "fails" would teach the
/// wrong thing. Anything else is 1 (or 130 when interrupted), so a broken demo is loud.
pub async fn demo(directory: &Path, args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.keep_dir {
        Some(dir) => directory.join(dir),
        // Kept on purpose: the user is told to look at it afterwards.
        None => tempfile::Builder::new()
            .prefix("grove-demo-")
            .tempdir()
            .context("cannot create a temp dir for the demo")?
            .keep(),
    };
    let demo = grove::demo::Demo::prepare(&dir).await?;
    let estimate = demo.estimate().await;
    let report = drive::drive(
        Output::of_flag(args.json),
        Some(estimate),
        |events, cancel| demo.run(events, cancel),
    )
    .await?;
    let as_scripted = grove::demo::went_as_scripted(&report);
    render::demo_epilogue(demo.repo(), &report, as_scripted);
    Ok(match report.status {
        RunEnd::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        RunEnd::Finished if as_scripted => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}
