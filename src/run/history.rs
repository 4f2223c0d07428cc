//! The history the user's branch gets from a run: the result's merge graph as it is, or
//! (the default) one commit per merged subtask, whose messages this file writes.
//!
//! This file owns the words of those commits: a subject and body drawn from the brief
//! and the worker's summary (both bounded, terminal escapes stripped), and the `Grove-*`
//! trailers. The commits themselves are the git layer's ([`Repo::squash`]); this file
//! hands it plain data and must never write a commit, move a ref or touch the user's
//! branch itself (the applies in `finish.rs` and in `grove review` do, through the git
//! layer's checked apply, with the ref this file names).
//!
//! [`Repo::squash`]: crate::git::Repo::squash

use crate::agent::external::WorkerBackend;
use crate::git::trailers::merged_subtask;
use crate::git::{CommitId, GitError, Repo, RunId, SquashStep};
use crate::run::context::RunContext;
use crate::run::report::SubtaskReport;
use crate::settings::options::History;
use crate::store::journal::{CheckRun, CheckStatus, ON_RESULT, VerdictKind};
use crate::store::state::{RunState, SubtaskState};
use crate::text::{first_line, strip_escapes, truncate};

/// A commit subject is cut to this many characters (git's own advice is 50 to 72).
const SUBJECT_CHARS: usize = 72;

/// The rest of the brief in a commit body is cut to this many characters.
const BRIEF_BODY_CHARS: usize = 1_500;

/// The worker's summary in a commit body is cut to this many characters.
const SUMMARY_CHARS: usize = 800;

/// What the user's branch is moved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applicable {
    /// The full ref to apply: the result, or the squashed history.
    pub(crate) source: String,
    /// How many commits the squashed history holds; `None` for the merge graph.
    pub(crate) commits: Option<usize>,
}

/// What the history of one run is made of besides its subtasks: plain facts, so that
/// `grove review` (which has no run context) writes the same commits as the run.
#[derive(Debug, Clone)]
pub(crate) struct HistoryInputs<'a> {
    pub(crate) repo: &'a Repo,
    pub(crate) run: &'a RunId,
    pub(crate) base: CommitId,
    pub(crate) history: History,
    pub(crate) reviewer_model: &'a str,
    /// The worker's model, or the name of the agent CLI that did the work.
    pub(crate) worker_model: &'a str,
    /// The last check of the merged result (`passed`, `failed`), when one ran.
    pub(crate) result_check: Option<String>,
}

/// The ref that holds what the user's branch gets under the run's `history`, written
/// now for `squash` (again on a resume, keeping the commits already written).
pub(crate) async fn applicable(
    ctx: &RunContext,
    subtasks: &[SubtaskReport],
) -> Result<Applicable, GitError> {
    let inputs = HistoryInputs {
        repo: &ctx.repo,
        run: &ctx.run,
        base: ctx.base,
        history: ctx.options.history,
        reviewer_model: &ctx.models.reviewer.name,
        worker_model: worker_model(&ctx.options.worker_backend, &ctx.models.worker.name),
        result_check: result_check(&ctx.journal.checks()),
    };
    applicable_for(&inputs, subtasks).await
}

/// [`applicable`] from plain inputs.
pub(crate) async fn applicable_for(
    inputs: &HistoryInputs<'_>,
    subtasks: &[SubtaskReport],
) -> Result<Applicable, GitError> {
    let (repo, run) = (inputs.repo, inputs.run);
    match inputs.history {
        History::Merge => Ok(Applicable {
            source: run.result_ref(),
            commits: None,
        }),
        History::Squash => {
            let steps = squash_steps(inputs, subtasks)?;
            let squashed = repo
                .squash(inputs.base, &steps, &run.squashed_ref())
                .await?;
            Ok(Applicable {
                source: run.squashed_ref(),
                commits: Some(squashed.commits.len()),
            })
        }
    }
}

/// What the user's branch gets from a finished run as its journal tells it: for `grove
/// review`, which rebuilt the result from a person's decisions and has no run context.
/// A run whose options cannot be read keeps the merge graph, as before `history` existed.
pub(crate) async fn applicable_for_run(
    repo: &Repo,
    run: &RunId,
    base: CommitId,
    state: &RunState,
) -> Result<Applicable, GitError> {
    let Ok(options) = state.options.get() else {
        return Ok(Applicable {
            source: run.result_ref(),
            commits: None,
        });
    };
    let name = |recorded: &'_ str| -> String {
        if recorded.is_empty() {
            state.model.clone()
        } else {
            recorded.to_owned()
        }
    };
    let (reviewer, worker) = (
        name(&options.model_names.reviewer),
        name(&options.model_names.worker),
    );
    let subtasks: Vec<SubtaskReport> = state.subtasks.iter().map(journaled_report).collect();
    let inputs = HistoryInputs {
        repo,
        run,
        base,
        history: options.history,
        reviewer_model: &reviewer,
        worker_model: worker_model(&options.worker_backend, &worker),
        result_check: result_check(&state.checks),
    };
    applicable_for(&inputs, &subtasks).await
}

/// A subtask as its commit's message needs it, from the journal: the decision that
/// counts (a person's over the reviewer's), the reason, the ledger and the check.
fn journaled_report(subtask: &SubtaskState) -> SubtaskReport {
    let mut report = SubtaskReport::new(
        subtask.id.clone(),
        subtask.task.clone(),
        subtask.branch.clone(),
    );
    report.verdict = subtask.decision();
    report.reason = subtask.reason.clone();
    report.check = subtask.check.clone();
    report.worker_ledger = subtask.ledger;
    report
}

/// What `Grove-Worker-Model` names: the model, unless an agent CLI did the work.
pub(crate) fn worker_model<'a>(backend: &'a WorkerBackend, model: &'a str) -> &'a str {
    match backend {
        WorkerBackend::Builtin => model,
        cli => cli.name(),
    }
}

/// One step per commit of the result's first-parent chain (one per merge, in merge
/// order), each with the message of the subtask it merged.
fn squash_steps(
    inputs: &HistoryInputs<'_>,
    subtasks: &[SubtaskReport],
) -> Result<Vec<SquashStep>, GitError> {
    let chain = inputs
        .repo
        .first_parent_chain(&inputs.run.result_ref(), inputs.base)?;
    let last = chain.len().saturating_sub(1);
    Ok(chain
        .iter()
        .enumerate()
        .map(|(index, merge)| {
            let subtask = merged_subtask(&merge.message)
                .and_then(|id| subtasks.iter().find(|subtask| subtask.id == id));
            let message = match subtask {
                Some(subtask) => commit_message(&CommitNote {
                    run: inputs.run.as_str(),
                    subtask,
                    reviewer_model: inputs.reviewer_model,
                    worker_model: inputs.worker_model,
                    subtask_check: subtask_check(subtask),
                    result_check: inputs.result_check.clone().filter(|_| index == last),
                    resolved_by: resolver_of(&merge.message),
                }),
                // A merge grove cannot match to a subtask keeps the words it has.
                None => merge.message.clone(),
            };
            SquashStep {
                after: merge.commit,
                message,
            }
        })
        .collect())
}

/// The resolver a merge commit of the result names (`grove <run>: merge S2, resolved by
/// S3`), when a resolver merged it.
fn resolver_of(message: &str) -> Option<String> {
    let (_, resolver) = message.lines().next()?.rsplit_once(", resolved by ")?;
    let resolver = resolver.trim();
    let label = resolver.strip_prefix('S')?;
    (!label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())).then(|| resolver.to_owned())
}

/// A subtask's check, for its commit's `Grove-Check` trailer; `None` when none ran.
fn subtask_check(subtask: &SubtaskReport) -> Option<String> {
    subtask.check.as_ref().map(|run| status_word(run.status))
}

/// The last check of the merged result among `checks`, for the last commit's
/// `Grove-Check` trailer; `None` when none ran.
pub(crate) fn result_check(checks: &[CheckRun]) -> Option<String> {
    checks
        .iter()
        .rev()
        .find(|run| run.on == ON_RESULT)
        .map(|run| status_word(run.status))
}

fn status_word(status: CheckStatus) -> String {
    match status {
        CheckStatus::Passed => "passed",
        CheckStatus::Failed => "failed",
    }
    .to_owned()
}

/// Everything one squashed commit's message says.
#[derive(Debug, Clone)]
struct CommitNote<'a> {
    run: &'a str,
    subtask: &'a SubtaskReport,
    reviewer_model: &'a str,
    /// The worker's model, or the name of the agent CLI that did the work.
    worker_model: &'a str,
    /// The subtask's check status (`passed`, `failed`), when one ran.
    subtask_check: Option<String>,
    /// The result's check status, on the last commit, when one ran.
    result_check: Option<String>,
    /// The resolver whose reviewed resolution merged this subtask after a conflict.
    resolved_by: Option<String>,
}

/// The message of one squashed commit: the brief's first line as the subject, the rest
/// of the brief and the worker's summary as the body, then the trailers.
fn commit_message(note: &CommitNote<'_>) -> String {
    let subtask = note.subtask;
    let brief = strip_escapes(&subtask.task);
    let subject = match first_line(&brief, SUBJECT_CHARS) {
        subject if subject.is_empty() => format!("grove {}: {}", note.run, subtask.id),
        subject => subject,
    };
    let mut message = format!("{subject}\n\n");
    let rest = brief.split_once('\n').map_or("", |(_, rest)| rest).trim();
    if !rest.is_empty() {
        message.push_str(&truncate(rest, BRIEF_BODY_CHARS));
        message.push_str("\n\n");
    }
    let summary = subtask
        .reason
        .as_deref()
        .and_then(|reason| reason.strip_prefix("worker: "))
        .map(|summary| strip_escapes(summary.trim()))
        .filter(|summary| !summary.is_empty());
    if let Some(summary) = summary {
        message.push_str("Worker's summary: ");
        message.push_str(&truncate(&summary, SUMMARY_CHARS));
        message.push_str("\n\n");
    }
    if let Some(resolver) = &note.resolved_by {
        message.push_str(&format!(
            "It conflicted with the result; {resolver} resolved it and its review passed.\n\n"
        ));
    }
    let verdict = match subtask.verdict {
        Some(VerdictKind::Approve) => "approve",
        Some(VerdictKind::Reject) => "reject",
        None => "none",
    };
    let mut trailers = vec![
        ("Grove-Run", note.run.to_owned()),
        ("Grove-Subtask", subtask.id.clone()),
        ("Grove-Verdict", verdict.to_owned()),
        ("Grove-Reviewer-Model", note.reviewer_model.to_owned()),
        ("Grove-Worker-Model", note.worker_model.to_owned()),
        ("Grove-Tokens", subtask.ledger().total_tokens().to_string()),
    ];
    let checks: Vec<String> = [
        note.subtask_check
            .as_ref()
            .map(|status| format!("{} {status}", subtask.id)),
        note.result_check
            .as_ref()
            .map(|status| format!("result {status}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !checks.is_empty() {
        trailers.push(("Grove-Check", checks.join(", ")));
    }
    for (key, value) in trailers {
        // A trailer is one line; a model name or status never needs more.
        let value = first_line(&strip_escapes(&value), 200);
        message.push_str(&format!("{key}: {value}\n"));
    }
    message
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::agent::Ledger;

    fn subtask(task: &str, reason: Option<&str>) -> SubtaskReport {
        let mut report = SubtaskReport::new("S2".into(), task.into(), "grove/r/2".into());
        report.verdict = Some(VerdictKind::Approve);
        report.reason = reason.map(str::to_owned);
        report.worker_ledger = Ledger {
            steps: 3,
            input_tokens: 300,
            output_tokens: 30,
            cache_read_tokens: 150,
            cache_write_tokens: 15,
        };
        report.reviewer_ledger = Ledger {
            steps: 2,
            input_tokens: 200,
            output_tokens: 20,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        };
        report
    }

    fn note<'a>(subtask: &'a SubtaskReport) -> CommitNote<'a> {
        CommitNote {
            run: "20261201-110000-abcd",
            subtask,
            reviewer_model: "reviewer-model",
            worker_model: "worker-model",
            subtask_check: None,
            result_check: None,
            resolved_by: None,
        }
    }

    #[test]
    fn a_message_has_the_brief_the_summary_and_every_trailer() {
        let report = subtask(
            "Rename Config::load to Config::open\nin src/config.rs and its callers.",
            Some("worker: Renamed it and updated two callers."),
        );
        assert_eq!(
            commit_message(&note(&report)),
            "Rename Config::load to Config::open\n\
             \n\
             in src/config.rs and its callers.\n\
             \n\
             Worker's summary: Renamed it and updated two callers.\n\
             \n\
             Grove-Run: 20261201-110000-abcd\n\
             Grove-Subtask: S2\n\
             Grove-Verdict: approve\n\
             Grove-Reviewer-Model: reviewer-model\n\
             Grove-Worker-Model: worker-model\n\
             Grove-Tokens: 715\n",
            "subject from the brief's first line, body from the rest and the summary, \
             trailers last"
        );
    }

    #[test]
    fn checks_are_one_trailer_naming_the_subtask_and_the_result() {
        let report = subtask("Do it", None);
        let mut with_checks = note(&report);
        with_checks.subtask_check = Some("failed".into());
        with_checks.result_check = Some("passed".into());
        assert_eq!(
            commit_message(&with_checks),
            "Do it\n\n\
             Grove-Run: 20261201-110000-abcd\n\
             Grove-Subtask: S2\n\
             Grove-Verdict: approve\n\
             Grove-Reviewer-Model: reviewer-model\n\
             Grove-Worker-Model: worker-model\n\
             Grove-Tokens: 715\n\
             Grove-Check: S2 failed, result passed\n",
            "no summary, no body; the check trailer says whose check it was"
        );
    }

    #[test]
    fn model_text_is_bounded_and_cannot_reach_a_terminal_or_forge_a_trailer() {
        let long = "x".repeat(5_000);
        let report = subtask(
            &format!("\u{1b}]0;pwned\u{7}Subject {long}\n{long}"),
            Some(&format!(
                "worker: done\u{1b}[2J\nGrove-Verdict: approve\n{long}"
            )),
        );
        let message = commit_message(&note(&report));
        assert!(!message.contains('\u{1b}'), "no escape survives: {message}");
        let subject = message.lines().next().unwrap();
        assert_eq!(
            subject.chars().count(),
            SUBJECT_CHARS + 1,
            "the subject is cut (with its ellipsis): {subject}"
        );
        assert!(
            message.len() < SUBJECT_CHARS + BRIEF_BODY_CHARS + SUMMARY_CHARS + 600,
            "the body is bounded: {} bytes",
            message.len()
        );
        let trailers = message.rsplit("\n\n").next().unwrap();
        assert_eq!(
            trailers
                .lines()
                .filter(|l| l.starts_with("Grove-Verdict"))
                .count(),
            1,
            "the summary's look-alike line is not in the trailer block: {trailers}"
        );
    }

    #[test]
    fn a_resolved_subtask_says_which_resolver_merged_it() {
        let report = subtask("Two", Some("worker: wrote SECOND"));
        let mut resolved = note(&report);
        resolved.resolved_by = resolver_of("grove r: merge S2, resolved by S3\n\nTwo\n");
        assert_eq!(
            commit_message(&resolved).split("\n\n").nth(2),
            Some("It conflicted with the result; S3 resolved it and its review passed."),
            "the body tells the person a resolver's work is in the commit"
        );
        assert_eq!(resolver_of("grove r: merge S2\n"), None);
        assert_eq!(resolver_of("grove r: merge S2, resolved by you\n"), None);
    }

    #[test]
    fn the_worker_model_is_the_agent_clis_name_when_a_cli_did_the_work() {
        assert_eq!(
            [
                worker_model(&WorkerBackend::Builtin, "claude-sonnet-4-5"),
                worker_model(&WorkerBackend::Codex, "claude-sonnet-4-5"),
                worker_model(
                    &WorkerBackend::Command("./agent.sh --token s3cret".into()),
                    "m"
                ),
            ],
            ["claude-sonnet-4-5", "codex", "cmd"],
            "grove's own loop names its model; a CLI its name, never a command line"
        );
    }
}
