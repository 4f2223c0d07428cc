//! The lower directory of copy-on-write worktrees: the base commit's files, checked out
//! once per base commit and shared by every worker of every run from that commit.
//!
//! This module owns `<worktrees home>/base/<commit>/{tree,index}`: made in a scratch
//! directory and renamed into place, so a base that exists is complete, and never
//! written again (the overlays above it keep every worker's changes apart). It must never
//! be handed to a command as writable. A stand-in until `base_tree` (issue 15's git side)
//! adds the setup step run once per base.

use std::path::{Path, PathBuf};

use super::Repo;
use super::error::GitError;
use super::names::CommitId;

/// Serialises the making of base trees within this process.
static MAKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The files of one base commit, and the index that describes them as checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseTree {
    /// The base commit's files (the overlays' lower directory).
    pub tree: PathBuf,
    /// An index of `tree` with its files' stat data, so that git in a worker's tree
    /// reads unchanged files as unchanged without hashing them.
    pub index: PathBuf,
}

impl Repo {
    /// The base tree of `commit`, checked out now unless an earlier run made it.
    pub async fn base_tree(&self, commit: CommitId) -> Result<BaseTree, GitError> {
        let home = self.worktrees_home().join("base");
        let dir = home.join(commit.to_string());
        let base = BaseTree {
            tree: dir.join("tree"),
            index: dir.join("index"),
        };
        let _making = MAKING.lock().await;
        if base.index.is_file() && base.tree.is_dir() {
            return Ok(base);
        }
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io {
                action,
                path,
                source,
            }
        };
        std::fs::create_dir_all(&home).map_err(io("create", &home))?;
        let scratch = tempfile::Builder::new()
            .prefix(&format!(".{commit}-"))
            .tempdir_in(&home)
            .map_err(io("create a directory in", &home))?;
        let (tree, index) = (scratch.path().join("tree"), scratch.path().join("index"));
        std::fs::create_dir_all(&tree).map_err(io("create", &tree))?;
        // One pass, as `git worktree add` checks out: the files and their stat data.
        self.inner
            .runner
            .call(self.common_dir(), &tree)
            .work_tree(&tree)
            .index_file(&index)
            .args(["read-tree", "-u", "--reset", &commit.to_string()])
            .run()
            .await?;
        let made = scratch.keep();
        std::fs::rename(&made, &dir).map_err(io("move into place", &dir))?;
        Ok(base)
    }
}
