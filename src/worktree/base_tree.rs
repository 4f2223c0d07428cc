//! Base trees: a run's base commit checked out once into the cache directory, shared
//! read-only by every overlay tree of every run on that commit, with an index whose stat
//! data matches the checkout (each worker's tree starts from a copy of it). The index is
//! split: its entries are in `sharedindex.<hash>`, which each tree hard-links, so a
//! tree's own index holds only what differs from the base.
//!
//! This module owns `<cache>/grove/<repo>-<hash>/bases/`: `<key>/` (the `tree/`, its
//! `index` and `sharedindex.<hash>`, the `complete` and `setup-done` records) and the lock files `<key>.use`
//! (shared by every run using the base, exclusive for its removal) and `<key>.setup`
//! (held while the setup command runs in it). `<key>` is the commit, plus a hash of the
//! setup command when there is one, so a base is never changed under a mounted overlay
//! by another run's different setup.
//!
//! A base appears atomically: it is built in `.build-<pid>-<n>/` and renamed into place
//! only when complete; a build a crash cut short is never renamed and is swept later; a
//! concurrent run that lost the race uses the winner's. It never deletes a base a run
//! holds, and never writes into one outside the setup lock.
//!
//! A new base is made from the newest one no run holds (same setup command), moved to
//! the build folder under its exclusive lock and brought to the new commit by a
//! two-tree `git read-tree -m -u`, which writes only the files that differ: each run
//! on a branch that the one before it moved would otherwise check the whole repository
//! out again (measured: 2 s of a 4.9 s run on 30,000 files), and leave one more full
//! copy behind. Its setup command runs again there, over the previous output.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

use crate::git::CommitId;
use crate::git::GitError;
use crate::git::Repo;

/// The global options that make a checkout write its files from as many processes as
/// the machine has cores (git 2.32+; an older git ignores the setting, and git keeps one
/// process below 100 files). Measured on this machine, a 30,000-file `read-tree -u`: 0.77
/// and 0.88 s with one process, 0.70 and 0.66 s with two; right after a tree of that size
/// was deleted (an ext4 without a journal then steps over every inode freed in the last
/// minutes for each new one), 20.3, 24.0 and 23.1 s against 6.3 and 6.4 s, and the CPU
/// time from about 21 s to 10 s. Not for a git worktree's fill: up to `--jobs` of those
/// run at once already, and eight at once on tmpfs (no disk in the way) took 1.70 s with
/// it against 1.35 s without (on this ext4, 13.8 to 55.1 s either way, as the disk's
/// state went).
const PARALLEL_CHECKOUT: [&str; 2] = ["-c", "checkout.workers=0"];

/// Keeps a base's index whole while git writes it (whatever the user's `core.splitIndex`):
/// its split is grove's own, made afterwards by [`Repo::split_index`].
const WHOLE_INDEX: [&str; 2] = ["-c", "core.splitIndex=false"];

/// How git names the shared part of a split index: `sharedindex.<hash>`.
const SHARED_INDEX_PREFIX: &str = "sharedindex.";

/// Written into a base's folder when its checkout and index are complete.
const COMPLETE: &str = "complete";
/// Written into a base's folder when its setup command finished successfully.
const SETUP_DONE: &str = "setup-done";

/// Numbers this process's builds.
static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A complete base tree, held (shared) for as long as this value or a clone lives.
#[derive(Debug, Clone)]
pub struct BaseTree {
    commit: CommitId,
    folder: PathBuf,
    setup: Option<String>,
    /// Whether this call built it (false: reused).
    built: bool,
    _held: Arc<Flock<File>>,
}

/// The exclusive right to run the setup command in a base tree.
#[derive(Debug)]
pub struct BaseSetup {
    folder: PathBuf,
    _lock: Flock<File>,
}

impl BaseTree {
    /// The commit it is a checkout of.
    pub fn commit(&self) -> CommitId {
        self.commit
    }

    /// The checked-out files: an overlay's lower directory.
    pub fn tree_dir(&self) -> PathBuf {
        self.folder.join("tree")
    }

    /// The index matching [`BaseTree::tree_dir`] (stat data from its checkout).
    pub fn index_path(&self) -> PathBuf {
        self.folder.join("index")
    }

    /// Copies the base's index to `to`, keeping its date (see `build_base`): a copy
    /// dated now would make every entry racily clean again. The index is split (see
    /// [`Repo::split_index`]): its shared part, one entry per file of the repository, is
    /// hard-linked beside `to` (where git looks for it), copied only across file systems;
    /// what is copied is the base's own part, a few kilobytes.
    pub(super) fn copy_index_to(&self, to: &Path) -> Result<(), GitError> {
        let from = self.index_path();
        let io = |action: &'static str| {
            let path = to.to_path_buf();
            move |source| GitError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(dir) = to.parent() {
            link_shared_indexes(&self.folder, dir)?;
        }
        std::fs::copy(&from, to).map_err(io("copy the base index to"))?;
        let date = std::fs::metadata(&from)
            .and_then(|meta| meta.modified())
            .map_err(io("date"))?;
        std::fs::File::options()
            .write(true)
            .open(to)
            .and_then(|file| file.set_modified(date))
            .map_err(io("date"))
    }

    /// The setup command this base is (to be) prepared with.
    pub fn setup_command(&self) -> Option<&str> {
        self.setup.as_deref()
    }

    /// True when this call checked it out (rather than reusing an earlier run's).
    pub fn was_built(&self) -> bool {
        self.built
    }

    /// True once the setup command has finished in it (always, without one).
    pub fn is_set_up(&self) -> bool {
        self.setup.is_none() || self.folder.join(SETUP_DONE).is_file()
    }

    /// Waits for the exclusive right to run the setup command here; `None` when it has
    /// already run (perhaps by a concurrent run while this one waited) or there is none.
    pub async fn lock_for_setup(&self) -> Result<Option<BaseSetup>, GitError> {
        if self.is_set_up() {
            return Ok(None);
        }
        let path = self.folder.with_extension("setup");
        let lock = Repo::blocking("lock", path.clone(), move || {
            lock_file(&path, FlockArg::LockExclusive)
        })
        .await?;
        if self.is_set_up() {
            return Ok(None);
        }
        Ok(Some(BaseSetup {
            folder: self.folder.clone(),
            _lock: lock,
        }))
    }
}

impl BaseSetup {
    /// Records that the setup command finished, so no later run repeats it.
    pub fn record_done(self) -> Result<(), GitError> {
        let path = self.folder.join(SETUP_DONE);
        std::fs::write(&path, b"").map_err(|source| GitError::Io {
            action: "write",
            path,
            source,
        })
    }
}

impl Repo {
    /// The folder of this repository's base trees.
    pub fn bases_home(&self) -> PathBuf {
        self.worktrees_home().join("bases")
    }

    /// The base tree of `commit` prepared with `setup`: an earlier run's if it is
    /// complete, else checked out now (one `git read-tree -u`, the cost of one `git
    /// worktree add`) and renamed into place. Held until the value is dropped.
    pub async fn base_tree(
        &self,
        commit: CommitId,
        setup: Option<&str>,
    ) -> Result<BaseTree, GitError> {
        let home = self.bases_home();
        create_dir(&home)?;
        let folder = home.join(base_key(commit, setup));
        let held = lock_file(&folder.with_extension("use"), FlockArg::LockShared)?;
        let mut built = false;
        if !folder.join(COMPLETE).is_file() {
            if folder.exists() {
                // Not made by a build (those are renamed in complete): move it aside.
                self.discard(&folder)?;
            }
            let build = home.join(format!(
                ".build-{}-{}",
                std::process::id(),
                BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            let updated = match self.take_over_base(&home, &folder, setup, &build)? {
                Some(from) => self.update_base(from, commit, &build).await.is_ok(),
                None => false,
            };
            if !updated {
                // An update git refused (an untracked file of the setup's in the way).
                if build.exists() {
                    self.discard(&build)?;
                }
                if let Err(error) = self.build_base(commit, &build).await {
                    // A half-made build (a full disk, say) must not keep its space.
                    let _ = std::fs::remove_dir_all(&build);
                    return Err(error);
                }
            }
            match std::fs::rename(&build, &folder) {
                Ok(()) => built = true,
                // A concurrent run renamed its build in first; use that one.
                Err(_) if folder.join(COMPLETE).is_file() => self.discard(&build)?,
                Err(source) => {
                    return Err(GitError::Io {
                        action: "move into place",
                        path: folder,
                        source,
                    });
                }
            }
        }
        Ok(BaseTree {
            commit,
            folder,
            setup: setup.map(str::to_owned),
            built,
            _held: Arc::new(held),
        })
    }

    /// Moves the newest complete base no run holds, prepared with the same `setup`
    /// (other than `wanted`), to `build`; returns the commit it is a checkout of. Its
    /// completion and setup records go: it is a build until [`Repo::update_base`] ends.
    fn take_over_base(
        &self,
        home: &Path,
        wanted: &Path,
        setup: Option<&str>,
        build: &Path,
    ) -> Result<Option<CommitId>, GitError> {
        let suffix = base_key_suffix(setup);
        let Ok(entries) = std::fs::read_dir(home) else {
            return Ok(None);
        };
        let mut candidates: Vec<(SystemTime, PathBuf, CommitId)> = entries
            .flatten()
            .filter_map(|entry| {
                let path = entry.path();
                let name = entry.file_name().into_string().ok()?;
                let commit = name.get(..40).and_then(|hex| CommitId::parse(hex).ok())?;
                if path == wanted || name.get(40..) != Some(suffix.as_str()) {
                    return None;
                }
                let recorded = std::fs::read_to_string(path.join(COMPLETE)).ok()?;
                if CommitId::parse(recorded.trim()).ok()? != commit {
                    return None;
                }
                let used = std::fs::metadata(path.with_extension("use"))
                    .and_then(|meta| meta.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                Some((used, path, commit))
            })
            .collect();
        candidates.sort_by_key(|candidate| std::cmp::Reverse(candidate.0));
        for (_, path, commit) in candidates {
            // Held by a run (shared): an overlay may be mounted on it.
            let Ok(lock) = lock_file(&path.with_extension("use"), FlockArg::LockExclusiveNonblock)
            else {
                continue;
            };
            if std::fs::rename(&path, build).is_ok() {
                for record in [COMPLETE, SETUP_DONE] {
                    let _ = std::fs::remove_file(build.join(record));
                }
                // Under the lock: no run can be waiting to set the old base up.
                let _ = std::fs::remove_file(path.with_extension("setup"));
                drop(lock);
                return Ok(Some(commit));
            }
        }
        Ok(None)
    }

    /// Brings the base moved to `build` from `from` to `commit`: only the files that
    /// differ are written; a file of the setup's in the way makes git refuse.
    async fn update_base(
        &self,
        from: CommitId,
        commit: CommitId,
        build: &Path,
    ) -> Result<(), GitError> {
        let (tree, index) = (build.join("tree"), build.join("index"));
        self.runner()
            .call(self.common_dir(), &tree)
            .work_tree(&tree)
            .index_file(&index)
            .args(PARALLEL_CHECKOUT)
            .args(WHOLE_INDEX)
            .args(["read-tree", "-m", "-u"])
            .arg(from.to_string())
            .arg(commit.to_string())
            .run()
            .await?;
        self.split_index(commit, build).await?;
        complete_base(commit, build)
    }

    /// Checks `commit` out into `build/tree` with its own index `build/index`, dated so
    /// that no entry is racily clean, and marks it complete.
    async fn build_base(&self, commit: CommitId, build: &Path) -> Result<(), GitError> {
        let tree = build.join("tree");
        create_dir(&tree)?;
        let index = build.join("index");
        let call = || {
            self.runner()
                .call(self.common_dir(), &tree)
                .work_tree(&tree)
                .index_file(&index)
        };
        call()
            .args(PARALLEL_CHECKOUT)
            .args(WHOLE_INDEX)
            .args(["read-tree", "--reset", "-u"])
            .arg(commit.to_string())
            .run()
            .await?;
        self.split_index(commit, build).await?;
        complete_base(commit, build)
    }

    /// Splits the (whole) index of the base in `build` as git's split index: its entries
    /// go to `build/sharedindex.<hash>`, which every tree over the base shares (see
    /// [`BaseTree::copy_index_to`]), and `build/index` keeps only the link to it and its
    /// tree cache. A tree's own index is then kilobytes, and git inside the tree writes
    /// back only what differs from the base. The shared part of an earlier commit (a base
    /// brought here by [`Repo::update_base`]) goes.
    ///
    /// Git writes the shared part into its git dir: a git dir of the build's own (a
    /// `commondir` naming the repository's, a detached `HEAD`), removed after, so nothing
    /// lands in the repository's.
    async fn split_index(&self, commit: CommitId, build: &Path) -> Result<(), GitError> {
        for stale in shared_indexes(build) {
            remove_file(&stale)?;
        }
        let git_dir = build.join("split-git");
        create_dir(&git_dir)?;
        let common = self.common_dir().to_string_lossy().into_owned();
        write_file(&git_dir.join("commondir"), &format!("{common}\n"))?;
        write_file(&git_dir.join("HEAD"), &format!("{commit}\n"))?;
        // Git keeps a racily clean entry (a file as new as the index) in the tree's own
        // part: dated ahead as `complete_base` dates it, every entry goes to the shared one.
        date_ahead(&build.join("index"))?;
        self.runner()
            .call(&git_dir, build)
            .work_tree(&build.join("tree"))
            .index_file(&build.join("index"))
            .args(["update-index", "--split-index"])
            .run()
            .await?;
        for shared in shared_indexes(&git_dir) {
            if let Some(name) = shared.file_name() {
                let to = build.join(name);
                std::fs::rename(&shared, &to).map_err(|source| GitError::Io {
                    action: "move the shared index to",
                    path: to,
                    source,
                })?;
            }
        }
        std::fs::remove_dir_all(&git_dir).map_err(|source| GitError::Io {
            action: "remove",
            path: git_dir,
            source,
        })
    }

    /// Removes the base trees no run holds, and the builds a crash cut short. With
    /// `older_than`, only bases unused for that long (`grove gc`); without, all
    /// unheld ones (`grove clean`). Returns the removed folders.
    pub fn remove_unused_bases(
        &self,
        older_than: Option<Duration>,
    ) -> Result<Vec<PathBuf>, GitError> {
        let home = self.bases_home();
        let Ok(entries) = std::fs::read_dir(&home) else {
            return Ok(Vec::new());
        };
        let mut removed = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name
                .strip_prefix(".build-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<i32>().ok())
            {
                if !super::trash::process_alive(pid) {
                    self.discard(&path)?;
                    removed.push(path);
                }
                continue;
            }
            if name.starts_with('.') || !path.is_dir() {
                continue;
            }
            let use_lock = path.with_extension("use");
            let idle = std::fs::metadata(&use_lock)
                .and_then(|meta| meta.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok());
            if older_than.is_some_and(|limit| idle.is_some_and(|idle| idle < limit)) {
                continue;
            }
            // Held by a run (shared): not ours to remove.
            let Ok(lock) = lock_file(&use_lock, FlockArg::LockExclusiveNonblock) else {
                continue;
            };
            self.discard(&path)?;
            let _ = std::fs::remove_file(path.with_extension("setup"));
            // The lock file stays: a run waiting on it must not end up holding an
            // unlinked one while a later run locks a new file of the same name.
            drop(lock);
            removed.push(path);
        }
        Ok(removed)
    }

    /// Renames `path` into the bases' trash at once and deletes it in the background.
    fn discard(&self, path: &Path) -> Result<(), GitError> {
        super::trash::discard_in_background(path, &self.bases_home().join(".trash"))
    }
}

/// Dates a build's index so that no entry is racily clean, and marks it complete.
fn complete_base(commit: CommitId, build: &Path) -> Result<(), GitError> {
    let index = build.join("index");
    // git treats an entry as racily clean (and re-reads the file on every status) while
    // its mtime is not older than the index file's. Dating the index a second ahead
    // settles them all at no cost; copies keep that date (see
    // `BaseTree::copy_index_to`), where a refresh would mean waiting out the second
    // (measured: +1 s on a 2 s checkout).
    let ahead = SystemTime::now() + Duration::from_secs(1);
    std::fs::File::options()
        .write(true)
        .open(&index)
        .and_then(|file| file.set_modified(ahead))
        .map_err(|source| GitError::Io {
            action: "date",
            path: index.clone(),
            source,
        })?;
    let marker = build.join(COMPLETE);
    std::fs::write(&marker, commit.to_string()).map_err(|source| GitError::Io {
        action: "write",
        path: marker,
        source,
    })
}

/// `<commit>`, or `<commit>-<first 12 hex digits of the setup command's hash>`.
fn base_key(commit: CommitId, setup: Option<&str>) -> String {
    format!("{commit}{}", base_key_suffix(setup))
}

/// What follows the commit in a base's key: nothing, or `-<hash>` of the setup command.
fn base_key_suffix(setup: Option<&str>) -> String {
    match setup {
        None => String::new(),
        Some(command) => {
            let hash = git2::Oid::hash_object(git2::ObjectType::Blob, command.as_bytes())
                .map(|oid| oid.to_string())
                .unwrap_or_default();
            format!("-{}", hash.get(..12).unwrap_or("0"))
        }
    }
}

/// Dates `index` a second ahead, so that no entry is racily clean (see `complete_base`).
fn date_ahead(index: &Path) -> Result<(), GitError> {
    let ahead = SystemTime::now() + Duration::from_secs(1);
    std::fs::File::options()
        .write(true)
        .open(index)
        .and_then(|file| file.set_modified(ahead))
        .map_err(|source| GitError::Io {
            action: "date",
            path: index.to_path_buf(),
            source,
        })
}

/// The shared parts of split indexes in `dir` (`sharedindex.<hash>`).
fn shared_indexes(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(SHARED_INDEX_PREFIX))
        })
        .map(|entry| entry.path())
        .collect()
}

/// Hard-links the shared index parts of the base in `folder` into `dir` (copies them
/// across file systems). Git replaces such a file, never writes into it.
fn link_shared_indexes(folder: &Path, dir: &Path) -> Result<(), GitError> {
    for shared in shared_indexes(folder) {
        let Some(name) = shared.file_name() else {
            continue;
        };
        let to = dir.join(name);
        if to.exists() || std::fs::hard_link(&shared, &to).is_ok() {
            continue;
        }
        std::fs::copy(&shared, &to).map_err(|source| GitError::Io {
            action: "copy the base's shared index to",
            path: to.clone(),
            source,
        })?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), GitError> {
    std::fs::write(path, text).map_err(|source| GitError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

fn remove_file(path: &Path) -> Result<(), GitError> {
    std::fs::remove_file(path).map_err(|source| GitError::Io {
        action: "remove",
        path: path.to_path_buf(),
        source,
    })
}

fn create_dir(path: &Path) -> Result<(), GitError> {
    std::fs::create_dir_all(path).map_err(|source| GitError::Io {
        action: "create",
        path: path.to_path_buf(),
        source,
    })
}

/// Opens (creating) `path` and takes the flock `how` on it. The lock file's mtime is
/// touched, so it also says when the base was last used.
fn lock_file(path: &Path, how: FlockArg) -> Result<Flock<File>, GitError> {
    let io = |source| GitError::Io {
        action: "lock",
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io)?;
    let _ = file.set_modified(SystemTime::now());
    Flock::lock(file, how).map_err(|(_, errno)| io(std::io::Error::from(errno)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_base_key_names_the_commit_and_the_setup_command() {
        let commit = CommitId::parse("0123456789012345678901234567890123456789").unwrap();
        assert_eq!(base_key(commit, None), commit.to_string());
        let with = base_key(commit, Some("npm ci"));
        assert_eq!(with.len(), 40 + 1 + 12, "{with}");
        assert_ne!(
            with,
            base_key(commit, Some("npm install")),
            "another setup command gets another base"
        );
    }
}
