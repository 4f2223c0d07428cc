//! One run of a worker CLI: its environment, its process, its output as it comes, and
//! what its end means.
//!
//! The process runs through [`LocalExecutor`], so it lives in its own process group that
//! is killed on timeout, cancellation or drop. The CLI gets grove's scrubbed environment
//! plus its own variables ([`WorkerBackend::passes_var`]) and those the user named
//! (`[workers] pass_env`), and nothing else.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::backend::{
    AIDER_CHAT_HISTORY_VAR, AIDER_INPUT_HISTORY_VAR, CodexProvider, OPENAI_BASE_URL_VAR,
    PROGRAM_VAR, STDERR_VAR, STDOUT_VAR, WorkerBackend, shell_command,
};
use super::follow::{Feed, LineFollower, file_tail};
use super::parse::{
    CliReport, OutputFormat, OutputParser, Progress, last_reply_in_history, non_empty, parse_output,
};
use super::{BRIEF_VAR, BackendError};
use crate::text::{strip_escapes, tail};
use crate::tools::exec::{
    CommandExecutor, ExecOutcome, ExecRequest, ExecResult, LocalExecutor, OutputCap,
};
use crate::tools::tree::{TreeAccess, in_tree};

/// How often the CLI's output file is read while it runs, for the live view.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How much of the CLI's stderr is read to explain a failure.
const STDERR_TAIL_BYTES: u64 = 4 * 1024;
/// How much of a failure's explanation goes into the subtask's reason.
const REASON_CHARS: usize = 600;
/// Exit status of `gemini` when it stopped at its session turn limit.
const GEMINI_TURN_LIMIT_EXIT: i32 = 53;
/// Exit status of a shell whose command was not found.
const NOT_FOUND_EXIT: i32 = 127;

/// The environment external worker CLIs start from. Its `Debug` shows the names only:
/// the values are credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BackendEnv(pub Vec<(OsString, OsString)>);

impl BackendEnv {
    /// This process's environment.
    pub fn from_process() -> Self {
        Self(std::env::vars_os().collect())
    }

    fn get(&self, name: &str) -> Option<&OsString> {
        self.0
            .iter()
            .find(|(key, value)| key == name && !value.is_empty())
            .map(|(_, value)| value)
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
    /// The copy-on-write tree `cwd` is, when it is one: the CLI runs inside it, and its
    /// scratch files are read from grove's view of it.
    pub tree: Option<Arc<dyn TreeAccess>>,
    /// Where its stdout (the raw output grove parses) and stderr are saved.
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The environment grove started from.
    pub env: BackendEnv,
    /// Extra variables of `env` to pass by name (`[workers] pass_env`).
    pub pass_env: Vec<String>,
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
    /// It failed, for this reason (its own words or its stderr's tail, escapes stripped).
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

/// What the process did and what its output said, before it is judged.
struct Ran {
    result: ExecResult,
    report: CliReport,
    /// Tokens reported when the budget was found spent.
    over_budget: Option<u64>,
}

impl CliInvocation {
    /// Runs the CLI to its end, reporting progress as its output arrives.
    ///
    /// An `Err` means it could not be started or its output files could not be made;
    /// everything that happened after it started (a crash, a non-zero exit, garbage
    /// output, a timeout) is a [`CliOutcome`].
    pub async fn run(&self, progress: impl FnMut(Progress)) -> Result<CliOutcome, BackendError> {
        self.create_output_files()?;
        let scratch_before = self.scratch_entries();
        let ran = self.execute(progress).await;
        self.remove_new_scratch(&scratch_before);
        let ran = ran?;
        let end = self.judge(&ran);
        Ok(CliOutcome {
            end,
            report: ran.report,
        })
    }

    fn create_output_files(&self) -> Result<(), BackendError> {
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
        Ok(())
    }

    /// Runs the process, feeding its output to the parser as it comes and stopping it
    /// once the budget is spent.
    async fn execute(&self, mut progress: impl FnMut(Progress)) -> Result<Ran, BackendError> {
        let mut follower = LineFollower::open(&self.stdout_path)?;
        let mut parser = OutputParser::new(self.backend.output_format());
        let stop = self.cancel.child_token();
        let request = ExecRequest {
            command: shell_command(
                &self.backend,
                self.max_turns,
                CodexProvider::for_base_url(self.env.get(OPENAI_BASE_URL_VAR)),
            ),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            cancel: stop.clone(),
            output_cap: OutputCap {
                head: 4 * 1024,
                tail: 4 * 1024,
            },
        };
        // In a copy-on-write worktree the CLI runs inside its tree's namespaces.
        let local: Arc<dyn CommandExecutor> = Arc::new(self.executor());
        let executor = in_tree(self.tree.as_deref(), &local).map_err(BackendError::from)?;
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
                _ = ticker.tick() => {
                    follower.feed(&mut parser, Feed::AsItComes, &mut watch)?;
                    // Waiting out the CLI's retries would only delay the same failure.
                    if parser.refused_for_good().is_some() {
                        stop.cancel();
                    }
                }
            }
        };
        follower.feed(&mut parser, Feed::Final, &mut watch)?;
        let mut report = parser.finish();
        if self.backend == WorkerBackend::Aider
            && let Ok(history) = std::fs::read_to_string(self.history_path(".chat.md"))
            && let Some(reply) = last_reply_in_history(&history)
        {
            report.final_message = Some(reply);
        }
        // Output read only after the exit may show the budget spent all the same.
        if over_budget.is_none()
            && let Some(budget) = self.budget_tokens
            && report.ledger.total_tokens() >= budget
        {
            over_budget = Some(report.ledger.total_tokens());
        }
        Ok(Ran {
            result,
            report,
            over_budget,
        })
    }

    /// What the run means for the subtask.
    fn judge(&self, ran: &Ran) -> CliEnd {
        let name = self.backend.name();
        let report = &ran.report;
        let explain = || self.explain(ran);
        match ran.result.outcome {
            ExecOutcome::Cancelled if self.cancel.is_cancelled() => CliEnd::Interrupted,
            _ if report.refused_for_good.is_some() => CliEnd::Failed(format!(
                "{name}: {}",
                strip_escapes(report.refused_for_good.as_deref().unwrap_or_default())
            )),
            _ if ran.over_budget.is_some() => CliEnd::Failed(format!(
                "{name} spent {} tokens, over the subagent budget of {}",
                ran.over_budget.unwrap_or_default(),
                self.budget_tokens.unwrap_or_default()
            )),
            ExecOutcome::Cancelled => CliEnd::Interrupted,
            ExecOutcome::TimedOut => CliEnd::Failed(format!(
                "{name} did not finish within {}s; its process group was killed",
                self.timeout.as_secs()
            )),
            ExecOutcome::Signalled(signal) => CliEnd::Failed(format!(
                "{name} was killed by signal {signal}: {}",
                explain()
            )),
            ExecOutcome::Exited(NOT_FOUND_EXIT) if self.backend.default_program().is_some() => {
                CliEnd::Failed(format!(
                    "{name} could not be started (exit status 127: not found); install it or \
                     set {} to its path: {}",
                    self.backend.program_override_var().unwrap_or_default(),
                    explain()
                ))
            }
            ExecOutcome::Exited(code)
                if report.turn_limit
                    || (self.backend == WorkerBackend::Gemini
                        && code == GEMINI_TURN_LIMIT_EXIT) =>
            {
                CliEnd::TurnLimit
            }
            ExecOutcome::Exited(0) => match (&report.error, report.denials.as_slice()) {
                (Some(error), _) => CliEnd::Failed(format!(
                    "{name} reported an error: {}",
                    tail(&strip_escapes(error), REASON_CHARS)
                )),
                (None, []) => CliEnd::Finished,
                (None, denials) => CliEnd::Failed(tail(
                    &strip_escapes(&format!(
                        "{name} was refused by its own permission rules: {} (Claude Code \
                         never edits under a .git directory)",
                        denials.join("; ")
                    )),
                    REASON_CHARS,
                )),
            },
            ExecOutcome::Exited(code) => {
                CliEnd::Failed(format!("{name} exited with status {code}: {}", explain()))
            }
        }
    }

    /// The CLI's own account of a failure: its error, else its stderr's tail, else its
    /// output; terminal escapes stripped and cut to [`REASON_CHARS`].
    fn explain(&self, ran: &Ran) -> String {
        let stderr = file_tail(&self.stderr_path, STDERR_TAIL_BYTES);
        // Gemini prints its JSON error object on stderr when it fails.
        let stderr_error = (self.backend.output_format() == OutputFormat::GeminiJson)
            .then(|| parse_output(OutputFormat::GeminiJson, &stderr).error)
            .flatten();
        let detail = ran
            .report
            .error
            .clone()
            .or(stderr_error)
            .or_else(|| non_empty(&stderr))
            .or_else(|| non_empty(ran.result.output_text()))
            .or_else(|| ran.report.final_message.clone())
            .unwrap_or_else(|| "it printed nothing on stderr".to_owned());
        tail(&strip_escapes(&detail), REASON_CHARS)
    }

    /// The program to start, from `GROVE_<NAME>_BIN` in the environment or the default.
    fn program(&self) -> OsString {
        self.backend
            .program_override_var()
            .and_then(|var| self.env.get(var).cloned())
            .or_else(|| self.backend.default_program().map(OsString::from))
            .unwrap_or_default()
    }

    fn executor(&self) -> LocalExecutor {
        let mut executor = LocalExecutor::with_env(self.env.0.iter().cloned());
        for (name, value) in &self.env.0 {
            let passed = name.to_str().is_some_and(|name| {
                self.backend.passes_var(name)
                    || (!self.backend.is_builtin() && self.pass_env.iter().any(|n| n == name))
            });
            if passed {
                executor = executor.with_var(name.clone(), value.clone());
            }
        }
        let history = |suffix: &str| self.history_path(suffix);
        executor
            .with_var(BRIEF_VAR, &self.prompt)
            .with_var(PROGRAM_VAR, self.program())
            .with_var(STDOUT_VAR, self.stdout_path.as_os_str())
            .with_var(STDERR_VAR, self.stderr_path.as_os_str())
            .with_var(AIDER_CHAT_HISTORY_VAR, history(".chat.md"))
            .with_var(AIDER_INPUT_HISTORY_VAR, history(".input"))
    }

    /// Where aider keeps its chat (`.chat.md`) or input (`.input`) history: beside the
    /// raw output, never in the worktree.
    fn history_path(&self, suffix: &str) -> PathBuf {
        let mut path = self.stdout_path.clone().into_os_string();
        path.push(suffix);
        PathBuf::from(path)
    }

    /// Where grove's own process reaches the worktree.
    fn reach(&self) -> PathBuf {
        self.tree
            .as_ref()
            .map_or_else(|| self.cwd.clone(), |tree| tree.root_for_grove())
    }

    /// Root entries of the worktree with the backend's scratch prefix.
    fn scratch_entries(&self) -> Vec<OsString> {
        let Some(prefix) = self.backend.scratch_prefix() else {
            return Vec::new();
        };
        std::fs::read_dir(self.reach())
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
    fn remove_new_scratch(&self, before: &[OsString]) {
        for name in self.scratch_entries() {
            if before.contains(&name) {
                continue;
            }
            let path = self.reach().join(&name);
            // Best effort: a leftover is committed and shows in the review's diff.
            let _ = match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(error) => Err(error),
            };
        }
    }
}
