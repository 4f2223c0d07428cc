//! Other agent CLIs as workers: Claude Code, Codex, Gemini CLI, aider, or any command.
//!
//! This file owns how grove runs another agent CLI in a worker's worktree: the exact
//! non-interactive argv of each CLI, the environment it gets (grove's scrubbed one plus
//! that CLI's own credentials, and nothing else), the wall-clock limit, and the parsing of
//! its machine-readable output into a final message and a token ledger. The process runs
//! through [`LocalExecutor`], so it lives in its own process group that is killed on
//! timeout, cancellation or drop.
//!
//! It must never let the CLI commit or touch git history where a flag prevents it (grove
//! commits the worktree afterwards, and the isolated reviewer judges the diff), never
//! hand one CLI's credentials to another, and never trust the CLI's output: every parser
//! takes whatever bytes come and reports what it could read.
//!
//! Each CLI's flags and output schema were checked against its public sources and docs
//! (November 2026); the doc comments of [`WorkerBackend::argv`] and of each parser say
//! what they are based on.

use std::ffi::OsString;
use std::fmt;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::Ledger;
use crate::tools::exec::{
    CommandExecutor as _, ExecError, ExecOutcome, ExecRequest, LocalExecutor, OutputCap,
};
use crate::tools::truncate_chars;

/// The default wall-clock limit of one external worker run.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60 * 60;

/// The environment variable that carries the brief to every external worker (`cmd:`
/// commands also get it on stdin).
pub const BRIEF_VAR: &str = "GROVE_BRIEF";

/// How often the CLI's output file is read while it runs, for the live view.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Output lines longer than this are cut (and counted as unreadable): a runaway line costs
/// the cap, not the memory.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// Gemini prints one JSON object at the end; beyond this it cannot be parsed.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;
/// How much of an unstructured output's end is kept for its final message.
const TAIL_BYTES: usize = 16 * 1024;
/// How much of the CLI's stderr is read to explain a failure.
const STDERR_TAIL_BYTES: u64 = 4 * 1024;
/// How much of a failure's explanation goes into the subtask's reason.
const REASON_CHARS: usize = 600;

/// Exit status of `gemini` when it stopped at its session turn limit.
const GEMINI_TURN_LIMIT_EXIT: i32 = 53;
/// Exit status of a shell whose command was not found.
const NOT_FOUND_EXIT: i32 = 127;

/// Which agent does a worker's job: grove's own loop, or another CLI in the worktree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum WorkerBackend {
    /// grove's own agent loop with its confined tools.
    #[default]
    Builtin,
    /// Claude Code (`claude -p`).
    Claude,
    /// OpenAI Codex CLI (`codex exec`).
    Codex,
    /// Gemini CLI (`gemini -p`).
    Gemini,
    /// aider (`aider --message`).
    Aider,
    /// Any command line, run by the shell with the brief in `GROVE_BRIEF` and on stdin.
    Command(String),
}

/// Why a `--worker-backend` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendParseError {
    /// Not retried: the user must name a backend.
    #[error(
        "unknown worker backend `{0}`; expected builtin, claude, codex, gemini, aider or \
         cmd:\"COMMAND\""
    )]
    Unknown(String),
    /// Not retried: `cmd:` needs the command line to run.
    #[error("`cmd:` needs a command line after it, e.g. cmd:\"./scripts/my-agent.sh\"")]
    EmptyCommand,
}

impl FromStr for WorkerBackend {
    type Err = BackendParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let trimmed = text.trim();
        if let Some(command) = trimmed.strip_prefix("cmd:") {
            let command = command.trim();
            return if command.is_empty() {
                Err(BackendParseError::EmptyCommand)
            } else {
                Ok(Self::Command(command.to_owned()))
            };
        }
        match trimmed.to_ascii_lowercase().as_str() {
            "builtin" | "grove" => Ok(Self::Builtin),
            "claude" | "claude-code" => Ok(Self::Claude),
            "codex" => Ok(Self::Codex),
            "gemini" => Ok(Self::Gemini),
            "aider" => Ok(Self::Aider),
            _ => Err(BackendParseError::Unknown(trimmed.to_owned())),
        }
    }
}

impl TryFrom<String> for WorkerBackend {
    type Error = BackendParseError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<WorkerBackend> for String {
    fn from(backend: WorkerBackend) -> Self {
        backend.to_string()
    }
}

impl fmt::Display for WorkerBackend {
    /// The form `--worker-backend` takes: `claude`, …, `cmd:COMMAND`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Command(command) => write!(f, "cmd:{command}"),
            other => f.write_str(other.name()),
        }
    }
}

/// One argument of a CLI's argv as written in the tables below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    Literal(&'static str),
    Var(&'static str),
}

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

/// Variables passed to the CLI programs (never to `cmd:` commands) besides grove's
/// scrubbed allow-list: where the CLIs keep their config, and how they reach the network.
const COMMON_CLI_VARS: &[&str] = &[
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

impl WorkerBackend {
    /// True for grove's own worker loop.
    pub fn is_builtin(&self) -> bool {
        matches!(self, Self::Builtin)
    }

    /// A short name for messages, file names and the live view.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Builtin => "builtin",
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Aider => "aider",
            Self::Command(_) => "cmd",
        }
    }

    /// The program grove starts, found on `PATH` unless `GROVE_<NAME>_BIN` names it.
    fn default_program(&self) -> Option<&'static str> {
        match self {
            Self::Claude => Some("claude"),
            Self::Codex => Some("codex"),
            Self::Gemini => Some("gemini"),
            Self::Aider => Some("aider"),
            Self::Builtin | Self::Command(_) => None,
        }
    }

    /// The variable that overrides where the program is, e.g. `GROVE_CLAUDE_BIN`.
    pub fn program_override_var(&self) -> Option<&'static str> {
        match self {
            Self::Claude => Some("GROVE_CLAUDE_BIN"),
            Self::Codex => Some("GROVE_CODEX_BIN"),
            Self::Gemini => Some("GROVE_GEMINI_BIN"),
            Self::Aider => Some("GROVE_AIDER_BIN"),
            Self::Builtin | Self::Command(_) => None,
        }
    }

    /// The arguments after the program name; the brief is `$GROVE_BRIEF`.
    ///
    /// Each CLI runs non-interactively, may edit files in its working directory without
    /// asking, and is kept from committing; none is given a flag that lifts its own
    /// safety prompts for arbitrary shell commands:
    ///
    /// - claude: `-p` (print mode, non-interactive; the prompt is the positional argument
    ///   after it) with `--output-format stream-json`, which needs `--verbose` in print mode; `--permission-mode acceptEdits` lets it edit files
    ///   without a prompt while commands outside its allow-list are denied (print mode
    ///   cannot ask), so it cannot `git commit`; `--max-turns` caps its agentic turns.
    ///   Based on the Claude Code CLI reference and headless-mode docs.
    /// - codex: `exec --json` streams JSONL events; `--sandbox workspace-write` lets it
    ///   write only in the working directory (the replacement of the removed
    ///   `--full-auto`); approvals are never asked in `exec`. `--skip-git-repo-check`
    ///   because a linked worktree under `.git/grove/` is not always recognised as a
    ///   repository; `--color never` keeps stderr plain; `--` ends the flags before the
    ///   prompt. Based on `codex-rs/exec/src/cli.rs` and `exec_events.rs`.
    /// - gemini: `-p` (headless) with `--output-format json`; `--approval-mode auto_edit`
    ///   auto-approves edit tools only (shell tools need `yolo`, which grove does not
    ///   give). Based on `packages/cli/src/config/config.ts` and the headless reference.
    /// - aider: `--message` runs one instruction and exits; `--yes-always` answers its
    ///   questions (adding files it names); `--no-auto-commits` and `--no-dirty-commits`
    ///   keep it from committing, `--no-gitignore` from editing `.gitignore`;
    ///   `--no-suggest-shell-commands` keeps `--yes-always` from running shell commands;
    ///   its history files go to the run directory instead of the worktree;
    ///   `--no-pretty --no-stream` make its output plain text; `--no-check-update`,
    ///   `--no-show-model-warnings` and `--no-analytics` keep it from asking or phoning
    ///   home. Based on `aider/args.py`.
    pub fn argv(&self, max_turns: u32) -> Vec<CliArg> {
        use Arg::{Literal as L, Var as V};
        let fixed: &[Arg] = match self {
            Self::Claude => &[
                L("-p"),
                V(BRIEF_VAR),
                L("--output-format"),
                L("stream-json"),
                L("--verbose"),
                L("--permission-mode"),
                L("acceptEdits"),
            ],
            Self::Codex => &[
                L("exec"),
                L("--json"),
                L("--sandbox"),
                L("workspace-write"),
                L("--skip-git-repo-check"),
                L("--color"),
                L("never"),
                L("--"),
                V(BRIEF_VAR),
            ],
            Self::Gemini => &[
                L("-p"),
                V(BRIEF_VAR),
                L("--output-format"),
                L("json"),
                L("--approval-mode"),
                L("auto_edit"),
            ],
            Self::Aider => &[
                L("--message"),
                V(BRIEF_VAR),
                L("--yes-always"),
                L("--no-auto-commits"),
                L("--no-dirty-commits"),
                L("--no-gitignore"),
                L("--no-suggest-shell-commands"),
                L("--chat-history-file"),
                V(AIDER_CHAT_HISTORY_VAR),
                L("--input-history-file"),
                V(AIDER_INPUT_HISTORY_VAR),
                L("--no-pretty"),
                L("--no-stream"),
                L("--no-check-update"),
                L("--no-show-model-warnings"),
                L("--no-analytics"),
            ],
            Self::Builtin | Self::Command(_) => &[],
        };
        let mut argv: Vec<CliArg> = fixed.iter().map(|arg| CliArg::from(*arg)).collect();
        if matches!(self, Self::Claude) {
            argv.push(CliArg::Literal("--max-turns".into()));
            argv.push(CliArg::Literal(max_turns.max(1).to_string()));
        }
        argv
    }

    /// How this backend's output is read.
    pub fn output_format(&self) -> OutputFormat {
        match self {
            Self::Claude => OutputFormat::ClaudeStreamJson,
            Self::Codex => OutputFormat::CodexJsonl,
            Self::Gemini => OutputFormat::GeminiJson,
            Self::Aider => OutputFormat::AiderText,
            Self::Builtin | Self::Command(_) => OutputFormat::PlainText,
        }
    }

    /// Whether `name` is one of this CLI's own variables (credentials, endpoints,
    /// settings), passed through to it and to no other program.
    ///
    /// claude: `ANTHROPIC_*` and `CLAUDE_*` (API key or auth token, base URL, Bedrock and
    /// Vertex switches, `CLAUDE_CONFIG_DIR`); codex: `OPENAI_*` and `CODEX_*` (`CODEX_HOME`
    /// holds its login); gemini: `GEMINI_*` and `GOOGLE_*` (API key, Vertex project and
    /// credentials file); aider: `AIDER_*` and the keys of the providers it reaches
    /// through litellm. A `cmd:` command gets none: it reads its own secrets.
    pub fn passes_var(&self, name: &str) -> bool {
        let prefixes: &[&str] = match self {
            Self::Claude => &["ANTHROPIC_", "CLAUDE_"],
            Self::Codex => &["OPENAI_", "CODEX_"],
            Self::Gemini => &["GEMINI_", "GOOGLE_"],
            Self::Aider => &[
                "AIDER_",
                "OPENAI_",
                "ANTHROPIC_",
                "GEMINI_",
                "OPENROUTER_",
                "DEEPSEEK_",
                "MISTRAL_",
                "GROQ_",
                "XAI_",
                "AZURE_",
                "OLLAMA_",
            ],
            Self::Builtin | Self::Command(_) => return false,
        };
        prefixes.iter().any(|prefix| name.starts_with(prefix)) || COMMON_CLI_VARS.contains(&name)
    }

    /// Root-level entries this CLI leaves in its working directory that are its own
    /// scratch, not work: removed before grove commits (only those the run created).
    fn scratch_prefix(&self) -> Option<&'static str> {
        match self {
            // The repo-map tag cache (`.aider.tags.cache.v4`) cannot be moved elsewhere.
            Self::Aider => Some(".aider"),
            _ => None,
        }
    }
}

/// One argument of a CLI's argv: fixed text (quoted for the shell), or the value of a
/// variable of its environment, so that briefs and paths never pass through quoting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliArg {
    Literal(String),
    Var(&'static str),
}

impl From<Arg> for CliArg {
    fn from(arg: Arg) -> Self {
        match arg {
            Arg::Literal(text) => Self::Literal(text.to_owned()),
            Arg::Var(name) => Self::Var(name),
        }
    }
}

/// Where aider writes its chat history (a run-directory path, never the worktree).
const AIDER_CHAT_HISTORY_VAR: &str = "GROVE_AIDER_CHAT_HISTORY";
const AIDER_INPUT_HISTORY_VAR: &str = "GROVE_AIDER_INPUT_HISTORY";
/// The program, and where its stdout and stderr go, as variables of the shell.
const PROGRAM_VAR: &str = "GROVE_CLI_PROGRAM";
const STDOUT_VAR: &str = "GROVE_CLI_STDOUT";
const STDERR_VAR: &str = "GROVE_CLI_STDERR";

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell command that runs `backend`: its program (or the `cmd:` command) with its
/// argv, stdout and stderr into the files named by the environment.
fn shell_command(backend: &WorkerBackend, max_turns: u32) -> String {
    let redirect = format!("<\"/dev/null\" >\"${STDOUT_VAR}\" 2>\"${STDERR_VAR}\"");
    match backend {
        WorkerBackend::Command(command) => format!(
            "printf '%s' \"${BRIEF_VAR}\" | (\n{command}\n) >\"${STDOUT_VAR}\" 2>\"${STDERR_VAR}\""
        ),
        other => {
            let mut words = vec![format!("exec \"${PROGRAM_VAR}\"")];
            for arg in other.argv(max_turns) {
                words.push(match arg {
                    CliArg::Literal(text) => shell_quote(&text),
                    CliArg::Var(name) => format!("\"${name}\""),
                });
            }
            words.push(redirect);
            words.join(" ")
        }
    }
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
    fn cut_line(&mut self) {
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

fn non_empty(text: impl AsRef<str>) -> Option<String> {
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
        if line.trim().is_empty() {
            return Vec::new();
        }
        let Some(event) = json_object(line) else {
            self.report.unreadable_lines += 1;
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
        if line.trim().is_empty() {
            return Vec::new();
        }
        let Some(event) = json_object(line) else {
            self.report.unreadable_lines += 1;
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

/// Reads the lines appended to a file since the last call, each cut at
/// [`MAX_LINE_BYTES`].
struct LineFollower {
    file: std::fs::File,
    path: PathBuf,
    pending: Vec<u8>,
    /// The current line was cut: the rest of it is skipped up to its newline.
    skipping: bool,
}

impl LineFollower {
    fn open(path: &Path) -> Result<Self, BackendError> {
        let file = std::fs::File::open(path).map_err(|source| BackendError::Io {
            action: "open the output of",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            pending: Vec::new(),
            skipping: false,
        })
    }

    /// Feeds every complete new line to `parser`; at the end, the last partial one too.
    fn feed(
        &mut self,
        parser: &mut OutputParser,
        at_end: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), BackendError> {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let read = self
                .file
                .read(&mut chunk)
                .map_err(|source| BackendError::Io {
                    action: "read the output of",
                    path: self.path.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            for piece in chunk[..read].split_inclusive(|byte| *byte == b'\n') {
                let ends_line = piece.last() == Some(&b'\n');
                let body = if ends_line {
                    &piece[..piece.len() - 1]
                } else {
                    piece
                };
                if !self.skipping {
                    self.pending.extend_from_slice(body);
                    if self.pending.len() > MAX_LINE_BYTES {
                        self.pending.clear();
                        self.skipping = true;
                        parser.cut_line();
                    }
                }
                if ends_line {
                    if !self.skipping {
                        let line = std::mem::take(&mut self.pending);
                        for event in parser.line(&String::from_utf8_lossy(&line)) {
                            progress(event);
                        }
                    }
                    self.skipping = false;
                }
            }
        }
        if at_end && !self.pending.is_empty() && !self.skipping {
            let line = std::mem::take(&mut self.pending);
            for event in parser.line(&String::from_utf8_lossy(&line)) {
                progress(event);
            }
        }
        Ok(())
    }
}

/// The last bytes of a file as text (empty when it cannot be read).
fn file_tail(path: &Path, max: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    if file
        .seek(SeekFrom::Start(length.saturating_sub(max)))
        .is_err()
    {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last `max` characters of `text`'s trimmed content, on one line per source line.
fn tail_chars(text: &str, max: usize) -> String {
    let text = text.trim();
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let start = text
        .char_indices()
        .nth(count - max)
        .map_or(0, |(index, _)| index);
    format!("…{}", &text[start..])
}

/// Why an external worker could not be run at all (not a CLI that failed).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A file of the run directory could not be made or read. Not retried.
    #[error("cannot {action} the worker CLI at {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The shell could not be started. Not retried.
    #[error("cannot start the worker CLI: {0}")]
    Exec(#[from] ExecError),
}

/// One run of a worker CLI.
#[derive(Debug, Clone)]
pub struct CliInvocation {
    pub backend: WorkerBackend,
    /// The whole prompt: role, project rules and brief.
    pub prompt: String,
    /// The worktree.
    pub cwd: PathBuf,
    /// Where its stdout (the raw output grove parses) and stderr are saved.
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The environment grove started from; the CLI gets its scrubbed part plus its own
    /// variables ([`WorkerBackend::passes_var`]).
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    /// Passed to claude's `--max-turns`.
    pub max_turns: u32,
    /// The CLI is stopped once its reported tokens reach this.
    pub budget_tokens: Option<u64>,
    /// Cancelled when the run stops: the CLI's process group is killed.
    pub cancel: CancellationToken,
}

/// How a worker CLI's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliEnd {
    /// It finished: its work goes to review.
    Finished,
    /// It stopped at its turn limit: its work goes to review, as a built-in worker's does.
    TurnLimit,
    /// It failed, for this reason (its own words or its stderr's tail).
    Failed(String),
    /// The run was interrupted; its process group was killed.
    Interrupted,
}

/// A worker CLI's run: how it ended and what its output said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliOutcome {
    pub end: CliEnd,
    pub report: CliReport,
}

impl CliInvocation {
    /// The program to start, from `GROVE_<NAME>_BIN` in the environment or the default.
    fn program(&self) -> OsString {
        let override_var = self.backend.program_override_var();
        self.env
            .iter()
            .find(|(name, value)| override_var.is_some_and(|var| name == var) && !value.is_empty())
            .map(|(_, value)| value.clone())
            .or_else(|| self.backend.default_program().map(OsString::from))
            .unwrap_or_default()
    }

    fn executor(&self) -> LocalExecutor {
        let mut executor = LocalExecutor::with_env(self.env.iter().cloned());
        for (name, value) in &self.env {
            if name
                .to_str()
                .is_some_and(|name| self.backend.passes_var(name))
            {
                executor = executor.with_var(name.clone(), value.clone());
            }
        }
        let history = |suffix: &str| {
            let mut path = self.stdout_path.clone().into_os_string();
            path.push(suffix);
            path
        };
        executor
            .with_var(BRIEF_VAR, &self.prompt)
            .with_var(PROGRAM_VAR, self.program())
            .with_var(STDOUT_VAR, self.stdout_path.as_os_str())
            .with_var(STDERR_VAR, self.stderr_path.as_os_str())
            .with_var(AIDER_CHAT_HISTORY_VAR, history(".chat.md"))
            .with_var(AIDER_INPUT_HISTORY_VAR, history(".input"))
    }

    /// Root entries of the worktree with the backend's scratch prefix.
    fn scratch_entries(&self) -> Vec<OsString> {
        let Some(prefix) = self.backend.scratch_prefix() else {
            return Vec::new();
        };
        std::fs::read_dir(&self.cwd)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.file_name())
                    .filter(|name| name.to_string_lossy().starts_with(prefix))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Removes the scratch entries the CLI created (not those that were there before).
    fn remove_new_scratch(&self, before: &[OsString]) -> Vec<String> {
        let mut removed = Vec::new();
        for name in self.scratch_entries() {
            if before.contains(&name) {
                continue;
            }
            let path = self.cwd.join(&name);
            let gone = match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(error) => Err(error),
            };
            if gone.is_ok() {
                removed.push(name.to_string_lossy().into_owned());
            }
        }
        removed
    }

    /// Runs the CLI to its end, reporting progress as its output arrives.
    ///
    /// An `Err` means it could not be started or its output files could not be made;
    /// everything that happened after it started (a crash, a non-zero exit, garbage
    /// output, a timeout) is a [`CliOutcome`].
    pub async fn run(
        &self,
        mut progress: impl FnMut(Progress),
    ) -> Result<CliOutcome, BackendError> {
        for path in [&self.stdout_path, &self.stderr_path] {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|source| BackendError::Io {
                    action: "create the output directory of",
                    path: dir.to_path_buf(),
                    source,
                })?;
            }
            std::fs::File::create(path).map_err(|source| BackendError::Io {
                action: "create the output file of",
                path: path.clone(),
                source,
            })?;
        }
        let scratch_before = self.scratch_entries();
        let mut follower = LineFollower::open(&self.stdout_path)?;
        let mut parser = OutputParser::new(self.backend.output_format());
        let stop = self.cancel.child_token();
        let executor = self.executor();
        let request = ExecRequest {
            command: shell_command(&self.backend, self.max_turns),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            cancel: stop.clone(),
            output_cap: OutputCap {
                head: 4 * 1024,
                tail: 4 * 1024,
            },
        };
        let execution = executor.execute(request);
        tokio::pin!(execution);
        let mut ticker = tokio::time::interval(POLL_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut over_budget = None;
        let mut watch = |event: Progress| {
            if let (Progress::Turn { ledger, .. }, Some(budget)) = (&event, self.budget_tokens)
                && ledger.total_tokens() >= budget
                && over_budget.is_none()
            {
                over_budget = Some(ledger.total_tokens());
                stop.cancel();
            }
            progress(event);
        };
        let result = loop {
            tokio::select! {
                result = &mut execution => break result?,
                _ = ticker.tick() => follower.feed(&mut parser, false, &mut watch)?,
            }
        };
        follower.feed(&mut parser, true, &mut watch)?;
        let report = parser.finish();
        let _ = self.remove_new_scratch(&scratch_before);
        // Output read only after the exit may show the budget spent all the same.
        if over_budget.is_none()
            && let Some(budget) = self.budget_tokens
            && report.ledger.total_tokens() >= budget
        {
            over_budget = Some(report.ledger.total_tokens());
        }
        let name = self.backend.name();
        let explain = |report: &CliReport| {
            let stderr = file_tail(&self.stderr_path, STDERR_TAIL_BYTES);
            let detail = report
                .error
                .clone()
                .or_else(|| non_empty(&stderr))
                .or_else(|| non_empty(result.output_text()))
                .or_else(|| report.final_message.clone())
                .unwrap_or_else(|| "it printed nothing on stderr".to_owned());
            tail_chars(&detail, REASON_CHARS)
        };
        let end = match result.outcome {
            ExecOutcome::Cancelled if self.cancel.is_cancelled() => CliEnd::Interrupted,
            _ if over_budget.is_some() => CliEnd::Failed(format!(
                "{name} spent {} tokens, over the subagent budget of {}",
                over_budget.unwrap_or_default(),
                self.budget_tokens.unwrap_or_default()
            )),
            ExecOutcome::Cancelled => CliEnd::Interrupted,
            ExecOutcome::TimedOut => CliEnd::Failed(format!(
                "{name} did not finish within {}s; its process group was killed",
                self.timeout.as_secs()
            )),
            ExecOutcome::Signalled(signal) => CliEnd::Failed(format!(
                "{name} was killed by signal {signal}: {}",
                explain(&report)
            )),
            ExecOutcome::Exited(NOT_FOUND_EXIT) if self.backend.default_program().is_some() => {
                CliEnd::Failed(format!(
                    "{name} could not be started (exit status 127: not found); install it or \
                     set {} to its path: {}",
                    self.backend.program_override_var().unwrap_or_default(),
                    explain(&report)
                ))
            }
            ExecOutcome::Exited(code)
                if report.turn_limit
                    || (self.backend == WorkerBackend::Gemini
                        && code == GEMINI_TURN_LIMIT_EXIT) =>
            {
                CliEnd::TurnLimit
            }
            ExecOutcome::Exited(0) => match &report.error {
                Some(error) => CliEnd::Failed(format!(
                    "{name} reported an error: {}",
                    tail_chars(error, REASON_CHARS)
                )),
                None => CliEnd::Finished,
            },
            ExecOutcome::Exited(code) => CliEnd::Failed(format!(
                "{name} exited with status {code}: {}",
                explain(&report)
            )),
        };
        Ok(CliOutcome { end, report })
    }
}

/// The prompt an external worker gets: its role's instructions with the project rules
/// (the built-in worker's system prompt, or a user agent's), then the brief. On a rerun
/// after an interrupt, a note says the earlier attempt's files are already there.
pub fn cli_prompt(system: &str, brief: &str, rerun: bool) -> String {
    let mut prompt = format!(
        "{}\n\n# Your subtask\n\n{}",
        system.trim_end(),
        brief.trim()
    );
    if rerun {
        prompt.push_str(
            "\n\n(An earlier attempt at this subtask was interrupted. Its changes so far are \
             already in this directory: check what is done and finish the rest.)",
        );
    }
    prompt
}

/// A one-line description of how an external worker ended, for the live view.
pub fn describe_end(backend: &WorkerBackend, outcome: &CliOutcome) -> String {
    let name = backend.name();
    match &outcome.end {
        CliEnd::Finished => match &outcome.report.final_message {
            Some(message) => format!(
                "{name} finished: {}",
                truncate_chars(message.lines().next().unwrap_or_default(), 120)
            ),
            None => format!("{name} finished"),
        },
        CliEnd::TurnLimit => format!("{name} stopped at its turn limit"),
        CliEnd::Failed(reason) => format!("failed: {reason}"),
        CliEnd::Interrupted => format!("{name} was interrupted"),
    }
}

/// Where one attempt of an external worker saves its raw stdout and stderr: beside its
/// transcript (`S2-worker.json` → `S2-worker.claude.stdout`), numbered from the second
/// attempt on (`S2-worker.claude-2.stdout`) so a rerun never overwrites the first.
pub fn raw_output_paths(transcript: &Path, name: &str) -> (PathBuf, PathBuf) {
    let stem = transcript.with_extension("");
    let at = |attempt: u32, stream: &str| {
        let mut path = stem.clone().into_os_string();
        if attempt > 1 {
            path.push(format!(".{name}-{attempt}.{stream}"));
        } else {
            path.push(format!(".{name}.{stream}"));
        }
        PathBuf::from(path)
    };
    let attempt = (1..)
        .find(|attempt| !at(*attempt, "stdout").exists())
        .unwrap_or(1);
    (at(attempt, "stdout"), at(attempt, "stderr"))
}

/// A note for the user when the CLI's output was not all readable, naming the raw file.
pub fn output_note(backend: &WorkerBackend, outcome: &CliOutcome, raw: &Path) -> Option<String> {
    let report = &outcome.report;
    let structured = !matches!(
        backend.output_format(),
        OutputFormat::AiderText | OutputFormat::PlainText
    );
    let mut problems = Vec::new();
    if report.unreadable_lines > 0 {
        problems.push(format!(
            "{} line(s) of its output were not {}",
            report.unreadable_lines,
            match backend.output_format() {
                OutputFormat::GeminiJson => "its JSON result",
                _ => "the JSON it should print",
            }
        ));
    }
    if structured && !report.complete && outcome.end != CliEnd::Interrupted {
        problems.push("its output ended without its final result record".to_owned());
    }
    if !report.usage_reported && backend.output_format() != OutputFormat::PlainText {
        problems.push("it reported no token usage (counted as 0)".to_owned());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {}; raw output: {}",
            backend.name(),
            problems.join("; "),
            raw.display()
        )
    })
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

    #[test]
    fn backends_parse_from_their_flag_values_and_round_trip() {
        for (text, backend) in [
            ("builtin", WorkerBackend::Builtin),
            ("Claude", WorkerBackend::Claude),
            ("codex", WorkerBackend::Codex),
            ("gemini", WorkerBackend::Gemini),
            ("aider", WorkerBackend::Aider),
            (
                "cmd: ./agent.sh --fast",
                WorkerBackend::Command("./agent.sh --fast".into()),
            ),
        ] {
            let parsed: WorkerBackend = text.parse().unwrap();
            assert_eq!(parsed, backend, "{text}");
            let json = serde_json::to_string(&parsed).unwrap();
            assert_eq!(
                serde_json::from_str::<WorkerBackend>(&json).unwrap(),
                backend,
                "journaled as {json}"
            );
        }
        assert_eq!(
            "cursor".parse::<WorkerBackend>(),
            Err(BackendParseError::Unknown("cursor".into()))
        );
        assert_eq!(
            "cmd:  ".parse::<WorkerBackend>(),
            Err(BackendParseError::EmptyCommand)
        );
        assert!(serde_json::from_str::<WorkerBackend>("\"nope\"").is_err());
    }

    #[test]
    fn each_cli_gets_its_own_credentials_only() {
        assert!(WorkerBackend::Claude.passes_var("ANTHROPIC_API_KEY"));
        assert!(!WorkerBackend::Claude.passes_var("OPENAI_API_KEY"));
        assert!(WorkerBackend::Codex.passes_var("OPENAI_API_KEY"));
        assert!(WorkerBackend::Codex.passes_var("CODEX_HOME"));
        assert!(!WorkerBackend::Codex.passes_var("ANTHROPIC_API_KEY"));
        assert!(WorkerBackend::Gemini.passes_var("GEMINI_API_KEY"));
        assert!(!WorkerBackend::Gemini.passes_var("AWS_SECRET_ACCESS_KEY"));
        assert!(WorkerBackend::Aider.passes_var("OPENROUTER_API_KEY"));
        assert!(!WorkerBackend::Command("x".into()).passes_var("ANTHROPIC_API_KEY"));
        assert!(!WorkerBackend::Builtin.passes_var("ANTHROPIC_API_KEY"));
    }

    #[test]
    fn shell_commands_quote_every_literal_and_pass_the_brief_by_variable() {
        assert_eq!(
            shell_command(&WorkerBackend::Codex, 60),
            "exec \"$GROVE_CLI_PROGRAM\" 'exec' '--json' '--sandbox' 'workspace-write' \
             '--skip-git-repo-check' '--color' 'never' '--' \"$GROVE_BRIEF\" \
             <\"/dev/null\" >\"$GROVE_CLI_STDOUT\" 2>\"$GROVE_CLI_STDERR\""
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert!(
            shell_command(&WorkerBackend::Claude, 7).contains("'--max-turns' '7'"),
            "claude gets the worker's turn cap"
        );
    }

    #[test]
    fn tails_keep_the_end() {
        assert_eq!(tail_chars("  abcdef \n", 3), "…def");
        assert_eq!(tail_chars("abc", 3), "abc");
    }
}
