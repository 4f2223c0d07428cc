//! The project configuration file, `.grove/config.toml`: its keys, their built-in
//! defaults, the layering of flags over the file over the defaults, and the commented
//! file `grove init` writes.
//!
//! This module owns reading and validating the file and turning settings into
//! [`RunOptions`]. It must never print, never run or copy anything the file names (the
//! run does that), and never let a malformed value through: every problem is an error
//! naming the file, the line and the key.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::model::Provider;
use crate::prices::Usd;
pub use crate::settings::options::DEFAULT_SETUP_TIMEOUT_S;
use crate::settings::options::{
    CheckOptions, DEFAULT_MAX_ATTEMPTS, History, ModelNames, RunOptions, SandboxPaths, TurnCaps,
    WorktreeSetup, default_jobs,
};
use crate::settings::ratchet::{RatchetOptions, RatchetParse, Tool};
pub use crate::settings::values::{CopyPathError, MAX_ATTEMPTS, ValueProblem, check_copy_path};
use crate::settings::values::{
    ParseKind, junit_path, ratchet_parse, ratchet_pattern, ratchet_tool,
};
use crate::settings::values::{
    attempts, base_check, boolean, copy_list, history, integer, model_name, provider,
    sandbox_paths, setup_command, subtask_check, tokens, turns, usd, variable_names, worktree_mode,
    worktrees_dir,
};
use crate::worktree::WorktreeMode;

/// Where the file lives, relative to the repository root.
pub const CONFIG_PATH: &str = ".grove/config.toml";

/// The most subtasks `jobs` may allow at once (the `--jobs` flag's limit too).
pub const MAX_JOBS: u32 = 64;

/// The longest `setup_timeout_s` accepted: one day.
pub(crate) const MAX_SETUP_TIMEOUT_S: u64 = 86_400;

/// The model every role uses with `provider` when neither a flag nor the file names one.
pub fn default_model(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "claude-sonnet-5-5",
        Provider::OpenAi => "gpt-5.5",
    }
}

/// Why the project configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read. Not retried.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key, or a value out of range. Not
    /// retried: the user fixes the file.
    #[error("{}:{line}:{column}: {}{problem}", path.display(), key_prefix(key.as_deref()))]
    Invalid {
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        column: usize,
        /// The key as written in the file (`jobs`, `models.lead`), when one is to blame.
        key: Option<String>,
        /// What was wrong, e.g. `expected an integer from 1 to 64, got "four"`.
        problem: ValueProblem,
    },
}

fn key_prefix(key: Option<&str>) -> String {
    key.map(|key| format!("{key}: ")).unwrap_or_default()
}

/// One value per role; `None` where a layer says nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleValues<T> {
    pub lead: Option<T>,
    pub worker: Option<T>,
    pub reviewer: Option<T>,
}

impl<T> RoleValues<T> {
    fn or(self, lower: Self) -> Self {
        Self {
            lead: self.lead.or(lower.lead),
            worker: self.worker.or(lower.worker),
            reviewer: self.reviewer.or(lower.reviewer),
        }
    }
}

/// The settings a run takes from one layer (the flags, or the file); `None` where the
/// layer says nothing, so that the layer below decides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSettings {
    pub provider: Option<Provider>,
    /// The model of every role.
    pub model: Option<String>,
    /// A role's model, overriding `model` for that role.
    pub models: RoleValues<String>,
    pub jobs: Option<u32>,
    /// How many attempts each delegated subtask gets unless its call says (`--attempts`).
    pub attempts: Option<u32>,
    /// The most attempts one `delegate` call may ask for (`max_attempts`).
    pub max_attempts: Option<u32>,
    pub max_turns: RoleValues<u32>,
    pub budget_tokens: Option<u64>,
    pub subagent_budget_tokens: Option<u64>,
    pub budget_usd: Option<Usd>,
    pub subagent_budget_usd: Option<Usd>,
    pub apply: Option<bool>,
    /// Shell command run in each new worktree before its worker starts.
    pub setup: Option<String>,
    pub setup_timeout_s: Option<u64>,
    /// `[worktree] per_worker`: run the setup command in every worker's tree rather than
    /// once in the base tree that copy-on-write trees share.
    pub setup_per_worker: Option<bool>,
    /// Untracked files copied from the repository root into each worktree.
    pub copy: Option<Vec<String>>,
    /// `[worktree] share`: ignored directories of the checkout every tree sees read-only.
    pub share: Option<Vec<String>>,
    /// `[sandbox] deny_read`: paths commands may not read, on top of the built-in list.
    pub deny_read: Option<Vec<String>>,
    /// `[sandbox] allow_read`: paths commands may read though the built-in list denies them.
    pub allow_read: Option<Vec<String>>,
    /// Where runs' worktrees go (`[worktree] dir`), instead of the user's cache directory.
    pub worktrees_dir: Option<PathBuf>,
    /// `[worktree] mode`: copy-on-write trees, git worktrees, or whichever this system
    /// allows.
    pub worktree_mode: Option<WorktreeMode>,
    /// `[workers] pass_env`: extra variables an external worker CLI gets by name.
    pub pass_env: Option<Vec<String>>,
    /// `history`: what the user's branch gets, squashed commits or the merge graph.
    pub history: Option<History>,
    /// `[check]`: the project's check.
    pub check: Option<CheckOptions>,
}

/// What a run is given once every layer is applied.
#[derive(Debug, Clone)]
pub struct ResolvedRun {
    pub provider: Provider,
    /// The model name of each role.
    pub models: ModelNames,
    /// Options with every layered key set; the caller sets the rest (`keep_worktrees`,
    /// `git`...).
    pub options: RunOptions,
}

impl RunSettings {
    /// These settings layered over `lower`: each key set here wins.
    ///
    /// Two keys reach further than themselves, because a careful user means them so:
    /// a layer's `model` (every role) also beats the lower layer's per-role models, and
    /// a layer that switches to another provider than the lower one drops the lower
    /// layer's model names, which name the other provider's models.
    pub fn over(self, lower: RunSettings) -> RunSettings {
        let switches_provider = self
            .provider
            .is_some_and(|provider| provider != lower.provider.unwrap_or_default());
        let (lower_model, lower_models) = if switches_provider || self.model.is_some() {
            (None, RoleValues::default())
        } else {
            (lower.model, lower.models)
        };
        RunSettings {
            provider: self.provider.or(lower.provider),
            model: self.model.or(lower_model),
            models: self.models.or(lower_models),
            jobs: self.jobs.or(lower.jobs),
            attempts: self.attempts.or(lower.attempts),
            max_attempts: self.max_attempts.or(lower.max_attempts),
            max_turns: self.max_turns.or(lower.max_turns),
            budget_tokens: self.budget_tokens.or(lower.budget_tokens),
            subagent_budget_tokens: self.subagent_budget_tokens.or(lower.subagent_budget_tokens),
            budget_usd: self.budget_usd.or(lower.budget_usd),
            subagent_budget_usd: self.subagent_budget_usd.or(lower.subagent_budget_usd),
            apply: self.apply.or(lower.apply),
            setup: self.setup.or(lower.setup),
            setup_timeout_s: self.setup_timeout_s.or(lower.setup_timeout_s),
            setup_per_worker: self.setup_per_worker.or(lower.setup_per_worker),
            copy: self.copy.or(lower.copy),
            share: self.share.or(lower.share),
            deny_read: self.deny_read.or(lower.deny_read),
            allow_read: self.allow_read.or(lower.allow_read),
            worktrees_dir: self.worktrees_dir.or(lower.worktrees_dir),
            worktree_mode: self.worktree_mode.or(lower.worktree_mode),
            pass_env: self.pass_env.or(lower.pass_env),
            history: self.history.or(lower.history),
            check: self.check.or(lower.check),
        }
    }

    /// The run these settings describe, built-in defaults filling every gap.
    pub fn resolve(self, task: impl Into<String>) -> ResolvedRun {
        let provider = self.provider.unwrap_or_default();
        let model = self
            .model
            .unwrap_or_else(|| default_model(provider).to_owned());
        let models = ModelNames {
            lead: self.models.lead.unwrap_or_else(|| model.clone()),
            worker: self.models.worker.unwrap_or_else(|| model.clone()),
            reviewer: self.models.reviewer.unwrap_or(model),
        };
        let caps = TurnCaps::default();
        let mut options = RunOptions::new(task);
        options.jobs = self.jobs.map_or_else(default_jobs, |jobs| jobs as usize);
        options.max_turns = TurnCaps {
            lead: self.max_turns.lead.unwrap_or(caps.lead),
            worker: self.max_turns.worker.unwrap_or(caps.worker),
            reviewer: self.max_turns.reviewer.unwrap_or(caps.reviewer),
        };
        options.budget_tokens = self.budget_tokens;
        options.subagent_budget_tokens = self.subagent_budget_tokens;
        options.max_attempts = self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        options.attempts = self.attempts.unwrap_or(1);
        options.budget_usd = self.budget_usd;
        options.subagent_budget_usd = self.subagent_budget_usd;
        options.apply = self.apply.unwrap_or(true);
        options.worktree_setup = WorktreeSetup {
            setup: self.setup,
            setup_timeout_s: self.setup_timeout_s.unwrap_or(DEFAULT_SETUP_TIMEOUT_S),
            per_worker: self.setup_per_worker.unwrap_or(false),
            copy: self.copy.unwrap_or_default(),
            share: self.share,
        };
        options.sandbox_paths = SandboxPaths {
            deny_read: self.deny_read.unwrap_or_default(),
            allow_read: self.allow_read.unwrap_or_default(),
        };
        options.worktrees_dir = self.worktrees_dir;
        options.worktree_mode = self.worktree_mode.unwrap_or_default();
        options.worker_pass_env = self.pass_env.unwrap_or_default();
        options.history = self.history.unwrap_or_default();
        options.check = self.check;
        options.model_names = models.clone();
        ResolvedRun {
            provider,
            models,
            options,
        }
    }
}

/// A parsed and validated `.grove/config.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectConfig {
    /// The file it was read from.
    pub path: PathBuf,
    pub settings: RunSettings,
}

impl ProjectConfig {
    /// Reads `<repo_root>/.grove/config.toml`; `None` when there is no such file.
    pub fn load(repo_root: &Path) -> Result<Option<ProjectConfig>, ConfigError> {
        let path = repo_root.join(CONFIG_PATH);
        let bytes = match crate::repo_file::read(repo_root, Path::new(CONFIG_PATH)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let text = String::from_utf8(bytes).map_err(|error| {
            let valid = error.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(&error.into_bytes()[..valid]).into_owned();
            let (line, column) = line_and_column(&text, valid);
            ConfigError::Invalid {
                path: path.clone(),
                line,
                column,
                key: None,
                problem: ValueProblem::NotUtf8,
            }
        })?;
        Self::parse(&path, &text).map(Some)
    }

    /// Parses the text of a config file read from `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<ProjectConfig, ConfigError> {
        refuse_remote(path, text)?;
        let raw: RawFile = toml::from_str(text).map_err(|error| parse_error(path, text, &error))?;
        let check = Checker { path, text };
        let models = raw.models.unwrap_or_default();
        let max_turns = raw.max_turns.unwrap_or_default();
        let worktree = raw.worktree.unwrap_or_default();
        let workers = raw.workers.unwrap_or_default();
        let sandbox = raw.sandbox.unwrap_or_default();
        let settings = RunSettings {
            provider: check.optional(raw.provider, "provider", provider)?,
            model: check.optional(raw.model, "model", model_name)?,
            models: RoleValues {
                lead: check.optional(models.lead, "models.lead", model_name)?,
                worker: check.optional(models.worker, "models.worker", model_name)?,
                reviewer: check.optional(models.reviewer, "models.reviewer", model_name)?,
            },
            jobs: check.optional(raw.jobs, "jobs", |value| {
                integer(value, 1, u64::from(MAX_JOBS)).map(|jobs| jobs as u32)
            })?,
            attempts: check.optional(raw.attempts, "attempts", attempts)?,
            max_attempts: check.optional(raw.max_attempts, "max_attempts", attempts)?,
            max_turns: RoleValues {
                lead: check.optional(max_turns.lead, "max_turns.lead", turns)?,
                worker: check.optional(max_turns.worker, "max_turns.worker", turns)?,
                reviewer: check.optional(max_turns.reviewer, "max_turns.reviewer", turns)?,
            },
            budget_tokens: check.optional(raw.budget_tokens, "budget_tokens", tokens)?,
            subagent_budget_tokens: check.optional(
                raw.subagent_budget_tokens,
                "subagent_budget_tokens",
                tokens,
            )?,
            budget_usd: check.optional(raw.budget_usd, "budget_usd", usd)?,
            subagent_budget_usd: check.optional(
                raw.subagent_budget_usd,
                "subagent_budget_usd",
                usd,
            )?,
            apply: check.optional(raw.apply, "apply", boolean)?,
            setup: check.optional(worktree.setup, "worktree.setup", setup_command)?,
            setup_timeout_s: check.optional(
                worktree.setup_timeout_s,
                "worktree.setup_timeout_s",
                |value| integer(value, 1, MAX_SETUP_TIMEOUT_S),
            )?,
            setup_per_worker: check.optional(
                worktree.per_worker,
                "worktree.per_worker",
                boolean,
            )?,
            copy: check.optional(worktree.copy, "worktree.copy", copy_list)?,
            share: check.optional(worktree.share, "worktree.share", copy_list)?,
            deny_read: check.optional(sandbox.deny_read, "sandbox.deny_read", sandbox_paths)?,
            allow_read: check.optional(sandbox.allow_read, "sandbox.allow_read", sandbox_paths)?,
            worktrees_dir: check.optional(worktree.dir, "worktree.dir", worktrees_dir)?,
            worktree_mode: check.optional(worktree.mode, "worktree.mode", worktree_mode)?,
            pass_env: check.optional(workers.pass_env, "workers.pass_env", variable_names)?,
            history: check.optional(raw.history, "history", history)?,
            check: raw
                .check
                .map(|table| check.check_table(table))
                .transpose()?,
        };
        Ok(ProjectConfig {
            path: path.to_path_buf(),
            settings,
        })
    }
}

/// A value as the file holds it, with its place in the text.
type RawValue = Option<Spanned<toml::Value>>;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    provider: RawValue,
    model: RawValue,
    models: Option<RawRoles>,
    jobs: RawValue,
    attempts: RawValue,
    max_attempts: RawValue,
    max_turns: Option<RawRoles>,
    budget_tokens: RawValue,
    subagent_budget_tokens: RawValue,
    budget_usd: RawValue,
    subagent_budget_usd: RawValue,
    apply: RawValue,
    worktree: Option<RawWorktree>,
    workers: Option<RawWorkers>,
    sandbox: Option<RawSandbox>,
    history: RawValue,
    check: Option<Spanned<RawCheck>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with the keys command, timeout_s, network, subtask, fix_attempts, \
                 base and ratchet"
)]
struct RawCheck {
    command: RawValue,
    timeout_s: RawValue,
    network: RawValue,
    subtask: RawValue,
    fix_attempts: RawValue,
    base: RawValue,
    ratchet: Option<Vec<Spanned<RawRatchet>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with the keys command, parse, tool, pattern and junit"
)]
struct RawRatchet {
    command: RawValue,
    parse: RawValue,
    tool: RawValue,
    pattern: RawValue,
    junit: RawValue,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with the keys deny_read and allow_read"
)]
struct RawSandbox {
    deny_read: RawValue,
    allow_read: RawValue,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with the key pass_env")]
struct RawWorkers {
    pass_env: RawValue,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with the keys lead, worker and reviewer"
)]
struct RawRoles {
    lead: RawValue,
    worker: RawValue,
    reviewer: RawValue,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with the keys setup, setup_timeout_s, per_worker, copy, share, dir and \
                 mode"
)]
struct RawWorktree {
    setup: RawValue,
    setup_timeout_s: RawValue,
    per_worker: RawValue,
    copy: RawValue,
    share: RawValue,
    dir: RawValue,
    mode: RawValue,
}

/// Turns raw values into typed ones, with errors that point into the file.
struct Checker<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Checker<'_> {
    fn optional<T>(
        &self,
        raw: RawValue,
        key: &str,
        convert: impl FnOnce(&toml::Value) -> Result<T, ValueProblem>,
    ) -> Result<Option<T>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        convert(raw.get_ref()).map(Some).map_err(|problem| {
            invalid(
                self.path,
                self.text,
                &raw.span(),
                Some(key.to_owned()),
                problem,
            )
        })
    }
}

impl Checker<'_> {
    /// `[check]`: `command` is required, every other key has a default.
    fn check_table(&self, table: Spanned<RawCheck>) -> Result<CheckOptions, ConfigError> {
        let span = table.span();
        let raw = table.into_inner();
        let command = self
            .optional(raw.command, "check.command", setup_command)?
            .ok_or_else(|| {
                invalid(
                    self.path,
                    self.text,
                    &span,
                    Some("check".to_owned()),
                    ValueProblem::MissingKey { key: "command" },
                )
            })?;
        let defaults = CheckOptions::new(command);
        Ok(CheckOptions {
            timeout_s: self
                .optional(raw.timeout_s, "check.timeout_s", |value| {
                    integer(value, 1, MAX_CHECK_TIMEOUT_S)
                })?
                .unwrap_or(defaults.timeout_s),
            network: self
                .optional(raw.network, "check.network", boolean)?
                .unwrap_or(defaults.network),
            subtask: self
                .optional(raw.subtask, "check.subtask", subtask_check)?
                .unwrap_or(defaults.subtask),
            fix_attempts: self
                .optional(raw.fix_attempts, "check.fix_attempts", |value| {
                    integer(value, 0, u64::from(MAX_FIX_ATTEMPTS)).map(|n| n as u32)
                })?
                .unwrap_or(defaults.fix_attempts),
            base: self
                .optional(raw.base, "check.base", base_check)?
                .unwrap_or(defaults.base),
            ratchets: raw
                .ratchet
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(|(at, table)| self.ratchet_table(at + 1, table))
                .collect::<Result<_, _>>()?,
            ..defaults
        })
    }

    /// The `n`th `[[check.ratchet]]`: `command` is required; `parse = "junit"` needs
    /// `junit`; `parse = "lines"` (the default) a `pattern` that compiles, or a known
    /// `tool` (named, or found in the command) whose pattern is the default.
    fn ratchet_table(
        &self,
        n: usize,
        table: Spanned<RawRatchet>,
    ) -> Result<RatchetOptions, ConfigError> {
        let span = table.span();
        let raw = table.into_inner();
        let key = |name: &str| format!("check.ratchet[{n}].{name}");
        let in_table = |problem| {
            let table = format!("check.ratchet[{n}]");
            invalid(self.path, self.text, &span, Some(table), problem)
        };
        // A key the chosen `parse` does not read is an error, never silently ignored.
        let unread = |raw: &RawValue, name: &str, needs: &'static str| match raw {
            Some(value) => Err(invalid(
                self.path,
                self.text,
                &value.span(),
                Some(key(name)),
                ValueProblem::OnlyWith { needs },
            )),
            None => Ok(()),
        };
        let command = self
            .optional(raw.command, &key("command"), setup_command)?
            .ok_or_else(|| in_table(ValueProblem::MissingKey { key: "command" }))?;
        let parse = self
            .optional(raw.parse, &key("parse"), ratchet_parse)?
            .unwrap_or(ParseKind::Lines);
        let parse = match parse {
            ParseKind::Junit => {
                unread(&raw.pattern, "pattern", "parse = \"lines\"")?;
                unread(&raw.tool, "tool", "parse = \"lines\"")?;
                let junit = self.optional(raw.junit, &key("junit"), junit_path)?;
                RatchetParse::Junit {
                    junit: junit
                        .ok_or_else(|| in_table(ValueProblem::MissingKey { key: "junit" }))?,
                }
            }
            ParseKind::Lines => {
                unread(&raw.junit, "junit", "parse = \"junit\"")?;
                let tool = self.optional(raw.tool, &key("tool"), ratchet_tool)?;
                let pattern = self.optional(raw.pattern, &key("pattern"), ratchet_pattern)?;
                match (pattern, tool.or_else(|| Tool::in_command(&command))) {
                    (Some(pattern), _) => RatchetParse::Lines { pattern },
                    (None, Some(tool)) => tool.parse(),
                    (None, None) => return Err(in_table(ValueProblem::NoRatchetTool)),
                }
            }
        };
        Ok(RatchetOptions { command, parse })
    }
}

/// The longest `[check] timeout_s`: a day.
pub(crate) const MAX_CHECK_TIMEOUT_S: u64 = 86_400;
/// The most fixer rounds `[check] fix_attempts` may ask for.
pub(crate) const MAX_FIX_ATTEMPTS: u32 = 10;

/// Refuses `[remote]` in a repository's file, pointing at it: a remote host's launcher
/// runs on the user's machine with their credentials, so only their own configuration
/// may name one (`settings::remote`).
fn refuse_remote(path: &Path, text: &str) -> Result<(), ConfigError> {
    let Ok(table) = text.parse::<toml::Table>() else {
        // Not TOML: the full parse says where.
        return Ok(());
    };
    if !table.contains_key("remote") {
        return Ok(());
    }
    let start = text
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line.trim_start()))
        })
        .find(|(_, line)| line.starts_with("[remote") || line.starts_with("remote"))
        .map_or(0, |(at, _)| at);
    Err(invalid(
        path,
        text,
        &(start..start),
        Some("remote".to_owned()),
        ValueProblem::UserOnly {
            why: "a remote host's launcher runs on your machine with your credentials",
        },
    ))
}

/// A TOML parser's error in the file at `path` (holding `text`), pointing at its place.
pub(crate) fn parse_error(path: &Path, text: &str, error: &toml::de::Error) -> ConfigError {
    let span = error.span().unwrap_or(0..0);
    let key = key_at(text, span.start);
    let message = error.message().trim().to_owned();
    invalid(path, text, &span, key, ValueProblem::Syntax { message })
}

fn invalid(
    path: &Path,
    text: &str,
    span: &Range<usize>,
    key: Option<String>,
    problem: ValueProblem,
) -> ConfigError {
    let (line, column) = line_and_column(text, span.start);
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        column,
        key,
        problem,
    }
}

/// The 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The dotted key of the line holding byte `offset` of `text` (`worktree.copy` for a
/// `copy = ...` line under `[worktree]`, `max_turns` for a `[max_turns]` header): what a
/// TOML error there is about. `None` on a line that is neither.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = (0..=offset.min(text.len()))
        .rev()
        .find(|at| text.is_char_boundary(*at))?;
    let line_start = text[..offset].rfind('\n').map_or(0, |newline| newline + 1);
    let line = text[line_start..].lines().next().unwrap_or_default().trim();
    if let Some(header) = table_header(line) {
        return Some(header);
    }
    let key = line.split_once('=')?.0.trim().trim_matches(['"', '\'']);
    if key.is_empty() || key.starts_with('#') {
        return None;
    }
    let table = text[..line_start]
        .lines()
        .rev()
        .find_map(|line| table_header(line.trim()));
    Some(match table {
        Some(table) => format!("{table}.{key}"),
        None => key.to_owned(),
    })
}

/// `name` for a `[name]` line.
fn table_header(line: &str) -> Option<String> {
    let name = line.strip_prefix('[')?.strip_suffix(']')?.trim();
    (!name.is_empty() && !name.starts_with('[')).then(|| name.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn line_and_column_count_characters_from_one() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 6), (2, 1));
        // "bé" is three bytes; the value starts at character 6 of line 2.
        assert_eq!(line_and_column(text, 6 + 6), (2, 6));
        assert_eq!(line_and_column(text, 1000), (3, 1), "past the end: clamped");
    }

    #[test]
    fn copy_paths_are_normalised_or_refused() {
        assert_eq!(
            check_copy_path("./config//local.yml/").unwrap(),
            "config/local.yml"
        );
        for bad in ["", ".", "../x", "a/../../x", "/etc/passwd", ".git/config"] {
            assert!(check_copy_path(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
