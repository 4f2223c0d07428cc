//! Issue 28: a check is proven before tokens are spent. A check that cannot pass on the
//! base (here the red team's own case: the checkout's `.venv`, named by its absolute
//! path, while `share` is empty) stops the run before any worker makes a model call,
//! with the check's output and the likely cause named; a result that is red the same way
//! with and without every subtask (`[check] base = "skip"`) starts no fixer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::suite::sandbox::sandbox_or_skip;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{lead_reply, reviewer_reply, worker_reply};

const BRIEFS: &[(&str, Option<&str>)] = &[
    ("Add one.\nWRITE one.py ONE = 1", None),
    ("Add two.\nWRITE two.py TWO = 2", None),
];

fn responder(request: &RecordedRequest) -> Reply {
    match who(request) {
        Who::Lead => lead_reply(request, BRIEFS),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    }
}

fn requests_of(server: &FakeServer, role: Who) -> usize {
    server
        .requests()
        .iter()
        .filter(|request| who(request) == role)
        .count()
}

/// A project with its tests, a `.venv` in the checkout (ignored), and `config`.
fn project(config: &str) -> GitFixture {
    let fixture = GitFixture::with_files(&[
        (".gitignore", ".venv/\n"),
        ("calc.py", "def add(a, b):\n    return a + b\n"),
        (
            "test_calc.py",
            "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    \
             def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
        ),
        (".grove/config.toml", config),
    ]);
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(&fixture.repo)
        .status()
        .unwrap();
    assert!(made.success(), "python3 -m venv .venv");
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_check_that_cannot_pass_on_the_base_stops_the_run_before_any_worker_spends_a_token() {
    if !sandbox_or_skip("a_check_that_cannot_pass_on_the_base") {
        return;
    }
    let fixture = project("");
    let checkout = fixture.repo.canonicalize().unwrap();
    // The red team's check: the checkout's venv by its absolute path, nothing shared.
    fixture.write(
        ".grove/config.toml",
        format!(
            "[worktree]\nshare = []\n[check]\ncommand = '{}/.venv/bin/python -m unittest -q'\n",
            checkout.display()
        ),
    );
    fixture.commit_all("the check names the venv by its path");
    let server = FakeServer::with_responder(responder).await;

    let output = grove_in(
        &fixture,
        Some(&server),
        &["run", "--json", "add two modules"],
    )
    .await;

    server.assert_no_violations();
    let said = stderr(&output);
    assert_eq!(
        (output.status.code(), requests_of(&server, Who::Worker)),
        (Some(1), 0),
        "the run stops (exit 1) before any worker makes a model call: {said}"
    );
    let venv = checkout.join(".venv");
    for words in [
        "the check fails on the base commit",
        "No worker was started",
        &format!("{}/bin/python: No such file or directory", venv.display()),
        &format!(
            "Likely cause: a path that exists here but not in the sandbox's view: `{}",
            venv.display()
        ),
        "list it in `[worktree] share = [\".venv\"]`",
        "grove resume",
    ] {
        assert!(said.contains(words), "the message says {words:?}: {said}");
    }
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            report["status"].clone(),
            report["check"]["runs"][0]["on"].clone(),
            report["check"]["runs"][0]["status"].clone()
        ),
        (json!("paused"), json!("base"), json!("failed")),
        "--json: the run paused, its one check the base's, red"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_red_the_same_way_without_any_subtask_starts_no_fixer() {
    if !sandbox_or_skip("a_result_red_the_same_way_without_any_subtask") {
        return;
    }
    // A suite the user marked as known red; it cannot import what is not installed.
    let fixture = project(
        "[check]\ncommand = 'python3 -c \"import not_installed_anywhere\"'\nbase = 'skip'\n\
         fix_attempts = 2\n",
    );
    let server = FakeServer::with_responder(responder).await;

    let output = grove_in(
        &fixture,
        Some(&server),
        &["run", "--json", "add two modules"],
    )
    .await;

    server.assert_no_violations();
    let said = stderr(&output);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let kinds: Vec<&str> = report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|subtask| subtask["kind"].as_str().unwrap())
        .collect();
    let runs: Vec<(&str, &str)> = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| !run["on"].as_str().unwrap().starts_with('S'))
        .map(|run| (run["on"].as_str().unwrap(), run["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        (output.status.code(), kinds, runs),
        (
            Some(3),
            vec!["task", "task"],
            vec![("result", "failed"), ("base", "failed")]
        ),
        "red on the result and the same on the base: no culprit search, no fixer: {said}"
    );
    for words in [
        "it fails the same way on the base commit, without any subtask",
        "no fixer was started",
        "a module not found: `not_installed_anywhere`",
    ] {
        assert!(said.contains(words), "the message says {words:?}: {said}");
    }
}
