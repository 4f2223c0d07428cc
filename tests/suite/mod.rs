//! Integration test suites, one module per area.
mod run_state;
