//! Rendering for people: the live view of a run, the final table, the review prompt.
//!
//! On a terminal the live view redraws one line per subagent; anywhere else it prints
//! plain lines, one per event that matters. `NO_COLOR` is respected. Everything the
//! binary prints for people goes through here; it must never decide an exit code.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod cost;
mod live;
pub mod review;
mod table;

use grove::status::SubtaskOutcome;
use grove::text::printable;

pub use live::{Ledgers, live};
pub use table::{
    agent_file_problems, clean_report, demo_epilogue, gc_report, plan, report, runs_table,
};

/// What a command writes on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// One JSON document (`--json`); the text for people goes to stderr.
    Json,
    /// Text for people only.
    Human,
}

impl Output {
    /// [`Output::Json`] under `--json`.
    pub fn of_flag(json: bool) -> Self {
        if json { Self::Json } else { Self::Human }
    }
}

/// Prints `value` as one JSON document on stdout, every string in it escaped by
/// [`printable`] (a reason or summary may quote a model's terminal escapes, and a JSON
/// reader that prints a field would pass them on).
pub fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut value = serde_json::to_value(value)?;
    escape_strings(&mut value);
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

fn escape_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(text) => {
            if let std::borrow::Cow::Owned(escaped) = printable(text) {
                *text = escaped;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(escape_strings),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(escape_strings),
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// Says that the run is stopping after `signal` (`Ctrl-C`, `SIGTERM`, `SIGHUP`).
pub fn interrupted(signal: &str) {
    eprintln!(
        "\ngrove: interrupted ({signal}); stopping the subagents and checkpointing their work (Ctrl-C again to quit at once)"
    );
}

pub fn colour_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

pub fn paint(status: SubtaskOutcome) -> String {
    if !colour_enabled() {
        return status.to_string();
    }
    let code = match status {
        SubtaskOutcome::Merged => "32",
        SubtaskOutcome::Rejected | SubtaskOutcome::Failed => "31",
        SubtaskOutcome::Conflict => "33",
    };
    format!("\x1b[{code}m{status}\x1b[0m")
}
