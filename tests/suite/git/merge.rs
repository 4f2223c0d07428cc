//! In-memory merges onto the run's result branch.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use grove::git::{
    BatchItem, GitOptions, MergeCheck, MergeOutcome, PairConflict, Repo, subtask_ref,
};
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
    renamer.checkpoint(&repo, "rename").await.unwrap();
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
    renamer.checkpoint(&repo, "move src to lib").await.unwrap();
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

/// A `git` that logs each invocation's arguments to `<dir>/git-calls`, then runs git.
fn logging_git(dir: &Path) -> PathBuf {
    let script = dir.join("logging-git.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\nexec git \"$@\"\n",
            dir.join("git-calls").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn merge_tree_calls(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("git-calls"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("merge-tree"))
        .count()
}

async fn logged_repo(fixture: &GitFixture) -> Repo {
    Repo::open(
        &fixture.repo,
        GitOptions {
            program: logging_git(fixture.dir.path()),
            ..fixture.options()
        },
    )
    .await
    .unwrap()
}

/// Subtask `n` of a fresh worktree at `base`: `edit` changes its files, then a checkpoint.
async fn subtask_with(
    repo: &Repo,
    base: grove::git::CommitId,
    n: u32,
    edit: impl FnOnce(&Path),
) -> grove::git::CommitId {
    let worktree = filled_worktree(repo, base, n).await;
    edit(worktree.path());
    worktree.checkpoint(repo, "work").await.unwrap().unwrap()
}

#[tokio::test]
async fn side_by_side_additions_and_edits_merge_in_process_into_the_tree_git_writes() {
    let fixture = project();
    let repo = logged_repo(&fixture).await;
    let base = fixture.rev("HEAD");
    subtask_with(&repo, base, 1, |dir| {
        std::fs::write(dir.join("README"), "edited by 1\n").unwrap();
        std::fs::create_dir_all(dir.join("src/new")).unwrap();
        std::fs::write(dir.join("src/new/a.rs"), "// a\n").unwrap();
        std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    })
    .await;
    subtask_with(&repo, base, 2, |dir| {
        std::fs::write(dir.join("src/lib.rs"), "pub mod util;\n// edited by 2\n").unwrap();
        std::fs::create_dir_all(dir.join("src/new")).unwrap();
        std::fs::write(dir.join("src/new/b.rs"), "// b\n").unwrap();
        // Sorts between `src` and `src/...`: must not be taken for a nested path.
        std::fs::write(dir.join("src-notes.txt"), "notes\n").unwrap();
        std::os::unix::fs::symlink("README", dir.join("readme-link")).unwrap();
    })
    .await;
    repo.create_result_branch(&run_id(), base).await.unwrap();

    let outcomes = repo.merge_subtasks(&run_id(), &[1, 2]).await.unwrap();

    assert!(
        outcomes
            .iter()
            .all(|(_, outcome)| matches!(outcome, MergeOutcome::Merged { .. })),
        "{outcomes:?}"
    );
    assert_eq!(
        merge_tree_calls(fixture.dir.path()),
        0,
        "both merges were certain, so no merge-tree process ran"
    );
    let first = fixture.rev("grove/r1/result^1");
    let second = repo
        .ref_target(&subtask_ref(&run_id(), 2))
        .unwrap()
        .unwrap();
    let MergeCheck::Clean { tree } = repo.check_merge(first, second).await.unwrap() else {
        panic!("git finds the second merge clean");
    };
    assert_eq!(
        fixture.git(&["rev-parse", "grove/r1/result^{tree}"]),
        tree,
        "the in-process merge is the tree merge-tree writes"
    );
    assert_eq!(
        fixture.git(&[
            "ls-tree",
            "-r",
            "--format=%(objectmode) %(path)",
            "grove/r1/result"
        ]),
        "100644 README\n120000 readme-link\n100755 run.sh\n100644 src-notes.txt\n\
100644 src/lib.rs\n100644 src/new/a.rs\n100644 src/new/b.rs\n100644 src/util.rs"
    );
}

#[tokio::test]
async fn a_deletion_a_shared_path_or_a_nested_path_is_merged_by_git() {
    type Edit = fn(&Path);
    let cases: [(&str, Edit, Edit, bool); 3] = [
        (
            "a deletion may be half of a rename",
            |dir| std::fs::write(dir.join("README"), "edited\n").unwrap(),
            |dir| std::fs::remove_file(dir.join("src/util.rs")).unwrap(),
            true,
        ),
        (
            "both sides edit one file",
            |dir| std::fs::write(dir.join("README"), "first line\nhello\n").unwrap(),
            |dir| std::fs::write(dir.join("README"), "hello\nlast line\n").unwrap(),
            true,
        ),
        (
            "a file where the other side adds a directory",
            |dir| std::fs::write(dir.join("docs"), "a file\n").unwrap(),
            |dir| {
                std::fs::create_dir_all(dir.join("docs")).unwrap();
                std::fs::write(dir.join("docs/a.md"), "a page\n").unwrap();
            },
            false,
        ),
    ];
    for (case, first, second, clean) in cases {
        let fixture = project();
        let repo = logged_repo(&fixture).await;
        let base = fixture.rev("HEAD");
        // A bystander on the result first, so that neither merge is a plain fast-forward.
        subtask_with(&repo, base, 1, |dir| {
            std::fs::write(dir.join("bystander.txt"), "x\n").unwrap();
        })
        .await;
        subtask_with(&repo, base, 2, first).await;
        subtask_with(&repo, base, 3, second).await;
        repo.create_result_branch(&run_id(), base).await.unwrap();

        let outcomes = repo.merge_subtasks(&run_id(), &[1, 2, 3]).await.unwrap();

        assert_eq!(
            merge_tree_calls(fixture.dir.path()),
            1,
            "{case}: git computed the last merge, and only it"
        );
        let last = &outcomes[2].1;
        assert_eq!(
            matches!(last, MergeOutcome::Merged { .. }),
            clean,
            "{case}: {outcomes:?}"
        );
    }
}

/// The merge commit message `merge_subtasks` writes for subtask `n`.
fn merge_message(n: u32) -> String {
    format!("grove r1: merge subtask {n}\n\nGrove-Run: r1\nGrove-Subtask: {n}\n")
}

#[tokio::test]
async fn a_batch_merges_what_is_certain_in_order_with_one_ref_move_and_stops_at_the_rest() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let mut items = Vec::new();
    for n in 1..=4 {
        let worktree = filled_worktree(&repo, base, n).await;
        if n == 3 {
            // A deletion may be a rename: only `git merge-tree` knows.
            std::fs::remove_file(worktree.path().join("README")).unwrap();
            worktree.checkpoint(&repo, "delete").await.unwrap();
        } else {
            commit_in(&repo, &worktree, &[(&format!("added-{n}.txt"), "new\n")]).await;
        }
        let commit = repo
            .ref_target(&subtask_ref(&run_id(), n))
            .unwrap()
            .unwrap();
        items.push(BatchItem {
            commit,
            message: merge_message(n),
        });
    }
    let again = items[0].clone();
    items.insert(2, again);
    let result = run_id().result_ref();
    repo.create_result_branch(&run_id(), base).await.unwrap();

    let outcomes = repo.merge_batch_onto(&result, &items).await.unwrap();

    let merged: Vec<&str> = outcomes
        .iter()
        .map(|outcome| match outcome {
            MergeOutcome::Merged { .. } => "merged",
            MergeOutcome::AlreadyMerged => "already merged",
            MergeOutcome::Conflict { .. } => "conflict",
        })
        .collect();
    assert_eq!(
        merged,
        ["merged", "merged", "already merged"],
        "the batch ends at the deletion; S4 after it gets no outcome"
    );
    assert_eq!(
        fixture.git(&["log", "--first-parent", "--format=%s", &result]),
        "grove r1: merge subtask 2\ngrove r1: merge subtask 1\ninitial"
    );
    assert_eq!(
        fixture.git(&["reflog", "--format=%gs", &result]),
        "grove: 2 merges\ngrove: start run",
        "the ref moved once, from the tip the batch started on"
    );
    fixture.git(&["fsck", "--no-dangling", "--no-progress"]);

    let twin = project();
    let twin_repo = twin.open().await;
    for n in 1..=2 {
        let worktree = filled_worktree(&twin_repo, twin.rev("HEAD"), n).await;
        commit_in(
            &twin_repo,
            &worktree,
            &[(&format!("added-{n}.txt"), "new\n")],
        )
        .await;
    }
    twin_repo
        .create_result_branch(&run_id(), twin.rev("HEAD"))
        .await
        .unwrap();
    twin_repo.merge_subtasks(&run_id(), &[1, 2]).await.unwrap();
    assert_eq!(
        twin_repo.ref_target(&result).unwrap(),
        repo.ref_target(&result).unwrap(),
        "a batch writes the very commits that merges one by one write"
    );
}
