//! `write_file {path, content}`: creates or overwrites a file, with its parent directories.
//!
//! This tool owns whole-file writes. Parent directories are created beneath the root only;
//! a write through a symlink that leads outside is refused at open time. It must never
//! write anywhere but the confined path.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::{Access, ConfinedRoot, blocking, io_error, open_file};
use super::scope::WriteScope;
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Writes a whole file.
#[derive(Debug, Clone, Default)]
pub struct WriteFile {
    /// The files it may write; `None`: any file in the root.
    scope: Option<Arc<WriteScope>>,
}

impl WriteFile {
    /// The tool, writing only files `scope` matches.
    pub fn scoped(scope: Arc<WriteScope>) -> Self {
        Self { scope: Some(scope) }
    }
}

#[derive(Debug, Deserialize)]
struct Input {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Write `content` to the file at `path` in the worktree, replacing it if it exists. \
         Missing parent directories are created. Prefer edit_file for changing part of an \
         existing file."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the worktree root."},
                "content": {"type": "string", "description": "The complete new contents of the file."}
            },
            "required": ["path", "content"]
        })
    }

    fn mutates(&self) -> bool {
        true
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(self, input)?;
        let (root, reach) = (ctx.root.clone(), ctx.reach());
        let scope = self.scope.clone();
        blocking(move || {
            let confined = ConfinedRoot::open(&root, &reach)?;
            let existed = write(
                &confined,
                &input.path,
                input.content.as_bytes(),
                scope.as_deref(),
            )?;
            let verb = if existed { "overwrote" } else { "created" };
            Ok(ToolOutput::ok(format!(
                "{verb} `{}` ({} bytes)",
                input.path,
                input.content.len()
            )))
        })
        .await
    }
}

/// Writes `contents` to the model's `path`, creating parents, when `scope` (if any)
/// allows it; returns whether the file existed before.
pub(crate) fn write(
    confined: &ConfinedRoot,
    shown: &str,
    contents: &[u8],
    scope: Option<&WriteScope>,
) -> Result<bool, ToolError> {
    let relative = confined.relative(shown)?;
    if relative == Path::new(".") {
        return Err(ToolError::RespondToModel(format!(
            "`{shown}` is the worktree root, not a file"
        )));
    }
    // The worktree's `.git` points git at its admin dir; a planted one (or a nested git
    // dir, under any spelling or through a link) could send a later `git` run to hooks
    // of the model's making.
    confined.refuse_git_dir(&relative, shown)?;
    if let Some(scope) = scope {
        scope.check(confined, &relative, shown)?;
    }
    if let Some(parent) = relative
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        ensure_directory(confined, parent, shown)?;
    }
    let existed = match confined.dir().metadata(&relative) {
        Ok(_) => true,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
        Err(err) => return Err(io_error("write", shown, &err)),
    };
    let mut file = open_file(confined, &relative, shown, "write", Access::Write)?;
    file.write_all(contents)
        .and_then(|()| file.flush())
        .map_err(|err| io_error("write", shown, &err))?;
    Ok(existed)
}

/// Makes sure `parent` (root-relative) is a directory beneath the root, creating it and
/// its ancestors when missing.
fn ensure_directory(confined: &ConfinedRoot, parent: &Path, shown: &str) -> Result<(), ToolError> {
    let action = "create the directories for";
    match confined.dir().metadata(parent) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(ToolError::RespondToModel(format!(
            "cannot write `{shown}`: `{}` is not a directory",
            parent.display()
        ))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            confined.dir().create_dir_all(parent).map_err(|err| {
                // "already exists" hides the real reason (e.g. a symlink that leads
                // outside, or a file in the way); ask again to report that.
                match confined.dir().metadata(parent) {
                    Err(real) => io_error(action, shown, &real),
                    Ok(_) => io_error(action, shown, &err),
                }
            })
        }
        Err(err) => Err(io_error(action, shown, &err)),
    }
}
