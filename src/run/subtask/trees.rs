//! Copy-on-write worktrees in a run: mounting one in a tree host of its own, removing
//! it once its work is kept, and handing the user a real directory for each one a run
//! leaves behind (kept, interrupted, refused paths).
//!
//! This file owns the lifetime of a run's trees from grove's side. It must never delete
//! a tree's upper directory before its changes are committed or copied out, and never
//! touch the base tree or the repository.

use std::path::Path;
use std::sync::Arc;

use crate::run::context::RunContext;
use crate::run::subtask::error::SubtaskError;
use crate::tools::tree::TreeAccess;
use crate::worktree::{Files, Worktree};
use crate::worktree::{Layers, LiveTrees, OverlayError, OverlayTree, TreeHost};

/// Mounts a copy-on-write worktree over `lower` in a tree host of its own (its upper
/// directory keeps what an earlier attempt changed), keeps the tree among the run's live
/// `trees`, and returns the worktree with its git and its commands run inside.
pub(crate) async fn mount(
    trees: &LiveTrees,
    worktree: &Worktree,
    lower: &Path,
) -> Result<Worktree, SubtaskError> {
    let layers = Layers::beside(lower, worktree.path());
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SubtaskError::Tree {
            source: OverlayError::Io {
                action: "give the tree its .git file at",
                path,
                source,
            },
        }
    };
    // The merged tree hides what git left at the path: its `.git` file goes in the upper
    // directory, so that git inside the tree (the worker's, grove's) finds the worktree.
    std::fs::create_dir_all(&layers.upper).map_err(io(&layers.upper))?;
    let pointer = layers.upper.join(".git");
    std::fs::copy(worktree.path().join(".git"), &pointer).map_err(io(&pointer))?;
    let host = TreeHost::start(layers)
        .await
        .map_err(|source| SubtaskError::Tree { source })?;
    let tree = Arc::new(OverlayTree::new(host));
    trees.add(&tree);
    Ok(worktree.clone().mounted(tree))
}

/// A copy-on-write worktree found again after grove stopped (not mounted), mounted over
/// the run's base tree so that its changes can be committed or archived; any other
/// worktree as it is.
pub(crate) async fn remount(
    ctx: &RunContext,
    worktree: Worktree,
) -> Result<Worktree, SubtaskError> {
    if !matches!(worktree.files(), Files::Unmounted) {
        return Ok(worktree);
    }
    let base = ctx
        .repo
        .base_tree(ctx.base, ctx.options.worktree_setup.once_per_base())
        .await
        .map_err(|source| SubtaskError::Worktree { source })?;
    mount_again(ctx, &worktree, &base.tree_dir()).await
}

/// Mounts a copy-on-write worktree of a resumed run again over `lower`, as [`mount`]
/// does, saying first when the machine restarted since its last mount: its mounts skip
/// the disk's syncs, so a crash may have torn what was written in its last seconds.
pub(crate) async fn mount_again(
    ctx: &RunContext,
    worktree: &Worktree,
    lower: &Path,
) -> Result<Worktree, SubtaskError> {
    if Layers::beside(lower, worktree.path()).mounted_before_restart() {
        ctx.note(format!(
            "the machine restarted since the copy-on-write worktree {} was last mounted; \
             if it went down without a clean shutdown, files written there in its last \
             seconds may be incomplete (they still go through the checks and review)",
            worktree.path().display()
        ));
    }
    mount(&ctx.trees, worktree, lower).await
}

/// Removes subtask `id`'s worktree once its work is kept (merged or archived): a
/// copy-on-write one is committed, its host stopped, its upper and work directories
/// removed and its registration deleted, never the base or the repository; a git one
/// as [`Repo::remove_worktree`](crate::git::Repo::remove_worktree) does.
pub(crate) async fn remove_worktree(
    ctx: &RunContext,
    worktree: &Worktree,
) -> Result<(), SubtaskError> {
    if !worktree.is_copy_on_write() {
        return ctx
            .repo
            .remove_worktree(worktree)
            .await
            .map_err(|source| SubtaskError::Worktree { source });
    }
    ctx.repo
        .checkpoint(worktree, "final state before removal")
        .await
        .map_err(|source| SubtaskError::Worktree { source })?;
    let layers = unmount(&ctx.trees, worktree).await;
    if let Some(layers) = layers {
        // All at once: stopped before the unregistration below, grove leaves a tree with
        // no upper directory (a resumed run's sweep unregisters it), never with part of one.
        ctx.repo
            .discard_own_dirs(&layers)
            .map_err(|source| SubtaskError::Worktree { source })?;
    }
    ctx.repo
        .unregister_worktree(worktree)
        .await
        .map_err(|source| SubtaskError::Worktree { source })
}

/// Keeps subtask `id`'s worktree for the user (`--keep-worktrees`): a copy-on-write one
/// is copied out of its tree into its own path, a directory their own tools open, and its
/// host stopped; returns the worktree as it now is.
pub(crate) async fn keep_worktree(
    ctx: &RunContext,
    worktree: &Worktree,
) -> Result<Worktree, SubtaskError> {
    let Some(namespace) = worktree.tree().cloned() else {
        return Ok(worktree.clone());
    };
    let (from, to) = (
        namespace.grove_root().to_path_buf(),
        worktree.path().to_path_buf(),
    );
    tokio::task::spawn_blocking(move || crate::worktree::overlay::materialize(&from, &to))
        .await
        .map_err(|error| SubtaskError::Tree {
            source: OverlayError::Io {
                action: "copy out",
                path: worktree.path().to_path_buf(),
                source: std::io::Error::other(error),
            },
        })?
        .map_err(|source| SubtaskError::Tree { source })?;
    if let Some(layers) = unmount(&ctx.trees, worktree).await {
        crate::worktree::overlay::remove_own_dirs(&layers)
            .map_err(|source| SubtaskError::Tree { source })?;
    }
    Ok(worktree.clone().unmounted())
}

/// Stops the host of a tree no worker used (mounted ahead of its subtask) and removes
/// its upper and work directories; nothing when it was never mounted.
pub(crate) async fn discard_mount(
    ctx: &RunContext,
    worktree: &Worktree,
) -> Result<(), SubtaskError> {
    match unmount(&ctx.trees, worktree).await {
        Some(layers) => crate::worktree::overlay::remove_own_dirs(&layers)
            .map_err(|source| SubtaskError::Tree { source }),
        None => Ok(()),
    }
}

/// Stops the tree host of `worktree` and forgets its tree; its layers, if it had one
/// the run had not ended yet.
async fn unmount(trees: &LiveTrees, worktree: &Worktree) -> Option<Layers> {
    let tree = worktree.overlay()?;
    if !trees.remove(tree) {
        return None;
    }
    let layers = Layers::beside(Path::new("/"), worktree.path());
    tree.release().await;
    Some(layers)
}

/// Hands the user a real directory for every tree of this run still mounted at its end
/// (kept for `grove resume`, or for files git refuses to record): its merged files copied
/// to its own path, its host stopped, its own directories removed; grove then treats it
/// as a git worktree, on resume too. A tree that cannot be copied out keeps its upper
/// directory (`grove resume` mounts it again), and a note says so.
pub(crate) async fn release_trees(ctx: &RunContext) {
    for tree in ctx.trees.take_all() {
        let path = tree.path().to_path_buf();
        let (from, to) = (tree.root_for_grove(), path.clone());
        let copied =
            tokio::task::spawn_blocking(move || crate::worktree::overlay::materialize(&from, &to))
                .await
                .map_err(|error| OverlayError::Io {
                    action: "copy out",
                    path: path.clone(),
                    source: std::io::Error::other(error),
                })
                .and_then(|copied| copied);
        tree.release().await;
        let released = copied.and_then(|()| {
            crate::worktree::overlay::remove_own_dirs(&Layers::beside(Path::new("/"), &path))
        });
        let marked = match released {
            Ok(()) => ctx
                .repo
                .forget_overlay(&path)
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = marked {
            ctx.note(format!(
                "the copy-on-write worktree {} stays as its changes beside it ({error}); \
                 `grove resume {}` mounts it again",
                path.display(),
                ctx.run
            ));
        }
    }
}
