//! The project's check on a commit no subtask owns — the run's merged result, or the
//! result rebuilt without some subtasks — in a worktree of its own, prepared as a
//! subtask's is (local-only files, the setup command); with copy-on-write trees, one
//! over the base tree the setup command prepared once, moved to the commit.
//!
//! This file owns those worktrees: made detached at the commit, removed after the check
//! whatever it said (they never hold work). It decides nothing about what a red check
//! means, and must never run the check anywhere but in such a worktree.

use std::path::Path;

use crate::git::CommitId;

use crate::run::check::{CheckError, CheckSite, checked_before, reuse, run_check_at};
use crate::run::context::TreeStage;
use crate::run::id::SubtaskId;
use crate::run::subtask::SubtaskError;
use crate::run::subtask::error::SetupEnd;
use crate::run::subtask::prepare::{prepare_check_tree, setup_base_for};
use crate::settings::options::CheckOptions;
use crate::store::StoreError;
use crate::store::journal::CheckRun;
use crate::worktree::{BaseTree, CreateError, Worktree};
use crate::worktree::{Layers, WorktreeMode};

/// Why the check gave no verdict on a commit.
#[derive(Debug, thiserror::Error)]
pub enum TreeCheckError {
    /// Its worktree could not be made or filled. Not retried.
    #[error("could not make a worktree of the {on} for the check: {source}")]
    Worktree {
        on: String,
        #[source]
        source: CreateError,
    },
    /// The setup command failed there (it had passed in the subtasks' worktrees). Not
    /// retried.
    #[error(
        "the setup command `{command}` {status} in the worktree of the {on}, so the check \
         did not run. Its output ends with:\n{tail}"
    )]
    Setup {
        on: String,
        command: String,
        status: SetupEnd,
        tail: String,
    },
    /// The local-only files could not be copied there. Not retried.
    #[error("preparing the worktree of the {on} for the check failed: {source}")]
    Prepare {
        on: String,
        #[source]
        source: Box<SubtaskError>,
    },
    /// The check could not start, or was interrupted (see [`CheckError`]).
    #[error("{0}")]
    Check(#[from] CheckError),
}

impl TreeCheckError {
    /// The journal failing under it, which ends the run (never a verdict on the tree);
    /// any other error back as it was.
    pub(crate) fn into_journal(self) -> Result<StoreError, Self> {
        match self {
            Self::Check(error) => error.into_journal().map_err(Self::Check),
            Self::Prepare { on, source } => source.into_journal().map_err(|other| Self::Prepare {
                on,
                source: Box::new(other),
            }),
            other => Err(other),
        }
    }

    /// True when the run stopped while the check (or its setup) ran.
    pub(crate) fn interrupted(&self) -> bool {
        match self {
            Self::Check(CheckError::Interrupted) => true,
            Self::Prepare { source, .. } => matches!(source.as_ref(), SubtaskError::Interrupted),
            _ => false,
        }
    }
}

/// Runs `check` on `commit` in a fresh worktree of it, journaled with `on` (`result`, or
/// `result without S2`), and removes the worktree again; a tree this run checked already
/// (a fixer's, which its merge made the result) is not checked again: its verdict is.
pub(crate) async fn check_commit(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    commit: CommitId,
    on: &str,
) -> Result<CheckRun, TreeCheckError> {
    let tree = stage
        .facts
        .repo
        .tree_id(commit)
        .map_err(|source| TreeCheckError::Worktree {
            on: on.to_owned(),
            source: source.into(),
        })?;
    if let Some(earlier) = checked_before(stage.record, check, &tree, on) {
        return Ok(reuse(stage.record, &earlier, on)?);
    }
    let made = open_tree(stage, commit, on).await?;
    let access = made.worktree.access();
    let site = CheckSite {
        cwd: made.worktree.path(),
        on,
        tree: Some(&tree),
        changed: &[],
        access: access.as_deref(),
    };
    let checked = run_check_at(stage, check, site).await;
    remove_tree(stage, made, on).await;
    Ok(checked?)
}

/// A check's worktree, and for a copy-on-write one the base tree it shows (held while
/// it lives).
pub(crate) struct CheckTree {
    pub(crate) worktree: Worktree,
    base: Option<BaseTree>,
}

/// A fresh worktree of `commit` for the check on `on`, ready and prepared as a
/// subtask's is; [`remove_tree`] removes it.
pub(crate) async fn open_tree(
    stage: TreeStage<'_>,
    commit: CommitId,
    on: &str,
) -> Result<CheckTree, TreeCheckError> {
    let path = stage.facts.worktrees_dir.join(dir_name(on));
    let made = make_tree(stage, &path, commit, on).await?;
    let prepared = async {
        made.worktree
            .ready()
            .await
            .map_err(|source| TreeCheckError::Worktree {
                on: on.to_owned(),
                source,
            })?;
        prepare_check_tree(stage, on, &made.worktree)
            .await
            .map_err(|source| prepare_error(on, source))
    }
    .await;
    match prepared {
        Ok(()) => Ok(made),
        Err(error) => {
            remove_tree(stage, made, on).await;
            Err(error)
        }
    }
}

/// The worktree of `commit` at `path` for the check on `on`. Where the run's trees are
/// copy-on-write ones over the base tree, which the setup command prepared once, so is
/// this one, moved to `commit` by git (only the files that differ are written): the
/// setup's output is the base's, and the setup never runs again, nor on a tree holding
/// workers' edits. Otherwise a checkout of `commit`, which its preparation sets up.
async fn make_tree(
    stage: TreeStage<'_>,
    path: &Path,
    commit: CommitId,
    on: &str,
) -> Result<CheckTree, TreeCheckError> {
    let worktree_error = |source: CreateError| TreeCheckError::Worktree {
        on: on.to_owned(),
        source,
    };
    let setup = &stage.facts.options.worktree_setup;
    if stage.facts.options.worktree_mode != WorktreeMode::Overlay || setup.per_worker {
        let worktree = stage
            .facts
            .repo
            .create_detached_worktree(&stage.facts.run, path, commit)
            .await
            .map_err(worktree_error)?;
        return Ok(CheckTree {
            worktree,
            base: None,
        });
    }
    let base = stage
        .facts
        .repo
        .base_tree(stage.facts.base, setup.once_per_base())
        .await
        .map_err(|source| worktree_error(source.into()))?;
    setup_base_for(stage, SubtaskId(0), on, &base)
        .await
        .map_err(|source| prepare_error(on, source))?;
    // What a check cut short by a crash left there must not show through.
    crate::worktree::overlay::remove_own_dirs(&Layers::beside(&base.tree_dir(), path))
        .map_err(|source| prepare_error(on, source.into()))?;
    let registered = stage
        .facts
        .repo
        .create_detached_overlay(&stage.facts.run, path, &base)
        .await
        .map_err(worktree_error)?;
    let made = match registered.mount(&stage.trees.live, &base.tree_dir()).await {
        Ok(worktree) => CheckTree {
            worktree,
            base: Some(base),
        },
        Err(source) => {
            let made = CheckTree {
                worktree: registered,
                base: Some(base),
            };
            remove_tree(stage, made, on).await;
            return Err(prepare_error(on, source.into()));
        }
    };
    if commit != stage.facts.base
        && let Err(source) = stage.facts.repo.move_detached(&made.worktree, commit).await
    {
        remove_tree(stage, made, on).await;
        return Err(worktree_error(source.into()));
    }
    Ok(made)
}

/// Removes a check's worktree (a copy-on-write one's host and its own directories
/// first); a failure is noted, never a verdict.
pub(crate) async fn remove_tree(stage: TreeStage<'_>, made: CheckTree, on: &str) {
    let CheckTree { worktree, base } = made;
    if let Some(base) = &base {
        let dropped = match worktree
            .discard_mount(&stage.trees.live)
            .await
            .map_err(SubtaskError::from)
        {
            Ok(()) => crate::worktree::overlay::remove_own_dirs(&Layers::beside(
                &base.tree_dir(),
                worktree.path(),
            ))
            .map_err(SubtaskError::from),
            Err(error) => Err(error),
        };
        if let Err(error) = dropped {
            stage.record.note(format!(
                "could not remove the copy-on-write layer of the check's worktree of the \
                 {on} at {}: {error}",
                worktree.path().display()
            ));
        }
    }
    if let Err(error) = stage.facts.repo.remove_detached_worktree(&worktree).await {
        stage.record.note(format!(
            "could not remove the check's worktree of the {on} at {}: {error}",
            worktree.path().display()
        ));
    }
}

/// A failed preparation of the tree of the check on `on`, as the check's error.
fn prepare_error(on: &str, source: SubtaskError) -> TreeCheckError {
    match source {
        SubtaskError::Setup {
            command,
            status,
            tail,
            ..
        } => TreeCheckError::Setup {
            on: on.to_owned(),
            command,
            status,
            tail,
        },
        source => TreeCheckError::Prepare {
            on: on.to_owned(),
            source: Box::new(source),
        },
    }
}

/// The worktree directory of a check on `on`: `check-result`, `check-result-without-S2-S3`
/// (never a number, which names a subtask's).
fn dir_name(on: &str) -> String {
    let mut name = String::from("check-");
    for part in on.split(|c: char| !c.is_ascii_alphanumeric()) {
        if !part.is_empty() {
            if !name.ends_with('-') {
                name.push('-');
            }
            name.push_str(part);
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_worktree_is_named_after_what_it_checks_never_like_a_subtask() {
        assert_eq!(dir_name("result"), "check-result");
        assert_eq!(
            dir_name("result without S2, S3"),
            "check-result-without-S2-S3"
        );
    }
}
