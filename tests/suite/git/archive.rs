//! Nothing is deleted by surprise: archives, `clean`, and `gc` as the only deleter.

use std::time::Duration;

use grove::git::{ArchivedWork, subtask_ref};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};

#[tokio::test]
async fn archiving_commits_uncommitted_work_first() {
    let fixture = project();
    let repo = fixture.open().await;
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    std::fs::write(worktree.path().join("README"), "half-done edit\n").unwrap();
    std::fs::write(worktree.path().join("draft.txt"), "untracked draft\n").unwrap();

    let archived = worktree
        .archive(&repo, "rejected by reviewer")
        .await
        .unwrap();

    let tip = repo
        .ref_target(&subtask_ref(&run_id(), 1))
        .unwrap()
        .unwrap();
    assert_eq!(
        archived,
        ArchivedWork {
            subtask: 1,
            reference: "refs/grove/archive/r1/1".to_owned(),
            commit: tip
        }
    );
    assert_eq!(
        fixture.git(&["show", "refs/grove/archive/r1/1:draft.txt"]),
        "untracked draft"
    );
    assert_eq!(
        fixture.git(&["show", "refs/grove/archive/r1/1:README"]),
        "half-done edit"
    );
    assert_eq!(
        fixture.git(&["log", "-1", "--format=%s", "refs/grove/archive/r1/1"]),
        "grove r1/1: archived: rejected by reviewer"
    );
}

#[tokio::test]
async fn clean_archives_every_subtask_then_removes_worktrees_and_branches() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let dirty = filled_worktree(&repo, base, 1).await;
    std::fs::write(dirty.path().join("wip.txt"), "uncommitted\n").unwrap();
    let committed = filled_worktree(&repo, base, 2).await;
    let committed_tip = commit_in(&repo, &committed, &[("done.txt", "done\n")]).await;
    let gone = filled_worktree(&repo, base, 3).await;
    let gone_tip = commit_in(&repo, &gone, &[("three.txt", "3\n")]).await;
    repo.remove_worktree(&gone).await.unwrap();
    repo.create_result_branch(&run_id(), base).await.unwrap();
    let worktrees_dir = repo.default_worktrees_dir(&run_id());

    let report = repo.clean_run(&run_id()).await.unwrap();

    let references: Vec<&str> = report
        .archived
        .iter()
        .map(|a| a.reference.as_str())
        .collect();
    assert_eq!(
        references,
        [
            "refs/grove/archive/r1/1",
            "refs/grove/archive/r1/2",
            "refs/grove/archive/r1/3"
        ]
    );
    assert_eq!(
        fixture.git(&["show", "refs/grove/archive/r1/1:wip.txt"]),
        "uncommitted"
    );
    assert_eq!(
        repo.ref_target("refs/grove/archive/r1/2").unwrap(),
        Some(committed_tip)
    );
    assert_eq!(
        repo.ref_target("refs/grove/archive/r1/3").unwrap(),
        Some(gone_tip)
    );
    assert_eq!(report.removed_worktrees.len(), 2);
    assert!(!worktrees_dir.exists(), "the run's worktrees are gone");
    assert_eq!(
        fixture
            .git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1
    );
    assert_eq!(
        fixture.git(&["branch", "--list", "grove/*", "--format=%(refname:short)"]),
        "grove/r1/result",
        "subtask branches are deleted once archived; the result is kept"
    );
}

#[tokio::test]
async fn gc_is_the_only_deleter_of_archives_and_respects_the_age() {
    let fixture = project();
    let repo = fixture.open().await;
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    commit_in(&repo, &worktree, &[("a.txt", "a\n")]).await;
    worktree.archive(&repo, "failed").await.unwrap();

    let kept = repo
        .gc_archives(Duration::from_secs(100 * 365 * 86_400))
        .await
        .unwrap();
    assert_eq!(
        kept,
        Vec::<String>::new(),
        "archives younger than the limit stay"
    );
    assert!(
        repo.ref_target("refs/grove/archive/r1/1")
            .unwrap()
            .is_some()
    );

    // The fixture dates every commit 2026-01-01, so one day is long past.
    let deleted = repo.gc_archives(Duration::from_secs(86_400)).await.unwrap();
    assert_eq!(deleted, vec!["refs/grove/archive/r1/1".to_owned()]);
    assert_eq!(repo.ref_target("refs/grove/archive/r1/1").unwrap(), None);
}

#[tokio::test]
async fn a_kept_branch_is_deleted_with_its_reflog_packed_or_loose_and_a_held_lock_is_waited_out() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    repo.create_result_branch(&run_id(), base).await.unwrap();
    let mut tips = Vec::new();
    for n in 1..=3 {
        let worktree = filled_worktree(&repo, base, n).await;
        tips.push(commit_in(&repo, &worktree, &[(&format!("{n}.txt"), "x\n")]).await);
        worktree.archive(&repo, "kept").await.unwrap();
        repo.remove_worktree(&worktree).await.unwrap();
    }
    let branch = |n: u32| subtask_ref(&run_id(), n);
    let exists = |reference: &str| {
        crate::support::git_fixture::sealed_command(
            &fixture.home(),
            &fixture.repo,
            &["show-ref", "--verify", "--quiet", reference],
        )
        .status()
        .unwrap()
        .success()
    };
    let has_reflog = |reference: &str| {
        crate::support::git_fixture::sealed_command(
            &fixture.home(),
            &fixture.repo,
            &["reflog", "exists", reference],
        )
        .status()
        .unwrap()
        .success()
    };
    assert!(has_reflog(&branch(1)), "a branch grove made has a reflog");
    // Packed, as a user's `git gc` leaves them; S1's written loose again on top.
    fixture.git(&["pack-refs", "--all"]);
    fixture.git(&["update-ref", &branch(1), &tips[0].to_string()]);
    // Another git process holds S3's lock for a while.
    let lock = fixture
        .repo
        .join(".git")
        .join(format!("{}.lock", branch(3)));
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "").unwrap();
    let release = {
        let lock = lock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            std::fs::remove_file(lock).unwrap();
        })
    };

    for n in 1..=3 {
        repo.delete_subtask_branch(&run_id(), n).await.unwrap();
    }
    release.await.unwrap();

    for n in 1..=3 {
        assert!(
            !exists(&branch(n)),
            "S{n}'s branch is gone, packed or loose"
        );
        assert!(
            !has_reflog(&branch(n)),
            "S{n}'s reflog went with it, as with git"
        );
    }
    assert_eq!(
        fixture.git(&["rev-parse", "refs/grove/archive/r1/3"]),
        tips[2].to_string(),
        "the work stays in its archive"
    );
    assert_eq!(
        fixture.git(&["fsck", "--no-progress"]),
        "",
        "git finds the repository sound"
    );
}
