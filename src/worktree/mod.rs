//! The worktree as one typed value: where a subtask works, how its files are reached,
//! and its life from creation to removal.
//!
//! A [`Worktree`] is a git worktree (a full checkout of its branch) or a copy-on-write
//! tree (an overlay of the run's base tree, [`BaseTree`]), mounted by a tree host while
//! its worker runs ([`Files`]). It is created ([`Repo::create_worktree`],
//! [`Repo::create_overlay_worktree`], found again on a resume with
//! [`Repo::find_worktree`]), checkpointed ([`Repo::checkpoint`],
//! [`Repo::checkpoint_upper`] for an unmounted tree's upper directory), kept under an
//! archive ref ([`Repo::archive_worktree`]) and removed ([`Repo::remove_worktree`]);
//! [`Repo::clean_run`] and [`Repo::sweep_run`] do the same for every worktree a stopped
//! run left. How a tool or a command reaches a mounted tree is handed to whoever works
//! in it ([`Worktree::access`], a `TreeAccess` in the tool context); nothing looks a
//! tree up by its path.
//!
//! This module owns the worktree's lifecycle and its files on disk; `git` keeps objects
//! and refs, `tools` the tools and the sandbox. It must never let git run in a
//! copy-on-write tree that is not mounted (a commit of its path would delete every file
//! of the branch), and never delete a worktree's changes before they are committed.

mod base_tree;
mod checkpoint;
mod create;
mod detached;
mod error;
mod handle;
mod lifecycle;
mod local_files;
mod location;
pub mod mode;
pub mod mounted;
pub mod overlay;
mod registration;
mod remote;
mod spare;
mod sweep;
mod trash;
mod upper_commit;

pub use base_tree::{BaseSetup, BaseTree};
pub use checkpoint::CommitPath;
pub use error::{CheckpointError, CreateError, NotHereError, WorktreeError};
pub use handle::{Files, UpperSource, Worktree, WorktreeSpec};
pub use mode::WorktreeMode;
pub use mounted::{LiveTrees, OverlayTree};
pub use overlay::{Layers, OverlayError, TreeHost};
pub use sweep::{CleanReport, KeptWorktree};
pub use trash::settle_deletions;

#[cfg(doc)]
use crate::git::Repo;
