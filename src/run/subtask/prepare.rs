//! Stage 1, prepare: the subtask's worktree created (or recovered), the user's
//! local-only files copied in (`worktree.copy`), then the user's setup command
//! (`worktree.setup`).
//!
//! This file owns the worktree until its worker starts: the registrations made ahead of
//! the lead's delegations, both preparation steps, and the check at a run's start that
//! every listed file can be copied. It must never let a copied file be committed — the
//! git layer learns the paths before the files exist in the worktree — never follow a
//! symlink out of the repository or out of the worktree, and never delete a directory
//! it does not own (it is moved aside and kept).

use crate::text::output_tail;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::git::{CommitId, GitError, Repo};

use crate::run::context::{RunFacts, RunRecord, TreeStage, lock};
use crate::run::id::SubtaskId;
use crate::run::subtask::error::{CopyError, FileProblem, SetupEnd, SubtaskError};
use crate::run::subtask::trees;
use crate::settings::config::{CopyPathError, check_copy_path};
use crate::tools::tree::{TreeAccess, in_tree};
use crate::tools::{ExecOutcome, ExecRequest, OutputCap, SetupPolicy, WriteScope};
use crate::worktree::WorktreeMode;
use crate::worktree::{BaseTree, CreateError, Files, Worktree, WorktreeError, WorktreeSpec};

/// How much of a failed setup command's output the subtask's reason shows: its end,
/// where the error usually is.
const SETUP_OUTPUT_TAIL_CHARS: usize = 2_000;

/// How many of the files a setup command changed a note names.
const LISTED_SETUP_CHANGES: usize = 5;

/// At most this many git worktrees are registered ahead of the lead's delegations: each
/// is checked out at once, and one the lead does not use was checked out for nothing.
const MAX_PREPARED_WORKTREES: u32 = 8;

/// At most this many copy-on-write worktrees are registered ahead: one costs a
/// registration (~10 ms) and its removal if unused, never a checkout.
const MAX_PREPARED_OVERLAYS: u32 = 64;

/// Why a listed local-only file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalFileError {
    /// The entry itself is unusable. Not retried: the user fixes the `worktree.copy` list.
    #[error("worktree.copy: {path}: {problem}")]
    Entry {
        path: String,
        #[source]
        problem: CopyPathError,
    },
    /// The file is unusable. Not retried: the user fixes the file or the list.
    #[error("worktree.copy: {path}: {problem}")]
    File {
        path: String,
        #[source]
        problem: FileProblem,
    },
    /// Git tracks the file. Not retried.
    #[error(
        "worktree.copy: {path}: git tracks it, so every worktree has it already; `copy` is \
         for files git does not track"
    )]
    Tracked { path: String },
    /// The repository has no work tree to copy from. Not retried.
    #[error("worktree.copy: {repo} is a bare repository; there is no work tree to copy files from")]
    Bare { repo: PathBuf },
    /// Git could not tell whether the file is tracked. Not retried.
    #[error("worktree.copy: {path}: {source}")]
    Git {
        path: String,
        #[source]
        source: GitError,
    },
}

/// Checks, at a run's start, that every `worktree.copy` entry names a regular file in
/// the user's work tree, inside the repository (symlinks included), that git does not
/// track at `base` nor in the index. Returns the entries normalised.
pub fn check_local_files(
    repo: &Repo,
    base: CommitId,
    paths: &[String],
) -> Result<Vec<String>, LocalFileError> {
    let mut checked = Vec::with_capacity(paths.len());
    for path in paths {
        let path = check_copy_path(path).map_err(|problem| LocalFileError::Entry {
            path: path.clone(),
            problem,
        })?;
        let root = repo.work_tree().ok_or_else(|| LocalFileError::Bare {
            repo: repo.common_dir().to_path_buf(),
        })?;
        source_file(root, &path).map_err(|problem| LocalFileError::File {
            path: path.clone(),
            problem,
        })?;
        let tracked = repo
            .is_tracked(base, &path)
            .map_err(|source| LocalFileError::Git {
                path: path.clone(),
                source,
            })?;
        if tracked {
            return Err(LocalFileError::Tracked { path });
        }
        checked.push(path);
    }
    Ok(checked)
}

/// Worktrees registered ahead of the lead's delegations (while its first model call is
/// in flight), by subtask number: registrations are serialised by git, so doing them
/// early keeps them off the workers' critical path. One task makes them in subtask
/// order, so that the first subtasks, whose merges the later ones wait for, get theirs
/// first (made concurrently, they came out in any order: measured at 32 subtasks, S10's
/// was ready after 306 ms and held up the merges of the 22 after it).
#[derive(Default)]
pub(crate) struct AheadWorktrees {
    registered: Mutex<BTreeMap<u32, oneshot::Receiver<Result<Worktree, CreateError>>>>,
    /// The base tree copy-on-write worktrees are overlays of, made once, by the
    /// registrations ahead or by the first subtask that needs it.
    base: Arc<tokio::sync::OnceCell<BaseTree>>,
}

impl AheadWorktrees {
    /// Registers the worktrees of the subtasks from `next` on, as many as may run at once
    /// (a git worktree is checked out as soon as it is registered, so at most
    /// [`MAX_PREPARED_WORKTREES`] of those). A copy-on-write one needs the base tree,
    /// which is made first.
    pub(crate) fn register(&self, stage: TreeStage<'_>, next: SubtaskId) {
        // A remote tree is opened for its subtask, on the host that has a slot then.
        if !stage.trees.hosts.is_empty() {
            return;
        }
        let overlay = stage.facts.options.worktree_mode == WorktreeMode::Overlay;
        let remaining = (stage.facts.options.max_subtasks + 1).saturating_sub(next.number());
        let count = u32::try_from(stage.facts.options.jobs)
            .unwrap_or(u32::MAX)
            .min(remaining)
            .min(if overlay {
                MAX_PREPARED_OVERLAYS
            } else {
                MAX_PREPARED_WORKTREES
            });
        let mut prepared = lock(&self.registered);
        let mut queue = Vec::new();
        for n in next.number()..next.number() + count {
            let (tx, rx) = oneshot::channel();
            prepared.insert(n, rx);
            queue.push((stage.facts.worktree_spec(SubtaskId(n)), tx));
        }
        let repo = stage.facts.repo.clone();
        let live = Arc::clone(&stage.trees.live);
        let cell = Arc::clone(&self.base);
        let (commit, setup) = (
            stage.facts.base,
            stage.facts.options.worktree_setup.once_per_base(),
        );
        let setup = setup.map(str::to_owned);
        tokio::spawn(async move {
            let base = if overlay {
                let made = cell.get_or_try_init(|| repo.base_tree(commit, setup.as_deref()));
                // Failed, the queue is dropped: each subtask makes (and reports) its own.
                let Ok(base) = made.await else { return };
                Some(base.clone())
            } else {
                None
            };
            for (spec, tx) in queue {
                let made = match &base {
                    Some(base) => Worktree::create_copy_on_write(&repo, spec, base).await,
                    None => Worktree::create(&repo, spec).await,
                };
                // Mounted too, unless the setup must run in the base first (the subtask
                // that runs it mounts its own): a tree host each was 30 ms of the burst
                // of 32 subtasks starting at once. On a task of its own, so that the
                // host's start (a process, the kernel's mount) runs beside the next
                // registration, which git serialises. A subtask that no longer waits for
                // its worktree: `remove_unused` finds it.
                match (made, &base) {
                    (Ok(worktree), Some(base)) if base.is_set_up() => {
                        let lower = base.tree_dir();
                        let live = Arc::clone(&live);
                        tokio::spawn(async move {
                            let mounted = worktree.mount(&live, &lower).await;
                            let _ = tx.send(Ok(mounted.unwrap_or(worktree)));
                        });
                    }
                    (made, _) => {
                        let _ = tx.send(made);
                    }
                }
            }
        });
    }

    /// The base tree of the run's copy-on-write worktrees, made on first use, and set
    /// up once (see [`setup_base`]) before any tree over it is mounted.
    async fn base_tree(
        &self,
        stage: TreeStage<'_>,
        id: SubtaskId,
    ) -> Result<BaseTree, SubtaskError> {
        let base = self
            .base
            .get_or_try_init(|| {
                stage.facts.repo.base_tree(
                    stage.facts.base,
                    stage.facts.options.worktree_setup.once_per_base(),
                )
            })
            .await
            .map_err(WorktreeError::from)?;
        setup_base(stage, id, base).await?;
        Ok(base.clone())
    }

    /// Removes the worktree registered ahead for `id`, at the base, with its branch: the
    /// subtask starts elsewhere. Failing to is noted; creating it elsewhere then fails.
    async fn discard(&self, stage: TreeStage<'_>, id: SubtaskId) {
        let Some(Ok(worktree)) = self.take(id).await else {
            return;
        };
        discard_worktree(stage, id, Some(&worktree)).await;
    }

    /// The worktree registered ahead for `id`, if there is one.
    async fn take(&self, id: SubtaskId) -> Option<Result<Worktree, CreateError>> {
        let pending = lock(&self.registered).remove(&id.number())?;
        pending.await.ok()
    }

    /// Removes the worktrees registered ahead that no subtask used, with their branches
    /// (which hold nothing but the base).
    pub(crate) async fn remove_unused(&self, stage: TreeStage<'_>) {
        let unused = std::mem::take(&mut *lock(&self.registered));
        for (n, pending) in unused {
            let Ok(Ok(worktree)) = pending.await else {
                continue;
            };
            if let Err(error) = remove_unmounted(stage, &worktree).await {
                stage
                    .record
                    .note(format!("could not remove unused worktree {n}: {error}"));
            }
            if let Err(error) = stage
                .facts
                .repo
                .delete_subtask_branch(&stage.facts.run, n)
                .await
            {
                stage
                    .record
                    .note(format!("kept unused branch {n}: {error}"));
            }
        }
    }
}

/// Removes subtask `id`'s `worktree` (if it has one) and its branch, which hold nothing
/// but the base.
async fn discard_worktree(stage: TreeStage<'_>, id: SubtaskId, worktree: Option<&Worktree>) {
    if let Some(worktree) = worktree
        && let Err(error) = remove_unmounted(stage, worktree).await
    {
        stage.record.note(format!(
            "{id}: could not remove its worktree at the base: {error}"
        ));
    }
    if let Err(error) = stage
        .facts
        .repo
        .delete_subtask_branch(&stage.facts.run, id.number())
        .await
    {
        stage.record.note(format!(
            "{id}: could not remove its branch at the base: {error}"
        ));
    }
}

/// Removes a worktree that was never mounted: a copy-on-write one's registration holds
/// nothing to commit (its upper directory was never made), a git one is committed first.
async fn remove_unmounted(stage: TreeStage<'_>, worktree: &Worktree) -> Result<(), SubtaskError> {
    Ok(worktree
        .discard_unused(&stage.facts.repo, &stage.trees.live)
        .await?)
}

/// Clears the way for subtask `id` to start from `start`: a worktree and branch left at
/// the base (registered ahead by an earlier process of the run) hold no work and are
/// removed; a branch with work on it is kept.
async fn clear_base_branch(stage: TreeStage<'_>, id: SubtaskId, spec: &WorktreeSpec) {
    let branch = stage.facts.run.subtask_branch(id.number());
    if !matches!(stage.facts.repo.ref_target(&format!("refs/heads/{branch}")), Ok(Some(tip)) if tip == stage.facts.base)
    {
        return;
    }
    let worktree =
        stage
            .facts
            .repo
            .find_worktree(&stage.facts.run, id.number(), stage.facts.base, &spec.path);
    discard_worktree(stage, id, worktree.ok().flatten().as_ref()).await;
}

/// Creates (or, on resume, recovers) subtask `id`'s worktree, its branch starting at
/// `start` (a subtask that waited for others: the result when it started) or else at
/// the base. A directory grove does not own at that path (left by a crash, or by hand)
/// is moved aside and kept, never deleted, and the worktree is made anew from its
/// branch.
pub(crate) async fn create_worktree(
    stage: TreeStage<'_>,
    ahead: &AheadWorktrees,
    id: SubtaskId,
    start: Option<CommitId>,
    scope: Option<&WriteScope>,
) -> Result<Worktree, SubtaskError> {
    let mut spec = stage.facts.worktree_spec(id);
    let remote = !stage.trees.hosts.is_empty();
    let base = match stage.facts.options.worktree_mode {
        WorktreeMode::Overlay if !remote => Some(ahead.base_tree(stage, id).await?),
        _ => None,
    };
    // Only a worktree that starts at the run's base is an overlay of its base tree; one
    // that starts from the result gets a checkout.
    let make = |spec: WorktreeSpec| {
        let base = base.clone().filter(|_| spec.base == stage.facts.base);
        async move {
            match base {
                _ if remote => Worktree::create_remote(&stage.facts.repo, spec).await,
                Some(base) => Worktree::create_copy_on_write(&stage.facts.repo, spec, &base).await,
                None => Worktree::create(&stage.facts.repo, spec).await,
            }
        }
    };
    let created = match start.filter(|start| *start != stage.facts.base) {
        // The worktree registered ahead is at the base: never the one to use.
        Some(start) => {
            ahead.discard(stage, id).await;
            clear_base_branch(stage, id, &spec).await;
            spec.base = start;
            make(spec.clone()).await
        }
        None => match ahead.take(id).await {
            Some(prepared) => prepared,
            None => make(spec.clone()).await,
        },
    };
    let stray = match created {
        // Not grove's, or registered for a branch that was never made (the creation
        // says which): the directory is moved aside, never deleted.
        Err(
            CreateError::WorktreePathOccupied { path, .. }
            | CreateError::BranchNeverMade { path, .. },
        ) => Err(path),
        other => Ok(other),
    };
    let recovered = match stray {
        Err(path) => {
            let aside = path.with_file_name(format!(
                "{}.stray-{}",
                id.number(),
                crate::store::journal::now_ms()
            ));
            std::fs::rename(&path, &aside).map_err(|source| SubtaskError::Worktree {
                source: GitError::Io {
                    action: "move aside",
                    path: path.clone(),
                    source,
                }
                .into(),
            })?;
            stage.record.note(format!(
                "{id}: {} was not a worktree grove knows; it was kept at {}",
                path.display(),
                aside.display()
            ));
            make(spec).await
        }
        Ok(created) => created,
    };
    let worktree = recovered?;
    if worktree.is_remote() && stage.trees.hosts.is_empty() {
        // Resumed without `--remote`: its tree continues here from its last checkpoint.
        stage.record.note(format!(
            "{id}: its tree was on a remote host; it continues on this machine from its \
             last checkpoint (`grove resume --remote NAME` sends it to a host)"
        ));
        return Ok(worktree
            .bring_here(&stage.facts.repo)
            .await
            .map_err(WorktreeError::from)?);
    }
    if worktree.is_remote() {
        return super::hosts::reach(stage, id, &worktree, scope).await;
    }
    if !matches!(worktree.files(), Files::Unmounted) {
        return Ok(worktree);
    }
    // A resumed run's copy-on-write worktree is mounted again, in any mode.
    let lower = match base {
        Some(base) => base.tree_dir(),
        None => ahead.base_tree(stage, id).await?.tree_dir(),
    };
    trees::mount_again(stage, &worktree, &lower).await
}

/// Copies the local-only files into subtask `id`'s worktree and runs the setup command
/// there, once the worktree is filled and before the worker's first turn.
pub(crate) async fn prepare(
    stage: TreeStage<'_>,
    id: SubtaskId,
    worktree: &Worktree,
) -> Result<(), SubtaskError> {
    prepare_tree(stage, id, None, worktree).await
}

/// Prepares a worktree no worker edits (one of the run's result, where the project's
/// check runs; `on` names it in notes) as a subtask's is: the local-only files copied
/// in, then the setup command. A setup failure is [`SubtaskError::Setup`] of subtask 0
/// (the caller words it for its tree).
pub(crate) async fn prepare_check_tree(
    stage: TreeStage<'_>,
    on: &str,
    worktree: &Worktree,
) -> Result<(), SubtaskError> {
    prepare_tree(stage, SubtaskId(0), Some(on), worktree).await
}

/// [`prepare`] of subtask `id`'s worktree, or of a check's tree `on`.
async fn prepare_tree(
    stage: TreeStage<'_>,
    id: SubtaskId,
    on: Option<&str>,
    worktree: &Worktree,
) -> Result<(), SubtaskError> {
    let setup = &stage.facts.options.worktree_setup;
    let local = stage.facts.local_paths();
    if local.is_empty() && setup.setup.is_none() {
        return Ok(());
    }
    worktree
        .ready()
        .await
        .map_err(|source| SubtaskError::NotCheckedOut { source })?;
    if !local.is_empty() && worktree.is_remote() {
        // Your uncommitted files (a `.env`, say) stay on this machine.
        stage.record.note(format!(
            "{id}: its tree is on a remote host; the local-only files ({}) are not sent there",
            local.join(", ")
        ));
    } else if !local.is_empty() {
        // Recorded first: no commit can include a file that is not yet recorded.
        stage
            .facts
            .repo
            .set_local_files(worktree, &local)
            .map_err(|source| SubtaskError::RecordLocalFiles { source })?;
        for path in &local {
            copy_into(&stage.facts.user_root, &worktree.files_root(), path).map_err(|source| {
                SubtaskError::Copy {
                    path: path.clone(),
                    source,
                }
            })?;
        }
    }
    match &setup.setup {
        // Run once in the base tree this copy-on-write tree shows (`setup_base`).
        Some(_) if worktree.is_copy_on_write() && !setup.per_worker => Ok(()),
        // A check's tree holds reviewed work only, and is made afresh each time.
        Some(command) if on.is_some() => run_setup(stage, id, on, worktree, command).await,
        Some(command) => {
            let marker = setup_marker(stage.facts, id);
            if marker.exists() {
                // Its worker may have changed the tree since (the setup script itself,
                // say): the setup's output is there, and unreviewed code is never run
                // as the setup, with the network.
                stage.record.note(format!(
                    "{id}: the setup command already ran in this worktree before grove \
                     stopped; it is not run again in a tree its worker may have changed"
                ));
                return Ok(());
            }
            run_setup(stage, id, on, worktree, command).await?;
            record_setup(&marker).map_err(|source| SubtaskError::SetupRecord {
                path: marker.clone(),
                source,
            })
        }
        None => Ok(()),
    }
}

/// The mark that subtask `id`'s setup command completed in its worktree: its worker
/// starts only after it is written, so a tree without it holds no worker's edits. It
/// lies in the run's store, which commands cannot write.
fn setup_marker(facts: &RunFacts, id: SubtaskId) -> PathBuf {
    facts.run_dir.join("setup-done").join(id.to_string())
}

fn record_setup(marker: &Path) -> std::io::Result<()> {
    if let Some(dir) = marker.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::File::create(marker)?;
    file.sync_all()
}

/// The setup command a run's base tree is prepared with: `[worktree] setup`, unless
/// `per_worker` says to run it in every tree.
/// Runs the setup command once in `base`, the base tree copy-on-write worktrees share,
/// unless it already ran there (for this commit and this command, by this run or an
/// earlier one): every worker then starts from its result. Concurrent callers, in this
/// process or another grove, wait for the one that runs it. `id` is the subtask whose
/// preparation needed it (named if it fails). What setup creates is in the lower
/// directory only, so it is never committed unless a worker changes it.
pub(crate) async fn setup_base(
    stage: TreeStage<'_>,
    id: SubtaskId,
    base: &BaseTree,
) -> Result<(), SubtaskError> {
    setup_base_for(stage, id, &id.to_string(), base).await
}

/// [`setup_base`], its note naming `who` needed it (a subtask, or the tree a check runs
/// on).
pub(crate) async fn setup_base_for(
    stage: TreeStage<'_>,
    id: SubtaskId,
    who: &str,
    base: &BaseTree,
) -> Result<(), SubtaskError> {
    let Some(command) = base.setup_command() else {
        return Ok(());
    };
    let guard = base.lock_for_setup().await.map_err(WorktreeError::from)?;
    let Some(guard) = guard else {
        return Ok(());
    };
    // The setup may need the local-only files (`.env`), as in a worker's tree; there
    // they stay in the lower directory, never committed.
    for path in &stage.facts.local_paths() {
        copy_into(&stage.facts.user_root, &base.tree_dir(), path).map_err(|source| {
            SubtaskError::Copy {
                path: path.clone(),
                source,
            }
        })?;
    }
    stage.record.note(format!(
        "{who}: running the setup command `{command}` once, in the base tree the workers share"
    ));
    run_setup_in(stage, id, &base.tree_dir(), None, command).await?;
    Ok(guard.record_done().map_err(WorktreeError::from)?)
}

/// Runs the setup command `command` in the worktree.
async fn run_setup(
    stage: TreeStage<'_>,
    id: SubtaskId,
    on: Option<&str>,
    worktree: &Worktree,
    command: &str,
) -> Result<(), SubtaskError> {
    // It may take minutes (`npm ci`): say why the worker (or the check) has not started.
    match on {
        None => stage
            .record
            .note(format!("{id}: running the setup command `{command}`")),
        Some(on) => stage.record.note(format!(
            "running the setup command `{command}` in the worktree of the {on}"
        )),
    }
    // A tree beyond the base holds workers' edits (the merged result, a branch with an
    // earlier attempt's commits): the setup command runs on the base's files, never on
    // a script a worker may have rewritten, and the tree gets its own back after (no
    // worker has started in it: a tracked file the setup changed is put back too).
    let beyond = Some(worktree.start()).filter(|start| *start != stage.facts.base);
    if let Some(start) = beyond {
        stage
            .facts
            .repo
            .switch_files(worktree, start, stage.facts.base)
            .await
            .map_err(|source| SubtaskError::SetupInputs { source })?;
    }
    let tree = worktree.access();
    let ran = run_setup_in(stage, id, worktree.path(), tree.as_deref(), command).await;
    if beyond.is_some() {
        let back = stage.facts.repo.restore_files(worktree).await;
        ran?;
        back.map_err(|source| SubtaskError::SetupInputs { source })?;
    } else {
        ran?;
    }
    // A check's tree is never committed: what the setup left there is its own.
    if on.is_none() {
        note_setup_changes(stage.facts, stage.record, id, worktree).await;
    }
    Ok(())
}

/// Runs the setup command `command` in directory `cwd` (inside `tree` when it is one),
/// confined to it by the executor's setup policy.
async fn run_setup_in(
    stage: TreeStage<'_>,
    id: SubtaskId,
    cwd: &Path,
    tree: Option<&dyn TreeAccess>,
    command: &str,
) -> Result<(), SubtaskError> {
    let timeout_s = stage.facts.options.worktree_setup.setup_timeout_s;
    let request = ExecRequest {
        command: command.to_owned(),
        cwd: cwd.to_path_buf(),
        timeout: Duration::from_secs(timeout_s),
        cancel: stage.record.cancel.child_token(),
        output_cap: OutputCap {
            head: 4 * 1024,
            tail: 16 * 1024,
        },
    };
    let not_run = |source| SubtaskError::SetupNotRun {
        command: command.to_owned(),
        source,
    };
    let executor = in_tree(
        tree,
        &stage.trees.executor.for_setup(&SetupPolicy::default()),
    )
    .map_err(not_run)?;
    let result = executor.execute(request).await.map_err(not_run)?;
    let status = match result.outcome {
        ExecOutcome::Exited(0) => return Ok(()),
        ExecOutcome::Cancelled => return Err(SubtaskError::Interrupted),
        ExecOutcome::Exited(code) => SetupEnd::Exited(code),
        ExecOutcome::Signalled(signal) => SetupEnd::Signalled(signal),
        ExecOutcome::TimedOut => SetupEnd::TimedOut { timeout_s },
    };
    let tail = output_tail(&result.output_text(), SETUP_OUTPUT_TAIL_CHARS);
    Err(SubtaskError::Setup {
        command: command.to_owned(),
        subtask: id,
        status,
        tail: if tail.is_empty() {
            "(no output)".to_owned()
        } else {
            tail
        },
    })
}

/// Tells the user when the setup command left files that grove would commit with the
/// worker's work (they would show up in the diff the reviewer judges).
async fn note_setup_changes(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    worktree: &Worktree,
) {
    let paths = match facts.repo.uncommitted_paths(worktree).await {
        Ok(paths) if paths.is_empty() => return,
        Ok(paths) => paths,
        Err(error) => {
            record.note(format!(
                "{id}: could not list what the setup command changed: {error}"
            ));
            return;
        }
    };
    let mut listed = paths
        .iter()
        .take(LISTED_SETUP_CHANGES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > LISTED_SETUP_CHANGES {
        listed.push_str(&format!(" and {} more", paths.len() - LISTED_SETUP_CHANGES));
    }
    record.note(format!(
        "{id}: the setup command changed files that will be committed with the worker's \
         work and reviewed as part of it: {listed}; have .gitignore ignore them to keep \
         them out"
    ));
}

/// The file to copy for `path`: the real path of `<root>/<path>`, which must be a
/// regular file inside `root` (and not in its `.git`).
fn source_file(root: &Path, path: &str) -> Result<PathBuf, FileProblem> {
    let real = match std::fs::canonicalize(root.join(path)) {
        Ok(real) => real,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileProblem::Missing {
                root: root.to_path_buf(),
            });
        }
        Err(source) => return Err(FileProblem::Unresolvable { source }),
    };
    if !real.starts_with(root) || real.starts_with(root.join(".git")) {
        return Err(FileProblem::Outside { real });
    }
    if !real.is_file() {
        return Err(FileProblem::NotAFile);
    }
    Ok(real)
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CopyError {
    let path = path.to_path_buf();
    move |source| CopyError::Io {
        action,
        path,
        source,
    }
}

/// Copies the user's `path` into the worktree at `worktree_root`, replacing whatever is
/// there (a symlink included, never followed).
fn copy_into(user_root: &Path, worktree_root: &Path, path: &str) -> Result<(), CopyError> {
    let source = source_file(user_root, path)?;
    let relative = Path::new(path);
    let name = relative.file_name().ok_or_else(|| CopyError::NoFileName {
        path: path.to_owned(),
    })?;
    let real_parent = make_dirs_inside(worktree_root, relative.parent().unwrap_or(Path::new("")))?;
    let target = real_parent.join(name);
    let staged = tempfile::NamedTempFile::new_in(&real_parent)
        .map_err(io("create a file in", &real_parent))?;
    std::fs::copy(&source, staged.path()).map_err(io("copy", &source))?;
    // A rename replaces a symlink at the target instead of writing through it.
    staged
        .persist(&target)
        .map_err(|error| io("write", &target)(error.error))?;
    Ok(())
}

/// Creates the directories of `relative` under `root` one at a time, never through a
/// symlink that leads out of `root` (nothing is created outside), and returns the real
/// path of the last one.
fn make_dirs_inside(root: &Path, relative: &Path) -> Result<PathBuf, CopyError> {
    let mut dir = root.to_path_buf();
    for part in relative.components() {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = std::fs::canonicalize(&dir).map_err(io("resolve", &dir))?;
                if !real.starts_with(root) || !real.is_dir() {
                    return Err(CopyError::Escapes { path: dir, real });
                }
                dir = real;
            }
            Ok(_) => return Err(CopyError::NotADirectory { path: dir }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(io("create", &dir))?;
            }
            Err(error) => return Err(io("read", &dir)(error)),
        }
    }
    Ok(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_never_writes_through_a_symlink_in_the_worktree() {
        let user = tempfile::tempdir().unwrap();
        let worktree = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        let worktree_root = std::fs::canonicalize(worktree.path()).unwrap();
        std::fs::write(user_root.join(".env"), "SECRET=1\n").unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, worktree_root.join(".env")).unwrap();

        copy_into(&user_root, &worktree_root, ".env").unwrap();

        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let copied = worktree_root.join(".env");
        assert!(
            !copied.symlink_metadata().unwrap().is_symlink(),
            "the link is replaced"
        );
        assert_eq!(std::fs::read_to_string(copied).unwrap(), "SECRET=1\n");
    }

    #[test]
    fn a_copy_never_creates_directories_through_a_symlink_out_of_the_worktree() {
        let user = tempfile::tempdir().unwrap();
        let worktree = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        let worktree_root = std::fs::canonicalize(worktree.path()).unwrap();
        std::fs::create_dir_all(user_root.join("config/deep")).unwrap();
        std::fs::write(user_root.join("config/deep/local.yml"), "k: v\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), worktree_root.join("config")).unwrap();

        let problem = copy_into(&user_root, &worktree_root, "config/deep/local.yml")
            .unwrap_err()
            .to_string();

        assert!(problem.contains("outside the worktree"), "{problem}");
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "nothing is created outside the worktree"
        );
    }

    #[test]
    fn a_source_symlink_out_of_the_repository_is_refused() {
        let user = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        std::fs::write(outside.path().join("id_rsa"), "KEY").unwrap();
        std::os::unix::fs::symlink(outside.path().join("id_rsa"), user_root.join(".env")).unwrap();
        let problem = source_file(&user_root, ".env").unwrap_err().to_string();
        assert!(problem.contains("outside the repository"), "{problem}");
        std::fs::create_dir(user_root.join("dir")).unwrap();
        let problem = source_file(&user_root, "dir").unwrap_err().to_string();
        assert!(problem.contains("not a regular file"), "{problem}");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod stage_tests {
    use super::*;
    use crate::run::test_support::{ScriptedModel, TestRun};
    use crate::settings::options::RunOptions;

    #[tokio::test]
    async fn a_worktree_is_made_on_the_subtasks_branch_and_a_stray_directory_is_kept() {
        let run = TestRun::alpha().await;
        let stray = run.ctx.facts.worktree_spec(SubtaskId(1)).path;
        std::fs::create_dir_all(&stray).unwrap();
        std::fs::write(stray.join("mine.txt"), "keep me").unwrap();

        let worktree = create_worktree(
            run.ctx.tree_stage(),
            &AheadWorktrees::default(),
            SubtaskId(1),
            None,
            None,
        )
        .await
        .unwrap();
        worktree.ready().await.unwrap();

        assert_eq!(
            worktree.branch_ref(),
            format!("refs/heads/{}", run.ctx.facts.run.subtask_branch(1))
        );
        assert_eq!(
            std::fs::read_to_string(worktree.path().join("a.txt")).unwrap(),
            "alpha\n"
        );
        let kept: Vec<_> = std::fs::read_dir(stray.parent().unwrap())
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with("1.stray-"))
            .collect();
        assert_eq!(
            kept.len(),
            1,
            "the directory grove does not own is moved aside"
        );
        let aside = stray.with_file_name(&kept[0]);
        assert_eq!(
            std::fs::read_to_string(aside.join("mine.txt")).unwrap(),
            "keep me"
        );
    }

    #[tokio::test]
    async fn setup_runs_once_per_base_and_setup_and_again_for_another_command() {
        let mut run = TestRun::alpha().await;
        let base = run.rev("HEAD");
        let command = "echo ran >> ../setup-runs; mkdir -p node_modules; echo m > node_modules/m";
        for _ in 0..2 {
            // A fresh handle each time, as a second run on the same base gets.
            let tree = run
                .ctx
                .facts
                .repo
                .base_tree(base, Some(command))
                .await
                .unwrap();
            setup_base(run.ctx.tree_stage(), SubtaskId(1), &tree)
                .await
                .unwrap();
            assert!(tree.is_set_up(), "the base records its setup");
        }
        let tree = run
            .ctx
            .facts
            .repo
            .base_tree(base, Some(command))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(tree.tree_dir().join("node_modules/m")).unwrap(),
            "m\n",
            "what setup made is in the base tree"
        );
        assert_eq!(
            std::fs::read_to_string(tree.tree_dir().join("../setup-runs")).unwrap(),
            "ran\n",
            "the second run on the same base and command does not run it again"
        );
        let other = run
            .ctx
            .facts
            .repo
            .base_tree(base, Some("true"))
            .await
            .unwrap();
        assert!(
            !other.is_set_up() && other.tree_dir() != tree.tree_dir(),
            "another command gets another base, so a mounted one never changes"
        );
        assert_eq!(
            run.notes(),
            vec![format!(
                "S1: running the setup command `{command}` once, in the base tree the workers \
                 share"
            )]
        );
    }

    #[tokio::test]
    async fn a_tree_beyond_the_base_is_set_up_on_the_base_files_and_then_holds_its_own() {
        let mut options = RunOptions::new("t");
        options.worktree_setup.setup = Some("sh setup.sh".into());
        let base_setup = "echo base > made.txt; echo regenerated > lock.txt\n";
        let run = TestRun::new(
            &[("setup.sh", base_setup), ("lock.txt", "base\n")],
            options,
            ScriptedModel::new(vec![]),
        )
        .await;
        // Merged work on top of the base: the setup script rewritten, the lock file
        // changed, a file added.
        let root = run.ctx.facts.user_root.clone();
        let evil = "echo evil > made.txt; echo evil > lock.txt\n";
        for (path, content) in [
            ("setup.sh", evil),
            ("lock.txt", "worker\n"),
            ("new.txt", "new\n"),
        ] {
            std::fs::write(root.join(path), content).unwrap();
        }
        run.git(&root, &["add", "-A"]);
        run.git(&root, &["commit", "-q", "-m", "merged work"]);
        let merged = run.rev("HEAD");
        let path = run.ctx.facts.worktrees_dir.join("check-result");
        let worktree = run
            .ctx
            .facts
            .repo
            .create_detached_worktree(&run.ctx.facts.run, &path, merged)
            .await
            .unwrap();

        prepare_check_tree(run.ctx.tree_stage(), "result", &worktree)
            .await
            .unwrap();

        let read = |name: &str| std::fs::read_to_string(worktree.path().join(name)).unwrap();
        assert_eq!(
            [
                read("made.txt"),
                read("setup.sh"),
                read("lock.txt"),
                read("new.txt")
            ],
            ["base\n", evil, "worker\n", "new\n"].map(str::to_owned),
            "the base's setup script ran (its output is there, the rewrite's is not), and \
             the tree then holds the merged files again, a tracked file the setup rewrote \
             included"
        );
        assert_eq!(
            run.git(worktree.path(), &["status", "--porcelain"]),
            "?? made.txt",
            "nothing tracked differs from the merged commit"
        );
    }

    #[tokio::test]
    async fn local_files_are_copied_and_a_failing_setup_fails_with_its_status_and_tail() {
        let mut options = RunOptions::new("t");
        options.worktree_setup.copy = vec![".env".into()];
        options.worktree_setup.setup = Some("echo preparing; echo broken >&2; exit 3".into());
        let mut run =
            TestRun::new(&[("a.txt", "alpha\n")], options, ScriptedModel::new(vec![])).await;
        std::fs::write(run.ctx.facts.user_root.join(".env"), "SECRET=1\n").unwrap();
        let worktree = run.worktree(1).await;

        let error = prepare(run.ctx.tree_stage(), SubtaskId(1), &worktree)
            .await
            .unwrap_err();

        assert_eq!(
            std::fs::read_to_string(worktree.path().join(".env")).unwrap(),
            "SECRET=1\n",
            "the local-only file is copied before the setup runs"
        );
        match &error {
            SubtaskError::Setup {
                command,
                subtask,
                status,
                tail,
            } => {
                assert_eq!(command, "echo preparing; echo broken >&2; exit 3");
                assert_eq!((*subtask, status), (SubtaskId(1), &SetupEnd::Exited(3)));
                assert!(
                    tail.contains("preparing") && tail.contains("broken"),
                    "{tail}"
                );
            }
            other => panic!("expected a setup failure, got {other:?}"),
        }
        assert!(error.to_string().starts_with(
            "the setup command `echo preparing; echo broken >&2; exit 3` exited with status 3 \
             in S1's worktree; the worker did not start."
        ));
        assert_eq!(
            run.notes(),
            vec!["S1: running the setup command `echo preparing; echo broken >&2; exit 3`"]
        );
        let committed = worktree
            .checkpoint(&run.ctx.facts.repo, "S1: probe")
            .await
            .unwrap();
        assert_eq!(
            committed, None,
            "a copied local-only file is never committed"
        );
    }
}
