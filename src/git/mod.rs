//! Everything grove does with git objects and refs: orchestrator-owned commits, diffs,
//! in-memory merges, refs, archives and the final apply. The worktrees a subtask works
//! in are the worktree module's; it builds on the calls and reads this module offers.
//!
//! This module owns the user's repository safety. It must never touch the user's work
//! tree, index or branch except in the final apply, and only when that is safe. It knows
//! nothing of models, tools or agents, and it never prints.
//!
//! The entry point is [`Repo`], opened once per run from a path inside the user's
//! repository. Reads of refs, commits and blobs go through libgit2 in process, and so do
//! the writes and reads on the paths agents wait on whose result is certain (checkpoint
//! and merge commits, trees of an index or of a side-by-side merge, compare-and-swap ref
//! moves, the reviewer's diff of two commits, checked byte for byte against git's);
//! anything that touches a work tree or index, or is more correct with the CLI (worktree
//! add and checkout, `add --all`, `merge-tree`), goes through the sealed runner in
//! `cmd`, which never lets the repository's config run a program.
//!
//! Ref layout (see [`RunId`]): subtask branches `grove/<run>/<n>`, the run's result
//! branch `grove/<run>/result`, its squashed history `grove/<run>/squashed`, archives
//! `refs/grove/archive/<run>/<n>`.
//!
//! A run uses it in this order:
//! 1. [`Repo::open`], [`Repo::head`] for the base, [`Repo::create_result_branch`].
//! 2. Per subtask: a worktree and its checkpoints (the worktree module), then
//!    [`Repo::diff`] / [`Repo::render_diff`] for the reviewer and the user.
//! 3. Approved: [`Repo::merge_subtasks`] (optionally [`Repo::find_conflicts`] first).
//!    Rejected or failed: the worktree is archived (the worktree module).
//! 4. [`Repo::squash`] (unless the run keeps the merge graph), [`Repo::apply`], then
//!    the run's worktrees are swept; [`Repo::gc_archives`] is `grove gc`.
//!
//! Host-side safety: every git process gets `-c core.hooksPath=/dev/null`,
//! `core.fsmonitor=false` and friends, no inherited `GIT_*` variable, an explicit
//! `--git-dir` (a worktree's admin dir, never its `.git` file) and `--work-tree`.
//! Filter, merge and diff drivers defined in the repository's own config are
//! neutralised; the user's global config (e.g. git-lfs) is trusted like the user's git.

mod apply;
mod archive;
mod blame;
mod branch;
mod bundle;
mod cmd;
mod commit;
mod conflict;
mod diff;
mod error;
mod large_diff;
mod lineage;
mod location;
pub(crate) use location::cache_home;
mod merge;
mod merge_batch;
mod names;
mod rebuild;
pub(crate) mod ref_locks;
mod registered;
mod size;
mod snapshot;
mod squash;
pub mod trailers;
pub(crate) mod tree_diff;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use apply::{ApplyOutcome, ApplyRequest, RefusalReason};
pub use archive::ArchivedWork;
pub use branch::DeleteError;
pub use cmd::{Enter, GitOptions, Identity};
pub use conflict::{ConflictedMerge, LeftMarker, MergeSide};
pub use diff::{BranchDiff, Colour, DiffStat, FileStat, Patch};
pub use error::{AdvanceError, GitError};
pub(crate) use error::{io_is_disk_full, says_disk_full};
pub use merge::{MergeCheck, MergeOutcome, PairConflict};
pub use merge_batch::BatchItem;
pub use names::{CommitId, RunId, subtask_ref};
pub use rebuild::{RebuildPick, RebuildStep, Rebuilt};
pub use ref_locks::{RefLocks, STALE_REF_LOCK};
pub(crate) use registered::{admin_head, normalize};
pub use size::TreeSize;
pub use snapshot::{SnapshotEntry, TreeSnapshot};
pub use squash::{ChainCommit, SquashStep, Squashed};

pub(crate) use cmd::{GitCall, GitRunner};

/// A handle on the user's repository; cheap to clone and safe to share across tasks.
#[derive(Debug, Clone)]
pub struct Repo {
    inner: Arc<RepoInner>,
}

struct RepoInner {
    /// The git dir of the work tree grove was opened in (`.git` for the main one).
    git_dir: PathBuf,
    /// The repository's common git dir, shared by all its worktrees.
    common_dir: PathBuf,
    /// The user's work tree; `None` for a bare repository.
    work_tree: Option<PathBuf>,
    runner: GitRunner,
    /// libgit2 handles are not `Sync`; reads are short, so one lock is enough.
    libgit: Mutex<git2::Repository>,
    /// This repository's folder of worktrees in the user's cache directory.
    worktrees_home: PathBuf,
    /// The exclude files below every `.gitignore`, read once (see `exclude_files`):
    /// a `git config` per checkpoint was a third of a run's git processes.
    exclude_files: tokio::sync::OnceCell<Vec<PathBuf>>,
    /// What is known of the history of each ref merged onto, by ref (see `lineage`).
    lineages: Mutex<std::collections::HashMap<String, lineage::Lineage>>,
    /// The author and committer of squashed commits, dated when asked (see `squash`).
    squash_idents: tokio::sync::OnceCell<(squash::Ident, squash::Ident)>,
}

/// Where the user's `HEAD` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The checked-out branch's full ref name; `None` when `HEAD` is detached.
    pub branch: Option<String>,
    /// The commit `HEAD` resolves to; `None` on an unborn branch.
    pub commit: Option<CommitId>,
}

impl std::fmt::Debug for RepoInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("git_dir", &self.git_dir)
            .field("work_tree", &self.work_tree)
            .finish_non_exhaustive()
    }
}

impl Repo {
    /// Opens the repository containing `path` (searching upwards, ignoring `GIT_DIR`),
    /// and learns which repository-local drivers to neutralise on every git call.
    pub async fn open(path: &Path, options: GitOptions) -> Result<Self, GitError> {
        let repo = git2::Repository::open_ext(
            path,
            git2::RepositoryOpenFlags::empty(),
            std::iter::empty::<&std::ffi::OsStr>(),
        )
        .map_err(|cause| GitError::NotARepository {
            path: path.to_path_buf(),
            cause,
        })?;
        let git_dir = canonical(repo.path())?;
        let common_dir = canonical(repo.commondir())?;
        let work_tree = repo.workdir().map(canonical).transpose()?;
        let worktrees_home = location::cache_home(&options.env).join(location::repository_folder(
            &common_dir,
            work_tree.as_deref(),
        ));
        let mut runner = GitRunner::new(options);
        let cwd = work_tree.clone().unwrap_or_else(|| git_dir.clone());
        let listing = runner
            .call(&git_dir, &cwd)
            .args(["config", "--null", "--list", "--show-scope"])
            .run()
            .await?;
        runner.set_neutralized(cmd::neutralizing_overrides(&listing.stdout));
        Ok(Self {
            inner: Arc::new(RepoInner {
                git_dir,
                common_dir,
                work_tree,
                runner,
                libgit: Mutex::new(repo),
                worktrees_home,
                exclude_files: tokio::sync::OnceCell::new(),
                lineages: Mutex::default(),
                squash_idents: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// The user's work tree, if the repository has one.
    pub fn work_tree(&self) -> Option<&Path> {
        self.inner.work_tree.as_deref()
    }

    /// The git dir of the work tree grove was opened in.
    pub fn git_dir(&self) -> &Path {
        &self.inner.git_dir
    }

    /// The common git dir shared by every worktree of the repository.
    pub fn common_dir(&self) -> &Path {
        &self.inner.common_dir
    }

    /// Where `HEAD` of the opened work tree points.
    pub fn head(&self) -> Result<Head, GitError> {
        self.read("HEAD", |repo| {
            let reference = repo.find_reference("HEAD")?;
            let branch = reference.symbolic_target()?.map(str::to_owned);
            let commit = match repo.head() {
                Ok(head) => Some(CommitId::from_oid(head.peel_to_commit()?.id())),
                Err(e) if e.code() == git2::ErrorCode::UnbornBranch => None,
                Err(e) => return Err(e),
            };
            Ok(Head { branch, commit })
        })
    }

    /// Resolves any revision (`HEAD`, a branch, a full or short id) to a commit.
    pub fn resolve(&self, rev: &str) -> Result<CommitId, GitError> {
        let found = self.read(rev, |repo| match repo.revparse_single(rev) {
            Ok(object) => Ok(Some(CommitId::from_oid(object.peel_to_commit()?.id()))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e),
        })?;
        found.ok_or_else(|| GitError::UnknownRevision {
            rev: rev.to_owned(),
        })
    }

    /// The commit a full ref name points at, or `None` when the ref does not exist.
    pub fn ref_target(&self, name: &str) -> Result<Option<CommitId>, GitError> {
        self.read(name, |repo| match repo.find_reference(name) {
            Ok(reference) => Ok(Some(CommitId::from_oid(reference.peel_to_commit()?.id()))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e),
        })
    }

    /// True when `ancestor` is `descendant` or one of its ancestors.
    pub fn is_ancestor(&self, ancestor: CommitId, descendant: CommitId) -> Result<bool, GitError> {
        if ancestor == descendant {
            return Ok(true);
        }
        self.read("commit graph", |repo| {
            repo.graph_descendant_of(descendant.oid(), ancestor.oid())
        })
    }

    /// Full ref names under `prefix` (e.g. `refs/grove/archive/`) with their commits.
    pub fn refs_under(&self, prefix: &str) -> Result<Vec<(String, CommitId)>, GitError> {
        self.read(prefix, |repo| {
            let mut found = Vec::new();
            for reference in repo.references_glob(&format!("{prefix}*"))? {
                let reference = reference?;
                if let (Ok(name), Ok(commit)) = (reference.name(), reference.peel_to_commit()) {
                    found.push((name.to_owned(), CommitId::from_oid(commit.id())));
                }
            }
            found.sort();
            Ok(found)
        })
    }

    /// The tree of `commit`.
    pub(crate) fn tree_of(&self, commit: CommitId) -> Result<git2::Oid, GitError> {
        self.read("the base commit", |repo| {
            Ok(repo.find_commit(commit.oid())?.tree_id())
        })
    }

    /// The exclude files of lower precedence than any `.gitignore`, lowest first:
    /// `core.excludesFile` (default `$XDG_CONFIG_HOME/git/ignore`, else
    /// `~/.config/git/ignore`), then `<common dir>/info/exclude`. Read once per `Repo`.
    pub(crate) async fn exclude_files(&self) -> Result<Vec<PathBuf>, GitError> {
        self.inner
            .exclude_files
            .get_or_try_init(|| self.read_exclude_files())
            .await
            .cloned()
    }

    async fn read_exclude_files(&self) -> Result<Vec<PathBuf>, GitError> {
        let configured = self
            .git()
            .args(["config", "--path", "--get", "core.excludesFile"])
            .allow_codes(&[1])
            .text()
            .await?;
        let runner = &self.inner.runner;
        let global = if configured.is_empty() {
            runner
                .env_var("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    runner
                        .env_var("HOME")
                        .map(|h| PathBuf::from(h).join(".config"))
                })
                .map(|config| config.join("git").join("ignore"))
        } else {
            Some(PathBuf::from(configured))
        };
        Ok(global
            .into_iter()
            .chain(std::iter::once(
                self.common_dir().join("info").join("exclude"),
            ))
            .collect())
    }

    /// The sealed runner every git process of this repository goes through.
    pub(crate) fn runner(&self) -> &GitRunner {
        &self.inner.runner
    }

    /// Runs `work` on the runtime's blocking threads (file walks, diffs, a waited-for
    /// lock); a task that stopped (a panic) is an I/O error of `action` on `path`.
    pub(crate) async fn blocking<T: Send + 'static, E: From<GitError> + Send + 'static>(
        action: &'static str,
        path: PathBuf,
        work: impl FnOnce() -> Result<T, E> + Send + 'static,
    ) -> Result<T, E> {
        let stopped = GitError::io(action, &path);
        tokio::task::spawn_blocking(work).await.map_err(|_| {
            E::from(stopped(std::io::Error::other(format!(
                "the {action} task stopped"
            ))))
        })?
    }

    /// The libgit2 handle, under its lock. A poisoned lock only means another user of it
    /// panicked; the handle itself is intact.
    pub(crate) fn libgit(&self) -> std::sync::MutexGuard<'_, git2::Repository> {
        self.inner
            .libgit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a libgit2 read under the handle's lock, labelling failures with `what`.
    pub(crate) fn read<T>(
        &self,
        what: &str,
        f: impl FnOnce(&git2::Repository) -> Result<T, git2::Error>,
    ) -> Result<T, GitError> {
        let repo = self.libgit();
        f(&repo).map_err(|source| GitError::Read {
            what: what.to_owned(),
            source,
        })
    }

    /// The author or committer (`AUTHOR`, `COMMITTER`) of commits grove writes in process.
    pub(crate) fn signature(&self, role: &str) -> Result<git2::Signature<'static>, GitError> {
        self.inner
            .runner
            .signature(role)
            .map_err(|source| GitError::Write {
                what: "commit signature".to_owned(),
                source,
            })
    }

    /// A git call on the user's repository without a work tree (refs, objects, merges).
    pub(crate) fn git(&self) -> GitCall<'_> {
        let cwd = self
            .inner
            .work_tree
            .as_deref()
            .unwrap_or(&self.inner.git_dir);
        self.inner.runner.call(&self.inner.git_dir, cwd)
    }

    /// Compare-and-swap update of `reference` from `old` (`None`: must not exist) to `new`.
    pub(crate) async fn update_ref(
        &self,
        reference: &str,
        new: CommitId,
        old: Option<CommitId>,
        reason: &str,
    ) -> Result<(), GitError> {
        let old = old.map_or_else(String::new, |c| c.to_string());
        self.git()
            .args([
                "update-ref",
                "-m",
                reason,
                reference,
                &new.to_string(),
                &old,
            ])
            .run()
            .await
            .map(drop)
    }

    /// Parses the full commit id a git command printed.
    pub(crate) fn parse_commit(op: &str, text: &str) -> Result<CommitId, GitError> {
        CommitId::parse(text.trim()).map_err(|_| GitError::Parse {
            op: op.to_owned(),
            detail: format!("expected a commit id, got {text:?}"),
        })
    }
}

pub(crate) fn canonical(path: &Path) -> Result<PathBuf, GitError> {
    std::fs::canonicalize(path).map_err(|source| GitError::Io {
        action: "resolve",
        path: path.to_path_buf(),
        source,
    })
}
