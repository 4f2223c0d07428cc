//! Test support: the fake model server, sealed git fixtures, and the one sealed runner
//! of the grove binary.

pub mod attempts;
pub mod entries;
pub mod fake_cli;
pub mod fake_server;
pub mod git_fixture;
pub mod grove;
pub mod mcp_stdio;
pub mod merge_order;
pub mod processes;
pub mod requests;
pub mod scripted_model;
pub mod scripted_run;
pub mod ssh_host;
