//! The lead's read-only tools on the live result: `read_file`, `list_files` and `grep`
//! read the run's result as it is at each call (the base plus every subtask merged so
//! far) straight from git objects, and each answer says which commit it shows.
//!
//! This file owns that view. It needs no checkout (a lead with a `setup` command made a
//! full one before), renders files, listings and matches as the worktree tools do, and
//! must never write, nor resolve a path outside the tree.

use std::io::Cursor;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::grep::{Search, compile, finish, search_file};
use super::list_files::MAX_LISTED;
use super::read_file::{Window, show_lines};
use super::text::SNIFF_BYTES;
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};
use crate::git::{CommitId, Repo, SnapshotEntry, TreeSnapshot, trailers};
use crate::text::quoted_path;

/// Where the lead's tools read: the ref of the run's result, which moves as subtasks
/// merge, over the run's base.
#[derive(Debug, Clone)]
pub struct LiveTree {
    repo: Repo,
    /// The run's result ref; `None` for the base alone (a dry run, which merges nothing).
    reference: Option<String>,
    base: CommitId,
}

impl LiveTree {
    /// The view of `reference` (the run's result) over `base`.
    pub fn new(repo: Repo, reference: String, base: CommitId) -> Arc<Self> {
        Arc::new(Self {
            repo,
            reference: Some(reference),
            base,
        })
    }

    /// The view of `base` alone.
    pub fn base(repo: Repo, base: CommitId) -> Arc<Self> {
        Arc::new(Self {
            repo,
            reference: None,
            base,
        })
    }

    /// The result as it is now, and the line that says so to the model.
    fn now(&self) -> Result<(TreeSnapshot, String), ToolError> {
        let fatal = |error: crate::git::GitError| ToolError::Fatal(error.to_string());
        let tip = match &self.reference {
            Some(reference) => self.repo.ref_target(reference).map_err(fatal)?,
            None => None,
        }
        .unwrap_or(self.base);
        let snapshot = self.repo.snapshot(tip).map_err(fatal)?;
        let holds = what_it_holds(&self.repo, tip, self.base)
            .map_err(|error| ToolError::Fatal(error.to_string()))?;
        let short: String = tip.to_string().chars().take(10).collect();
        let heading = format!("[the run's result at {short}: {holds}]\n");
        Ok((snapshot, heading))
    }
}

/// What the result at `tip` holds over `base`, for a model: `the base, nothing merged
/// yet`, or `the base with S1, S3 merged` (from the result's own merge commits, in
/// subtask order).
pub fn what_it_holds(
    repo: &Repo,
    tip: CommitId,
    base: CommitId,
) -> Result<String, crate::git::AdvanceError> {
    if tip == base {
        return Ok("the base, nothing merged yet".to_owned());
    }
    let mut merged: Vec<String> = repo
        .first_parent_commits("the run's result", tip, base)?
        .iter()
        .filter_map(|commit| trailers::merged_subtask(&commit.message))
        .collect();
    // Merged in the order their reviews ended; named in the order they were delegated.
    merged.sort_by_key(|label| {
        label
            .strip_prefix('S')
            .and_then(|number| number.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    });
    Ok(if merged.is_empty() {
        "the base, nothing merged yet".to_owned()
    } else {
        format!("the base with {} merged", merged.join(", "))
    })
}

/// The lead's read-only tools on `live`: `read_file`, `list_files`, `grep`.
pub fn read_only(live: &Arc<LiveTree>) -> super::Registry {
    super::Registry::new()
        .with(Arc::new(ResultReadFile(Arc::clone(live))))
        .with(Arc::new(ResultListFiles(Arc::clone(live))))
        .with(Arc::new(ResultGrep(Arc::clone(live))))
}

/// `path` as the model gave it, as a path of the tree (`""` for the root); a path that
/// would leave it is refused.
fn tree_path(path: &str) -> Result<String, ToolError> {
    let trimmed = path.trim();
    if trimmed.starts_with('/') {
        return Err(ToolError::RespondToModel(format!(
            "`{trimmed}` is absolute; paths are relative to the repository's root"
        )));
    }
    let mut parts = Vec::new();
    for part in trimmed.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(ToolError::RespondToModel(format!(
                    "`{trimmed}` leaves the repository: `..` is not allowed"
                )));
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

/// Runs `work` on the result as it is now, off the async threads, and puts the line that
/// names the commit first in its answer.
async fn on_result(
    tree: &Arc<LiveTree>,
    work: impl FnOnce(&TreeSnapshot) -> Result<ToolOutput, ToolError> + Send + 'static,
) -> Result<ToolOutput, ToolError> {
    let tree = Arc::clone(tree);
    tokio::task::spawn_blocking(move || {
        let (snapshot, heading) = tree.now()?;
        let mut output = work(&snapshot)?;
        output.content.insert_str(0, &heading);
        Ok(output)
    })
    .await
    .map_err(|error| ToolError::Fatal(format!("a read of the result stopped: {error}")))?
}

fn read_error(error: crate::git::GitError) -> ToolError {
    ToolError::RespondToModel(error.to_string())
}

/// `read_file` on the run's result.
#[derive(Debug, Clone)]
pub struct ResultReadFile(pub Arc<LiveTree>);

#[derive(Debug, Deserialize)]
struct ReadInput {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

#[async_trait]
impl Tool for ResultReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a file of the run's result: the base plus every subtask merged so far (the \
         first line of the answer names the commit). Lines are numbered from 1 like `cat -n`; \
         `offset` (the 1-based first line) and `limit` (number of lines, default 2000) page \
         through long files."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the repository's root."},
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
        let input: ReadInput = parse_input(self, input)?;
        let path = tree_path(&input.path)?;
        let cancel = ctx.cancel.clone();
        on_result(&self.0, move |snapshot| {
            let shown = quoted_path(&path).into_owned();
            let content = match snapshot.entry(&path).map_err(read_error)? {
                SnapshotEntry::File(content) => content,
                SnapshotEntry::Dir => {
                    return Err(ToolError::RespondToModel(format!(
                        "`{shown}` is a directory; use list_files"
                    )));
                }
                SnapshotEntry::Link(target) => {
                    return Ok(ToolOutput::ok(format!(
                        "`{shown}` is a symlink to `{}`\n",
                        quoted_path(&target)
                    )));
                }
                SnapshotEntry::Submodule(commit) => {
                    return Ok(ToolOutput::ok(format!(
                        "`{shown}` is a submodule at commit {commit}\n"
                    )));
                }
                SnapshotEntry::Missing => {
                    return Err(ToolError::RespondToModel(format!(
                        "`{shown}` is not in the run's result"
                    )));
                }
            };
            let size = content.len() as u64;
            let split = content.len().min(SNIFF_BYTES);
            let (prefix, rest) = content.split_at(split);
            let window = Window {
                offset: input.offset,
                limit: input.limit,
            };
            show_lines(
                &shown,
                size,
                prefix.to_vec(),
                Cursor::new(rest),
                window,
                &cancel,
            )
        })
        .await
    }
}

/// `list_files` on the run's result.
#[derive(Debug, Clone)]
pub struct ResultListFiles(pub Arc<LiveTree>);

#[derive(Debug, Deserialize)]
struct ListInput {
    path: Option<String>,
}

#[async_trait]
impl Tool for ResultListFiles {
    fn name(&self) -> &'static str {
        "list_files"
    }

    fn description(&self) -> &str {
        "List the files of the run's result (the base plus every subtask merged so far) \
         under `path` (default: the root), recursively, sorted; long listings are cut with a \
         count of what was left out."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the repository's root (default: the root)."}
            }
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: ListInput = parse_input(self, input)?;
        let path = tree_path(input.path.as_deref().unwrap_or("."))?;
        on_result(&self.0, move |snapshot| {
            match snapshot.entry(&path).map_err(read_error)? {
                SnapshotEntry::Dir => {}
                SnapshotEntry::Missing => {
                    return Err(ToolError::RespondToModel(format!(
                        "`{}` is not in the run's result",
                        quoted_path(&path)
                    )));
                }
                _ => return Ok(ToolOutput::ok(format!("{}\n", quoted_path(&path)))),
            }
            let (mut out, mut listed, mut left_out) = (String::new(), 0usize, 0u64);
            snapshot
                .walk(&path, |file, link| {
                    if listed < MAX_LISTED {
                        out.push_str(&quoted_path(file));
                        out.push_str(if link { " (symlink)\n" } else { "\n" });
                        listed += 1;
                    } else {
                        left_out += 1;
                    }
                    ControlFlow::Continue(())
                })
                .map_err(read_error)?;
            if listed == 0 {
                out.push_str(&format!("[no files under `{}`]\n", quoted_path(&path)));
            }
            if left_out > 0 {
                out.push_str(&format!(
                    "[{left_out} more files not shown; list a subdirectory to see them]\n"
                ));
            }
            Ok(ToolOutput::ok(out))
        })
        .await
    }
}

/// `grep` on the run's result.
#[derive(Debug, Clone)]
pub struct ResultGrep(pub Arc<LiveTree>);

#[derive(Debug, Deserialize)]
struct GrepInput {
    pattern: String,
    path: Option<String>,
}

#[async_trait]
impl Tool for ResultGrep {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search the text files of the run's result (the base plus every subtask merged so \
         far) under `path` (default: the root; a file is fine too) for lines matching the \
         regular expression `pattern` (Rust regex syntax). Prints `path:line:text`; binary \
         files are skipped, long lines truncated and the result capped."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression (Rust regex syntax)."},
                "path": {"type": "string", "description": "File or directory relative to the repository's root (default: the root)."}
            },
            "required": ["pattern"]
        })
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: GrepInput = parse_input(self, input)?;
        let regex = compile(&input.pattern)?;
        let shown = input.path.clone().unwrap_or_else(|| ".".to_owned());
        let path = tree_path(&shown)?;
        let cancel = ctx.cancel.clone();
        on_result(&self.0, move |snapshot| {
            let mut state = Search::default();
            match snapshot.entry(&path).map_err(read_error)? {
                SnapshotEntry::Dir => snapshot
                    .walk(&path, |file, link| {
                        if !link {
                            search_one(snapshot, file, &regex, &cancel, &mut state);
                        }
                        if state.full || cancel.is_cancelled() {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })
                    .map_err(read_error)?,
                SnapshotEntry::Missing => {
                    return Err(ToolError::RespondToModel(format!(
                        "`{}` is not in the run's result",
                        quoted_path(&path)
                    )));
                }
                _ => search_one(snapshot, &path, &regex, &cancel, &mut state),
            }
            finish(state, &regex, &shown, &cancel)
        })
        .await
    }
}

/// Searches the file `path` of `snapshot` into `state` (a symlink or submodule is no
/// file, and is skipped).
fn search_one(
    snapshot: &TreeSnapshot,
    path: &str,
    regex: &regex::bytes::Regex,
    cancel: &tokio_util::sync::CancellationToken,
    state: &mut Search,
) {
    match snapshot.file(path) {
        Ok(Some(content)) => {
            if search_file(Cursor::new(content), Path::new(path), regex, cancel, state).is_err() {
                state.unreadable += 1;
            }
        }
        Ok(None) => {}
        Err(_) => state.unreadable += 1,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_the_trees_or_refused() {
        assert_eq!(tree_path("./src//lib.rs/").unwrap(), "src/lib.rs");
        assert_eq!(tree_path(".").unwrap(), "");
        for escape in ["../secret", "src/../../x", "/etc/passwd"] {
            assert!(
                matches!(tree_path(escape), Err(ToolError::RespondToModel(_))),
                "{escape} never leaves the tree"
            );
        }
    }
}
