//! Host-side git never runs a program the repository names and never follows a
//! worktree's `.git` file.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use grove::git::{
    ApplyOutcome, ApplyRequest, GitError, GitOptions, MergeOutcome, Repo, subtask_ref,
};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::{GitFixture, git_in};

/// A script that records its name in `markers/` and passes stdin through.
fn marker_script(dir: &Path, name: &str) -> PathBuf {
    let markers = dir.join("markers");
    std::fs::create_dir_all(&markers).unwrap();
    let script = dir.join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}/{name}\ncat\n", markers.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn markers(fixture: &GitFixture) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(fixture.dir.path().join("markers"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Plants hooks (in `.git/hooks` and in a configured `core.hooksPath`), an fsmonitor,
/// and filter, textconv and merge drivers in the repository's own config.
fn plant_programs(fixture: &GitFixture) {
    let hooks = [
        "pre-commit",
        "post-commit",
        "post-checkout",
        "post-merge",
        "reference-transaction",
        "post-index-change",
        "pre-auto-gc",
    ];
    let custom_hooks = fixture.dir.path().join("custom-hooks");
    std::fs::create_dir_all(&custom_hooks).unwrap();
    for hook in hooks {
        let script = marker_script(fixture.dir.path(), &format!("hook-{hook}"));
        std::fs::copy(&script, fixture.repo.join(".git/hooks").join(hook)).unwrap();
        std::fs::copy(&script, custom_hooks.join(hook)).unwrap();
    }
    let fsmonitor = marker_script(fixture.dir.path(), "fsmonitor");
    let filter = marker_script(fixture.dir.path(), "filter");
    let textconv = marker_script(fixture.dir.path(), "textconv");
    let merge_driver = marker_script(fixture.dir.path(), "merge-driver");
    for (key, value) in [
        ("core.hooksPath", custom_hooks.to_str().unwrap()),
        ("core.fsmonitor", fsmonitor.to_str().unwrap()),
        ("filter.evil.clean", filter.to_str().unwrap()),
        ("filter.evil.smudge", filter.to_str().unwrap()),
        ("filter.evil.required", "true"),
        ("diff.evil.textconv", textconv.to_str().unwrap()),
        ("merge.evil.driver", merge_driver.to_str().unwrap()),
    ] {
        fixture.git(&["config", key, value]);
    }
}

#[tokio::test]
async fn planted_hooks_fsmonitor_and_drivers_never_run_through_a_whole_run() {
    let fixture = project();
    fixture.write(".gitattributes", "*.txt filter=evil diff=evil merge=evil\n");
    fixture.write("shared.txt", "one\ntwo\nthree\n");
    std::fs::remove_file(fixture.repo.join(".git/hooks/pre-commit.sample")).ok();
    fixture.commit_all("attributes");
    plant_programs(&fixture);
    assert_eq!(
        markers(&fixture),
        Vec::<String>::new(),
        "setup itself ran nothing"
    );
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");

    let first = filled_worktree(&repo, base, 1).await;
    commit_in(
        &repo,
        &first,
        &[("shared.txt", "ONE\ntwo\nthree\n"), ("new.txt", "n\n")],
    )
    .await;
    let second = filled_worktree(&repo, base, 2).await;
    commit_in(&repo, &second, &[("shared.txt", "one\ntwo\nTHREE\n")]).await;
    let head = repo
        .ref_target(&subtask_ref(&run_id(), 1))
        .unwrap()
        .unwrap();
    let diff = repo.diff(base, head, 10_000).await.unwrap();
    repo.create_result_branch(&run_id(), base).await.unwrap();
    let outcomes = repo.merge_subtasks(&run_id(), &[1, 2]).await.unwrap();
    let applied = repo
        .apply(&ApplyRequest {
            run: run_id(),
            source: run_id().result_ref(),
            branch: "refs/heads/main".to_owned(),
            base,
        })
        .await
        .unwrap();
    repo.clean_run(&run_id()).await.unwrap();

    assert_eq!(
        markers(&fixture),
        Vec::<String>::new(),
        "no hook, fsmonitor or driver ran"
    );
    assert!(
        diff.patch.text.contains("+ONE"),
        "the diff shows raw content: {}",
        diff.patch.text
    );
    assert!(matches!(outcomes[0].1, MergeOutcome::Merged { .. }));
    assert_eq!(
        outcomes[1].1,
        MergeOutcome::Conflict {
            paths: vec!["shared.txt".to_owned()]
        },
        "a file whose merge driver is neutralised conflicts rather than picking a side"
    );
    assert!(
        matches!(applied, ApplyOutcome::Applied { .. }),
        "{applied:?}"
    );

    // The test could fail: plain git in the same repository does run them.
    fixture.write("shared.txt", "user edit\n");
    fixture.commit_all("plain git commit");
    fixture.git(&["diff", "HEAD~1", "--", "shared.txt"]);
    let ran = markers(&fixture);
    for expected in [
        "filter",
        "fsmonitor",
        "hook-post-commit",
        "hook-pre-commit",
        "textconv",
    ] {
        assert!(
            ran.contains(&expected.to_owned()),
            "plain git ran {expected}: {ran:?}"
        );
    }
}

#[tokio::test]
async fn a_planted_dot_git_file_in_a_worktree_is_never_followed() {
    let fixture = project();
    let repo = fixture.open().await;
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    let decoy = fixture.dir.path().join("decoy");
    std::fs::create_dir_all(&decoy).unwrap();
    git_in(
        &fixture.home(),
        &decoy,
        &["init", "--quiet", "--initial-branch=main"],
    );
    std::fs::write(decoy.join("x"), "decoy\n").unwrap();
    git_in(&fixture.home(), &decoy, &["add", "x"]);
    git_in(
        &fixture.home(),
        &decoy,
        &["commit", "--quiet", "-m", "decoy"],
    );
    let decoy_head = git_in(&fixture.home(), &decoy, &["rev-parse", "HEAD"]);
    std::fs::write(
        worktree.path().join(".git"),
        format!("gitdir: {}\n", decoy.join(".git").display()),
    )
    .unwrap();
    std::fs::write(worktree.path().join("README"), "work\n").unwrap();

    let commit = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(commit),
        "grove's branch moved"
    );
    assert_eq!(
        git_in(&fixture.home(), &decoy, &["rev-parse", "HEAD"]),
        decoy_head,
        "the decoy is untouched"
    );
    assert_eq!(
        git_in(&fixture.home(), &decoy, &["status", "--porcelain"]),
        ""
    );
    assert_eq!(
        fixture.git(&["ls-tree", "--name-only", "-r", &commit.to_string()]),
        "README\nsrc/lib.rs\nsrc/util.rs",
        "the planted .git file is not committed"
    );
}

/// A wrapper that makes the first `add`s fail as if another process held the index
/// lock, then behaves like git.
fn flaky_git(dir: &Path, failures: u32) -> PathBuf {
    let counter = dir.join("lock-failures");
    let script = dir.join("flaky-git.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = add ]; then\n    n=$(cat {c} 2>/dev/null || echo 0)\n    if [ \"$n\" -lt {failures} ]; then\n      echo $((n + 1)) > {c}\n      echo \"fatal: Unable to create '/repo/.git/index.lock': File exists.\" >&2\n      exit 128\n    fi\n  fi\ndone\nexec git \"$@\"\n",
            c = counter.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[tokio::test]
async fn another_process_holding_a_lock_is_waited_out_and_a_stuck_lock_is_reported() {
    let fixture = project();
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: flaky_git(fixture.dir.path(), 2),
            ..fixture.options()
        },
    )
    .await
    .unwrap();
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    std::fs::write(worktree.path().join("README"), "change\n").unwrap();

    let committed = worktree.checkpoint(&repo, "turn 1").await.unwrap();
    assert!(
        committed.is_some(),
        "two lock collisions are retried through"
    );

    let stuck = fixture.dir.path().join("stuck");
    std::fs::create_dir_all(&stuck).unwrap();
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: flaky_git(&stuck, 1000),
            ..fixture.options()
        },
    )
    .await
    .unwrap();
    std::fs::write(worktree.path().join("README"), "another change\n").unwrap();
    let error = worktree.checkpoint(&repo, "turn 2").await.unwrap_err();
    assert!(
        matches!(&error, grove::worktree::CheckpointError::Git(GitError::Command { stderr, .. }) if stderr.contains("index.lock")),
        "a lock that never goes away ends in an error naming it: {error}"
    );
}
