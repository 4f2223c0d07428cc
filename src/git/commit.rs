//! Commits written in process: a commit of a tree onto a ref's tip and the
//! compare-and-swap move of that ref, shared by checkpoints, merges and applies.

use super::Repo;
use super::error::GitError;
use super::names::CommitId;

impl Repo {
    /// Writes a commit of `tree` whose parents are `tip` then `others`, then moves
    /// `target_ref` from `tip` to it — in process, where git processes would sit on the
    /// paths the agents wait on. The author and committer are those a git command of
    /// this repository would write. `None` when the ref no longer points at `tip` or
    /// another writer holds its lock (the commit is then left unreferenced, for git's gc).
    pub(crate) fn commit_onto(
        &self,
        target_ref: &str,
        tree: git2::Oid,
        tip: CommitId,
        others: &[CommitId],
        message: &str,
    ) -> Result<Option<CommitId>, GitError> {
        let author = self.signature("AUTHOR")?;
        let committer = self.signature("COMMITTER")?;
        let write_error = |source| GitError::write(format!("commit onto {target_ref}"), source);
        let repo = self.libgit();
        let parents: Vec<CommitId> = std::iter::once(tip).chain(others.iter().copied()).collect();
        let commit = write_commit(&repo, (&author, &committer), message, tree, &parents)
            .map_err(write_error)?;
        let reflog = message.lines().next().unwrap_or("grove: commit");
        Ok(move_ref(&repo, target_ref, commit, tip, reflog)?.then_some(commit))
    }
}

/// Writes a commit of `tree` with `parents` (in order) and `message`, by `signatures`
/// (author, committer), referenced by nothing yet.
pub(crate) fn write_commit(
    repo: &git2::Repository,
    (author, committer): (&git2::Signature<'_>, &git2::Signature<'_>),
    message: &str,
    tree: git2::Oid,
    parents: &[CommitId],
) -> Result<CommitId, git2::Error> {
    let tree = repo.find_tree(tree)?;
    let parents = parents
        .iter()
        .map(|parent| repo.find_commit(parent.oid()))
        .collect::<Result<Vec<_>, _>>()?;
    let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
    repo.commit(None, author, committer, message, &tree, &parents)
        .map(CommitId::from_oid)
}

/// Moves `target_ref` from `expected` to `new` (compare-and-swap), with `reflog`; false
/// when the ref no longer points at `expected` or another writer holds its lock (`new`
/// is then left unreferenced, for git's gc).
pub(crate) fn move_ref(
    repo: &git2::Repository,
    target_ref: &str,
    new: CommitId,
    expected: CommitId,
    reflog: &str,
) -> Result<bool, GitError> {
    match repo.reference_matching(target_ref, new.oid(), true, expected.oid(), reflog) {
        Ok(_) => Ok(true),
        Err(error)
            if matches!(
                error.code(),
                git2::ErrorCode::Modified | git2::ErrorCode::Locked
            ) =>
        {
            Ok(false)
        }
        Err(source) => Err(GitError::write(target_ref.to_owned(), source)),
    }
}
