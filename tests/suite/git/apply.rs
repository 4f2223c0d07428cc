//! Applying a run's result to the user's branch, or refusing without touching anything.

use grove::git::{ApplyOutcome, ApplyRequest, CommitId, RefusalReason, Repo};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::GitFixture;

/// A run whose one subtask edits `README` and adds `src/gen.rs`, merged onto the result.
async fn finished_run(fixture: &GitFixture) -> (Repo, ApplyRequest, CommitId) {
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    commit_in(
        &repo,
        &worktree,
        &[
            ("README", "hello, grove\n"),
            ("src/gen.rs", "// generated\n"),
        ],
    )
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();
    repo.merge_subtasks(&run_id(), &[1]).await.unwrap();
    let result = repo.ref_target(&run_id().result_ref()).unwrap().unwrap();
    let request = ApplyRequest {
        run: run_id(),
        source: run_id().result_ref(),
        branch: "refs/heads/main".to_owned(),
        base,
    };
    (repo, request, result)
}

/// Applies run `r1`'s result onto `main`, whose run started at `base`.
async fn apply_result(repo: &Repo, base: CommitId) -> ApplyOutcome {
    repo.apply(&ApplyRequest {
        run: run_id(),
        source: run_id().result_ref(),
        branch: "refs/heads/main".to_owned(),
        base,
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_clean_tree_is_fast_forwarded_with_work_tree_and_index_updated() {
    let fixture = project();
    let (repo, request, result) = finished_run(&fixture).await;

    let outcome = repo.apply(&request).await.unwrap();

    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            from: request.base,
            to: result,
            merged_on_top: false
        }
    );
    assert_eq!(fixture.rev("HEAD"), result);
    assert_eq!(fixture.read("README"), b"hello, grove\n");
    assert_eq!(fixture.read("src/gen.rs"), b"// generated\n");
    assert_eq!(
        fixture.git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "index and work tree match the new commit (nothing shown reversed)"
    );
    assert_eq!(
        repo.apply(&request).await.unwrap(),
        ApplyOutcome::AlreadyApplied
    );
}

#[tokio::test]
async fn uncommitted_changes_in_the_way_refuse_the_apply_and_stay_byte_identical() {
    let fixture = project();
    let (repo, request, _) = finished_run(&fixture).await;
    fixture.write("README", "my unstaged edit\n");
    fixture.write("src/gen.rs", "my untracked file\n");
    fixture.write("staged.txt", "staged\n");
    fixture.git(&["add", "staged.txt"]);
    fixture.write("src/lib.rs", "// my staged edit\n");
    fixture.git(&["add", "src/lib.rs"]);
    let before = fixture.user_state();

    let outcome = repo.apply(&request).await.unwrap();

    assert_eq!(
        outcome,
        ApplyOutcome::Refused {
            reason: RefusalReason::LocalChangesInTheWay {
                paths: vec!["README".to_owned(), "src/gen.rs".to_owned()]
            },
            command: "git merge --ff-only grove/r1/result".to_owned(),
        }
    );
    assert_eq!(
        fixture.user_state(),
        before,
        "every user file, the index and status are unchanged"
    );
    assert_eq!(fixture.rev("HEAD"), request.base, "the branch did not move");
}

#[tokio::test]
async fn a_staged_change_in_the_way_is_refused_and_kept() {
    let fixture = project();
    let (repo, request, _) = finished_run(&fixture).await;
    fixture.write("README", "my staged edit\n");
    fixture.git(&["add", "README"]);
    let before = fixture.user_state();

    let outcome = repo.apply(&request).await.unwrap();

    assert!(
        matches!(&outcome, ApplyOutcome::Refused { reason: RefusalReason::LocalChangesInTheWay { paths }, .. } if paths == &["README"]),
        "{outcome:?}"
    );
    assert_eq!(fixture.user_state(), before);
}

#[tokio::test]
async fn uncommitted_changes_elsewhere_survive_an_apply() {
    let fixture = project();
    let (repo, request, result) = finished_run(&fixture).await;
    fixture.write("notes.txt", "untracked notes\n");
    fixture.write("src/util.rs", "// unstaged edit\n");
    fixture.write("src/lib.rs", "// staged edit\n");
    fixture.git(&["add", "src/lib.rs"]);

    let outcome = repo.apply(&request).await.unwrap();

    assert!(
        matches!(outcome, ApplyOutcome::Applied { to, .. } if to == result),
        "{outcome:?}"
    );
    assert_eq!(fixture.read("notes.txt"), b"untracked notes\n");
    assert_eq!(fixture.read("src/util.rs"), b"// unstaged edit\n");
    assert_eq!(fixture.read("src/lib.rs"), b"// staged edit\n");
    assert_eq!(
        fixture.git(&["status", "--porcelain", "--untracked-files=all"]),
        "M  src/lib.rs\n M src/util.rs\n?? notes.txt",
        "the user's own changes keep their state"
    );
}

#[tokio::test]
async fn a_branch_that_moved_in_a_conflicting_way_is_refused() {
    let fixture = project();
    let (repo, request, result) = finished_run(&fixture).await;
    fixture.write("README", "the user's own readme\n");
    let moved = fixture.commit_all("user edits readme");
    let before = fixture.user_state();

    let outcome = repo.apply(&request).await.unwrap();

    assert_eq!(
        outcome,
        ApplyOutcome::Refused {
            reason: RefusalReason::BranchMovedWithConflicts {
                now_at: moved,
                paths: vec!["README".to_owned()]
            },
            command: "git merge grove/r1/result".to_owned(),
        }
    );
    assert_eq!(fixture.user_state(), before);
    assert_eq!(fixture.rev("HEAD"), moved);
    assert_eq!(
        repo.ref_target(&run_id().result_ref()).unwrap(),
        Some(result),
        "the result stays put"
    );
}

#[tokio::test]
async fn a_branch_that_moved_without_conflicts_gets_the_result_merged_on_top() {
    let fixture = project();
    let (repo, request, result) = finished_run(&fixture).await;
    fixture.write("src/util.rs", "// the user's edit\n");
    let moved = fixture.commit_all("user edits util");

    let outcome = repo.apply(&request).await.unwrap();

    let head = fixture.rev("HEAD");
    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            from: moved,
            to: head,
            merged_on_top: true
        }
    );
    assert_eq!(
        fixture.git(&["log", "-1", "--format=%P"]),
        format!("{moved} {result}")
    );
    assert_eq!(fixture.read("src/util.rs"), b"// the user's edit\n");
    assert_eq!(fixture.read("README"), b"hello, grove\n");
    assert_eq!(
        fixture.git(&["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
}

#[tokio::test]
async fn a_branch_that_is_not_checked_out_moves_by_compare_and_swap_only() {
    let fixture = project();
    let (repo, request, result) = finished_run(&fixture).await;
    fixture.git(&["checkout", "--quiet", "-b", "feature"]);
    fixture.write("README", "dirty work on feature\n");
    let before = fixture.user_state();

    let outcome = repo.apply(&request).await.unwrap();

    assert_eq!(
        outcome,
        ApplyOutcome::Applied {
            from: request.base,
            to: result,
            merged_on_top: false
        }
    );
    assert_eq!(fixture.rev("main"), result);
    assert_eq!(
        fixture.user_state(),
        before,
        "the checked-out branch's tree is untouched"
    );
}

#[tokio::test]
async fn an_operation_in_progress_refuses_the_apply() {
    let fixture = project();
    let (repo, request, _) = finished_run(&fixture).await;
    std::fs::write(
        fixture.repo.join(".git/MERGE_HEAD"),
        format!("{}\n", request.base),
    )
    .unwrap();
    let before = fixture.user_state();

    let outcome = repo.apply(&request).await.unwrap();

    assert!(
        matches!(
            &outcome,
            ApplyOutcome::Refused {
                reason: RefusalReason::OperationInProgress { .. },
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(fixture.user_state(), before);
}

#[tokio::test]
async fn an_ignored_file_the_result_would_create_is_not_clobbered() {
    let fixture = project();
    fixture.write(".gitignore", "build/\n");
    fixture.commit_all("ignore build");
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    commit_in(
        &repo,
        &worktree,
        &[(".gitignore", ""), ("build/out.txt", "from grove\n")],
    )
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();
    repo.merge_subtasks(&run_id(), &[1]).await.unwrap();
    fixture.write("build/out.txt", "the user's ignored build output\n");
    let before = fixture.user_state();

    let outcome = apply_result(&repo, base).await;

    assert_eq!(
        outcome,
        ApplyOutcome::Refused {
            reason: RefusalReason::LocalChangesInTheWay {
                paths: vec!["build/".to_owned()]
            },
            command: "git merge --ff-only grove/r1/result".to_owned(),
        }
    );
    assert_eq!(
        fixture.user_state(),
        before,
        "git itself would overwrite ignored files; grove does not"
    );
}

#[tokio::test]
async fn a_branch_checked_out_in_another_worktree_is_left_alone() {
    let fixture = project();
    let (repo, request, _) = finished_run(&fixture).await;
    fixture.git(&["checkout", "--quiet", "--detach"]);
    let other = fixture.dir.path().join("other");
    fixture.git(&[
        "worktree",
        "add",
        "--quiet",
        other.to_str().unwrap(),
        "main",
    ]);

    let outcome = repo.apply(&request).await.unwrap();

    assert_eq!(
        outcome,
        ApplyOutcome::Refused {
            reason: RefusalReason::CheckedOutInAnotherWorktree {
                path: std::fs::canonicalize(&other).unwrap()
            },
            command: format!(
                "git -C {} merge --ff-only grove/r1/result",
                std::fs::canonicalize(&other).unwrap().display()
            ),
        }
    );
    assert_eq!(fixture.rev("main"), request.base);
}

#[tokio::test]
async fn an_untracked_file_where_the_result_needs_a_directory_and_the_reverse_are_refused() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    commit_in(
        &repo,
        &worktree,
        &[("docs/guide.md", "a guide\n"), ("notes.txt", "notes\n")],
    )
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();
    repo.merge_subtasks(&run_id(), &[1]).await.unwrap();
    // `docs` a file where the result puts a directory, `notes.txt` a directory where it
    // puts a file; neither path is one the result changes.
    fixture.write("docs", "the user's file named docs\n");
    fixture.write("notes.txt/draft", "the user's draft\n");
    fixture.write("README", "edited elsewhere, not in the way\n");
    let before = fixture.user_state();

    let outcome = apply_result(&repo, base).await;

    assert_eq!(
        outcome,
        ApplyOutcome::Refused {
            reason: RefusalReason::LocalChangesInTheWay {
                paths: vec!["docs".to_owned(), "notes.txt/draft".to_owned()]
            },
            command: "git merge --ff-only grove/r1/result".to_owned(),
        },
        "what the move would replace is in the way, even where the result changes no such path"
    );
    assert_eq!(
        fixture.user_state(),
        before,
        "nothing of the user's is touched"
    );
}
