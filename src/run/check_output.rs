//! The reviewer's `check_output {offset?}` tool: the whole output of the check on the
//! diff it reviews, a page at a time.
//!
//! Its first message holds only the failures and the final lines of the output
//! ([`digest`](crate::run::check::digest)); this tool reads the rest from the file grove
//! kept in the run's folder. It reads that one file, never a path the model names, and
//! quotes the output as command output is quoted everywhere: in a fence no line of it can
//! close.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::text::fenced;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// How many lines one call shows.
pub(crate) const PAGE_LINES: usize = 400;
/// How many characters one call shows at most (a page of very long lines).
const PAGE_CHARS: usize = 24_000;

/// The `check_output` tool of one review: the output file of the check on its diff.
pub(crate) struct CheckOutput {
    path: PathBuf,
}

impl CheckOutput {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path }
    }
}

#[derive(Deserialize)]
struct PageInput {
    #[serde(default)]
    offset: Option<usize>,
}

#[async_trait]
impl Tool for CheckOutput {
    fn name(&self) -> &'static str {
        "check_output"
    }

    fn description(&self) -> &str {
        "Read the whole output of the project's check on this diff, 400 lines at a time: \
         `offset` is the 1-based first line (default 1). Your first message shows only its \
         failures and its last lines."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."}
            }
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: PageInput = parse_input(self, input)?;
        let output = tokio::fs::read(&self.path).await.map_err(|error| {
            ToolError::RespondToModel(format!(
                "the check's output is not kept for this review ({error}); your first \
                 message has its failures and last lines"
            ))
        })?;
        Ok(ToolOutput::ok(page(
            &String::from_utf8_lossy(&output),
            input.offset.unwrap_or(1),
        )))
    }
}

/// Lines `first`.. of `output` (1-based), up to a page, fenced, and how to read on.
fn page(output: &str, first: usize) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let total = lines.len();
    let first = first.max(1);
    if first > total.max(1) {
        return format!("offset {first} is past the end: the output has {total} lines\n");
    }
    let mut shown = String::new();
    let mut last = first - 1;
    for line in lines.iter().skip(first - 1).take(PAGE_LINES) {
        if !shown.is_empty() && shown.len() + line.len() > PAGE_CHARS {
            break;
        }
        shown.push_str(line);
        shown.push('\n');
        last += 1;
    }
    let mut text = format!(
        "the check's output, lines {first}-{last} of {total}:\n{}",
        fenced("text", &shown)
    );
    if last < total {
        text.push_str(&format!(
            "the output goes on: call check_output with offset={}\n",
            last + 1
        ));
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_page_says_where_it_is_and_how_to_read_on() {
        let output: String = (1..=500).map(|n| format!("line {n}\n")).collect();

        let first = page(&output, 1);
        let second = page(&output, 401);

        assert_eq!(
            (
                first.lines().next().unwrap(),
                first.lines().last().unwrap(),
                second.lines().next().unwrap(),
                second.lines().last().unwrap(),
            ),
            (
                "the check's output, lines 1-400 of 500:",
                "the output goes on: call check_output with offset=401",
                "the check's output, lines 401-500 of 500:",
                "```",
            ),
            "each page names its lines; only a page with more after it says how to read on"
        );
    }
}
