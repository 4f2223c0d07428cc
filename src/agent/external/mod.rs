//! Other agent CLIs as workers: Claude Code, Codex, Gemini CLI, aider, or any command.
//!
//! This module owns how grove runs another agent CLI in a worker's worktree in place of
//! its own worker loop: [`backend`] the exact non-interactive argv of each CLI and which
//! variables are its own, [`invoke`] the process (environment, wall-clock limit, budget,
//! what its end means), [`parse`] its machine-readable output as typed events, and
//! [`work`] — the one call the run pipeline makes — the whole job: prompt, run, ledger,
//! summary or reason.
//!
//! It must never let the CLI commit or touch git history where a flag prevents it (grove
//! commits the worktree afterwards, and the isolated reviewer judges the diff), never
//! hand one CLI's credentials to another, never pass a CLI's terminal escapes on, and
//! never trust the CLI's output: every parser takes whatever bytes come and reports what
//! it could read. The versions each CLI was checked against are in the README's worker
//! table and in each parser's doc.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agent::Ledger;
use crate::text::truncate;
use crate::tools::tree::TreeAccess;

mod backend;
mod follow;
mod invoke;
mod parse;

pub use backend::{BackendParseError, CODEX_PROVIDER, CodexProvider, WorkerBackend};
pub use invoke::BackendEnv;
pub use parse::Progress;

use invoke::{CliEnd, CliInvocation, CliOutcome};
use parse::OutputFormat;

/// The default wall-clock limit of one external worker run.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60 * 60;

/// The environment variable that carries the brief to every external worker (`cmd:`
/// commands also get it on stdin).
pub const BRIEF_VAR: &str = "GROVE_BRIEF";

/// Why an external worker could not be run at all (not a CLI that failed).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A file of the run directory could not be made or read. Not retried.
    #[error("cannot {action} the worker CLI at {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The shell could not be started. Not retried.
    #[error("cannot start the worker CLI: {0}")]
    Exec(#[from] crate::tools::exec::ExecError),
}

/// One worker's job for an external CLI, as the run pipeline hands it over.
#[derive(Debug, Clone)]
pub struct ExternalWork<'a> {
    pub backend: &'a WorkerBackend,
    /// The system prompt a built-in worker would get: role and project rules.
    pub system: &'a str,
    pub brief: &'a str,
    /// Whether an earlier attempt was interrupted (its files are in the worktree).
    pub rerun: bool,
    /// The worktree.
    pub cwd: &'a Path,
    /// The copy-on-write tree the worktree is, when it is one: the CLI runs inside it.
    pub tree: Option<Arc<dyn TreeAccess>>,
    /// The worker's transcript file: the CLI's raw output is saved beside it.
    pub transcript: &'a Path,
    /// The environment grove started from.
    pub env: BackendEnv,
    /// Extra variables to pass by name (`[workers] pass_env`).
    pub pass_env: &'a [String],
    pub timeout: Duration,
    pub max_turns: u32,
    pub budget_tokens: Option<u64>,
    pub cancel: CancellationToken,
}

/// Why an external worker's subtask fails.
#[derive(Debug, thiserror::Error)]
pub enum CliFailure {
    /// Not retried: the CLI could not be started, or its output files not made.
    #[error("the {backend} worker could not run: {source}")]
    NotRun {
        backend: &'static str,
        #[source]
        source: BackendError,
    },
    /// The CLI ran and failed: a crash, a non-zero exit, an API error it reported, a
    /// timeout, its budget; the reason in its own words (escapes stripped).
    #[error("{0}")]
    Failed(String),
    /// The run was interrupted while the CLI worked; the subtask stays open.
    #[error("{backend} was interrupted")]
    Interrupted { backend: &'static str },
}

/// How an external worker's job went, in the terms the pipeline needs.
#[derive(Debug)]
pub struct WorkDone {
    /// The prompt the CLI was given (for the transcript).
    pub prompt: String,
    /// What the CLI spent; at least one step, since it ran.
    pub ledger: Ledger,
    /// The worker's summary for review, or why the subtask fails.
    pub summary: Result<String, CliFailure>,
    /// A one-line description of the end, for the live view.
    pub described: String,
    /// The CLI's last answer, if any (for the transcript).
    pub final_message: Option<String>,
    /// A note for the user when its output was not all readable.
    pub note: Option<String>,
}

/// Runs `job`'s CLI in its worktree to its end, reporting `progress` as it goes.
pub async fn work(job: ExternalWork<'_>, progress: impl FnMut(Progress)) -> WorkDone {
    let name = job.backend.name();
    let (stdout_path, stderr_path) = raw_output_paths(job.transcript, name);
    let attempt = if job.rerun {
        Attempt::Rerun
    } else {
        Attempt::First
    };
    let prompt = cli_prompt(job.system, job.brief, attempt);
    let invocation = CliInvocation {
        backend: job.backend.clone(),
        prompt: prompt.clone(),
        cwd: job.cwd.to_path_buf(),
        tree: job.tree,
        stdout_path: stdout_path.clone(),
        stderr_path,
        env: job.env,
        pass_env: job.pass_env.to_vec(),
        timeout: job.timeout,
        max_turns: job.max_turns,
        budget_tokens: job.budget_tokens,
        cancel: job.cancel,
    };
    match invocation.run(progress).await {
        Err(source) => {
            let failure = CliFailure::NotRun {
                backend: name,
                source,
            };
            WorkDone {
                prompt,
                ledger: Ledger::default(),
                described: format!("failed: {failure}"),
                summary: Err(failure),
                final_message: None,
                note: None,
            }
        }
        Ok(mut outcome) => {
            // The answer goes to the lead and the terminal: no escapes either.
            outcome.report.final_message = outcome
                .report
                .final_message
                .as_deref()
                .map(crate::text::strip_escapes)
                .and_then(parse::non_empty);
            let report = &outcome.report;
            let mut ledger = report.ledger;
            ledger.steps = ledger.steps.max(1);
            let summary = match &outcome.end {
                CliEnd::Finished | CliEnd::TurnLimit => {
                    Ok(report.final_message.clone().unwrap_or_default())
                }
                CliEnd::Failed(reason) => Err(CliFailure::Failed(reason.clone())),
                CliEnd::Interrupted => Err(CliFailure::Interrupted { backend: name }),
            };
            WorkDone {
                prompt,
                ledger,
                summary,
                described: describe_end(job.backend, &outcome),
                final_message: report.final_message.clone(),
                note: output_note(job.backend, &outcome, &stdout_path),
            }
        }
    }
}

/// Which attempt at a subtask a worker's prompt is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// The first: the worktree holds only the base.
    First,
    /// One after an interrupted attempt, whose changes are in the worktree: the prompt
    /// says so.
    Rerun,
}

/// The prompt an external worker gets: its role's instructions with the project rules
/// (the built-in worker's system prompt, or a user agent's), then the brief. On a rerun
/// after an interrupt, a note says the earlier attempt's files are already there.
fn cli_prompt(system: &str, brief: &str, attempt: Attempt) -> String {
    let mut prompt = format!(
        "{}\n\n# Your subtask\n\n{}",
        system.trim_end(),
        brief.trim()
    );
    if attempt == Attempt::Rerun {
        prompt.push_str(
            "\n\n(An earlier attempt at this subtask was interrupted. Its changes so far are \
             already in this directory: check what is done and finish the rest.)",
        );
    }
    prompt
}

/// A one-line description of how an external worker ended, for the live view.
fn describe_end(backend: &WorkerBackend, outcome: &CliOutcome) -> String {
    let name = backend.name();
    match &outcome.end {
        CliEnd::Finished => match &outcome.report.final_message {
            Some(message) => format!(
                "{name} finished: {}",
                truncate(message.lines().next().unwrap_or_default(), 120)
            ),
            None => format!("{name} finished"),
        },
        CliEnd::TurnLimit => format!("{name} stopped at its turn limit (turn limit reached)"),
        CliEnd::Failed(reason) => format!("failed: {reason}"),
        CliEnd::Interrupted => format!("{name} was interrupted"),
    }
}

/// Where one attempt of an external worker saves its raw stdout and stderr: beside its
/// transcript (`S2-worker.json` → `S2-worker.claude.stdout`), numbered from the second
/// attempt on (`S2-worker.claude-2.stdout`) so a rerun never overwrites the first.
fn raw_output_paths(transcript: &Path, name: &str) -> (PathBuf, PathBuf) {
    let stem = transcript.with_extension("");
    let at = |attempt: u32, stream: &str| {
        let mut path = stem.clone().into_os_string();
        if attempt > 1 {
            path.push(format!(".{name}-{attempt}.{stream}"));
        } else {
            path.push(format!(".{name}.{stream}"));
        }
        PathBuf::from(path)
    };
    let attempt = (1..)
        .find(|attempt| !at(*attempt, "stdout").exists())
        .unwrap_or(1);
    (at(attempt, "stdout"), at(attempt, "stderr"))
}

/// A note for the user when the CLI's output was not all readable, naming the raw file.
fn output_note(backend: &WorkerBackend, outcome: &CliOutcome, raw: &Path) -> Option<String> {
    let report = &outcome.report;
    let structured = !matches!(
        backend.output_format(),
        OutputFormat::AiderText | OutputFormat::PlainText
    );
    let mut problems = Vec::new();
    if report.unreadable_lines > 0 {
        problems.push(format!(
            "{} line(s) of its output were not {}",
            report.unreadable_lines,
            match backend.output_format() {
                OutputFormat::GeminiJson => "its JSON result",
                _ => "the JSON it should print",
            }
        ));
    }
    if structured && !report.complete && outcome.end != CliEnd::Interrupted {
        problems.push("its output ended without its final result record".to_owned());
    }
    if !report.usage_reported && backend.output_format() != OutputFormat::PlainText {
        problems.push("it reported no token usage (counted as 0)".to_owned());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {}; raw output: {}",
            backend.name(),
            problems.join("; "),
            raw.display()
        )
    })
}
