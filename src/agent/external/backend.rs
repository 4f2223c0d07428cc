//! The agent CLIs grove can run as workers and how each is called: the program, its
//! exact non-interactive argv, and which of grove's environment variables are its own.
//!
//! It must never give a CLI a flag that lifts its own safety prompts for arbitrary shell
//! commands, nor one CLI's credentials to another.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::BRIEF_VAR;
use super::parse::OutputFormat;

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
    pub(super) fn default_program(&self) -> Option<&'static str> {
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
    ///   because a linked worktree is not always recognised as a repository; `--color
    ///   never` keeps stderr plain; `--` ends the flags before the prompt. codex 0.171
    ///   ignores `OPENAI_BASE_URL`: when it is set, `-c` overrides define and select a
    ///   provider named `grove` at that URL (Responses API, key from `OPENAI_API_KEY`),
    ///   which the user's `config.toml` may extend (`[model_providers.grove]`, e.g.
    ///   `stream_max_retries`). Checked against codex 0.171.0.
    /// - gemini: `-p` (headless) with `--output-format json`; `--approval-mode auto_edit`
    ///   auto-approves edit tools only (shell tools need `yolo`, which grove does not
    ///   give); `--skip-trust` trusts the new worktree for this session (without it
    ///   0.61 exits 55 in every untrusted directory). Checked against Gemini CLI 0.61.0.
    /// - aider: `--message` runs one instruction and exits; `--yes-always` answers its
    ///   questions (adding files it names); `--no-auto-commits` and `--no-dirty-commits`
    ///   keep it from committing, `--no-gitignore` from editing `.gitignore`;
    ///   `--no-suggest-shell-commands` keeps `--yes-always` from running shell commands;
    ///   its history files go to the run directory instead of the worktree;
    ///   `--no-pretty --no-stream` make its output plain text; `--no-check-update`,
    ///   `--no-show-model-warnings` and `--no-analytics` keep it from asking or phoning
    ///   home. Based on `aider/args.py`.
    pub fn argv(&self, max_turns: u32, provider: CodexProvider) -> Vec<CliArg> {
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
                L("--skip-trust"),
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
        if matches!(self, Self::Codex) && provider == CodexProvider::Grove {
            // Before `--`, which ends the flags.
            let at = argv.len() - 2;
            let overrides = [
                CliArg::Literal(format!("model_provider={CODEX_PROVIDER}")),
                CliArg::Literal(format!(
                    "model_providers.{CODEX_PROVIDER}.name={CODEX_PROVIDER}"
                )),
                CliArg::Joined("model_providers.grove.base_url=", OPENAI_BASE_URL_VAR),
                CliArg::Literal(format!(
                    "model_providers.{CODEX_PROVIDER}.env_key=OPENAI_API_KEY"
                )),
                CliArg::Literal(format!(
                    "model_providers.{CODEX_PROVIDER}.wire_api=responses"
                )),
            ];
            for (offset, value) in overrides.into_iter().enumerate() {
                argv.insert(at + 2 * offset, CliArg::Literal("-c".into()));
                argv.insert(at + 2 * offset + 1, value);
            }
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
    pub(super) fn scratch_prefix(&self) -> Option<&'static str> {
        match self {
            // The repo-map tag cache (`.aider.tags.cache.v4`) cannot be moved elsewhere.
            Self::Aider => Some(".aider"),
            _ => None,
        }
    }
}

/// The provider grove defines for codex when `OPENAI_BASE_URL` is set.
pub const CODEX_PROVIDER: &str = "grove";
/// The variable codex's provider override reads its URL from.
pub const OPENAI_BASE_URL_VAR: &str = "OPENAI_BASE_URL";

/// One argument of a CLI's argv: fixed text (quoted for the shell), or the value of a
/// variable of its environment, so that briefs and paths never pass through quoting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliArg {
    Literal(String),
    Var(&'static str),
    /// Fixed text followed by a variable's value, as one word.
    Joined(&'static str, &'static str),
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
pub(super) const AIDER_CHAT_HISTORY_VAR: &str = "GROVE_AIDER_CHAT_HISTORY";
pub(super) const AIDER_INPUT_HISTORY_VAR: &str = "GROVE_AIDER_INPUT_HISTORY";
/// The program, and where its stdout and stderr go, as variables of the shell.
pub(super) const PROGRAM_VAR: &str = "GROVE_CLI_PROGRAM";
pub(super) const STDOUT_VAR: &str = "GROVE_CLI_STDOUT";
pub(super) const STDERR_VAR: &str = "GROVE_CLI_STDERR";

/// The model provider codex is told to use (the other CLIs read `OPENAI_BASE_URL`
/// themselves, or not at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodexProvider {
    /// Its own configuration: no `OPENAI_BASE_URL` was given.
    Own,
    /// A provider named [`CODEX_PROVIDER`] whose `base_url` is `OPENAI_BASE_URL` and
    /// whose key is `OPENAI_API_KEY`, set on its command line.
    Grove,
}

impl CodexProvider {
    /// [`CodexProvider::Grove`] when the environment gives an `OPENAI_BASE_URL`.
    pub fn for_base_url(base_url: Option<&std::ffi::OsString>) -> Self {
        match base_url {
            Some(_) => Self::Grove,
            None => Self::Own,
        }
    }
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The shell command that runs `backend`: its program (or the `cmd:` command) with its
/// argv, stdout and stderr into the files named by the environment.
pub(super) fn shell_command(
    backend: &WorkerBackend,
    max_turns: u32,
    provider: CodexProvider,
) -> String {
    let redirect = format!("<\"/dev/null\" >\"${STDOUT_VAR}\" 2>\"${STDERR_VAR}\"");
    match backend {
        WorkerBackend::Command(command) => format!(
            "printf '%s' \"${BRIEF_VAR}\" | (\n{command}\n) >\"${STDOUT_VAR}\" 2>\"${STDERR_VAR}\""
        ),
        other => {
            let mut words = vec![format!("exec \"${PROGRAM_VAR}\"")];
            for arg in other.argv(max_turns, provider) {
                words.push(match arg {
                    CliArg::Literal(text) => shell_quote(&text),
                    CliArg::Var(name) => format!("\"${name}\""),
                    CliArg::Joined(text, name) => format!("{}\"${name}\"", shell_quote(text)),
                });
            }
            words.push(redirect);
            words.join(" ")
        }
    }
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
            shell_command(&WorkerBackend::Codex, 60, CodexProvider::Own),
            "exec \"$GROVE_CLI_PROGRAM\" 'exec' '--json' '--sandbox' 'workspace-write' \
             '--skip-git-repo-check' '--color' 'never' '--' \"$GROVE_BRIEF\" \
             <\"/dev/null\" >\"$GROVE_CLI_STDOUT\" 2>\"$GROVE_CLI_STDERR\""
        );
        assert_eq!(
            shell_command(&WorkerBackend::Codex, 60, CodexProvider::Grove),
            "exec \"$GROVE_CLI_PROGRAM\" 'exec' '--json' '--sandbox' 'workspace-write' \
             '--skip-git-repo-check' '--color' 'never' '-c' 'model_provider=grove' \
             '-c' 'model_providers.grove.name=grove' \
             '-c' 'model_providers.grove.base_url='\"$OPENAI_BASE_URL\" \
             '-c' 'model_providers.grove.env_key=OPENAI_API_KEY' \
             '-c' 'model_providers.grove.wire_api=responses' '--' \"$GROVE_BRIEF\" \
             <\"/dev/null\" >\"$GROVE_CLI_STDOUT\" 2>\"$GROVE_CLI_STDERR\"",
            "codex gets its own provider at OPENAI_BASE_URL, which it would ignore"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert!(
            shell_command(&WorkerBackend::Claude, 7, CodexProvider::Grove)
                .contains("'--max-turns' '7'"),
            "claude gets the worker's turn cap"
        );
    }
}
