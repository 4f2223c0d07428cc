//! Best of N: a subtask delegated with `attempts` runs as that many workers at once, a
//! judge compares the attempts that passed their check and picks one, and only the pick
//! is merged; the others are archived with the judge's reasons.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pretty_assertions::assert_eq;
use serde_json::json;

use grove::store::journal::SubtaskOutcome;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// The brief every attempt gets; what each attempt writes comes from the order its
/// worker's first request arrived in.
const BRIEF: &str = "Shout a.\nWRITE src/a.txt {}";

/// A lead that delegates [`BRIEF`] as `attempts` attempts, waits, and ends.
fn lead(request: &RecordedRequest, attempts: u32) -> Reply {
    let turn = match request.tool_results().len() {
        0 => Turn::text("Trying it three ways.").tool_use(
            "d1",
            "delegate",
            json!({"task": BRIEF, "attempts": attempts}),
        ),
        1 => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
        _ => Turn::text("Done."),
    };
    usage(turn).into()
}

/// A worker whose attempt writes the `n`th of `contents`, in the order the attempts' first
/// requests came.
fn worker(request: &RecordedRequest, started: &AtomicUsize, contents: &[&str]) -> Reply {
    if answered(request) {
        return worker_reply(request);
    }
    let n = started.fetch_add(1, Ordering::SeqCst);
    let brief = first_user_text(request).replace("{}", contents[n % contents.len()]);
    write_reply(&brief)
}

/// A judge that reads the right attempt's file through its tree, then picks the attempt
/// whose diff adds `RIGHT`; an ordinary reviewer approves.
fn judge(request: &RecordedRequest) -> Reply {
    let text = first_user_text(request);
    if !text.contains("# How to judge") {
        return reviewer_reply(request);
    }
    let right = text
        .split("# Attempt ")
        .skip(1)
        .find(|section| section.contains("+RIGHT"))
        .and_then(|section| section.chars().next())
        .expect("one attempt adds RIGHT");
    let others: Vec<_> = text
        .split("# Attempt ")
        .skip(1)
        .filter_map(|section| section.chars().next())
        .filter(|label| *label != right)
        .map(
            |label| json!({"attempt": label.to_string(), "reason": format!("{label} is not loud")}),
        )
        .collect();
    let turn = match request.tool_results().len() {
        0 => Turn::new().tool_use(
            "j1",
            "read_file",
            json!({"path": "src/a.txt", "attempt": right.to_string()}),
        ),
        1 => Turn::new().tool_use(
            "j2",
            "submit_verdict",
            json!({"verdict": "approve", "pick": right.to_string(),
                   "summary": "The loud one.", "not_picked": others}),
        ),
        _ => Turn::text("Verdict given."),
    };
    usage(turn).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_attempts_run_at_once_and_only_the_judges_pick_is_merged() {
    let fixture = repo_with_rules();
    let started = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead(request, 3),
        Who::Worker => worker(request, &started, &["quiet", "RIGHT", "meh"]),
        Who::Reviewer => judge(request),
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
    let mut statuses: Vec<_> = report.subtasks.iter().map(|s| s.status).collect();
    statuses.sort_by_key(|status| status.as_str());
    assert_eq!(
        statuses,
        vec![
            SubtaskOutcome::Merged,
            SubtaskOutcome::Rejected,
            SubtaskOutcome::Rejected
        ],
        "one attempt is merged, the two others rejected as not picked"
    );
    assert_eq!(
        fixture.read("src/a.txt"),
        b"RIGHT\n".to_vec(),
        "the pick is merged"
    );
    let requests = server.requests();
    let judged = requests
        .iter()
        .filter(|r| who(r) == Who::Reviewer)
        .filter(|r| r.first_user_text().contains("# How to judge"))
        .find(|r| r.tool_results().len() == 1)
        .expect("the judge read a file");
    assert!(
        judged.tool_results()[0].1.contains("RIGHT"),
        "the judge's read_file read the attempt it named: {:?}",
        judged.tool_results()
    );
    let told = requests
        .iter()
        .filter(|r| who(r) == Who::Lead)
        .find(|r| r.tool_results().len() == 2)
        .unwrap()
        .tool_results()[1]
        .1
        .clone();
    assert!(
        told.contains("was tried 3 ways") && told.contains("is not loud"),
        "the lead hears the pick and why the others lost: {told}"
    );
}
