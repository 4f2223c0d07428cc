//! Issue 31, nothing lost across an interrupt: each test stops grove at an exact point of
//! its run (a signal sent once a given line is printed) and proves what grove says then
//! and what the next `grove resume` finds. Each test names the Safety row it proves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;
use serde_json::Value;

use grove::worktree::WorktreeMode;

use crate::suite::escapes::mode_or_skip;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply};
use crate::support::git_fixture::{GitFixture, Leftovers};
use crate::support::grove::{Grove, only_run, stderr};
use crate::support::processes::{mounts_under, running_with_arg, settled};
use crate::support::requests::{Who, heard_by_lead, who};
use crate::support::scripted_run::{
    USER_TASK, lead_reply, repo_with_rules, reviewer_reply, worker_reply,
};

/// Five subtasks the lead delegates in one response, each writing a file of its own.
const FIVE: &[(&str, Option<&str>)] = &[
    ("First.\nWRITE one.txt 1", None),
    ("Second.\nWRITE two.txt 2", None),
    ("Third.\nWRITE three.txt 3", Some("fork")),
    ("Fourth.\nWRITE four.txt 4", None),
    ("Fifth.\nWRITE five.txt 5", None),
];

/// The standard lead (delegating `briefs`), workers and reviewers.
fn standard(
    briefs: &'static [(&'static str, Option<&'static str>)],
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |request| match who(request) {
        Who::Lead => lead_reply(request, briefs),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    }
}

/// The line by which `working` workers have started and `waiting` subtasks wait for a
/// `--jobs` slot (each was accepted, then), counted in `seen`.
fn working_and_waiting(
    working: usize,
    waiting: usize,
    seen: &(AtomicUsize, AtomicUsize),
) -> impl Fn(&str) -> bool + '_ {
    move |line| {
        if line.starts_with("worker S") && line.ends_with(": started") {
            seen.0.fetch_add(1, Ordering::SeqCst);
        }
        if line.contains(": waits for a free --jobs slot: ") {
            seen.1.fetch_add(1, Ordering::SeqCst);
        }
        seen.0.load(Ordering::SeqCst) == working && seen.1.load(Ordering::SeqCst) == waiting
    }
}

/// `(id, status)` of each subtask of a `--json` report.
fn statuses(report: &Value) -> Vec<(String, String)> {
    report["subtasks"]
        .as_array()
        .unwrap_or_else(|| panic!("a report with subtasks: {report:#}"))
        .iter()
        .map(|s| {
            let text = |key: &str| s[key].as_str().unwrap_or_default().to_owned();
            (text("id"), text("status"))
        })
        .collect()
}

/// Row 48: the lead delegates five subtasks at once; grove is stopped by `signal` while
/// `jobs` work and the rest wait for a slot. Each was journaled when it was accepted, so
/// the resume runs all five (the forked one from the lead's conversation of then), the
/// lead hears each one's result, and nothing is left behind.
async fn delegated_subtasks_waiting_for_a_slot_survive(signal: Signal, jobs: usize) {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, FIVE),
        // The first workers never get an answer: grove is stopped while they work.
        Who::Worker => Reply::Hang,
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let seen = (AtomicUsize::new(0), AtomicUsize::new(0));
    let watched = grove
        .spawn_until(
            ["run", "--jobs", &jobs.to_string(), USER_TASK],
            working_and_waiting(jobs, FIVE.len() - jobs, &seen),
        )
        .await;
    watched.signal(signal);
    let stopped = watched.output().await;
    let expected_stop = if signal == Signal::SIGKILL {
        None
    } else {
        Some(130)
    };
    assert_eq!(
        stopped.status.code(),
        expected_stop,
        "{signal} with {jobs} working: {}",
        stderr(&stopped)
    );
    let run_id = only_run(&grove).await;

    server.set_responder(standard(FIVE));
    let resumed = grove.grove_async(["resume", "--json", &run_id]).await;

    server.assert_no_violations();
    let report: Value = serde_json::from_slice(&resumed.stdout).unwrap_or(Value::Null);
    assert_eq!(
        (resumed.status.code(), statuses(&report)),
        (
            Some(0),
            (1..=5)
                .map(|n| (format!("S{n}"), "merged".to_owned()))
                .collect::<Vec<_>>()
        ),
        "after {signal} with --jobs {jobs}, every accepted delegation is a subtask of the \
         run, waiting or not, and the resume runs it\n{}",
        stderr(&resumed)
    );
    let files: Vec<Vec<u8>> = ["one", "two", "three", "four", "five"]
        .iter()
        .map(|name| fixture.read(&format!("{name}.txt")))
        .collect();
    assert_eq!(
        files,
        [b"1\n", b"2\n", b"3\n", b"4\n", b"5\n"].map(|b| b.to_vec()),
        "after {signal} with --jobs {jobs}, every delegated change is on the user's branch"
    );
    let requests = server.requests();
    let told = heard_by_lead(requests.iter().rfind(|r| who(r) == Who::Lead).unwrap());
    let heard: Vec<usize> = (1..=5)
        .map(|n| told.matches(&format!("S{n} merged (")).count())
        .collect();
    assert_eq!(
        heard,
        vec![1; 5],
        "after {signal}, the lead hears each delegation's own result, once: {told}"
    );
    let forked = requests
        .iter()
        .find(|r| who(r) == Who::Worker && r.last_user_text().contains("WRITE three.txt"));
    assert!(
        forked.is_some_and(|r| r.messages().len() > 1),
        "the forked subtask starts from the lead's conversation, not from its brief alone"
    );
    assert_eq!(
        fixture.leftovers(),
        Leftovers::default(),
        "after {signal} with --jobs {jobs}, nothing of the run is left registered or on disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delegated_subtasks_waiting_for_a_slot_survive_a_kill_and_the_resume_runs_them() {
    delegated_subtasks_waiting_for_a_slot_survive(Signal::SIGKILL, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delegated_subtasks_waiting_for_a_slot_survive_ctrl_c_and_the_resume_runs_them() {
    delegated_subtasks_waiting_for_a_slot_survive(Signal::SIGINT, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delegated_subtasks_waiting_for_a_slot_survive_sigterm_and_the_resume_runs_them() {
    delegated_subtasks_waiting_for_a_slot_survive(Signal::SIGTERM, 2).await;
}

/// The case: with `--jobs 4` four work and one waits; the resume exited 0 with
/// one delegated change missing. Every signal grove can be stopped by.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_four_jobs_the_one_waiting_delegation_survives_every_signal() {
    for signal in [Signal::SIGKILL, Signal::SIGINT, Signal::SIGTERM] {
        delegated_subtasks_waiting_for_a_slot_survive(signal, 4).await;
    }
}

/// Row 50: SIGTERM (a service manager, `timeout`, `kill`) and SIGHUP (the terminal closed)
/// while a worker works stop grove as Ctrl-C does: exit 130, the `--json` report on
/// stdout, the `grove resume` command on stderr, and a run `grove runs` lists as
/// interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_and_sighup_stop_a_run_like_ctrl_c() {
    for signal in [Signal::SIGTERM, Signal::SIGHUP] {
        let fixture = repo_with_rules();
        let server = FakeServer::with_responder(|request| match who(request) {
            Who::Lead => lead_reply(request, &FIVE[..1]),
            Who::Worker => Reply::Hang,
            Who::Reviewer => reviewer_reply(request),
        })
        .await;
        let grove = Grove::in_repo(&fixture).with_server(&server);
        let watched = grove
            .spawn_until(["run", "--json", USER_TASK], |line| {
                line == "worker S1: started"
            })
            .await;
        watched.signal(signal);
        let output = watched.output().await;

        let err = stderr(&output);
        let run_id = only_run(&grove).await;
        // Null when there is none, so that the assertion below shows all that is missing.
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        let listed = grove.grove_async(["runs", "--json"]).await;
        let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(
            (
                output.status.code(),
                report["run_id"].as_str(),
                report["status"].as_str(),
                listed[0]["status"].as_str(),
                err.contains(&format!("grove resume {run_id}")),
            ),
            (
                Some(130),
                Some(run_id.as_str()),
                Some("interrupted"),
                Some("interrupted"),
                true,
            ),
            "{signal} ends the run as Ctrl-C does: exit 130, its report, the resume command\n{err}"
        );
    }
}

/// A check that starts a background process which outlives its shell (as a test runner's
/// workers do), marked by its argument `marker`; the shell sleeps in the foreground.
fn check_with_a_background_process(marker: &str) -> String {
    format!("sleep {marker} & sleep 100")
}

/// Waits until the check of subtask 1 has started its background process; its pids.
async fn background_pids(fixture: &GitFixture, marker: &str) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let running = running_with_arg(marker);
        if !running.is_empty() {
            return running;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the check never started its background process (in {})",
            fixture.repo.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Row 64: `kill -9` of grove while a subtask's check runs a background process. The
/// check's whole process tree dies with grove at once (its own pid namespace, whose
/// first process dies with grove), so no process of it and, in a copy-on-write tree, no
/// overlay mount of the run survives — without any next grove starting to clean up.
async fn a_checks_processes_die_with_a_killed_grove(mode: WorktreeMode, marker: &str) {
    let fixture = repo_with_rules();
    if !mode_or_skip("a_checks_processes_die_with_a_killed_grove", &fixture, mode).await {
        return;
    }
    fixture.write(
        ".grove/config.toml",
        format!(
            "[worktree]\nmode = \"{mode}\"\n\n[check]\ncommand = {:?}\n\
             base = \"skip\"\n",
            check_with_a_background_process(marker)
        ),
    );
    fixture.commit_all("grove's configuration");
    let server = FakeServer::with_responder(standard(&FIVE[..1])).await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let mut child = grove.spawn(["run", "--jobs", "1", USER_TASK]);
    let background = background_pids(&fixture, marker).await;
    child.start_kill().unwrap(); // SIGKILL: grove gets no chance to clean up.
    child.wait().await.unwrap();

    let cache = fixture.home().join(".cache").join("grove");
    let left = settled(|| running_with_arg(marker));
    let mounts = mounts_under(&cache);
    for pid in &left {
        // What the test found must not outlive it either.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
    }
    assert_eq!(
        (left, mounts),
        (Vec::new(), Vec::new()),
        "within 5 s of a kill -9 of grove, the check's background process ({background:?}) \
         is gone and no process sees a mount of the run ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checks_processes_die_with_a_killed_grove_in_a_git_worktree() {
    a_checks_processes_die_with_a_killed_grove(WorktreeMode::Git, "314159").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checks_processes_die_with_a_killed_grove_in_a_copy_on_write_tree() {
    a_checks_processes_die_with_a_killed_grove(WorktreeMode::Overlay, "314160").await;
}
