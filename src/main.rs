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
            eprintln!("grove: {error:#}");
            ExitCode::FAILURE
        }
    }
}
