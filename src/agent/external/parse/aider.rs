//! aider's plain-text output (`--no-pretty --no-stream`), checked against aider 0.86.2.
//!
//! aider prints no machine-readable output: its answers as plain text and, after each
//! model call, a token report — `Tokens: 2.3k sent, 1.1k cache write, 512 cache hit,
//! 156 received. Cost: …` — whose figures are the running total of the message being
//! worked on (reflections after a failed edit add to it), so the ledger is the last
//! report, plus the earlier ones whenever a report starts again from less. Its banner
//! (`Aider v…`, `Model:`/`Main model:`, `Git repo:`, …) is never part of an answer. An
//! API error is printed as `litellm.<Kind>Error: …` (aider still exits 0): the last one
//! with no model call answered after it is the worker's error.

use std::sync::LazyLock;

use super::{CliReport, Progress, TAIL_BYTES, non_empty};
use crate::agent::Ledger;

static AIDER_TOKENS: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"(?:^|\s)Tokens: (?P<parts>.*? received)\.").ok());
static AIDER_PART: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    regex::Regex::new(
        r"(?P<n>[0-9][0-9,]*(?:\.[0-9]+)?)(?P<unit>[kKmM]?) (?P<what>sent|received|cache write|cache hit)",
    )
    .ok()
});
/// `litellm.AuthenticationError: …`, `litellm.InternalServerError: …`.
static AIDER_ERROR: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"^litellm\.[A-Za-z]*Error\b").ok());

/// Lines of aider's own chatter that are not part of the model's answer.
const AIDER_NOISE: &[&str] = &[
    "Aider v",
    "Model:",
    "Main model:",
    "Weak model:",
    "Editor model:",
    "Git repo:",
    "Repo-map:",
    "Use /help",
    "Cost:",
    "https://aider.chat",
    "Update git name with:",
    "Update git email with:",
    "Detected dumb terminal",
    "Warning: Input is not a terminal",
    "HTTPSConnectionPool(",
    "Retrying in ",
];

#[derive(Debug, Default)]
pub(super) struct AiderParser {
    /// Totals of the reports before the last restart of the running total.
    base: Ledger,
    /// The latest running total.
    current: Ledger,
    usage_reported: bool,
    block: Vec<String>,
    block_bytes: usize,
    last_reply: Option<String>,
    /// The API error being printed (its lines until a blank one), and the last one.
    error_open: bool,
    error: Option<String>,
    pub(super) unreadable_lines: u32,
}

/// The tokens one aider report line states, if it is one.
fn aider_tokens(line: &str) -> Option<Ledger> {
    let tokens = AIDER_TOKENS.as_ref()?.captures(line)?;
    let parts = tokens.name("parts")?.as_str();
    let mut ledger = Ledger::default();
    for part in AIDER_PART.as_ref()?.captures_iter(parts) {
        let number: f64 = part["n"].replace(',', "").parse().ok()?;
        let scale = match &part["unit"] {
            "k" | "K" => 1_000.0,
            "m" | "M" => 1_000_000.0,
            _ => 1.0,
        };
        let count = (number * scale).round() as u64;
        match &part["what"] {
            "sent" => ledger.input_tokens += count,
            "received" => ledger.output_tokens += count,
            "cache write" => ledger.cache_write_tokens += count,
            "cache hit" => ledger.cache_read_tokens += count,
            _ => {}
        }
    }
    Some(ledger)
}

impl AiderParser {
    fn total(&self) -> Ledger {
        let mut total = self.base;
        total.add(&self.current);
        total
    }

    pub(super) fn line(&mut self, line: &str) -> Vec<Progress> {
        let trimmed = line.trim_end();
        if let Some(tokens) = aider_tokens(trimmed) {
            return self.report(tokens);
        }
        if AIDER_ERROR.as_ref().is_some_and(|re| re.is_match(trimmed)) {
            self.error = Some(trimmed.to_owned());
            self.error_open = true;
            return Vec::new();
        }
        if self.error_open {
            match (&mut self.error, trimmed.is_empty()) {
                (Some(error), false) => {
                    error.push(' ');
                    error.push_str(trimmed.trim());
                    return Vec::new();
                }
                _ => self.error_open = false,
            }
        }
        let chatter = trimmed.starts_with("Added ") && trimmed.ends_with(" to the chat.");
        if chatter
            || AIDER_NOISE
                .iter()
                .any(|noise| trimmed.trim_start().starts_with(noise))
        {
            return Vec::new();
        }
        // Runs of blank lines (where banner lines were) read as one.
        if trimmed.is_empty() && self.block.last().is_none_or(|last| last.is_empty()) {
            return Vec::new();
        }
        self.block_bytes += trimmed.len() + 1;
        self.block.push(trimmed.to_owned());
        while self.block_bytes > TAIL_BYTES && self.block.len() > 1 {
            let dropped = self.block.remove(0);
            self.block_bytes -= dropped.len() + 1;
        }
        Vec::new()
    }

    /// A token report: a model call answered, and the running total so far.
    fn report(&mut self, tokens: Ledger) -> Vec<Progress> {
        let mut steps = self.current.steps + 1;
        if tokens.input_tokens < self.current.input_tokens
            || tokens.output_tokens < self.current.output_tokens
        {
            // A new running total: the old one is spent.
            self.base.add(&self.current);
            steps = 1;
        }
        self.current = Ledger { steps, ..tokens };
        self.usage_reported = true;
        self.error = None;
        self.error_open = false;
        if let Some(reply) = non_empty(self.block.join("\n")) {
            self.last_reply = Some(reply);
        }
        self.block.clear();
        self.block_bytes = 0;
        let ledger = self.total();
        vec![Progress::Turn {
            turn: ledger.steps,
            ledger,
        }]
    }

    pub(super) fn finish(self) -> CliReport {
        // Text after the last report is aider's own epilogue (or an answer whose report
        // never came, when it was cut short): used only when there is nothing else.
        let ledger = self.total();
        let final_message = self.last_reply.or_else(|| non_empty(self.block.join("\n")));
        CliReport {
            final_message,
            ledger,
            usage_reported: self.usage_reported,
            error: self.error,
            denials: Vec::new(),
            turn_limit: false,
            complete: false,
            unreadable_lines: self.unreadable_lines,
            refused_for_good: None,
        }
    }
}

/// The model's last answer in aider's chat history file (`--chat-history-file`), where
/// aider marks its own output with `> ` and the user's messages with `#### `: the exact
/// reply, which stdout mixes with aider's questions and file names.
pub(crate) fn last_reply_in_history(history: &str) -> Option<String> {
    let mut last = None;
    let mut block: Vec<&str> = Vec::new();
    let mut in_reply = false;
    for line in history.lines() {
        let own = line.starts_with("> ") || line == ">" || line.starts_with("# aider chat started");
        if line.starts_with("#### ") {
            in_reply = true;
            block.clear();
        } else if own {
            if let Some(reply) = non_empty(block.join("\n")) {
                last = Some(reply);
            }
            block.clear();
        } else if in_reply {
            block.push(line);
        }
    }
    non_empty(block.join("\n")).or(last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::{OutputFormat, parse_output};
    use super::*;
    use pretty_assertions::assert_eq;

    /// Recorded from aider 0.86.2 against the fake server: one SEARCH/REPLACE answer
    /// (1000 prompt tokens, 50 completion tokens), after its banner.
    const EDIT: &str = include_str!("../../../../tests/fixtures/cli/aider-0.86.2-edit.txt");
    /// The same against a server that answers 401 (aider exits 0).
    const UNAUTHORIZED: &str = include_str!("../../../../tests/fixtures/cli/aider-0.86.2-401.txt");

    #[test]
    fn the_answer_is_the_summary_without_the_banner() {
        let report = parse_output(OutputFormat::AiderText, EDIT);
        assert_eq!(
            (report.final_message.as_deref(), report.ledger, report.error),
            (
                Some(
                    "I will shout.\n\na.txt\n```\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n\
                     >>>>>>> REPLACE\n```"
                ),
                Ledger {
                    steps: 1,
                    input_tokens: 1000,
                    output_tokens: 50,
                    ..Ledger::default()
                },
                None
            )
        );
    }

    #[test]
    fn token_reports_are_a_running_total_not_a_sum() {
        let text = "first answer\n\
            Tokens: 2.3k sent, 1.1k cache write, 45 received. Cost: $0.01 message, $0.01 session.\n\
            reflection answer\n\
            Tokens: 5,400 sent, 2.1k cache hit, 1.1k cache write, 130 received. Cost: $0.02 message, $0.03 session.\n\
            a new message\n\
            Tokens: 100 sent, 10 received. Cost: $0.00 message, $0.03 session.\n";
        assert_eq!(
            parse_output(OutputFormat::AiderText, text).ledger,
            Ledger {
                steps: 3,
                input_tokens: 5400 + 100,
                output_tokens: 130 + 10,
                cache_read_tokens: 2100,
                cache_write_tokens: 1100,
                cache_write_1h_tokens: 0,
            }
        );
    }

    #[test]
    fn an_api_error_is_reported_in_litellms_words_and_a_later_answer_clears_it() {
        let report = parse_output(OutputFormat::AiderText, UNAUTHORIZED);
        assert_eq!(
            report.error.as_deref(),
            Some(
                "litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect \
                 API key provided: sk-x. The API provider is not able to authenticate you. \
                 Check your API key."
            )
        );
        let recovered = "litellm.InternalServerError: InternalServerError: OpenAIException - boom\n\
            Retrying in 0.2 seconds...\n\
            Done.\n\
            Tokens: 10 sent, 2 received.\n";
        assert_eq!(parse_output(OutputFormat::AiderText, recovered).error, None);
    }

    #[test]
    fn the_history_file_holds_the_exact_reply() {
        let history = "# aider chat started at 2026-12-01 08:39:45\n\n> aider --message x\n\
            > Aider v0.86.2  \n\n#### make it shout  \n> src/a.txt  \n\
            > Add file to the chat? (Y)es/(N)o [Yes]: y  \n\nI will shout.\n\nsrc/a.txt\n\
            ```\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n>>>>>>> REPLACE\n```\n\n\
            > Tokens: 1.0k sent, 50 received.  \n> Applied edit to src/a.txt  \n";
        assert_eq!(
            last_reply_in_history(history).as_deref(),
            Some(
                "I will shout.\n\nsrc/a.txt\n```\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n\
                 >>>>>>> REPLACE\n```"
            )
        );
        assert_eq!(last_reply_in_history("> Aider v0.86.2\n"), None);
    }

    #[test]
    fn token_lines_of_every_release_are_read() {
        assert_eq!(
            aider_tokens("Tokens: 12k sent, 1.5M received. Cost: $1.00 message"),
            Some(Ledger {
                steps: 0,
                input_tokens: 12_000,
                output_tokens: 1_500_000,
                ..Ledger::default()
            })
        );
        assert_eq!(aider_tokens("Tokens are great"), None);
    }
}
