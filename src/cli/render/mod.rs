//! Rendering for people: the live view of a run, the final table, the review prompt.
//!
//! On a terminal the live view redraws one line per subagent; anywhere else it prints
//! plain lines, one per event that matters. `NO_COLOR` is respected. Everything the
//! binary prints for people goes through here; it must never decide an exit code.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod live;
pub mod review;
mod table;

pub use live::{Ledgers, live};
pub use table::{clean_report, demo_epilogue, gc_report, plan, report, runs_table};

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

pub fn colour_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
        && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

pub fn paint(status: &str) -> String {
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

pub fn first_line(text: &str, max: usize) -> String {
    grove::tools::truncate_chars(text.lines().next().unwrap_or_default().trim(), max)
}
