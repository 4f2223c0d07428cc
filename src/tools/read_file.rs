//! `read_file {path, offset?, limit?}`: a window of a text file with line numbers.
//!
//! This tool owns how file contents are shown to the model. It streams: a 2 GB file (or a
//! 2 GB line) costs a bounded amount of memory, and the output is capped in lines, bytes
//! per line and bytes in total, with a note that says what was cut and how to read on.
//! It must never write.

use std::fmt::Write as _;
use std::io::{BufReader, Cursor, Read};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::confine::{Access, ConfinedRoot, blocking, io_error, open_file};
use super::text::{BoundedLines, display, looks_binary, read_prefix};
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Lines shown when the model gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Bytes of one line shown; the rest of a longer line is cut with a note.
pub const MAX_LINE_BYTES: usize = 2000;
/// Bytes of line text in one result; reading stops at the line that would pass it.
pub const MAX_OUTPUT_BYTES: usize = 100_000;

/// Reads a text file, numbered like `cat -n`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

#[derive(Debug, Deserialize)]
struct Input {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file in the worktree. Lines are numbered from 1 like `cat -n`. \
         Use `offset` (the 1-based first line) and `limit` (number of lines, default 2000) \
         to page through long files; long lines and long results are cut with a note saying \
         how to read on. Binary files are reported, not shown."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the worktree root."},
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
                "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default 2000)."}
            },
            "required": ["path"]
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self, input)?;
        let root = ctx.root.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || read(&ConfinedRoot::open(&root)?, &input, &cancel)).await
    }
}

fn read(
    confined: &ConfinedRoot,
    input: &Input,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let shown = input.path.as_str();
    let relative = confined.relative(shown)?;
    let mut file = open_file(confined, &relative, shown, "read", Access::Read)?;
    let size = file
        .metadata()
        .map_err(|err| io_error("read", shown, &err))?
        .len();
    let prefix = read_prefix(&mut file).map_err(|err| io_error("read", shown, &err))?;
    if looks_binary(&prefix) {
        return Ok(ToolOutput::ok(format!(
            "`{shown}` is a binary file, {size} bytes; not shown"
        )));
    }
    if prefix.is_empty() {
        return Ok(ToolOutput::ok(format!("`{shown}` is empty (0 bytes)")));
    }

    let first = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(DEFAULT_LIMIT).max(1);
    let reader = BufReader::with_capacity(64 * 1024, Cursor::new(prefix).chain(file));
    let mut lines = BoundedLines::new(reader, MAX_LINE_BYTES);
    let mut number = 0u64;
    let mut out = String::new();
    let mut shown_lines = 0u64;
    let mut cut_lines = 0u64;
    let mut lossy = false;
    let mut stopped_by_bytes = false;
    loop {
        if number.is_multiple_of(4096) && cancel.is_cancelled() {
            return Err(ToolError::RespondToModel(
                "read_file was cancelled".to_owned(),
            ));
        }
        if shown_lines == limit {
            break;
        }
        let Some(line) = lines
            .next_line()
            .map_err(|err| io_error("read", shown, &err))?
        else {
            break;
        };
        number += 1;
        if number < first {
            continue;
        }
        let (text, line_lossy, dropped) = display(&line.bytes, line.cut_bytes > 0);
        let cut = line.cut_bytes + dropped as u64;
        let mut rendered = format!("{number:>6}\t{text}");
        if cut > 0 {
            cut_lines += 1;
            let _ = write!(rendered, " … [{cut} more bytes on this line]");
        }
        rendered.push('\n');
        if shown_lines > 0 && out.len() + rendered.len() > MAX_OUTPUT_BYTES {
            stopped_by_bytes = true;
            number -= 1;
            break;
        }
        lossy |= line_lossy;
        out.push_str(&rendered);
        shown_lines += 1;
    }

    if shown_lines == 0 {
        return Err(ToolError::RespondToModel(format!(
            "offset {first} is past the end of `{shown}`, which has {number} lines"
        )));
    }
    let last = first + shown_lines - 1;
    let more = stopped_by_bytes
        || !lines
            .at_end()
            .map_err(|err| io_error("read", shown, &err))?;
    if more {
        let why = if stopped_by_bytes {
            format!("the output cap of {MAX_OUTPUT_BYTES} bytes was reached")
        } else {
            format!("the limit of {limit} lines was reached")
        };
        let _ = writeln!(
            out,
            "[showing lines {first}-{last}: {why}; the file ({size} bytes) continues: call read_file with offset={} to read more]",
            last + 1
        );
    }
    if cut_lines > 0 {
        let _ = writeln!(
            out,
            "[{cut_lines} line(s) longer than {MAX_LINE_BYTES} bytes were cut; use bash (e.g. `cut -c`) to see the rest]"
        );
    }
    if lossy {
        out.push_str("[the file is not valid UTF-8; invalid bytes are shown as U+FFFD]\n");
    }
    Ok(ToolOutput::ok(out))
}
