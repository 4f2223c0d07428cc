//! `grep {pattern, path?}`: regex search over the worktree's text files.
//!
//! This tool owns searching contents. It walks like `list_files` (.gitignore respected,
//! `.git` skipped, symlinks not followed), opens every file through the root's capability
//! handle, skips binary files, and prints `path:line:text` with long lines truncated and
//! the whole result capped. It must never write, and never hold a whole file in memory.

use std::fmt::Write as _;
use std::io::{BufReader, Cursor, Read};
use std::ops::ControlFlow;
use std::path::Path;

use async_trait::async_trait;
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::confine::{Access, ConfinedRoot, blocking, io_error, open_file};
use super::text::{BoundedLines, display, looks_binary, read_prefix};
use super::walk::{Start, resolve_start, walk};
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};
use crate::text::truncate;

/// Matching lines shown in one result.
pub const MAX_MATCHES: usize = 200;
/// Bytes of output in one result.
pub const MAX_OUTPUT_BYTES: usize = 50_000;
/// Characters of a matching line shown.
pub const MAX_SHOWN_LINE_CHARS: usize = 300;
/// Bytes of a line searched; the rest of a longer line is not searched.
pub const MAX_SEARCHED_LINE_BYTES: usize = 64 * 1024;
/// Compiled size limit for the model's regex, so a pathological pattern is refused.
const REGEX_SIZE_LIMIT: usize = 10 * 1024 * 1024;

/// Searches file contents with a regex.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grep;

#[derive(Debug, Deserialize)]
struct Input {
    pattern: String,
    path: Option<String>,
}

#[async_trait]
impl Tool for Grep {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search the text files under `path` (default: the worktree root; a file is fine too) \
         for lines matching the regular expression `pattern` (Rust regex syntax). Prints \
         `path:line:text`. Ignored files, .git and binary files are skipped; long lines are \
         truncated and the result is capped."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression (Rust regex syntax)."},
                "path": {"type": "string", "description": "File or directory relative to the worktree root (default: the root)."}
            },
            "required": ["pattern"]
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self, input)?;
        let regex = compile(&input.pattern)?;
        let (root, reach) = (ctx.root.clone(), ctx.reach());
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let shown = input.path.as_deref().unwrap_or(".");
            search(&ConfinedRoot::open(&root, &reach)?, shown, &regex, &cancel)
        })
        .await
    }
}

/// A search's state across the files it reads.
/// The model's pattern, compiled within the size limit, or the error it should see.
pub(crate) fn compile(pattern: &str) -> Result<Regex, ToolError> {
    RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| {
            ToolError::RespondToModel(format!("invalid regex `{}`: {err}", truncate(pattern, 200)))
        })
}

#[derive(Debug, Default)]
pub(crate) struct Search {
    out: String,
    matches: usize,
    files_searched: u64,
    binary_skipped: u64,
    pub(crate) unreadable: u64,
    /// Set once the caps are reached: no more files need reading.
    pub(crate) full: bool,
}

fn search(
    confined: &ConfinedRoot,
    shown: &str,
    regex: &Regex,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let mut state = Search::default();
    match resolve_start(confined, shown, "search")? {
        Start::File(path) => {
            let file = open_file(confined, &path, shown, "search", Access::Read)?;
            search_file(file, &path, regex, cancel, &mut state)
                .map_err(|err| io_error("search", shown, &err))?;
        }
        Start::Dir(start) => {
            let stats = walk(confined, &start, cancel, |entry| {
                if !entry.is_file {
                    return ControlFlow::Continue(());
                }
                let searched = open_file(confined, &entry.path, shown, "search", Access::Read)
                    .ok()
                    .and_then(|file| {
                        search_file(file, &entry.path, regex, cancel, &mut state).ok()
                    });
                if searched.is_none() {
                    state.unreadable += 1;
                }
                if state.full {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            state.unreadable += stats.unreadable;
        }
    }
    finish(state, regex, shown, cancel)
}

/// The result of a search: its matches and the notes on what it did not show. The one
/// rendering for every reader searched (a worktree, or a commit's tree).
pub(crate) fn finish(
    state: Search,
    regex: &Regex,
    shown: &str,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    if cancel.is_cancelled() {
        return Err(ToolError::RespondToModel(
            "the search was cancelled".to_owned(),
        ));
    }
    let mut out = state.out;
    if state.matches == 0 {
        let _ = writeln!(
            out,
            "[no matches for `{}` under `{shown}`: {} files searched, {} binary files skipped]",
            truncate(regex.as_str(), 200),
            state.files_searched,
            state.binary_skipped
        );
    }
    if state.full {
        let _ = writeln!(
            out,
            "[stopped after {} matches (cap: {MAX_MATCHES} matches or {MAX_OUTPUT_BYTES} bytes); there may be more: narrow the pattern or the path]",
            state.matches
        );
    }
    if state.unreadable > 0 {
        let _ = writeln!(out, "[{} files could not be read]", state.unreadable);
    }
    Ok(ToolOutput::ok(out))
}

/// Searches one file's `file` content, shown as `path`, into `state`.
pub(crate) fn search_file(
    mut file: impl Read,
    path: &Path,
    regex: &Regex,
    cancel: &CancellationToken,
    state: &mut Search,
) -> std::io::Result<()> {
    let prefix = read_prefix(&mut file)?;
    if looks_binary(&prefix) {
        state.binary_skipped += 1;
        return Ok(());
    }
    state.files_searched += 1;
    let shown_path = path.to_string_lossy();
    let reader = BufReader::with_capacity(64 * 1024, Cursor::new(prefix).chain(file));
    let mut lines = BoundedLines::new(reader, MAX_SEARCHED_LINE_BYTES);
    let mut number = 0u64;
    while let Some(line) = lines.next_line()? {
        number += 1;
        if number.is_multiple_of(4096) && cancel.is_cancelled() {
            return Ok(());
        }
        if !regex.is_match(&line.bytes) {
            continue;
        }
        let (text, _, _) = display(&line.bytes, line.cut_bytes > 0);
        let rendered = format!(
            "{shown_path}:{number}:{}\n",
            truncate(&text, MAX_SHOWN_LINE_CHARS)
        );
        if state.matches >= MAX_MATCHES || state.out.len() + rendered.len() > MAX_OUTPUT_BYTES {
            state.full = true;
            return Ok(());
        }
        state.out.push_str(&rendered);
        state.matches += 1;
    }
    Ok(())
}
