//! Worktree access: the one seam every file operation and command of a worktree goes
//! through — a plain directory (git worktrees), a copy-on-write tree inside a tree
//! host's namespaces (overlay), a remote pod later.
//!
//! This module owns how grove reaches a tree that is not a plain directory:
//! [`TreeAccess::root_for_grove`] for grove's own file tools, [`TreeAccess::executor`]
//! for commands. A tree is never looked up by path: whoever works in one is handed it
//! (a tool in its [`ToolContext`](super::ToolContext), a check or a setup command with
//! its worktree), and without one a path is a plain directory, reached as it is. It must
//! never let a command of a tree run outside that tree's namespaces.

pub mod namespace;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::exec::{CommandExecutor, ExecError};
use async_trait::async_trait;
pub use namespace::TreeNamespace;

/// Why a command cannot be run in a tree.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The run's executor cannot join the tree's namespaces (an executor that only runs
    /// commands on this machine's own view). Not retried.
    #[error("the command executor {executor} cannot run commands inside the tree at {path}")]
    Unsupported { executor: String, path: PathBuf },
}

/// How grove reaches one worktree.
#[async_trait]
pub trait TreeAccess: Send + Sync + fmt::Debug {
    /// The worktree's path, as the model, its commands and git inside it see it.
    fn path(&self) -> &Path;

    /// Where grove's own process opens the same tree (its file tools, its reads).
    fn root_for_grove(&self) -> PathBuf;

    /// The executor the tree's commands run through, made from the run's `base` (its
    /// confinement and environment), in the tree.
    fn executor(
        &self,
        base: &Arc<dyn CommandExecutor>,
    ) -> Result<Arc<dyn CommandExecutor>, TreeError>;

    /// The tree's namespaces, for processes grove starts itself (git), when it has any.
    fn namespace(&self) -> Option<Arc<TreeNamespace>>;

    /// Ends what serves the tree (a tree host, a pod); its directories stay.
    async fn release(&self) {}

    /// Where the tree's files are on another machine: the grove there runs its file
    /// tools and commands, handed each call by the dispatcher.
    fn remote_tools(&self) -> Option<&dyn RemoteTools> {
        None
    }
}

/// The built-in tools of a tree on another machine, run there by its grove.
#[async_trait]
pub trait RemoteTools: Send + Sync {
    /// Runs the built-in tool `name` with `input` there; a lost connection is fatal to
    /// the agent's loop (the run decides what happens to its subtask).
    async fn call(
        &self,
        name: &str,
        input: serde_json::Value,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<super::ToolOutput, super::ToolError>;
}

/// The executor for commands in `tree` (when the directory is one), made from `base`;
/// `base` itself for a plain directory. A tree that cannot be entered is the command's
/// sandbox refusing it.
pub fn in_tree(
    tree: Option<&dyn TreeAccess>,
    base: &Arc<dyn CommandExecutor>,
) -> Result<Arc<dyn CommandExecutor>, ExecError> {
    match tree {
        Some(tree) => tree.executor(base).map_err(|error| ExecError::Sandbox {
            reason: error.to_string(),
        }),
        None => Ok(Arc::clone(base)),
    }
}
