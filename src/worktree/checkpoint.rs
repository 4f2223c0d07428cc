//! Commits grove makes in a subtask's worktree: checkpoints and the final commit.
//!
//! This module owns the rule that the model never commits: grove stages everything
//! (respecting `.gitignore`, and never the worktree's local-only files such as a copied
//! `.env`), writes the tree, and moves the branch by compare-and-swap. It must never
//! commit from a worktree whose checkout has not finished, or the commit would record
//! every file not yet written as deleted.
//!
//! Staging stays with the git CLI (`git add --all`: it honours `.gitignore`, the user's
//! filters and the index format exactly as git does). Everything after it — the tree of
//! the index, the branch tip, the commit and the ref move — runs in process through
//! libgit2, because eight workers checkpointing at once spent their turn gap waiting on
//! five git processes each. Whatever libgit2 cannot do exactly as git would (an index
//! with a mandatory extension it does not read, a worktree whose `HEAD` is not its
//! branch, a ref moved meanwhile) falls back to the CLI path, which is kept whole.

use super::error::CheckpointError;
use super::handle::Worktree;
use super::local_files;
use crate::git::GitError;
use crate::git::Repo;
use crate::git::admin_head;
use crate::git::trailers::{CommitMessage, Trailer};
use crate::git::{CommitId, RunId};
use crate::tools::git_pointer::{is_git_dir_name, is_git_repository};

/// The entries of `git ls-files --stage -z` output (`mode hash stage\tpath\0`) of the
/// work tree at `root` that lead to or lie in git data (see [`Repo::git_dir_paths`]).
fn git_dir_entries(root: &std::path::Path, listing: &[u8]) -> Vec<String> {
    let in_git_data = |relative: &std::path::Path| {
        let mut prefix = std::path::PathBuf::new();
        relative.components().any(|component| {
            prefix.push(component);
            is_git_dir_name(component.as_os_str()) || is_git_repository(&root.join(&prefix))
        })
    };
    let mut flagged = Vec::new();
    for entry in listing.split(|byte| *byte == 0) {
        let Some((meta, path)) = std::str::from_utf8(entry)
            .ok()
            .and_then(|entry| entry.split_once('\t'))
        else {
            continue;
        };
        let mode = meta.split(' ').next().unwrap_or_default();
        let relative = std::path::Path::new(path);
        let bad = match mode {
            "160000" => true,
            "120000" => {
                let target = std::fs::read_link(root.join(relative)).unwrap_or_default();
                let parent = relative.parent().unwrap_or(std::path::Path::new(""));
                let resolved = root.join(parent).join(&target);
                target.components().any(|c| is_git_dir_name(c.as_os_str()))
                    || resolved
                        .canonicalize()
                        .is_ok_and(|real| is_git_repository(&real) || real.ends_with(".git"))
                    || in_git_data(relative)
            }
            _ => in_git_data(relative),
        };
        if bad {
            flagged.push(path.to_owned());
        }
    }
    flagged
}

/// What [`Repo::stage_all`] could not stage.
#[derive(Debug, Default)]
struct Staged {
    /// Paths git refuses to record; they live only in the worktree.
    refused: Vec<String>,
    /// Nested repositories git cannot add (no commit yet): git data, left out.
    repositories: Vec<String>,
}

/// The paths a failed `git add` names as ones it cannot record (`error: invalid path
/// 'P'`, `error: unable to add 'P' to index`), each once.
fn refused_paths(error: &GitError) -> Vec<String> {
    let GitError::Command { stderr, .. } = error else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for line in stderr.lines() {
        let quoted = line
            .strip_prefix("error: invalid path '")
            .and_then(|rest| rest.strip_suffix('\''))
            .or_else(|| {
                line.strip_prefix("error: unable to add '")
                    .and_then(|rest| rest.strip_suffix("' to index"))
            })
            .or_else(|| {
                // A nested repository without a commit yet.
                line.strip_prefix("error: '")
                    .and_then(|rest| rest.strip_suffix("' does not have a commit checked out"))
                    .map(|path| path.trim_end_matches('/'))
            });
        if let Some(path) = quoted
            && !paths.iter().any(|p| p == path)
        {
            paths.push(path.to_owned());
        }
    }
    paths
}

/// libgit2's flag for an entry added with `git add -N` (intent to add): git's
/// `write-tree` leaves such entries out, libgit2 would not, so an index holding one is
/// committed by the CLI.
const INTENT_TO_ADD: u16 = 1 << 13;

/// Which way a checkpoint's commit is written (see [`Repo::checkpoint_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPath {
    /// In process when libgit2 can do it exactly as git would, else the CLI; for a
    /// copy-on-write tree, from its upper directory (see [`Repo::checkpoint_upper`]).
    Fastest,
    /// Only git processes (`add`, `write-tree`, `rev-parse`, `commit-tree`,
    /// `update-ref`), for a copy-on-write tree too (run inside it).
    Cli,
}

/// The message of a checkpoint called `label` of subtask `n`'s tree, however it is
/// committed.
pub(super) fn checkpoint_message(run: &RunId, n: u32, label: &str) -> String {
    CommitMessage::new(&format!("grove {run}/{n}: {label}")).with_trailers(&[
        (Trailer::Run, run.to_string()),
        (Trailer::Subtask, n.to_string()),
    ])
}

/// What the in-process commit of an index did.
enum InProcess {
    /// Done: the new commit, or `None` when the tree equals the branch tip's.
    Done(Option<CommitId>),
    /// libgit2 cannot do this one exactly as git would; the CLI must.
    Unsupported,
}

impl Repo {
    /// Commits everything that changed in `worktree` since its last commit, with the
    /// message `grove <run>/<n>: <label>`; `None` when nothing changed (no empty commits).
    ///
    /// File bytes, modes, symlinks and line endings are stored as the work tree has
    /// them (the sealed runner disables repository-local clean filters). Waits for the
    /// worktree's fill first.
    pub async fn checkpoint(
        &self,
        worktree: &Worktree,
        label: &str,
    ) -> Result<Option<CommitId>, CheckpointError> {
        self.checkpoint_with(worktree, label, CommitPath::Fastest)
            .await
    }

    /// [`Repo::checkpoint`], with the commit written the way `path` says. Both ways give
    /// the same commit for the same work tree; [`CommitPath::Cli`] is the fallback of the
    /// other, public so that the two can be held to that.
    pub async fn checkpoint_with(
        &self,
        worktree: &Worktree,
        label: &str,
        path: CommitPath,
    ) -> Result<Option<CommitId>, CheckpointError> {
        worktree.ready().await?;
        if worktree.is_remote() {
            return self.checkpoint_remote(worktree, label).await;
        }
        // A copy-on-write tree's changes are its upper directory: no index refresh over
        // the whole tree, and no mount needed (the CLI path stays, inside the tree, to
        // hold the two to the same commit).
        if path == CommitPath::Fastest
            && let Some(source) = worktree.upper_source()
        {
            return self.checkpoint_upper(&source, label).await;
        }
        worktree.check_mounted()?;
        let in_worktree = || worktree.git(self.runner());
        // Local-only files (a copied `.env`) stay out even if something staged them.
        let local = local_files::recorded(worktree.admin_dir())?;
        let refused = self.stage_all(worktree, &local).await?.refused;
        if !local.is_empty() {
            in_worktree()
                .args(["update-index", "--force-remove", "--"])
                .args(&local)
                .run()
                .await?;
        }
        // A link into a git dir or a git repository must never reach the user's branch.
        let git_dirs = self.staged_git_dir_paths(worktree).await?;
        if !git_dirs.is_empty() {
            in_worktree()
                .args(["update-index", "--force-remove", "--"])
                .args(&git_dirs)
                .run()
                .await?;
        }
        let message = checkpoint_message(worktree.run(), worktree.subtask(), label);
        let commit = match path {
            CommitPath::Fastest => match self.commit_index_off_runtime(worktree, &message).await? {
                InProcess::Done(commit) => commit,
                InProcess::Unsupported => self.commit_index_with_cli(worktree, &message).await?,
            },
            CommitPath::Cli => self.commit_index_with_cli(worktree, &message).await?,
        };
        if refused.is_empty() {
            return Ok(commit);
        }
        Err(CheckpointError::PathsRefused {
            worktree: worktree.path().to_path_buf(),
            paths: refused,
        })
    }

    /// Stages everything in `worktree` but its `local` files, files outside a sparse
    /// checkout's cone included (`--sparse`: worktrees inherit the cone, and a worker's
    /// file outside it is still its work). Paths git refuses to record (`x/git~1/y`,
    /// `x/.GIT/y`) do not stop the others from being staged; they are returned.
    async fn stage_all(&self, worktree: &Worktree, local: &[String]) -> Result<Staged, GitError> {
        let add = |ignore_errors: bool| {
            worktree
                .git(self.runner())
                .args(["add", "--all", "--sparse"])
                .args(ignore_errors.then_some("--ignore-errors"))
                .args(["--", "."])
                .args(local_files::exclusions(local))
                .run()
        };
        let error = match add(false).await {
            Ok(_) => return Ok(Staged::default()),
            Err(error) => error,
        };
        if refused_paths(&error).is_empty() {
            return Err(error);
        }
        let refused = match add(true).await {
            Ok(_) => return Ok(Staged::default()),
            Err(retry) => refused_paths(&retry),
        };
        if refused.is_empty() {
            return Err(error);
        }
        // A nested repository is git data, left out like any other (and listed by
        // `git_dir_paths`); only what git refuses to record is lost unless kept.
        let (repositories, refused) = refused.into_iter().partition(|path| {
            let dir = worktree.files_root().join(path);
            is_git_repository(&dir) || std::fs::symlink_metadata(dir.join(".git")).is_ok()
        });
        Ok(Staged {
            refused,
            repositories,
        })
    }

    /// The paths in `worktree` that a checkpoint leaves out because they are, lead to or
    /// lie inside git data: a symlink whose target is or goes through a `.git` (any
    /// spelling) or a git repository, a nested repository (a gitlink), and every file
    /// inside a directory that is a git repository (a bare one a model made). Stages the
    /// worktree as a checkpoint would (grove owns that index); tell the reviewer about
    /// what it returns.
    pub async fn git_dir_paths(&self, worktree: &Worktree) -> Result<Vec<String>, CheckpointError> {
        worktree.ready().await?;
        worktree.check_mounted()?;
        if let Some(source) = worktree.upper_source() {
            return self.upper_git_dir_paths(&source).await;
        }
        let staged = self.stage_all(worktree, &[]).await?;
        let mut paths = self.staged_git_dir_paths(worktree).await?;
        paths.extend(staged.repositories);
        Ok(paths)
    }

    /// The staged paths of `worktree` that [`Repo::git_dir_paths`] describes.
    async fn staged_git_dir_paths(&self, worktree: &Worktree) -> Result<Vec<String>, GitError> {
        let listing = worktree
            .git(self.runner())
            .args(["ls-files", "--stage", "-z"])
            .run()
            .await?;
        Ok(git_dir_entries(&worktree.files_root(), &listing.stdout))
    }

    /// [`Repo::commit_index_in_process`] on the blocking pool: its file reads and
    /// writes (and its wait for the libgit2 handle, which eight workers share) must not
    /// hold up the runtime threads that carry every agent's model calls. A task that
    /// died leaves the commit to the CLI.
    async fn commit_index_off_runtime(
        &self,
        worktree: &Worktree,
        message: &str,
    ) -> Result<InProcess, GitError> {
        let (repo, worktree, message) = (self.clone(), worktree.clone(), message.to_owned());
        tokio::task::spawn_blocking(move || repo.commit_index_in_process(&worktree, &message))
            .await
            .unwrap_or(Ok(InProcess::Unsupported))
    }

    /// Writes the tree of `worktree`'s index, and unless it equals the branch tip's, a
    /// commit of it on the tip, moving the branch from the tip by compare-and-swap — all
    /// in process. [`InProcess::Unsupported`] whenever the result could differ from the
    /// CLI's, or the branch moved meanwhile: the caller then uses the CLI.
    fn commit_index_in_process(
        &self,
        worktree: &Worktree,
        message: &str,
    ) -> Result<InProcess, GitError> {
        let branch = worktree.branch_ref();
        // A worktree whose HEAD was detached or switched: the CLI moves whatever HEAD is.
        if admin_head(worktree.admin_dir()).as_deref() != Some(branch.as_str()) {
            return Ok(InProcess::Unsupported);
        }
        let index_path = worktree.admin_dir().join("index");
        // libgit2 opens a missing index as an empty one, which would commit every file
        // as deleted.
        if !index_path.is_file() {
            return Ok(InProcess::Unsupported);
        }
        let tree_and_tip = {
            let repo = self.libgit();
            index_tree_and_tip(&repo, &index_path, &branch)
        };
        let Some((tree, tip, tip_tree)) = tree_and_tip else {
            return Ok(InProcess::Unsupported);
        };
        if tree == tip_tree {
            return Ok(InProcess::Done(None));
        }
        match self.commit_onto(&branch, tree, tip, &[], message)? {
            Some(commit) => Ok(InProcess::Done(Some(commit))),
            None => Ok(InProcess::Unsupported),
        }
    }

    /// The CLI path of a checkpoint's commit, after staging: `write-tree`, `rev-parse`,
    /// `commit-tree`, and `update-ref` through the worktree's `HEAD`.
    async fn commit_index_with_cli(
        &self,
        worktree: &Worktree,
        message: &str,
    ) -> Result<Option<CommitId>, GitError> {
        let in_worktree = || worktree.git(self.runner());
        let tree = in_worktree().arg("write-tree").text().await?;
        let head_and_tree = in_worktree()
            .args(["rev-parse", "HEAD", "HEAD^{tree}"])
            .text()
            .await?;
        let mut lines = head_and_tree.lines();
        let (Some(head), Some(head_tree)) = (lines.next(), lines.next()) else {
            return Err(GitError::Parse {
                op: "rev-parse HEAD".to_owned(),
                detail: format!("expected a commit and a tree, got {head_and_tree:?}"),
            });
        };
        let head = Self::parse_commit("rev-parse HEAD", head)?;
        if tree == head_tree {
            return Ok(None);
        }
        let commit = in_worktree()
            .args(["commit-tree", &tree, "-p", &head.to_string(), "-F", "-"])
            .stdin(message.as_bytes().to_vec())
            .text()
            .await?;
        let commit = Self::parse_commit("commit-tree", &commit)?;
        // Through the worktree's HEAD, so the branch it has checked out moves with it.
        in_worktree()
            .args([
                "update-ref",
                "-m",
                "grove: checkpoint",
                "HEAD",
                &commit.to_string(),
                &head.to_string(),
            ])
            .run()
            .await?;
        Ok(Some(commit))
    }
}

/// The tree of the index at `index_path` (written to `repo`'s object database), the
/// commit `branch` points at and that commit's tree; `None` when libgit2 cannot read
/// the index or the branch, or the index holds anything git's `write-tree` would treat
/// otherwise (conflicts, intent-to-add entries).
fn index_tree_and_tip(
    repo: &git2::Repository,
    index_path: &std::path::Path,
    branch: &str,
) -> Option<(git2::Oid, CommitId, git2::Oid)> {
    let mut index = git2::Index::open(index_path).ok()?;
    if index.has_conflicts()
        || index
            .iter()
            .any(|entry| entry.flags_extended & INTENT_TO_ADD != 0)
    {
        return None;
    }
    let tip = repo.find_reference(branch).ok()?.peel_to_commit().ok()?;
    let tree = index.write_tree_to(repo).ok()?;
    Some((tree, CommitId::from_oid(tip.id()), tip.tree_id()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn links_into_git_data_nested_and_bare_repositories_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".git"), "gitdir: /repo/.git/worktrees/1\n").unwrap();
        std::os::unix::fs::symlink(".git", root.join("gp")).unwrap();
        std::os::unix::fs::symlink("/repo/.git/hooks", root.join("hooks")).unwrap();
        std::os::unix::fs::symlink("evilgd", root.join("gd")).unwrap();
        std::os::unix::fs::symlink("src/lib.rs", root.join("lib-link")).unwrap();
        for dir in ["evilgd/objects", "evilgd/refs", "src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("evilgd/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(root.join("evilgd/config"), "[core]\n").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        let hash = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";
        let listing: Vec<u8> = [
            ("120000", "gp"),
            ("120000", "hooks"),
            ("120000", "gd"),
            ("120000", "lib-link"),
            ("160000", "vendor/nested"),
            ("100644", "evilgd/HEAD"),
            ("100644", "evilgd/config"),
            ("100644", "src/lib.rs"),
        ]
        .iter()
        .flat_map(|(mode, path)| format!("{mode} {hash} 0\t{path}\0").into_bytes())
        .collect();
        assert_eq!(
            git_dir_entries(root, &listing),
            vec![
                "gp",
                "hooks",
                "gd",
                "vendor/nested",
                "evilgd/HEAD",
                "evilgd/config"
            ],
            "links into git data, a nested repository and a bare one are flagged; an \
             ordinary link and file are not"
        );
    }
}
