//! The orchestrator: one run from task to applied result, and the reports.
//!
//! This module owns the run's lifecycle and is the only place that combines agents with
//! git. It never prints; it emits events. What it records goes through [`crate::store`];
//! what it is asked to do comes from [`crate::settings`].

pub mod delegate;
pub mod gate;
pub mod launch;
pub mod orchestrator;
pub mod plan;
pub mod prepare;
pub mod report;
pub mod subtask;
pub mod verdict;

// The inputs of `run`, re-exported so that callers of the pipeline need one path.
pub use crate::settings::{ModelChoice, ModelNames, Models, RunOptions, TurnCaps, WorktreeSetup};
pub use orchestrator::{RunError, resume, run};
pub use report::{RunEnd, RunReport, SubtaskReport};
