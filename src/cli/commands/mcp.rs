//! `grove mcp`: serves the Model Context Protocol on stdio for the repository it is
//! started in, so that Claude Code, Codex, Gemini CLI or Cursor can start and review
//! grove runs.
//!
//! This file only wires the library's server to the process: stdout belongs to the
//! protocol, so the runs' events are rendered as plain lines on stderr, and Ctrl-C
//! (or SIGTERM) stops the server with its runs interrupted, not killed.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;

use crate::cli::render;

/// Arguments of `grove mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {}

/// `grove mcp`: serves until the client disconnects.
pub async fn mcp(directory: &Path, _args: &McpArgs) -> anyhow::Result<ExitCode> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    // Plain lines, never bars: stderr of an MCP server is a log file to its client.
    let renderer = tokio::spawn(render::live(rx, false));
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(shutdown.clone()));
    let served = grove::mcp::serve(directory.to_owned(), EventSink::new(tx), shutdown).await;
    signals.abort();
    let _ = renderer.await;
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM cancels the server and its runs, which checkpoint and stay
/// resumable.
async fn stop_on_signal(shutdown: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    shutdown.cancel();
}
