//! How big a commit's tree is: what an estimate of a run's cost reads.
//!
//! This file owns the one `ls-tree` that measures a tree. It must never read a blob.

use super::{CommitId, GitError, Repo};

/// The files of a tree and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeSize {
    pub files: u64,
    pub bytes: u64,
}

impl Repo {
    /// How many files `commit`'s tree holds and their bytes (submodules and links count
    /// as files of their own size).
    pub async fn tree_size(&self, commit: CommitId) -> Result<TreeSize, GitError> {
        let listing = self
            .git()
            .args(["ls-tree", "-r", "-l", "-z", &commit.to_string()])
            .run()
            .await?;
        let mut size = TreeSize::default();
        for entry in listing.stdout.split(|byte| *byte == 0) {
            // `<mode> <type> <object> <size>\t<path>`; a submodule's size is `-`.
            let Some(meta) = entry.split(|byte| *byte == b'\t').next() else {
                continue;
            };
            let meta = String::from_utf8_lossy(meta);
            let Some(bytes) = meta.split_whitespace().nth(3) else {
                continue;
            };
            size.files += 1;
            size.bytes = size.bytes.saturating_add(bytes.parse().unwrap_or(0));
        }
        Ok(size)
    }
}
