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
use super::text::{BoundedLines, Line, looks_binary, read_prefix, shown_line};
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Lines shown when the model gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Bytes of one line shown; the rest of a longer line is cut with a note.
pub const MAX_LINE_BYTES: usize = 2000;
/// Bytes of one line shown written out (`\\xNN`), so that it takes at most about
/// [`MAX_LINE_BYTES`] once written.
pub const MAX_ESCAPED_LINE_BYTES: usize = MAX_LINE_BYTES / 4;
/// Bytes of a binary file (a NUL in its start) read at most, whatever its lines.
pub const BINARY_SCAN_BYTES: u64 = 1024 * 1024;
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
         how to read on. A file with NUL bytes or bytes that are not UTF-8 is shown all the \
         same, such bytes written out as \\xNN."
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
        let (root, reach) = (ctx.root.clone(), ctx.reach());
        let cancel = ctx.cancel.clone();
        blocking(move || read(&ConfinedRoot::open(&root, &reach)?, &input, &cancel)).await
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
    let window = Window {
        offset: input.offset,
        limit: input.limit,
    };
    show_lines(shown, size, prefix, file, window, cancel)
}

/// The lines a model asked for: `offset` (1-based) and `limit`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Window {
    pub(crate) offset: Option<u64>,
    pub(crate) limit: Option<u64>,
}

/// A file's lines in `window`, numbered like `cat -n`, with the notes on what was cut or
/// written out: from `prefix` (its first bytes, [`read_prefix`]) and then `rest`, the
/// file's `size` bytes in all. The one rendering of a file for every reader of one (a
/// worktree's, or a commit's tree).
pub(crate) fn show_lines(
    shown: &str,
    size: u64,
    prefix: Vec<u8>,
    rest: impl Read,
    window: Window,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let binary = looks_binary(&prefix);
    if prefix.is_empty() {
        return Ok(ToolOutput::ok(format!("`{shown}` is empty (0 bytes)")));
    }

    let first = window.offset.unwrap_or(1).max(1);
    let limit = window.limit.unwrap_or(DEFAULT_LIMIT).max(1);
    // Lines mean little in a binary file, and one can be a single 2 GB line: its start
    // is what a model can use.
    let scanned = if binary { BINARY_SCAN_BYTES } else { u64::MAX };
    let reader = BufReader::with_capacity(64 * 1024, Cursor::new(prefix).chain(rest).take(scanned));
    let mut lines = BoundedLines::new(reader, MAX_LINE_BYTES);
    let mut number = 0u64;
    let mut out = String::new();
    let mut shown_lines = 0u64;
    let mut cut_lines = 0u64;
    let mut escaped = Vec::new();
    let mut saw_nul = false;
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
        let (rendered, line_escaped, line_cut) = render(shown, number, &line);
        if shown_lines > 0 && out.len() + rendered.len() > MAX_OUTPUT_BYTES {
            stopped_by_bytes = true;
            number -= 1;
            break;
        }
        if line_escaped {
            escaped.push(number);
            saw_nul |= line.bytes.contains(&0);
        }
        cut_lines += u64::from(line_cut);
        out.push_str(&rendered);
        shown_lines += 1;
    }

    if shown_lines == 0 {
        return Err(ToolError::RespondToModel(format!(
            "offset {first} is past the end of `{shown}`, which has {number} lines"
        )));
    }
    let last = first + shown_lines - 1;
    let at_end = lines
        .at_end()
        .map_err(|err| io_error("read", shown, &err))?;
    let more = stopped_by_bytes || !at_end;
    if at_end && size > scanned {
        let _ = writeln!(
            out,
            "[`{shown}` is binary: only its first {BINARY_SCAN_BYTES} of {size} bytes are read \
             here; use bash (e.g. `xxd -s OFFSET -l 512`) for the rest]"
        );
    }
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
    out.push_str(&cut_and_escaped_notes(
        shown, binary, saw_nul, cut_lines, &escaped,
    ));
    Ok(ToolOutput::ok(out))
}

/// Line `number` of `shown` as shown (numbered, ending in a newline), whether it was
/// written out byte for byte, and whether it was cut.
fn render(shown: &str, number: u64, line: &Line) -> (String, bool, bool) {
    let (mut text, escaped, mut dropped) = shown_line(&line.bytes, line.cut_bytes > 0);
    // Written out, a byte takes up to four: the line's cap holds for what is shown.
    if escaped && line.bytes.len() > MAX_ESCAPED_LINE_BYTES {
        let shorter = shown_line(&line.bytes[..MAX_ESCAPED_LINE_BYTES], true);
        text = shorter.0;
        dropped = shorter.2 + line.bytes.len() - MAX_ESCAPED_LINE_BYTES;
    }
    let cut = line.cut_bytes + dropped as u64;
    let mut rendered = format!("{number:>6}\t{text}");
    if cut > 0 {
        // Where to read on, as the end marker says: offset and limit count lines, so the
        // rest of one line is a byte range of it.
        let from = line.bytes.len() as u64 + line.cut_bytes - cut + 1;
        let _ = write!(
            rendered,
            " … [{cut} more bytes on this line: bash `sed -n {number}p {} | cut -b {from}-` \
             shows them]",
            crate::text::shell_quote(shown)
        );
    }
    rendered.push('\n');
    (rendered, escaped, cut > 0)
}

/// The notes on lines cut and lines written out byte for byte; empty when none was.
fn cut_and_escaped_notes(
    shown: &str,
    binary: bool,
    saw_nul: bool,
    cut_lines: u64,
    escaped: &[u64],
) -> String {
    let mut out = String::new();
    if cut_lines > 0 {
        let written_out = if escaped.is_empty() {
            String::new()
        } else {
            format!(" ({MAX_ESCAPED_LINE_BYTES} when written out)")
        };
        let _ = writeln!(
            out,
            "[{cut_lines} line(s) longer than {MAX_LINE_BYTES} bytes{written_out} were cut; use bash (e.g. `cut -c`) to see the rest]"
        );
    }
    if !escaped.is_empty() {
        let holds = match (binary, saw_nul) {
            (true, _) => "NUL bytes, so git calls it binary",
            (false, true) => "NUL bytes",
            (false, false) => "bytes that are not UTF-8",
        };
        let _ = writeln!(
            out,
            "[`{shown}` holds {holds}; {} written out: a control character or a byte that \
             is not UTF-8 as \\xNN, a backslash as \\\\]",
            escaped_lines(escaped),
        );
    }
    out
}

/// Which lines were written out: `line 3`, `lines 3, 7 and 9`, or the first ten and a count.
fn escaped_lines(numbers: &[u64]) -> String {
    const LISTED: usize = 10;
    let listed: Vec<String> = numbers.iter().take(LISTED).map(u64::to_string).collect();
    match (numbers.len(), listed.split_last()) {
        (_, Some((only, []))) => format!("line {only} is"),
        (n, Some((last, rest))) if n <= LISTED => {
            format!("lines {} and {last} are", rest.join(", "))
        }
        (n, _) => format!("lines {} and {} more are", listed.join(", "), n - LISTED),
    }
}
