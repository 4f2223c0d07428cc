//! The project's agents and rules as a run reads them from the user's work tree:
//! `.grove/agents/<name>.md` and `AGENTS.md`/`CLAUDE.md`.
//!
//! This file owns which role and which tools a `delegate` call gets. It must never let a
//! call name the lead or the reviewer, nor give a worker a tool that workers do not have.

use std::path::Path;
use std::sync::Arc;

use crate::agent::roles::{self, AgentFileError, ProjectRules, RoleDef, RoleKind, RulesError};
use crate::tools::{self, CommandExecutor, Registry, ToolSet, WriteScope};

/// Why a `delegate` call's `agent` cannot be used. The lead reads the message and adapts.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    #[error("`{name}` cannot be delegated to; leave `agent` out for a worker")]
    NotDelegable { name: String },
    #[error(
        "there is no agent `{name}` (no .grove/agents/{name}.md); leave `agent` out for a worker"
    )]
    NoSuchAgent { name: String },
    #[error("{0}")]
    AgentFile(#[from] AgentFileError),
    #[error(
        "agent `{agent}` lists tool `{tool}`, which workers do not have; worker tools are: \
         {available}"
    )]
    UnknownTool {
        agent: String,
        tool: String,
        /// The worker tools, comma-separated.
        available: String,
    },
}

/// The user agents (name, description) in `root`'s `.grove/agents` that a lead may name.
pub(crate) fn agent_catalogue(root: &Path) -> Vec<(String, String)> {
    let dir = root.join(".grove").join("agents");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut agents: Vec<(String, String)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().to_str()?.strip_suffix(".md")?.to_owned();
            match roles::load_agent(root, &name) {
                Ok(Some(role)) => Some((name, role.description)),
                _ => None,
            }
        })
        .collect();
    agents.sort();
    agents
}

/// The role a `delegate` call's `agent` names (`None`: the built-in worker).
pub(crate) fn delegate_role(root: &Path, agent: Option<&str>) -> Result<RoleDef, RoleError> {
    match agent {
        None | Some("worker") => Ok(roles::builtin(RoleKind::Worker)),
        Some(name @ ("lead" | "reviewer")) => Err(RoleError::NotDelegable {
            name: name.to_owned(),
        }),
        Some(name) => roles::load_agent(root, name)?.ok_or_else(|| RoleError::NoSuchAgent {
            name: name.to_owned(),
        }),
    }
}

/// The worker's tools: the kind's default set, or the agent file's `tools` list (which
/// may only name worker tools), their file writes confined to `scope` when there is one.
pub(crate) fn worker_tools(
    role: &RoleDef,
    executor: &Arc<dyn CommandExecutor>,
    scope: Option<&Arc<WriteScope>>,
) -> Result<Registry, RoleError> {
    let mut all = tools::builtin_with_executor(ToolSet::Worker, executor.clone());
    if let Some(scope) = scope {
        all = all.with_write_scope(scope);
    }
    let Some(names) = &role.tools else {
        return Ok(all);
    };
    names.iter().try_fold(Registry::new(), |registry, name| {
        all.get(name)
            .cloned()
            .map(|tool| registry.with(tool))
            .ok_or_else(|| RoleError::UnknownTool {
                agent: role.name.clone(),
                tool: name.clone(),
                available: all.names().join(", "),
            })
    })
}

/// Reads the project rules (`AGENTS.md`, else `CLAUDE.md`) from the user's work tree; a
/// file that is missing, empty or not UTF-8 gives way to the next.
pub(crate) fn read_rules(root: &Path) -> Result<Option<ProjectRules>, RulesError> {
    for file in roles::RULES_FILES {
        let path = root.join(file);
        let bytes = match crate::repo_file::read(root, Path::new(file)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(RulesError { path, source }),
        };
        if let Ok(text) = String::from_utf8(bytes)
            && !text.trim().is_empty()
        {
            return Ok(Some(ProjectRules {
                file: file.to_owned(),
                text,
            }));
        }
    }
    Ok(None)
}
