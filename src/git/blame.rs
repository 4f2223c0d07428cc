//! Who last changed a line along a first-parent history: on a run's result, the merge
//! commit of the subtask that brought the line.
//!
//! This module owns those reads of git objects (libgit2's blame with `first_parent`,
//! which never runs a textconv). It knows nothing of subtasks: the caller maps a merge
//! commit to one by its trailers.

use std::path::Path;

use super::Repo;
use super::error::GitError;
use super::names::CommitId;

impl Repo {
    /// True when `path` (repository-relative) is a file of `commit`'s tree.
    pub fn has_file(&self, commit: CommitId, path: &str) -> Result<bool, GitError> {
        self.read(path, |repo| {
            let tree = repo.find_commit(commit.oid())?.tree()?;
            match tree.get_path(Path::new(path)) {
                Ok(entry) => Ok(entry.kind() == Some(git2::ObjectType::Blob)),
                Err(error) if error.code() == git2::ErrorCode::NotFound => Ok(false),
                Err(error) => Err(error),
            }
        })
    }

    /// The id of `commit`'s tree, in hex.
    pub fn tree_id(&self, commit: CommitId) -> Result<String, GitError> {
        self.tree_of(commit).map(|tree| tree.to_string())
    }

    /// The full message of `commit`.
    pub fn commit_message(&self, commit: CommitId) -> Result<String, GitError> {
        self.read("a commit's message", |repo| {
            let commit = repo.find_commit(commit.oid())?;
            Ok(String::from_utf8_lossy(commit.message_bytes()).into_owned())
        })
    }

    /// The commit on `tip`'s first-parent chain after `base` that last changed line
    /// `line` (1-based) of `path`; `None` when the line is as `base` has it, or past the
    /// file's end.
    pub fn last_changed_line(
        &self,
        tip: CommitId,
        base: CommitId,
        path: &str,
        line: usize,
    ) -> Result<Option<CommitId>, GitError> {
        self.read(path, |repo| {
            let mut options = git2::BlameOptions::new();
            options
                .first_parent(true)
                .newest_commit(tip.oid())
                .oldest_commit(base.oid());
            let blame = repo.blame_file(Path::new(path), Some(&mut options))?;
            let Some(hunk) = blame.get_line(line) else {
                return Ok(None);
            };
            let commit = hunk.final_commit_id();
            Ok((commit != base.oid() && !hunk.is_boundary()).then(|| CommitId::from_oid(commit)))
        })
    }
}
