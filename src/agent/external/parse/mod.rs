//! Reading a worker CLI's output: one parser per format, fed line by line.
//!
//! This module owns the meaning of each CLI's machine-readable output — the final
//! message, the steps and the token usage it reports, the errors it states — and nothing
//! else: it never runs a process. Each CLI's events are typed serde structs (one file per
//! CLI) that ignore unknown fields and event types, so a newer release that adds some is
//! still read. It must never trust the output: garbage lines, cut lines and truncated
//! output are counted and skipped, never a panic, and a parser reports only what it read.
//!
//! **Steps** mean the same for every CLI: model responses in the worker's own
//! conversation, as far as the CLI tells them. Side requests a CLI makes for itself
//! (Claude Code's session title, Gemini CLI's model router) are not steps, but their
//! tokens are in the ledger, which is what the CLI spent.

use serde::{Deserialize, Deserializer};

use crate::agent::Ledger;

mod aider;

pub(crate) use aider::last_reply_in_history;
mod claude;
mod codex;
mod gemini;

/// How much of an unstructured output's end is kept for its final message.
const TAIL_BYTES: usize = 16 * 1024;

/// The machine-readable output format of a worker CLI, one parser each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// `claude -p --output-format stream-json`: JSON lines ending with a `result` event.
    ClaudeStreamJson,
    /// `codex exec --json`: JSON lines of thread, turn and item events.
    CodexJsonl,
    /// `gemini -p --output-format json`: one JSON object at the end.
    GeminiJson,
    /// aider: plain text with a `Tokens: … sent, … received.` line per model call.
    AiderText,
    /// A `cmd:` command: plain text, no usage.
    PlainText,
}

/// Something the CLI reported while it ran, for the live view and the budget check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A model turn completed; `ledger` is the total so far.
    Turn { turn: u32, ledger: Ledger },
    /// The CLI ran one of its tools.
    Tool { name: String, is_error: bool },
}

/// What a worker CLI's output says, as far as it could be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliReport {
    /// The CLI's last answer: what it says it did.
    pub final_message: Option<String>,
    /// Steps and tokens as the CLI reported them (zero where it reports none).
    pub ledger: Ledger,
    /// Whether any token usage was reported at all.
    pub usage_reported: bool,
    /// The CLI said it failed, in its own words.
    pub error: Option<String>,
    /// Tool calls the CLI's own permission rules refused (claude's
    /// `permission_denials`), each as `Tool path-or-command`.
    pub denials: Vec<String>,
    /// The CLI stopped at its turn limit (work may still be worth a review).
    pub turn_limit: bool,
    /// Whether the output's closing record (claude's `result`, codex's turn end,
    /// gemini's object) was read; false for truncated output and for plain text.
    pub complete: bool,
    /// Lines that were not in the format expected (garbage, or cut).
    pub unreadable_lines: u32,
    /// The CLI is retrying a request the API refused for good (claude's `api_retry`
    /// of a 401 or 403, again after a retry): what the API answered. grove stops it
    /// rather than wait out its retries (ten, over minutes).
    pub refused_for_good: Option<String>,
}

/// Reads one CLI's output incrementally: feed it lines, then [`OutputParser::finish`].
#[derive(Debug)]
pub struct OutputParser {
    state: ParserState,
}

#[derive(Debug)]
enum ParserState {
    Claude(claude::ClaudeParser),
    Codex(codex::CodexParser),
    Gemini(gemini::GeminiParser),
    Aider(aider::AiderParser),
    Plain(TailText),
}

impl OutputParser {
    /// A parser for `format`.
    pub fn new(format: OutputFormat) -> Self {
        let state = match format {
            OutputFormat::ClaudeStreamJson => ParserState::Claude(Default::default()),
            OutputFormat::CodexJsonl => ParserState::Codex(Default::default()),
            OutputFormat::GeminiJson => ParserState::Gemini(Default::default()),
            OutputFormat::AiderText => ParserState::Aider(Default::default()),
            OutputFormat::PlainText => ParserState::Plain(TailText::default()),
        };
        Self { state }
    }

    /// Reads one output line (without its line ending); returns what it reports.
    pub fn line(&mut self, line: &str) -> Vec<Progress> {
        match &mut self.state {
            ParserState::Claude(parser) => parser.line(line),
            ParserState::Codex(parser) => parser.line(line),
            ParserState::Gemini(parser) => {
                parser.line(line);
                Vec::new()
            }
            ParserState::Aider(parser) => parser.line(line),
            ParserState::Plain(tail) => {
                tail.push_line(line);
                Vec::new()
            }
        }
    }

    /// What the API answered, once the CLI retries a request it refused for good.
    pub fn refused_for_good(&self) -> Option<&str> {
        match &self.state {
            ParserState::Claude(parser) => parser.report.refused_for_good.as_deref(),
            _ => None,
        }
    }

    /// Counts a line that was too long to read.
    pub(crate) fn cut_line(&mut self) {
        match &mut self.state {
            ParserState::Claude(parser) => parser.report.unreadable_lines += 1,
            ParserState::Codex(parser) => parser.report.unreadable_lines += 1,
            ParserState::Gemini(parser) => parser.overflowed = true,
            ParserState::Aider(parser) => parser.unreadable_lines += 1,
            ParserState::Plain(_) => {}
        }
    }

    /// Everything the output said.
    pub fn finish(self) -> CliReport {
        match self.state {
            ParserState::Claude(parser) => parser.finish(),
            ParserState::Codex(parser) => parser.finish(),
            ParserState::Gemini(parser) => parser.finish(),
            ParserState::Aider(parser) => parser.finish(),
            ParserState::Plain(tail) => CliReport {
                final_message: non_empty(tail.text()),
                ..CliReport::default()
            },
        }
    }
}

/// Parses a whole output at once (recorded samples, and files).
pub fn parse_output(format: OutputFormat, text: &str) -> CliReport {
    let mut parser = OutputParser::new(format);
    for line in text.lines() {
        parser.line(line);
    }
    parser.finish()
}

/// `text` trimmed, or `None` when nothing is left.
pub(crate) fn non_empty(text: impl AsRef<str>) -> Option<String> {
    let text = text.as_ref().trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A token count as any CLI writes it: an integer, a float, or absent/null (0).
fn count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = Option::<serde_json::Number>::deserialize(deserializer)?;
    Ok(value
        .and_then(|n| {
            n.as_u64()
                .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        })
        .unwrap_or(0))
}

/// One JSON-lines line as `T`: `None` for a blank line, and for a line that is not `T`,
/// which `unreadable` counts.
fn jsonl_event<T: serde::de::DeserializeOwned>(line: &str, unreadable: &mut u32) -> Option<T> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let event = serde_json::from_str(line).ok();
    if event.is_none() {
        *unreadable += 1;
    }
    event
}

/// The last bytes of a plain-text output, kept line by line.
#[derive(Debug, Default)]
struct TailText {
    text: String,
}

impl TailText {
    fn push_line(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        if self.text.len() > 2 * TAIL_BYTES {
            let mut cut = self.text.len() - TAIL_BYTES;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
        }
    }

    fn text(&self) -> &str {
        let mut start = self.text.len().saturating_sub(TAIL_BYTES);
        while !self.text.is_char_boundary(start) {
            start += 1;
        }
        &self.text[start..]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn plain_text_keeps_the_tail_as_the_final_message() {
        let long: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let report = parse_output(OutputFormat::PlainText, &long);
        let message = report.final_message.unwrap();
        assert!(
            message.ends_with("line 4999") && message.len() <= TAIL_BYTES,
            "only the tail is kept: {} bytes",
            message.len()
        );
        assert_eq!(
            report.ledger,
            Ledger::default(),
            "a command reports no usage"
        );
    }

    #[test]
    fn counts_accept_integers_floats_and_nulls() {
        #[derive(Deserialize)]
        struct C {
            #[serde(default, deserialize_with = "count")]
            n: u64,
        }
        let read = |text: &str| serde_json::from_str::<C>(text).map(|c| c.n).ok();
        assert_eq!(
            [
                read(r#"{"n":7}"#),
                read(r#"{"n":7.9}"#),
                read(r#"{"n":null}"#),
                read("{}")
            ],
            [Some(7), Some(7), Some(0), Some(0)]
        );
    }
}
