//! `edit_file {path, old_string, new_string, replace_all?}`: exact-text replacement.
//!
//! This tool owns in-place edits. The match is exact (no regex, no whitespace folding);
//! a missing, empty or ambiguous `old_string` is an error the model can fix, and the
//! result says how many replacements were made. It must never write a file it could not
//! read whole, or write outside the root.

use std::io::Read as _;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::{Access, ConfinedRoot, blocking, io_error, open_file};
use super::scope::WriteScope;
use super::write_file::write;
use super::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// Largest file edit_file will load; a bigger one is refused, never half-edited.
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// Replaces exact text in a file.
#[derive(Debug, Clone, Default)]
pub struct EditFile {
    /// The files it may change; `None`: any file in the root.
    scope: Option<Arc<WriteScope>>,
}

impl EditFile {
    /// The tool, changing only files `scope` matches.
    pub fn scoped(scope: Arc<WriteScope>) -> Self {
        Self { scope: Some(scope) }
    }
}

#[derive(Debug, Deserialize)]
struct Input {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: Option<bool>,
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &'static str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace the exact text `old_string` with `new_string` in the file at `path`. \
         `old_string` must occur exactly once (include enough surrounding lines to make it \
         unique) unless `replace_all` is true, which replaces every occurrence."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the worktree root."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put in its place."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
            },
            "required": ["path", "old_string", "new_string"]
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
            edit(
                &ConfinedRoot::open(&root, &reach)?,
                &input,
                scope.as_deref(),
            )
        })
        .await
    }
}

fn edit(
    confined: &ConfinedRoot,
    input: &Input,
    scope: Option<&WriteScope>,
) -> Result<ToolOutput, ToolError> {
    let shown = input.path.as_str();
    if input.old_string.is_empty() {
        return Err(ToolError::RespondToModel(
            "`old_string` is empty; give the exact text to replace (use write_file to create a file)"
                .to_owned(),
        ));
    }
    if input.old_string == input.new_string {
        return Err(ToolError::RespondToModel(
            "`old_string` and `new_string` are identical; nothing would change".to_owned(),
        ));
    }
    let relative = confined.relative(shown)?;
    // Refused before the file is read: the model learns of its scope at once.
    if let Some(scope) = scope {
        scope.check(confined, &relative, shown)?;
    }
    let file = open_file(confined, &relative, shown, "edit", Access::Read)?;
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| io_error("edit", shown, &err))?;
    if bytes.len() as u64 > MAX_EDIT_BYTES {
        return Err(ToolError::RespondToModel(format!(
            "cannot edit `{shown}`: it is larger than {MAX_EDIT_BYTES} bytes; use bash for this file"
        )));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(ToolError::RespondToModel(format!(
            "cannot edit `{shown}`: it is not valid UTF-8 text; use write_file or bash"
        )));
    };
    let found = text.matches(input.old_string.as_str()).count();
    let replace_all = input.replace_all.unwrap_or(false);
    let edited = match found {
        0 => {
            return Err(ToolError::RespondToModel(format!(
                "`old_string` was not found in `{shown}`; it must match the file exactly, \
                 including whitespace and indentation (read the file again to check)"
            )));
        }
        1 => text.replacen(input.old_string.as_str(), &input.new_string, 1),
        _ if replace_all => text.replace(input.old_string.as_str(), &input.new_string),
        _ => {
            return Err(ToolError::RespondToModel(format!(
                "`old_string` was found {found} times in `{shown}`; include more surrounding \
                 text to make it unique, or set replace_all to true to replace all {found}"
            )));
        }
    };
    write(confined, shown, edited.as_bytes(), scope)?;
    let noun = if found == 1 {
        "replacement"
    } else {
        "replacements"
    };
    Ok(ToolOutput::ok(format!("edited `{shown}`: {found} {noun}")))
}
