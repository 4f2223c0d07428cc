//! Reading a worker CLI's output: one parser per format, fed line by line.
//!
//! This file owns the meaning of each CLI's machine-readable output — the final message,
//! the turns and the token usage it reports — and nothing else: it never runs a
//! process. It must never trust the output: garbage lines, cut lines and truncated
//! output are counted and skipped, never a panic, and a parser reports only what it read.

use std::sync::LazyLock;

use serde_json::Value;

use crate::agent::Ledger;

/// Gemini prints one JSON object at the end; beyond this it cannot be parsed.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;
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

/// Something the CLI reported while it ran, for the live view.
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
    /// Turns and tokens as the CLI reported them (zero where it reports none).
    pub ledger: Ledger,
    /// Whether any token usage was reported at all.
    pub usage_reported: bool,
    /// The CLI said it failed, in its own words.
    pub error: Option<String>,
    /// The CLI stopped at its turn limit (work may still be worth a review).
    pub turn_limit: bool,
    /// Whether the output's closing record (claude's `result`, codex's turn end,
    /// gemini's object) was read; false for truncated output and for plain text.
    pub complete: bool,
    /// Lines that were not in the format expected (garbage, or cut).
    pub unreadable_lines: u32,
}

/// Reads one CLI's output incrementally: feed it lines, then [`OutputParser::finish`].
#[derive(Debug)]
pub struct OutputParser {
    state: ParserState,
}

#[derive(Debug)]
enum ParserState {
    Claude(ClaudeParser),
    Codex(CodexParser),
    Gemini(GeminiParser),
    Aider(AiderParser),
    Plain(TailText),
}

impl OutputParser {
    /// A parser for `format`.
    pub fn new(format: OutputFormat) -> Self {
        let state = match format {
            OutputFormat::ClaudeStreamJson => ParserState::Claude(ClaudeParser::default()),
            OutputFormat::CodexJsonl => ParserState::Codex(CodexParser::default()),
            OutputFormat::GeminiJson => ParserState::Gemini(GeminiParser::default()),
            OutputFormat::AiderText => ParserState::Aider(AiderParser::default()),
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

    /// Counts a line that was too long to read.
    pub(super) fn cut_line(&mut self) {
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

/// Parses a whole output at once (the recorded samples of the tests, and files).
pub fn parse_output(format: OutputFormat, text: &str) -> CliReport {
    let mut parser = OutputParser::new(format);
    for line in text.lines() {
        parser.line(line);
    }
    parser.finish()
}

pub(super) fn non_empty(text: impl AsRef<str>) -> Option<String> {
    let text = text.as_ref().trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn as_u64(value: &Value) -> u64 {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .unwrap_or(0)
}

/// A JSON object line, or `None` for anything else (blank lines are not counted).
/// The JSON object of one JSON-lines line; `None` for a blank line, and for a line that
/// is not an object, which `report` counts as unreadable.
fn jsonl_event(line: &str, report: &mut CliReport) -> Option<serde_json::Map<String, Value>> {
    if line.trim().is_empty() {
        return None;
    }
    let event = json_object(line);
    if event.is_none() {
        report.unreadable_lines += 1;
    }
    event
}

fn json_object(line: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str::<Value>(line.trim()) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

/// Claude Code's `stream-json`: one JSON object per line — a `system`/`init` event, then
/// `assistant` and `user` messages (each content block of an assistant message on its
/// own line, sharing the message id and carrying the message's usage so far), and a
/// final `result` event with `subtype` (`success`, `error_max_turns`,
/// `error_during_execution`), `is_error`, `result` (the final text), `num_turns` and the
/// session's `usage` (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens`). Based on the Claude Code headless docs and the Agent
/// SDK message types.
#[derive(Debug, Default)]
struct ClaudeParser {
    report: CliReport,
    /// Usage of each assistant message, by id, in order.
    messages: Vec<(String, Ledger)>,
    last_text: Option<(String, String)>,
}

fn claude_usage(usage: &Value) -> Ledger {
    Ledger {
        steps: 0,
        input_tokens: as_u64(&usage["input_tokens"]),
        output_tokens: as_u64(&usage["output_tokens"]),
        cache_read_tokens: as_u64(&usage["cache_read_input_tokens"]),
        cache_write_tokens: as_u64(&usage["cache_creation_input_tokens"]),
    }
}

impl ClaudeParser {
    fn sum(&self) -> Ledger {
        let mut total = Ledger::default();
        for (_, usage) in &self.messages {
            total.add(usage);
        }
        total.steps = self.messages.len() as u32;
        total
    }

    fn line(&mut self, line: &str) -> Vec<Progress> {
        let Some(event) = jsonl_event(line, &mut self.report) else {
            return Vec::new();
        };
        let mut progress = Vec::new();
        match event.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let message = &event["message"];
                let id = message["id"].as_str().unwrap_or_default().to_owned();
                let usage = claude_usage(&message["usage"]);
                let is_new = self.messages.last().is_none_or(|(last, _)| *last != id);
                if is_new {
                    self.messages.push((id.clone(), usage));
                    let turn = self.messages.len() as u32;
                    progress.push(Progress::Turn {
                        turn,
                        ledger: self.sum(),
                    });
                } else if let Some((_, last)) = self.messages.last_mut() {
                    // Later lines of the same message carry its usage so far.
                    *last = usage;
                }
                if !message["usage"].is_null() {
                    self.report.usage_reported = true;
                }
                for block in message["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("text") => {
                            let text = block["text"].as_str().unwrap_or_default();
                            match &mut self.last_text {
                                Some((last_id, joined)) if *last_id == id => {
                                    joined.push_str(text);
                                }
                                _ => self.last_text = Some((id.clone(), text.to_owned())),
                            }
                        }
                        Some("tool_use") => progress.push(Progress::Tool {
                            name: block["name"].as_str().unwrap_or("tool").to_owned(),
                            is_error: false,
                        }),
                        _ => {}
                    }
                }
            }
            Some("result") => {
                self.report.complete = true;
                if let Some(text) = event.get("result").and_then(Value::as_str) {
                    self.report.final_message = non_empty(text);
                }
                if let Some(usage) = event.get("usage").filter(|usage| usage.is_object()) {
                    let mut ledger = claude_usage(usage);
                    ledger.steps = event
                        .get("num_turns")
                        .map(as_u64)
                        .and_then(|turns| u32::try_from(turns).ok())
                        .unwrap_or(self.messages.len() as u32);
                    self.report.ledger = ledger;
                    self.report.usage_reported = true;
                }
                let subtype = event.get("subtype").and_then(Value::as_str).unwrap_or("");
                let is_error = event
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(subtype.starts_with("error"));
                if subtype == "error_max_turns" {
                    self.report.turn_limit = true;
                } else if is_error {
                    let errors: Vec<&str> = event
                        .get("errors")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let detail = if !errors.is_empty() {
                        errors.join("; ")
                    } else {
                        self.report
                            .final_message
                            .clone()
                            .unwrap_or_else(|| subtype.to_owned())
                    };
                    self.report.error = Some(if detail.is_empty() {
                        "claude reported an error".to_owned()
                    } else {
                        detail
                    });
                }
            }
            // `system` (init, retries), `user` (tool results) and anything newer.
            _ => {}
        }
        progress
    }

    fn finish(mut self) -> CliReport {
        if !self.report.complete {
            // Truncated: what the assistant messages said is all there is.
            self.report.ledger = self.sum();
        }
        if self.report.final_message.is_none() {
            self.report.final_message = self.last_text.and_then(|(_, text)| non_empty(text));
        }
        self.report
    }
}

/// Codex's `exec --json`: one JSON object per line, tagged by `type` — `thread.started`,
/// `turn.started`, `item.started`/`item.updated`/`item.completed` (an `item` whose `type`
/// is `agent_message` with `text`, `reasoning`, `command_execution` with `exit_code` and
/// `status`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`, `error`),
/// `turn.completed` with `usage` (`input_tokens`, `cached_input_tokens`,
/// `output_tokens`), `turn.failed` with `error.message`, and `error` (fatal) with
/// `message`. OpenAI's `input_tokens` include the cached ones; the ledger counts them
/// apart, as grove's OpenAI client does. Based on `codex-rs/exec/src/exec_events.rs`.
#[derive(Debug, Default)]
struct CodexParser {
    report: CliReport,
}

impl CodexParser {
    fn line(&mut self, line: &str) -> Vec<Progress> {
        let Some(event) = jsonl_event(line, &mut self.report) else {
            return Vec::new();
        };
        let mut progress = Vec::new();
        match event.get("type").and_then(Value::as_str) {
            Some("item.completed") => {
                let item = &event["item"];
                let failed = item["status"].as_str() == Some("failed");
                match item["type"].as_str() {
                    Some("agent_message") => {
                        if let Some(text) = item["text"].as_str().and_then(non_empty) {
                            self.report.final_message = Some(text);
                        }
                    }
                    Some("command_execution") => progress.push(Progress::Tool {
                        name: "shell".into(),
                        is_error: failed || item["exit_code"].as_i64().is_some_and(|c| c != 0),
                    }),
                    Some("file_change") => progress.push(Progress::Tool {
                        name: "apply_patch".into(),
                        is_error: failed,
                    }),
                    Some("mcp_tool_call") => progress.push(Progress::Tool {
                        name: format!(
                            "{}.{}",
                            item["server"].as_str().unwrap_or("mcp"),
                            item["tool"].as_str().unwrap_or("tool")
                        ),
                        is_error: failed,
                    }),
                    Some("web_search") => progress.push(Progress::Tool {
                        name: "web_search".into(),
                        is_error: false,
                    }),
                    _ => {}
                }
            }
            Some("turn.completed") => {
                let usage = &event["usage"];
                let input = as_u64(&usage["input_tokens"]);
                let cached = as_u64(&usage["cached_input_tokens"]);
                let ledger = &mut self.report.ledger;
                ledger.steps += 1;
                ledger.input_tokens += input.saturating_sub(cached);
                ledger.cache_read_tokens += cached;
                ledger.output_tokens += as_u64(&usage["output_tokens"]);
                self.report.usage_reported |= usage.is_object();
                self.report.complete = true;
                progress.push(Progress::Turn {
                    turn: ledger.steps,
                    ledger: *ledger,
                });
            }
            Some("turn.failed") => {
                self.report.ledger.steps += 1;
                self.report.complete = true;
                self.report.error = Some(
                    event["error"]["message"]
                        .as_str()
                        .unwrap_or("the turn failed")
                        .to_owned(),
                );
            }
            Some("error") => {
                self.report.error = Some(
                    event["message"]
                        .as_str()
                        .unwrap_or("codex reported an error")
                        .to_owned(),
                );
            }
            _ => {}
        }
        progress
    }

    fn finish(self) -> CliReport {
        self.report
    }
}

/// Gemini CLI's `--output-format json`: one (pretty-printed) object at the end —
/// `response` (the final text), `stats.models.<model>` with `api.totalRequests` and
/// `tokens` (`prompt` including `cached`, `input` = prompt minus cached in newer
/// releases, `candidates`, `thoughts`, `tool`, `cached`, `total`), and `error`
/// (`type`, `message`, `code`) when it failed. Thought tokens are billed as output and
/// counted there; tool-use prompt tokens count as input. Text before the object (a
/// "Loaded cached credentials." line) is skipped. Based on
/// `packages/core/src/output/types.ts` and `json-formatter.test.ts`.
#[derive(Debug, Default)]
struct GeminiParser {
    text: String,
    overflowed: bool,
}

impl GeminiParser {
    fn line(&mut self, line: &str) {
        if self.text.len() + line.len() + 1 > MAX_DOCUMENT_BYTES {
            self.overflowed = true;
            return;
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// The output's JSON object: the whole text, else the text from the first line that
    /// opens one that parses to the end.
    fn document(&self) -> Option<(serde_json::Map<String, Value>, u32)> {
        if let Some(object) = json_object(&self.text) {
            return Some((object, 0));
        }
        let mut offset = 0;
        for line in self.text.split_inclusive('\n') {
            if line.starts_with('{')
                && let Some(object) = json_object(&self.text[offset..])
            {
                let skipped = self.text[..offset]
                    .lines()
                    .filter(|line| !line.trim().is_empty())
                    .count();
                return Some((object, skipped as u32));
            }
            offset += line.len();
        }
        None
    }

    fn finish(self) -> CliReport {
        let mut report = CliReport::default();
        let Some((document, skipped)) = self.document() else {
            report.unreadable_lines = self
                .text
                .lines()
                .filter(|line| !line.trim().is_empty())
                .count() as u32
                + u32::from(self.overflowed);
            return report;
        };
        report.complete = true;
        report.unreadable_lines = skipped;
        report.final_message = document
            .get("response")
            .and_then(Value::as_str)
            .and_then(non_empty);
        if let Some(models) = document
            .get("stats")
            .and_then(|stats| stats.get("models"))
            .and_then(Value::as_object)
        {
            let ledger = &mut report.ledger;
            for model in models.values() {
                let tokens = &model["tokens"];
                let cached = as_u64(&tokens["cached"]);
                let input = if tokens["input"].is_number() {
                    as_u64(&tokens["input"])
                } else {
                    as_u64(&tokens["prompt"]).saturating_sub(cached)
                };
                ledger.steps +=
                    u32::try_from(as_u64(&model["api"]["totalRequests"])).unwrap_or(u32::MAX);
                ledger.input_tokens += input + as_u64(&tokens["tool"]);
                ledger.cache_read_tokens += cached;
                ledger.output_tokens += as_u64(&tokens["candidates"]) + as_u64(&tokens["thoughts"]);
                report.usage_reported |= tokens.is_object();
            }
        }
        if let Some(error) = document.get("error").filter(|error| !error.is_null()) {
            let message = error["message"]
                .as_str()
                .unwrap_or("gemini reported an error");
            report.error = Some(match error["type"].as_str() {
                Some(kind) if !kind.is_empty() => format!("{kind}: {message}"),
                _ => message.to_owned(),
            });
        }
        report
    }
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

/// aider's token report, printed after every model call: `Tokens: 2.3k sent, 1.1k cache
/// write, 512 cache hit, 156 received.` (older releases: `Tokens: 1,234 sent, 56
/// received.`), followed on the same line by `Cost: …`. Figures above 1000 are rounded
/// by aider (`2.3k`, `12k`); grove records them as read (2300, 12000).
static AIDER_TOKENS: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r"(?:^|\s)Tokens: (?P<parts>.*? received)\.").ok());
static AIDER_PART: LazyLock<Option<regex::Regex>> = LazyLock::new(|| {
    regex::Regex::new(
        r"(?P<n>[0-9][0-9,]*(?:\.[0-9]+)?)(?P<unit>[kKmM]?) (?P<what>sent|received|cache write|cache hit)",
    )
    .ok()
});

/// Lines of aider's own chatter that are not part of the model's answer.
const AIDER_NOISE: &[&str] = &[
    "Aider v",
    "Main model:",
    "Weak model:",
    "Editor model:",
    "Git repo:",
    "Repo-map:",
    "Use /help",
    "Cost:",
    "https://aider.chat",
];

/// aider prints no machine-readable output: its answers as plain text (with
/// `--no-pretty --no-stream`) and a token report after each model call. Each report is
/// one step; the final message is the text between the last two reports, without
/// aider's own banner lines. aider reports no turn limit and no structured error: a
/// failure shows as its exit status and stderr. Based on `aider/coders/base_coder.py`.
#[derive(Debug, Default)]
struct AiderParser {
    ledger: Ledger,
    usage_reported: bool,
    block: Vec<String>,
    block_bytes: usize,
    last_reply: Option<String>,
    unreadable_lines: u32,
}

/// The tokens one aider report line states, if it is one.
fn aider_tokens(line: &str) -> Option<Ledger> {
    let tokens = AIDER_TOKENS.as_ref()?.captures(line)?;
    let parts = tokens.name("parts")?.as_str();
    let mut ledger = Ledger {
        steps: 1,
        ..Ledger::default()
    };
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
    fn line(&mut self, line: &str) -> Vec<Progress> {
        if let Some(tokens) = aider_tokens(line) {
            self.ledger.add(&tokens);
            self.usage_reported = true;
            let reply = self.block.join("\n");
            if let Some(reply) = non_empty(reply) {
                self.last_reply = Some(reply);
            }
            self.block.clear();
            self.block_bytes = 0;
            return vec![Progress::Turn {
                turn: self.ledger.steps,
                ledger: self.ledger,
            }];
        }
        let trimmed = line.trim_end();
        if AIDER_NOISE
            .iter()
            .any(|noise| trimmed.trim_start().starts_with(noise))
        {
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

    fn finish(self) -> CliReport {
        // Text after the last report is aider's own epilogue (or an answer whose report
        // never came, when it was cut short): used only when there is nothing else.
        let final_message = self.last_reply.or_else(|| non_empty(self.block.join("\n")));
        CliReport {
            final_message,
            ledger: self.ledger,
            usage_reported: self.usage_reported,
            error: None,
            turn_limit: false,
            complete: false,
            unreadable_lines: self.unreadable_lines,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// A recorded `claude -p … --output-format stream-json --verbose` session (shape of
    /// Claude Code 2.x; ids shortened): init, a text + tool_use message split over two
    /// lines, a tool result, a final text message, and the result.
    const CLAUDE_SAMPLE: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":["Bash","Edit","Read"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"acceptEdits","apiKeySource":"ANTHROPIC_API_KEY","uuid":"u0"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll update the greeting."}],"stop_reason":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":2100,"cache_read_input_tokens":11000,"output_tokens":2}},"parent_tool_use_id":null,"session_id":"s1","uuid":"u1"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01","name":"Edit","input":{"file_path":"/w/src/a.txt","old_string":"alpha","new_string":"ALPHA"}}],"stop_reason":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":2100,"cache_read_input_tokens":11000,"output_tokens":120}},"parent_tool_use_id":null,"session_id":"s1","uuid":"u2"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"The file /w/src/a.txt has been updated."}]},"parent_tool_use_id":null,"session_id":"s1","uuid":"u3"}
{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Changed alpha to ALPHA in src/a.txt."}],"stop_reason":"end_turn","usage":{"input_tokens":6,"cache_creation_input_tokens":150,"cache_read_input_tokens":13100,"output_tokens":15}},"parent_tool_use_id":null,"session_id":"s1","uuid":"u4"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":8123,"duration_api_ms":7900,"num_turns":3,"result":"Changed alpha to ALPHA in src/a.txt.","session_id":"s1","total_cost_usd":0.0213,"usage":{"input_tokens":10,"cache_creation_input_tokens":2250,"cache_read_input_tokens":24100,"output_tokens":135,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[],"uuid":"u5"}
"#;

    #[test]
    fn claude_stream_json_gives_the_result_text_and_the_session_usage() {
        assert_eq!(
            parse_output(OutputFormat::ClaudeStreamJson, CLAUDE_SAMPLE),
            CliReport {
                final_message: Some("Changed alpha to ALPHA in src/a.txt.".into()),
                ledger: Ledger {
                    steps: 3,
                    input_tokens: 10,
                    output_tokens: 135,
                    cache_read_tokens: 24100,
                    cache_write_tokens: 2250,
                },
                usage_reported: true,
                error: None,
                turn_limit: false,
                complete: true,
                unreadable_lines: 0,
            }
        );
    }

    #[test]
    fn claude_progress_counts_each_message_once_and_its_tools() {
        let mut parser = OutputParser::new(OutputFormat::ClaudeStreamJson);
        let events: Vec<Progress> = CLAUDE_SAMPLE
            .lines()
            .flat_map(|line| parser.line(line))
            .collect();
        let first = Ledger {
            steps: 1,
            input_tokens: 4,
            output_tokens: 2,
            cache_read_tokens: 11000,
            cache_write_tokens: 2100,
        };
        assert_eq!(
            events,
            vec![
                Progress::Turn {
                    turn: 1,
                    ledger: first
                },
                Progress::Tool {
                    name: "Edit".into(),
                    is_error: false
                },
                Progress::Turn {
                    turn: 2,
                    ledger: Ledger {
                        steps: 2,
                        input_tokens: 10,
                        output_tokens: 135,
                        cache_read_tokens: 24100,
                        cache_write_tokens: 2250,
                    }
                },
            ],
            "a message split over two lines is one turn, counted with its latest usage"
        );
    }

    #[test]
    fn claude_truncated_output_falls_back_to_the_messages_and_skips_garbage() {
        let cut: String = CLAUDE_SAMPLE.lines().take(5).collect::<Vec<_>>().join("\n");
        let text = format!("npm WARN something odd\n{cut}\n{{\"type\":\"result\",\"subt");
        assert_eq!(
            parse_output(OutputFormat::ClaudeStreamJson, &text),
            CliReport {
                final_message: Some("Changed alpha to ALPHA in src/a.txt.".into()),
                ledger: Ledger {
                    steps: 2,
                    input_tokens: 10,
                    output_tokens: 135,
                    cache_read_tokens: 24100,
                    cache_write_tokens: 2250,
                },
                usage_reported: true,
                error: None,
                turn_limit: false,
                complete: false,
                unreadable_lines: 2,
            }
        );
    }

    #[test]
    fn claude_error_results_say_why_and_max_turns_is_a_turn_limit() {
        let failed = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":2,"session_id":"s","usage":{"input_tokens":5,"output_tokens":1},"errors":["API Error: 401 invalid x-api-key"]}"#;
        let report = parse_output(OutputFormat::ClaudeStreamJson, failed);
        assert_eq!(
            (report.error.as_deref(), report.turn_limit),
            (Some("API Error: 401 invalid x-api-key"), false)
        );
        let capped = r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":4,"session_id":"s","usage":{"input_tokens":5,"output_tokens":1}}"#;
        let report = parse_output(OutputFormat::ClaudeStreamJson, capped);
        assert_eq!(
            (report.error, report.turn_limit, report.ledger.steps),
            (None, true, 4),
            "a turn cap is not an error: the work so far is reviewed"
        );
    }

    /// A recorded `codex exec --json` run (shape of codex-rs exec_events.rs).
    const CODEX_SAMPLE: &str = r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Looking at src/a.txt**"}}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cat src/a.txt'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cat src/a.txt'","aggregated_output":"alpha\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"src/a.txt","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Updated src/a.txt to ALPHA."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
"#;

    #[test]
    fn codex_jsonl_gives_the_last_agent_message_and_the_turn_usage() {
        assert_eq!(
            parse_output(OutputFormat::CodexJsonl, CODEX_SAMPLE),
            CliReport {
                final_message: Some("Updated src/a.txt to ALPHA.".into()),
                ledger: Ledger {
                    steps: 1,
                    input_tokens: 315,
                    output_tokens: 122,
                    cache_read_tokens: 24448,
                    cache_write_tokens: 0,
                },
                usage_reported: true,
                error: None,
                turn_limit: false,
                complete: true,
                unreadable_lines: 0,
            },
            "cached input tokens are counted apart from the uncached ones"
        );
    }

    #[test]
    fn codex_failures_are_reported_in_its_words() {
        let text = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n\
                    {\"type\":\"turn.started\"}\n\
                    not json at all\n\
                    {\"type\":\"error\",\"message\":\"stream disconnected before completion\"}\n\
                    {\"type\":\"turn.failed\",\"error\":{\"message\":\"exceeded retry limit, last status: 429\"}}\n";
        let report = parse_output(OutputFormat::CodexJsonl, text);
        assert_eq!(
            (
                report.error.as_deref(),
                report.unreadable_lines,
                report.complete
            ),
            (Some("exceeded retry limit, last status: 429"), 1, true)
        );
    }

    /// A recorded `gemini -p … --output-format json` answer (shape of
    /// gemini-cli's JsonFormatter), after a credentials line on stdout.
    const GEMINI_SAMPLE: &str = r#"Loaded cached credentials.
{
  "session_id": "5f9d",
  "response": "I changed src/a.txt to read ALPHA.",
  "stats": {
    "models": {
      "gemini-2.5-pro": {
        "api": { "totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 5672 },
        "tokens": { "input": 13745, "prompt": 24401, "candidates": 215, "total": 24719, "cached": 10656, "thoughts": 103, "tool": 0 }
      },
      "gemini-2.5-flash": {
        "api": { "totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 591 },
        "tokens": { "prompt": 2080, "candidates": 71, "total": 2151, "cached": 0, "thoughts": 0, "tool": 0 }
      }
    },
    "tools": { "totalCalls": 1, "totalSuccess": 1, "totalFail": 0 },
    "files": { "totalLinesAdded": 1, "totalLinesRemoved": 1 }
  }
}
"#;

    #[test]
    fn gemini_json_sums_every_models_tokens_and_requests() {
        assert_eq!(
            parse_output(OutputFormat::GeminiJson, GEMINI_SAMPLE),
            CliReport {
                final_message: Some("I changed src/a.txt to read ALPHA.".into()),
                ledger: Ledger {
                    steps: 3,
                    input_tokens: 13745 + 2080,
                    output_tokens: 215 + 103 + 71,
                    cache_read_tokens: 10656,
                    cache_write_tokens: 0,
                },
                usage_reported: true,
                error: None,
                turn_limit: false,
                complete: true,
                unreadable_lines: 1,
            }
        );
    }

    #[test]
    fn gemini_errors_and_garbage_are_reported() {
        let failed = r#"{"error":{"type":"ApiError","message":"Rate limit exceeded","code":429}}"#;
        assert_eq!(
            parse_output(OutputFormat::GeminiJson, failed)
                .error
                .as_deref(),
            Some("ApiError: Rate limit exceeded")
        );
        let garbage = parse_output(OutputFormat::GeminiJson, "oops\n{\"response\": \"cut");
        assert_eq!(
            (
                garbage.complete,
                garbage.final_message,
                garbage.unreadable_lines
            ),
            (false, None, 2)
        );
    }

    /// A recorded `aider --message … --no-pretty --no-stream` run.
    const AIDER_SAMPLE: &str = "Aider v0.86.1
Main model: anthropic/claude-sonnet-4-5 with diff edit format, infinite output
Weak model: anthropic/claude-3-5-haiku-20241022
Git repo: .git with 5 files
Repo-map: using 4096 tokens, auto refresh

src/a.txt
Tokens: 2.3k sent, 1.1k cache write, 45 received. Cost: $0.01 message, $0.01 session.

Added src/a.txt to the chat.

src/a.txt
<<<<<<< SEARCH
alpha
=======
ALPHA
>>>>>>> REPLACE

I changed alpha to ALPHA in src/a.txt.
Tokens: 3,104 sent, 2.1k cache hit, 85 received. Cost: $0.02 message, $0.03 session.
Applied edit to src/a.txt
";

    #[test]
    fn aider_text_sums_every_token_report_and_keeps_the_last_reply() {
        let report = parse_output(OutputFormat::AiderText, AIDER_SAMPLE);
        assert_eq!(
            report.ledger,
            Ledger {
                steps: 2,
                input_tokens: 2300 + 3104,
                output_tokens: 45 + 85,
                cache_read_tokens: 2100,
                cache_write_tokens: 1100,
            }
        );
        assert_eq!(
            report.final_message.as_deref(),
            Some(
                "Added src/a.txt to the chat.\n\nsrc/a.txt\n<<<<<<< SEARCH\nalpha\n=======\n\
                 ALPHA\n>>>>>>> REPLACE\n\nI changed alpha to ALPHA in src/a.txt."
            ),
            "the final message is the answer before the last token report, without banners"
        );
        assert!(report.usage_reported && report.error.is_none());
    }

    #[test]
    fn aider_token_lines_of_every_release_are_read() {
        assert_eq!(
            aider_tokens("Tokens: 12k sent, 1.5M received. Cost: $1.00 message"),
            Some(Ledger {
                steps: 1,
                input_tokens: 12_000,
                output_tokens: 1_500_000,
                ..Ledger::default()
            })
        );
        assert_eq!(aider_tokens("Tokens are great"), None);
    }

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
}
