//! Tools that wait for their worktree's checkout before they touch its files.
//!
//! A worktree is registered at once and filled in the background (the lead's
//! copy-on-write tree: made and mounted in the background), so that a subagent's first
//! model call (seconds) overlaps it. This wrapper owns that wait: a tool call blocks only
//! if it arrives before the tree is ready. It must never let a tool run on a half-filled
//! or unmounted tree.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::watch;

use crate::git::Worktree;
use crate::tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};

/// What a tool waits for before it touches its worktree's files.
#[derive(Debug, Clone)]
pub enum Readiness {
    /// The worktree's checkout, running in the background.
    Checkout(Worktree),
    /// A tree being made and mounted in the background.
    Mount(watch::Receiver<MountState>),
}

/// How far a tree made in the background has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountState {
    Mounting,
    Mounted,
    /// It could not be made; why.
    Failed(String),
}

impl Readiness {
    /// Waits until the tree is ready; why it never will be, otherwise.
    async fn wait(&self) -> Result<(), String> {
        match self {
            Self::Checkout(worktree) => worktree
                .ready()
                .await
                .map_err(|error| format!("the worktree could not be checked out: {error}")),
            Self::Mount(state) => {
                let mut state = state.clone();
                let reached = state
                    .wait_for(|state| *state != MountState::Mounting)
                    .await
                    .map_err(|_| "the worktree was never made".to_owned())?;
                match &*reached {
                    MountState::Failed(why) => {
                        Err(format!("the worktree could not be made: {why}"))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

/// A tool that waits for its worktree to be ready before it runs.
struct AfterCheckout {
    inner: Arc<dyn Tool>,
    ready: Readiness,
}

#[async_trait]
impl Tool for AfterCheckout {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn input_schema(&self) -> Value {
        self.inner.input_schema()
    }

    fn mutates(&self) -> bool {
        self.inner.mutates()
    }

    fn repeatable(&self) -> bool {
        self.inner.repeatable()
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::select! {
            ready = self.ready.wait() => ready.map_err(ToolError::Fatal)?,
            () = ctx.cancel.cancelled() => {
                return Err(ToolError::RespondToModel("cancelled".into()));
            }
        }
        self.inner.run(input, ctx).await
    }
}

/// `registry` with every tool waiting for `worktree`'s checkout first.
pub fn waiting_for_checkout(registry: &Registry, worktree: &Worktree) -> Registry {
    waiting_for(registry, &Readiness::Checkout(worktree.clone()))
}

/// `registry` with every tool waiting for `ready` first.
pub fn waiting_for(registry: &Registry, ready: &Readiness) -> Registry {
    registry
        .names()
        .into_iter()
        .filter_map(|name| registry.get(name).cloned())
        .fold(Registry::new(), |waiting, inner| {
            waiting.with(Arc::new(AfterCheckout {
                inner,
                ready: ready.clone(),
            }))
        })
}
