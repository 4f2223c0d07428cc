//! A new base tree made from the last one no run holds: only the files that differ are
//! written, and a held base, another setup's base or an update git refuses never is.

use std::path::Path;

use grove::worktree::settle_deletions;
use pretty_assertions::assert_eq;

use crate::support::git_fixture::{GitFixture, git_in};

fn fixture() -> GitFixture {
    GitFixture::with_files(&[
        ("README", "hello\n"),
        ("src/lib.rs", "one\n"),
        ("src/gone.rs", "deleted by the second commit\n"),
        (".gitignore", "node_modules/\n"),
    ])
}

/// Commits the second version of the fixture: one file changed, one deleted, one added.
fn second_commit(fixture: &GitFixture) -> grove::git::CommitId {
    fixture.write("src/lib.rs", "two\n");
    std::fs::remove_file(fixture.repo.join("src/gone.rs")).unwrap();
    fixture.write("src/new.rs", "added\n");
    fixture.commit_all("second")
}

/// The files of `tree`, sorted, with their contents (`node_modules` included).
fn files(tree: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![tree.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let name = path.strip_prefix(tree).unwrap().display().to_string();
                found.push((name, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    found.sort();
    found
}

/// What `git status` says of `base`'s tree against its own index: nothing, when the
/// index's stat data and the files agree.
fn status_of(fixture: &GitFixture, base: &grove::worktree::BaseTree) -> String {
    let index = format!("GIT_INDEX_FILE={}", base.index_path().display());
    let work_tree = format!("--work-tree={}", base.tree_dir().display());
    let git_dir = format!("--git-dir={}", fixture.repo.join(".git").display());
    let out = std::process::Command::new("env")
        .args([&index, "git", &git_dir, &work_tree, "status", "--porcelain"])
        .envs(crate::support::git_fixture::sealed_env(&fixture.home()))
        .current_dir(base.tree_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn a_new_base_is_the_last_unheld_one_brought_to_the_new_commit() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let first_commit = fixture.rev("HEAD");
    let first = repo.base_tree(first_commit, None).await.unwrap();
    let first_dir = first.tree_dir();
    // What a setup command leaves (ignored by git): it survives the update.
    std::fs::create_dir_all(first_dir.join("node_modules")).unwrap();
    std::fs::write(first_dir.join("node_modules/dep.js"), "dep\n").unwrap();
    let untouched = std::fs::metadata(first_dir.join("README")).unwrap();
    drop(first);

    let commit = second_commit(&fixture);
    let second = repo.base_tree(commit, None).await.unwrap();

    assert_eq!(
        files(&second.tree_dir()),
        vec![
            (".gitignore".to_owned(), "node_modules/\n".to_owned()),
            ("README".to_owned(), "hello\n".to_owned()),
            ("node_modules/dep.js".to_owned(), "dep\n".to_owned()),
            ("src/lib.rs".to_owned(), "two\n".to_owned()),
            ("src/new.rs".to_owned(), "added\n".to_owned()),
        ],
        "the new base holds the new commit's files, and the old base's ignored ones"
    );
    let readme = std::fs::metadata(second.tree_dir().join("README")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&readme),
        std::os::unix::fs::MetadataExt::ino(&untouched),
        "a file both commits share is not written again"
    );
    assert!(second.was_built(), "the new base was made by this call");
    assert!(
        !first_dir.exists(),
        "the old base was moved, not copied: no second full copy stays behind"
    );
    assert_eq!(
        status_of(&fixture, &second),
        "",
        "the base's index matches its files after the update"
    );
    let head_tree = git_in(
        &fixture.home(),
        &fixture.repo,
        &["rev-parse", "HEAD^{tree}"],
    );
    let index = format!("GIT_INDEX_FILE={}", second.index_path().display());
    let out = std::process::Command::new("env")
        .args([&index, "git", "write-tree"])
        .envs(crate::support::git_fixture::sealed_env(&fixture.home()))
        .current_dir(&fixture.repo)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        head_tree,
        "the base's index is the new commit's tree"
    );
}

#[tokio::test]
async fn a_held_base_or_one_of_another_setup_is_never_taken_over() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let first_commit = fixture.rev("HEAD");
    let held = repo.base_tree(first_commit, None).await.unwrap();
    let other_setup = repo.base_tree(first_commit, Some("true")).await.unwrap();
    let other_dir = other_setup.tree_dir();
    drop(other_setup);

    let commit = second_commit(&fixture);
    let second = repo.base_tree(commit, None).await.unwrap();

    assert_eq!(
        (
            std::fs::read_to_string(held.tree_dir().join("src/lib.rs")).unwrap(),
            std::fs::read_to_string(other_dir.join("src/lib.rs")).unwrap(),
            std::fs::read_to_string(second.tree_dir().join("src/lib.rs")).unwrap(),
        ),
        ("one\n".to_owned(), "one\n".to_owned(), "two\n".to_owned()),
        "the held base and the other setup's base keep their commit; the new one is built"
    );
    assert!(
        !second.tree_dir().join("src/gone.rs").exists(),
        "the new base is a checkout of the new commit"
    );
}

#[tokio::test]
async fn an_update_git_refuses_falls_back_to_a_full_checkout() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let first = repo.base_tree(fixture.rev("HEAD"), None).await.unwrap();
    // An untracked file where the second commit adds one: git will not overwrite it.
    std::fs::write(first.tree_dir().join("src/new.rs"), "the setup's own\n").unwrap();
    drop(first);

    let commit = second_commit(&fixture);
    let second = repo.base_tree(commit, None).await.unwrap();
    settle_deletions().await;

    assert_eq!(
        files(&second.tree_dir()),
        vec![
            (".gitignore".to_owned(), "node_modules/\n".to_owned()),
            ("README".to_owned(), "hello\n".to_owned()),
            ("src/lib.rs".to_owned(), "two\n".to_owned()),
            ("src/new.rs".to_owned(), "added\n".to_owned()),
        ],
        "the refused update is dropped and the new commit checked out in full"
    );
    assert_eq!(status_of(&fixture, &second), "");
}
