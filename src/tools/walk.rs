//! The directory walk shared by `list_files` and `grep`: .gitignore-aware, never into
//! `.git`, never following symlinks, sorted, and confined to the root.
//!
//! This module owns which files the search tools see. The start path is resolved through
//! the root's capability handle (so it cannot name anything outside), and the walk always
//! begins at the root so that the root's and intermediate directories' ignore files apply
//! to a subdirectory too, and no ignore file above the root ever does. It must never open
//! file contents: callers open what it yields through the capability handle.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use ignore::WalkBuilder;
use tokio_util::sync::CancellationToken;

use super::ToolError;
use super::confine::{ConfinedRoot, io_error};

/// Where a walk starts, resolved beneath the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// A directory, relative to the root without symlinks (empty for the root itself).
    Dir(PathBuf),
    /// A single file (or symlink to one inside the root), relative to the root.
    File(PathBuf),
}

/// Resolves the model's `path` (default: the root) to a walk start.
pub(crate) fn resolve_start(
    confined: &ConfinedRoot,
    shown: &str,
    action: &str,
) -> Result<Start, ToolError> {
    let relative = confined.relative(shown)?;
    let metadata = confined
        .dir()
        .metadata(&relative)
        .map_err(|err| io_error(action, shown, &err))?;
    if !metadata.is_dir() {
        return Ok(Start::File(relative));
    }
    if relative == Path::new(".") {
        return Ok(Start::Dir(PathBuf::new()));
    }
    let canonical = confined
        .dir()
        .canonicalize(&relative)
        .map_err(|err| io_error(action, shown, &err))?;
    let canonical = if canonical == Path::new(".") {
        PathBuf::new()
    } else {
        canonical
    };
    Ok(Start::Dir(canonical))
}

/// What a walk met besides the entries it yielded.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WalkStats {
    /// Entries that could not be read (permissions, vanished while walking).
    pub(crate) unreadable: u64,
}

/// One entry of the walk.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Relative to the root.
    pub(crate) path: PathBuf,
    pub(crate) is_symlink: bool,
    /// A regular file (not a symlink, FIFO, socket or device).
    pub(crate) is_file: bool,
}

/// Walks every non-directory entry under `start` (a [`Start::Dir`] path) in sorted order,
/// calling `visit` until it breaks. Directory symlinks are reported, not followed.
///
/// When `start` itself is ignored (the model named an ignored directory explicitly), it is
/// walked anyway, with the ignore files inside it still applying.
pub(crate) fn walk(
    confined: &ConfinedRoot,
    start: &Path,
    cancel: &CancellationToken,
    mut visit: impl FnMut(Entry) -> ControlFlow<()>,
) -> Result<WalkStats, ToolError> {
    let root = confined.reach();
    let mut stats = WalkStats::default();
    let start_seen = walk_from(root, root, start, cancel, &mut stats, &mut visit)?;
    if !start_seen && !start.as_os_str().is_empty() {
        walk_from(
            root,
            &root.join(start),
            start,
            cancel,
            &mut stats,
            &mut visit,
        )?;
    }
    Ok(stats)
}

/// Walks from `base` (the root or `root/start`), yielding entries under `start`; returns
/// whether the `start` directory was reached (it is not when an ignore rule prunes it).
fn walk_from(
    root: &Path,
    base: &Path,
    start: &Path,
    cancel: &CancellationToken,
    stats: &mut WalkStats,
    visit: &mut impl FnMut(Entry) -> ControlFlow<()>,
) -> Result<bool, ToolError> {
    let filter_root = root.to_owned();
    let filter_start = start.to_owned();
    let walker = WalkBuilder::new(base)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| {
            if entry.depth() > 0 && entry.file_name() == ".git" {
                return false;
            }
            let Ok(relative) = entry.path().strip_prefix(&filter_root) else {
                return false;
            };
            filter_start.starts_with(relative) || relative.starts_with(&filter_start)
        })
        .build();
    let mut start_seen = false;
    for item in walker {
        if cancel.is_cancelled() {
            return Err(ToolError::RespondToModel(
                "the search was cancelled".to_owned(),
            ));
        }
        let entry = match item {
            Ok(entry) => entry,
            Err(_) => {
                stats.unreadable += 1;
                continue;
            }
        };
        let Some(file_type) = entry.file_type() else {
            continue;
        };
        let Ok(relative) = entry.path().strip_prefix(root) else {
            continue;
        };
        if file_type.is_dir() {
            start_seen |= relative == start;
            continue;
        }
        if !relative.starts_with(start) {
            continue;
        }
        let visited = Entry {
            path: relative.to_owned(),
            is_symlink: file_type.is_symlink(),
            is_file: file_type.is_file(),
        };
        if visit(visited).is_break() {
            return Ok(true);
        }
    }
    Ok(start_seen)
}
