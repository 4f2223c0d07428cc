//! Worktree access: the one seam every file operation and command of a worktree goes
//! through — a plain directory (git worktrees), a copy-on-write tree inside a tree
//! host's namespaces (overlay), a remote pod later.
//!
//! This module owns the mapping from a worktree's path (what the model, its commands
//! and git inside it see) to how grove reaches it: [`TreeAccess::root_for_grove`] for
//! grove's own file tools, [`TreeAccess::executor`] for commands. Trees that are not
//! plain directories are registered here by path ([`register`]) for as long as they
//! live; an unregistered path is a plain directory and is reached as it is. It must
//! never let a command of a registered tree run outside that tree's namespaces.

pub mod namespace;
pub mod overlay;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::exec::{CommandExecutor, ExecError, ExecRequest, ExecResult, SetupPolicy};
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

/// A worktree that is a plain directory on this machine (git worktrees).
#[derive(Debug, Clone)]
pub struct PlainTree {
    path: PathBuf,
}

impl PlainTree {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
        }
    }
}

#[async_trait]
impl TreeAccess for PlainTree {
    fn path(&self) -> &Path {
        &self.path
    }

    fn root_for_grove(&self) -> PathBuf {
        self.path.clone()
    }

    fn executor(
        &self,
        base: &Arc<dyn CommandExecutor>,
    ) -> Result<Arc<dyn CommandExecutor>, TreeError> {
        Ok(Arc::clone(base))
    }

    fn namespace(&self) -> Option<Arc<TreeNamespace>> {
        None
    }
}

/// A copy-on-write worktree: an overlay in a tree host's namespaces.
#[derive(Debug)]
pub struct OverlayTree {
    host: Mutex<Option<TreeHost>>,
    namespace: Arc<TreeNamespace>,
}

impl OverlayTree {
    /// The tree `host` serves.
    pub fn new(host: TreeHost) -> Self {
        Self {
            namespace: Arc::clone(host.namespace()),
            host: Mutex::new(Some(host)),
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
        base.inside(&self.namespace)
            .ok_or_else(|| TreeError::Unsupported {
                executor: format!("{base:?}"),
                path: self.path().to_path_buf(),
            })
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

/// The registered trees, by path. Paths are absolute and a worktree's is unique on this
/// machine, so one table serves every run of this process.
static TREES: Mutex<Vec<Arc<dyn TreeAccess>>> = Mutex::new(Vec::new());

/// Registers `tree` under its path (replacing one registered there before) until
/// [`unregister`].
pub fn register(tree: Arc<dyn TreeAccess>) {
    let mut trees = lock(&TREES);
    trees.retain(|known| known.path() != tree.path());
    trees.push(tree);
}

/// Forgets the tree registered at `path`, returning it.
pub fn unregister(path: &Path) -> Option<Arc<dyn TreeAccess>> {
    let mut trees = lock(&TREES);
    let at = trees.iter().position(|known| known.path() == path)?;
    Some(trees.remove(at))
}

/// The trees registered at or beneath `dir` (a run's worktrees).
pub fn registered_beneath(dir: &Path) -> Vec<Arc<dyn TreeAccess>> {
    lock(&TREES)
        .iter()
        .filter(|known| known.path().starts_with(dir))
        .cloned()
        .collect()
}

/// The tree `path` lies in (the tree's root or beneath it), if one is registered.
pub fn tree_of(path: &Path) -> Option<Arc<dyn TreeAccess>> {
    lock(&TREES)
        .iter()
        .find(|known| path.starts_with(known.path()))
        .cloned()
}

/// Where grove's own process reaches `path` (a worktree's path, or one beneath it).
pub fn path_for_grove(path: &Path) -> PathBuf {
    match tree_of(path) {
        Some(tree) => {
            let rest = path.strip_prefix(tree.path()).unwrap_or(Path::new(""));
            if rest.as_os_str().is_empty() {
                tree.root_for_grove()
            } else {
                tree.root_for_grove().join(rest)
            }
        }
        None => path.to_path_buf(),
    }
}

/// A tree's executor, with the tree it was made for.
type MadeExecutor = (Arc<dyn TreeAccess>, Arc<dyn CommandExecutor>);

/// Runs each command through the executor of the tree its working directory lies in
/// (the base executor itself for a plain directory): the run's one executor, routed.
#[derive(Debug, Clone)]
pub struct RoutedExecutor {
    base: Arc<dyn CommandExecutor>,
    /// The tree executors made so far, by tree path, with the tree they were made for.
    made: Arc<Mutex<HashMap<PathBuf, MadeExecutor>>>,
}

impl RoutedExecutor {
    /// Routes over `base`.
    pub fn new(base: Arc<dyn CommandExecutor>) -> Self {
        Self {
            base,
            made: Arc::default(),
        }
    }

    /// The executor for a command run in `cwd`.
    pub fn executor_for(&self, cwd: &Path) -> Result<Arc<dyn CommandExecutor>, TreeError> {
        let Some(tree) = tree_of(cwd) else {
            return Ok(Arc::clone(&self.base));
        };
        let mut made = lock(&self.made);
        // A tree removed since takes its executor (and its prepared rules) along.
        made.retain(|path, (known, _)| {
            tree_of(path).is_some_and(|current| Arc::ptr_eq(&current, known))
        });
        if let Some((_, executor)) = made.get(tree.path()) {
            return Ok(Arc::clone(executor));
        }
        let executor = tree.executor(&self.base)?;
        made.insert(
            tree.path().to_path_buf(),
            (Arc::clone(&tree), Arc::clone(&executor)),
        );
        Ok(executor)
    }
}

#[async_trait]
impl CommandExecutor for RoutedExecutor {
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        let executor = self
            .executor_for(&request.cwd)
            .map_err(|error| ExecError::Sandbox {
                reason: error.to_string(),
            })?;
        executor.execute(request).await
    }

    fn for_setup(&self, policy: &SetupPolicy) -> Arc<dyn CommandExecutor> {
        Arc::new(Self::new(self.base.for_setup(policy)))
    }

    fn inside(&self, namespace: &Arc<TreeNamespace>) -> Option<Arc<dyn CommandExecutor>> {
        self.base.inside(namespace)
    }
}
