//! Command-line definitions: one args struct and one function per subcommand.

use clap::{Parser, Subcommand};

/// Run one coding task as a fleet of LLM subagents in parallel git worktrees.
#[derive(Debug, Parser)]
#[command(name = "grove", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a task in the current repository.
    Run(RunArgs),
}

/// Arguments of `grove run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// What to do, in plain words.
    pub task: String,
}
