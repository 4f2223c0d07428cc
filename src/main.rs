//! The `grove` binary: parse arguments, call the library, print errors, exit.
#![allow(clippy::print_stderr)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("grove: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::main(args)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("grove: {}", grove::text::printable(&describe(&error)));
            if error.downcast_ref::<cli::UsageError>().is_some() {
                ExitCode::from(cli::EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The error and its causes on one line, like `{:#}`, but without repeating a cause
/// whose text the message before it already quotes (many errors quote their source).
fn describe(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}
