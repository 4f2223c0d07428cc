//! One worktree's prepared confinement: its rules, its private directories, and how many
//! of its commands run now.
//!
//! This file owns the lifetime of what a worktree's commands share. It must never hand a
//! command a confinement built for another directory, or for an own ref that git has
//! replaced since (the read rule would hold the old file).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::linux;
use super::paths::GitView;

/// What a prepared confinement was built for: the worktree directory and its own ref
/// file (each device and inode).
pub(super) type Identity = (Option<(u64, u64)>, Option<(u64, u64)>);

/// One worktree's confinement and private directories.
pub(super) struct PreparedWorktree {
    pub identity: Identity,
    pub confinement: linux::Confinement,
    /// The commands' `TMPDIR`, emptied after each.
    pub temp_dir: tempfile::TempDir,
    /// The shared directories bound into the tree, relative to its root.
    pub shared: Vec<PathBuf>,
    /// The worktree's git view, from grove's record of its registration.
    pub git: GitView,
    /// Holds the sanitized git files bound over the repository's and the view's `.git`
    /// pointer; read-only to commands.
    pub _git_dir: Option<tempfile::TempDir>,
    /// A disposable view's overlay directories, emptied after each command.
    pub scratch: Option<tempfile::TempDir>,
    /// Commands running with it now; the last one out empties the temporary directory.
    pub running: Mutex<usize>,
}

impl PreparedWorktree {
    /// Counts one more command running with it, until the guard is left or dropped.
    pub(super) fn enter(&self) -> Running<'_> {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Running {
            worktree: self,
            left: false,
        }
    }

    /// Removes what commands left in the temporary directory; false when it could not.
    pub(super) fn empty_temp_dir(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(self.temp_dir.path()) else {
            return false;
        };
        entries.into_iter().all(|entry| {
            let Ok(entry) = entry else {
                return false;
            };
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
                Ok(_) => std::fs::remove_file(&path).is_ok(),
                Err(_) => false,
            }
        })
    }

    /// Makes the directory each shared directory is bound onto, in the tree at `root` (as
    /// grove reaches it): an empty directory, which git does not record. One that is
    /// there already in any shape is left as it is.
    pub(super) fn make_mount_points(&self, root: &Path) {
        for relative in &self.shared {
            let point = root.join(relative);
            if std::fs::symlink_metadata(&point).is_err() {
                let _ = std::fs::create_dir_all(&point);
            }
        }
    }

    /// Throws away what a disposable view's commands wrote (the overlay's upper and
    /// work directories, emptied); false when it could not.
    pub(super) fn discard_scratch(&self) -> bool {
        let Some(scratch) = &self.scratch else {
            return true;
        };
        ["upper", "work"].iter().all(|name| {
            let dir = scratch.path().join(name);
            // overlayfs leaves `work/work` without permissions: given back first.
            crate::worktree::overlay::open_scratch(&dir);
            std::fs::remove_dir_all(&dir).is_ok() && std::fs::create_dir(&dir).is_ok()
        })
    }

    pub(super) fn temp_dir_is_empty(&self) -> bool {
        std::fs::read_dir(self.temp_dir.path()).is_ok_and(|mut entries| entries.next().is_none())
    }
}

/// One command running with a prepared worktree.
pub(super) struct Running<'a> {
    worktree: &'a PreparedWorktree,
    left: bool,
}

impl Running<'_> {
    /// Marks the command done; true when it was the last one running.
    pub(super) fn leave(mut self) -> bool {
        self.left = true;
        self.decrement() == 0
    }

    fn decrement(&self) -> usize {
        let mut running = self
            .worktree
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        *running
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        // A command whose future was dropped midway still stops counting.
        if !self.left {
            self.decrement();
        }
    }
}

/// The size a directory tree takes on disk (allocated blocks, each inode once), without
/// following symlinks; what cannot be read counts as nothing.
pub fn disk_usage(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 && !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// How much the filesystem may grow after a worktree's last measure before it is walked
/// again even though the budget is not near.
const REWALK_GROWTH: u64 = 256 << 20;

/// The disk budget check of an executor's worktrees: a walk of the worktree is exact but
/// costs a moment per thousand files, so after the first one each command only reads how
/// much the worktree's filesystem grew, and walks again when that growth could put the
/// worktree past its budget (or is large).
///
/// Limit: space freed elsewhere on the same filesystem during a command hides as much of
/// the command's growth until the next walk.
#[derive(Debug, Default)]
pub(super) struct DiskMeter {
    /// By worktree: its size at the last walk, and its filesystem's used bytes then.
    measured: Mutex<std::collections::HashMap<std::path::PathBuf, (u64, u64)>>,
}

impl DiskMeter {
    /// The worktree's size on disk when it is over `budget` (blocking: walks the tree).
    pub(super) fn over_budget(&self, worktree: &Path, budget: u64) -> Option<(u64, u64)> {
        let fs_used = filesystem_used(worktree);
        let known = self
            .measured
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(worktree)
            .copied();
        if let (Some((used, fs_then)), Some(fs_now)) = (known, fs_used) {
            let growth = fs_now.saturating_sub(fs_then);
            if used.saturating_add(growth) <= budget && growth < REWALK_GROWTH {
                return None;
            }
        }
        let used = disk_usage(worktree);
        self.measured
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(worktree.to_path_buf(), (used, fs_used.unwrap_or(0)));
        (used > budget).then_some((used, budget))
    }
}

/// The bytes in use on the filesystem holding `path`.
fn filesystem_used(path: &Path) -> Option<u64> {
    let stats = nix::sys::statvfs::statvfs(path).ok()?;
    // The field types differ between platforms (u32 or u64); `as u64` never truncates.
    #[allow(clippy::unnecessary_cast)]
    let (blocks, free, size) = (
        stats.blocks() as u64,
        stats.blocks_free() as u64,
        stats.fragment_size() as u64,
    );
    Some(blocks.saturating_sub(free).saturating_mul(size))
}
