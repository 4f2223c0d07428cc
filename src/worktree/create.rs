//! Subtask worktrees: registration and removal (serialised), background fill, and
//! finding them again.
//!
//! This module owns the `<common dir>/worktrees/*` registrations grove makes. It never
//! follows a worktree's `.git` file: the admin dir is found from the common dir's side
//! (its `gitdir` file), and every later command names it explicitly. Paths stay
//! `Path`/`OsStr` throughout: a repository path need not be UTF-8.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::base_tree::BaseTree;
use super::error::CreateError;
use super::handle::{
    Files, Fill, FillState, OVERLAY_RECORD, OVERLAY_RECORD_PARTIAL, Worktree, WorktreeSpec,
    overlay_record,
};
use super::spare;
use super::trash::{self, Moved, discard_in_background, move_into, process_alive};
use crate::git::GitError;
use crate::git::{CommitId, RunId, subtask_ref};
use crate::git::{Repo, admin_head, canonical, normalize};

/// Serialises every change to `<common>/worktrees/` within this process (`worktree add`,
/// `prune`, `unlock`, and removal): parallel adds race on the common dir's locks
/// (measured: 14 of 40 failed at 8-way), and a `git worktree remove` reads every other
/// registration, so one half-deleted by a parallel removal fails it (`failed to read
/// …/worktrees/10/commondir`; 2 of 10 runs of 16 parallel subtasks) and leaves an orphan.
/// Other processes are survived by the runner's lock-retry.
pub(super) static REGISTRATION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Written into a git worktree's admin dir once its files are complete; a worktree
/// without it (or a copy-on-write one's record, complete when written) was never fully
/// checked out and must not be committed from.
const FILLED_MARKER: &str = "grove-filled";

/// Whether the worktree of admin dir `admin` has all its files: a git one checked out, or
/// a copy-on-write one (its files are seen only inside its tree host's namespaces).
fn is_filled(admin: &Path) -> bool {
    admin.join(FILLED_MARKER).exists()
        || admin.join(OVERLAY_RECORD).exists()
        || admin.join(super::handle::REMOTE_RECORD).exists()
}

impl Repo {
    /// Creates (or recovers) the worktree of one subtask and returns before its files are
    /// checked out; the checkout runs in the background (see [`Worktree::ready`]).
    ///
    /// Recovery rules: registrations of hand-deleted worktrees are pruned (unlocking
    /// them first); an existing branch is reused when it contains the base (an earlier
    /// attempt's commits are kept, never reset); a path that is already this subtask's
    /// worktree is reused, and re-filled only if its first fill never finished.
    pub async fn create_worktree(&self, spec: WorktreeSpec) -> Result<Worktree, CreateError> {
        self.create_worktree_as(spec, Fill::Checkout).await
    }

    async fn create_worktree_as(
        &self,
        spec: WorktreeSpec,
        how: Fill,
    ) -> Result<Worktree, CreateError> {
        if !spec.path.is_absolute() {
            return Err(GitError::InvalidName {
                what: "worktree path",
                value: spec.path.display().to_string(),
                reason: "must be absolute",
            }
            .into());
        }
        let branch_ref = subtask_ref(&spec.run, spec.subtask);
        let guard = REGISTRATION.lock().await;
        // Only a registration whose directory is gone needs pruning; skipping the
        // process otherwise keeps creation fast.
        if self.any_worktree_gone()? {
            self.prune_unlocked().await?;
        }

        if let Some(admin) = self.find_admin_dir(&spec.path)? {
            if spec.path.join(".git").exists() {
                return self.reuse_worktree(spec, admin, &branch_ref);
            }
            // Registered but gone, and prune kept it: it was locked.
            self.git()
                .args(["worktree", "unlock"])
                .arg(&spec.path)
                .allow_codes(&[128])
                .run()
                .await?;
            self.prune_unlocked().await?;
        }
        if std::fs::read_dir(&spec.path).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(CreateError::WorktreePathOccupied {
                path: spec.path.clone(),
                branch: spec.run.subtask_branch(spec.subtask),
            });
        }
        if let Some(parent) = spec.path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| GitError::Io {
                action: "create",
                path: parent.to_path_buf(),
                source,
            })?;
        }

        let (start, admin) = match self.ref_target(&branch_ref)? {
            Some(tip) => {
                if !self.is_ancestor(spec.base, tip)? {
                    return Err(CreateError::BranchDiverged {
                        branch: spec.run.subtask_branch(spec.subtask),
                        tip: tip.to_string(),
                        base: spec.base.to_string(),
                    });
                }
                if let Some(path) = self.checked_out_at(&branch_ref)? {
                    return Err(CreateError::BranchCheckedOutElsewhere {
                        branch: spec.run.subtask_branch(spec.subtask),
                        path,
                    });
                }
                let admin = self.register_worktree(&spec.path, &branch_ref, None)?;
                (tip, admin)
            }
            None => {
                let admin = self.register_worktree(&spec.path, &branch_ref, Some(spec.base))?;
                (spec.base, admin)
            }
        };
        drop(guard);
        let path = canonical(&spec.path)?;
        match how {
            // An overlay shows the base: a branch with earlier work on it (a resume) gets
            // its files checked out, or a checkpoint would undo that work.
            Fill::Overlay(base) if start == spec.base => {
                let filled = self.fill_overlay(spec, path.clone(), admin.clone(), start, &base);
                if filled.is_err() {
                    // Half made (its index cut short by a full disk), the registration
                    // would read on resume as a git worktree with a broken index: it goes
                    // (unlinking needs no space), and resume makes it again. Its branch,
                    // still at the base, is kept and reused.
                    let _ = std::fs::remove_dir_all(&admin);
                    let _ = std::fs::remove_file(path.join(".git"));
                }
                Ok(filled?)
            }
            Fill::Remote => Ok(self.fill_remote(spec, path, admin, start)?),
            Fill::Overlay(_) | Fill::Checkout => Ok(self.start_fill(spec, path, admin, start)),
        }
    }

    /// Moves a new worktree's branch forward from where it started to `start`, a commit
    /// grove wrote that contains it (a resolver's conflicted merge), and checks `start`
    /// out; `start` is then the worktree's base and start. The branch must still be where
    /// the worktree started (compare-and-swap), so no work on it is ever dropped.
    pub async fn restart_worktree(
        &self,
        worktree: Worktree,
        start: CommitId,
    ) -> Result<Worktree, CreateError> {
        worktree.ready().await?;
        worktree.check_mounted()?;
        if !self.is_ancestor(worktree.start, start)? {
            return Err(CreateError::BranchDiverged {
                branch: worktree.branch(),
                tip: start.to_string(),
                base: worktree.start.to_string(),
            });
        }
        self.update_ref(
            &worktree.branch_ref(),
            start,
            Some(worktree.start),
            "grove: restart the worktree",
        )
        .await?;
        // Inside a copy-on-write tree when it is one: its files are only there (what
        // the reset writes lands in its upper directory, over the same lower one).
        worktree
            .git(self.runner())
            .args(["reset", "--hard", "--quiet", "HEAD"])
            .run()
            .await?;
        Ok(Worktree {
            base: start,
            start,
            ..worktree
        })
    }

    /// Finds the grove worktree registered at `path` (e.g. when resuming a run).
    /// `None` when nothing is registered there or it is not a subtask branch of `run`.
    pub fn find_worktree(
        &self,
        run: &RunId,
        subtask: u32,
        base: CommitId,
        path: &Path,
    ) -> Result<Option<Worktree>, GitError> {
        let Some(admin) = self.find_admin_dir(path)? else {
            return Ok(None);
        };
        if admin_head(&admin).as_deref() != Some(subtask_ref(run, subtask).as_str()) {
            return Ok(None);
        }
        let Some(start) = self.ref_target(&subtask_ref(run, subtask))? else {
            return Ok(None);
        };
        let state = if is_filled(&admin) {
            FillState::Filled
        } else {
            FillState::Failed(Arc::new(CreateError::FillAborted {
                path: path.to_path_buf(),
            }))
        };
        let (_, fill) = watch::channel(state);
        Ok(Some(Worktree {
            run: run.clone(),
            subtask,
            path: normalize(path),
            files: Files::found(&admin),
            admin_dir: admin,
            base,
            start,
            fill,
        }))
    }

    fn reuse_worktree(
        &self,
        spec: WorktreeSpec,
        admin: PathBuf,
        branch_ref: &str,
    ) -> Result<Worktree, CreateError> {
        if admin_head(&admin).as_deref() != Some(branch_ref) {
            return Err(CreateError::WorktreePathOccupied {
                path: spec.path.clone(),
                branch: spec.run.subtask_branch(spec.subtask),
            });
        }
        let start = self
            .ref_target(branch_ref)?
            .ok_or_else(|| CreateError::BranchNeverMade {
                path: spec.path.clone(),
                rev: branch_ref.to_owned(),
            })?;
        let path = canonical(&spec.path)?;
        if is_filled(&admin) {
            let files = Files::found(&admin);
            return Ok(Worktree::filled(spec, path, admin, start, files));
        }
        Ok(self.start_fill(spec, path, admin, start))
    }

    /// Spawns the checkout of a registered worktree and returns its handle at once.
    pub(super) fn start_fill(
        &self,
        spec: WorktreeSpec,
        path: PathBuf,
        admin: PathBuf,
        start: CommitId,
    ) -> Worktree {
        let (tx, fill) = watch::channel(FillState::Filling);
        let repo = self.clone();
        let (fill_path, fill_admin) = (path.clone(), admin.clone());
        tokio::spawn(async move {
            // Let registrations already queued go first (the lock is FIFO): a checkout
            // competing for CPU and disk would delay every later worktree's first use.
            drop(REGISTRATION.lock().await);
            let result = repo
                .runner()
                .call(&fill_admin, &fill_path)
                .work_tree(&fill_path)
                .args(["reset", "--hard", "--quiet", "HEAD"])
                .run()
                .await
                .and_then(|_| {
                    let marker = fill_admin.join(FILLED_MARKER);
                    std::fs::write(&marker, b"").map_err(|source| GitError::Io {
                        action: "write",
                        path: marker,
                        source,
                    })
                });
            let state = match result {
                Ok(()) => FillState::Filled,
                Err(error) => FillState::Failed(Arc::new(error.into())),
            };
            // Nobody waiting is fine: the marker on disk is the durable record.
            let _ = tx.send(state);
        });
        Worktree::registered(spec, path, admin, start, fill, Files::Checkout)
    }

    /// Registers the worktree of one subtask as [`Repo::create_worktree`] does, but never
    /// checks it out: its files are an overlay of `base` (whose index is copied as the
    /// worktree's own, so that git inside sees only what the worker changed), mounted by
    /// a tree host the caller starts at its path.
    pub async fn create_overlay_worktree(
        &self,
        spec: WorktreeSpec,
        base: &BaseTree,
    ) -> Result<Worktree, CreateError> {
        let fill = Fill::Overlay(base.clone());
        self.create_worktree_as(spec, fill).await
    }

    /// Registers the worktree of one subtask as [`Repo::create_worktree`] does, with no
    /// files: they are on a remote host (see [`Worktree::reach`]).
    pub async fn create_remote_worktree(
        &self,
        spec: WorktreeSpec,
    ) -> Result<Worktree, CreateError> {
        self.create_worktree_as(spec, Fill::Remote).await
    }

    /// Marks a registered worktree as a copy-on-write one over `base`: its index a copy
    /// of the base's (dated as the base's, so no entry is racily clean), and the base's
    /// tree recorded as its lower directory (for [`Worktree::upper_source`]).
    pub(super) fn fill_overlay(
        &self,
        spec: WorktreeSpec,
        path: PathBuf,
        admin: PathBuf,
        start: CommitId,
        base: &BaseTree,
    ) -> Result<Worktree, GitError> {
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io {
                action,
                path,
                source,
            }
        };
        let index = admin.join("index");
        base.copy_index_to(&index)?;
        // Renamed into place, so that a record that exists is whole (it also says the
        // worktree is filled).
        let (record, partial) = (
            admin.join(OVERLAY_RECORD),
            admin.join(OVERLAY_RECORD_PARTIAL),
        );
        std::fs::write(&partial, overlay_record(base.commit(), &base.tree_dir()))
            .map_err(io("write", &partial))?;
        std::fs::rename(&partial, &record).map_err(io("write", &record))?;
        Ok(Worktree::filled(spec, path, admin, start, Files::Unmounted))
    }

    /// Turns a copy-on-write worktree whose merged files were copied to its path into a
    /// plain one (`--keep-worktrees`): grove's own git may then work there directly.
    pub fn mark_materialized(&self, worktree: &Worktree) -> Result<Worktree, GitError> {
        forget_overlay_marker(&worktree.admin_dir)?;
        let mut plain = worktree.clone();
        plain.files = Files::Checkout;
        Ok(plain)
    }

    /// [`Repo::mark_materialized`] for the worktree registered at `path`.
    pub fn forget_overlay(&self, path: &Path) -> Result<(), GitError> {
        match self.find_admin_dir(path)? {
            Some(admin) => forget_overlay_marker(&admin),
            None => Ok(()),
        }
    }

    /// Unregisters a worktree and deletes its directory without committing anything
    /// (the caller has: a copy-on-write worktree's files are gone with its host).
    pub async fn unregister_worktree(&self, worktree: &Worktree) -> Result<(), GitError> {
        self.delete_worktree(&worktree.path, &worktree.admin_dir)
            .await
    }

    /// `git worktree prune`, serialised with every other registration change.
    pub(super) async fn prune_worktrees(&self) -> Result<(), GitError> {
        let _guard = REGISTRATION.lock().await;
        self.prune_unlocked().await
    }

    /// Deletes what removals by a grove that died mid-way left in the trash folders
    /// (`<common>/grove/trash/`, `<bases>/.trash/`: entries named `<kind>-<pid>-<n>`
    /// whose process is gone). Called at every run's start and by `grove clean`; the
    /// deletion itself runs in the background.
    pub async fn sweep_trash(&self) -> Result<(), GitError> {
        let trash = self.common_dir().join("grove").join("trash");
        for folder in [&trash, &self.bases_home().join(".trash")] {
            let Ok(entries) = std::fs::read_dir(folder) else {
                continue;
            };
            let mut dead = Vec::new();
            for entry in entries.flatten() {
                let name = entry.file_name();
                let pid = name
                    .to_str()
                    .and_then(|name| name.split('-').nth(1))
                    .and_then(|pid| pid.parse::<i32>().ok());
                if pid.is_some_and(|pid| !process_alive(pid)) {
                    dead.push(entry.path());
                }
            }
            // Renamed first, so that a sweep by another grove never deletes the same
            // entry twice and the trash is free of them at once.
            for path in dead {
                discard_in_background(&path, folder)?;
            }
        }
        // A removal that finds the trash gone between making it and its rename makes it
        // again (`move_into`).
        let _ = std::fs::remove_dir(&trash);
        Ok(())
    }

    /// `git worktree prune`; the caller holds [`REGISTRATION`].
    pub(super) async fn prune_unlocked(&self) -> Result<(), GitError> {
        self.git().args(["worktree", "prune"]).run().await.map(drop)
    }

    /// Unregisters the worktree at `path` (admin dir `admin`) and deletes its files,
    /// uncommitted changes included (the caller has committed what must be kept).
    ///
    /// Both go away atomically for any concurrent reader: under [`REGISTRATION`] the
    /// directory and then the admin dir are renamed into `<common>/grove/trash/` (never
    /// inside `worktrees/`, which git lists entry by entry), and the files are deleted
    /// after the lock is released, so parallel removals neither race nor wait on each
    /// other's deletes. A directory that cannot be renamed (another filesystem) falls back
    /// to `git worktree remove`, still under the lock.
    pub(super) async fn delete_worktree(&self, path: &Path, admin: &Path) -> Result<(), GitError> {
        let trash = self.common_dir().join("grove").join("trash");
        let number = trash::next_number();
        let stamp = format!("{}-{number}", std::process::id());
        let (moved_tree, moved_admin) = (
            trash.join(format!("tree-{stamp}")),
            trash.join(format!("admin-{stamp}")),
        );
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io {
                action,
                path,
                source,
            }
        };
        {
            let _guard = REGISTRATION.lock().await;
            let tree_moved =
                match move_into(&trash, path, &moved_tree).map_err(io("create", &trash))? {
                    Moved::Done => true,
                    Moved::Gone => false,
                    Moved::Refused(_) => {
                        self.git()
                            .args(["worktree", "remove", "--force", "--force"])
                            .arg(path)
                            .run()
                            .await?;
                        return Ok(());
                    }
                };
            match move_into(&trash, admin, &moved_admin).map_err(io("create", &trash))? {
                Moved::Done | Moved::Gone => {}
                Moved::Refused(source) => {
                    if tree_moved {
                        // Put the files back: a registration without its tree would
                        // be pruned with the work still in it.
                        let _ = std::fs::rename(&moved_tree, path);
                    }
                    return Err(GitError::Io {
                        action: "unregister",
                        path: admin.to_path_buf(),
                        source,
                    });
                }
            }
        }
        // The deletion is bound by the disk (~6 s for 30,000 files): nobody waits for
        // it. If this process ends first, the next grove's sweep finishes it. The admin
        // dir is emptied to a spare, for the next registration to take.
        let common = self.common_dir().to_path_buf();
        trash::in_background(&trash, move || {
            let _ = std::fs::remove_dir_all(&moved_tree);
            spare::recycle(&moved_admin, &common);
        });
        Ok(())
    }
}

/// Removes the mark of a copy-on-write worktree from its admin dir, which then names a
/// git worktree whose files are all there (they were copied out).
fn forget_overlay_marker(admin: &Path) -> Result<(), GitError> {
    let filled = admin.join(FILLED_MARKER);
    std::fs::write(&filled, b"").map_err(|source| GitError::Io {
        action: "write",
        path: filled,
        source,
    })?;
    let marker = admin.join(OVERLAY_RECORD);
    match std::fs::remove_file(&marker) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(GitError::Io {
            action: "remove",
            path: marker,
            source,
        }),
    }
}
