//! Rendering for people: the live view of a run, the final table, the ledger lines.
//!
//! On a terminal the live view redraws one line per subagent; anywhere else it prints
//! plain lines, one per event that matters. `NO_COLOR` is respected.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc::UnboundedReceiver;

use grove::agent::Ledger;
use grove::event::{AgentId, Event};
use grove::git::CleanReport;
use grove::run::journal::SubtaskOutcome;
use grove::run::store::RunSummary;
use grove::run::{RunEnd, RunReport};

/// Every subagent's final ledger, in the order they finished.
pub type Ledgers = Vec<(AgentId, Ledger)>;

/// Renders events until the channel closes; returns the ledgers it saw.
pub async fn live(mut events: UnboundedReceiver<Event>, terminal: bool) -> Ledgers {
    let mut view = if terminal {
        View::Bars(Bars::new())
    } else {
        View::Plain
    };
    let mut ledgers = Vec::new();
    while let Some(event) = events.recv().await {
        if let Event::AgentFinished { agent, ledger, .. } = &event {
            ledgers.push((agent.clone(), *ledger));
        }
        match &mut view {
            View::Plain => plain(&event),
            View::Bars(bars) => bars.show(&event),
        }
    }
    if let View::Bars(bars) = view {
        bars.finish();
    }
    ledgers
}

enum View {
    Plain,
    Bars(Bars),
}

fn plain(event: &Event) {
    match event {
        Event::AgentStarted { agent } => eprintln!("{agent}: started"),
        Event::TurnCompleted {
            agent,
            turn,
            ledger,
        } => eprintln!(
            "{agent}: turn {turn} done (in={} out={})",
            ledger.input_tokens, ledger.output_tokens
        ),
        Event::ToolCalled { .. } => {}
        Event::ModelRetry {
            agent,
            attempt,
            delay_ms,
            reason,
        } => eprintln!(
            "{agent}: retrying in {:.1} s (retry {attempt}) after: {reason}",
            *delay_ms as f64 / 1000.0
        ),
        Event::ModelWaiting { agent, .. } => eprintln!("{agent}: {}", waiting(event)),
        Event::AgentFinished {
            agent,
            ledger,
            outcome,
        } => eprintln!("{} {outcome}", ledger.line(agent)),
        Event::SubtaskStarted { label, task, .. } => {
            eprintln!("{label}: delegated: {}", first_line(task, 100));
        }
        Event::SubtaskFinished {
            label,
            status,
            verdict,
            diffstat,
        } => eprintln!(
            "{label}: {status}{}{}",
            verdict
                .as_ref()
                .map(|v| format!(" (reviewer: {v})"))
                .unwrap_or_default(),
            diffstat
                .as_ref()
                .map(|d| format!(", {d}"))
                .unwrap_or_default()
        ),
        Event::Note { message } => eprintln!("grove: {message}"),
    }
}

/// `waiting for the model API (62 s, attempt 2 of 7)`; the phase is named once a
/// stream has started.
fn waiting(event: &Event) -> String {
    let Event::ModelWaiting {
        attempt,
        attempts,
        waited_ms,
        waiting_for,
        ..
    } = event
    else {
        return String::new();
    };
    let during = if waiting_for.contains("stream") {
        format!(" for {waiting_for}")
    } else {
        String::new()
    };
    let waited = if *waited_ms < 10_000 {
        format!("{:.1}", *waited_ms as f64 / 1000.0)
    } else {
        (waited_ms / 1000).to_string()
    };
    format!("waiting for the model API{during} ({waited} s, attempt {attempt} of {attempts})")
}

/// The terminal view: one spinner line per running subagent.
struct Bars {
    multi: MultiProgress,
    lines: BTreeMap<String, ProgressBar>,
    style: ProgressStyle,
}

impl Bars {
    fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{spinner} {prefix:<14} {wide_msg} {elapsed:>4}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        Self {
            multi,
            lines: BTreeMap::new(),
            style,
        }
    }

    fn line(&mut self, agent: &AgentId) -> &ProgressBar {
        let key = agent.to_string();
        self.lines.entry(key.clone()).or_insert_with(|| {
            let bar = self.multi.add(ProgressBar::new_spinner());
            bar.set_style(self.style.clone());
            bar.set_prefix(key);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        })
    }

    fn show(&mut self, event: &Event) {
        match event {
            Event::AgentStarted { agent } => self.line(agent).set_message("thinking"),
            Event::TurnCompleted {
                agent,
                turn,
                ledger,
            } => self.line(agent).set_message(format!(
                "turn {turn} · in={} out={}",
                ledger.input_tokens, ledger.output_tokens
            )),
            Event::ToolCalled { agent, tool, .. } => {
                let line = self.line(agent);
                let message = line.message();
                let base = message.split(" · →").next().unwrap_or_default().to_owned();
                line.set_message(format!("{base} · → {tool}"));
            }
            Event::ModelRetry {
                agent,
                attempt,
                delay_ms,
                reason,
            } => self.line(agent).set_message(format!(
                "retrying in {:.1} s (retry {attempt}) after: {}",
                *delay_ms as f64 / 1000.0,
                first_line(reason, 60)
            )),
            Event::ModelWaiting { agent, .. } => self.line(agent).set_message(waiting(event)),
            Event::AgentFinished {
                agent,
                ledger,
                outcome,
            } => {
                let text = format!("{} {}", ledger.line(agent), first_line(outcome, 60));
                let line = self.line(agent).clone();
                line.finish_and_clear();
                let _ = self.multi.println(text);
            }
            Event::SubtaskStarted { label, task, .. } => {
                let _ = self
                    .multi
                    .println(format!("{label}: delegated: {}", first_line(task, 100)));
            }
            Event::SubtaskFinished {
                label,
                status,
                verdict,
                diffstat,
            } => {
                let _ = self.multi.println(format!(
                    "{label}: {}{}{}",
                    paint(status),
                    verdict
                        .as_ref()
                        .map(|v| format!(" (reviewer: {v})"))
                        .unwrap_or_default(),
                    diffstat
                        .as_ref()
                        .map(|d| format!(", {d}"))
                        .unwrap_or_default()
                ));
            }
            Event::Note { message } => {
                let _ = self.multi.println(format!("grove: {message}"));
            }
        }
    }

    fn finish(self) {
        for line in self.lines.values() {
            line.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

fn colour_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

fn paint(status: &str) -> String {
    if !colour_enabled() {
        return status.to_owned();
    }
    let code = match status {
        "merged" => "32",
        "rejected" | "failed" => "31",
        "conflict" => "33",
        _ => return status.to_owned(),
    };
    format!("\x1b[{code}m{status}\x1b[0m")
}

fn first_line(text: &str, max: usize) -> String {
    grove::tools::truncate_chars(text.lines().next().unwrap_or_default().trim(), max)
}

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
                grove::run::journal::ContextMode::Isolated => "isolated",
                grove::run::journal::ContextMode::Fork => "fork",
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

/// Prints `value` as one JSON document on stdout.
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Says that the run is stopping after a Ctrl-C.
pub fn interrupted() {
    eprintln!(
        "\ngrove: interrupted; stopping the subagents and checkpointing their work (Ctrl-C again to quit at once)"
    );
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
