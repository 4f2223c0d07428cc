//! `[[check.ratchet]]`: a command whose findings may not grow past the base's — a type
//! checker, a linter or a test suite that is not clean today.
//!
//! This file owns what a ratchet is as settings: how its output is read (lines matching
//! a pattern, cargo's JSON messages, or a JUnit XML file it writes) and the known tools'
//! default patterns, found by the `tool` key or in the command. It must never run
//! anything, nor look at the disk: reading the output is the run's (`run/check/ratchet`).

use serde::{Deserialize, Serialize};

/// One `[[check.ratchet]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatchetOptions {
    /// Shell command run in the tree, sandboxed like the check.
    pub command: String,
    /// How its findings are read from what it leaves.
    pub parse: RatchetParse,
}

/// How a ratchet's findings are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "parse", rename_all = "snake_case")]
pub enum RatchetParse {
    /// Each output line `pattern` matches is one finding; its named groups `file`,
    /// `code` and `message` are the finding's identity (`line` and `column` are shown,
    /// never compared).
    Lines { pattern: String },
    /// Each output line is one of cargo's JSON messages (`--message-format=json`):
    /// every error or warning the compiler or clippy reports is one finding.
    CargoJson,
    /// Every failing test case (a `<failure>` or `<error>`) of the JUnit XML file the
    /// command writes at `junit` (relative to the tree) is one finding.
    Junit { junit: String },
}

/// The tools whose output grove reads without a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Mypy,
    Pyright,
    Ruff,
    Flake8,
    Eslint,
    Tsc,
    Clippy,
    Cargo,
}

/// Every tool, by the name the `tool` key takes.
pub const TOOLS: &[(&str, Tool)] = &[
    ("mypy", Tool::Mypy),
    ("pyright", Tool::Pyright),
    ("ruff", Tool::Ruff),
    ("flake8", Tool::Flake8),
    ("eslint", Tool::Eslint),
    ("tsc", Tool::Tsc),
    ("clippy", Tool::Clippy),
    ("cargo", Tool::Cargo),
];

/// `path:line: error: message  [code]`, with `--show-column-numbers` a column too; notes
/// are not findings.
const MYPY: &str = r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:(?P<column>\d+):)? error: (?P<message>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$";
/// `  /abs/path.py:3:12 - error: message (reportCode)`.
const PYRIGHT: &str = r"^\s*(?P<file>[^:\s][^:]*):(?P<line>\d+):(?P<column>\d+) - error: (?P<message>.*?)(?: \((?P<code>report\w+)\))?$";
/// ruff's `full` and `concise` formats and flake8's: `path:line:col: F401 [*] message`.
const RUFF: &str = r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?P<column>\d+): (?P<code>[A-Z]+[0-9]+) (?:\[\*\] )?(?P<message>.*)$";
/// eslint's `unix` formatter (`-f unix`): `path:line:col: message [Error/rule]`.
const ESLINT: &str = r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?P<column>\d+): (?P<message>.*?) \[(?:Error|Warning)(?:/(?P<code>[^\]]+))?\]$";
/// tsc with `--pretty false`: `path(line,col): error TS2322: message`.
const TSC: &str = r"^(?P<file>[^(\s][^(]*)\((?P<line>\d+),(?P<column>\d+)\): error (?P<code>TS\d+): (?P<message>.*)$";

impl Tool {
    /// The tool the `tool` key names.
    pub fn named(name: &str) -> Option<Self> {
        TOOLS
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, tool)| *tool)
    }

    /// The known tool `command` runs: a word that is the tool's program (`mypy`,
    /// `.venv/bin/ruff`, `python -m mypy`, `npx eslint`), `cargo clippy`, or cargo with
    /// `--message-format=json`.
    pub fn in_command(command: &str) -> Option<Self> {
        let words: Vec<&str> = command
            .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
            .filter(|word| !word.is_empty())
            .collect();
        let program = |word: &str| word.rsplit('/').next().unwrap_or(word).to_owned();
        let has = |name: &str| words.iter().any(|word| program(word) == name);
        if has("cargo") {
            if words.contains(&"clippy") {
                return Some(Self::Clippy);
            }
            if words.iter().any(|w| w.starts_with("--message-format=json")) {
                return Some(Self::Cargo);
            }
        }
        TOOLS
            .iter()
            .filter(|(_, tool)| !matches!(tool, Self::Clippy | Self::Cargo))
            .find(|(name, _)| has(name))
            .map(|(_, tool)| *tool)
    }

    /// How this tool's output is read.
    pub fn parse(self) -> RatchetParse {
        let pattern = match self {
            Self::Mypy => MYPY,
            Self::Pyright => PYRIGHT,
            Self::Ruff | Self::Flake8 => RUFF,
            Self::Eslint => ESLINT,
            Self::Tsc => TSC,
            Self::Clippy | Self::Cargo => return RatchetParse::CargoJson,
        };
        RatchetParse::Lines {
            pattern: pattern.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_tool_is_found_in_its_command_and_every_default_pattern_compiles() {
        let found: Vec<Option<Tool>> = [
            "mypy src",
            ".venv/bin/python -m mypy --strict pkg",
            "ruff check --output-format=concise .",
            "npx eslint -f unix src",
            "cd web && tsc --noEmit --pretty false",
            "cargo clippy --message-format=json --all-targets",
            "cargo build --message-format=json-diagnostic-short",
            "pyright",
            "flake8 .",
            "make lint",
            "cargo test",
        ]
        .iter()
        .map(|command| Tool::in_command(command))
        .collect();
        assert_eq!(
            found,
            vec![
                Some(Tool::Mypy),
                Some(Tool::Mypy),
                Some(Tool::Ruff),
                Some(Tool::Eslint),
                Some(Tool::Tsc),
                Some(Tool::Clippy),
                Some(Tool::Cargo),
                Some(Tool::Pyright),
                Some(Tool::Flake8),
                None,
                None,
            ]
        );
        for (name, tool) in TOOLS {
            assert_eq!(Tool::named(name), Some(*tool));
            if let RatchetParse::Lines { pattern } = tool.parse() {
                assert!(regex::Regex::new(&pattern).is_ok(), "{name}'s pattern");
            }
        }
    }
}
