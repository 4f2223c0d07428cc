//! Copy-on-write worktrees in a run, where the run's facts matter: a tree found again
//! after grove stopped is mounted over the run's base tree (saying when the machine
//! restarted since), and the trees the run leaves mounted are released at its end with
//! a note for each kept. The steps themselves are the worktree's own methods.

use std::path::Path;

use crate::run::context::TreeStage;
use crate::run::subtask::error::SubtaskError;
#[cfg(doc)]
use crate::worktree::LiveTrees;
use crate::worktree::{Files, Layers, Worktree, WorktreeError};

/// A copy-on-write worktree found again after grove stopped (not mounted), mounted over
/// the run's base tree so that its changes can be committed or archived; any other
/// worktree as it is.
pub(crate) async fn remount(
    stage: TreeStage<'_>,
    worktree: Worktree,
) -> Result<Worktree, SubtaskError> {
    if !matches!(worktree.files(), Files::Unmounted) {
        return Ok(worktree);
    }
    let base = stage
        .facts
        .repo
        .base_tree(
            stage.facts.base,
            stage.facts.options.worktree_setup.once_per_base(),
        )
        .await
        .map_err(WorktreeError::from)?;
    mount_again(stage, &worktree, &base.tree_dir()).await
}

/// Mounts a copy-on-write worktree of a resumed run again over `lower`, as
/// [`Worktree::mount`] does, saying first when the machine restarted since its last mount: its mounts skip
/// the disk's syncs, so a crash may have torn what was written in its last seconds.
pub(crate) async fn mount_again(
    stage: TreeStage<'_>,
    worktree: &Worktree,
    lower: &Path,
) -> Result<Worktree, SubtaskError> {
    if Layers::beside(lower, worktree.path()).mounted_before_restart() {
        stage.record.note(format!(
            "the machine restarted since the copy-on-write worktree {} was last mounted; \
             if it went down without a clean shutdown, files written there in its last \
             seconds may be incomplete (they still go through the checks and review)",
            worktree.path().display()
        ));
    }
    Ok(worktree.mount(&stage.trees.live, lower).await?)
}

/// Hands the user a real directory for every tree of this run still mounted at its end
/// ([`LiveTrees::release_all`]), and a note for each that stays as its changes beside it.
pub(crate) async fn release_trees(stage: TreeStage<'_>) {
    for (path, error) in stage.trees.live.release_all(&stage.facts.repo).await {
        stage.record.note(format!(
            "the copy-on-write worktree {} stays as its changes beside it ({error}); \
             `grove resume {}` mounts it again",
            path.display(),
            stage.facts.run
        ));
    }
}
