//! The lead works as subtasks settle: a result reaches it while its siblings still run,
//! a follow-up starts from a rejected subtask's kept work (`start_from`), and a subtask
//! superseded by a merged replacement counts as done (exit 0), one whose replacement was
//! rejected too does not (exit 3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::Barrier;

use grove::run::RunReport;
use grove::store::RunStore;
use grove::store::journal::{Entry, SubtaskOutcome, read_journal};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in as grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// The brief of work its reviewer rejects.
const REJECTED: &str = "REJECT-ME";

/// A reviewer that rejects a brief holding [`REJECTED`], with a finding, and approves
/// the rest.
fn judging_reviewer(request: &RecordedRequest) -> Reply {
    if answered(request) {
        return usage(Turn::text("Verdict given.")).into();
    }
    let input = if first_user_text(request).contains(REJECTED) {
        json!({
            "verdict": "reject",
            "summary": "Not loud enough yet.",
            "findings": [{"path": "src/a.txt", "line": 1, "problem": "FINDING-FOR-THE-RETRY"}]
        })
    } else {
        json!({"verdict": "approve", "summary": "Does what the brief asks."})
    };
    usage(Turn::new().tool_use("review_1", "submit_verdict", input)).into()
}

/// The `(subtask, type)` records of a run's journal with their times.
fn journal(fixture: &GitFixture, run_id: &str) -> Vec<(u64, Entry)> {
    let path = RunStore::new(&fixture.repo.join(".git"))
        .run_dir(&run_id.parse().unwrap())
        .join("journal.jsonl");
    read_journal(&path)
        .unwrap()
        .records
        .into_iter()
        .map(|record| (record.ts_ms, record.entry))
        .collect()
}

fn statuses(report: &RunReport) -> Vec<(String, SubtaskOutcome, Option<String>)> {
    report
        .subtasks
        .iter()
        .map(|s| {
            (
                s.id.to_string(),
                s.status,
                s.superseded_by.map(|by| by.to_string()),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejection_reaches_the_lead_while_a_sibling_works_and_its_follow_up_starts_before_the_sibling_ends()
 {
    let fixture = repo_with_rules();
    // The sibling's first turn and the follow-up's first turn are answered only once both
    // are in flight: the sibling cannot end before the follow-up started. Were the lead
    // told of S1 only when S2 had settled too, the follow-up would never be delegated in
    // time and the gate would time out (a violation).
    let gate = Arc::new(Barrier::new(2));
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => {
            let results = request.tool_results();
            let turn = match results.len() {
                0 => Turn::text("Delegating.")
                    .tool_use(
                        "d1",
                        "delegate",
                        json!({"task": format!("{REJECTED}\nWRITE src/a.txt ALPHA")}),
                    )
                    .tool_use(
                        "d2",
                        "delegate",
                        json!({"task": "Slow sibling.\nWRITE src/b.txt BETA"}),
                    ),
                2 => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
                3 => {
                    assert!(
                        results[2].1.starts_with("S1 rejected")
                            && (results[2].1.ends_with(
                                "Still running: S2 (working, turn 1); `wait` again for its result."
                            ) || results[2].1.ends_with(
                                "Still running: S2 (starting); `wait` again for its result."
                            )),
                        "the first wait brings S1's rejection while S2 runs, and says how far \
                         S2 has got: {}",
                        results[2].1
                    );
                    Turn::text("Redoing S1.").tool_use(
                        "d3",
                        "delegate",
                        json!({"task": "Shout a.\nWRITE src/a.txt ALPHA", "replaces": "S1"}),
                    )
                }
                4 => Turn::text("Waiting for all.").tool_use("w2", "wait", json!({"all": true})),
                _ => Turn::text("All done."),
            };
            usage(turn).into()
        }
        Who::Worker if !answered(request) && !first_user_text(request).contains(REJECTED) => {
            Reply::Gated {
                gate: gate.clone(),
                reply: Box::new(worker_reply(request)),
            }
        }
        Who::Worker => worker_reply(request),
        Who::Reviewer => judging_reviewer(request),
    })
    .await;
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        run(
            &fixture,
            &server,
            grove::model::Provider::Anthropic,
            options(&fixture, USER_TASK),
        ),
    )
    .await
    .expect("the run ends")
    .unwrap();
    server.assert_no_violations();
    assert_eq!(
        statuses(&report),
        vec![
            ("S1".into(), SubtaskOutcome::Rejected, Some("S3".into())),
            ("S2".into(), SubtaskOutcome::Merged, None),
            ("S3".into(), SubtaskOutcome::Merged, None),
        ],
        "S1 is superseded by its merged replacement"
    );
    assert!(report.all_merged() && report.applied, "{report:#?}");

    let records = journal(&fixture, &report.run_id);
    let when = |wanted: &dyn Fn(&Entry) -> bool| {
        records
            .iter()
            .find(|(_, entry)| wanted(entry))
            .map(|(ts, _)| *ts)
            .unwrap()
    };
    let s1_heard = when(&|e| {
        matches!(e, Entry::ResultsDelivered { subtasks, call_id } if subtasks.len() == 1
            && subtasks[0].to_string() == "S1" && call_id.as_deref() == Some("w1"))
    });
    let s3_started = when(
        &|e| matches!(e, Entry::SubtaskStarted { subtask, .. } if subtask.to_string() == "S3"),
    );
    let s2_finished = when(
        &|e| matches!(e, Entry::SubtaskFinished { subtask, .. } if subtask.to_string() == "S2"),
    );
    assert!(
        s1_heard <= s3_started && s3_started < s2_finished,
        "the lead heard S1 ({s1_heard}) and delegated its follow-up ({s3_started}) before \
         the sibling ended ({s2_finished})"
    );
    let delivered: Vec<Vec<String>> = records
        .iter()
        .filter_map(|(_, entry)| match entry {
            Entry::ResultsDelivered { subtasks, .. } => {
                Some(subtasks.iter().map(ToString::to_string).collect())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        delivered.concat().len(),
        3,
        "the journal keeps each result's delivery once, in order: {delivered:?}"
    );
}

/// The lead of a retry: S1 (rejected), then, once told, a follow-up from S1's work
/// briefed `second`.
fn retrying_lead(request: &RecordedRequest, second: &str) -> Reply {
    let turn = match request.tool_results().len() {
        0 => Turn::text("Delegating.").tool_use(
            "d1",
            "delegate",
            json!({"task": format!("{REJECTED}\nWRITE src/a.txt ALPHA")}),
        ),
        1 => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
        2 => Turn::text("Building on S1.").tool_use(
            "d2",
            "delegate",
            json!({"task": second, "start_from": "S1"}),
        ),
        3 => Turn::text("Waiting.").tool_use("w2", "wait", json!({})),
        _ => Turn::text("Done."),
    };
    usage(turn).into()
}

/// A worker that, when its tree starts from S1's work, first reads S1's file and asks
/// its git for S1's commit, then writes as briefed.
fn retrying_worker(request: &RecordedRequest) -> Reply {
    let brief = first_user_text(request);
    if !brief.contains("(grove: your tree starts from S1's work") {
        return worker_reply(request);
    }
    match request.tool_results().len() {
        0 => usage(
            Turn::text("Looking at what S1 left.")
                .tool_use("look_1", "read_file", json!({"path": "src/a.txt"}))
                .tool_use(
                    "look_2",
                    "bash",
                    json!({"command": "git rev-parse refs/worktree/S1"}),
                ),
        )
        .into(),
        2 => write_reply(&brief),
        _ => usage(Turn::text("WORKER-FINAL: built on S1.")).into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_from_retry_works_in_a_tree_holding_the_rejected_work_and_is_reviewed_against_it() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => retrying_lead(request, "Also shout b.\nWRITE src/b.txt BETA"),
        Who::Worker => retrying_worker(request),
        Who::Reviewer => judging_reviewer(request),
    })
    .await;
    let report = run(
        &fixture,
        &server,
        grove::model::Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(
        statuses(&report),
        vec![
            ("S1".into(), SubtaskOutcome::Rejected, Some("S2".into())),
            ("S2".into(), SubtaskOutcome::Merged, None),
        ],
    );
    assert_eq!(
        report.subtasks[1].replaces.map(|id| id.to_string()),
        Some("S1".into())
    );
    assert_eq!(
        (fixture.read("src/a.txt"), fixture.read("src/b.txt")),
        (b"ALPHA\n".to_vec(), b"BETA\n".to_vec()),
        "the follow-up's merge brings S1's work and its own"
    );

    let archive = format!("refs/grove/archive/{}/1", report.run_id);
    let s1_work = fixture.rev(&archive).to_string();
    let requests = server.requests();
    let retry = requests
        .iter()
        .filter(|r| who(r) == Who::Worker)
        .find(|r| r.tool_results().len() == 2)
        .expect("the follow-up's worker looked first");
    let brief = retry.first_user_text();
    assert!(
        brief.contains(&format!("kept at {archive}"))
            && brief.contains("```text\nNot loud enough yet.\n- [blocking] src/a.txt:1: FINDING-FOR-THE-RETRY\n```"),
        "the worker is told what it starts from and S1's findings, quoted: {brief}"
    );
    let looked = retry.tool_results();
    assert!(
        looked[0].1.contains("ALPHA"),
        "its tree holds S1's file: {looked:?}"
    );
    assert!(
        looked[1].1.contains(&s1_work),
        "its git (sandboxed: grove's refs hidden) reads S1's kept commit as \
         refs/worktree/S1: {looked:?}"
    );

    let review = requests
        .iter()
        .filter(|r| who(r) == Who::Reviewer)
        .map(|r| r.first_user_text())
        .find(|text| text.contains("Also shout b."))
        .unwrap();
    let (whole, own) = review
        .split_once(&format!(
            "# The diff against S1's rejected work it started from (kept at {archive})"
        ))
        .unwrap_or_else(|| panic!("the review names what its diff is against: {review}"));
    assert!(
        own.contains("+BETA") && !own.contains("ALPHA"),
        "the diff under review is against S1's work: only the follow-up's change: {own}"
    );
    assert!(
        whole.contains("# The whole change its merge brings")
            && whole.contains("+ALPHA")
            && whole.contains("+BETA"),
        "and the reviewer sees the whole change its merge brings: {whole}"
    );
}

/// `grove run --json` of a retry whose follow-up is briefed `second`.
async fn retry_run(second: &'static str) -> (Option<i32>, Value, String) {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => retrying_lead(request, second),
        Who::Worker => retrying_worker(request),
        Who::Reviewer => judging_reviewer(request),
    })
    .await;
    let output = grove(&fixture, Some(&server), &["run", "--json", USER_TASK]).await;
    server.assert_no_violations();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code(), report, stderr(&output))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_whose_every_rejection_was_superseded_exits_0_and_one_whose_retry_failed_too_exits_3()
{
    let (code, report, err) = retry_run("Also shout b.\nWRITE src/b.txt BETA").await;
    let subtasks = |report: &Value| -> Vec<(Value, Value, Value, Value)> {
        report["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["id"].clone(),
                    s["status"].clone(),
                    s["superseded_by"].clone(),
                    s["replaces"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        (code, subtasks(&report)),
        (
            Some(0),
            vec![
                (json!("S1"), json!("rejected"), json!("S2"), Value::Null),
                (json!("S2"), json!("merged"), Value::Null, json!("S1")),
            ]
        ),
        "every rejection superseded by a merged follow-up: the task got done, exit 0\n{err}"
    );
    assert!(
        err.contains("superseded by S2") && err.contains("replaces S1"),
        "the end table says so: {err}"
    );

    let (code, report, err) = retry_run("REJECT-ME again.\nWRITE src/b.txt BETA").await;
    assert_eq!(
        (code, subtasks(&report)),
        (
            Some(3),
            vec![
                (json!("S1"), json!("rejected"), Value::Null, Value::Null),
                (json!("S2"), json!("rejected"), Value::Null, json!("S1")),
            ]
        ),
        "a replacement rejected too supersedes nothing: exit 3\n{err}"
    );
    assert!(
        err.contains("2 of 2 subtasks not merged (S1 rejected, S2 rejected)"),
        "{err}"
    );
}
