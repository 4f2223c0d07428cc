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
        Err(source) => Err(ref_update_error(repo, target_ref, source)),
    }
}

/// The error of an in-process update of `target_ref` to a commit just written that
/// libgit2 refused (contention aside): a full disk when its target was lost on a nearly
/// full disk (see [`lost_on_a_full_disk`]), else the write error it is.
pub(crate) fn ref_update_error(
    repo: &git2::Repository,
    target_ref: &str,
    source: git2::Error,
) -> GitError {
    if lost_on_a_full_disk(&source, available_bytes(repo.path())) {
        return GitError::Io {
            action: "write",
            path: repo.path().join("objects"),
            source: std::io::Error::from_raw_os_error(nix::errno::Errno::ENOSPC as i32),
        };
    }
    GitError::write(target_ref.to_owned(), source)
}

/// Below this many free bytes a lost object is put down to the disk.
const NEARLY_FULL: u64 = 1 << 20;

/// True when libgit2 refused a ref update because its new target is not in the object
/// store — an object libgit2 had just reported written — while the disk is (nearly)
/// full. Measured: about one full-disk run in sixty lost the commit so, with 0 bytes
/// free and no error from the write, and the run failed the subtask where it must
/// pause. On a disk with room it stays the write error it is.
fn lost_on_a_full_disk(error: &git2::Error, available: Option<u64>) -> bool {
    error.class() == git2::ErrorClass::Reference
        && error.message().contains("doesn't exist on the repository")
        && available.is_some_and(|free| free < NEARLY_FULL)
}

/// The bytes an unprivileged writer may still use on the file system of `path`.
fn available_bytes(path: &std::path::Path) -> Option<u64> {
    let stats = nix::sys::statvfs::statvfs(path).ok()?;
    // Both are narrower than u64 on some systems (macOS).
    #[allow(clippy::useless_conversion)]
    Some(u64::from(stats.blocks_available()).saturating_mul(u64::from(stats.fragment_size())))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_ref_update_to_a_lost_object_is_a_full_disk_only_when_the_disk_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let lost = git2::Oid::from_str("86aefbd73168fe9e206dfe4fcd4ad23de522de93").unwrap();
        let Err(error) = repo.reference("refs/heads/lost", lost, false, "test") else {
            panic!("a ref to a missing object is refused");
        };
        assert_eq!(
            (
                lost_on_a_full_disk(&error, Some(0)),
                lost_on_a_full_disk(&error, Some(NEARLY_FULL - 1)),
                lost_on_a_full_disk(&error, Some(NEARLY_FULL)),
                lost_on_a_full_disk(&error, None),
            ),
            (true, true, false, false),
            "a lost target is the disk's doing only when the disk is nearly full"
        );
        let other = git2::Error::from_str("some other failure");
        assert!(
            !lost_on_a_full_disk(&other, Some(0)),
            "another failure on a full disk is not read as a lost object"
        );
    }
}
