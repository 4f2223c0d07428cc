//! Test support: the fake model server and sealed git fixtures.

pub mod fake_cli;
pub mod fake_server;
pub mod git_fixture;
pub mod scripted_model;
