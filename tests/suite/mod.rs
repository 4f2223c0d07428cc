//! Integration test suites, one module per area.

mod agent;
pub(crate) mod backends;
mod check;
pub(crate) mod cli;
mod config;
mod demo;
mod faults;
mod git;
mod history;
mod loop_http;
mod mcp;
mod model;
mod model_faults;
mod overlay;
mod overlay_lead;
mod polish;
mod real_clis;
mod report;
mod resolve;
mod result_check;
mod review;
pub(crate) mod run;
mod run_state;
mod sandbox;
mod scopes;
mod tools;
mod trust;
