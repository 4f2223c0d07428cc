//! A commit's tree read straight from git objects: what the lead reads instead of a
//! checkout of its own (the run's result as it is now, or the base).
//!
//! This module owns those reads. Each snapshot opens a libgit2 handle of its own (a
//! grep over thousands of blobs must not hold the shared one that merges need), walks
//! in git's order (sorted) and never touches a work tree. Paths are the repository's,
//! `/`-separated; a path that leaves the tree (`..`, absolute) is never resolved.

use std::ops::ControlFlow;
use std::path::Path;

use super::Repo;
use super::error::GitError;
use super::names::CommitId;

/// What a path of a snapshot is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotEntry {
    /// A file, with its whole content.
    File(Vec<u8>),
    /// A directory.
    Dir,
    /// A symlink, with where it points.
    Link(String),
    /// A submodule, at its commit.
    Submodule(String),
    /// Nothing is there.
    Missing,
}

/// One commit's tree, readable from any thread it is moved to.
pub struct TreeSnapshot {
    repo: git2::Repository,
    commit: CommitId,
    tree: git2::Oid,
}

impl std::fmt::Debug for TreeSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeSnapshot")
            .field("commit", &self.commit)
            .finish_non_exhaustive()
    }
}

impl Repo {
    /// A snapshot of `commit`'s tree, on a libgit2 handle of its own.
    pub fn snapshot(&self, commit: CommitId) -> Result<TreeSnapshot, GitError> {
        let read = |source| GitError::Read {
            what: format!("the tree of {commit}"),
            source,
        };
        let repo = git2::Repository::open(self.git_dir()).map_err(read)?;
        let tree = repo.find_commit(commit.oid()).map_err(read)?.tree_id();
        Ok(TreeSnapshot { repo, commit, tree })
    }
}

impl TreeSnapshot {
    /// The commit it shows.
    pub fn commit(&self) -> CommitId {
        self.commit
    }

    fn read_error(&self, what: &str) -> impl Fn(git2::Error) -> GitError + '_ {
        let what = format!("{what} at {}", self.commit);
        move |source| GitError::Read {
            what: what.clone(),
            source,
        }
    }

    /// What `path` (relative, `/`-separated; empty for the root) is.
    pub fn entry(&self, path: &str) -> Result<SnapshotEntry, GitError> {
        let error = self.read_error(path);
        let tree = self.repo.find_tree(self.tree).map_err(&error)?;
        if path.is_empty() {
            return Ok(SnapshotEntry::Dir);
        }
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) => entry,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(SnapshotEntry::Missing),
            Err(e) => return Err(error(e)),
        };
        match entry.kind() {
            Some(git2::ObjectType::Tree) => Ok(SnapshotEntry::Dir),
            Some(git2::ObjectType::Commit) => Ok(SnapshotEntry::Submodule(entry.id().to_string())),
            _ => {
                let blob = self.repo.find_blob(entry.id()).map_err(&error)?;
                if entry.filemode() == i32::from(git2::FileMode::Link) {
                    Ok(SnapshotEntry::Link(
                        String::from_utf8_lossy(blob.content()).into_owned(),
                    ))
                } else {
                    Ok(SnapshotEntry::File(blob.content().to_vec()))
                }
            }
        }
    }

    /// Visits every file and symlink under `dir` (empty for the root) in git's sorted
    /// order as `(path, is_link)`, until `visit` breaks.
    pub fn walk(
        &self,
        dir: &str,
        mut visit: impl FnMut(&str, bool) -> ControlFlow<()>,
    ) -> Result<(), GitError> {
        let error = self.read_error(dir);
        let root = self.repo.find_tree(self.tree).map_err(&error)?;
        let tree = if dir.is_empty() {
            root
        } else {
            let entry = root.get_path(Path::new(dir)).map_err(&error)?;
            self.repo.find_tree(entry.id()).map_err(&error)?
        };
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut stopped = false;
        tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
            if stopped {
                return git2::TreeWalkResult::Abort;
            }
            if entry.kind() == Some(git2::ObjectType::Tree) {
                return git2::TreeWalkResult::Ok;
            }
            let name = String::from_utf8_lossy(entry.name_bytes());
            let path = format!("{prefix}{parent}{name}");
            let link = entry.filemode() == i32::from(git2::FileMode::Link);
            if visit(&path, link).is_break() {
                stopped = true;
                return git2::TreeWalkResult::Abort;
            }
            git2::TreeWalkResult::Ok
        })
        .or_else(|e| if stopped { Ok(()) } else { Err(error(e)) })
    }

    /// The content of the file at `path`, `None` when it is not a file.
    pub fn file(&self, path: &str) -> Result<Option<Vec<u8>>, GitError> {
        match self.entry(path)? {
            SnapshotEntry::File(content) => Ok(Some(content)),
            _ => Ok(None),
        }
    }
}
