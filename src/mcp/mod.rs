//! `grove mcp`: grove as a Model Context Protocol server on stdio, so that an agent in
//! Claude Code, Codex, Gemini CLI or Cursor can hand a fan-out to grove.
//!
//! This module owns the server (rmcp over stdin/stdout), its tools (`run`, `resume`,
//! `list_runs`, `show_run`, `review`), their arguments, the progress notifications a
//! run sends while it goes, and the text summaries next to each tool's JSON. A run
//! started here is an ordinary run ([`crate::run::run`]: journaled, resumable, listed by
//! `grove runs`), and a review is [`crate::review::override_verdicts`], with the
//! CLI's safety. It must never write to stdout (the protocol owns it), never print
//! anything else (events go to the sink the caller renders on stderr), and never
//! reimplement what the run or the review does.

mod arguments;
mod params;
mod progress;
mod summary;
mod tools;
mod transport;

use std::path::PathBuf;

use rmcp::ServiceExt as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::event::EventSink;
use crate::git::{GitError, GitOptions, Repo};

use tools::Tools;

/// Why `grove mcp` could not serve. None of these are retried.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The directory is not a git repository: there is nothing to run in.
    #[error(transparent)]
    Repo(#[from] GitError),
    /// The client did not complete the MCP handshake (or stdin closed before it did).
    #[error("the MCP handshake on stdio failed: {0}")]
    Initialize(#[source] Box<rmcp::service::ServerInitializeError>),
    /// The server's task ended abnormally.
    #[error("the MCP server stopped abnormally: {0}")]
    Serve(#[source] tokio::task::JoinError),
}

/// Serves MCP on stdin/stdout for the repository at `directory` until the client
/// disconnects or `shutdown` is cancelled; every run's events also go to `log`.
///
/// On the way out every run still going is cancelled as Ctrl-C would (its work is
/// checkpointed and it stays resumable) and waited for, so none is cut mid-write.
pub async fn serve(
    directory: PathBuf,
    log: EventSink,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    // A server that cannot work is better refused at start than on every call.
    Repo::open(&directory, GitOptions::default()).await?;
    let runs = TaskTracker::new();
    let tools = Tools::new(directory, log, shutdown.clone(), runs.clone());
    // A client that dies sends no cancellation: its runs stop when stdin closes, not
    // after rmcp has waited for them to answer.
    let stdio = transport::stdio(shutdown.clone());
    let outcome = match tools.serve_with_ct(stdio, shutdown.child_token()).await {
        Ok(service) => service.waiting().await.map(drop).map_err(ServeError::Serve),
        // Asked to stop (a signal, or stdin closed) before the client finished the
        // handshake: there was nothing to serve yet, and nothing went wrong.
        Err(_) if shutdown.is_cancelled() => Ok(()),
        Err(error) => Err(ServeError::Initialize(Box::new(error))),
    };
    shutdown.cancel();
    runs.close();
    runs.wait().await;
    outcome
}
