//! Spare registrations: a removed worktree's admin dir, emptied, is what the next
//! registration takes, and real git cannot tell it from a new one.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project};

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

fn spares(repo: &grove::git::Repo) -> Vec<u64> {
    std::fs::read_dir(repo.common_dir().join("grove/spares"))
        .map(|entries| entries.map(|entry| inode(&entry.unwrap().path())).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_removed_registration_is_the_next_one_and_git_reads_prunes_and_removes_it() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let first = filled_worktree(&repo, base, 1).await;
    commit_in(&repo, &first, &[("src/first.rs", "// first\n")]).await;
    // Something git wrote there as a worktree's own: its HEAD's reflog.
    fixture.git(&[
        "-C",
        first.path().to_str().unwrap(),
        "checkout",
        "--quiet",
        "-B",
        "grove/r1/1",
    ]);
    repo.remove_worktree(&first).await.unwrap();
    grove::worktree::settle_deletions().await;
    let spare = spares(&repo);
    assert_eq!(
        spare.len(),
        1,
        "the removed registration is kept as a spare"
    );

    let second = filled_worktree(&repo, base, 2).await;
    let inside =
        |args: &[&str]| fixture.git(&[&["-C", second.path().to_str().unwrap()], args].concat());
    assert_eq!(
        (
            vec![inode(second.admin_dir())],
            spares(&repo),
            inside(&["rev-parse", "--abbrev-ref", "HEAD"]),
            inside(&["rev-parse", "--git-dir"]) == second.admin_dir().to_str().unwrap(),
            inside(&["status", "--porcelain"]),
            inside(&["reflog", "--format=%gs", "HEAD"]),
            std::fs::read_to_string(second.admin_dir().join("commondir")).unwrap(),
        ),
        (
            spare,
            Vec::new(),
            "grove/r1/2".to_owned(),
            true,
            String::new(),
            "reset: moving to HEAD".to_owned(),
            "../..\n".to_owned(),
        ),
        "the spare is subtask 2's admin dir: its own branch, a clean checkout of the base, \
         and of subtask 1's HEAD reflog nothing, only its own fill"
    );
    assert_eq!(
        fixture.git(&["worktree", "prune", "--dry-run", "--verbose"]),
        "",
        "git finds nothing to prune in a registration made from a spare"
    );
    let listed = fixture.git(&["worktree", "list", "--porcelain"]);
    assert!(
        listed.contains(&format!("worktree {}\n", second.path().display())),
        "git lists the tree made from a spare: {listed}"
    );
    fixture.git(&[
        "worktree",
        "remove",
        "--force",
        second.path().to_str().unwrap(),
    ]);
    assert!(
        !second.admin_dir().exists() && !second.path().exists(),
        "git removes what grove registered from a spare"
    );
}
