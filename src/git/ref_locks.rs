//! Lock files a killed grove, or a git process it started, left beside a run's refs.
//!
//! git and libgit2 update or delete a loose ref the same way: they create `<ref>.lock`
//! exclusively, write the new value and rename the lock over the ref (or delete both). A
//! process killed in between leaves the lock, and from then on every update or deletion
//! of that ref fails ("cannot lock ref …: File exists"): the resumed run's merges onto
//! its result, the checkpoints of a subtask's branch and the deletion of a merged branch.
//!
//! This file owns removing such locks, and it must never remove one that is not the
//! run's or not stale:
//! - only under the run's own ref folders, `refs/heads/grove/<run>/` and
//!   `refs/grove/archive/<run>/` — never a lock of the user's refs or another run's, and
//!   never `packed-refs.lock`, which any git process on the repository takes to delete
//!   a ref (a stale one is reported, for the user to remove);
//! - only a lock last written [`STALE_REF_LOCK`] ago or longer. A git process the killed
//!   grove started goes on after its parent is gone and may hold a lock for a moment
//!   (milliseconds: no ref update keeps one longer); a younger lock is waited for until
//!   it is that old and looked at again: gone, its holder finished; the same file
//!   (device, inode and modification time), stale and removed; another file, someone
//!   took it again, and it is left alone and reported.
//!
//! The caller holds the repository lock for the run (no other grove updates these refs)
//! and knows the run's earlier process is not running.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Repo;
use super::error::GitError;
use super::names::RunId;

/// How old a lock on one of a run's refs must be to be taken for one a killed process
/// left.
pub const STALE_REF_LOCK: Duration = Duration::from_secs(10);

/// What [`Repo::clear_stale_ref_locks`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefLocks {
    /// Stale locks on the run's refs, removed.
    pub removed: Vec<PathBuf>,
    /// Locks on the run's refs taken again while grove waited for them to age: left.
    pub in_use: Vec<PathBuf>,
    /// `packed-refs.lock`, when it is stale: not the run's alone, so left for the user.
    pub packed_refs: Option<PathBuf>,
}

/// One lock file as it was seen: which file it was, and when it was last written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    path: PathBuf,
    device: u64,
    inode: u64,
    modified: SystemTime,
}

impl Repo {
    /// Removes the stale lock files on `run`'s refs (see the module doc for which and
    /// when), waiting up to `stale_after` for younger ones to age; reports what it
    /// removed, what it left and a stale `packed-refs.lock`.
    pub async fn clear_stale_ref_locks(
        &self,
        run: &RunId,
        stale_after: Duration,
    ) -> Result<RefLocks, GitError> {
        let dirs = [
            self.common_dir()
                .join("refs/heads/grove")
                .join(run.as_str()),
            self.common_dir()
                .join("refs/grove/archive")
                .join(run.as_str()),
        ];
        let mut found = Vec::new();
        for dir in &dirs {
            locks_in(dir, &mut found)?;
        }
        let mut report = RefLocks::default();
        let now = SystemTime::now();
        let mut young = Vec::new();
        let mut wait = Duration::ZERO;
        for lock in found {
            match time_to_stale(lock.modified, now, stale_after) {
                None => remove(&lock.path, &mut report)?,
                Some(left) => {
                    wait = wait.max(left);
                    young.push(lock);
                }
            }
        }
        if !young.is_empty() {
            tokio::time::sleep(wait).await;
            for lock in young {
                match seen(&lock.path)? {
                    None => {}
                    Some(again) if again == lock => remove(&lock.path, &mut report)?,
                    Some(_) => report.in_use.push(lock.path),
                }
            }
        }
        let packed = self.common_dir().join("packed-refs.lock");
        if let Some(lock) = seen(&packed)?
            && time_to_stale(lock.modified, SystemTime::now(), stale_after).is_none()
        {
            report.packed_refs = Some(packed);
        }
        Ok(report)
    }
}

/// `None` when a lock last written at `modified` is stale at `now` (written
/// `stale_after` ago or longer), else how long until it is. A time in the future (a
/// clock set back) counts as now.
fn time_to_stale(modified: SystemTime, now: SystemTime, stale_after: Duration) -> Option<Duration> {
    let age = now.duration_since(modified).unwrap_or(Duration::ZERO);
    stale_after.checked_sub(age).filter(|left| !left.is_zero())
}

/// Adds the `*.lock` files under `dir` (any depth) to `found`; none when `dir` does not
/// exist. A ref name cannot end in `.lock`, so every such file is a lock.
fn locks_in(dir: &Path, found: &mut Vec<Seen>) -> Result<(), GitError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(GitError::io("read", dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(GitError::io("read", dir))?.path();
        if path.is_dir() {
            locks_in(&path, found)?;
        } else if path.extension().is_some_and(|ext| ext == "lock")
            && let Some(lock) = seen(&path)?
        {
            found.push(lock);
        }
    }
    Ok(())
}

/// The file at `path` as it is now; `None` when there is none.
fn seen(path: &Path) -> Result<Option<Seen>, GitError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(GitError::io("stat", path)(e)),
    };
    let modified = meta.modified().map_err(GitError::io("stat", path))?;
    Ok(Some(Seen {
        path: path.to_path_buf(),
        device: meta.dev(),
        inode: meta.ino(),
        modified,
    }))
}

/// Removes the lock at `path` and records it; one already gone is not an error.
fn remove(path: &Path, report: &mut RefLocks) -> Result<(), GitError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            report.removed.push(path.to_path_buf());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(GitError::io("remove the stale lock", path)(e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_stale_once_it_is_as_old_as_the_bound_and_waited_for_until_then() {
        let now = SystemTime::now();
        let ago = |secs| now - Duration::from_secs(secs);
        let bound = Duration::from_secs(10);
        assert_eq!(
            [
                time_to_stale(ago(60), now, bound),
                time_to_stale(ago(10), now, bound),
                time_to_stale(ago(4), now, bound),
                time_to_stale(now, now, bound),
                time_to_stale(now + Duration::from_secs(30), now, bound),
            ],
            [
                None,
                None,
                Some(Duration::from_secs(6)),
                Some(bound),
                Some(bound),
            ],
            "a lock is stale once written the bound ago; a younger one (or one from the \
             future) is waited for until it is that old"
        );
    }

    fn backdated(path: &Path, secs: u64) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let file = std::fs::File::create(path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(secs))
            .unwrap();
    }

    #[tokio::test]
    async fn only_the_runs_stale_locks_are_removed_and_one_taken_again_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .status()
                .unwrap();
            assert!(status.success(), "git {args:?}");
        };
        git(&["init", "--quiet"]);
        let options = crate::git::GitOptions {
            env: vec![
                ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
                ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ],
            ..crate::git::GitOptions::default()
        };
        let repo = Repo::open(dir.path(), options).await.unwrap();
        let run = RunId::new("20261129-215530-7f3a").unwrap();
        let refs = repo.common_dir().join("refs");
        let old = refs.join("heads/grove/20261129-215530-7f3a/1.lock");
        let archive = refs.join("grove/archive/20261129-215530-7f3a/1-2.lock");
        let fresh = refs.join("heads/grove/20261129-215530-7f3a/result.lock");
        let finishing = refs.join("heads/grove/20261129-215530-7f3a/2.lock");
        let others = [
            refs.join("heads/grove/20261129-215531-0000/1.lock"),
            refs.join("heads/main.lock"),
        ];
        for path in [&old, &archive].into_iter().chain(&others) {
            backdated(path, 60);
        }
        backdated(&finishing, 0);
        backdated(&fresh, 0);
        backdated(&repo.common_dir().join("packed-refs.lock"), 60);
        // A live holder: `finishing` is let go (renamed over its ref), `fresh` is let go
        // and taken again, while the sweep waits for them to age.
        let holder = {
            let (finishing, fresh) = (finishing.clone(), fresh.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                std::fs::remove_file(&finishing).unwrap();
                std::fs::remove_file(&fresh).unwrap();
                std::fs::File::create(&fresh).unwrap();
            })
        };

        let report = repo
            .clear_stale_ref_locks(&run, Duration::from_millis(400))
            .await
            .unwrap();
        holder.await.unwrap();

        let mut removed = report.removed.clone();
        removed.sort();
        let left: Vec<bool> = [&old, &archive, &fresh, &others[0], &others[1]]
            .iter()
            .map(|path| path.exists())
            .collect();
        assert_eq!(
            (removed, report.in_use, report.packed_refs, left,),
            (
                vec![archive.clone(), old.clone()],
                vec![fresh.clone()],
                Some(repo.common_dir().join("packed-refs.lock")),
                vec![false, false, true, true, true],
            ),
            "the run's stale locks go; a young one taken again while waited for stays, and \
             so do other runs', the user's and packed-refs.lock (only reported)"
        );
    }
}
