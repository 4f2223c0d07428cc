//! In-memory integration: merging approved branches onto a run's result ref.
//!
//! This module owns the merge queue. Merges never touch a work tree or index: `git
//! merge-tree --write-tree` (merge-ort, so renames and directory renames are right), then
//! the merge commit and a compare-and-swap ref move in process. A conflict leaves the
//! target ref exactly where it was.
//!
//! Approved subtasks merge one after another while the lead waits, so the common merges
//! whose result is certain skip the git process: the target has nothing of its own since
//! the branch forked (the merge is the branch's tree), or the two sides only add and
//! modify files, at paths neither shares nor nests under the other's (the merge is one
//! side's tree with the other's files put in). Anything else — a deletion, so a possible
//! rename; a path both touched; several merge bases — goes to `merge-tree`.

use std::collections::HashMap;

use serde::Serialize;

use super::Repo;
use super::error::{AdvanceError, GitError};
use super::lineage::{Fork, Lineage, MergeBase};
use super::names::{CommitId, RunId};
use super::trailers::{CommitMessage, Trailer};
use super::tree_diff;

/// One merge queue per process: parallel `update-ref`s of one ref lose races (measured:
/// 7 of 8). Other processes are handled by the compare-and-swap and a bounded retry.
pub(super) static MERGE_QUEUE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How often a merge is recomputed when another writer moved the target ref meanwhile.
const CAS_ATTEMPTS: u32 = 5;

/// What happened to one branch merged onto a target ref.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum MergeOutcome {
    /// A merge commit was written and the ref moved to it.
    Merged { commit: CommitId },
    /// The branch was already contained in the target; nothing changed.
    AlreadyMerged,
    /// The branch conflicts with the target; the ref was left unchanged.
    Conflict { paths: Vec<String> },
}

/// The result of a merge computed but not recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum MergeCheck {
    /// The two sides merge cleanly into `tree`.
    Clean { tree: String },
    /// The merge would conflict in `paths`.
    Conflict { paths: Vec<String> },
}

/// Two commits that cannot both be merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairConflict {
    /// The branch tip being checked.
    pub first: CommitId,
    /// What it conflicts with: the merge target or a later branch.
    pub second: CommitId,
    /// The conflicting paths.
    pub paths: Vec<String>,
}

impl Repo {
    /// Creates the run's result branch `grove/<run>/result` at `base`. An existing result
    /// branch (a resumed run) is left where it is and its commit returned.
    pub async fn create_result_branch(
        &self,
        run: &RunId,
        base: CommitId,
    ) -> Result<CommitId, GitError> {
        let reference = run.result_ref();
        if let Some(existing) = self.ref_target(&reference)? {
            return Ok(existing);
        }
        // In process (no git process on the way to the lead's first call); `force` off
        // makes it fail, like a compare-and-swap from nothing, if the ref appeared meanwhile.
        let repo = self.libgit();
        repo.reference(&reference, base.oid(), false, "grove: start run")
            .map_err(|source| GitError::write(reference.clone(), source))?;
        self.lineages().insert(reference, Lineage::at(base.oid()));
        Ok(base)
    }

    /// Merges `commit` onto `target_ref` through the merge queue, with `message`.
    pub async fn merge_onto(
        &self,
        target_ref: &str,
        commit: CommitId,
        message: &str,
    ) -> Result<MergeOutcome, AdvanceError> {
        let _queue = MERGE_QUEUE.lock().await;
        let mut last_seen = None;
        for _ in 0..CAS_ATTEMPTS {
            let tip = self
                .ref_target(target_ref)?
                .ok_or_else(|| GitError::UnknownRevision {
                    rev: target_ref.to_owned(),
                })?;
            let (base, fork) = self.merge_base(target_ref, tip, commit)?;
            if base == MergeBase::Branch {
                return Ok(MergeOutcome::AlreadyMerged);
            }
            let disjoint = self.read("in-process merge", |repo| {
                certain_tree(repo, base, tip, commit)
            })?;
            let tree = match disjoint {
                Some(tree) => tree,
                None => match self.check_merge(tip, commit).await? {
                    MergeCheck::Conflict { paths } => {
                        return Ok(MergeOutcome::Conflict { paths });
                    }
                    MergeCheck::Clean { tree } => {
                        git2::Oid::from_str(&tree).map_err(|_| GitError::Parse {
                            op: "merge-tree".to_owned(),
                            detail: format!("{tree:?} is not a tree id"),
                        })?
                    }
                },
            };
            match self.commit_onto(target_ref, tree, tip, &[commit], message)? {
                Some(merged) => {
                    if let Some(fork) = fork
                        && let Some(lineage) = self.lineages().get_mut(target_ref)
                    {
                        lineage.merged(merged.oid(), fork);
                    }
                    return Ok(MergeOutcome::Merged { commit: merged });
                }
                // Another writer moved the ref meanwhile: recompute on its tip.
                None => last_seen = self.ref_target(target_ref)?,
            }
        }
        Err(AdvanceError::RefContended {
            reference: target_ref.to_owned(),
            actual: last_seen.map_or_else(|| "nothing".to_owned(), |c| c.to_string()),
        })
    }

    /// Merges the branches of `subtasks` onto the run's result branch in the order given
    /// (callers pass a deterministic order, e.g. by subtask number). A conflicting branch
    /// is reported and skipped; the ones after it are still merged.
    pub async fn merge_subtasks(
        &self,
        run: &RunId,
        subtasks: &[u32],
    ) -> Result<Vec<(u32, MergeOutcome)>, AdvanceError> {
        let mut outcomes = Vec::new();
        for &n in subtasks {
            let branch = super::subtask_ref(run, n);
            let commit = self
                .ref_target(&branch)?
                .ok_or(GitError::UnknownRevision { rev: branch })?;
            let message = CommitMessage::new(&format!("grove {run}: merge subtask {n}"))
                .with_trailers(&[
                    (Trailer::Run, run.to_string()),
                    (Trailer::Subtask, n.to_string()),
                ]);
            let outcome = self.merge_onto(&run.result_ref(), commit, &message).await?;
            outcomes.push((n, outcome));
        }
        Ok(outcomes)
    }

    /// How `theirs` stands to `ours` in the commit graph: from what is known of the
    /// history of `target_ref` when `ours` is its known tip (then with the fork that a
    /// merge adds to it), else from one walk of the graph (on a run's result, every merge
    /// adds commits that three separate walks each went through).
    fn merge_base(
        &self,
        target_ref: &str,
        ours: CommitId,
        theirs: CommitId,
    ) -> Result<(MergeBase, Option<Fork>), GitError> {
        self.read("merge base", |repo| {
            let mut lineages = self.lineages();
            // Not its tip (another writer moved the ref), or it takes a walk: what the
            // merge adds is then not known.
            let known = lineages
                .get(target_ref)
                .filter(|lineage| lineage.tip() == ours.oid());
            let found = find_base(repo, known, ours, theirs)?;
            if found.1.is_none() {
                lineages.remove(target_ref);
            }
            Ok(found)
        })
    }

    /// Whether `commit` is in the history of `tip`, the tip of `target_ref`: from the
    /// lineage grove keeps of it when that says so, else by walking the graph (each walk
    /// of a result 32 merges deep was a tenth of the CPU of the cleanups at a run's end).
    pub(super) fn in_history_of(
        &self,
        target_ref: &str,
        tip: CommitId,
        commit: CommitId,
    ) -> Result<bool, GitError> {
        let known = self
            .lineages()
            .get(target_ref)
            .is_some_and(|lineage| lineage.tip() == tip.oid() && lineage.known(commit.oid()));
        if known {
            return Ok(true);
        }
        self.is_ancestor(commit, tip)
    }

    /// The known history of each merge target.
    pub(super) fn lineages(&self) -> std::sync::MutexGuard<'_, HashMap<String, Lineage>> {
        self.inner
            .lineages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Computes the merge of `ours` and `theirs` without recording it anywhere.
    pub async fn check_merge(
        &self,
        ours: CommitId,
        theirs: CommitId,
    ) -> Result<MergeCheck, GitError> {
        match self
            .merge_tree(&ours.to_string(), &theirs.to_string())
            .await?
        {
            (tree, None) => Ok(MergeCheck::Clean { tree }),
            (_, Some(paths)) => Ok(MergeCheck::Conflict { paths }),
        }
    }

    /// `git merge-tree --write-tree` of the revisions `ours` and `theirs`: the tree it
    /// wrote (with conflict markers in the files that conflict) and, when the merge
    /// conflicts, the conflicting paths.
    pub(super) async fn merge_tree(
        &self,
        ours: &str,
        theirs: &str,
    ) -> Result<(String, Option<Vec<String>>), GitError> {
        let output = self
            .git()
            .args([
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                "-z",
                ours,
                theirs,
            ])
            .allow_codes(&[1])
            .run()
            .await?;
        let (tree, paths) = parse_merge_tree(&output.stdout, output.code)?;
        Ok((tree, (output.code != 0).then_some(paths)))
    }

    /// Finds conflicts among approved branches before any is merged: each branch onto
    /// `onto`, then every pair (in the order given). Reports each conflicting pair once.
    pub async fn find_conflicts(
        &self,
        onto: CommitId,
        branches: &[CommitId],
    ) -> Result<Vec<PairConflict>, GitError> {
        let mut conflicts = Vec::new();
        for (i, &first) in branches.iter().enumerate() {
            let others = std::iter::once(onto).chain(branches[i + 1..].iter().copied());
            for second in others {
                if let MergeCheck::Conflict { paths } = self.check_merge(second, first).await? {
                    conflicts.push(PairConflict {
                        first,
                        second,
                        paths,
                    });
                }
            }
        }
        Ok(conflicts)
    }

    /// Writes a commit of `tree` with `parents` through `git commit-tree`; its id.
    pub(super) async fn commit_tree(
        &self,
        tree: &str,
        parents: &[CommitId],
        message: &str,
    ) -> Result<CommitId, GitError> {
        let mut call = self.git().args(["commit-tree", "--no-gpg-sign", tree]);
        for parent in parents {
            call = call.arg("-p").arg(parent.to_string());
        }
        let id = call
            .args(["-F", "-"])
            .stdin(message.as_bytes().to_vec())
            .text()
            .await?;
        Self::parse_commit("commit-tree", &id)
    }
}

/// A path a side added or modified: its new blob (or link) and mode.
type PlainChange = (String, git2::Oid, git2::FileMode);

/// How `theirs` stands to `ours`: from `lineage` (the known history of `ours`) when that
/// is certain, with the fork a merge adds to it; else from one walk of the graph.
pub(super) fn find_base(
    repo: &git2::Repository,
    lineage: Option<&Lineage>,
    ours: CommitId,
    theirs: CommitId,
) -> Result<(MergeBase, Option<Fork>), git2::Error> {
    if ours == theirs {
        return Ok((MergeBase::Branch, None));
    }
    if let Some(lineage) = lineage
        && let Some(fork) = lineage.merge_base(repo, theirs.oid())?
    {
        return Ok((fork.base, Some(fork)));
    }
    let bases = match repo.merge_bases(ours.oid(), theirs.oid()) {
        Ok(bases) => bases,
        Err(error) if error.code() == git2::ErrorCode::NotFound => {
            return Ok((MergeBase::Other, None));
        }
        Err(error) => return Err(error),
    };
    let base = match bases.iter().as_slice() {
        [base] if *base == theirs.oid() => MergeBase::Branch,
        [base] if *base == ours.oid() => MergeBase::Target,
        [base] => MergeBase::One(CommitId::from_oid(*base)),
        _ => MergeBase::Other,
    };
    Ok((base, None))
}

/// The tree of the merge of `theirs` onto `ours`, which stand as `base` says, written to
/// `repo` when it is certain without `git merge-tree`: nothing on the target's side
/// (`Target`: the branch's tree), or one merge base and disjoint changes (see
/// [`disjoint_tree`]). `None` otherwise, the caller asking git.
pub(super) fn certain_tree(
    repo: &git2::Repository,
    base: MergeBase,
    ours: CommitId,
    theirs: CommitId,
) -> Result<Option<git2::Oid>, git2::Error> {
    match base {
        MergeBase::Target => Ok(Some(repo.find_commit(theirs.oid())?.tree_id())),
        MergeBase::One(base) => disjoint_tree(repo, base, ours, theirs),
        MergeBase::Branch | MergeBase::Other => Ok(None),
    }
}

/// The tree of the merge of `theirs` onto `ours`, whose one merge base is `base`,
/// computed in process, when it is certain to be the tree `git merge-tree` writes:
/// since the base, both sides only added or modified regular files and symlinks, at
/// paths that are neither shared nor nested one under the other. `None` otherwise.
/// Without a deletion there is no rename, and without a shared path no content merge,
/// so merge-ort would take each changed path from the one side that changed it.
fn disjoint_tree(
    repo: &git2::Repository,
    base: CommitId,
    ours: CommitId,
    theirs: CommitId,
) -> Result<Option<git2::Oid>, git2::Error> {
    let base_tree = repo.find_commit(base.oid())?.tree()?;
    let ours_tree = repo.find_commit(ours.oid())?.tree()?;
    let theirs_tree = repo.find_commit(theirs.oid())?.tree()?;
    let (Some(ours_changes), Some(theirs_changes)) = (
        plain_changes(repo, &base_tree, &ours_tree)?,
        plain_changes(repo, &base_tree, &theirs_tree)?,
    ) else {
        return Ok(None);
    };
    let ours_paths: std::collections::BTreeSet<&str> = ours_changes
        .iter()
        .map(|(path, _, _)| path.as_str())
        .collect();
    let clash = theirs_changes.iter().any(|(path, _, _)| {
        let inside = format!("{path}/");
        ours_paths.contains(path.as_str())
            || parent_dirs(path).any(|dir| ours_paths.contains(dir))
            || ours_paths
                .range(inside.as_str()..)
                .next()
                .is_some_and(|next| next.starts_with(&inside))
    });
    if clash {
        return Ok(None);
    }
    let mut update = git2::build::TreeUpdateBuilder::new();
    for (path, id, mode) in &theirs_changes {
        update.upsert(path.as_str(), *id, *mode);
    }
    update.create_updated(repo, &ours_tree).map(Some)
}

/// What changed from `base` to `side` (no rename detection): each path with its new
/// blob and mode; `None` when anything was deleted or changed type, or is not a regular
/// file or symlink (a submodule), where the in-process merge would not be certain.
fn plain_changes(
    repo: &git2::Repository,
    base: &git2::Tree<'_>,
    side: &git2::Tree<'_>,
) -> Result<Option<Vec<PlainChange>>, git2::Error> {
    let mut changes = Vec::new();
    for change in tree_diff::changed_files(repo, base, side)? {
        let (Some(new), Some(path)) = (change.new, change.path.to_str()) else {
            return Ok(None);
        };
        let mode = match new.mode {
            0o100644 => git2::FileMode::Blob,
            0o100755 => git2::FileMode::BlobExecutable,
            0o120000 => git2::FileMode::Link,
            _ => return Ok(None),
        };
        if change.changes_kind() {
            // A deletion and an addition to git.
            return Ok(None);
        }
        changes.push((path.to_owned(), new.id, mode));
    }
    Ok(Some(changes))
}

/// The directories above a `/`-separated repository path, innermost first.
fn parent_dirs(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .rev()
        .filter(|(_, c)| *c == '/')
        .map(move |(at, _)| &path[..at])
}
/// The tree and the conflicting paths of `git merge-tree --write-tree -z --name-only`'s
/// output (`code` 1: conflicts; the paths are empty for a clean merge).
fn parse_merge_tree(stdout: &[u8], code: i32) -> Result<(String, Vec<String>), GitError> {
    let mut fields = stdout
        .split(|b| *b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned());
    let tree = fields
        .next()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| GitError::Parse {
            op: "merge-tree".to_owned(),
            detail: "no tree id in the output".to_owned(),
        })?;
    let mut paths: Vec<String> = if code == 0 {
        Vec::new()
    } else {
        fields.filter(|p| !p.is_empty()).collect()
    };
    paths.dedup();
    Ok((tree, paths))
}
