//! In-memory integration: merging approved branches onto a run's result ref.
//!
//! This module owns the merge queue. Merges never touch a work tree or index: `git
//! merge-tree --write-tree` (merge-ort, so renames and directory renames are right),
//! `commit-tree`, then a compare-and-swap `update-ref`. A conflict leaves the target ref
//! exactly where it was.

use serde::Serialize;

use super::Repo;
use super::error::GitError;
use super::names::{CommitId, RunId};

/// One merge queue per process: parallel `update-ref`s of one ref lose races (measured:
/// 7 of 8). Other processes are handled by the compare-and-swap and a bounded retry.
static MERGE_QUEUE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
        self.update_ref(&reference, base, None, "grove: start run")
            .await?;
        Ok(base)
    }

    /// Merges `commit` onto `target_ref` through the merge queue, with `message`.
    pub async fn merge_onto(
        &self,
        target_ref: &str,
        commit: CommitId,
        message: &str,
    ) -> Result<MergeOutcome, GitError> {
        let _queue = MERGE_QUEUE.lock().await;
        let mut last_seen = None;
        for _ in 0..CAS_ATTEMPTS {
            let tip = self
                .ref_target(target_ref)?
                .ok_or_else(|| GitError::UnknownRevision {
                    rev: target_ref.to_owned(),
                })?;
            if self.is_ancestor(commit, tip)? {
                return Ok(MergeOutcome::AlreadyMerged);
            }
            let tree = match self.check_merge(tip, commit).await? {
                MergeCheck::Conflict { paths } => return Ok(MergeOutcome::Conflict { paths }),
                MergeCheck::Clean { tree } => tree,
            };
            let tree = git2::Oid::from_str(&tree).map_err(|_| GitError::Parse {
                op: "merge-tree".to_owned(),
                detail: format!("{tree:?} is not a tree id"),
            })?;
            match self.commit_onto(target_ref, tree, tip, &[commit], message)? {
                Some(merged) => return Ok(MergeOutcome::Merged { commit: merged }),
                // Another writer moved the ref meanwhile: recompute on its tip.
                None => last_seen = self.ref_target(target_ref)?,
            }
        }
        Err(GitError::RefContended {
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
    ) -> Result<Vec<(u32, MergeOutcome)>, GitError> {
        let mut outcomes = Vec::new();
        for &n in subtasks {
            let branch = super::subtask_ref(run, n);
            let commit = self
                .ref_target(&branch)?
                .ok_or(GitError::UnknownRevision { rev: branch })?;
            let message =
                format!("grove {run}: merge subtask {n}\n\nGrove-Run: {run}\nGrove-Subtask: {n}\n");
            let outcome = self.merge_onto(&run.result_ref(), commit, &message).await?;
            outcomes.push((n, outcome));
        }
        Ok(outcomes)
    }

    /// Computes the merge of `ours` and `theirs` without recording it anywhere.
    pub async fn check_merge(
        &self,
        ours: CommitId,
        theirs: CommitId,
    ) -> Result<MergeCheck, GitError> {
        let output = self
            .git()
            .args([
                "merge-tree",
                "--write-tree",
                "--name-only",
                "--no-messages",
                "-z",
                &ours.to_string(),
                &theirs.to_string(),
            ])
            .allow_codes(&[1])
            .run()
            .await?;
        let mut fields = output
            .stdout
            .split(|b| *b == 0)
            .map(|f| String::from_utf8_lossy(f).into_owned());
        let tree = fields
            .next()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| GitError::Parse {
                op: "merge-tree".to_owned(),
                detail: "no tree id in the output".to_owned(),
            })?;
        if output.code == 0 {
            return Ok(MergeCheck::Clean { tree });
        }
        let mut paths: Vec<String> = fields.filter(|p| !p.is_empty()).collect();
        paths.dedup();
        Ok(MergeCheck::Conflict { paths })
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
