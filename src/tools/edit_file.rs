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
    let mut result = format!("edited `{shown}`: {found} {noun}");
    if found > 1 {
        result.push_str(&replaced_lines(&text, &input.old_string, &input.new_string));
    }
    // The first replacement starts where the first match did, in both texts.
    if let Some(at) = text.find(input.old_string.as_str()) {
        let first = if found == 1 {
            ""
        } else {
            "the first replacement, "
        };
        result.push_str(&format!(
            "; {first}as the file now reads:\n{}",
            edited_lines(&edited, at, &input.new_string)
        ));
    }
    Ok(ToolOutput::ok(result))
}

/// At most this many lines of a `replace_all` edit are listed.
const LISTED_LINES: usize = 40;

/// Where each replacement of a `replace_all` edit starts in the edited file, as line
/// numbers, so the model can check every one without reading the file again.
fn replaced_lines(text: &str, old: &str, new: &str) -> String {
    let mut lines = Vec::new();
    let mut line = 1;
    let mut read = 0;
    for (index, (at, _)) in text.match_indices(old).enumerate() {
        line += text[read..at].matches('\n').count();
        read = at;
        // Every replacement before this one changed the line count by the same amount.
        let shift = index * new.matches('\n').count();
        lines.push(line - index * old.matches('\n').count() + shift);
    }
    let more = lines.len().saturating_sub(LISTED_LINES);
    let listed: Vec<String> = lines
        .iter()
        .take(LISTED_LINES)
        .map(ToString::to_string)
        .collect();
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(" (at lines {}{tail} of the edited file)", listed.join(", "))
}

/// Lines of context shown around an edit, before and after.
const CONTEXT_LINES: usize = 3;
/// At most this many lines of an edit are shown, context included.
const SHOWN_LINES: usize = 30;
/// A shown line longer than this is cut.
const SHOWN_LINE_CHARS: usize = 240;

/// The lines of `edited` that hold `new` (inserted at byte `at`) with a few lines of
/// context, numbered as `read_file` numbers them; bounded, with a note of what is left.
fn edited_lines(edited: &str, at: usize, new: &str) -> String {
    let start = edited[..at].matches('\n').count();
    // A replacement that ends its last line spans no line after it.
    let end = start + new.strip_suffix('\n').unwrap_or(new).matches('\n').count();
    let from = start.saturating_sub(CONTEXT_LINES);
    let to = end + CONTEXT_LINES;
    let mut out = String::new();
    let lines = edited.lines().enumerate().skip(from).take(to + 1 - from);
    for (shown, (index, line)) in lines.enumerate() {
        if shown == SHOWN_LINES {
            out.push_str(&format!(
                "[… more of the edit follows; read_file with offset={} shows it]\n",
                index + 1
            ));
            break;
        }
        let cut: String = line.chars().take(SHOWN_LINE_CHARS).collect();
        let more = if cut.len() < line.len() { " …" } else { "" };
        out.push_str(&format!("{:>6}\t{cut}{more}\n", index + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::replaced_lines;

    #[test]
    fn each_replacement_is_listed_at_its_line_in_the_edited_file() {
        let text = "a\nX\nb\nX\nX\n";
        assert_eq!(
            replaced_lines(text, "X", "Y\nY"),
            " (at lines 2, 5, 7 of the edited file)",
            "a replacement that adds a line moves every later one down a line"
        );
        assert_eq!(
            replaced_lines("X\nX\nc\nX\nX\n", "X\nX\n", "Z"),
            " (at lines 1, 2 of the edited file)",
            "a replacement that removes lines moves later ones up"
        );
        let many = "X\n".repeat(45);
        assert!(
            replaced_lines(&many, "X", "Y").ends_with("40 and 5 more of the edited file)"),
            "the list is bounded and says how many it left out"
        );
    }
}
