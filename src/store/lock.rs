//! The repository lock: at most one grove process runs on a repository at a time.
//!
//! This module owns `<common git dir>/grove/lock`. It must never let two processes hold
//! the lock at once, and never take over a lock without reporting whose it was.
//!
//! The lock is an exclusive `flock(2)` on that file, not an `O_EXCL`-created file: the
//! kernel drops a flock when its holder exits however it exits (kill -9, OOM kill, power
//! loss), so a crash can never leave the repository locked and no pid guessing is needed
//! to decide whether a lock is stale. The file's contents ({run_id, pid, hostname,
//! started_ms}) only name the holder, for the refusal message and for `grove runs`. The
//! holder clears them on release; contents found by a process that *got* the lock
//! therefore belong to a holder that died, and the takeover is reported
//! ([`RepoLock::taken_over`]). The file is never deleted: deleting a flocked file lets
//! the next process lock a fresh inode while an old holder still holds the unlinked one.
//! Rust opens files close-on-exec, so commands grove spawns never inherit the lock.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::store::journal::now_ms;

/// Who holds (or held) the lock, as written in the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub run_id: String,
    pub pid: u32,
    pub hostname: String,
    /// When the lock was taken, in milliseconds since the Unix epoch.
    pub started_ms: u64,
}

/// Whether a lock holder's process still exists, as far as this machine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Dead,
    /// The holder runs on another host; its pid means nothing here.
    OtherHost,
}

impl LockHolder {
    /// Checks whether the holder's pid is alive (a zombie counts as alive until reaped).
    /// A pid can be reused, so `Alive` is a strong hint, not proof; `Dead` is certain
    /// for the same host.
    pub fn liveness(&self) -> Liveness {
        if self.hostname != this_hostname() {
            return Liveness::OtherHost;
        }
        if pid_is_alive(self.pid) {
            Liveness::Alive
        } else {
            Liveness::Dead
        }
    }
}

/// What a takeover found in the lock file of a holder that died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleLock {
    Holder(LockHolder),
    /// The file held something that is not a holder record (e.g. a write torn by the
    /// crash); the raw text, for the report.
    Unreadable {
        contents: String,
    },
}

impl std::fmt::Display for StaleLock {
    /// The line a user sees when grove takes over a dead holder's lock.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleLock::Holder(holder) => write!(
                f,
                "took over the repository lock of grove run {} (pid {} on {}), which is no \
                 longer running",
                holder.run_id, holder.pid, holder.hostname
            ),
            StaleLock::Unreadable { contents } => write!(
                f,
                "took over a repository lock left by a process that is no longer running \
                 (its holder record is unreadable: {contents:?})"
            ),
        }
    }
}

/// Why the lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds the lock. Not retried: grove refuses rather than
    /// waits, the user decides.
    #[error(
        "grove run {} (pid {} on {}) is running on this repository; wait for it to finish, \
         or stop it (`kill {}`) and continue it later with `grove resume {}`",
        holder.run_id, holder.pid, holder.hostname, holder.pid, holder.run_id
    )]
    Busy { holder: LockHolder, path: PathBuf },
    /// Another process holds the lock but its record could not be read (it may be
    /// writing it right now). Not retried.
    #[error(
        "another grove process holds the repository lock {path} (its holder record is unreadable: \
         {contents:?}); wait for it to finish"
    )]
    BusyUnknown { path: PathBuf, contents: String },
    /// The lock file or its directory could not be opened, locked or written.
    #[error("repository lock {path}: {operation}: {source}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The held repository lock; dropping it releases it.
#[derive(Debug)]
pub struct RepoLock {
    file: Flock<File>,
    path: PathBuf,
    holder: LockHolder,
    taken_over: Option<StaleLock>,
}

/// `<common git dir>/grove/lock`.
pub fn lock_path(common_git_dir: &Path) -> PathBuf {
    common_git_dir.join("grove").join("lock")
}

impl RepoLock {
    /// Takes the repository lock for `run_id` without waiting; refuses with the current
    /// holder's run id and pid if a live process holds it.
    pub fn acquire(common_git_dir: &Path, run_id: &str) -> Result<RepoLock, LockError> {
        let path = lock_path(common_git_dir);
        let io = |operation: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| LockError::Io {
                operation,
                path,
                source,
            }
        };
        let dir = crate::store::durable::parent_dir(&path);
        std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        let mut file = open_lock_file(&path)?;
        let mut locked = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => break locked,
                Err((returned, Errno::EINTR)) => file = returned,
                Err((mut returned, Errno::EWOULDBLOCK)) => {
                    let contents = read_contents(&mut returned, &path)?;
                    return Err(match parse_holder(&contents) {
                        Some(holder) => LockError::Busy { holder, path },
                        None => LockError::BusyUnknown { path, contents },
                    });
                }
                Err((_, errno)) => {
                    return Err(LockError::Io {
                        operation: "flock",
                        path,
                        source: errno.into(),
                    });
                }
            }
        };
        let previous = read_contents(&mut locked, &path)?;
        let taken_over = if previous.trim().is_empty() {
            None
        } else {
            Some(match parse_holder(&previous) {
                Some(holder) => StaleLock::Holder(holder),
                None => StaleLock::Unreadable { contents: previous },
            })
        };
        let holder = LockHolder {
            run_id: run_id.to_string(),
            pid: std::process::id(),
            hostname: this_hostname(),
            started_ms: now_ms(),
        };
        let record = serde_json::to_vec(&holder).map_err(|e| LockError::Io {
            operation: "encode holder record",
            path: path.clone(),
            source: e.into(),
        })?;
        locked.set_len(0).map_err(io("truncate", &path))?;
        locked
            .write_all_at(&record, 0)
            .map_err(io("write holder record", &path))?;
        locked.sync_data().map_err(io("fsync", &path))?;
        Ok(RepoLock {
            file: locked,
            path,
            holder,
            taken_over,
        })
    }

    /// This process's holder record.
    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }

    /// The run the lock was taken for.
    pub fn run_id(&self) -> &str {
        &self.holder.run_id
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Set when the lock was left behind by a holder that died, and was taken over.
    pub fn taken_over(&self) -> Option<&StaleLock> {
        self.taken_over.as_ref()
    }

    /// Releases the lock, reporting a failure to clear the holder record (the lock itself
    /// is released regardless, when the file is closed).
    pub fn release(self) -> Result<(), LockError> {
        let cleared = self.file.set_len(0);
        let path = self.path.clone();
        drop(self);
        cleared.map_err(|source| LockError::Io {
            operation: "clear holder record",
            path,
            source,
        })
    }
}

impl Drop for RepoLock {
    fn drop(&mut self) {
        // Clearing first means a successor that finds contents knows its predecessor
        // died. A failure here only makes a successor report a takeover that was not
        // needed, which is the safe direction.
        let _ = self.file.set_len(0);
    }
}

/// The current holder record of the repository lock, if the file names one. Does not
/// touch the lock itself, so it never disturbs a process acquiring it; use
/// [`LockHolder::liveness`] to tell a live holder from a dead one.
pub fn read_holder(common_git_dir: &Path) -> Result<Option<LockHolder>, LockError> {
    let path = lock_path(common_git_dir);
    match std::fs::read_to_string(&path) {
        Ok(contents) => Ok(parse_holder(&contents)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LockError::Io {
            operation: "read",
            path,
            source,
        }),
    }
}

fn open_lock_file(path: &Path) -> Result<File, LockError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Io {
            operation: "open",
            path: path.to_path_buf(),
            source,
        })
}

fn read_contents(file: &mut File, path: &Path) -> Result<String, LockError> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| LockError::Io {
            operation: "read",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn parse_holder(contents: &str) -> Option<LockHolder> {
    serde_json::from_str(contents.trim()).ok()
}

/// This machine's host name, or `unknown` if it cannot be read.
pub fn this_hostname() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_string())
}

fn pid_is_alive(pid: u32) -> bool {
    // pid 0 and values beyond i32 are not processes; `kill(0, ..)` would even address
    // our own process group.
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        // EPERM: it exists but belongs to someone else.
        Err(_) => true,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn pid_zero_and_out_of_range_pids_are_not_alive() {
        assert!(!pid_is_alive(0), "pid 0 would address our process group");
        assert!(!pid_is_alive(u32::MAX), "pids beyond i32 do not exist");
        assert!(pid_is_alive(std::process::id()), "we are alive");
    }

    #[test]
    fn release_clears_the_record_and_frees_the_lock() {
        let git_dir = tempfile::tempdir().unwrap();
        let first = RepoLock::acquire(git_dir.path(), "20261129-215530-7f3a").unwrap();
        first.release().unwrap();
        assert_eq!(read_holder(git_dir.path()).unwrap(), None);
        let second = RepoLock::acquire(git_dir.path(), "20261129-215531-0000").unwrap();
        assert_eq!(
            second.taken_over(),
            None,
            "a cleanly released lock is not reported as a takeover"
        );
    }
}
