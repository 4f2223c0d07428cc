//! The `grove` binary: parse arguments, call the library, print errors, exit.
#![allow(clippy::print_stderr)]

mod cli;

use std::ffi::OsStr;
use std::process::ExitCode;

use clap::Parser;
use grove::tools::sandbox;

fn main() -> ExitCode {
    // The sandbox launcher must confine itself while this process still has one thread:
    // before argument parsing, before the async runtime.
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(sandbox::LAUNCHER_ARG)) {
        let refusal = sandbox::launch(std::env::args_os().skip(2));
        eprintln!("{}{refusal}", sandbox::REFUSED_PREFIX);
        return ExitCode::from(sandbox::REFUSED_EXIT_CODE);
    }
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
            eprintln!("grove: {}", describe(&error));
            ExitCode::FAILURE
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
