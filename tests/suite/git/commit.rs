//! Checkpoint commits: nothing empty, everything round-trips, grove's own identity.

use std::os::unix::fs::PermissionsExt;

use grove::git::{GitOptions, Repo, subtask_ref};

use grove::worktree::CommitPath;
use pretty_assertions::assert_eq;

use super::{filled_worktree, project, run_id};
use crate::support::git_fixture::{git_in, sealed_command};

#[tokio::test]
async fn no_commit_is_made_when_nothing_changed() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    std::fs::write(worktree.path().join(".gitignore"), "target/\n").unwrap();
    worktree.checkpoint(&repo, "ignore file").await.unwrap();
    let before = repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap();
    std::fs::create_dir_all(worktree.path().join("target")).unwrap();
    std::fs::write(worktree.path().join("target/out.o"), "ignored build output").unwrap();

    let commit = worktree.checkpoint(&repo, "turn 2").await.unwrap();

    assert_eq!(
        commit, None,
        "an unchanged tree (ignored files aside) makes no commit"
    );
    assert_eq!(repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(), before);
}

#[tokio::test]
async fn modes_symlinks_line_endings_and_binary_files_round_trip_unchanged() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    let binary: Vec<u8> = vec![0, 159, 146, 150, b'\r', b'\n', 0xff, 0, b'\n'];
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", dir.join("link")).unwrap();
    std::fs::write(dir.join("dos.txt"), "one\r\ntwo\r\nno newline at end").unwrap();
    std::fs::write(dir.join("blob.bin"), &binary).unwrap();
    std::fs::remove_file(dir.join("src/util.rs")).unwrap();

    let commit = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(commit)
    );
    let listing = fixture.git(&[
        "ls-tree",
        "-r",
        "--format=%(objectmode) %(path)",
        &commit.to_string(),
    ]);
    assert_eq!(
        listing,
        "100644 README\n100644 blob.bin\n100644 dos.txt\n120000 link\n100755 run.sh\n100644 src/lib.rs",
        "modes and symlinks are recorded, the deletion too"
    );
    for (path, bytes) in [
        ("dos.txt", b"one\r\ntwo\r\nno newline at end".to_vec()),
        ("blob.bin", binary.clone()),
        ("link", b"src/lib.rs".to_vec()),
    ] {
        let output = sealed_command(
            &fixture.home(),
            &fixture.repo,
            &["cat-file", "blob", &format!("{commit}:{path}")],
        )
        .output()
        .unwrap();
        assert_eq!(output.stdout, bytes, "{path} is stored byte for byte");
    }

    // And back out: a fresh worktree of the commit has the same bytes and modes.
    let again = filled_worktree(&repo, commit, 2).await;
    assert_eq!(
        std::fs::read(again.path().join("blob.bin")).unwrap(),
        binary
    );
    assert_eq!(
        std::fs::read(again.path().join("dos.txt")).unwrap(),
        b"one\r\ntwo\r\nno newline at end"
    );
    assert_eq!(
        std::fs::read_link(again.path().join("link"))
            .unwrap()
            .to_str(),
        Some("src/lib.rs")
    );
    let mode = std::fs::metadata(again.path().join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the executable bit survives");
}

#[tokio::test]
async fn commits_carry_grove_identity_and_name_the_run_and_subtask_without_user_config() {
    let fixture = project();
    let mut options = fixture.options();
    options.env.retain(|(key, _)| {
        !key.to_string_lossy().contains("_NAME") && !key.to_string_lossy().contains("_EMAIL")
    });
    let repo = Repo::open(&fixture.repo, GitOptions { ..options })
        .await
        .unwrap();
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 3).await;
    std::fs::write(worktree.path().join("README"), "changed\n").unwrap();

    let commit = worktree
        .checkpoint(&repo, "after turn 1")
        .await
        .unwrap()
        .unwrap();

    assert_eq!(
        fixture.git(&[
            "log",
            "-1",
            "--format=%an <%ae>|%cn <%ce>|%s|%P",
            &commit.to_string()
        ]),
        format!(
            "grove <grove@localhost>|grove <grove@localhost>|grove r1/3: after turn 1|{}",
            fixture.rev("HEAD")
        )
    );
}

#[tokio::test]
async fn the_in_process_commit_is_the_very_commit_the_cli_writes() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    std::fs::write(dir.join("README"), "changed\n").unwrap();
    std::fs::write(dir.join("new.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(dir.join("new.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_file(dir.join("src/util.rs")).unwrap();
    let branch = subtask_ref(&run_id(), 1);

    let in_process = repo
        .checkpoint_with(&worktree, "turn 1", CommitPath::Fastest)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        repo.ref_target(&branch).unwrap(),
        Some(in_process),
        "the branch moved to the in-process commit"
    );
    assert_eq!(
        git_in(&fixture.home(), dir, &["status", "--porcelain"]),
        "",
        "the worktree is clean against its moved branch"
    );
    // The same staged work committed again by the CLI, from the same tip.
    fixture.git(&["update-ref", &branch, &base.to_string()]);
    let by_cli = repo
        .checkpoint_with(&worktree, "turn 1", CommitPath::Cli)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(
        in_process, by_cli,
        "same tree, parent, message, author, committer and dates: the same commit"
    );
    assert_eq!(fixture.rev(&format!("{in_process}^")), base);
}

#[tokio::test]
async fn an_index_libgit2_cannot_read_is_committed_by_the_cli_whole() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    // A split index carries the mandatory `link` extension, which libgit2 cannot read.
    git_in(&fixture.home(), dir, &["update-index", "--split-index"]);
    std::fs::write(dir.join("src/new.rs"), "pub fn new() {}\n").unwrap();

    let commit = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    assert_eq!(
        fixture.git(&["ls-tree", "-r", "--name-only", &commit.to_string()]),
        "README\nsrc/lib.rs\nsrc/new.rs\nsrc/util.rs",
        "every file of the split index is in the commit, none recorded as deleted"
    );
    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(commit)
    );
}

#[tokio::test]
async fn a_worktree_whose_head_left_its_branch_commits_through_its_head_as_git_would() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    git_in(&fixture.home(), dir, &["checkout", "--quiet", "--detach"]);
    std::fs::write(dir.join("README"), "detached work\n").unwrap();

    let commit = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    assert_eq!(
        git_in(&fixture.home(), dir, &["rev-parse", "HEAD"]),
        commit.to_string(),
        "the commit is on the worktree's detached HEAD"
    );
    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(base),
        "the branch HEAD left is not moved behind its back"
    );
}
