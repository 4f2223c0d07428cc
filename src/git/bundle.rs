//! Git objects sent to another machine and taken from one, as bundles: a worker's base
//! to a remote host's mirror, its checkpoints back.
//!
//! This file owns that a bundle carries only what the other side lacks: the commits it
//! says it holds are left out, those this repository does not know are never named.

use super::Repo;
use super::error::GitError;
use super::names::CommitId;

impl Repo {
    /// True when this repository holds commit `id`.
    pub fn holds_commit(&self, id: CommitId) -> bool {
        self.libgit().find_commit(id.oid()).is_ok()
    }

    /// A bundle of `tip` and what it needs beyond the commits in `have` (those this
    /// repository does not hold are ignored: the bundle is then larger, never wrong).
    pub async fn bundle(&self, tip: CommitId, have: &[CommitId]) -> Result<Vec<u8>, GitError> {
        // A bundle names refs, not commits: a ref of its own for the tip, removed after.
        let name = format!("refs/grove/bundle/{tip}-{:08x}", fastrand::u32(..));
        self.git()
            .args(["update-ref", &name, &tip.to_string()])
            .run()
            .await?;
        let excluded = have
            .iter()
            .filter(|commit| **commit != tip && self.holds_commit(**commit))
            .map(|commit| format!("^{commit}"));
        let bundle = self
            .git()
            .args(["bundle", "create", "--quiet", "-", &name])
            .args(excluded)
            .run()
            .await;
        self.git().args(["update-ref", "-d", &name]).run().await?;
        Ok(bundle?.stdout)
    }

    /// Adds the objects of `bundle` to this repository (no ref moves).
    pub async fn unbundle(&self, bundle: Vec<u8>) -> Result<(), GitError> {
        self.git()
            .args(["bundle", "unbundle", "-"])
            .stdin(bundle)
            .run()
            .await?;
        Ok(())
    }
}
