//! A mounted copy-on-write tree (an overlay served by a tree host) as tools and commands
//! reach it, and the list of the trees a run has mounted.
//!
//! This module owns the rule that a mounted tree is reached only through the handle its
//! worker was given ([`TreeAccess`]), and that every tree a run mounted is ended by the
//! run, whatever its subtask's pipeline did.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::overlay::{Layers, TreeHost};
use crate::tools::exec::CommandExecutor;
use crate::tools::tree::{TreeAccess, TreeError, TreeNamespace};

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
