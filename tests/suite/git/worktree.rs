//! Worktree creation: branch at base, outside the work tree, usable before the fill
//! completes, and recovery from leftovers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use grove::git::{GitError, GitOptions, Repo, WorktreeSpec, subtask_ref};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::GitFixture;

/// A git wrapper that runs `git` but, for `reset` (the fill), first runs `fill_step`.
fn git_wrapper(dir: &Path, fill_step: &str) -> PathBuf {
    let script = dir.join("git-wrapper.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = reset ]; then\n    {fill_step}\n  fi\ndone\nexec git \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn spec(repo: &Repo, fixture: &GitFixture, n: u32) -> WorktreeSpec {
    WorktreeSpec {
        run: run_id(),
        subtask: n,
        base: fixture.rev("HEAD"),
        path: repo.default_worktrees_dir(&run_id()).join(n.to_string()),
    }
}

#[tokio::test]
async fn a_worktree_is_usable_before_its_fill_completes_and_fills_in_the_background() {
    let fixture = project();
    let gate = fixture.dir.path().join("gate");
    let wrapper = git_wrapper(
        fixture.dir.path(),
        &format!("while [ ! -e {} ]; do sleep 0.01; done", gate.display()),
    );
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: wrapper,
            ..fixture.options()
        },
    )
    .await
    .unwrap();
    let base = fixture.rev("HEAD");

    let worktree = repo
        .create_worktree(spec(&repo, &fixture, 1))
        .await
        .unwrap();

    assert!(
        !worktree.is_filled(),
        "the handle comes back while the fill is held"
    );
    assert!(
        !worktree.path().join("README").exists(),
        "files arrive only with the fill"
    );
    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(base),
        "branch grove/<run>/1 starts at the base"
    );
    assert!(
        !worktree.path().starts_with(&fixture.repo)
            || worktree.path().starts_with(fixture.repo.join(".git")),
        "the worktree is outside the user's work tree: {}",
        worktree.path().display()
    );

    std::fs::write(&gate, b"").unwrap();
    worktree.ready().await.unwrap();

    assert!(worktree.is_filled());
    for file in ["README", "src/lib.rs", "src/util.rs"] {
        assert_eq!(
            std::fs::read(worktree.path().join(file)).unwrap(),
            fixture.read(file),
            "{file} is checked out byte for byte"
        );
    }
    assert_eq!(
        fixture.git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "the user's git status never sees grove's worktrees"
    );
}

#[tokio::test]
async fn a_failed_fill_is_reported_and_blocks_commits() {
    let fixture = project();
    let wrapper = git_wrapper(
        fixture.dir.path(),
        "echo 'fatal: simulated checkout failure' >&2; exit 128",
    );
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: wrapper,
            ..fixture.options()
        },
    )
    .await
    .unwrap();

    let worktree = repo
        .create_worktree(spec(&repo, &fixture, 1))
        .await
        .unwrap();

    let error = worktree.ready().await.unwrap_err();
    assert!(
        matches!(&error, GitError::FillFailed { reason, .. } if reason.to_string().contains("simulated checkout failure")),
        "the fill error carries git's stderr: {error}"
    );
    assert!(
        matches!(
            repo.checkpoint(&worktree, "x").await,
            Err(GitError::FillFailed { .. })
        ),
        "a half-filled tree is never committed (it would record deletions)"
    );
}

#[tokio::test]
async fn eight_worktrees_created_concurrently_all_succeed() {
    let fixture = project();
    let repo = fixture.open().await;
    let creations = (1..=8).map(|n| {
        let (repo, spec) = (repo.clone(), spec(&repo, &fixture, n));
        async move {
            let worktree = repo.create_worktree(spec).await?;
            worktree.ready().await.map(|()| worktree)
        }
    });
    let worktrees = futures_util::future::join_all(creations).await;
    let mut expected = Vec::new();
    for (n, worktree) in (1..=8).zip(worktrees) {
        let worktree = worktree.unwrap_or_else(|e| panic!("worktree {n} failed: {e}"));
        assert_eq!(
            std::fs::read(worktree.path().join("README")).unwrap(),
            b"hello\n"
        );
        expected.push((
            std::fs::canonicalize(worktree.path()).unwrap(),
            format!("refs/heads/grove/r1/{n}"),
        ));
    }
    // What git registered: each worktree its own directory on its own branch.
    let listing = fixture.git(&["worktree", "list", "--porcelain"]);
    let mut registered: Vec<(std::path::PathBuf, String)> = listing
        .split("\n\n")
        .filter_map(|entry| {
            let path = entry.lines().find_map(|l| l.strip_prefix("worktree "))?;
            let branch = entry.lines().find_map(|l| l.strip_prefix("branch "))?;
            Some((std::fs::canonicalize(path).unwrap(), branch.to_owned()))
        })
        .filter(|(_, branch)| branch.starts_with("refs/heads/grove/"))
        .collect();
    registered.sort();
    expected.sort();
    assert_eq!(
        registered, expected,
        "eight distinct worktrees, each on its own subtask branch:\n{listing}"
    );
}

#[tokio::test]
async fn an_existing_branch_is_reused_with_its_work_and_a_diverged_one_is_refused() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let earlier_work = commit_in(&repo, &worktree, &[("notes.txt", "kept\n")]).await;
    repo.remove_worktree(&worktree).await.unwrap();

    let again = filled_worktree(&repo, base, 1).await;
    assert_eq!(
        again.start(),
        earlier_work,
        "the earlier attempt's commit is kept"
    );
    assert_eq!(
        std::fs::read(again.path().join("notes.txt")).unwrap(),
        b"kept\n"
    );

    fixture.commit_on_branch("grove/r1/2", "HEAD", &[("x", Some("x"))]);
    let unrelated = fixture.commit_on_branch("elsewhere", "HEAD", &[("y", Some("y"))]);
    fixture.git(&["branch", "--force", "grove/r1/2", &unrelated.to_string()]);
    fixture.commit_all("user moves on");
    let moved_base = fixture.rev("HEAD");
    let result = repo
        .create_worktree(WorktreeSpec {
            base: moved_base,
            ..spec(&repo, &fixture, 2)
        })
        .await;
    assert!(
        matches!(result, Err(GitError::BranchDiverged { .. })),
        "a branch without the base is not silently reused: {result:?}"
    );
}

#[tokio::test]
async fn a_hand_deleted_worktree_is_recreated_even_when_locked() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let first = filled_worktree(&repo, base, 1).await;
    std::fs::remove_dir_all(first.path()).unwrap();
    let second = filled_worktree(&repo, base, 2).await;
    fixture.git(&["worktree", "lock", second.path().to_str().unwrap()]);
    std::fs::remove_dir_all(second.path()).unwrap();

    let first_again = filled_worktree(&repo, base, 1).await;
    let second_again = filled_worktree(&repo, base, 2).await;

    for worktree in [first_again, second_again] {
        assert_eq!(
            std::fs::read(worktree.path().join("src/util.rs")).unwrap(),
            fixture.read("src/util.rs"),
            "worktree {} is back and filled",
            worktree.subtask()
        );
    }
}

#[tokio::test]
async fn an_existing_worktree_is_reused_without_losing_uncommitted_work() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    std::fs::write(worktree.path().join("wip.txt"), "uncommitted\n").unwrap();

    let again = filled_worktree(&repo, base, 1).await;

    assert_eq!(again.path(), worktree.path());
    assert_eq!(
        std::fs::read(again.path().join("wip.txt")).unwrap(),
        b"uncommitted\n"
    );
}

#[tokio::test]
async fn a_path_grove_does_not_own_is_never_written_into() {
    let fixture = project();
    let repo = fixture.open().await;
    let spec = spec(&repo, &fixture, 1);
    std::fs::create_dir_all(&spec.path).unwrap();
    std::fs::write(spec.path.join("precious"), "mine").unwrap();

    let result = repo.create_worktree(spec.clone()).await;

    assert!(
        matches!(result, Err(GitError::WorktreePathOccupied { .. })),
        "{result:?}"
    );
    assert_eq!(std::fs::read(spec.path.join("precious")).unwrap(), b"mine");
}

#[tokio::test]
async fn opening_a_directory_outside_any_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let result = Repo::open(dir.path(), GitOptions::default()).await;
    assert!(
        matches!(result, Err(GitError::NotARepository { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_branch_live_in_another_worktree_is_never_checked_out_twice() {
    let fixture = project();
    let repo = fixture.open().await;
    let first = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;

    let result = repo
        .create_worktree(WorktreeSpec {
            path: fixture.dir.path().join("elsewhere"),
            ..spec(&repo, &fixture, 1)
        })
        .await;

    assert!(
        matches!(&result, Err(GitError::BranchCheckedOutElsewhere { path, .. }) if path == first.path()),
        "{result:?}"
    );
}
