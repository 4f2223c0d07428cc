//! What a run has spent in US dollars, kept beside its journal (`spend.json`) so that a
//! resumed run counts its money budget from what the earlier processes spent.
//!
//! This file owns that file's format. It must never hold more than the figure and the
//! models it could not price: the ledgers themselves are the journal's and transcripts'.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::durable::{self, DurableError};

/// The file's name in the run's directory.
pub const SPEND_FILE: &str = "spend.json";

/// What a run spent so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// US dollars of every priced model turn.
    pub usd: f64,
    /// Models whose turns had no price (their tokens are not in `usd`).
    #[serde(default)]
    pub unpriced: Vec<String>,
}

fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(SPEND_FILE)
}

/// What the run of `run_dir` spent in its earlier processes; nothing for a new run, or
/// when the file cannot be read (an earlier grove without the file): the count then
/// starts from this process's turns.
pub fn read(run_dir: &Path) -> Spent {
    std::fs::read(path(run_dir))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Spent>(&bytes).ok())
        .filter(|spent| spent.usd.is_finite() && spent.usd >= 0.0)
        .unwrap_or_default()
}

/// Records `spent` (replacing the file whole; not fsynced: a crash loses at most the last
/// turns' figure, which the resumed run's count then misses).
pub fn write(run_dir: &Path, spent: &Spent) -> Result<(), DurableError> {
    let bytes = serde_json::to_vec(spent).unwrap_or_default();
    durable::replace_file_unsynced(&path(run_dir), &bytes)
}
