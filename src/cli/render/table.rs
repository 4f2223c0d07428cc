//! What is printed when a command is done: the run's final table and summary, the dry
//! run's plan, `grove runs`, `grove clean`, `grove gc` and the demo's epilogue.

use grove::run::report::{CheckOutcome, Culprit, CulpritEvidence};
use grove::run::{RunEnd, RunReport, SubtaskReport};
use grove::store::RunSummary;
use grove::store::attempt_status::{AttemptOf, AttemptStatus};
use grove::store::journal::{ON_RESULT, SubtaskOutcome};
use grove::worktree::CleanReport;

use grove::text::{first_line, printable, shell_word, truncate};

use super::{Ledgers, Output};

/// The lead's closing text is shown up to this many characters…
const SUMMARY_CHARS: usize = 4_000;
/// …and this many lines; `--json` has the whole text.
const SUMMARY_LINES: usize = 60;

/// `eprintln!` with the line escaped by [`printable`]: everything printed here quotes
/// text from outside (briefs, reviews, errors, paths), and nothing here is coloured.
macro_rules! say {
    () => {
        eprintln!()
    };
    ($($arg:tt)*) => {
        eprintln!("{}", printable(&format!($($arg)*)))
    };
}

/// `println!` with the line escaped by [`printable`].
macro_rules! out {
    ($($arg:tt)*) => {
        println!("{}", printable(&format!($($arg)*)))
    };
}

/// A subtask's row of the final table and the lines under it: why it ended so (the
/// reviewer's words for a rejection, the reason otherwise), where it stands among the
/// attempts at its brief, files to check by hand, its archive, what superseded it and
/// what it replaces.
fn subtask_lines(subtask: &SubtaskReport) -> Vec<String> {
    let diff = subtask
        .diffstat
        .as_ref()
        .map(grove::git::DiffStat::summary)
        .unwrap_or_else(|| "-".into());
    let mut lines = vec![format!(
        "{:<5} {:<9} {:<8} {:<44} {:>9} {:>8} {:>9}",
        subtask.id,
        subtask.status.as_str(),
        subtask.verdict.map_or("-", |v| v.as_str()),
        truncate(&diff, 44),
        subtask.input_tokens,
        subtask.output_tokens,
        super::cost::cell(subtask.cost_usd)
    )];
    let lost = subtask
        .attempt
        .as_ref()
        .filter(|of| of.status == AttemptStatus::NotPicked);
    if let Some(of) = &subtask.attempt {
        lines.push(format!("      {}", attempt_line(of)));
    }
    match subtask.status {
        // Merged by a resolver: its reason says which, and that it was reviewed.
        SubtaskOutcome::Merged if subtask.resolution.is_some() => {
            if let Some(reason) = &subtask.reason {
                lines.push(format!("      {}", first_line(reason, 110)));
            }
        }
        SubtaskOutcome::Merged => {}
        // A rejection is explained by the reviewer, not by the worker's summary (an
        // attempt's by its line above, which holds the judge's reason).
        SubtaskOutcome::Rejected => {
            if let (Some(summary), None) = (&subtask.review_summary, lost) {
                lines.push(format!("      reviewer: {}", first_line(summary, 100)));
            }
            for finding in subtask.findings.iter().take(3) {
                lines.push(format!(
                    "      - {} {}: {}",
                    finding.severity(),
                    finding.place(),
                    first_line(&finding.problem, 90)
                ));
            }
        }
        SubtaskOutcome::Conflict | SubtaskOutcome::Failed => {
            if let (Some(reason), None) = (&subtask.reason, lost) {
                lines.push(format!("      {}", first_line(reason, 110)));
            }
        }
    }
    if !subtask.executes_later.is_empty() {
        lines.push(format!(
            "      check by hand: changes files that run later: {}",
            subtask.executes_later.join(", ")
        ));
    }
    if let Some(archive) = &subtask.archive_ref {
        lines.push(format!("      work kept at {archive}"));
    }
    if let Some(by) = subtask.superseded_by {
        lines.push(format!("      superseded by {by}"));
    }
    if let Some(earlier) = subtask.replaces {
        lines.push(format!("      replaces {earlier}"));
    }
    lines
}

/// `attempt B of S3: not picked (S5 merged): <why>`, `attempt C of S3: picked`: an attempt's place
/// in its group (best of N), under its row.
fn attempt_line(of: &AttemptOf) -> String {
    let mut line = format!(
        "attempt {} of {}: {}",
        of.label,
        of.group,
        of.status.words()
    );
    if of.status == AttemptStatus::NotPicked
        && let Some(merged) = of.merged
    {
        line.push_str(&format!(" ({merged} merged)"));
    }
    if let Some(reason) = &of.reason {
        line.push_str(&format!(": {}", first_line(reason, 90)));
    }
    line
}

/// The final table, the ledger lines, the apply message, why not everything was done
/// (`not_done`, the reason of exit 3) and the lead's closing text, cut when long
/// ([`Output::Json`]: the whole text is on stdout).
pub fn report(report: &RunReport, ledgers: &Ledgers, not_done: Option<&str>, output: Output) {
    say!();
    if report.subtasks.is_empty() {
        say!("No subtasks were delegated.");
    } else {
        say!(
            "{:<5} {:<9} {:<8} {:<44} {:>9} {:>8} {:>9}",
            "",
            "status",
            "verdict",
            "diff",
            "in",
            "out",
            "cost"
        );
        for subtask in &report.subtasks {
            for line in subtask_lines(subtask) {
                say!("{line}");
            }
        }
    }
    say!();
    for (agent, ledger) in ledgers {
        say!("{}", ledger.line(agent));
    }
    let totals = &report.totals;
    say!(
        "total: steps={} in={} out={} cache_read={} cache_write={}",
        totals.steps,
        totals.input_tokens,
        totals.output_tokens,
        totals.cache_read_tokens,
        totals.cache_write_tokens
    );
    say!("{}", super::cost::cost_line(report));
    say!();
    match (not_done, &report.error) {
        (Some(reason), _) => say!("grove: finished, but not everything was done: {reason}"),
        (None, Some(error)) => say!("grove: {error}"),
        (None, None) => {}
    }
    if let Some(line) = check_line(report) {
        say!("{line}");
    }
    if let Some(apply) = &report.apply {
        say!("{}", apply.message);
        if let Some(command) = &apply.command {
            say!("To apply it: {command}");
        }
    }
    if report.status == RunEnd::Finished && !report.all_merged() && !report.applied {
        say!(
            "To look at each diff and verdict, and approve or reject by hand: grove review {}",
            report.run_id
        );
    }
    match report.status {
        RunEnd::Interrupted => say!(
            "Run {} was interrupted; its work is checkpointed on its branches.",
            report.run_id
        ),
        RunEnd::Paused => say!(
            "Run {} is paused; what it did so far is checkpointed on its branches.",
            report.run_id
        ),
        _ => {}
    }
    summary(&report.summary, output);
}

/// What the project's check said of the merged result, when anything was merged.
fn check_line(report: &RunReport) -> Option<String> {
    let merged_any =
        report.result_commit.as_ref() != Some(&report.base) && report.result_commit.is_some();
    if !merged_any || report.status != RunEnd::Finished {
        return None;
    }
    let check = &report.check;
    let Some(command) = &check.command else {
        return Some(
            "The result was not checked: .grove/config.toml has no [check] command.".to_owned(),
        );
    };
    let last = check.runs.iter().rev().find(|run| run.on == ON_RESULT);
    Some(
        match (check.status, last) {
            (CheckOutcome::Passed, Some(run)) => match &run.same_as {
                // A reused verdict took no time: say whose check it was instead.
                Some(same) => format!(
                    "The result's check `{command}` passed (the very tree {same}'s check \
                     passed: not run again)."
                ),
                None => format!(
                    "The result's check `{command}` passed in {:.1} s.",
                    run.seconds
                ),
            },
            (CheckOutcome::Failed, Some(run)) => format!(
                "The result's check `{command}` failed ({}). Its output ends with:\n{}",
                run.ended,
                indent_tail(&run.output_tail)
            ),
            _ => format!("The result was not checked with `{command}`."),
        } + &culprit_line(check.culprit.as_ref()),
    )
}

/// What the culprit search found, after the check's line (empty when it did not run).
fn culprit_line(culprit: Option<&Culprit>) -> String {
    let Some(culprit) = culprit else {
        return String::new();
    };
    let who = culprit.subtasks.join(", ");
    match culprit.found_by {
        CulpritEvidence::PassesWithout => {
            format!("\nThe culprit: {who} (the check passes on the result without it).")
        }
        CulpritEvidence::FailingLine => format!(
            "\nThe culprit: {who} (it last changed {}, where the check failed).",
            culprit.at.as_deref().unwrap_or("the failing line")
        ),
        CulpritEvidence::FailingFile => format!(
            "\nThe culprit: {who} (it changed {}, where the check failed).",
            culprit.at.as_deref().unwrap_or("the failing file")
        ),
        CulpritEvidence::OnlyMerged => format!("\nThe culprit: {who} (the only subtask merged)."),
        CulpritEvidence::FirstHad => format!(
            "\nThe culprit: {who} (its own tree first had the new finding {}).",
            culprit.at.as_deref().unwrap_or_default()
        ),
    }
}

/// The last lines of a check's output, indented under the line that names it.
fn indent_tail(tail: &str) -> String {
    let lines: Vec<&str> = tail.lines().collect();
    let start = lines.len().saturating_sub(CHECK_TAIL_LINES);
    lines[start..]
        .iter()
        .map(|line| format!("  {}", truncate(line, 160)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How many lines of a red result check's output the final message shows.
const CHECK_TAIL_LINES: usize = 12;

/// The lead's closing text, at most [`SUMMARY_LINES`] lines of [`SUMMARY_CHARS`]
/// characters, saying how much was left out and where the whole text is.
fn summary(text: &str, output: Output) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let by_chars = text
        .char_indices()
        .nth(SUMMARY_CHARS)
        .map_or(text.len(), |(cut, _)| cut);
    let by_lines = text
        .match_indices('\n')
        .nth(SUMMARY_LINES - 1)
        .map_or(text.len(), |(cut, _)| cut);
    let shown = &text[..by_chars.min(by_lines)];
    say!("\n{shown}");
    let left_out = text.chars().count() - shown.chars().count();
    if left_out > 0 {
        let whole = match output {
            Output::Json => "is `summary` in the JSON on stdout",
            Output::Human => "is `summary` in `--json` output",
        };
        say!("[… {left_out} more characters of the lead's text left out; the whole text {whole}]");
    }
}

/// The lead's plan of a dry run.
pub fn plan(plan: &grove::run::dry_run::Plan, ledgers: &Ledgers) {
    say!();
    if plan.subtasks.is_empty() {
        say!("Dry run: the lead delegated nothing.");
    } else {
        say!(
            "Dry run: the lead would delegate {} subtask{} (nothing was run or changed):",
            plan.subtasks.len(),
            if plan.subtasks.len() == 1 { "" } else { "s" }
        );
        for subtask in &plan.subtasks {
            let mode = match subtask.mode {
                grove::store::journal::ContextMode::Isolated => "isolated",
                grove::store::journal::ContextMode::Fork => "fork",
            };
            let attempts = match subtask.attempts {
                1 => String::new(),
                n => format!(", {n} attempts"),
            };
            say!("\n{} [{mode}, {}{attempts}]", subtask.id, subtask.agent);
            for line in subtask.task.trim().lines() {
                say!("    {line}");
            }
        }
    }
    say!();
    for (agent, ledger) in ledgers {
        say!("{}", ledger.line(agent));
    }
    for line in super::cost::estimate_block(&plan.estimate, plan.plan_usd) {
        say!("{line}");
    }
    if let Some(reason) = &plan.stopped {
        say!("grove: the plan is incomplete: {reason}");
    }
    if !plan.summary.trim().is_empty() {
        say!("\n{}", plan.summary.trim());
    }
}

/// The `grove runs` table.
pub fn runs_table(runs: &[RunSummary]) {
    if runs.is_empty() {
        out!("No runs in this repository.");
        return;
    }
    // Ids are all one length today; the widest keeps the columns whatever comes.
    let width = runs
        .iter()
        .map(|run| run.run_id.to_string().len())
        .max()
        .unwrap_or_default();
    out!("{:<width$}  {:<11}  TASK", "RUN", "STATUS");
    for run in runs {
        let task = run
            .details
            .as_ref()
            .map(|details| first_line(&details.task, 60))
            .or_else(|| run.problem.clone())
            .unwrap_or_default();
        out!(
            "{:<width$}  {:<11}  {task}",
            run.run_id.to_string(),
            run.status.as_str()
        );
    }
}

/// What `grove clean` did.
pub fn clean_report(report: &CleanReport) {
    for lock in &report.removed_locks {
        out!(
            "removed {}, a stale lock a stopped process left on one of the run's refs",
            lock.display()
        );
    }
    for archived in &report.archived {
        out!(
            "archived subtask {} at {}",
            archived.subtask,
            archived.reference
        );
    }
    for path in &report.removed_worktrees {
        out!("removed worktree {}", path.display());
    }
    for branch in &report.deleted_branches {
        out!("deleted branch {branch} (its work is archived)");
    }
    for kept in &report.kept_worktrees {
        out!(
            "kept worktree {}: git refuses to record {} (move or rename them, then clean again)",
            kept.path.display(),
            grove::text::printable(&kept.paths.join(", "))
        );
    }
    for base in &report.removed_bases {
        out!("removed base tree {} (no run uses it)", base.display());
    }
    if report.archived.is_empty()
        && report.removed_worktrees.is_empty()
        && report.kept_worktrees.is_empty()
    {
        out!("nothing to clean");
    }
}

/// What `grove gc` deleted.
pub fn gc_report(deleted: &[String], bases: &[std::path::PathBuf]) {
    if deleted.is_empty() {
        out!("no archive is old enough to delete");
    }
    for reference in deleted {
        out!("deleted {reference}");
    }
    for base in bases {
        out!("removed base tree {} (unused for as long)", base.display());
    }
}

/// The end of `grove demo`: that it was a replay, where the sample is, how to look at
/// the run, and how to run grove for real.
pub fn demo_epilogue(repo: &std::path::Path, report: &RunReport, as_scripted: bool) {
    let dir = shell_word(&repo.display().to_string());
    say!();
    if !as_scripted {
        say!("grove: the demo did not go as scripted; the table above says what happened.");
    }
    say!(
        "This was a replay: no model was called. A scripted server on 127.0.0.1 played the \
         lead, the workers and the reviewers; the repository, worktrees, reviews and merges \
         were real."
    );
    let rejected = grove::demo::rejected(report);
    if let Some(subtask) = rejected {
        say!();
        say!("The reviewer rejected {}:", subtask.id);
        if let Some(summary) = &subtask.review_summary {
            say!("  {}", first_line(summary, 200));
        }
        for finding in &subtask.findings {
            let line = finding
                .line
                .map(|line| format!(":{line}"))
                .unwrap_or_default();
            say!(
                "  {}{line}: {}",
                finding.path,
                first_line(&finding.problem, 160)
            );
        }
    }
    say!();
    say!("The sample repository:");
    say!("  cd {dir}");
    say!("Look at the run:");
    say!("  git -C {dir} log --graph --oneline --all");
    say!("  grove -C {dir} runs");
    say!(
        "  grove -C {dir} report {}    # one HTML page: timeline, diffs, verdicts, cost",
        report.run_id
    );
    say!(
        "  grove -C {dir} review --list {}    # each subtask's verdict, findings and diff",
        report.run_id
    );
    if let Some(archive) = rejected.and_then(|subtask| subtask.archive_ref.as_deref()) {
        say!(
            "  git -C {dir} show {}    # the rejected subtask's work, kept",
            shell_word(archive)
        );
    }
    say!("Run grove on your own repository:");
    say!("  cd your-repo && ANTHROPIC_API_KEY=... grove run \"describe the change you want\"");
}

/// Notes on `.grove/agents/*.md` files that cannot be used (the lead is not offered them).
pub fn agent_file_problems(problems: &[String]) {
    for problem in problems {
        say!("grove: note: {problem} (the lead is not offered this agent)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grove::run::SubtaskId;
    use grove::run::report::AttemptEntry;
    use grove::store::journal::{SubtaskOutcome, VerdictKind};

    /// S2, S3, S4: attempts A, B, C at one brief; A failed its check, the judge picked C.
    fn judged() -> Vec<SubtaskReport> {
        let attempt = |n: u32, label: char, status, reason: Option<&str>| {
            let mut report = SubtaskReport::new(
                SubtaskId(n),
                "make parse strict".into(),
                format!("grove/r/{n}"),
            );
            report.attempt = Some(AttemptOf {
                group: SubtaskId(2),
                label,
                status,
                reason: reason.map(str::to_owned),
                merged: Some(SubtaskId(4)),
            });
            report.cost_usd = Some(0.25);
            report
        };
        let mut a = attempt(
            2,
            'A',
            AttemptStatus::NotPicked,
            Some("its check failed while that of B, C passed"),
        );
        a.status = SubtaskOutcome::Rejected;
        a.verdict = Some(VerdictKind::Reject);
        a.review_summary = Some("Attempt A was not picked: its check failed".into());
        a.archive_ref = Some("refs/grove/archive/r/2".into());
        a.attempts = vec![AttemptEntry {
            subtask: SubtaskId(2),
            label: 'A',
            status: AttemptStatus::NotPicked,
            cost_usd: Some(0.25),
            reason: None,
        }];
        let mut b = attempt(
            3,
            'B',
            AttemptStatus::NotPicked,
            Some("B drops the error path."),
        );
        b.status = SubtaskOutcome::Rejected;
        b.verdict = Some(VerdictKind::Reject);
        b.review_summary = Some("Attempt B was not picked: B drops the error path.".into());
        let mut c = attempt(4, 'C', AttemptStatus::Picked, None);
        c.status = SubtaskOutcome::Merged;
        c.verdict = Some(VerdictKind::Approve);
        let mut plain = SubtaskReport::new(SubtaskId(5), "docs".into(), "grove/r/5".into());
        plain.status = SubtaskOutcome::Rejected;
        plain.verdict = Some(VerdictKind::Reject);
        plain.review_summary = Some("The docs contradict the code.".into());
        vec![a, b, c, plain]
    }

    #[test]
    fn attempts_show_their_group_and_label_whether_picked_and_why_not() {
        let lines: Vec<String> = judged().iter().flat_map(subtask_lines).collect();
        insta::assert_snapshot!("end_table_attempts", lines.join("\n"));
    }
}
