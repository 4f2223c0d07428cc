//! Tools the models call: one registry, one dispatcher, one file per tool.
//!
//! This module owns what a tool may touch. Every path a tool receives is confined to the
//! context's root; the dispatcher refuses any tool outside the role's allow-list, even if
//! the model names it. It knows nothing of model wire formats, git, or the agent loop.

mod bash;
mod confine;
mod edit_file;
pub mod exec;
pub mod git_pointer;
mod grep;
mod list_files;
pub(crate) mod pid_namespace;
mod read_file;
pub mod result_cap;
pub mod result_tree;
mod run_command;
pub mod sandbox;
pub mod scope;
mod text;
pub mod tree;
mod walk;
mod write_file;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use bash::{Bash, exited_non_zero};
pub use edit_file::EditFile;
pub use exec::{
    CommandExecutor, DiskOverBudget, ExecError, ExecOutcome, ExecRequest, ExecResult,
    LocalExecutor, OutputCap, SetupPolicy,
};
pub use grep::Grep;
pub use list_files::ListFiles;
pub use read_file::ReadFile;
pub use run_command::RunCommand;
pub use scope::WriteScope;
pub use write_file::WriteFile;

/// Everything a tool run may use.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The directory every path is confined to (a worktree). Canonical.
    pub root: PathBuf,
    /// Cancelled when the subagent stops; long-running tools must honour it.
    pub cancel: CancellationToken,
    /// The tree `root` is, when it is not a plain directory (a copy-on-write tree): how
    /// grove's file tools reach it and where its commands run. Handed to the tool with
    /// every call, never looked up by path.
    pub tree: Option<Arc<dyn tree::TreeAccess>>,
    /// The id of the model's call this run answers, set by the agent loop for each call:
    /// a tool whose answer must be the same after a resume (the lead's `wait`) journals
    /// it under that id.
    pub call_id: Option<String>,
}

impl ToolContext {
    /// A context for the plain directory `root`.
    pub fn plain(root: PathBuf, cancel: CancellationToken) -> Self {
        Self {
            root,
            cancel,
            tree: None,
            call_id: None,
        }
    }

    /// Where grove's own process reaches the root: the root itself, or the tree host's
    /// view of a copy-on-write tree.
    pub fn reach(&self) -> PathBuf {
        self.tree
            .as_ref()
            .map_or_else(|| self.root.clone(), |tree| tree.root_for_grove())
    }

    /// The executor a command in the root runs through, made from `base` (its
    /// confinement and environment): `base` itself for a plain directory.
    pub fn executor(
        &self,
        base: &Arc<dyn CommandExecutor>,
    ) -> Result<Arc<dyn CommandExecutor>, ExecError> {
        tree::in_tree(self.tree.as_deref(), base)
    }
}

/// What a tool returns when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Text for the model.
    pub content: String,
    /// True when the model should read this as a failure (`is_error` tool_result).
    pub is_error: bool,
    /// True when this answer is the agent's last act: the loop ends after the turn
    /// instead of asking the model for another (a reviewer's recorded verdict).
    pub ends_loop: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            ends_loop: false,
        }
    }

    /// A success that ends the agent's loop once its turn is answered: nothing the
    /// model could say after it would change what it did.
    pub fn last(content: impl Into<String>) -> Self {
        Self {
            ends_loop: true,
            ..Self::ok(content)
        }
    }

    /// A failure the model should see and can react to.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            ends_loop: false,
        }
    }
}

/// A tool failure.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model should see this and try something else (bad input, missing file,
    /// path outside the root). Becomes an `is_error` tool_result; the loop goes on.
    #[error("{0}")]
    RespondToModel(String),
    /// The loop itself cannot go on (the worktree vanished, the sandbox failed).
    #[error("{0}")]
    Fatal(String),
}

/// A tool: what the model sees (name, description, schema) next to what it does.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name the model calls it by (a DESIGN.md contract).
    fn name(&self) -> &'static str;
    /// What the model is told the tool does.
    fn description(&self) -> &str;
    /// JSON Schema of the input object.
    fn input_schema(&self) -> Value;
    /// True when running it can change files or the world; such calls run one at a time.
    fn mutates(&self) -> bool;
    /// True when a call may run a second time without harm, should a machine crash lose
    /// the record that it ran: it changes nothing and starts nothing. A turn with any
    /// other call is on disk before its calls run. Defaults to every tool that does not
    /// mutate (`delegate` does not, yet starts a subtask, and says so).
    fn repeatable(&self) -> bool {
        !self.mutates()
    }
    /// Runs the tool with the model's input.
    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// The schema-level description of a tool, for the model client.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The tools one role may call, and the dispatcher that enforces that list.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`, replacing one of the same name.
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.insert(tool.name(), tool);
        self
    }

    /// The tool names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// This registry with its file-writing tools (`write_file`, `edit_file`, where it has
    /// them) confined to `scope`; `bash` is not confined here (a commit outside the scope
    /// is flagged to the reviewer instead).
    pub fn with_write_scope(mut self, scope: &Arc<WriteScope>) -> Self {
        if self.tools.contains_key("write_file") {
            self = self.with(Arc::new(WriteFile::scoped(Arc::clone(scope))));
        }
        if self.tools.contains_key("edit_file") {
            self = self.with(Arc::new(EditFile::scoped(Arc::clone(scope))));
        }
        self
    }

    /// The tool called `name`, if this role has it.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// What the model is shown, sorted by name so requests are byte-stable (prompt cache).
    pub fn descriptions(&self) -> Vec<ToolDescription> {
        self.tools
            .values()
            .map(|tool| ToolDescription {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    /// True when the named tool mutates; unknown tools count as mutating so they are
    /// never run concurrently with anything.
    pub fn mutates(&self, name: &str) -> bool {
        self.tools.get(name).is_none_or(|tool| tool.mutates())
    }

    /// True when every call in `calls` (tool names) is to a tool of this role that is
    /// [`Tool::repeatable`]; an unknown tool is not.
    pub fn all_repeatable<'a>(&self, calls: impl IntoIterator<Item = &'a str>) -> bool {
        calls
            .into_iter()
            .all(|name| self.tools.get(name).is_some_and(|tool| tool.repeatable()))
    }

    /// Runs the tool `name` with `input` if this role has it.
    ///
    /// Unknown or disallowed tools and invalid input come back as an error output for
    /// the model; only [`ToolError::Fatal`] escapes.
    pub async fn dispatch(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let Some(tool) = self.tools.get(name) else {
            return Ok(ToolOutput::error(format!(
                "tool `{name}` is not available to you; your tools are: {}",
                self.names().join(", ")
            )));
        };
        if !input.is_object() {
            // A client keeps arguments that are not an object as the model's raw text.
            let (shown, problem) = match &input {
                Value::String(raw) => match serde_json::from_str::<Value>(raw) {
                    Ok(value) => (raw.clone(), format!("it is {}", json_kind(&value))),
                    Err(error) => (raw.clone(), format!("it is not valid JSON: {error}")),
                },
                other => (other.to_string(), format!("it is {}", json_kind(other))),
            };
            return Ok(ToolOutput::error(format!(
                "the input to `{name}` must be a JSON object matching its schema ({problem}); \
                 got: {}",
                crate::text::truncate(&shown, 200)
            )));
        }
        // A tree on another machine: its grove runs the built-in tool there (and keeps
        // its `.git` pointer); grove's other tools (a verdict, a delegation) stay here.
        if let Some(remote) = ctx.tree.as_deref().and_then(|tree| tree.remote_tools())
            && BUILTIN_NAMES.contains(&name)
        {
            return remote.call(name, input, &ctx.cancel).await;
        }
        // Whatever a tool did, the worktree's `.git` pointer is the one grove made.
        let pointer = tool
            .mutates()
            .then(|| git_pointer::GitPointer::snapshot(&ctx.reach()));
        let mut output = match tool.run(input, ctx).await {
            Ok(output) => output,
            Err(ToolError::RespondToModel(message)) => ToolOutput::error(message),
            Err(fatal @ ToolError::Fatal(_)) => return Err(fatal),
        };
        if let Some(note) = pointer.and_then(|pointer| pointer.restore()) {
            if !output.content.ends_with('\n') {
                output.content.push('\n');
            }
            output.content.push_str(&note);
            output.content.push('\n');
        }
        Ok(output)
    }
}

/// The names of the built-in tools, the ones a remote tree's grove runs.
pub const BUILTIN_NAMES: [&str; 6] = [
    "read_file",
    "list_files",
    "grep",
    "write_file",
    "edit_file",
    "bash",
];

/// Which built-in tools a role gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolSet {
    /// `read_file`, `list_files`, `grep`: for the lead and the reviewer.
    ReadOnly,
    /// All six: the read-only tools plus `write_file`, `edit_file` and `bash`.
    Worker,
}

/// The built-in tools of `set`; `bash` runs commands on this machine ([`LocalExecutor`]
/// with the process environment, scrubbed of secrets).
pub fn builtin(set: ToolSet) -> Registry {
    builtin_with_executor(set, Arc::new(LocalExecutor::from_process_env()))
}

/// The built-in tools of `set`, with `bash` running its commands through `executor`.
pub fn builtin_with_executor(set: ToolSet, executor: Arc<dyn CommandExecutor>) -> Registry {
    let read_only = Registry::new()
        .with(Arc::new(ReadFile))
        .with(Arc::new(ListFiles))
        .with(Arc::new(Grep));
    match set {
        ToolSet::ReadOnly => read_only,
        ToolSet::Worker => read_only
            .with(Arc::new(WriteFile::default()))
            .with(Arc::new(EditFile::default()))
            .with(Arc::new(Bash::new(executor))),
    }
}

/// Checks `input` against `tool`'s schema, then deserializes it.
///
/// Fields the schema does not know are ignored (models add junk); a missing required
/// field, a field of the wrong type, or a value out of range is answered with a message
/// that names the field and says what was expected.
pub fn parse_input<T: DeserializeOwned>(tool: &dyn Tool, input: Value) -> Result<T, ToolError> {
    let name = tool.name();
    check_input(&tool.input_schema(), &input).map_err(|problem| {
        ToolError::RespondToModel(format!("invalid input for `{name}`: {problem}"))
    })?;
    serde_json::from_value(input)
        .map_err(|err| ToolError::RespondToModel(format!("invalid input for `{name}`: {err}")))
}

/// Checks an input object against the subset of JSON Schema the tool schemas use:
/// `required`, and per property `type`, `minimum`, `maximum` and `enum`.
///
/// Keywords it does not know are ignored, so a richer schema is checked as far as this
/// goes and never wrongly refused. `null` for an optional field counts as absent.
pub fn check_input(schema: &Value, input: &Value) -> Result<(), String> {
    let Some(fields) = input.as_object() else {
        return Err(format!(
            "the input must be a JSON object, got {}",
            json_kind(input)
        ));
    };
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect::<Vec<_>>())
        .unwrap_or_default();
    for name in &required {
        if fields.get(*name).is_none_or(Value::is_null) {
            let expected = properties
                .and_then(|props| props.get(*name))
                .map(describe_expected)
                .unwrap_or_else(|| "a value".to_owned());
            return Err(format!(
                "the required field `{name}` is missing (expected {expected})"
            ));
        }
    }
    let Some(properties) = properties else {
        return Ok(());
    };
    for (name, property) in properties {
        let Some(value) = fields.get(name) else {
            continue;
        };
        if value.is_null() && !required.contains(&name.as_str()) {
            continue;
        }
        if !value_matches(property, value) {
            return Err(format!(
                "the field `{name}` must be {}, got {}",
                describe_expected(property),
                describe_value(value)
            ));
        }
    }
    Ok(())
}

fn value_matches(property: &Value, value: &Value) -> bool {
    let type_ok = match property.get("type").and_then(Value::as_str) {
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        Some("null") => value.is_null(),
        _ => true,
    };
    if !type_ok {
        return false;
    }
    if let Some(number) = value.as_f64() {
        if property
            .get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|min| number < min)
        {
            return false;
        }
        if property
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|max| number > max)
        {
            return false;
        }
    }
    if let Some(allowed) = property.get("enum").and_then(Value::as_array) {
        return allowed.contains(value);
    }
    true
}

fn describe_expected(property: &Value) -> String {
    if let Some(allowed) = property.get("enum").and_then(Value::as_array) {
        let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return format!("one of {}", shown.join(", "));
    }
    let kind = match property.get("type").and_then(Value::as_str) {
        Some("integer") => "an integer",
        Some("number") => "a number",
        Some("string") => "a string",
        Some("boolean") => "a boolean (true or false)",
        Some("array") => "an array",
        Some("object") => "an object",
        _ => "a value",
    };
    let min = property.get("minimum").and_then(Value::as_f64);
    let max = property.get("maximum").and_then(Value::as_f64);
    match (min, max) {
        (Some(min), Some(max)) => format!("{kind} from {min} to {max}"),
        (Some(min), None) => format!("{kind} ≥ {min}"),
        (None, Some(max)) => format!("{kind} ≤ {max}"),
        (None, None) => kind.to_owned(),
    }
}

fn describe_value(value: &Value) -> String {
    format!(
        "{} {}",
        json_kind(value),
        crate::text::truncate(&value.to_string(), 80)
    )
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(number) if number.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "enum": ["isolated", "fork"]},
            },
            "required": ["path"],
        })
    }

    #[test]
    fn only_calls_to_known_tools_that_change_nothing_may_run_twice() {
        let registry = builtin(ToolSet::Worker);
        let all = |names: &[&str]| registry.all_repeatable(names.iter().copied());
        assert_eq!(
            (
                all(&["read_file", "grep", "list_files"]),
                all(&["read_file", "write_file"]),
                all(&["bash"]),
                all(&["read_file", "no_such_tool"]),
                all(&[]),
            ),
            (true, false, false, false, true),
            "a turn may skip its fsync only when every call is to a tool that mutates nothing"
        );
    }

    #[test]
    fn check_input_names_the_missing_required_field() {
        assert_eq!(
            check_input(&schema(), &json!({"offset": 3})),
            Err("the required field `path` is missing (expected a string)".to_owned())
        );
        assert_eq!(
            check_input(&schema(), &json!({"path": null})),
            Err("the required field `path` is missing (expected a string)".to_owned()),
            "null for a required field counts as missing"
        );
    }

    #[test]
    fn check_input_names_the_mistyped_field() {
        assert_eq!(
            check_input(&schema(), &json!({"path": 7})),
            Err("the field `path` must be a string, got an integer 7".to_owned())
        );
        assert_eq!(
            check_input(&schema(), &json!({"path": "a", "offset": "3"})),
            Err("the field `offset` must be an integer ≥ 1, got a string \"3\"".to_owned())
        );
        assert_eq!(
            check_input(&schema(), &json!({"path": "a", "offset": 0})),
            Err("the field `offset` must be an integer ≥ 1, got an integer 0".to_owned())
        );
        assert_eq!(
            check_input(&schema(), &json!({"path": "a", "mode": "both"})),
            Err(
                "the field `mode` must be one of \"isolated\", \"fork\", got a string \"both\""
                    .to_owned()
            )
        );
    }

    #[test]
    fn check_input_accepts_junk_fields_and_null_optionals() {
        assert_eq!(
            check_input(
                &schema(),
                &json!({"path": "a", "offset": null, "explanation": "models add these"})
            ),
            Ok(())
        );
    }

    #[test]
    fn check_input_refuses_a_non_object() {
        assert_eq!(
            check_input(&schema(), &json!("src/lib.rs")),
            Err("the input must be a JSON object, got a string".to_owned())
        );
    }

    #[test]
    fn builtin_sets_hold_the_contracted_names() {
        assert_eq!(
            builtin(ToolSet::ReadOnly).names(),
            vec!["grep", "list_files", "read_file"]
        );
        assert_eq!(
            builtin(ToolSet::Worker).names(),
            vec![
                "bash",
                "edit_file",
                "grep",
                "list_files",
                "read_file",
                "write_file"
            ]
        );
        let worker = builtin(ToolSet::Worker);
        let mutating: Vec<&str> = worker
            .names()
            .into_iter()
            .filter(|name| worker.mutates(name))
            .collect();
        assert_eq!(mutating, vec!["bash", "edit_file", "write_file"]);
    }
}
