//! Durable file-system primitives: directory fsync and atomic file replacement.
//!
//! This module owns the ordering of writes, syncs and renames that makes a file survive a
//! crash whole or not at all. It knows nothing of what the files contain and must never
//! leave a half-written file under its final name.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Whether a write waits for the bytes to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync before returning: the write survives a machine crash.
    Synced,
    /// No fsync: the write survives a crash of the process (it is in the kernel's cache)
    /// and reaches the disk later, or with the next synced write of the same file.
    Buffered,
}

/// A write, sync or rename that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{operation} {path}: {source}")]
pub struct DurableError {
    /// What was being done, e.g. `fsync directory`.
    pub operation: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl DurableError {
    pub(crate) fn new(operation: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self {
            operation,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Flushes a directory's entries to disk, so a file created or renamed in it survives a
/// crash of the machine, not only of the process.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    let handle = File::open(dir).map_err(|e| DurableError::new("open directory", dir, e))?;
    handle
        .sync_all()
        .map_err(|e| DurableError::new("fsync directory", dir, e))
}

/// The temporary sibling a replacement is staged in: `<name>.tmp` next to `path`.
pub fn temp_path_for(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Replaces `path` with `contents` so that a crash leaves either the old file or the new
/// one, never a mix: write `<path>.tmp`, fsync it, rename it over `path`, fsync the
/// directory.
///
/// A `<path>.tmp` left by an earlier crash is truncated and reused: only one writer may
/// replace a given file at a time, which the caller guarantees (grove holds the
/// repository lock whenever it writes run state).
pub fn replace_file(path: &Path, contents: &[u8]) -> Result<(), DurableError> {
    let temp = temp_path_for(path);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .map_err(|e| DurableError::new("create", &temp, e))?;
    file.write_all(contents)
        .map_err(|e| DurableError::new("write", &temp, e))?;
    file.sync_all()
        .map_err(|e| DurableError::new("fsync", &temp, e))?;
    drop(file);
    std::fs::rename(&temp, path).map_err(|e| DurableError::new("rename into place", path, e))?;
    sync_dir(parent_dir(path))
}

/// Replaces `path` with `contents` atomically for readers (write `<path>.tmp`, rename it
/// over `path`) without syncing anything: for caches that can be rebuilt, where a machine
/// crash may leave the old file, the new one, or — on some file systems — an empty one.
pub fn replace_file_unsynced(path: &Path, contents: &[u8]) -> Result<(), DurableError> {
    let temp = temp_path_for(path);
    std::fs::write(&temp, contents).map_err(|e| DurableError::new("write", &temp, e))?;
    std::fs::rename(&temp, path).map_err(|e| DurableError::new("rename into place", path, e))
}

/// Runs `work` — file writes and fsyncs, or a wait for a lock held during them — without
/// stalling the other tasks of the runtime: on a multi-threaded runtime the calling
/// worker thread hands its other tasks over first (`block_in_place`), so that a few
/// agents syncing at once do not hold up every model call's replies. On a
/// current-thread runtime (tests), or outside any runtime, it simply runs.
pub(crate) fn off_the_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The directory holding `path`; `.` for a bare file name.
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn replace_file_overwrites_a_stale_temp_and_leaves_no_temp_behind() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state.json");
        std::fs::write(
            temp_path_for(&target),
            b"torn garbage from a crash that was much longer",
        )
        .unwrap();
        replace_file(&target, b"new").unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"new",
            "the target holds exactly the new contents, none of the stale temp's bytes"
        );
        assert!(
            !temp_path_for(&target).exists(),
            "the temp file is renamed away, not left behind"
        );
    }

    #[test]
    fn replace_file_reports_the_path_when_the_directory_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("missing").join("state.json");
        let err = replace_file(&target, b"x").unwrap_err();
        assert_eq!(err.operation, "create");
        assert_eq!(err.path, temp_path_for(&target));
    }
}
