//! Several approved branches merged onto a result in one go: their merge commits made
//! in memory and written as one pack, and the ref moved once.
//!
//! When the last reviews of a run end together, every subtask waits for the one before
//! it to merge, and each merge wrote three loose objects (two trees and the commit) and
//! locked and renamed the ref: about 2 ms of file creation apiece, 32 of them one after
//! another while the lead waited. Here the merge leading a batch does the others' too.
//!
//! This file must never move the ref to a commit whose objects are not on disk (the
//! pack is written first), never merge anything the in-process merge is not certain of
//! (such a branch ends the batch; it merges on its own with `git merge-tree`), and never
//! leave the ref half moved: one compare-and-swap from the tip the batch started on.

use std::io::Write as _;

use super::Repo;
use super::error::GitError;
use super::lineage::MergeBase;
use super::merge::{MERGE_QUEUE, MergeOutcome, disjoint_tree, find_base};
use super::names::CommitId;

/// Above every backend libgit2 opens (loose objects 1, packs 2): new objects go here.
const IN_MEMORY: i32 = 1000;

/// One branch of a batch: its tip, and the message of its merge commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    pub commit: CommitId,
    pub message: String,
}

impl Repo {
    /// Merges `items` onto `target_ref` in their order, through the merge queue, and
    /// returns the outcome of the first ones: a branch whose merge takes `git
    /// merge-tree` (or may conflict) ends the batch, and it and the ones after it get no
    /// outcome; the caller merges them one by one. Nothing is merged (an empty list)
    /// when another writer moved the ref meanwhile.
    pub async fn merge_batch_onto(
        &self,
        target_ref: &str,
        items: &[BatchItem],
    ) -> Result<Vec<MergeOutcome>, GitError> {
        let _queue = MERGE_QUEUE.lock().await;
        let start = self
            .ref_target(target_ref)?
            .ok_or_else(|| GitError::UnknownRevision {
                rev: target_ref.to_owned(),
            })?;
        let (author, committer) = (self.signature("AUTHOR")?, self.signature("COMMITTER")?);
        let write_error = |source| GitError::write(format!("merges onto {target_ref}"), source);
        // A handle of its own: the in-memory backend cannot be taken off again, and every
        // object written through this handle goes to it.
        let repo = git2::Repository::open(self.git_dir()).map_err(write_error)?;
        let odb = repo.odb().map_err(write_error)?;
        let memory = odb
            .add_new_mempack_backend(IN_MEMORY)
            .map_err(write_error)?;
        let mut lineage = self
            .lineages()
            .get(target_ref)
            .filter(|lineage| lineage.tip() == start.oid())
            .cloned();
        let mut tip = start;
        let mut outcomes = Vec::new();
        for item in items {
            let (base, fork) =
                find_base(&repo, lineage.as_ref(), tip, item.commit).map_err(write_error)?;
            let tree = match base {
                MergeBase::Branch => {
                    outcomes.push(MergeOutcome::AlreadyMerged);
                    continue;
                }
                MergeBase::Target => repo
                    .find_commit(item.commit.oid())
                    .map(|commit| commit.tree_id())
                    .map_err(write_error)?,
                MergeBase::One(base) => {
                    match disjoint_tree(&repo, base, tip, item.commit).map_err(write_error)? {
                        Some(tree) => tree,
                        None => break,
                    }
                }
                MergeBase::Other => break,
            };
            let commit = (|| {
                let tree = repo.find_tree(tree)?;
                let parents = [
                    repo.find_commit(tip.oid())?,
                    repo.find_commit(item.commit.oid())?,
                ];
                repo.commit(
                    None,
                    &author,
                    &committer,
                    &item.message,
                    &tree,
                    &[&parents[0], &parents[1]],
                )
            })()
            .map_err(write_error)?;
            lineage = match (lineage, fork) {
                (Some(mut lineage), Some(fork)) => {
                    lineage.merged(commit, fork);
                    Some(lineage)
                }
                _ => None,
            };
            tip = CommitId::from_oid(commit);
            outcomes.push(MergeOutcome::Merged { commit: tip });
        }
        if tip == start {
            return Ok(outcomes);
        }
        let mut pack = git2::Buf::new();
        memory.dump(&repo, &mut pack).map_err(write_error)?;
        let mut writer = odb.packwriter().map_err(write_error)?;
        writer.write_all(&pack).map_err(|source| GitError::Io {
            action: "write a pack of merges into",
            path: self.common_dir().join("objects/pack"),
            source,
        })?;
        writer.commit().map_err(write_error)?;
        let merged = outcomes
            .iter()
            .filter(|outcome| matches!(outcome, MergeOutcome::Merged { .. }))
            .count();
        let reflog = format!("grove: {merged} merges");
        match repo.reference_matching(target_ref, tip.oid(), true, start.oid(), &reflog) {
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.code(),
                    git2::ErrorCode::Modified | git2::ErrorCode::Locked
                ) =>
            {
                return Ok(Vec::new());
            }
            Err(source) => return Err(GitError::write(target_ref.to_owned(), source)),
        }
        let mut lineages = self.lineages();
        match lineage {
            Some(lineage) => lineages.insert(target_ref.to_owned(), lineage),
            None => lineages.remove(target_ref),
        };
        Ok(outcomes)
    }
}
