//! Issue 31, nothing left behind: whatever stops grove (here `kill -9`, which gives it no
//! chance to clean up) during a subtask's check or a result-check fixer, the next
//! `grove resume` applies the right result once and leaves nothing the run made
//! registered, on disk, mounted or running; a `grove clean` of the killed run instead
//! removes all of it and names what it removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;

use grove::worktree::WorktreeMode;

use crate::suite::escapes::mode_or_skip;
use crate::suite::result_check::{
    A_RENAMED, B_RENAMED, CHECK, CORE_RENAMED, fixer_held_while, package,
};
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply};
use crate::support::git_fixture::{GitFixture, Leftovers};
use crate::support::grove::{Grove, only_run, stderr};
use crate::support::processes::{mounts_under, running_under, running_with_arg, settled};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    USER_TASK, first_user_text, lead_reply, repo_with_rules, reviewer_reply, worker_reply,
};

/// One subtask writing `one.txt`.
const ONE: &[(&str, Option<&str>)] = &[("First.\nWRITE one.txt 1", None)];

/// What a run left: its registrations and folders, the processes working under the
/// cache directory or whose argument is `marker` (if any), and every mount under the cache
/// directory any process sees.
type Left = (Leftovers, Vec<i32>, Vec<String>);

fn left(fixture: &GitFixture, marker: Option<&str>) -> Left {
    let cache = fixture.home().join(".cache").join("grove");
    let running = || {
        let mut pids = running_under(&cache);
        pids.extend(marker.map(running_with_arg).unwrap_or_default());
        pids.sort_unstable();
        pids.dedup();
        pids
    };
    (fixture.leftovers(), settled(running), mounts_under(&cache))
}

/// Nothing: no registration, folder, process or mount.
fn nothing() -> Left {
    (Leftovers::default(), Vec::new(), Vec::new())
}

/// The subjects of the commits the user's branch gained since `base`, oldest first.
fn gained(fixture: &GitFixture, base: &str) -> Vec<String> {
    let log = fixture.git(&["log", "--reverse", "--format=%s", &format!("{base}..main")]);
    log.lines().map(str::to_owned).collect()
}

/// A repository in `mode` whose check is `sleep <marker>` (seconds), not run on the
/// base; `None` when the mode cannot run here (the test is skipped, saying so).
async fn sleeping_check(test: &str, mode: WorktreeMode, marker: &str) -> Option<GitFixture> {
    let fixture = repo_with_rules();
    if !mode_or_skip(test, &fixture, mode).await {
        return None;
    }
    fixture.write(
        ".grove/config.toml",
        format!(
            "[worktree]\nmode = \"{mode}\"\n\n[check]\ncommand = \"sleep {marker}\"\n\
             base = \"skip\"\n"
        ),
    );
    fixture.commit_all("grove's configuration");
    Some(fixture)
}

/// Starts `grove run` of one subtask and kills it (`kill -9`) while that subtask's check
/// (`sleep <marker>`) runs; the run's id.
async fn killed_during_the_check(grove: &Grove, marker: &str) -> String {
    let watched = grove
        .spawn_until(["run", USER_TASK], |line| {
            line.starts_with("S1: checking with ")
        })
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while running_with_arg(marker).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the check never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    watched.signal(Signal::SIGKILL);
    let killed = watched.output().await;
    assert_eq!(killed.status.code(), None, "killed: {}", stderr(&killed));
    only_run(grove).await
}

/// `kill -9` while a subtask's check runs, then `grove resume`: the check runs again,
/// the change lands on the user's branch once, and nothing of the run is left — no
/// worktree, branch, copy-on-write folder, mount or check process.
async fn a_kill_during_a_subtasks_check_leaves_nothing_once_resumed(
    mode: WorktreeMode,
    marker: &str,
) {
    let test = "a_kill_during_a_subtasks_check_leaves_nothing_once_resumed";
    let Some(fixture) = sleeping_check(test, mode, marker).await else {
        return;
    };
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, ONE),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let run_id = killed_during_the_check(&grove, marker).await;

    let resumed = grove.grove_async(["resume", &run_id]).await;

    server.assert_no_violations();
    let err = stderr(&resumed);
    assert_eq!(
        (
            resumed.status.code(),
            fixture.read("one.txt"),
            gained(&fixture, &base).len()
        ),
        (Some(0), b"1\n".to_vec(), 1),
        "the resume checks again and applies the one change once ({mode})\n{err}"
    );
    assert_eq!(
        left(&fixture, Some(marker)),
        nothing(),
        "nothing of the run is left registered, on disk, mounted or running ({mode})\n{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_during_a_subtasks_check_leaves_nothing_once_resumed_in_a_git_worktree() {
    a_kill_during_a_subtasks_check_leaves_nothing_once_resumed(WorktreeMode::Git, "2.71801").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_during_a_subtasks_check_leaves_nothing_once_resumed_in_a_copy_on_write_tree() {
    a_kill_during_a_subtasks_check_leaves_nothing_once_resumed(WorktreeMode::Overlay, "2.71802")
        .await;
}

/// `kill -9` while a subtask's check runs, then `grove clean` of the run: its work is
/// archived, and nothing of the run is left — and the clean names what it removed.
async fn grove_clean_after_a_kill_removes_what_the_run_left(mode: WorktreeMode, marker: &str) {
    let test = "grove_clean_after_a_kill_removes_what_the_run_left";
    let Some(fixture) = sleeping_check(test, mode, marker).await else {
        return;
    };
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, ONE),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let run_id = killed_during_the_check(&grove, marker).await;
    let worktree = fixture.worktree_dir(&run_id, 1);

    let cleaned = grove.grove_async(["clean", &run_id]).await;

    let out = String::from_utf8_lossy(&cleaned.stdout).into_owned();
    let archive = fixture.git(&["show", &format!("refs/grove/archive/{run_id}/1:one.txt")]);
    assert_eq!(
        (
            cleaned.status.code(),
            out.lines()
                .any(|line| line == format!("removed worktree {}", worktree.display())),
            archive,
        ),
        (Some(0), true, "1".to_owned()),
        "the clean archives S1's work and names the worktree it removed ({mode})\n{out}{}",
        stderr(&cleaned)
    );
    assert_eq!(
        left(&fixture, Some(marker)),
        nothing(),
        "after the clean nothing of the run is left registered, on disk, mounted or \
         running ({mode})\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grove_clean_after_a_kill_removes_what_the_run_left_in_a_git_worktree() {
    grove_clean_after_a_kill_removes_what_the_run_left(WorktreeMode::Git, "2.71803").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grove_clean_after_a_kill_removes_what_the_run_left_in_a_copy_on_write_tree() {
    grove_clean_after_a_kill_removes_what_the_run_left(WorktreeMode::Overlay, "2.71804").await;
}

/// `kill -9` while the result-check fixer works (it wrote its fix; its next model call
/// hangs), then `grove resume`: the fixer goes on, the result (three pieces and the
/// fix) is applied once, and nothing of the run is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_during_the_fixer_leaves_nothing_once_resumed() {
    let fixture = package(CHECK, 1);
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let hang = Arc::new(AtomicBool::new(true));
    let server = FakeServer::with_responder(fixer_held_while(Arc::clone(&hang))).await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let watched = grove
        .spawn_until(["run", "rename greet"], |line| {
            line.starts_with("worker S4: started")
        })
        .await;
    let run_id = only_run(&grove).await;
    let fixed = fixture.worktree_dir(&run_id, 4).join("pkg/b.py");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read(&fixed).ok().as_deref() != Some(B_RENAMED.as_bytes()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the fixer never wrote"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    watched.signal(Signal::SIGKILL);
    let killed = watched.output().await;
    assert_eq!(killed.status.code(), None, "killed: {}", stderr(&killed));

    hang.store(false, Ordering::SeqCst);
    let resumed = grove.grove_async(["resume", &run_id]).await;

    let err = stderr(&resumed);
    let files: Vec<Vec<u8>> = ["pkg/core.py", "pkg/a.py", "pkg/b.py"]
        .iter()
        .map(|path| fixture.read(path))
        .collect();
    assert_eq!(
        (resumed.status.code(), files, gained(&fixture, &base).len()),
        (
            Some(0),
            vec![
                CORE_RENAMED.as_bytes().to_vec(),
                A_RENAMED.as_bytes().to_vec(),
                B_RENAMED.as_bytes().to_vec()
            ],
            4
        ),
        "the resumed fixer's result is applied once: three pieces and the fix\n{err}"
    );
    assert_eq!(
        left(&fixture, None),
        nothing(),
        "nothing of the run is left registered, on disk, mounted or running\n{err}"
    );
}

/// Two subtasks; the second's worker does not answer while `hang` is set.
const TWO: &[(&str, Option<&str>)] = &[
    ("First.\nWRITE one.txt 1", None),
    ("Second.\nWRITE two.txt 2", None),
];

/// Runs [`TWO`] in `fixture` with S2's worker held while `hang` is set, and kills grove
/// (SIGKILL) right after it printed "S1: merged": S1's cleanup still waits for its turn.
/// The server (kept alive for the resume), the runner and the run's id.
async fn killed_after_s1_merged(
    fixture: &GitFixture,
    hang: &Arc<AtomicBool>,
) -> (FakeServer, Grove, String) {
    let server = FakeServer::with_responder({
        let hang = Arc::clone(hang);
        move |request: &RecordedRequest| match who(request) {
            Who::Lead => lead_reply(request, TWO),
            Who::Worker
                if first_user_text(request).contains("Second.") && hang.load(Ordering::SeqCst) =>
            {
                Reply::Hang
            }
            Who::Worker => worker_reply(request),
            Who::Reviewer => reviewer_reply(request),
        }
    })
    .await;
    let grove = Grove::in_repo(fixture).with_server(&server);
    let watched = grove
        .spawn_until(["run", USER_TASK], |line| line.starts_with("S1: merged"))
        .await;
    watched.signal(Signal::SIGKILL);
    let killed = watched.output().await;
    assert_eq!(killed.status.code(), None, "killed: {}", stderr(&killed));
    let run_id = only_run(&grove).await;
    (server, grove, run_id)
}

/// `kill -9` right after "S1: merged" while S2 still works (so S1's cleanup waits for
/// its turn), in a copy-on-write tree, at the instant S1's cleanup is stopped between
/// discarding the tree's layers and unregistering it (made exact here by discarding them
/// as that cleanup does: the whole folder beside the tree). Then `grove resume`: S2 lands,
/// both changes are applied once, and the finished run's sweep unregisters S1's emptied
/// tree instead of refusing to commit its empty mount point and giving up on the rest:
/// no worktree, branch, copy-on-write folder, mount or process is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_in_a_merged_subtasks_cleanup_leaves_nothing_once_resumed() {
    let test = "a_kill_in_a_merged_subtasks_cleanup_leaves_nothing_once_resumed";
    let fixture = repo_with_rules();
    if !mode_or_skip(test, &fixture, WorktreeMode::Overlay).await {
        return;
    }
    fixture.write(".grove/config.toml", "[worktree]\nmode = \"overlay\"\n");
    fixture.commit_all("grove's configuration");
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let hang = Arc::new(AtomicBool::new(true));
    let (_server, grove, run_id) = killed_after_s1_merged(&fixture, &hang).await;
    let tree = fixture.worktree_dir(&run_id, 1);
    let mut layers = tree.clone().into_os_string();
    layers.push(".cow");
    let layers = std::path::PathBuf::from(layers);
    assert!(
        layers.join("upper").is_dir(),
        "S1's cleanup had not begun when grove was killed: its layers are at {}",
        layers.display()
    );
    // The overlay's own work directory is made unreadable by the kernel.
    let opened = std::process::Command::new("chmod")
        .args(["-R", "u+rwx"])
        .arg(&layers)
        .status()
        .unwrap();
    assert!(opened.success(), "chmod of {}", layers.display());
    std::fs::remove_dir_all(&layers).unwrap();

    hang.store(false, Ordering::SeqCst);
    let resumed = grove.grove_async(["resume", &run_id]).await;

    let err = stderr(&resumed);
    assert_eq!(
        (
            resumed.status.code(),
            fixture.read("one.txt"),
            fixture.read("two.txt"),
            gained(&fixture, &base).len()
        ),
        (Some(0), b"1\n".to_vec(), b"2\n".to_vec(), 2),
        "the resume lands S2 and applies both changes once\n{err}"
    );
    assert_eq!(
        left(&fixture, None),
        nothing(),
        "nothing of the run is left registered, on disk, mounted or running, S1's emptied \
         tree included\n{err}"
    );
}

/// The `*.lock` files under `.git/refs`, relative to `.git`, sorted.
pub(crate) fn ref_locks(git_dir: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, git_dir: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, git_dir, found);
            } else if path.extension().is_some_and(|ext| ext == "lock") {
                let relative = path.strip_prefix(git_dir).unwrap();
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    let mut found = Vec::new();
    walk(&git_dir.join("refs"), git_dir, &mut found);
    found.sort();
    found
}

/// Leaves `<git dir>/<name>` as a process killed while it updated that ref leaves it (git
/// and libgit2 alike create `<ref>.lock`, write it, and rename it over the ref): empty,
/// and last written a minute ago.
pub(crate) fn plant_lock(git_dir: &std::path::Path, name: &str) {
    let path = git_dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let file = std::fs::File::create(&path).unwrap();
    let a_minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    file.set_modified(a_minute_ago).unwrap();
}

/// `kill -9` right after "S1: merged" while S2 still works, with the lock files a kill
/// during ref updates leaves planted on S1's branch (its deletion waits for its turn),
/// S2's branch, the result, an archive ref of the run — and, to be left alone, on a
/// branch of the user's and one of another run. Then `grove resume`: it removes the
/// run's stale locks and says so, S2 lands on the result, both changes are applied once,
/// and no worktree, branch or lock of the run is left (before, every merge onto the
/// result failed and S1's branch could never be deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_ref_locks_a_kill_left_are_removed_when_the_run_is_resumed() {
    let fixture = repo_with_rules();
    fixture.write(".grove/config.toml", "[worktree]\nmode = \"git\"\n");
    fixture.commit_all("grove's configuration");
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let git_dir = std::path::PathBuf::from(fixture.git(&["rev-parse", "--absolute-git-dir"]));
    let work_tree = std::path::PathBuf::from(fixture.git(&["rev-parse", "--show-toplevel"]));
    let hang = Arc::new(AtomicBool::new(true));
    let (_server, grove, run_id) = killed_after_s1_merged(&fixture, &hang).await;
    let runs = [
        format!("refs/heads/grove/{run_id}/1.lock"),
        format!("refs/heads/grove/{run_id}/2.lock"),
        format!("refs/heads/grove/{run_id}/result.lock"),
        format!("refs/grove/archive/{run_id}/2.lock"),
    ];
    let others = [
        "refs/heads/grove/20200101-000000-0000/1.lock".to_owned(),
        "refs/heads/mine.lock".to_owned(),
    ];
    for name in runs.iter().chain(&others) {
        plant_lock(&git_dir, name);
    }

    hang.store(false, Ordering::SeqCst);
    let resumed = grove.grove_async(["resume", &run_id]).await;

    let err = stderr(&resumed);
    let named: Vec<bool> = runs
        .iter()
        .map(|name| err.contains(&git_dir.join(name).display().to_string()))
        .collect();
    assert_eq!(
        (
            resumed.status.code(),
            std::fs::read(work_tree.join("one.txt")).ok(),
            std::fs::read(work_tree.join("two.txt")).ok(),
            gained(&fixture, &base).len(),
            ref_locks(&git_dir),
            named,
        ),
        (
            Some(0),
            Some(b"1\n".to_vec()),
            Some(b"2\n".to_vec()),
            2,
            vec![others[0].clone(), others[1].clone()],
            vec![true; runs.len()],
        ),
        "the resume removes the run's stale ref locks (naming each) and no other, lands S2 \
         and applies both changes once\n{err}"
    );
    assert_eq!(
        left(&fixture, None),
        nothing(),
        "nothing of the run is left registered, on disk, mounted or running\n{err}"
    );
}

/// `kill -9` while a subtask's check runs, with a lock planted on its branch as a kill
/// during the branch's update leaves it, then `grove clean` of the run: the stale lock is
/// removed and named, the work archived, and nothing of the run is left (before, the
/// branch could not be deleted and the clean failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grove_clean_removes_a_stale_lock_a_kill_left_on_a_runs_branch() {
    let marker = "2.71805";
    let test = "grove_clean_removes_a_stale_lock_a_kill_left_on_a_runs_branch";
    let Some(fixture) = sleeping_check(test, WorktreeMode::Git, marker).await else {
        return;
    };
    let git_dir = std::path::PathBuf::from(fixture.git(&["rev-parse", "--absolute-git-dir"]));
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, ONE),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let run_id = killed_during_the_check(&grove, marker).await;
    let lock = format!("refs/heads/grove/{run_id}/1.lock");
    plant_lock(&git_dir, &lock);

    let cleaned = grove.grove_async(["clean", &run_id]).await;

    let out = String::from_utf8_lossy(&cleaned.stdout).into_owned();
    let named = format!(
        "removed {}, a stale lock a stopped process left on one of the run's refs",
        git_dir.join(&lock).display()
    );
    assert_eq!(
        (
            cleaned.status.code(),
            out.lines().any(|line| line == named),
            ref_locks(&git_dir),
        ),
        (Some(0), true, Vec::<String>::new()),
        "the clean removes the stale lock on the run's branch and says so\n{out}{}",
        stderr(&cleaned)
    );
    assert_eq!(
        left(&fixture, Some(marker)),
        nothing(),
        "after the clean nothing of the run is left registered, on disk, mounted or \
         running\n{out}"
    );
}
