//! Integration test suites, one module per area.

mod agent;
mod cli;
mod demo;
mod git;
mod loop_http;
mod model;
mod run;
mod run_state;
mod sandbox;
mod tools;
