//! One worktree of each kind through its whole life by its own methods: created,
//! checkpointed, archived, kept for the user, removed. A git worktree, a copy-on-write
//! tree mounted by a tree host, and the same tree once its host is gone (unmounted),
//! which no git may touch until it is mounted again.

use grove::worktree::{CheckpointError, Files, LiveTrees, NotHereError, Worktree};
use pretty_assertions::assert_eq;

use super::worktree::spec;
use crate::support::git_fixture::GitFixture;

/// What is on the branch at `commit`: `file`'s contents there.
fn file_at(fixture: &GitFixture, commit: &str, file: &str) -> String {
    fixture.git(&["show", &format!("{commit}:{file}")])
}

/// The states a worktree's kind went through, by name.
fn kind(worktree: &Worktree) -> &'static str {
    match worktree.files() {
        Files::Checkout => "checkout",
        Files::Mounted(_) => "mounted",
        Files::Unmounted => "unmounted",
        Files::Remote(_) => "remote",
        Files::Unreached => "unreached",
    }
}

#[tokio::test]
async fn a_git_worktree_is_created_checkpointed_archived_kept_and_removed_by_its_own_methods() {
    let fixture = GitFixture::with_files(&[("a.txt", "one\n")]);
    let repo = fixture.open().await;
    let trees = LiveTrees::default();
    let worktree = Worktree::create(&repo, spec(&repo, &fixture, 1))
        .await
        .unwrap();
    worktree.ready().await.unwrap();
    std::fs::write(worktree.path().join("a.txt"), "two\n").unwrap();

    let commit = worktree.checkpoint(&repo, "S1: work").await.unwrap();
    let commit = commit.expect("a change makes a commit").to_string();
    let archived = worktree.archive(&repo, "kept for the test").await.unwrap();
    let kept = worktree.keep(&repo, &trees).await.unwrap();
    let path = worktree.path().to_path_buf();
    kept.remove(&repo, &trees).await.unwrap();

    assert_eq!(
        (
            kind(&worktree),
            file_at(&fixture, &commit, "a.txt"),
            archived.commit.to_string(),
            kind(&kept),
            path.exists(),
            repo.ref_target(&worktree.branch_ref())
                .unwrap()
                .map(|c| c.to_string()),
        ),
        (
            "checkout",
            "two".to_owned(),
            commit.clone(),
            "checkout",
            false,
            Some(commit),
        ),
        "a git worktree's checkpoint commits its change, the archive holds that commit, \
         keeping leaves it a checkout, and removal deletes its directory but never its branch"
    );
}

#[tokio::test]
async fn a_copy_on_write_tree_is_mounted_checkpointed_archived_kept_and_removed_by_its_own_methods()
{
    let fixture = GitFixture::with_files(&[("a.txt", "one\n")]);
    let repo = fixture.open().await;
    let trees = LiveTrees::default();
    let base = repo.base_tree(fixture.rev("HEAD"), None).await.unwrap();
    let created = Worktree::create_copy_on_write(&repo, spec(&repo, &fixture, 1), &base)
        .await
        .unwrap();
    let parent = created.path().parent().unwrap().to_path_buf();
    if !crate::suite::overlay::overlay_or_skip("git::lifecycle", &parent).await {
        return;
    }
    let refused = created.checkpoint(&repo, "before the mount").await;
    assert!(
        matches!(
            refused,
            Err(CheckpointError::NotHere(
                NotHereError::TreeNotMounted { .. }
            ))
        ),
        "git never runs in a copy-on-write tree that is not mounted (its path holds only \
         the .git file; a commit would delete every file of the branch): {refused:?}"
    );

    let mounted = created.mount(&trees, &base.tree_dir()).await.unwrap();
    std::fs::write(mounted.files_root().join("a.txt"), "two\n").unwrap();
    let commit = mounted.checkpoint(&repo, "S1: work").await.unwrap();
    let commit = commit.expect("a change makes a commit").to_string();
    let archived = mounted.archive(&repo, "kept for the test").await.unwrap();
    let kept = mounted.keep(&repo, &trees).await.unwrap();
    let copied_out = std::fs::read_to_string(kept.path().join("a.txt")).unwrap();
    kept.remove(&repo, &trees).await.unwrap();

    assert_eq!(
        (
            kind(&created),
            kind(&mounted),
            file_at(&fixture, &commit, "a.txt"),
            archived.commit.to_string(),
            kind(&kept),
            copied_out,
            kept.path().exists(),
            trees.take_all().len(),
            repo.ref_target(&mounted.branch_ref())
                .unwrap()
                .map(|c| c.to_string()),
        ),
        (
            "unmounted",
            "mounted",
            "two".to_owned(),
            commit.clone(),
            "checkout",
            "two\n".to_owned(),
            false,
            0,
            Some(commit),
        ),
        "a copy-on-write tree is unmounted until mounted, its checkpoint commits what its \
         upper directory holds, keeping copies its files out and makes it a checkout, and \
         removal leaves no directory, no live tree and the branch"
    );
}

#[tokio::test]
async fn a_mounted_tree_is_removed_with_its_layers_and_an_unused_one_is_discarded() {
    let fixture = GitFixture::with_files(&[("a.txt", "one\n")]);
    let repo = fixture.open().await;
    let trees = LiveTrees::default();
    let base = repo.base_tree(fixture.rev("HEAD"), None).await.unwrap();
    let first = Worktree::create_copy_on_write(&repo, spec(&repo, &fixture, 1), &base)
        .await
        .unwrap();
    let parent = first.path().parent().unwrap().to_path_buf();
    if !crate::suite::overlay::overlay_or_skip("git::lifecycle", &parent).await {
        return;
    }
    let second = Worktree::create_copy_on_write(&repo, spec(&repo, &fixture, 2), &base)
        .await
        .unwrap();
    let first = first.mount(&trees, &base.tree_dir()).await.unwrap();
    let second = second.mount(&trees, &base.tree_dir()).await.unwrap();
    std::fs::write(first.files_root().join("b.txt"), "new\n").unwrap();
    let upper = first.overlay().unwrap().layers().unwrap().upper.clone();

    first.remove(&repo, &trees).await.unwrap();
    second.discard_unused(&repo, &trees).await.unwrap();
    grove::worktree::settle_deletions().await;
    let tip = repo.ref_target(&first.branch_ref()).unwrap().unwrap();

    assert_eq!(
        (
            file_at(&fixture, &tip.to_string(), "b.txt"),
            upper.exists(),
            first.path().exists(),
            second.path().exists(),
            repo.ref_target(&second.branch_ref()).unwrap(),
            trees.take_all().len(),
        ),
        (
            "new".to_owned(),
            false,
            false,
            false,
            Some(fixture.rev("HEAD")),
            0
        ),
        "removing a mounted tree commits its last change first, then its layers and its \
         directory go; an unused tree is discarded with nothing committed, its branch at \
         the base; neither stays among the live trees"
    );
}
