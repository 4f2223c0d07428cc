//! What is printed when a command is done: the run's final table and summary, the dry
//! run's plan, `grove runs`, `grove clean`, `grove gc` and the demo's epilogue.

use grove::git::CleanReport;
use grove::run::{RunEnd, RunReport};
use grove::store::RunSummary;
use grove::store::journal::SubtaskOutcome;

use super::{Ledgers, first_line};

/// The final table, the ledger lines, the apply message and the lead's summary.
pub fn report(report: &RunReport, ledgers: &Ledgers) {
    eprintln!();
    if report.subtasks.is_empty() {
        eprintln!("No subtasks were delegated.");
    } else {
        eprintln!(
            "{:<5} {:<9} {:<8} {:<44} {:>9} {:>8}",
            "", "status", "verdict", "diff", "in", "out"
        );
        for subtask in &report.subtasks {
            let diff = subtask
                .diffstat
                .as_ref()
                .map(grove::git::DiffStat::summary)
                .unwrap_or_else(|| "-".into());
            eprintln!(
                "{:<5} {:<9} {:<8} {:<44} {:>9} {:>8}",
                subtask.id,
                subtask.status.as_str(),
                subtask.verdict.map_or("-", |v| v.as_str()),
                grove::tools::truncate_chars(&diff, 44),
                subtask.input_tokens,
                subtask.output_tokens
            );
            match subtask.status {
                SubtaskOutcome::Merged => {}
                // A rejection is explained by the reviewer, not by the worker's summary.
                SubtaskOutcome::Rejected => {
                    if let Some(summary) = &subtask.review_summary {
                        eprintln!("      reviewer: {}", first_line(summary, 100));
                    }
                    for finding in subtask.findings.iter().take(3) {
                        let place = match finding.line {
                            Some(line) => format!("{}:{line}", finding.path),
                            None => finding.path.clone(),
                        };
                        eprintln!("      - {place}: {}", first_line(&finding.problem, 90));
                    }
                }
                SubtaskOutcome::Conflict | SubtaskOutcome::Failed => {
                    if let Some(reason) = &subtask.reason {
                        eprintln!("      {}", first_line(reason, 110));
                    }
                }
            }
            if !subtask.executes_later.is_empty() {
                eprintln!(
                    "      check by hand: changes files that run later: {}",
                    subtask.executes_later.join(", ")
                );
            }
            if let Some(archive) = &subtask.archive_ref {
                eprintln!("      work kept at {archive}");
            }
        }
    }
    eprintln!();
    for (agent, ledger) in ledgers {
        eprintln!("{}", ledger.line(agent));
    }
    let totals = &report.totals;
    eprintln!(
        "total: steps={} in={} out={} cache_read={} cache_write={}",
        totals.steps,
        totals.input_tokens,
        totals.output_tokens,
        totals.cache_read_tokens,
        totals.cache_write_tokens
    );
    eprintln!();
    if let Some(error) = &report.error {
        eprintln!("grove: {error}");
    }
    if let Some(apply) = &report.apply {
        eprintln!("{}", apply.message);
        if let Some(command) = &apply.command {
            eprintln!("To apply it: {command}");
        }
    }
    if report.status == RunEnd::Finished && !report.all_merged() && !report.applied {
        eprintln!(
            "To look at each diff and verdict, and approve or reject by hand: grove review {}",
            report.run_id
        );
    }
    if matches!(report.status, RunEnd::Interrupted | RunEnd::Paused) {
        eprintln!(
            "Run {} was interrupted; its work is checkpointed on its branches.",
            report.run_id
        );
    }
    if !report.summary.trim().is_empty() {
        eprintln!("\n{}", report.summary.trim());
    }
}

/// The lead's plan of a dry run.
pub fn plan(plan: &grove::run::plan::Plan, ledgers: &Ledgers) {
    eprintln!();
    if plan.subtasks.is_empty() {
        eprintln!("Dry run: the lead delegated nothing.");
    } else {
        eprintln!(
            "Dry run: the lead would delegate {} subtask{} (nothing was run or changed):",
            plan.subtasks.len(),
            if plan.subtasks.len() == 1 { "" } else { "s" }
        );
        for subtask in &plan.subtasks {
            let mode = match subtask.mode {
                grove::store::journal::ContextMode::Isolated => "isolated",
                grove::store::journal::ContextMode::Fork => "fork",
            };
            eprintln!("\n{} [{mode}, {}]", subtask.id, subtask.agent);
            for line in subtask.task.trim().lines() {
                eprintln!("    {line}");
            }
        }
    }
    eprintln!();
    for (agent, ledger) in ledgers {
        eprintln!("{}", ledger.line(agent));
    }
    if let Some(reason) = &plan.stopped {
        eprintln!("grove: the plan is incomplete: {reason}");
    }
    if !plan.summary.trim().is_empty() {
        eprintln!("\n{}", plan.summary.trim());
    }
}

/// The `grove runs` table.
pub fn runs_table(runs: &[RunSummary]) {
    if runs.is_empty() {
        println!("No runs in this repository.");
        return;
    }
    for run in runs {
        let task = run
            .details
            .as_ref()
            .map(|details| first_line(&details.task, 60))
            .or_else(|| run.problem.clone())
            .unwrap_or_default();
        println!("{}  {:<11}  {task}", run.run_id, run.status.as_str());
    }
}

/// What `grove clean` did.
pub fn clean_report(report: &CleanReport) {
    for archived in &report.archived {
        println!(
            "archived subtask {} at {}",
            archived.subtask, archived.reference
        );
    }
    for path in &report.removed_worktrees {
        println!("removed worktree {}", path.display());
    }
    for branch in &report.deleted_branches {
        println!("deleted branch {branch} (its work is archived)");
    }
    if report.archived.is_empty() && report.removed_worktrees.is_empty() {
        println!("nothing to clean");
    }
}

/// What `grove gc` deleted.
pub fn gc_report(deleted: &[String]) {
    if deleted.is_empty() {
        println!("no archive is old enough to delete");
    }
    for reference in deleted {
        println!("deleted {reference}");
    }
}

/// The end of `grove demo`: that it was a replay, where the sample is, how to look at
/// the run, and how to run grove for real.
pub fn demo_epilogue(repo: &std::path::Path, report: &RunReport, as_scripted: bool) {
    let dir = shell_word(&repo.display().to_string());
    eprintln!();
    if !as_scripted {
        eprintln!("grove: the demo did not go as scripted; the table above says what happened.");
    }
    eprintln!(
        "This was a replay: no model was called. A scripted server on 127.0.0.1 played the \
         lead, the workers and the reviewers; the repository, worktrees, reviews and merges \
         were real."
    );
    let rejected = grove::demo::rejected(report);
    if let Some(subtask) = rejected {
        eprintln!();
        eprintln!("The reviewer rejected {}:", subtask.id);
        if let Some(summary) = &subtask.review_summary {
            eprintln!("  {}", first_line(summary, 200));
        }
        for finding in &subtask.findings {
            let line = finding
                .line
                .map(|line| format!(":{line}"))
                .unwrap_or_default();
            eprintln!(
                "  {}{line}: {}",
                finding.path,
                first_line(&finding.problem, 160)
            );
        }
    }
    eprintln!();
    eprintln!("The sample repository:");
    eprintln!("  cd {dir}");
    eprintln!("Look at the run:");
    eprintln!("  git -C {dir} log --graph --oneline --all");
    eprintln!("  grove -C {dir} runs");
    eprintln!(
        "  grove -C {dir} report {}    # one HTML page: timeline, diffs, verdicts, cost",
        report.run_id
    );
    eprintln!(
        "  grove -C {dir} review --list {}    # each subtask's verdict, findings and diff",
        report.run_id
    );
    if let Some(archive) = rejected.and_then(|subtask| subtask.archive_ref.as_deref()) {
        eprintln!(
            "  git -C {dir} show {}    # the rejected subtask's work, kept",
            shell_word(archive)
        );
    }
    eprintln!("Run grove on your own repository:");
    eprintln!("  cd your-repo && ANTHROPIC_API_KEY=... grove run \"describe the change you want\"");
}

/// `text` as one shell word: unchanged when it needs no quoting, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
