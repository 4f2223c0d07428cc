//! Integration test suites, one module per area.

mod agent;
mod loop_http;
mod model;
mod run_state;
mod tools;
