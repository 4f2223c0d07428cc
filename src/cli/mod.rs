//! The command line: the clap definitions and the dispatch to one file per subcommand.
//!
//! This is the binary's edge: it parses flags, builds the library's inputs, renders
//! events and reports, and maps outcomes to exit codes (DESIGN.md: 0 every subtask
//! merged, 3 finished but not everything was done, 1 error, 2 usage, 130 interrupted).
//! `commands/` holds one file per subcommand (its args struct and its function),
//! `render/` everything printed for people, `drive` the live run shared by the
//! subcommands that run one, `args` the clap definitions, `exit` the exit codes.

mod args;
mod commands;
mod drive;
mod exit;
mod render;

use std::process::ExitCode;

use anyhow::Context as _;

pub use args::Cli;
use args::Command;
use commands::{
    clean, completions, demo, exec_server, gc, init, mcp, report, resume, review, run, runs, trust,
};
pub use drive::UsageError;
pub use exit::EXIT_USAGE;

/// Runs the parsed command line and returns the process's exit code.
pub async fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    let directory = match cli.directory {
        Some(directory) => directory,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let code = match cli.command {
        Command::Run(args) => run::run(&directory, *args).await,
        Command::Resume(args) => resume::resume(&directory, &args).await,
        Command::Runs(args) => runs::runs(&directory, &args).await,
        Command::Clean(args) => clean::clean(&directory, &args).await,
        Command::Gc(args) => gc::gc(&directory, &args).await,
        Command::Demo(args) => demo::demo(&directory, &args).await,
        Command::Completions(args) => Ok(completions::completions(
            &args,
            <Cli as clap::CommandFactory>::command(),
        )),
        Command::Init(args) => init::init(&directory, &args).await,
        Command::Trust(args) => trust::trust(&directory, &args).await,
        Command::Review(args) => review::review(&directory, &args).await,
        Command::Report(args) => report::report(&directory, &args).await,
        Command::Mcp(args) => mcp::mcp(&directory, &args).await,
        Command::ExecServer(args) => exec_server::exec_server(&args).await,
    };
    // Removed trees are deleted in the background so that no stage waits on the disk;
    // the process waits for them before it exits, or the trash would keep what was cut
    // short until the next grove (a copy-on-write tree's own files take milliseconds, a
    // 30,000-file checkout seconds). A stop signal ends the wait: the command is done,
    // and the next grove's sweep deletes the rest.
    let settled = grove::worktree::settle_deletions();
    match drive::StopSignals::new() {
        Ok(mut signals) => {
            tokio::select! {
                () = settled => {}
                _ = signals.next() => {}
            }
        }
        Err(_) => settled.await,
    }
    code
}
