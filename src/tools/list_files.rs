//! `list_files {path?}`: the files under a directory, recursively, as the project sees them.
//!
//! This tool owns listing. It respects .gitignore (also before `git init`), never lists
//! `.git`, does not follow symlinks, sorts, and caps the list with a count of what was
//! left out. It must never read file contents.

use std::fmt::Write as _;
use std::ops::ControlFlow;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::confine::{ConfinedRoot, blocking};
use super::walk::{Start, resolve_start, walk};
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Paths shown in one result.
pub const MAX_LISTED: usize = 1000;

/// Lists files recursively.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListFiles;

#[derive(Debug, Deserialize)]
struct Input {
    path: Option<String>,
}

#[async_trait]
impl Tool for ListFiles {
    fn name(&self) -> &'static str {
        "list_files"
    }

    fn description(&self) -> &str {
        "List the files under `path` (default: the worktree root), recursively, sorted, as \
         paths relative to the worktree root. Files ignored by .gitignore and the .git \
         directory are left out; long listings are cut with a count of what was left out."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the worktree root (default: the root)."}
            }
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self, input)?;
        let (root, reach) = (ctx.root.clone(), ctx.reach());
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let shown = input.path.as_deref().unwrap_or(".");
            list(&ConfinedRoot::open(&root, &reach)?, shown, &cancel)
        })
        .await
    }
}

fn list(
    confined: &ConfinedRoot,
    shown: &str,
    cancel: &CancellationToken,
) -> Result<ToolOutput, ToolError> {
    let start = match resolve_start(confined, shown, "list")? {
        Start::File(file) => return Ok(ToolOutput::ok(format!("{}\n", display(&file)))),
        Start::Dir(start) => start,
    };
    let mut out = String::new();
    let mut listed = 0usize;
    let mut left_out = 0u64;
    let stats = walk(confined, &start, cancel, |entry| {
        if listed < MAX_LISTED {
            out.push_str(&display(&entry.path));
            if entry.is_symlink {
                out.push_str(" (symlink)");
            }
            out.push('\n');
            listed += 1;
        } else {
            left_out += 1;
        }
        ControlFlow::Continue(())
    })?;
    if listed == 0 {
        let _ = writeln!(
            out,
            "[no files under `{shown}` (ignored files and .git are not listed)]"
        );
    }
    if left_out > 0 {
        let _ = writeln!(
            out,
            "[{left_out} more files not shown; list a subdirectory to see them]"
        );
    }
    if stats.unreadable > 0 {
        let _ = writeln!(out, "[{} entries could not be read]", stats.unreadable);
    }
    Ok(ToolOutput::ok(out))
}

/// A root-relative path as the model should write it back (always `/`-separated on Unix).
fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}
