//! One file per subcommand: its clap args struct and the function that runs it.
//!
//! A command file builds the library's inputs from its flags, calls the library, hands
//! what came back to `render`, and returns the exit code. It must never print a run's
//! events itself (that is `render`) nor hold logic the library should own.

pub mod clean;
pub mod completions;
pub mod demo;
pub mod exec_server;
pub mod gc;
pub mod init;
pub mod mcp;
pub mod report;
pub mod resume;
pub mod review;
pub mod run;
pub mod runs;
pub mod trust;
