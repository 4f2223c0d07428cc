//! The lead's worktree, where its read-only tools look: a git worktree checked out in
//! the background, or a copy-on-write tree over the run's base tree, made and mounted in
//! the background. Either way the lead's first model call does not wait for it; its
//! tools do (see [`Readiness`]).
//!
//! This file owns the lead's worktree from its creation to its removal. It must never
//! let the lead's tools see a tree before it is ready, and never hand the lead's tree
//! to the user at the run's end (nothing the lead touched is kept).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::git::{GitError, Worktree};
use crate::run::checkout::{MountState, Readiness};
use crate::run::context::RunContext;
use crate::run::id::LEAD_WORKTREE;
use crate::run::subtask::{Subtasks, trees};
use crate::tools::tree::WorktreeMode;

/// The lead's worktree, being made or made.
pub(crate) struct LeadTree {
    /// Where the lead's tools work.
    pub(crate) root: PathBuf,
    /// What they wait for.
    pub(crate) readiness: Readiness,
    made: Made,
}

enum Made {
    Git(Worktree),
    /// The task making the copy-on-write tree; `None` when it could not.
    CopyOnWrite(JoinHandle<Option<Worktree>>),
}

impl LeadTree {
    /// Starts making the lead's worktree. A copy-on-write tree needs the base tree set
    /// up first, so it is one only when no setup command must run in the base (the
    /// lead's reads would wait for an `npm ci`); otherwise, and in git mode, it is a git
    /// worktree whose checkout runs in the background.
    pub(crate) async fn create(
        ctx: &Arc<RunContext>,
        subtasks: &Subtasks,
    ) -> Result<Self, GitError> {
        let spec = ctx.worktree_spec(LEAD_WORKTREE);
        let copy_on_write = ctx.options.worktree_mode == WorktreeMode::Overlay
            && ctx.options.worktree_setup.once_per_base().is_none();
        if !copy_on_write {
            let worktree = ctx.repo.create_worktree(spec).await?;
            return Ok(Self {
                root: worktree.path().to_path_buf(),
                readiness: Readiness::Checkout(worktree.clone()),
                made: Made::Git(worktree),
            });
        }
        let root = spec.path;
        let (state, readiness) = watch::channel(MountState::Mounting);
        let making = subtasks.make_worktree(LEAD_WORKTREE);
        let (ctx, expected) = (Arc::clone(ctx), root.clone());
        let handle = tokio::spawn(async move {
            let worktree = match making.await {
                Ok(worktree) => worktree,
                Err(error) => {
                    ctx.pause_if_disk_full("creating the lead's worktree", &error);
                    let _ = state.send(MountState::Failed(error.to_string()));
                    return None;
                }
            };
            // A worktree kept from a run that made git ones is reused as it is.
            let ready = match worktree.ready().await {
                Err(error) => MountState::Failed(error.to_string()),
                Ok(()) if worktree.path() != expected => MountState::Failed(format!(
                    "it was made at {}, not at {}",
                    worktree.path().display(),
                    expected.display()
                )),
                Ok(()) => MountState::Mounted,
            };
            let _ = state.send(ready);
            Some(worktree)
        });
        Ok(Self {
            root,
            readiness: Readiness::Mount(readiness),
            made: Made::CopyOnWrite(handle),
        })
    }

    /// Removes the worktree and its branch in the background, once it is made: nothing
    /// the lead touched is in the result or the user's branch.
    pub(crate) fn remove(self, ctx: &Arc<RunContext>) -> JoinHandle<()> {
        let ctx = Arc::clone(ctx);
        tokio::spawn(async move {
            let worktree = match self.made {
                Made::Git(worktree) => worktree,
                Made::CopyOnWrite(making) => match making.await {
                    Ok(Some(worktree)) => worktree,
                    _ => return,
                },
            };
            if let Err(error) = trees::remove_worktree(&ctx, &worktree).await {
                // Its branch stays with it: a resume reuses both, `grove clean` finds both.
                ctx.note(format!("could not remove the lead's worktree: {error}"));
                return;
            }
            let lead = LEAD_WORKTREE.number();
            if let Err(error) = ctx.repo.delete_subtask_branch(&ctx.run, lead).await {
                ctx.note(format!("kept the lead's branch: {error}"));
            }
        })
    }
}
