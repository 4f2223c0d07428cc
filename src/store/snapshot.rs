//! A run's snapshot, `state.json`: its [`RunState`] as JSON beside the journal, for
//! people and tools that read the run directory.
//!
//! This file owns reading and writing it. The journal is the run's truth: a snapshot is
//! never synced, and one that cannot be read is rebuilt from the journal by the store.

use std::path::{Path, PathBuf};

use crate::store::durable::{self, DurableError};
use crate::store::state::RunState;

/// Why `state.json` could not be read or written. Never retried; a snapshot that
/// cannot be read is rebuilt from the journal by the store.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot {path}: read: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot {path} is not a valid run state: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("snapshot {path}: cannot encode the run state: {source}")]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Write(#[from] DurableError),
}

/// Replaces the snapshot at `path` atomically for readers (temp file, rename). It is not
/// synced: the journal is the run's truth, fsynced record by record, and the snapshot
/// only a convenience for people and tools that read the run directory; resume rewrites
/// a snapshot that a machine crash left stale or empty. A temp file left by a crash is
/// overwritten.
pub fn write_snapshot(path: &Path, state: &RunState) -> Result<(), SnapshotError> {
    let mut bytes = serde_json::to_vec_pretty(state).map_err(|source| SnapshotError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    bytes.push(b'\n');
    durable::replace_file_unsynced(path, &bytes)?;
    Ok(())
}

/// Reads the snapshot at `path`; `None` if there is none.
pub fn read_snapshot(path: &Path) -> Result<Option<RunState>, SnapshotError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SnapshotError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| SnapshotError::Parse {
            path: path.to_path_buf(),
            source,
        })
}
