//! Other agent CLIs as workers: Claude Code, Codex, Gemini CLI, aider, or any command.
//!
//! This file owns how grove runs another agent CLI in a worker's worktree: the exact
//! non-interactive argv of each CLI, the environment it gets (grove's scrubbed one plus
//! that CLI's own credentials, and nothing else), the wall-clock limit, and what its run
//! means for the subtask; [`parse`] reads its machine-readable output into a final message
//! and a token ledger. The process runs through [`LocalExecutor`], so it lives in its own
//! process group that is killed on timeout, cancellation or drop.
//!
//! It must never let the CLI commit or touch git history where a flag prevents it (grove
//! commits the worktree afterwards, and the isolated reviewer judges the diff), never
//! hand one CLI's credentials to another, and never trust the CLI's output: every parser
//! takes whatever bytes come and reports what it could read.
//!
//! Each CLI's flags and output schema were checked against its public sources and docs
//! (November 2026); the doc comments of [`WorkerBackend::argv`] and of each parser in
//! [`parse`] say what they are based on.

use std::ffi::OsString;
use std::fmt;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::tools::exec::{
    CommandExecutor as _, ExecError, ExecOutcome, ExecRequest, LocalExecutor, OutputCap,
};
use crate::tools::truncate_chars;

pub mod parse;

use parse::non_empty;
pub use parse::{CliReport, OutputFormat, OutputParser, Progress, parse_output};

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
    let tail = crate::tools::last_chars(text, max);
    if tail.len() == text.len() {
        tail.to_owned()
    } else {
        format!("…{tail}")
    }
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

/// The environment external worker CLIs start from. Its `Debug` shows the names only:
/// the values are credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BackendEnv(pub Vec<(OsString, OsString)>);

impl BackendEnv {
    /// This process's environment.
    pub fn from_process() -> Self {
        Self(std::env::vars_os().collect())
    }
}

impl fmt::Debug for BackendEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
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
    pub env: BackendEnv,
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
            .0
            .iter()
            .find(|(name, value)| override_var.is_some_and(|var| name == var) && !value.is_empty())
            .map(|(_, value)| value.clone())
            .or_else(|| self.backend.default_program().map(OsString::from))
            .unwrap_or_default()
    }

    fn executor(&self) -> LocalExecutor {
        let mut executor = LocalExecutor::with_env(self.env.0.iter().cloned());
        for (name, value) in &self.env.0 {
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
            // Gemini prints its JSON error object on stderr when it fails.
            let stderr_error = (self.backend.output_format() == OutputFormat::GeminiJson)
                .then(|| parse_output(OutputFormat::GeminiJson, &stderr).error)
                .flatten();
            let detail = report
                .error
                .clone()
                .or(stderr_error)
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
