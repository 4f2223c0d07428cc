//! How a run is configured: the option types, the project file `.grove/config.toml`, the
//! precedence of flags over the file over the built-in defaults, and the user's trust of
//! the file's setup command and of its keys that widen the sandbox (`trust.rs`,
//! `widening.rs`).
//!
//! This module owns turning what the user said (flags, the project file) into
//! [`RunOptions`]. It must never run or copy anything a setting names (the run does
//! that), never print, and never import `run::` pipeline types: the run reads settings,
//! not the other way round.
//!
//! `options.rs` holds the types; `config.rs` parses the file and layers it, pointing
//! down to `options.rs` (never back).

pub mod config;
pub mod options;
pub mod prices;
pub mod ratchet;
pub mod remote;
pub mod template;
pub mod trust;
mod values;
pub mod widening;

pub use options::{ModelChoice, ModelNames, Models, RunOptions, TurnCaps, WorktreeSetup};
