//! `grove completions SHELL`: prints a shell completion script on stdout.

use std::process::ExitCode;

use clap::Args;

/// Arguments of `grove completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    pub shell: clap_complete::Shell,
}

/// Writes the completion script of `args.shell` for `command` (grove's whole command
/// line) to stdout.
pub fn completions(args: &CompletionsArgs, mut command: clap::Command) -> ExitCode {
    clap_complete::generate(args.shell, &mut command, "grove", &mut std::io::stdout());
    ExitCode::SUCCESS
}
