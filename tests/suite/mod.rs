//! Integration test suites, one module per area.

mod agent;
mod run_state;
mod tools;
