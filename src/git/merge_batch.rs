//! Several approved branches merged onto a result in one go: a merge commit each, one
//! after another in process, and the ref moved once.
//!
//! When the last reviews of a run end together, every subtask waits for the one before
//! it to merge, and each merge locked and renamed the ref and handed the turn on: 32 of
//! them one after another while the lead waited. Here the merge leading a batch does the
//! others' too. (Its objects stay loose: packing them made libgit2 delta-compress every
//! version of a 30,000-entry tree against the others, seconds of CPU per batch.)
//!
//! This file must never merge anything the in-process merge is not certain of (such a
//! branch ends the batch; it merges on its own with `git merge-tree`), and never leave
//! the ref half moved: one compare-and-swap from the tip the batch started on.

use super::Repo;
use super::commit::{move_ref, write_commit};
use super::error::GitError;
use super::lineage::MergeBase;
use super::merge::{MERGE_QUEUE, MergeOutcome, certain_tree, find_base};
use super::names::CommitId;

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
        let mut lineage = self
            .lineages()
            .get(target_ref)
            .filter(|lineage| lineage.tip() == start.oid())
            .cloned();
        // A handle of its own: the shared one, held for the whole batch, kept every other
        // subtask's git work (and the runtime threads it ran on) waiting.
        let repo = git2::Repository::open(self.git_dir()).map_err(write_error)?;
        let mut tip = start;
        let mut outcomes = Vec::new();
        for item in items {
            let (base, fork) =
                find_base(&repo, lineage.as_ref(), tip, item.commit).map_err(write_error)?;
            if base == MergeBase::Branch {
                outcomes.push(MergeOutcome::AlreadyMerged);
                continue;
            }
            let Some(tree) = certain_tree(&repo, base, tip, item.commit).map_err(write_error)?
            else {
                break;
            };
            let parents = [tip, item.commit];
            let commit = write_commit(&repo, (&author, &committer), &item.message, tree, &parents)
                .map_err(write_error)?;
            lineage = match (lineage, fork) {
                (Some(mut lineage), Some(fork)) => {
                    lineage.merged(commit.oid(), fork);
                    Some(lineage)
                }
                _ => None,
            };
            tip = commit;
            outcomes.push(MergeOutcome::Merged { commit: tip });
        }
        if tip == start {
            return Ok(outcomes);
        }
        let merged = outcomes
            .iter()
            .filter(|outcome| matches!(outcome, MergeOutcome::Merged { .. }))
            .count();
        let reflog = format!("grove: {merged} merges");
        if !move_ref(&repo, target_ref, tip, start, &reflog)? {
            return Ok(Vec::new());
        }
        let mut lineages = self.lineages();
        match lineage {
            Some(lineage) => lineages.insert(target_ref.to_owned(), lineage),
            None => lineages.remove(target_ref),
        };
        Ok(outcomes)
    }
}
