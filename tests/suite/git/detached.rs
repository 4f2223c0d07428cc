//! Detached worktrees (where the result's check runs) and in-memory merges of picks
//! (the result rebuilt without some subtasks): no branch made, no ref moved, a leftover
//! replaced, anything else at the path kept.

use grove::git::RebuildPick;
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};

#[tokio::test]
async fn a_detached_worktree_holds_the_commit_makes_no_branch_and_replaces_its_leftover() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let one = filled_worktree(&repo, base, 1).await;
    let tip = commit_in(&repo, &one, &[("src/util.rs", "changed\n")]).await;
    let refs_before = fixture.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    let path = repo.default_worktrees_dir(&run_id()).join("check-result");

    let tree = repo
        .create_detached_worktree(&run_id(), &path, tip)
        .await
        .unwrap();
    tree.ready().await.unwrap();

    assert_eq!(
        std::fs::read_to_string(tree.path().join("src/util.rs")).unwrap(),
        "changed\n",
        "the worktree holds the commit's files"
    );
    assert_eq!(
        fixture.git(&["-C", tree.path().to_str().unwrap(), "rev-parse", "HEAD"]),
        tip.to_string(),
    );
    assert_eq!(
        fixture.git(&["for-each-ref", "--format=%(refname) %(objectname)"]),
        refs_before,
        "no branch or ref is made or moved"
    );

    // A crash during the check leaves it registered, with the check's files in it.
    std::fs::write(tree.path().join("junk.log"), "left by the check").unwrap();
    let again = repo
        .create_detached_worktree(&run_id(), &path, base)
        .await
        .unwrap();
    again.ready().await.unwrap();
    assert_eq!(
        (
            again.path().join("junk.log").exists(),
            std::fs::read_to_string(again.path().join("src/util.rs")).unwrap()
        ),
        (
            false,
            "pub fn double(x: u32) -> u32 {\n    x * 2\n}\n".to_owned()
        ),
        "a leftover detached worktree is replaced, at the new commit"
    );

    repo.remove_detached_worktree(&again).await.unwrap();
    assert!(!path.exists(), "removed");
    assert!(
        !fixture
            .git(&["worktree", "list", "--porcelain"])
            .contains("check-result"),
        "and unregistered"
    );
}

#[tokio::test]
async fn a_detached_worktree_never_replaces_a_subtasks_worktree_or_a_foreign_directory() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let one = filled_worktree(&repo, base, 1).await;
    std::fs::write(one.path().join("work.txt"), "uncommitted work").unwrap();
    let foreign = repo.default_worktrees_dir(&run_id()).join("check-x");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("mine.txt"), "keep").unwrap();

    for path in [one.path().to_path_buf(), foreign.clone()] {
        let refused = repo.create_detached_worktree(&run_id(), &path, base).await;
        assert!(
            matches!(
                refused,
                Err(grove::worktree::CreateError::WorktreePathOccupied { .. })
            ),
            "{} is refused: {refused:?}",
            path.display()
        );
    }
    assert_eq!(
        (
            std::fs::read_to_string(one.path().join("work.txt")).unwrap(),
            std::fs::read_to_string(foreign.join("mine.txt")).unwrap()
        ),
        ("uncommitted work".to_owned(), "keep".to_owned()),
        "nothing at either path was touched"
    );
}

#[tokio::test]
async fn picks_merge_in_memory_without_moving_any_ref() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let one = filled_worktree(&repo, base, 1).await;
    let two = filled_worktree(&repo, base, 2).await;
    let first = commit_in(&repo, &one, &[("a.txt", "a\n")]).await;
    let second = commit_in(&repo, &two, &[("b.txt", "b\n")]).await;
    let refs_before = fixture.git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    let pick = |subtask, commit| RebuildPick {
        subtask,
        commit,
        message: format!("merge {subtask}"),
    };

    let merged = repo
        .merge_picks(base, &[pick(1, first), pick(2, second)])
        .await
        .unwrap();

    assert_eq!(
        fixture.git(&["ls-tree", "--name-only", &merged.result.to_string()]),
        "README\na.txt\nb.txt\nsrc",
        "the result holds both picks"
    );
    assert_eq!(
        fixture.git(&["for-each-ref", "--format=%(refname) %(objectname)"]),
        refs_before,
        "no ref moved"
    );
}
