//! In-memory merges onto the run's result branch.

use grove::git::{MergeOutcome, PairConflict, Repo};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::GitFixture;

/// Three subtasks adding one file each, merged in order 1, 2, 3.
async fn merge_three(fixture: &GitFixture) -> (Repo, Vec<(u32, MergeOutcome)>) {
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    for n in 1..=3 {
        let worktree = filled_worktree(&repo, base, n).await;
        commit_in(&repo, &worktree, &[(&format!("added-{n}.txt"), "new\n")]).await;
    }
    repo.create_result_branch(&run_id(), base).await.unwrap();
    let outcomes = repo.merge_subtasks(&run_id(), &[1, 2, 3]).await.unwrap();
    (repo, outcomes)
}

#[tokio::test]
async fn approved_branches_merge_in_the_given_order_without_touching_the_user_tree() {
    let fixture = project();
    let user_before = fixture.user_state();

    let (repo, outcomes) = merge_three(&fixture).await;

    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, MergeOutcome::Merged { .. })),
        "{outcomes:?}"
    );
    assert_eq!(
        fixture.git(&["log", "--first-parent", "--format=%s", "grove/r1/result"]),
        "grove r1: merge subtask 3\ngrove r1: merge subtask 2\ngrove r1: merge subtask 1\ninitial"
    );
    assert_eq!(
        fixture.git(&["ls-tree", "--name-only", "grove/r1/result"]),
        "README\nadded-1.txt\nadded-2.txt\nadded-3.txt\nsrc"
    );
    assert_eq!(
        fixture.user_state(),
        user_before,
        "merges never touch the user's tree or index"
    );
    assert_eq!(
        repo.merge_subtasks(&run_id(), &[2]).await.unwrap(),
        vec![(2, MergeOutcome::AlreadyMerged)],
        "merging again changes nothing"
    );

    let twin = project();
    let (twin_repo, _) = merge_three(&twin).await;
    assert_eq!(
        twin_repo.ref_target(&run_id().result_ref()).unwrap(),
        repo.ref_target(&run_id().result_ref()).unwrap(),
        "the same inputs give the same result commit"
    );
}

#[tokio::test]
async fn a_rename_on_one_branch_carries_an_edit_from_another() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let renamer = filled_worktree(&repo, base, 1).await;
    std::fs::rename(
        renamer.path().join("src/util.rs"),
        renamer.path().join("src/helpers.rs"),
    )
    .unwrap();
    repo.checkpoint(&renamer, "rename").await.unwrap();
    let editor = filled_worktree(&repo, base, 2).await;
    commit_in(
        &repo,
        &editor,
        &[(
            "src/util.rs",
            "pub fn double(x: u32) -> u32 {\n    x + x\n}\n",
        )],
    )
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();

    let outcomes = repo.merge_subtasks(&run_id(), &[1, 2]).await.unwrap();

    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, MergeOutcome::Merged { .. })),
        "{outcomes:?}"
    );
    assert_eq!(
        fixture.git(&["show", "grove/r1/result:src/helpers.rs"]),
        "pub fn double(x: u32) -> u32 {\n    x + x\n}"
    );
    assert_eq!(
        fixture.git(&["ls-tree", "--name-only", "grove/r1/result:src"]),
        "helpers.rs\nlib.rs"
    );
}

#[tokio::test]
async fn a_file_added_in_a_directory_another_branch_renamed_is_a_conflict_not_left_behind() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let renamer = filled_worktree(&repo, base, 1).await;
    std::fs::rename(renamer.path().join("src"), renamer.path().join("lib")).unwrap();
    repo.checkpoint(&renamer, "move src to lib").await.unwrap();
    let adder = filled_worktree(&repo, base, 2).await;
    commit_in(&repo, &adder, &[("src/extra.rs", "pub fn extra() {}\n")]).await;
    repo.create_result_branch(&run_id(), base).await.unwrap();

    let outcomes = repo.merge_subtasks(&run_id(), &[1, 2]).await.unwrap();

    assert!(matches!(outcomes[0].1, MergeOutcome::Merged { .. }));
    assert_eq!(
        outcomes[1],
        (
            2,
            MergeOutcome::Conflict {
                paths: vec!["lib/extra.rs".to_owned()]
            }
        )
    );
}

#[tokio::test]
async fn a_conflict_names_the_paths_and_leaves_the_result_ref_unchanged() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let first = filled_worktree(&repo, base, 1).await;
    let first_commit = commit_in(&repo, &first, &[("README", "hello from one\n")]).await;
    let second = filled_worktree(&repo, base, 2).await;
    let second_commit = commit_in(
        &repo,
        &second,
        &[("README", "hello from two\n"), ("other.txt", "x\n")],
    )
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();

    assert_eq!(
        repo.find_conflicts(base, &[first_commit, second_commit])
            .await
            .unwrap(),
        vec![PairConflict {
            first: first_commit,
            second: second_commit,
            paths: vec!["README".to_owned()]
        }],
        "the conflict is visible before anything is merged"
    );
    let outcomes = repo.merge_subtasks(&run_id(), &[1]).await.unwrap();
    assert!(matches!(outcomes[0].1, MergeOutcome::Merged { .. }));
    let after_first = repo.ref_target(&run_id().result_ref()).unwrap();

    let outcomes = repo.merge_subtasks(&run_id(), &[2]).await.unwrap();

    assert_eq!(
        outcomes,
        vec![(
            2,
            MergeOutcome::Conflict {
                paths: vec!["README".to_owned()]
            }
        )]
    );
    assert_eq!(
        repo.ref_target(&run_id().result_ref()).unwrap(),
        after_first,
        "a conflict leaves the result ref where it was"
    );
}
