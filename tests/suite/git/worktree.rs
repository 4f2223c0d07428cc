//! Worktree creation: branch at base, outside the work tree, usable before the fill
//! completes, and recovery from leftovers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use grove::git::{GitError, GitOptions, Repo, RunId, subtask_ref};

use grove::worktree::{CheckpointError, CreateError, WorktreeSpec};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::GitFixture;

/// A git wrapper that runs `git` but, for `reset` (the fill), first runs `fill_step`.
fn git_wrapper(dir: &Path, fill_step: &str) -> PathBuf {
    let script = dir.join("git-wrapper.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor arg in \"$@\"; do\n  if [ \"$arg\" = reset ]; then\n    {fill_step}\n  fi\ndone\nexec git \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

pub(super) fn spec(repo: &Repo, fixture: &GitFixture, n: u32) -> WorktreeSpec {
    WorktreeSpec {
        run: run_id(),
        subtask: n,
        base: fixture.rev("HEAD"),
        path: repo.default_worktrees_dir(&run_id()).join(n.to_string()),
    }
}

#[tokio::test]
async fn a_worktree_is_usable_before_its_fill_completes_and_fills_in_the_background() {
    let fixture = project();
    let gate = fixture.dir.path().join("gate");
    let wrapper = git_wrapper(
        fixture.dir.path(),
        &format!("while [ ! -e {} ]; do sleep 0.01; done", gate.display()),
    );
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: wrapper,
            ..fixture.options()
        },
    )
    .await
    .unwrap();
    let base = fixture.rev("HEAD");

    let worktree = repo
        .create_worktree(spec(&repo, &fixture, 1))
        .await
        .unwrap();

    assert!(
        !worktree.is_filled(),
        "the handle comes back while the fill is held"
    );
    assert!(
        !worktree.path().join("README").exists(),
        "files arrive only with the fill"
    );
    assert_eq!(
        repo.ref_target(&subtask_ref(&run_id(), 1)).unwrap(),
        Some(base),
        "branch grove/<run>/1 starts at the base"
    );
    assert!(
        !worktree.path().starts_with(&fixture.repo)
            || worktree.path().starts_with(fixture.repo.join(".git")),
        "the worktree is outside the user's work tree: {}",
        worktree.path().display()
    );

    std::fs::write(&gate, b"").unwrap();
    worktree.ready().await.unwrap();

    assert!(worktree.is_filled());
    for file in ["README", "src/lib.rs", "src/util.rs"] {
        assert_eq!(
            std::fs::read(worktree.path().join(file)).unwrap(),
            fixture.read(file),
            "{file} is checked out byte for byte"
        );
    }
    assert_eq!(
        fixture.git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "the user's git status never sees grove's worktrees"
    );
}

#[tokio::test]
async fn a_failed_fill_is_reported_and_blocks_commits() {
    let fixture = project();
    let wrapper = git_wrapper(
        fixture.dir.path(),
        "echo 'fatal: simulated checkout failure' >&2; exit 128",
    );
    let repo = Repo::open(
        &fixture.repo,
        GitOptions {
            program: wrapper,
            ..fixture.options()
        },
    )
    .await
    .unwrap();

    let worktree = repo
        .create_worktree(spec(&repo, &fixture, 1))
        .await
        .unwrap();

    let error = worktree.ready().await.unwrap_err();
    assert!(
        matches!(&error, CreateError::FillFailed { reason, .. } if reason.to_string().contains("simulated checkout failure")),
        "the fill error carries git's stderr: {error}"
    );
    assert!(
        matches!(
            worktree.checkpoint(&repo, "x").await,
            Err(CheckpointError::Unfilled(CreateError::FillFailed { .. }))
        ),
        "a half-filled tree is never committed (it would record deletions)"
    );
}

#[tokio::test]
async fn eight_worktrees_created_concurrently_all_succeed() {
    let fixture = project();
    let repo = fixture.open().await;
    let creations = (1..=8).map(|n| {
        let (repo, spec) = (repo.clone(), spec(&repo, &fixture, n));
        async move {
            let worktree = repo.create_worktree(spec).await?;
            worktree.ready().await.map(|()| worktree)
        }
    });
    let worktrees = futures_util::future::join_all(creations).await;
    let mut expected = Vec::new();
    for (n, worktree) in (1..=8).zip(worktrees) {
        let worktree = worktree.unwrap_or_else(|e| panic!("worktree {n} failed: {e}"));
        assert_eq!(
            std::fs::read(worktree.path().join("README")).unwrap(),
            b"hello\n"
        );
        expected.push((
            std::fs::canonicalize(worktree.path()).unwrap(),
            format!("refs/heads/grove/r1/{n}"),
        ));
    }
    // What git registered: each worktree its own directory on its own branch.
    let listing = fixture.git(&["worktree", "list", "--porcelain"]);
    let mut registered: Vec<(std::path::PathBuf, String)> = listing
        .split("\n\n")
        .filter_map(|entry| {
            let path = entry.lines().find_map(|l| l.strip_prefix("worktree "))?;
            let branch = entry.lines().find_map(|l| l.strip_prefix("branch "))?;
            Some((std::fs::canonicalize(path).unwrap(), branch.to_owned()))
        })
        .filter(|(_, branch)| branch.starts_with("refs/heads/grove/"))
        .collect();
    registered.sort();
    expected.sort();
    assert_eq!(
        registered, expected,
        "eight distinct worktrees, each on its own subtask branch:\n{listing}"
    );
}

#[tokio::test]
async fn an_existing_branch_is_reused_with_its_work_and_a_diverged_one_is_refused() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let earlier_work = commit_in(&repo, &worktree, &[("notes.txt", "kept\n")]).await;
    repo.remove_worktree(&worktree).await.unwrap();

    let again = filled_worktree(&repo, base, 1).await;
    assert_eq!(
        again.start(),
        earlier_work,
        "the earlier attempt's commit is kept"
    );
    assert_eq!(
        std::fs::read(again.path().join("notes.txt")).unwrap(),
        b"kept\n"
    );

    fixture.commit_on_branch("grove/r1/2", "HEAD", &[("x", Some("x"))]);
    let unrelated = fixture.commit_on_branch("elsewhere", "HEAD", &[("y", Some("y"))]);
    fixture.git(&["branch", "--force", "grove/r1/2", &unrelated.to_string()]);
    fixture.commit_all("user moves on");
    let moved_base = fixture.rev("HEAD");
    let result = repo
        .create_worktree(WorktreeSpec {
            base: moved_base,
            ..spec(&repo, &fixture, 2)
        })
        .await;
    assert!(
        matches!(result, Err(CreateError::BranchDiverged { .. })),
        "a branch without the base is not silently reused: {result:?}"
    );
}

#[tokio::test]
async fn a_hand_deleted_worktree_is_recreated_even_when_locked() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let first = filled_worktree(&repo, base, 1).await;
    std::fs::remove_dir_all(first.path()).unwrap();
    let second = filled_worktree(&repo, base, 2).await;
    fixture.git(&["worktree", "lock", second.path().to_str().unwrap()]);
    std::fs::remove_dir_all(second.path()).unwrap();

    let first_again = filled_worktree(&repo, base, 1).await;
    let second_again = filled_worktree(&repo, base, 2).await;

    for worktree in [first_again, second_again] {
        assert_eq!(
            std::fs::read(worktree.path().join("src/util.rs")).unwrap(),
            fixture.read("src/util.rs"),
            "worktree {} is back and filled",
            worktree.subtask()
        );
    }
}

#[tokio::test]
async fn an_existing_worktree_is_reused_without_losing_uncommitted_work() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    std::fs::write(worktree.path().join("wip.txt"), "uncommitted\n").unwrap();

    let again = filled_worktree(&repo, base, 1).await;

    assert_eq!(again.path(), worktree.path());
    assert_eq!(
        std::fs::read(again.path().join("wip.txt")).unwrap(),
        b"uncommitted\n"
    );
}

#[tokio::test]
async fn a_path_grove_does_not_own_is_never_written_into() {
    let fixture = project();
    let repo = fixture.open().await;
    let spec = spec(&repo, &fixture, 1);
    std::fs::create_dir_all(&spec.path).unwrap();
    std::fs::write(spec.path.join("precious"), "mine").unwrap();

    let result = repo.create_worktree(spec.clone()).await;

    assert!(
        matches!(result, Err(CreateError::WorktreePathOccupied { .. })),
        "{result:?}"
    );
    assert_eq!(std::fs::read(spec.path.join("precious")).unwrap(), b"mine");
}

#[tokio::test]
async fn a_registration_whose_branch_was_never_made_says_so_and_is_left_as_it_was() {
    let fixture = project();
    let repo = fixture.open().await;
    let spec = spec(&repo, &fixture, 1);
    filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    // What a creation cut short between the registration and the branch leaves.
    let branch = subtask_ref(&spec.run, spec.subtask);
    fixture.git(&["update-ref", "-d", &branch]);

    let result = repo.create_worktree(spec.clone()).await;

    assert!(
        matches!(&result, Err(CreateError::BranchNeverMade { path, rev }) if *path == spec.path && *rev == branch),
        "the creation says its branch was never made, where: {result:?}"
    );
    assert_eq!(
        result.unwrap_err().to_string(),
        format!("{branch} does not exist in the repository"),
        "told as an unknown revision is"
    );
    assert!(spec.path.join("README").exists(), "nothing is removed");
}

#[tokio::test]
async fn opening_a_directory_outside_any_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let result = Repo::open(dir.path(), GitOptions::default()).await;
    assert!(
        matches!(result, Err(GitError::NotARepository { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_branch_live_in_another_worktree_is_never_checked_out_twice() {
    let fixture = project();
    let repo = fixture.open().await;
    let first = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;

    let result = repo
        .create_worktree(WorktreeSpec {
            path: fixture.dir.path().join("elsewhere"),
            ..spec(&repo, &fixture, 1)
        })
        .await;

    assert!(
        matches!(&result, Err(CreateError::BranchCheckedOutElsewhere { path, .. }) if path == first.path()),
        "{result:?}"
    );
}

/// The entries of `dir` (none when it does not exist), sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_worktrees_removed_concurrently_leave_nothing_registered_or_on_disk() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    // As in a run: while one batch of subtasks is removed, the next batch is created.
    let mut live =
        futures_util::future::join_all((1..=16).map(|n| filled_worktree(&repo, base, n))).await;
    for round in 1..=6 {
        for worktree in &live {
            std::fs::write(worktree.path().join("wip.txt"), format!("round {round}\n")).unwrap();
        }
        let next: Vec<u32> = if round < 6 {
            let first = if round % 2 == 1 { 17 } else { 1 };
            (first..first + 16).collect()
        } else {
            Vec::new()
        };
        let removals = futures_util::future::join_all(live.iter().map(|w| repo.remove_worktree(w)));
        let creations = futures_util::future::join_all(next.iter().map(|n| {
            let spec = spec(&repo, &fixture, *n);
            let repo = repo.clone();
            async move {
                let worktree = repo.create_worktree(spec).await?;
                worktree.ready().await.map(|()| worktree)
            }
        }));
        let (removed, created) = futures_util::future::join(removals, creations).await;
        let mut failures: Vec<String> = removed
            .iter()
            .filter_map(|result| result.as_ref().err().map(ToString::to_string))
            .collect();
        failures.extend(
            created
                .iter()
                .filter_map(|result| result.as_ref().err().map(ToString::to_string)),
        );
        assert_eq!(
            failures,
            Vec::<String>::new(),
            "round {round}: every removal and creation succeeds"
        );
        live = created.into_iter().map(Result::unwrap).collect();
        let registered = entries(&repo.common_dir().join("worktrees")).len();
        assert_eq!(
            registered,
            live.len(),
            "round {round}: exactly the live worktrees stay registered"
        );
    }
    // Deletions run in the background; the disk is what is asserted.
    grove::worktree::settle_deletions().await;
    assert_eq!(
        (
            entries(&repo.common_dir().join("worktrees")),
            entries(&repo.default_worktrees_dir(&run_id())),
            repo.common_dir().join("grove/trash").exists(),
        ),
        (Vec::new(), Vec::new(), false),
        "in the end nothing stays registered and no directory is left behind, not even \
         an empty trash folder"
    );
    assert_eq!(
        fixture.git(&["show", &format!("{}:wip.txt", subtask_ref(&run_id(), 17))]),
        "round 6",
        "uncommitted work was committed to the branch before its worktree went"
    );
}

#[tokio::test]
async fn a_runs_worktrees_live_in_the_cache_outside_every_git_dir_and_the_work_tree() {
    let fixture = project();
    let repo = fixture.open().await;
    let worktree = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    let path = worktree.path();
    let git_components: Vec<String> = path
        .components()
        .map(|part| part.as_os_str().to_string_lossy().to_ascii_lowercase())
        .filter(|part| part == ".git")
        .collect();
    let cache = fixture.home().canonicalize().unwrap().join(".cache/grove");
    let folder = path
        .strip_prefix(&cache)
        .map(|rest| rest.components().next().unwrap().as_os_str().to_owned());
    assert_eq!(
        (
            git_components,
            path.starts_with(&fixture.repo),
            path.starts_with(repo.common_dir()),
            path.parent().unwrap().file_name().unwrap().to_str(),
        ),
        (Vec::<String>::new(), false, false, Some(run_id().as_str())),
        "{}: no .git component, outside the work tree and the git dir, one folder per run",
        path.display()
    );
    let folder = folder
        .unwrap_or_else(|_| panic!("{} is under {}", path.display(), cache.display()))
        .to_string_lossy()
        .into_owned();
    assert!(
        folder.starts_with("repo-") && folder.len() == "repo-".len() + 12,
        "one folder per repository, named after it with a short hash: {folder}"
    );
}

#[tokio::test]
async fn a_repository_at_a_non_utf8_path_gets_its_worktrees_and_gives_them_back() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use crate::support::git_fixture::{git_in, sealed_env, write_file};

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let home = root.join("home");
    let path = root.join(OsStr::from_bytes(b"caf\xe9 repo"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&path).unwrap();
    git_in(&home, &path, &["init", "--quiet", "--initial-branch=main"]);
    write_file(&path, "README", "hello\n");
    git_in(&home, &path, &["add", "README"]);
    git_in(&home, &path, &["commit", "--quiet", "-m", "initial"]);
    let repo = Repo::open(
        &path,
        GitOptions {
            env: sealed_env(&home),
            ..GitOptions::default()
        },
    )
    .await
    .unwrap();
    let base = repo.resolve("HEAD").unwrap();
    let places = [
        (1, repo.default_worktrees_dir(&run_id()).join("1")),
        (2, path.join(OsStr::from_bytes(b"worktrees-\xff")).join("2")),
    ];
    for (n, place) in places {
        let worktree = repo
            .create_worktree(WorktreeSpec {
                run: run_id(),
                subtask: n,
                base,
                path: place.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("worktree {n} at {}: {e}", place.display()));
        worktree.ready().await.unwrap();
        assert_eq!(
            std::fs::read(worktree.path().join("README")).unwrap(),
            b"hello\n",
            "worktree {n} is filled"
        );
        commit_in(&repo, &worktree, &[("new.txt", "work\n")]).await;
        repo.remove_worktree(&worktree).await.unwrap();
        assert!(!place.exists(), "worktree {n} is gone");
    }
    assert_eq!(
        entries(&path.join(".git/worktrees")),
        Vec::<String>::new(),
        "nothing stays registered"
    );
    let branches = git_in(
        &home,
        &path,
        &["for-each-ref", "--format=%(refname)", "refs/heads/grove/"],
    );
    assert_eq!(
        branches,
        format!(
            "{}\n{}",
            subtask_ref(&run_id(), 1),
            subtask_ref(&run_id(), 2)
        ),
        "both subtasks' work is on their branches"
    );
}

#[tokio::test]
async fn a_run_started_before_the_move_keeps_its_worktrees_and_clean_archives_them() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let legacy = repo.legacy_worktrees_dir(&run_id());
    assert!(
        legacy.starts_with(repo.common_dir()),
        "the old layout: {}",
        legacy.display()
    );
    let old = repo
        .create_worktree(WorktreeSpec {
            run: run_id(),
            subtask: 1,
            base,
            path: legacy.join("1"),
        })
        .await
        .unwrap();
    old.ready().await.unwrap();
    std::fs::write(old.path().join("wip.txt"), "old layout work\n").unwrap();

    assert_eq!(
        repo.run_worktrees_dir(&run_id(), None).unwrap(),
        legacy.canonicalize().unwrap(),
        "a resumed old run finds its worktrees where they are"
    );
    let configured = fixture.dir.path().join("elsewhere");
    assert_eq!(
        repo.run_worktrees_dir(&run_id(), Some(&configured))
            .unwrap(),
        legacy.canonicalize().unwrap(),
        "even when [worktree] dir points elsewhere now"
    );
    assert_eq!(
        repo.run_worktrees_dir(&RunId::new("r2").unwrap(), None)
            .unwrap(),
        repo.default_worktrees_dir(&RunId::new("r2").unwrap()),
        "a new run goes to the cache"
    );

    let report = repo.clean_run(&run_id()).await.unwrap();

    assert_eq!(
        (
            report.removed_worktrees,
            report
                .archived
                .iter()
                .map(|a| a.reference.clone())
                .collect::<Vec<_>>(),
            entries(&repo.common_dir().join("worktrees")),
            legacy.exists(),
        ),
        (
            vec![legacy.canonicalize().unwrap_or(legacy.clone()).join("1")],
            vec!["refs/grove/archive/r1/1".to_owned()],
            Vec::<String>::new(),
            false
        ),
        "clean finds the old-layout worktree, archives it and removes it"
    );
    assert_eq!(
        fixture.git(&["show", "refs/grove/archive/r1/1:wip.txt"]),
        "old layout work"
    );
}

#[test]
fn worktree_dir_in_the_project_file_is_an_absolute_path_outside_any_git_dir() {
    use grove::settings::config::ProjectConfig;

    let parse = |value: &str| {
        ProjectConfig::parse(
            Path::new("/repo/.grove/config.toml"),
            &format!("[worktree]\ndir = {value}\n"),
        )
        .map(|config| config.settings.resolve("t").options.worktrees_dir)
        .map_err(|error| error.to_string())
    };
    assert_eq!(
        parse("\"/var/tmp/grove-worktrees\""),
        Ok(Some(PathBuf::from("/var/tmp/grove-worktrees"))),
        "an absolute directory is taken"
    );
    for refused in [
        "\"worktrees\"",
        "\"/repo/.git/wt\"",
        "\"/repo/.GIT/wt\"",
        "3",
    ] {
        let error = parse(refused).unwrap_err();
        assert!(
            error.contains("worktree.dir") && error.contains("outside any .git directory"),
            "{refused} is refused naming the key: {error}"
        );
    }
}

#[tokio::test]
async fn grove_clean_of_a_run_started_before_the_move_archives_and_removes_its_worktrees() {
    let fixture = project();
    let repo = fixture.open().await;
    let run = RunId::new("20261129-215530-7f3a").unwrap();
    let legacy = repo.legacy_worktrees_dir(&run);
    let old = repo
        .create_worktree(WorktreeSpec {
            run: run.clone(),
            subtask: 1,
            base: fixture.rev("HEAD"),
            path: legacy.join("1"),
        })
        .await
        .unwrap();
    old.ready().await.unwrap();
    std::fs::write(old.path().join("wip.txt"), "old layout work\n").unwrap();

    let output = crate::support::grove::Grove::in_repo(&fixture).grove(["clean", run.as_str()]);

    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        (
            output.status.code(),
            stdout.lines().next().unwrap_or_default().to_owned(),
            entries(&repo.common_dir().join("worktrees")),
            legacy.exists(),
        ),
        (
            Some(0),
            "archived subtask 1 at refs/grove/archive/20261129-215530-7f3a/1".to_owned(),
            Vec::<String>::new(),
            false,
        ),
        "grove clean finds the worktree under .git/grove/runs/, archives and removes it:\n\
         {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        fixture.git(&["show", "refs/grove/archive/20261129-215530-7f3a/1:wip.txt"]),
        "old layout work",
        "its uncommitted work is in the archive"
    );
}

#[tokio::test]
async fn clean_sweeps_what_a_removal_by_a_dead_grove_left_in_the_trash() {
    let fixture = project();
    let repo = fixture.open().await;
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let trash = repo.common_dir().join("grove/trash");
    let left = trash.join(format!("tree-{dead}-0"));
    std::fs::create_dir_all(left.join("src")).unwrap();
    std::fs::write(left.join("src/lib.rs"), "half deleted").unwrap();
    let ours = trash.join(format!("tree-{}-9", std::process::id()));
    std::fs::create_dir_all(&ours).unwrap();

    repo.clean_run(&run_id()).await.unwrap();
    grove::worktree::settle_deletions().await;

    assert_eq!(
        entries(&trash),
        vec![format!("tree-{}-9", std::process::id())],
        "a dead grove's leftovers go; a live one's removal in flight is left alone"
    );
}

#[tokio::test]
async fn a_registration_written_in_process_is_one_git_reads_prunes_and_removes() {
    let fixture = project();
    let repo = fixture.open().await;
    let other_run = RunId::new("r2").unwrap();
    let first = filled_worktree(&repo, fixture.rev("HEAD"), 1).await;
    // Another run's subtask 1: the same directory name, so another admin dir.
    let second = repo
        .create_worktree(WorktreeSpec {
            path: repo.default_worktrees_dir(&other_run).join("1"),
            run: other_run.clone(),
            ..spec(&repo, &fixture, 1)
        })
        .await
        .unwrap();
    second.ready().await.unwrap();

    let mut seen = Vec::new();
    for worktree in [&first, &second] {
        let inside = |args: &[&str]| {
            fixture.git(&[&["-C", worktree.path().to_str().unwrap()], args].concat())
        };
        seen.push((
            inside(&["rev-parse", "--abbrev-ref", "HEAD"]),
            inside(&["rev-parse", "--git-dir"]) == worktree.admin_dir().to_str().unwrap(),
            inside(&["status", "--porcelain"]),
        ));
    }
    assert_eq!(
        seen,
        vec![
            ("grove/r1/1".to_owned(), true, String::new()),
            ("grove/r2/1".to_owned(), true, String::new()),
        ],
        "git inside each tree finds its own admin dir, branch and a clean checkout"
    );
    assert_ne!(first.admin_dir(), second.admin_dir());
    assert_eq!(
        fixture.git(&["worktree", "prune", "--dry-run", "--verbose"]),
        "",
        "git finds nothing to prune in complete registrations"
    );
    assert_eq!(
        fixture.git(&["reflog", "-1", "--format=%gs", "grove/r1/1"]),
        format!("branch: Created from {}", fixture.rev("HEAD"))
    );

    fixture.git(&[
        "worktree",
        "remove",
        "--force",
        second.path().to_str().unwrap(),
    ]);
    assert!(
        !second.admin_dir().exists() && !second.path().exists(),
        "git removes what grove registered"
    );
}
