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
pub mod overlay;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::exec::{CommandExecutor, ExecError};
pub use namespace::TreeNamespace;
pub use overlay::{Layers, OverlayError, TreeHost};

/// How a run's worktrees are made (`[worktree] mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorktreeMode {
    /// Copy-on-write where this system allows it, else git worktrees (said in one line).
    #[default]
    Auto,
    /// Copy-on-write trees, or the run does not start.
    Overlay,
    /// `git worktree add`, one full checkout per worker.
    Git,
}

impl WorktreeMode {
    /// `auto`, `overlay` or `git`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Overlay => "overlay",
            Self::Git => "git",
        }
    }
}

impl fmt::Display for WorktreeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorktreeMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "overlay" => Ok(Self::Overlay),
            "git" => Ok(Self::Git),
            other => Err(format!(
                "`{other}` is not a worktree mode; use `overlay`, `git` or `auto`"
            )),
        }
    }
}

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

/// A copy-on-write worktree: an overlay in a tree host's namespaces.
#[derive(Debug)]
pub struct OverlayTree {
    host: Mutex<Option<TreeHost>>,
    namespace: Arc<TreeNamespace>,
    /// The executors made for this tree, with the base each was made from: making one
    /// prepares its rules on the merged tree, once per base.
    executors: Mutex<Vec<MadeExecutor>>,
}

/// An executor made for a tree, with the base it was made from.
type MadeExecutor = (Arc<dyn CommandExecutor>, Arc<dyn CommandExecutor>);

/// How many bases' executors a tree keeps (a worker's tools', its checks', its setup's).
const KEPT_EXECUTORS: usize = 4;

impl OverlayTree {
    /// The tree `host` serves.
    pub fn new(host: TreeHost) -> Self {
        Self {
            namespace: Arc::clone(host.namespace()),
            host: Mutex::new(Some(host)),
            executors: Mutex::default(),
        }
    }

    /// The tree host's namespaces.
    pub fn namespace_ref(&self) -> &Arc<TreeNamespace> {
        &self.namespace
    }

    /// The layers of the tree.
    pub fn layers(&self) -> Option<Layers> {
        lock(&self.host).as_ref().map(|host| host.layers().clone())
    }

    /// The host's process id, while it runs.
    pub fn host_pid(&self) -> Option<u32> {
        lock(&self.host).as_ref().and_then(TreeHost::pid)
    }

    /// Ends the host (the tree's mount goes with it); the directories stay.
    pub async fn stop(&self) {
        let host = lock(&self.host).take();
        if let Some(host) = host {
            host.stop().await;
        }
    }
}

#[async_trait]
impl TreeAccess for OverlayTree {
    fn path(&self) -> &Path {
        self.namespace.path()
    }

    fn root_for_grove(&self) -> PathBuf {
        self.namespace.grove_root().to_path_buf()
    }

    fn executor(
        &self,
        base: &Arc<dyn CommandExecutor>,
    ) -> Result<Arc<dyn CommandExecutor>, TreeError> {
        let mut made = lock(&self.executors);
        if let Some((_, executor)) = made.iter().find(|(from, _)| Arc::ptr_eq(from, base)) {
            return Ok(Arc::clone(executor));
        }
        let executor = base
            .inside(&self.namespace)
            .ok_or_else(|| TreeError::Unsupported {
                executor: format!("{base:?}"),
                path: self.path().to_path_buf(),
            })?;
        if made.len() == KEPT_EXECUTORS {
            made.remove(0);
        }
        made.push((Arc::clone(base), Arc::clone(&executor)));
        Ok(executor)
    }

    fn namespace(&self) -> Option<Arc<TreeNamespace>> {
        Some(Arc::clone(&self.namespace))
    }

    async fn release(&self) {
        self.stop().await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The copy-on-write trees a run mounted and has not unmounted yet: whatever their
/// subtasks' pipelines did, the run ends each one (`release_trees`), so none outlives
/// grove with its files only in a mount. The run owns this list; nothing looks a tree
/// up in it.
#[derive(Debug, Default)]
pub struct LiveTrees(Mutex<Vec<Arc<OverlayTree>>>);

impl LiveTrees {
    /// Keeps `tree` until it is [`LiveTrees::remove`]d or taken.
    pub fn add(&self, tree: &Arc<OverlayTree>) {
        lock(&self.0).push(Arc::clone(tree));
    }

    /// Forgets `tree`; false when it was not kept (ended already).
    pub fn remove(&self, tree: &Arc<OverlayTree>) -> bool {
        let mut trees = lock(&self.0);
        let before = trees.len();
        trees.retain(|kept| !Arc::ptr_eq(kept, tree));
        trees.len() < before
    }

    /// Every tree still kept, forgotten here.
    pub fn take_all(&self) -> Vec<Arc<OverlayTree>> {
        std::mem::take(&mut *lock(&self.0))
    }
}
