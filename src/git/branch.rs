//! Deleting a subtask branch, only when its work is kept elsewhere.
//!
//! This file owns the rule that a branch grove made is deleted only when every commit on
//! it is reachable from the run's result or from an archive ref: a branch that holds
//! work found nowhere else is never deleted.

use super::Repo;
use super::error::GitError;
use super::names::{RunId, subtask_ref};

impl Repo {
    /// Deletes branch `grove/<run>/<n>` if its tip is contained in the run's result
    /// branch or in one of the run's archive refs; refuses otherwise. A missing branch
    /// is not an error. The deletion is compare-and-swap on the tip that was checked.
    pub async fn delete_subtask_branch(&self, run: &RunId, subtask: u32) -> Result<(), GitError> {
        let branch = subtask_ref(run, subtask);
        let Some(tip) = self.ref_target(&branch)? else {
            return Ok(());
        };
        let mut keepers = Vec::new();
        if let Some(result) = self.ref_target(&run.result_ref())? {
            keepers.push(result);
        }
        keepers.extend(
            self.refs_under(&run.archive_prefix())?
                .into_iter()
                .map(|(_, commit)| commit),
        );
        let mut kept = false;
        for keeper in keepers {
            if self.is_ancestor(tip, keeper)? {
                kept = true;
                break;
            }
        }
        if !kept {
            return Err(GitError::WorkNotKept {
                branch,
                tip: tip.to_string(),
            });
        }
        self.git()
            .args(["update-ref", "-d", &branch, &tip.to_string()])
            .run()
            .await
            .map(drop)
    }
}
