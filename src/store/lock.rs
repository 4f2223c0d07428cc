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
//! Rust opens files close-on-exec, so commands grove spawns drop the lock when they run
//! their program; a child forked just before its parent was killed holds it until then,
//! and a successor waits that moment out ([`LockError::HeldByLeftover`]) rather than
//! refuse in the name of a dead run.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// Another process holds the lock but its record could not be read, even after
    /// [`RECORD_WAIT`] (a holder writes it right after it takes the lock; this one died
    /// mid-write, or is not grove). Not retried further.
    #[error(
        "another grove process holds the repository lock {path} (its holder record is unreadable: \
         {contents:?}); wait for it to finish"
    )]
    BusyUnknown { path: PathBuf, contents: String },
    /// The holder died, yet the lock stayed held past [`LEFTOVER_WAIT`]: a process it
    /// forked still has the lock file open (a fork shares its open files until it runs
    /// its program, which drops them). Retried for that long before this is returned.
    #[error(
        "grove run {} (pid {} on {}) is no longer running, but a process it started still          holds the repository lock {path} (`fuser -v {path}` names it); once that process          has ended, continue with `grove resume {}`",
        holder.run_id, holder.pid, holder.hostname, holder.run_id
    )]
    HeldByLeftover { holder: LockHolder, path: PathBuf },
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

/// How long a lock whose holder died may stay held before grove says so. A process the
/// holder forked shares the lock file until it runs its program (which closes it) or
/// dies with its parent: at most a moment, longer on a loaded machine, and a `grove
/// resume` right after a `kill -9` would otherwise be refused in the name of a dead run.
const LEFTOVER_WAIT: Duration = Duration::from_secs(5);

/// How long a lock whose holder record is empty or torn is read again before it is
/// reported unreadable: the holder may be writing it (two starts at once).
const RECORD_WAIT: Duration = Duration::from_secs(2);

/// How often a lock held past its dead holder, or whose record is being written, is
/// tried again.
const LEFTOVER_POLL: Duration = Duration::from_millis(20);

/// `<common git dir>/grove/lock`.
pub fn lock_path(common_git_dir: &Path) -> PathBuf {
    common_git_dir.join("grove").join("lock")
}

impl RepoLock {
    /// Takes the repository lock for `run_id`; refuses at once with the current holder's
    /// run id and pid if a live process holds it. A holder that is dead on this host is
    /// waited out for up to [`LEFTOVER_WAIT`] (the calling thread sleeps: this runs once,
    /// before a run or a review starts), while what it forked lets go of the lock.
    pub fn acquire(common_git_dir: &Path, run_id: &str) -> Result<RepoLock, LockError> {
        Self::acquire_waiting(common_git_dir, run_id, LEFTOVER_WAIT)
    }

    /// [`RepoLock::acquire`], waiting at most `leftover_wait` for a lock whose holder is
    /// dead on this host to be let go by what that holder left running.
    fn acquire_waiting(
        common_git_dir: &Path,
        run_id: &str,
        leftover_wait: Duration,
    ) -> Result<RepoLock, LockError> {
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
        let started = Instant::now();
        let deadline = started + leftover_wait;
        let mut locked = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => break locked,
                Err((returned, Errno::EINTR)) => file = returned,
                Err((mut returned, Errno::EWOULDBLOCK)) => {
                    let contents = read_contents(&mut returned, &path)?;
                    let Some(holder) = parse_holder(&contents) else {
                        // A holder writes its record right after it takes the lock: one
                        // that started a moment ago is named once it has.
                        if started.elapsed() < RECORD_WAIT {
                            std::thread::sleep(LEFTOVER_POLL);
                            file = returned;
                            continue;
                        }
                        return Err(LockError::BusyUnknown { path, contents });
                    };
                    if holder.liveness() != Liveness::Dead {
                        return Err(LockError::Busy { holder, path });
                    }
                    if Instant::now() >= deadline {
                        return Err(LockError::HeldByLeftover { holder, path });
                    }
                    std::thread::sleep(LEFTOVER_POLL);
                    file = returned;
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

/// The whole file, from its start whatever was read of it before.
fn read_contents(file: &mut File, path: &Path) -> Result<String, LockError> {
    let mut bytes = Vec::new();
    file.rewind()
        .and_then(|()| file.read_to_end(&mut bytes))
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

    /// A lock file naming a holder whose process has ended, and a second open of it that
    /// holds the flock, as a forked child of that holder would.
    fn held_by_a_leftover(git_dir: &Path) -> (LockHolder, Flock<File>) {
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        ended.wait().unwrap();
        let holder = LockHolder {
            run_id: "20261129-215530-7f3a".to_owned(),
            pid: ended.id(),
            hostname: this_hostname(),
            started_ms: 1,
        };
        let path = lock_path(git_dir);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(&holder).unwrap()).unwrap();
        let leftover = Flock::lock(
            open_lock_file(&path).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        (holder, leftover)
    }

    #[test]
    fn a_dead_holders_lock_is_waited_for_while_a_leftover_holds_it_then_taken_over() {
        let git_dir = tempfile::tempdir().unwrap();
        let (holder, leftover) = held_by_a_leftover(git_dir.path());
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            drop(leftover);
        });
        let lock = RepoLock::acquire(git_dir.path(), "20261129-215531-0000").unwrap();
        letting_go.join().unwrap();
        assert_eq!(
            lock.taken_over(),
            Some(&StaleLock::Holder(holder)),
            "once the leftover lets go, the dead holder's lock is taken over and reported"
        );
    }

    #[test]
    fn a_dead_holders_lock_a_leftover_keeps_is_refused_naming_the_run_to_resume() {
        let git_dir = tempfile::tempdir().unwrap();
        let (holder, _leftover) = held_by_a_leftover(git_dir.path());
        let refused = RepoLock::acquire_waiting(
            git_dir.path(),
            "20261129-215531-0000",
            Duration::from_millis(100),
        )
        .unwrap_err();
        let message = refused.to_string();
        assert!(
            matches!(&refused, LockError::HeldByLeftover { holder: named, .. } if *named == holder)
                && message.contains("is no longer running")
                && message.contains("grove resume 20261129-215530-7f3a"),
            "a lock kept past its dead holder is refused saying so and what to run: {message}"
        );
    }

    #[test]
    fn a_holder_still_writing_its_record_is_named_not_called_unreadable() {
        let git_dir = tempfile::tempdir().unwrap();
        let path = lock_path(git_dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A holder between its flock and its record: the file is still empty.
        let holding = Flock::lock(
            open_lock_file(&path).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        let holder = LockHolder {
            run_id: "20261129-215530-7f3a".to_owned(),
            pid: std::process::id(),
            hostname: this_hostname(),
            started_ms: 1,
        };
        let record = serde_json::to_vec(&holder).unwrap();
        let writing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            holding.write_all_at(&record, 0).unwrap();
            holding
        });
        let refused = RepoLock::acquire(git_dir.path(), "20261129-215531-0000").unwrap_err();
        let _holding = writing.join().unwrap();
        assert!(
            matches!(&refused, LockError::Busy { holder: named, .. } if *named == holder),
            "a second start while the first writes its record names the first run: {refused}"
        );
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
