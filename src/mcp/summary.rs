//! The short texts the MCP tools return next to their JSON: what an agent (or the
//! person behind it) reads first.
//!
//! This file owns their wording. It must never carry information the JSON lacks, so a
//! client that reads only `structuredContent` misses nothing: what to do next goes into
//! it as `hints`.

use crate::git::DiffStat;
use crate::review::{ApplyResult, ReviewOutcome, RunReview};
use crate::run::{RunEnd, RunReport};
use crate::store::journal::{Finding, SubtaskOutcome};
use crate::text::truncate;

/// `grove run`'s ending in a few lines: the run, one line per subtask, the branch.
pub fn run(report: &RunReport) -> String {
    let merged = report
        .subtasks
        .iter()
        .filter(|s| s.status == SubtaskOutcome::Merged)
        .count();
    let status = match report.status {
        RunEnd::Finished => "finished",
        RunEnd::Interrupted => "was interrupted",
        RunEnd::Paused => "paused",
        RunEnd::Failed => "failed",
    };
    let mut lines = vec![format!(
        "Run {} {status}: {} of {} subtask{} merged.",
        report.run_id,
        merged,
        report.subtasks.len(),
        plural(report.subtasks.len())
    )];
    for subtask in &report.subtasks {
        let mut line = format!(
            "{} {} (reviewer: {}; {}): {}",
            subtask.id,
            subtask.status.as_str(),
            subtask.verdict.map_or("none", |v| v.as_str()),
            diffstat(subtask.diffstat.as_ref()),
            first_line(&subtask.task, 100)
        );
        let why = match subtask.status {
            SubtaskOutcome::Merged => None,
            SubtaskOutcome::Rejected => subtask.review_summary.as_ref(),
            SubtaskOutcome::Conflict | SubtaskOutcome::Failed => subtask.reason.as_ref(),
        };
        if let Some(why) = why {
            line.push_str(&format!(" — {}", first_line(why, 160)));
        }
        lines.push(line);
    }
    if let Some(error) = &report.error {
        lines.push(format!("Error: {}", first_line(error, 300)));
    }
    lines.extend(run_hints(report));
    lines.join("\n")
}

/// What became of the branch and what the caller can do next (apply, review, resume):
/// the end of the summary, and the structured result's `hints`, which is all that
/// Claude Code and Codex hand their model.
pub fn run_hints(report: &RunReport) -> Vec<String> {
    let mut hints = Vec::new();
    match &report.apply {
        Some(apply) => {
            hints.push(apply.message.clone());
            if let Some(command) = &apply.command {
                hints.push(format!("To apply it: {command}"));
            }
        }
        None if report.applied => hints.push(format!(
            "{} now has the result.",
            short_branch(&report.branch)
        )),
        None => {}
    }
    match report.status {
        RunEnd::Finished if !report.applied && report.result_commit.is_some() => {
            hints.push(match &report.apply {
                // Which already says where the result is.
                Some(_) => {
                    "The `review` tool approves or rejects its subtasks and applies it.".to_owned()
                }
                None => format!(
                    "The result is on {}; the `review` tool approves or rejects its subtasks \
                     and applies it.",
                    report.result_branch
                ),
            })
        }
        RunEnd::Interrupted | RunEnd::Paused => hints.push(format!(
            "Its work is checkpointed; the `resume` tool (or `grove resume {}`) continues it.",
            report.run_id
        )),
        _ => {}
    }
    hints
}

/// A run as `show_run` lists it: each subtask's decision, findings and diffstat.
pub fn show(review: &RunReview) -> String {
    let mut lines = vec![format!(
        "Run {} ({}{}): {}",
        review.run_id,
        review.status,
        if review.applied { ", applied" } else { "" },
        first_line(&review.task, 120)
    )];
    for subtask in &review.subtasks {
        let reviewer = subtask.reviewer.as_ref();
        lines.push(format!(
            "{} {} (reviewer: {}{}; {}): {}",
            subtask.id,
            subtask.status.as_str(),
            reviewer.map_or("none", |v| v.verdict.as_str()),
            subtask
                .human_verdict
                .map(|v| format!(", person: {}", v.as_str()))
                .unwrap_or_default(),
            diffstat(subtask.diffstat.as_ref()),
            first_line(&subtask.task, 100)
        ));
        if let Some(reviewer) = reviewer {
            if !reviewer.summary.trim().is_empty() {
                lines.push(format!(
                    "  reviewer: {}",
                    first_line(&reviewer.summary, 200)
                ));
            }
            lines.extend(reviewer.findings.iter().map(finding));
        }
        if !subtask.executes_later.is_empty() {
            lines.push(format!(
                "  check by hand: changes files that run later: {}",
                subtask.executes_later.join(", ")
            ));
        }
    }
    if let Some(error) = &review.error {
        lines.push(format!("Error: {}", first_line(error, 300)));
    }
    lines.join("\n")
}

/// What the `review` tool did: the decisions recorded, then what became of the result.
pub fn review(outcome: &ReviewOutcome) -> String {
    let mut lines = Vec::new();
    for decision in &outcome.recorded {
        lines.push(format!(
            "{}: {} (was {}).",
            decision.subtask,
            decision.verdict.as_str(),
            decision.previous.map_or("undecided", |v| v.as_str())
        ));
    }
    if !outcome.unchanged.is_empty() {
        let unchanged: Vec<String> = outcome.unchanged.iter().map(ToString::to_string).collect();
        lines.push(format!("Unchanged: {}.", unchanged.join(", ")));
    }
    if let Some(rebuilt) = &outcome.rebuilt {
        lines.push(format!("The result was rebuilt: {}.", rebuilt.result));
    }
    for subtask in outcome.approved_but_not_merged() {
        lines.push(format!(
            "{} is approved but not in the result: it conflicts ({}).",
            subtask.id,
            subtask.conflict_paths.join(", ")
        ));
    }
    match &outcome.apply {
        Some(ApplyResult::Refused {
            message, command, ..
        }) => {
            lines.push(format!("Not applied: {message}"));
            lines.push(format!("To apply it by hand: {command}"));
        }
        Some(apply) => lines.push(apply.message().to_owned()),
        None => lines.push(format!(
            "Not asked to apply; the result stays on {}.",
            outcome.review.result_branch
        )),
    }
    lines.join("\n")
}

fn finding(finding: &Finding) -> String {
    let place = match finding.line {
        Some(line) => format!("{}:{line}", finding.path),
        None => finding.path.clone(),
    };
    format!(
        "  - {} {place}: {}",
        finding.severity(),
        first_line(&finding.problem, 160)
    )
}

fn diffstat(stat: Option<&DiffStat>) -> String {
    stat.map_or_else(|| "no diff".to_owned(), DiffStat::summary)
}

fn first_line(text: &str, max: usize) -> String {
    truncate(text.lines().next().unwrap_or_default().trim(), max)
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

fn short_branch(branch: &str) -> &str {
    branch.strip_prefix("refs/heads/").unwrap_or(branch)
}
