//! A run's durable state: its journal, the snapshot folded from it, the agents'
//! transcripts, the repository lock, and the crash-safe writes they all rest on.
//!
//! This module owns everything grove keeps on disk about a run under
//! `<common git dir>/grove/` (`lock`, `runs/<run>/journal.jsonl`, `state.json`,
//! `transcripts/`), its formats, and the rule that a record reported durable survives a
//! crash. It must never run the pipeline (no agents, no model calls, no git commands; it
//! records what the run did and folds it back), never print, and never import `run::`:
//! the run depends on the store, not the other way round.

pub mod attempt_status;
pub mod attempts;
pub mod disk_full;
pub mod durable;
pub mod findings;
pub mod journal;
pub mod lock;
pub mod recorded;
pub mod replay;
pub mod run_status;
pub mod runs;
pub mod slots;
pub mod snapshot;
pub mod spend;
pub mod state;
pub mod transcript;

pub use recorded::{RecordedOptions, RecordedOptionsError};
pub(crate) use runs::replay_checked;
pub use runs::{
    ActiveRun, JOURNAL_FILE, Recovery, RunDetails, RunId, RunStart, RunStore, RunSummary,
    SNAPSHOT_FILE, SnapshotWrite, StoreError,
};
