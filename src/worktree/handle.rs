//! A worktree as grove holds it: where it is, its branch, how far its files are
//! checked out, and, for a copy-on-write one, its tree and layers.
//!
//! This file owns the handle's accessors. It must never run git: registering,
//! filling and removing a worktree is `worktree.rs`'s.

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use super::base_tree::BaseTree;
use super::error::{CreateError, NotHereError};
use super::mounted::OverlayTree;
use super::overlay::Layers;
use crate::git::{CommitId, Enter, GitCall, GitRunner, RunId, subtask_ref};
use crate::remote::RemoteTree;
use crate::tools::tree::{TreeAccess, TreeNamespace};

/// Written into the admin dir of a copy-on-write worktree, and its mark: the commit its
/// lower directory (the base tree's files) is a checkout of, a newline, and that
/// directory's path. Its checkpoints lay the upper directory onto this commit's tree,
/// never the start's: a tree restarted on another commit (a resolver's) keeps its lower
/// directory, so its upper one holds the difference. One file, where there were four:
/// every file a registration creates is freed again with it, and on an ext4 without a
/// journal each one freed slows every file created after it (see `spare.rs`).
pub(super) const OVERLAY_RECORD: &str = "grove-overlay";

/// Written into a remote worktree's admin dir: the mark that its files are elsewhere.
pub(super) const REMOTE_RECORD: &str = "grove-remote";

/// The record while it is written, renamed into place once whole.
pub(super) const OVERLAY_RECORD_PARTIAL: &str = "grove-overlay.new";

/// Where a grove before the one-file record kept the lower directory's path and its
/// commit (its `grove-overlay` was empty): read when such a run is resumed.
const EARLIER_LOWER_RECORDS: [&str; 2] = ["grove-lower-commit", "grove-lower"];

/// The record's text for lower directory `lower`, a checkout of `commit`.
pub(super) fn overlay_record(commit: CommitId, lower: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    [
        commit.to_string().as_bytes(),
        b"\n",
        lower.as_os_str().as_bytes(),
    ]
    .concat()
}

/// The commit and the lower directory that `admin`'s record names; `None` when it has
/// none or it cannot be read.
fn read_overlay_record(admin: &Path) -> Option<(CommitId, PathBuf)> {
    let record = std::fs::read(admin.join(OVERLAY_RECORD)).ok()?;
    let (commit, lower) = if record.is_empty() {
        let [commit, lower] =
            EARLIER_LOWER_RECORDS.map(|name| std::fs::read(admin.join(name)).ok());
        (commit?, lower?)
    } else {
        let end = record.iter().position(|byte| *byte == b'\n')?;
        (record[..end].to_vec(), record[end + 1..].to_vec())
    };
    let commit = CommitId::parse(std::str::from_utf8(&commit).ok()?.trim()).ok()?;
    Some((commit, PathBuf::from(std::ffi::OsString::from_vec(lower))))
}

/// What [`Repo::create_worktree`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeSpec {
    /// The run the subtask belongs to.
    pub run: RunId,
    /// The subtask number `n` of branch `grove/<run>/<n>`.
    pub subtask: u32,
    /// The run's base commit; a new branch starts here.
    pub base: CommitId,
    /// Absolute path of the worktree, normally
    /// `Repo::default_worktrees_dir(run).join(n)`.
    pub path: PathBuf,
}

/// How a newly registered worktree gets its files.
pub(super) enum Fill {
    /// A checkout in the background.
    Checkout,
    /// None: an overlay of this base tree, whose index it starts from.
    Overlay(BaseTree),
    /// None: its files are on a remote host.
    Remote,
}

#[derive(Debug, Clone)]
pub(super) enum FillState {
    Filling,
    Filled,
    Failed(Arc<CreateError>),
}

/// Where a copy-on-write tree's changes are and what they apply to: everything a
/// checkpoint of its upper directory needs, whichever handle the tree has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpperSource {
    /// The run, for the branch `grove/<run>/<n>` and the commit message.
    pub run: RunId,
    /// The subtask number `n`.
    pub subtask: u32,
    /// The tree's admin dir (its index and local-only files record).
    pub admin_dir: PathBuf,
    /// The overlay's upper directory.
    pub upper: PathBuf,
    /// The overlay's lower directory (the base tree's files).
    pub lower: PathBuf,
    /// The commit the lower directory is a checkout of.
    pub base: CommitId,
}

/// Where a worktree's files are, and so whether git may run in it.
#[derive(Debug, Clone)]
pub enum Files {
    /// A git worktree: its files are a checkout at its path (filled in the background).
    Checkout,
    /// A copy-on-write tree mounted by its tree host: its files are seen only inside the
    /// host's namespaces, where its git and its commands run.
    Mounted(Arc<OverlayTree>),
    /// A copy-on-write tree whose host is not running: its changes are in its upper
    /// directory beside it, and its path holds only the `.git` file. No git may run in
    /// it (a commit would delete every file of the branch) until it is mounted again.
    Unmounted,
    /// A tree on a remote host: its files, tools and commands are there; its work comes
    /// here as checkpoints. Its path here holds only the `.git` file.
    Remote(RemoteTree),
    /// A remote tree whose connection is gone (or, on resume, not made yet): its work is
    /// its branch's last checkpoint, and no git may run in its empty path.
    Unreached,
}

impl Files {
    /// The files of the worktree whose admin dir is `admin`, as grove finds it again
    /// (registered before, by this process or an earlier one): a copy-on-write tree is
    /// never mounted then.
    pub(super) fn found(admin: &Path) -> Self {
        if admin.join(OVERLAY_RECORD).exists() {
            Self::Unmounted
        } else if admin.join(REMOTE_RECORD).exists() {
            Self::Unreached
        } else {
            Self::Checkout
        }
    }
}

/// A subtask's worktree. Usable for a model call at once; file access must wait for
/// [`Worktree::ready`].
#[derive(Debug, Clone)]
pub struct Worktree {
    pub(super) run: RunId,
    pub(super) subtask: u32,
    pub(super) path: PathBuf,
    pub(super) admin_dir: PathBuf,
    pub(super) base: CommitId,
    pub(super) start: CommitId,
    pub(super) fill: watch::Receiver<FillState>,
    pub(super) files: Files,
}

impl Worktree {
    /// The handle of the worktree registered for `spec` at `path` (canonical) with admin
    /// dir `admin_dir`, its branch at `start`, its files `files` as `fill` says.
    pub(super) fn registered(
        spec: WorktreeSpec,
        path: PathBuf,
        admin_dir: PathBuf,
        start: CommitId,
        fill: watch::Receiver<FillState>,
        files: Files,
    ) -> Self {
        Self {
            run: spec.run,
            subtask: spec.subtask,
            path,
            admin_dir,
            base: spec.base,
            start,
            fill,
            files,
        }
    }

    /// [`Worktree::registered`] for a worktree whose files need no checkout (filled
    /// before, a copy-on-write tree, a remote one).
    pub(super) fn filled(
        spec: WorktreeSpec,
        path: PathBuf,
        admin_dir: PathBuf,
        start: CommitId,
        files: Files,
    ) -> Self {
        let (_, fill) = watch::channel(FillState::Filled);
        Self::registered(spec, path, admin_dir, start, fill, files)
    }

    /// Where its files are.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// True for a copy-on-write tree, mounted or not (see
    /// [`Repo::create_overlay_worktree`]).
    pub fn is_copy_on_write(&self) -> bool {
        matches!(self.files, Files::Mounted(_) | Files::Unmounted)
    }

    /// True for a tree on a remote host, reached or not.
    pub fn is_remote(&self) -> bool {
        matches!(self.files, Files::Remote(_) | Files::Unreached)
    }

    /// The namespaces of the tree host this worktree's git runs in, while it runs.
    pub fn tree(&self) -> Option<&Arc<TreeNamespace>> {
        self.overlay().map(|tree| tree.namespace_ref())
    }

    /// The mounted copy-on-write tree, while its host runs.
    pub fn overlay(&self) -> Option<&Arc<OverlayTree>> {
        match &self.files {
            Files::Mounted(tree) => Some(tree),
            Files::Checkout | Files::Unmounted | Files::Remote(_) | Files::Unreached => None,
        }
    }

    /// How a tool or a command reaches this worktree's files when it is not a plain
    /// directory: handed to whoever works in it (see `ToolContext::tree`).
    pub fn access(&self) -> Option<Arc<dyn TreeAccess>> {
        match &self.files {
            Files::Remote(tree) => Some(Arc::new(tree.clone())),
            _ => self
                .overlay()
                .map(|tree| Arc::clone(tree) as Arc<dyn TreeAccess>),
        }
    }

    /// This copy-on-write worktree mounted by the host of `tree`; a git worktree stays
    /// as it is.
    pub fn mounted(mut self, tree: Arc<OverlayTree>) -> Self {
        if self.is_copy_on_write() {
            self.files = Files::Mounted(tree);
        }
        self
    }

    /// This copy-on-write worktree once its host stopped; a git worktree stays as it is.
    pub fn unmounted(mut self) -> Self {
        if self.is_copy_on_write() {
            self.files = Files::Unmounted;
        }
        self
    }

    /// What a checkpoint of this copy-on-write worktree reads (its upper directory, its
    /// lower one, its admin dir), mounted or not: its upper directory holds its changes
    /// either way (a crashed run's, for `grove clean`). `None` for a git worktree, or
    /// when the upper directory is gone.
    pub fn upper_source(&self) -> Option<UpperSource> {
        let upper = match &self.files {
            Files::Checkout | Files::Remote(_) | Files::Unreached => return None,
            Files::Mounted(tree) => tree.namespace_ref().upper().to_path_buf(),
            Files::Unmounted => Layers::beside(Path::new("/"), &self.path).upper,
        };
        if !upper.is_dir() {
            return None;
        }
        self.upper_source_at(&upper)
    }

    /// [`Worktree::upper_source`] with the upper directory `upper` (a tree mounted by
    /// other means, as in tests); `None` unless it is a copy-on-write worktree.
    pub fn upper_source_at(&self, upper: &Path) -> Option<UpperSource> {
        let (base, lower) = read_overlay_record(&self.admin_dir)?;
        Some(UpperSource {
            run: self.run.clone(),
            subtask: self.subtask,
            admin_dir: self.admin_dir.clone(),
            upper: upper.to_path_buf(),
            lower,
            base,
        })
    }

    /// A git call in this worktree: its admin dir as the git dir, its directory as the
    /// work tree and the working directory, inside its copy-on-write tree when mounted.
    pub(crate) fn git<'r>(&self, runner: &'r GitRunner) -> GitCall<'r> {
        runner
            .call(&self.admin_dir, &self.path)
            .work_tree(&self.path)
            .inside(
                self.tree()
                    .map(|tree| Arc::new(Arc::clone(tree)) as Arc<dyn Enter>),
            )
    }

    /// Where grove's own process reads the worktree's files.
    pub fn files_root(&self) -> PathBuf {
        self.tree()
            .map_or_else(|| self.path.clone(), |tree| tree.grove_root().to_path_buf())
    }

    /// True for a copy-on-write worktree that is not mounted and whose upper directory
    /// is gone: its cleanup discarded its layers (after committing them) and grove was
    /// stopped before it unregistered the tree. Nothing in it is its own: its path holds
    /// only the `.git` file.
    pub fn is_emptied(&self) -> bool {
        matches!(self.files, Files::Unmounted)
            && !Layers::beside(Path::new("/"), &self.path).upper.exists()
    }

    /// Refuses to let git touch a copy-on-write worktree whose tree is not mounted:
    /// its path in grove's namespace holds only the `.git` file, and a commit of that
    /// would delete every file of the branch.
    pub fn check_mounted(&self) -> Result<(), NotHereError> {
        match &self.files {
            Files::Unmounted => Err(NotHereError::TreeNotMounted {
                path: self.path.clone(),
            }),
            Files::Remote(_) | Files::Unreached => Err(NotHereError::Elsewhere {
                path: self.path.clone(),
            }),
            Files::Checkout | Files::Mounted(_) => Ok(()),
        }
    }
    /// The run this worktree belongs to.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    /// The subtask number `n`.
    pub fn subtask(&self) -> u32 {
        self.subtask
    }

    /// Short branch name, `grove/<run>/<n>`.
    pub fn branch(&self) -> String {
        self.run.subtask_branch(self.subtask)
    }

    /// Full branch ref, `refs/heads/grove/<run>/<n>`.
    pub fn branch_ref(&self) -> String {
        subtask_ref(&self.run, self.subtask)
    }

    /// The worktree's directory (canonical).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The worktree's admin dir inside the common git dir; always passed as `--git-dir`.
    pub fn admin_dir(&self) -> &Path {
        &self.admin_dir
    }

    /// The run's base commit the branch was created from.
    pub fn base(&self) -> CommitId {
        self.base
    }

    /// The branch tip when the worktree was created (the base, unless an existing
    /// branch with earlier work was reused).
    pub fn start(&self) -> CommitId {
        self.start
    }

    /// True once the files are all checked out.
    pub fn is_filled(&self) -> bool {
        matches!(*self.fill.borrow(), FillState::Filled)
    }

    /// Waits until the files are checked out; the error if the checkout failed.
    pub async fn ready(&self) -> Result<(), CreateError> {
        let mut fill = self.fill.clone();
        let outcome = fill
            .wait_for(|state| !matches!(state, FillState::Filling))
            .await
            .map(|state| state.clone());
        match outcome {
            Ok(FillState::Failed(reason)) => Err(CreateError::FillFailed {
                path: self.path.clone(),
                reason,
            }),
            Ok(_) => Ok(()),
            Err(_) => Err(CreateError::FillAborted {
                path: self.path.clone(),
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_record_gives_back_its_commit_and_lower_path_and_reads_an_earlier_groves() {
        let admin = tempfile::tempdir().unwrap();
        let commit = CommitId::parse("0123456789abcdef0123456789abcdef01234567").unwrap();
        let lower = Path::new("/cache/bases/a tree\nwith a newline");
        let record = admin.path().join(OVERLAY_RECORD);
        std::fs::write(&record, overlay_record(commit, lower)).unwrap();
        assert_eq!(
            read_overlay_record(admin.path()),
            Some((commit, lower.to_path_buf())),
            "the record names the commit and the whole path, newlines included"
        );

        // An earlier grove left an empty mark and the facts in two files of their own.
        std::fs::write(&record, b"").unwrap();
        std::fs::write(
            admin.path().join("grove-lower-commit"),
            format!("{commit}\n"),
        )
        .unwrap();
        std::fs::write(admin.path().join("grove-lower"), "/cache/bases/old").unwrap();
        assert_eq!(
            read_overlay_record(admin.path()),
            Some((commit, PathBuf::from("/cache/bases/old"))),
            "a run an earlier grove left is resumed from its two files"
        );

        std::fs::write(&record, b"not a commit\n/cache/bases/x").unwrap();
        assert_eq!(
            read_overlay_record(admin.path()),
            None,
            "a bad commit is no record"
        );
        std::fs::remove_file(&record).unwrap();
        assert_eq!(
            read_overlay_record(admin.path()),
            None,
            "no record, no lower"
        );
    }
}
