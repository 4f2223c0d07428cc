//! `grove review` on a run whose subtask was tried three ways (best of N): it shows the
//! attempts together, a person picks another one and the result is rebuilt with it, and
//! approving two attempts of one brief is refused with nothing recorded.
//!
//! The run is a real best-of-N one against the fake model server: one brief delegated as
//! three attempts writing one file three ways, and a judge that picks the third.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{ModelChoice, Models, RunOptions};

use crate::support::attempts::attempt_of;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::Grove;
use crate::support::requests::role;

const BRIEF: &str = "Make the greeting formal.";

/// A lead that delegates the brief as three attempts and waits; workers that each
/// write their way (A, B, C by their branch's subtask); a judge that picks C.
fn scripted(request: &RecordedRequest) -> Reply {
    let answered = request.tool_results().len();
    let turn = match (role(request), answered) {
        ("lead", 0) => Turn::text("Delegating.").tool_use(
            "d1",
            "delegate",
            json!({ "task": BRIEF, "attempts": 3 }),
        ),
        ("lead", 1) => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
        ("worker", 0) => Turn::new().tool_use(
            "w_branch",
            "bash",
            json!({"command": "git branch --show-current"}),
        ),
        ("worker", 1) => {
            let way = ["A", "B", "C"][attempt_of(request).unwrap() - 1];
            Turn::new().tool_use(
                "w1",
                "write_file",
                json!({ "path": "greeting.txt", "content": format!("Good day ({way}-way)\n") }),
            )
        }
        ("reviewer", 0) => Turn::new().tool_use(
            "j1",
            "submit_verdict",
            json!({"verdict": "approve", "pick": "C", "summary": "C is the most formal.",
                   "not_picked": [{"attempt": "A", "reason": "A is casual."},
                                  {"attempt": "B", "reason": "B is stiff."}]}),
        ),
        _ => Turn::text("Done."),
    };
    turn.usage(10, 2, 0, 0).into()
}

/// A real best-of-N run, finished without applying: one group S1 = A, S2 = B, S3 = C
/// whose judge picked C.
async fn judged_run(fixture: &GitFixture) -> String {
    let server = FakeServer::with_responder(scripted).await;
    let choice = |name: &str| ModelChoice {
        client: server.model(Provider::Anthropic, true),
        name: name.into(),
    };
    let models = Models {
        provider: "anthropic".into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    };
    let options = RunOptions {
        jobs: 3,
        git: fixture.options(),
        apply: false,
        ..RunOptions::new("greet formally")
    };
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    let statuses: Vec<(String, &str)> = report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status.as_str()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("S1".into(), "rejected"),
            ("S2".into(), "rejected"),
            ("S3".into(), "merged")
        ],
        "the judge's pick, the third attempt, is merged; the others are not"
    );
    report.run_id
}

fn grove(fixture: &GitFixture, args: &[&str]) -> Output {
    Grove::in_repo(fixture).grove(args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Each subtask's status and its attempt's label and status, from `--json`.
fn attempts(outcome: &Value) -> Vec<Value> {
    outcome["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!([
                s["id"],
                s["status"],
                s["attempt"]["label"],
                s["attempt"]["status"]
            ])
        })
        .collect()
}

fn greeting(fixture: &GitFixture, rev: &str) -> String {
    let output = crate::support::git_fixture::sealed_command(
        &fixture.home(),
        &fixture.repo,
        &["show", &format!("{rev}:greeting.txt")],
    )
    .output()
    .unwrap();
    text(&output.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_picks_another_attempt_and_never_two() {
    let fixture = GitFixture::with_files(&[("greeting.txt", "hi\n")]);
    let run_id = judged_run(&fixture).await;
    let result = format!("grove/{run_id}/result");

    let listed = grove(&fixture, &["review", &run_id, "--list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let shown = text(&listed.stdout);
    for expected in [
        "attempt A of S1: not picked: A is casual.",
        "attempt C of S1: picked",
        "S1 was tried 3 ways:\n  A S1 (rejected) not picked: A is casual.\n  B S2 (rejected) not \
         picked: B is stiff.\n  C S3 (merged) picked\n  the judge: C is the most formal.\n  to \
         keep another attempt instead: grove review",
    ] {
        assert!(
            shown.contains(expected),
            "--list shows {expected:?}:\n{shown}"
        );
    }

    let two = grove(
        &fixture,
        &["review", &run_id, "--approve", "S2", "--no-apply"],
    );
    assert_eq!(
        (two.status.code(), text(&two.stderr)),
        (
            Some(1),
            "grove: S2 and S3 are attempts at one brief (the group S1), so approving both \
             would merge that work twice; keep one: `--pick S2` approves S2 and rejects S3\n"
                .to_owned()
        ),
        "approving a second attempt of a group is refused, saying how to pick instead"
    );
    assert_eq!(
        greeting(&fixture, &result),
        "Good day (C-way)\n",
        "a refused review leaves the result as the judge made it"
    );

    let picked = grove(
        &fixture,
        &["review", &run_id, "--pick", "s2", "--no-apply", "--json"],
    );
    assert_eq!(picked.status.code(), Some(0), "{}", text(&picked.stderr));
    let outcome: Value = serde_json::from_slice(&picked.stdout).unwrap();
    assert_eq!(
        (
            outcome["recorded"].clone(),
            attempts(&outcome),
            greeting(&fixture, &result),
        ),
        (
            json!([
                {"subtask": "S2", "verdict": "approve", "previous": "reject"},
                {"subtask": "S3", "verdict": "reject", "previous": "approve"},
            ]),
            vec![
                json!(["S1", "rejected", "A", "not_picked"]),
                json!(["S2", "merged", "B", "picked"]),
                json!(["S3", "rejected", "C", "not_picked"]),
            ],
            "Good day (B-way)\n".to_owned(),
        ),
        "--pick S2 approves B and rejects the judge's C; the result is rebuilt with B alone"
    );
    assert_eq!(
        outcome["subtasks"][2]["attempt"]["reason"],
        json!("a person picked attempt B instead in grove review"),
        "the judge's pick says why it lost now"
    );
    let archived = crate::support::git_fixture::sealed_command(
        &fixture.home(),
        &fixture.repo,
        &[
            "for-each-ref",
            "--format=%(refname)",
            &format!("refs/grove/archive/{run_id}/3"),
        ],
    )
    .output()
    .unwrap();
    assert!(
        !text(&archived.stdout).trim().is_empty(),
        "C's work, dropped from the result, is kept under an archive ref"
    );

    let not_attempt = grove(&fixture, &["review", &run_id, "--pick", "S7"]);
    assert_eq!(
        not_attempt.status.code(),
        Some(1),
        "{}",
        text(&not_attempt.stderr)
    );
}
