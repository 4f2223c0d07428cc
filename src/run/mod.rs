//! The orchestrator: one run from task to applied result, its crash-safe journal, and
//! the reports.
//!
//! This module owns the run's lifecycle and is the only place that combines agents with
//! git. It never prints; it emits events.

pub mod backend;
pub mod config;
pub mod delegate;
pub mod durable;
pub mod gate;
pub mod html_report;
pub mod journal;
pub mod launch;
pub mod lock;
pub mod options;
pub mod orchestrator;
pub mod plan;
pub mod prepare;
pub mod report;
pub mod review;
pub mod state;
pub mod store;
pub mod subtask;
pub mod transcript;
pub mod verdict;

pub use options::{ModelChoice, ModelNames, Models, RunOptions, TurnCaps, WorktreeSetup};
pub use orchestrator::{RunError, resume, run};
pub use report::{RunEnd, RunReport, SubtaskReport};
