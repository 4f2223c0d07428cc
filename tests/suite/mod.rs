//! Integration test suites, one module per area.
mod git;
