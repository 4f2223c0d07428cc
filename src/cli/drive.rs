//! Driving a run from the terminal: the live view, Ctrl-C and the exit code of a run —
//! shared by `grove run`, `grove resume` and `grove demo`. The model clients come from
//! [`grove::run::launch`].
//!
//! This file owns how a run meets the terminal; it must never decide what a run does.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::git::{GitOptions, Repo};
use grove::run::{RunEnd, RunError, RunReport};

use crate::cli::exit::{EXIT_INTERRUPTED, EXIT_NOT_ALL_DONE};
use crate::cli::render;

/// Runs a run (new or resumed) with the live view and Ctrl-C handling, then prints the
/// report; [`exit_code`] maps it to the exit code.
pub async fn drive<F, Fut>(json: bool, start: F) -> anyhow::Result<RunReport>
where
    F: FnOnce(EventSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<RunReport, RunError>>,
{
    let (outcome, ledgers) = drive_live(start).await;
    let report = outcome?;

    render::report(&report, &ledgers);
    if json {
        render::json(&report)?;
    }
    Ok(report)
}

/// Runs `start` with the live view on stderr and Ctrl-C cancelling it; returns its
/// outcome and every agent's ledger.
pub async fn drive_live<T, F, Fut>(start: F) -> (Result<T, RunError>, render::Ledgers)
where
    F: FnOnce(EventSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<T, RunError>>,
{
    let cancel = CancellationToken::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let renderer = tokio::spawn(render::live(rx, std::io::stderr().is_terminal()));
    let interrupt = tokio::spawn(watch_interrupts(cancel.clone()));
    let outcome = start(EventSink::new(tx), cancel).await;
    interrupt.abort();
    (outcome, renderer.await.unwrap_or_default())
}

/// The exit code of a run or resume (DESIGN.md).
pub fn exit_code(report: &RunReport) -> ExitCode {
    match report.status {
        RunEnd::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        RunEnd::Failed | RunEnd::Paused => ExitCode::FAILURE,
        RunEnd::Finished if report.all_merged() => ExitCode::SUCCESS,
        RunEnd::Finished => ExitCode::from(EXIT_NOT_ALL_DONE),
    }
}

/// The first Ctrl-C cancels the run (work is checkpointed, the run stays resumable); a
/// second one ends the process at once.
async fn watch_interrupts(cancel: CancellationToken) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    render::interrupted();
    cancel.cancel();
    if tokio::signal::ctrl_c().await.is_ok() {
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    }
}

/// The repository grove was started in.
pub async fn open_repo(directory: &std::path::Path) -> anyhow::Result<Repo> {
    Ok(Repo::open(directory, GitOptions::default()).await?)
}
