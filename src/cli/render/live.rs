//! The live view of a run: spinner lines on a terminal, plain lines elsewhere.
//!
//! This file owns how events are shown while a run goes; it must never block the run
//! (events arrive on an unbounded channel) and never print to stdout.

use std::collections::BTreeMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc::UnboundedReceiver;

use grove::event::{AgentId, Event};
use grove::ledger::Ledger;
use grove::prices::format_usd;
use grove::status::{SubtaskId, VerdictKind};

use grove::text::{first_line, printable};

use super::paint;

/// Every subagent's final ledger, in the order they finished.
pub type Ledgers = Vec<(AgentId, Ledger)>;

/// Renders events until the channel closes; returns the ledgers it saw.
pub async fn live(mut events: UnboundedReceiver<Event>, terminal: bool) -> Ledgers {
    let mut view = if terminal {
        View::Bars(Box::new(Bars::new()))
    } else {
        View::Plain
    };
    let mut ledgers = Vec::new();
    while let Some(event) = events.recv().await {
        let event = escaped(event);
        if let Event::AgentFinished { agent, ledger, .. } = &event {
            // An agent whose loop ran again (the lead, told results it had not heard)
            // is one line, its rounds summed.
            match ledgers.iter_mut().find(|(seen, _)| seen == agent) {
                Some((_, total)) => Ledger::add(total, ledger),
                None => ledgers.push((agent.clone(), *ledger)),
            }
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

/// `event` with every string escaped by [`printable`]: a brief, a model's error, an
/// external CLI's stderr or an agent file's name may carry terminal escapes, and this is
/// the one place events reach the terminal. Exhaustive on purpose: a new event's text
/// must be thought about here.
fn escaped(event: Event) -> Event {
    let text = |text: String| match printable(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(escaped) => escaped,
    };
    // A label is `lead` or `S<n>`: nothing in it to escape.
    let agent = |agent: AgentId| AgentId {
        role: text(agent.role),
        label: agent.label,
    };
    match event {
        Event::AgentStarted { agent: id } => Event::AgentStarted { agent: agent(id) },
        Event::TurnCompleted {
            agent: id,
            turn,
            ledger,
        } => Event::TurnCompleted {
            agent: agent(id),
            turn,
            ledger,
        },
        Event::ToolCalled {
            agent: id,
            tool,
            is_error,
        } => Event::ToolCalled {
            agent: agent(id),
            tool: text(tool),
            is_error,
        },
        Event::ModelRetry {
            agent: id,
            attempt,
            delay_ms,
            reason,
        } => Event::ModelRetry {
            agent: agent(id),
            attempt,
            delay_ms,
            reason: text(reason),
        },
        Event::AgentFinished {
            agent: id,
            ledger,
            outcome,
        } => Event::AgentFinished {
            agent: agent(id),
            ledger,
            outcome: text(outcome),
        },
        Event::SubtaskStarted {
            label,
            task,
            branch,
        } => Event::SubtaskStarted {
            label,
            task: text(task),
            branch: text(branch),
        },
        Event::SubtaskWaiting {
            label,
            task,
            waits_for,
        } => Event::SubtaskWaiting {
            label,
            task: text(task),
            waits_for,
        },
        Event::SubtaskFinished {
            label,
            status,
            verdict,
            diffstat,
        } => Event::SubtaskFinished {
            label,
            status,
            verdict,
            diffstat: diffstat.map(text),
        },
        Event::CheckStarted { on, command } => Event::CheckStarted {
            on: text(on),
            command: text(command),
        },
        Event::CheckFinished {
            on,
            command,
            passed,
            ended,
            seconds,
        } => Event::CheckFinished {
            on: text(on),
            command: text(command),
            passed,
            ended: text(ended),
            seconds,
        },
        Event::Note { message } => Event::Note {
            message: text(message),
        },
        // A run id is a fixed pattern of digits and letters.
        started @ Event::RunStarted { .. } => started,
        // Its model names are escaped where they are shown, by `spent_line`.
        spent @ Event::Spent { .. } => spent,
        Event::ModelWaiting {
            agent: id,
            attempt,
            attempts,
            waited_ms,
            waiting_for,
        } => Event::ModelWaiting {
            agent: agent(id),
            attempt,
            attempts,
            waited_ms,
            waiting_for: text(waiting_for),
        },
    }
}

enum View {
    Plain,
    Bars(Box<Bars>),
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
        Event::SubtaskWaiting {
            label,
            task,
            waits_for,
        } => eprintln!("{label}: {}", waiting_line(waits_for, task)),
        Event::SubtaskFinished {
            label,
            status,
            verdict,
            diffstat,
        } => eprintln!(
            "{}",
            finished_line(label, status.as_str(), *verdict, diffstat.as_deref())
        ),
        Event::CheckStarted { .. } | Event::CheckFinished { .. } => {
            if let Some(line) = check_line(event) {
                eprintln!("{line}");
            }
        }
        Event::Note { message } => eprintln!("grove: {message}"),
        // The terminal has its run id from the lines that follow and the final table;
        // the dollars are in each line a finished agent prints and in the end table.
        Event::RunStarted { .. } | Event::Spent { .. } => {}
    }
}

/// The live view's footer: `spent $0.42 so far of the $5.00 budget`, and the models
/// whose turns are not in the figure.
fn spent_line(usd: f64, cap_usd: Option<f64>, unpriced: &[String]) -> String {
    let mut line = format!("spent {} so far", format_usd(usd));
    if let Some(cap) = cap_usd {
        line.push_str(&format!(" of the {} budget", format_usd(cap)));
    }
    if !unpriced.is_empty() {
        line.push_str(&format!(
            " · not counted: {} (no price; --prices FILE)",
            unpriced.join(", ")
        ));
    }
    printable(&line).into_owned()
}

/// `waits for S1, S3 to settle, then starts from their result: <brief>`: a subtask
/// held back by its `after` or overlapping `paths`, in both views; `waits for a free
/// --jobs slot: <brief>` for one that waits for a slot alone.
fn waiting_line(waits_for: &[SubtaskId], task: &str) -> String {
    if waits_for.is_empty() {
        return format!("waits for a free --jobs slot: {}", first_line(task, 80));
    }
    format!(
        "waits for {} to settle, then starts from their result: {}",
        waits_for
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        first_line(task, 80)
    )
}

/// `S2: checking with `cargo test`` and `S2: check passed in 3.1 s`, in both views.
fn check_line(event: &Event) -> Option<String> {
    match event {
        Event::CheckStarted { on, command } => Some(format!("{on}: checking with `{command}`")),
        Event::CheckFinished {
            on,
            passed,
            ended,
            seconds,
            ..
        } => Some(if *passed {
            format!("{on}: check passed in {seconds:.1} s")
        } else {
            format!("{on}: check failed ({ended}) in {seconds:.1} s")
        }),
        _ => None,
    }
}

/// `S2: merged (reviewer: approve), 1 file changed, …`: a subtask's end, in both views.
fn finished_line(
    label: &SubtaskId,
    status: &str,
    verdict: Option<VerdictKind>,
    diffstat: Option<&str>,
) -> String {
    let verdict = verdict
        .map(|v| format!(" (reviewer: {v})"))
        .unwrap_or_default();
    let diffstat = diffstat.map(|d| format!(", {d}")).unwrap_or_default();
    format!("{label}: {status}{verdict}{diffstat}")
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
    /// One line per subtask waiting for earlier ones, by label, until it starts.
    waiting: BTreeMap<SubtaskId, ProgressBar>,
    /// The last line, once the run has spent something: dollars so far.
    footer: Option<ProgressBar>,
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
            waiting: BTreeMap::new(),
            footer: None,
            style,
        }
    }

    /// A new line, above the footer when there is one.
    fn add(&self, bar: ProgressBar) -> ProgressBar {
        match &self.footer {
            Some(footer) => self.multi.insert_before(footer, bar),
            None => self.multi.add(bar),
        }
    }

    fn line(&mut self, agent: &AgentId) -> &ProgressBar {
        let key = agent.to_string();
        if !self.lines.contains_key(&key) {
            let bar = self.add(ProgressBar::new_spinner());
            bar.set_style(self.style.clone());
            bar.set_prefix(key.clone());
            bar.enable_steady_tick(Duration::from_millis(120));
            self.lines.insert(key.clone(), bar);
        }
        self.lines.entry(key).or_insert_with(ProgressBar::hidden)
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
                if let Some(line) = self.waiting.remove(label) {
                    line.finish_and_clear();
                }
                let _ = self
                    .multi
                    .println(format!("{label}: delegated: {}", first_line(task, 100)));
            }
            Event::SubtaskWaiting {
                label,
                task,
                waits_for,
            } => {
                let line = self.add(ProgressBar::new_spinner());
                line.set_style(self.style.clone());
                line.set_prefix(label.to_string());
                line.set_message(waiting_line(waits_for, task));
                line.enable_steady_tick(Duration::from_millis(120));
                if let Some(earlier) = self.waiting.insert(*label, line) {
                    earlier.finish_and_clear();
                }
            }
            Event::SubtaskFinished {
                label,
                status,
                verdict,
                diffstat,
            } => {
                let _ = self.multi.println(finished_line(
                    label,
                    &paint(*status),
                    *verdict,
                    diffstat.as_deref(),
                ));
            }
            Event::CheckStarted { .. } | Event::CheckFinished { .. } => {
                if let Some(line) = check_line(event) {
                    let _ = self.multi.println(line);
                }
            }
            Event::Note { message } => {
                let _ = self.multi.println(format!("grove: {message}"));
            }
            Event::RunStarted { .. } => {}
            Event::Spent {
                usd,
                cap_usd,
                unpriced,
            } => {
                let footer = self.footer.get_or_insert_with(|| {
                    let bar = self.multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("  {wide_msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar
                });
                footer.set_message(spent_line(*usd, *cap_usd, unpriced));
            }
        }
    }

    fn finish(self) {
        for line in self
            .lines
            .values()
            .chain(self.waiting.values())
            .chain(self.footer.iter())
        {
            line.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footer_says_what_was_spent_of_which_budget_and_what_is_not_counted() {
        assert_eq!(
            [
                spent_line(0.4213, None, &[]),
                spent_line(1.5, Some(5.0), &["local\u{1b}[2J".to_owned()]),
            ],
            [
                "spent $0.4213 so far".to_owned(),
                "spent $1.50 so far of the $5.00 budget · not counted: local\\x1b[2J (no price; \
                 --prices FILE)"
                    .to_owned(),
            ]
        );
    }
}
