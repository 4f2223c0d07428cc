//! Tools that wait for their worktree's checkout before they touch its files.
//!
//! A worktree is registered at once and filled in the background, so that a subagent's
//! first model call (seconds) overlaps it. This wrapper owns that wait: a tool call blocks only
//! if it arrives before the tree is ready. It must never let a tool run on a half-filled
//! or unmounted tree.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};
use crate::worktree::Worktree;

/// A tool that waits for its worktree to be ready before it runs.
struct AfterCheckout {
    inner: Arc<dyn Tool>,
    worktree: Worktree,
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
            ready = self.worktree.ready() => ready.map_err(|error| {
                ToolError::Fatal(format!("the worktree could not be checked out: {error}"))
            })?,
            () = ctx.cancel.cancelled() => {
                return Err(ToolError::RespondToModel("cancelled".into()));
            }
        }
        self.inner.run(input, ctx).await
    }
}

/// `registry` with every tool waiting for `worktree`'s checkout first.
pub fn waiting_for_checkout(registry: &Registry, worktree: &Worktree) -> Registry {
    registry
        .names()
        .into_iter()
        .filter_map(|name| registry.get(name).cloned())
        .fold(Registry::new(), |waiting, inner| {
            waiting.with(Arc::new(AfterCheckout {
                inner,
                worktree: worktree.clone(),
            }))
        })
}
