//! The git layer on real repositories built in temp dirs with a sealed environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apply;
mod archive;
mod base_update;
mod commit;
mod detached;
mod diff;
mod lifecycle;
mod merge;
mod overlay;
mod sealed;
mod spare;
mod squash;
mod worktree;

use grove::git::{CommitId, Repo, RunId};

use grove::worktree::{Worktree, WorktreeSpec};

use crate::support::git_fixture::GitFixture;

pub fn run_id() -> RunId {
    RunId::new("r1").unwrap()
}

/// Creates subtask `n`'s worktree at the default place and waits until it is filled.
pub async fn filled_worktree(repo: &Repo, base: CommitId, n: u32) -> Worktree {
    let worktree = repo
        .create_worktree(WorktreeSpec {
            run: run_id(),
            subtask: n,
            base,
            path: repo.default_worktrees_dir(&run_id()).join(n.to_string()),
        })
        .await
        .unwrap();
    worktree.ready().await.unwrap();
    worktree
}

/// Writes files in a worktree and checkpoints them; returns the new commit.
pub async fn commit_in(repo: &Repo, worktree: &Worktree, files: &[(&str, &str)]) -> CommitId {
    for (path, content) in files {
        crate::support::git_fixture::write_file(worktree.path(), path, content);
    }
    worktree
        .checkpoint(repo, "test change")
        .await
        .unwrap()
        .unwrap()
}

/// A fixture with a small project: `README`, `src/lib.rs`, `src/util.rs`.
pub fn project() -> GitFixture {
    GitFixture::with_files(&[
        ("README", "hello\n"),
        (
            "src/lib.rs",
            "pub mod util;\n\npub fn answer() -> u32 {\n    42\n}\n",
        ),
        (
            "src/util.rs",
            "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n",
        ),
    ])
}
