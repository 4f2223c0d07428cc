//! The MCP tools, each a thin call into the library: `run` and `resume` drive
//! [`crate::run::run`] and [`crate::run::resume`], `list_runs` is `grove runs --json`,
//! `show_run` is [`review::load`], `review` is [`review::override_verdicts`].
//!
//! This file owns the tools' names, descriptions, annotations and results: a result
//! carries the JSON the CLI prints for the same command (`structuredContent`, and as
//! text; a run's without its per-agent token ledgers), the next steps as its `hints`,
//! and a short summary. A problem the caller can act on (an argument out of range, a run
//! that is not finished, a refused apply, a run argument no person trusted) is a tool
//! error with the library's message; arguments of the wrong shape are invalid params
//! (`arguments.rs`). It must never run a second implementation of what the CLI does.

use std::future::Future;
use std::path::PathBuf;

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::{Event, EventSink};
use crate::git::{Colour, GitOptions, Repo};
use crate::mcp::arguments::{Arguments, input_schema};
use crate::mcp::params::{self, ListParams, ResumeParams, ReviewParams, RunParams, ShowParams};
use crate::mcp::progress::{self, Progress};
use crate::mcp::summary;
use crate::review::{self, AfterReview, ApplyResult, ReviewOutcome};
use crate::run::{RunEnd, RunError, RunReport, launch};
use crate::store::runs::RunStore;
use crate::text::truncate;

/// The server's state: the repository it serves and the runs it started.
#[derive(Debug, Clone)]
pub struct Tools {
    directory: PathBuf,
    log: EventSink,
    /// Cancelled when the server stops; every run's token is a child of it.
    shutdown: CancellationToken,
    /// Every run in flight, so that the server waits for them before it exits.
    runs: TaskTracker,
}

#[tool_router]
impl Tools {
    /// A server for the repository at `directory`; runs' events also go to `log`.
    pub fn new(
        directory: PathBuf,
        log: EventSink,
        shutdown: CancellationToken,
        runs: TaskTracker,
    ) -> Self {
        Self {
            directory,
            log,
            shutdown,
            runs,
        }
    }

    #[tool(
        input_schema = input_schema::<RunParams>(),
        description = "Run a coding task as a fleet of subagents (grove run): a lead splits it \
        into subtasks, each worker edits its own git worktree, an isolated reviewer judges \
        every diff, approved work is merged and applied to the current branch (unless \
        no_apply). Returns when the run ends, with one progress notification per subtask \
        start and end; the result is `grove run --json`'s object plus a summary. \
        Cancelling the request interrupts the run like Ctrl-C: it stays resumable."
    )]
    async fn run(
        &self,
        Arguments { value, ignored }: Arguments<RunParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let ignored = self.ignore("run", &ignored);
        let request = match value.into_request() {
            Ok(request) => request,
            Err(error) => return Ok(tool_error(&error)),
        };
        // Before anything runs: what would run with the user's rights or the network
        // needs a person's trust, whoever steers the client.
        if let Err(error) = params::check_trusted(&self.directory, &request).await {
            return Ok(tool_error(&error));
        }
        let launch = match launch::prepare(&self.directory, request).await {
            Ok(launch) => launch,
            Err(error) => return Ok(tool_error(&error)),
        };
        let directory = self.directory.clone();
        self.drive(context, ignored, move |events, cancel| async move {
            crate::run::run(&directory, launch.options, launch.models, events, cancel).await
        })
        .await
    }

    #[tool(
        input_schema = input_schema::<ResumeParams>(),
        description = "Continue an interrupted or paused run (grove resume) with the models \
        it started with. Returns when it ends, with progress and a result like `run`'s."
    )]
    async fn resume(
        &self,
        Arguments {
            value: params,
            ignored,
        }: Arguments<ResumeParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let ignored = self.ignore("resume", &ignored);
        if let Err(error) = launch::check_resume_trusted(&self.directory, &params.run_id).await {
            return Ok(tool_error(&error));
        }
        let directory = self.directory.clone();
        self.drive(context, ignored, move |events, cancel| async move {
            crate::run::resume(
                &directory,
                &params.run_id,
                GitOptions::default(),
                launch::resume_models,
                events,
                cancel,
            )
            .await
        })
        .await
    }

    #[tool(
        input_schema = input_schema::<ListParams>(),
        annotations(read_only_hint = true),
        description = "List this repository's grove runs, oldest first (grove runs --json): \
        run_id, status (running, paused, interrupted, finished, failed), task, branch, \
        result_commit, applied, subtasks."
    )]
    async fn list_runs(
        &self,
        Arguments { ignored, .. }: Arguments<ListParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let ignored = self.ignore("list_runs", &ignored);
        let repo = match self.repo().await {
            Ok(repo) => repo,
            Err(result) => return Ok(result),
        };
        let mut runs = match RunStore::new(repo.common_dir()).list_runs() {
            Ok(runs) => runs,
            Err(error) => return Ok(tool_error(&error)),
        };
        for run in &mut runs {
            run.status = run.shown_status();
        }
        let count = runs.len();
        let text = format!(
            "{count} run{} in {}.",
            if count == 1 { "" } else { "s" },
            self.directory.display()
        );
        // structuredContent must be an object; `runs` holds `grove runs --json`'s array.
        let value = Value::Object(
            [("runs".to_owned(), to_value(&runs)?)]
                .into_iter()
                .collect(),
        );
        json_result(value, text, false, ignored)
    }

    #[tool(
        input_schema = input_schema::<ShowParams>(),
        annotations(read_only_hint = true),
        description = "Show one run as `grove review --list --json` does: each subtask's status, \
        the reviewer's verdict, summary and findings, a person's decision, the diffstat, \
        and (with diff: true) its diff against the run's base, capped at diff_max_chars."
    )]
    async fn show_run(
        &self,
        Arguments {
            value: params,
            ignored,
        }: Arguments<ShowParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let ignored = self.ignore("show_run", &ignored);
        let cap = match params.diff_cap() {
            Ok(cap) => cap,
            Err(error) => return Ok(tool_error(&error)),
        };
        let repo = match self.repo().await {
            Ok(repo) => repo,
            Err(result) => return Ok(result),
        };
        let run = match review::load(&repo, &params.run_id).await {
            Ok(run) => run,
            Err(error) => return Ok(tool_error(&error)),
        };
        // What `grove review --list --json` prints.
        let mut value = to_value(&ReviewOutcome::unchanged(run.clone()))?;
        if params.diff {
            let mut diffs = serde_json::Map::new();
            for subtask in &run.subtasks {
                let diff = match run.render_diff(&repo, subtask, Colour::Never) {
                    Ok(diff) => diff,
                    Err(error) => return Ok(tool_error(&error)),
                };
                if let Some(diff) = diff {
                    diffs.insert(subtask.id.to_string(), capped_diff(&diff, cap));
                }
            }
            value["diffs"] = Value::Object(diffs);
        }
        json_result(value, summary::show(&run), false, ignored)
    }

    #[tool(
        input_schema = input_schema::<ReviewParams>(),
        description = "Decide on a finished run's subtasks and apply its result, as `grove \
        review --approve S1 --reject S2 --apply RUN` does: a person's decision outranks \
        the reviewer's, the result is rebuilt from the base with the approved subtasks, \
        work left out is archived, and apply has grove run's safety (a dirty work tree \
        or a moved branch is refused, nothing is touched). With no decisions and \
        apply: true it applies a no_apply run's result as it is."
    )]
    async fn review(
        &self,
        Arguments {
            value: params,
            ignored,
        }: Arguments<ReviewParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let ignored = self.ignore("review", &ignored);
        let repo = match self.repo().await {
            Ok(repo) => repo,
            Err(result) => return Ok(result),
        };
        let decisions = params.decisions();
        let outcome = match review::override_verdicts(
            &repo,
            &params.run_id,
            &decisions,
            if params.apply {
                AfterReview::Apply
            } else {
                AfterReview::RecordOnly
            },
        )
        .await
        {
            Ok(outcome) => outcome,
            Err(error) => return Ok(tool_error(&error)),
        };
        let refused = matches!(outcome.apply, Some(ApplyResult::Refused { .. }));
        json_result(
            to_value(&outcome)?,
            summary::review(&outcome),
            refused,
            ignored,
        )
    }
}

impl Tools {
    /// Logs the arguments `tool` was given but does not take, and returns what the
    /// caller is told about them (nothing of a client's own, which its model sets on
    /// every call).
    fn ignore(&self, tool: &str, ignored: &[String]) -> Vec<String> {
        let mut hints = Vec::new();
        for name in ignored {
            let message = format!("`{tool}` ignored the argument `{name}`, which it does not take");
            self.log.emit(Event::Note {
                message: message.clone(),
            });
            if !CLIENT_ARGUMENTS.contains(&name.as_str()) {
                hints.push(message);
            }
        }
        hints
    }

    async fn repo(&self) -> Result<Repo, CallToolResult> {
        Repo::open(&self.directory, GitOptions::default())
            .await
            .map_err(|error| tool_error(&error))
    }

    /// Runs a run (new or resumed) to its end: its events become progress, the request's
    /// cancellation (or the server's shutdown) is its Ctrl-C, and its report the result.
    async fn drive<F, Fut>(
        &self,
        context: RequestContext<RoleServer>,
        ignored: Vec<String>,
        start: F,
    ) -> Result<CallToolResult, ErrorData>
    where
        F: FnOnce(EventSink, CancellationToken) -> Fut,
        Fut: Future<Output = Result<RunReport, RunError>> + Send + 'static,
    {
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
        });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let forwarder = tokio::spawn(progress::forward(rx, self.log.clone(), progress));
        let cancel = self.shutdown.child_token();
        let link = tokio::spawn(cancel_on(context.ct.clone(), cancel.clone()));
        // Tracked, and not dropped with this request: a cancelled run must still reach
        // its checkpoint and release the lock, even when the client has gone.
        let outcome = self.runs.spawn(start(EventSink::new(tx), cancel)).await;
        link.abort();
        // The run dropped its sink, so this ends once the last event is out: every
        // progress notification precedes the result.
        let _ = forwarder.await;
        // The server goes on to the next request: what the run freed is not kept.
        crate::tools::exec::return_freed_memory();
        match outcome {
            Ok(Ok(report)) => run_result(&report, ignored),
            Ok(Err(error)) => Ok(tool_error(&error)),
            Err(error) => Err(ErrorData::internal_error(
                format!("the run's task failed: {error}"),
                None,
            )),
        }
    }
}

#[tool_handler(
    name = "grove",
    instructions = "grove runs one coding task as a fleet of subagents in parallel git \
    worktrees, with an isolated reviewer gating every merge, in the repository this server \
    was started in. `run` starts a run and returns when it ends; `list_runs`, `show_run` \
    and `review` look at runs and approve, reject or apply their subtasks; `resume` \
    continues an interrupted run."
)]
impl ServerHandler for Tools {}

async fn cancel_on(request: CancellationToken, run: CancellationToken) {
    request.cancelled().await;
    run.cancel();
}

/// The result of a run: `grove run --json`'s object without its per-agent ledgers, the
/// next steps as `hints`, and the summary. A run that did not finish is a tool error,
/// its report still attached.
fn run_result(report: &RunReport, ignored: Vec<String>) -> Result<CallToolResult, ErrorData> {
    let mut value = to_value(report)?;
    // Claude Code and Codex hand their model this object alone: the ledgers per agent
    // (a third of it) stay with `grove runs --json`; `totals` and each subtask's tokens
    // remain.
    if let Some(run) = value.as_object_mut() {
        run.remove("lead_ledger");
    }
    for subtask in value["subtasks"].as_array_mut().into_iter().flatten() {
        if let Some(subtask) = subtask.as_object_mut() {
            for ledger in LEDGER_DETAIL {
                subtask.remove(ledger);
            }
        }
    }
    let mut hints = summary::run_hints(report);
    hints.extend(ignored);
    json_result(
        value,
        summary::run(report),
        report.status != RunEnd::Finished,
        hints,
    )
}

/// Arguments a client adds to every tool it offers its model: Gemini CLI's
/// `wait_for_previous` (run this call after the ones before it).
const CLIENT_ARGUMENTS: [&str; 1] = ["wait_for_previous"];

/// A subtask's token accounting beyond its input and output tokens.
const LEDGER_DETAIL: [&str; 4] = [
    "worker_ledger",
    "reviewer_ledger",
    "cache_read_tokens",
    "cache_write_tokens",
];

/// A result with `value` (and `hints`, when there are any) as `structuredContent`, the
/// summary, then the same as text for clients that read only text.
fn json_result(
    mut value: Value,
    text: String,
    is_error: bool,
    hints: Vec<String>,
) -> Result<CallToolResult, ErrorData> {
    if let (Some(object), false) = (value.as_object_mut(), hints.is_empty()) {
        object.insert("hints".to_owned(), Value::from(hints));
    }
    let json = serde_json::to_string_pretty(&value)
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    let content = vec![ContentBlock::text(text), ContentBlock::text(json)];
    let mut result = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(value);
    Ok(result)
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, ErrorData> {
    serde_json::to_value(value).map_err(|error| ErrorData::internal_error(error.to_string(), None))
}

/// A tool error the caller reads: the error and its causes, on one line.
fn tool_error(error: &dyn std::error::Error) -> CallToolResult {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // Many errors quote their source already.
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    CallToolResult::error(vec![ContentBlock::text(message)])
}

/// One subtask's diff, cut at `cap` characters and marked when it was.
fn capped_diff(diff: &str, cap: usize) -> Value {
    let chars = diff.chars().count();
    serde_json::json!({
        "text": if chars > cap { truncate(diff, cap) } else { diff.to_owned() },
        "truncated": chars > cap,
        "chars": chars,
    })
}
