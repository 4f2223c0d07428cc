//! Driving a run from the terminal: the live view, Ctrl-C (SIGTERM, SIGHUP) and the exit
//! code of a run — shared by `grove run`, `grove resume` and `grove demo`. The model
//! clients come from [`grove::run::launch`].
//!
//! This file owns how a run meets the terminal; it must never decide what a run does.

use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use grove::agent::roles;
use grove::event::EventSink;
use grove::git::{GitOptions, Repo};
use grove::run::estimate::Estimate;
use grove::run::report::CheckOutcome;
use grove::run::{RunEnd, RunError, RunReport};
use grove::store::journal::SubtaskKind;
use grove::store::{RunId, StoreError};

use crate::cli::exit::{EXIT_INTERRUPTED, EXIT_NOT_ALL_DONE};
use crate::cli::render::{self, Output};

/// Runs a run (new or resumed) with the live view and Ctrl-C handling, then prints the
/// report ([`Output::Json`]: also as JSON on stdout) with the `estimate` made before it;
/// [`exit_code`] maps it to the exit code.
pub async fn drive<F, Fut>(
    output: Output,
    estimate: Option<Estimate>,
    start: F,
) -> anyhow::Result<RunReport>
where
    F: FnOnce(EventSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<RunReport, RunError>>,
{
    let (outcome, ledgers) = drive_live(start).await;
    let mut report = outcome?;
    report.estimate = estimate;
    render::report(&report, &ledgers, not_done(&report).as_deref(), output);
    if output == Output::Json {
        render::json(&report)?;
    }
    Ok(report)
}

/// Runs `start` with the live view on stderr and Ctrl-C, SIGTERM or SIGHUP cancelling
/// it; returns its outcome and every agent's ledger.
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

/// The exit code of a run or resume (DESIGN.md): 0 only when it finished and
/// [`not_done`] finds nothing missing.
pub fn exit_code(report: &RunReport) -> ExitCode {
    match report.status {
        RunEnd::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        RunEnd::Failed | RunEnd::Paused => ExitCode::FAILURE,
        RunEnd::Finished if not_done(report).is_none() => ExitCode::SUCCESS,
        RunEnd::Finished => ExitCode::from(EXIT_NOT_ALL_DONE),
    }
}

/// Why a finished run did not do everything (exit 3), in one sentence: the lead stopped
/// before it finished (turn cap, budget, tool-error limit, refusal: the run's `error`),
/// it delegated nothing, or some subtask was not merged. `None` when all was done, or
/// when the run did not finish at all.
pub fn not_done(report: &RunReport) -> Option<String> {
    if report.status != RunEnd::Finished {
        return None;
    }
    if let Some(error) = &report.error {
        return Some(error.clone());
    }
    if report.subtasks.is_empty() {
        return Some("the lead delegated nothing".to_owned());
    }
    if report.check.status == CheckOutcome::Failed {
        return Some(format!(
            "the result's check `{}` failed",
            report.check.command.as_deref().unwrap_or_default()
        ));
    }
    // Only the lead's subtasks count. A fixer that was not merged is the check's story (a
    // later one may have fixed it; a result still red is said above), and a resolver's
    // outcome is its conflicting subtask's.
    let delegated: Vec<_> = report
        .subtasks
        .iter()
        .filter(|subtask| subtask.kind == SubtaskKind::Task)
        .collect();
    let not_merged: Vec<String> = delegated
        .iter()
        .filter(|subtask| !subtask.done())
        .map(|subtask| format!("{} {}", subtask.id, subtask.status.as_str()))
        .collect();
    (!not_merged.is_empty()).then(|| {
        format!(
            "{} of {} subtasks not merged ({})",
            not_merged.len(),
            delegated.len(),
            not_merged.join(", ")
        )
    })
}

/// A usage error found after clap parsed the flags (a bad combination, a malformed run
/// id): `main` exits 2 for it, as clap does for its own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// `text` as a run id, or a usage error that says where the ids are.
pub fn parse_run_id(text: &str) -> Result<RunId, UsageError> {
    text.parse()
        .map_err(|error: StoreError| UsageError(format!("{error}; `grove runs` lists the runs")))
}

/// The first Ctrl-C, SIGTERM or SIGHUP cancels the run (work is checkpointed, the run
/// stays resumable, and it ends as interrupted: exit 130, its report, the resume
/// command); a second one ends the process at once.
async fn watch_interrupts(cancel: CancellationToken) {
    let Ok(mut signals) = StopSignals::new() else {
        return;
    };
    let first = signals.next().await;
    render::interrupted(first);
    cancel.cancel();
    signals.next().await;
    std::process::exit(i32::from(EXIT_INTERRUPTED));
}

/// The signals that stop a run: SIGINT (Ctrl-C), SIGTERM (`kill`, `timeout`, a service
/// manager) and SIGHUP (the terminal went away). Left to their default, the last two
/// would kill grove mid-step: no report, no resume command, exit 143 or 129.
pub(crate) struct StopSignals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl StopSignals {
    /// Takes the three signals over from their default action.
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The name of the next one that comes.
    pub(crate) async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "Ctrl-C",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

/// The repository grove was started in.
pub async fn open_repo(directory: &Path) -> anyhow::Result<Repo> {
    Ok(Repo::open(directory, GitOptions::default()).await?)
}

/// Every `.grove/agents/*.md` under `root` that cannot be used, with why: the lead is
/// never offered such an agent, so the user must hear of it.
pub fn agent_file_problems(root: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root.join(".grove").join("agents")) else {
        return Vec::new();
    };
    let mut problems: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file = entry.file_name();
            let name = file.to_str()?.strip_suffix(".md")?;
            roles::load_agent(root, name)
                .err()
                .map(|error| error.to_string())
        })
        .collect();
    problems.sort();
    problems
}
