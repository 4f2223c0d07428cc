//! The trash: directories grove removes are renamed into it at once and deleted on a
//! thread of their own, so that no run, removal or `grove clean` waits on the disk
//! (deleting a 30,000-file tree takes seconds here).
//!
//! This module owns the background deletions of this process and the names of what it
//! puts in a trash folder (`<kind>-<pid>-<n>`, so that a later grove can tell a dead
//! process's leftovers from a live one's). It never decides what to remove.

use std::path::{Path, PathBuf};

use crate::git::GitError;

/// Numbers the trash names of removals within this process.
static REMOVALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// This process's deletions still running in the background.
static DELETIONS: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// A number no other removal of this process has used.
pub(super) fn next_number() -> u64 {
    REMOVALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What became of a path [`move_into`] was asked to move into a trash folder.
pub(super) enum Moved {
    /// It is in the trash now.
    Done,
    /// It was already gone.
    Gone,
    /// The rename was refused (another filesystem, mostly).
    Refused(std::io::Error),
}

/// Renames `path` to `to`, an entry of the trash folder `trash`; the error is the
/// folder's, which could not be made. The folder is made again when an emptied trash was
/// removed between its making and the rename (see [`in_background`]), so a missing
/// destination never reads as a missing `path`.
pub(super) fn move_into(trash: &Path, path: &Path, to: &Path) -> std::io::Result<Moved> {
    let mut attempts = 0;
    loop {
        std::fs::create_dir_all(trash)?;
        match std::fs::rename(path, to) {
            Ok(()) => return Ok(Moved::Done),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if path.symlink_metadata().is_err() {
                    return Ok(Moved::Gone);
                }
                attempts += 1;
                if attempts == 3 {
                    return Ok(Moved::Refused(e));
                }
            }
            Err(e) => return Ok(Moved::Refused(e)),
        }
    }
}

/// Deletes `paths` on a thread of their own that the process need not wait for (see
/// [`settle_deletions`]); a path already gone is fine, and a failure leaves the entry in
/// its trash for the next sweep.
pub(super) fn delete_in_background(trash: &Path, paths: Vec<PathBuf>) {
    in_background(trash, move || {
        for path in paths {
            let _ = std::fs::remove_dir_all(&path);
        }
    });
}

/// Runs `job` (deletions, or a spare's emptying) on a thread of its own, waited for only
/// by [`settle_deletions`], then removes the trash folder `trash` if that left it empty:
/// a run leaves no folder behind (a removal meanwhile makes it again, [`move_into`]).
pub(super) fn in_background(trash: &Path, job: impl FnOnce() + Send + 'static) {
    let trash = trash.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("grove-delete".to_owned())
        .spawn(move || {
            job();
            let _ = std::fs::remove_dir(&trash);
        });
    if let Ok(handle) = spawned {
        let mut pending = DELETIONS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.retain(|handle| !handle.is_finished());
        pending.push(handle);
    }
}

/// Moves `path` into `trash` (as `gone-<pid>-<n>`) at once and deletes it in the
/// background; deletes it in place when it cannot be renamed there (another filesystem).
pub(super) fn discard_in_background(path: &Path, trash: &Path) -> Result<(), GitError> {
    let number = next_number();
    let moved = trash.join(format!("gone-{}-{number}", std::process::id()));
    let moved_into = move_into(trash, path, &moved).map_err(|source| GitError::Io {
        action: "create",
        path: trash.to_path_buf(),
        source,
    })?;
    match moved_into {
        Moved::Done => delete_in_background(trash, vec![moved]),
        Moved::Gone => {}
        Moved::Refused(_) => delete_in_background(trash, vec![path.to_path_buf()]),
    }
    Ok(())
}

/// Waits until every deletion this process started in the background has finished (the
/// binary before it exits, tests and benchmarks that look at the disk). Polled, not
/// joined on a blocking thread: dropping the wait (a Ctrl-C) leaves nothing for the
/// runtime's shutdown to wait on, and what is left the next grove's sweep finishes.
pub async fn settle_deletions() {
    loop {
        let settled = {
            let mut pending = DELETIONS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pending.retain(|handle| !handle.is_finished());
            pending.is_empty()
        };
        if settled {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// True unless process `pid` is known to be gone (`ESRCH`); this process is alive.
pub(super) fn process_alive(pid: i32) -> bool {
    pid == i32::try_from(std::process::id()).unwrap_or(-1)
        || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            .map_or_else(|errno| errno != nix::errno::Errno::ESRCH, |()| true)
}
