//! The `grove` binary: parse arguments, call the library, print errors, exit.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = grove::cli::Cli::parse();
    match cli.command {
        grove::cli::Command::Run(_) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("grove: `run` is not built yet");
            }
            ExitCode::from(1)
        }
    }
}
