//! The values `.grove/config.toml` holds, each checked by its text alone: what a key
//! accepts, and how a wrong value is named in the error.
//!
//! This file owns the per-value rules of the config file (`config.rs` owns the file, its
//! tables and their layering). It must never look at the disk: whether a listed path
//! exists is the run's question.

use std::path::{Component, Path, PathBuf};

use crate::model::Provider;
use crate::prices::{USD_EXPECTED, Usd};
use crate::settings::options::{BaseCheck, History, SubtaskCheck};
use crate::worktree::WorktreeMode;

/// What is wrong with the file at one place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueProblem {
    #[error("the file is not valid UTF-8")]
    NotUtf8,
    /// Not TOML, or an unknown key: the TOML parser's own words.
    #[error("{message}")]
    Syntax { message: String },
    /// A value of the wrong kind; `got` is the value as [`shown`] in messages.
    #[error("expected {expected}, got {got}")]
    Expected { expected: &'static str, got: String },
    #[error("expected an integer from {min} to {max}, got {got}")]
    OutOfRange { min: u64, max: u64, got: String },
    #[error("expected an array of paths (strings), got {got} in it")]
    NotAPath { got: String },
    #[error("{path:?} is listed twice")]
    ListedTwice { path: String },
    #[error(transparent)]
    CopyPath(#[from] CopyPathError),
    /// A table without a key it cannot do without.
    #[error("the table needs `{key}`")]
    MissingKey { key: &'static str },
    /// `[[check.ratchet]]` with neither a `pattern` nor a tool grove knows.
    #[error(
        "no `pattern` and no tool grove knows in the command: set `pattern` (a regular \
         expression with the groups file, code and message) or `tool` (mypy, pyright, \
         ruff, flake8, eslint, tsc, clippy or cargo)"
    )]
    NoRatchetTool,
    /// A key the table's other keys make meaningless.
    #[error("this key is read only with {needs}")]
    OnlyWith { needs: &'static str },
    /// A pattern that is not a regular expression.
    #[error("not a regular expression: {message}")]
    Pattern { message: String },
    /// A key only the user's own configuration may hold.
    #[error(
        "a repository cannot set this ({why}); define it in your own \
         ~/.config/grove/config.toml"
    )]
    UserOnly { why: &'static str },
}

/// Why a `worktree.copy` entry cannot name a file of the work tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyPathError {
    #[error("{path:?} holds a control character")]
    ControlCharacter { path: String },
    #[error("{path:?} is not valid UTF-8")]
    NotUtf8 { path: String },
    #[error("{path:?} leaves the repository (`..`); list paths inside it")]
    LeavesRepository { path: String },
    #[error("{path:?} is absolute; list paths relative to the repository root")]
    Absolute { path: String },
    #[error("{path:?} names no file")]
    Empty { path: String },
    #[error("{path:?} is inside .git; list files of the work tree")]
    InsideGit { path: String },
}

/// How a value reads in an error message: strings quoted, tables and arrays named.
pub(super) fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => format!("{text:?}"),
        toml::Value::Integer(number) => number.to_string(),
        toml::Value::Float(number) => number.to_string(),
        toml::Value::Boolean(flag) => flag.to_string(),
        toml::Value::Datetime(date) => format!("the date {date}"),
        toml::Value::Array(_) => "an array".into(),
        toml::Value::Table(_) => "a table".into(),
    }
}

pub(super) fn expected(expected: &'static str, value: &toml::Value) -> ValueProblem {
    ValueProblem::Expected {
        expected,
        got: shown(value),
    }
}

pub(super) fn provider(value: &toml::Value) -> Result<Provider, ValueProblem> {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| expected("\"anthropic\" or \"openai\"", value))
}

pub(super) fn history(value: &toml::Value) -> Result<History, ValueProblem> {
    match value.as_str() {
        Some("squash") => Ok(History::Squash),
        Some("merge") => Ok(History::Merge),
        _ => Err(expected("\"squash\" or \"merge\"", value)),
    }
}

pub(super) fn model_name(value: &toml::Value) -> Result<String, ValueProblem> {
    match value.as_str().map(str::trim) {
        Some(name) if !name.is_empty() && !name.contains(char::is_whitespace) => {
            Ok(name.to_owned())
        }
        _ => Err(expected(
            "a model name (a non-empty string without spaces)",
            value,
        )),
    }
}

pub(super) fn integer(value: &toml::Value, min: u64, max: u64) -> Result<u64, ValueProblem> {
    value
        .as_integer()
        .and_then(|number| u64::try_from(number).ok())
        .filter(|number| (min..=max).contains(number))
        .ok_or_else(|| ValueProblem::OutOfRange {
            min,
            max,
            got: shown(value),
        })
}

pub(super) fn turns(value: &toml::Value) -> Result<u32, ValueProblem> {
    integer(value, 1, u64::from(u32::MAX)).map(|turns| turns as u32)
}

/// The most attempts a run may give one subtask: each is a worker and a tree, and the
/// judge reads every diff side by side.
pub const MAX_ATTEMPTS: u32 = 8;

pub(super) fn attempts(value: &toml::Value) -> Result<u32, ValueProblem> {
    integer(value, 1, u64::from(MAX_ATTEMPTS)).map(|attempts| attempts as u32)
}

pub(super) fn tokens(value: &toml::Value) -> Result<u64, ValueProblem> {
    value
        .as_integer()
        .and_then(|number| u64::try_from(number).ok())
        .filter(|number| *number > 0)
        .ok_or_else(|| expected("a positive number of tokens", value))
}

pub(super) fn usd(value: &toml::Value) -> Result<Usd, ValueProblem> {
    value
        .as_float()
        .or_else(|| value.as_integer().map(|number| number as f64))
        .and_then(Usd::from_dollars)
        .ok_or_else(|| expected(USD_EXPECTED, value))
}

pub(super) fn boolean(value: &toml::Value) -> Result<bool, ValueProblem> {
    value
        .as_bool()
        .ok_or_else(|| expected("true or false", value))
}

pub(super) fn setup_command(value: &toml::Value) -> Result<String, ValueProblem> {
    match value.as_str() {
        Some(command) if !command.trim().is_empty() => Ok(command.to_owned()),
        _ => Err(expected("a shell command (a non-empty string)", value)),
    }
}

/// `[worktree] mode`: `overlay`, `git` or `auto`.
pub(super) fn worktree_mode(value: &toml::Value) -> Result<WorktreeMode, ValueProblem> {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| expected("\"overlay\", \"git\" or \"auto\"", value))
}

/// `[worktree] dir`: an absolute directory outside every `.git` directory (agent CLIs
/// refuse to edit beneath one).
pub(super) fn worktrees_dir(value: &toml::Value) -> Result<PathBuf, ValueProblem> {
    let path = value.as_str().map(PathBuf::from);
    match path {
        Some(path)
            if path.is_absolute()
                && !path
                    .components()
                    .any(|part| part.as_os_str().eq_ignore_ascii_case(".git")) =>
        {
            Ok(path)
        }
        _ => Err(expected(
            "an absolute directory outside any .git directory, e.g. \"/var/tmp/grove\"",
            value,
        )),
    }
}

/// Environment variable names, such as `["DISABLE_AUTOUPDATER"]`.
pub(super) fn variable_names(value: &toml::Value) -> Result<Vec<String>, ValueProblem> {
    let names = value.as_array().map(|items| {
        items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
    });
    let valid = |name: &str| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    match names {
        Some(Some(names)) if names.iter().all(|name| valid(name)) => Ok(names),
        _ => Err(expected(
            "an array of variable names such as [\"DISABLE_AUTOUPDATER\"]",
            value,
        )),
    }
}

pub(super) fn copy_list(value: &toml::Value) -> Result<Vec<String>, ValueProblem> {
    let Some(items) = value.as_array() else {
        return Err(expected("an array of paths such as [\".env\"]", value));
    };
    let mut paths: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let Some(path) = item.as_str() else {
            return Err(ValueProblem::NotAPath { got: shown(item) });
        };
        let path = check_copy_path(path)?;
        if paths.contains(&path) {
            return Err(ValueProblem::ListedTwice { path });
        }
        paths.push(path);
    }
    Ok(paths)
}

/// Checks one `worktree.copy` entry by its text alone and returns it normalised (`./`
/// and trailing `/` removed): relative, inside the repository, not in `.git`.
pub fn check_copy_path(path: &str) -> Result<String, CopyPathError> {
    let owned = || path.to_owned();
    if path.chars().any(char::is_control) {
        return Err(CopyPathError::ControlCharacter { path: owned() });
    }
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => match part.to_str() {
                Some(part) => parts.push(part),
                None => return Err(CopyPathError::NotUtf8 { path: owned() }),
            },
            Component::CurDir => {}
            Component::ParentDir => return Err(CopyPathError::LeavesRepository { path: owned() }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(CopyPathError::Absolute { path: owned() });
            }
        }
    }
    match parts.first() {
        None => Err(CopyPathError::Empty { path: owned() }),
        Some(&".git") => Err(CopyPathError::InsideGit { path: owned() }),
        Some(_) => Ok(parts.join("/")),
    }
}

pub(super) fn subtask_check(value: &toml::Value) -> Result<SubtaskCheck, ValueProblem> {
    match value.as_str() {
        Some("evidence") => Ok(SubtaskCheck::Evidence),
        Some("require") => Ok(SubtaskCheck::Require),
        _ => Err(expected("\"evidence\" or \"require\"", value)),
    }
}

/// `[check] base`: whether the check must pass on the base before workers start.
pub(super) fn base_check(value: &toml::Value) -> Result<BaseCheck, ValueProblem> {
    match value.as_str() {
        Some("require") => Ok(BaseCheck::Require),
        Some("skip") => Ok(BaseCheck::Skip),
        _ => Err(expected("\"require\" or \"skip\"", value)),
    }
}

/// `[sandbox] deny_read` / `allow_read`: absolute paths, or paths in the home directory
/// written `~/…`, each once.
pub(super) fn sandbox_paths(value: &toml::Value) -> Result<Vec<String>, ValueProblem> {
    let wanted = "an array of absolute paths or paths in your home such as [\"~/.config/app\"]";
    let Some(items) = value.as_array() else {
        return Err(expected(wanted, value));
    };
    let mut paths: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let path = item
            .as_str()
            .filter(|path| {
                (path.starts_with('/') || path.starts_with("~/"))
                    && !path.chars().any(char::is_control)
                    && !Path::new(path)
                        .components()
                        .any(|part| part == Component::ParentDir)
            })
            .ok_or_else(|| expected(wanted, item))?;
        let path = path.trim_end_matches('/').to_owned();
        if paths.contains(&path) {
            return Err(ValueProblem::ListedTwice { path });
        }
        paths.push(path);
    }
    Ok(paths)
}

/// `[[check.ratchet]] parse`, before the other keys say what it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ParseKind {
    Lines,
    Junit,
}

/// `[[check.ratchet]] parse`: `lines` or `junit`.
pub(super) fn ratchet_parse(value: &toml::Value) -> Result<ParseKind, ValueProblem> {
    match value.as_str() {
        Some("lines") => Ok(ParseKind::Lines),
        Some("junit") => Ok(ParseKind::Junit),
        _ => Err(expected("\"lines\" or \"junit\"", value)),
    }
}

/// `[[check.ratchet]] tool`: a tool grove reads without a pattern.
pub(super) fn ratchet_tool(
    value: &toml::Value,
) -> Result<crate::settings::ratchet::Tool, ValueProblem> {
    value
        .as_str()
        .and_then(crate::settings::ratchet::Tool::named)
        .ok_or_else(|| {
            expected(
                "one of \"mypy\", \"pyright\", \"ruff\", \"flake8\", \"eslint\", \"tsc\", \
                 \"clippy\", \"cargo\"",
                value,
            )
        })
}

/// `[[check.ratchet]] pattern`: a regular expression that compiles.
pub(super) fn ratchet_pattern(value: &toml::Value) -> Result<String, ValueProblem> {
    let Some(pattern) = value.as_str().filter(|p| !p.is_empty()) else {
        return Err(expected("a regular expression (a non-empty string)", value));
    };
    regex::Regex::new(pattern).map_err(|error| ValueProblem::Pattern {
        message: error.to_string(),
    })?;
    Ok(pattern.to_owned())
}

/// `[[check.ratchet]] junit`: a file of the tree, relative to its root.
pub(super) fn junit_path(value: &toml::Value) -> Result<String, ValueProblem> {
    let Some(path) = value.as_str() else {
        return Err(expected("a path relative to the repository root", value));
    };
    Ok(check_copy_path(path)?)
}
