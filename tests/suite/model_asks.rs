//! What the models asked for (issue 43), through a whole run with the fake model: the
//! lead gets each subtask's whole summaries and can read a subtask's record, its diff and
//! the result's diff with `show_subtask` (a tool no other role has); a reviewer's
//! finding may be a non-blocking remark, which never rejects, and a rejection made only
//! of remarks is sent back to the reviewer; `--json` says which findings block.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::json;

use grove::model::Provider;
use grove::store::journal::{SubtaskOutcome, VerdictKind};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{options, repo_with_rules, run, usage, write_reply};

const BRIEF: &str = "Shout alpha.\nWRITE src/a.txt ALPHA";

/// A worker's closing summary far longer than the 400 characters a lead once got.
fn long_summary() -> String {
    let mut text = String::from("Shout alpha in src/a.txt\n\n");
    for n in 1..=15 {
        text.push_str(&format!(
            "Point {n}: the file holds the word in capitals and nothing else changed. "
        ));
    }
    text.push_str("END-OF-SUMMARY");
    text
}

/// The `is_error` flag of every tool result in `request`, by call id, in order.
fn tool_result_errors(request: &RecordedRequest) -> Vec<(String, bool)> {
    request
        .messages()
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| {
            (
                block["tool_use_id"].as_str().unwrap().to_owned(),
                block["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn lead(request: &RecordedRequest) -> Reply {
    let answered: Vec<String> = request
        .tool_results()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let turn = match answered.len() {
        0 => Turn::text("Delegating.").tool_use(
            "d1",
            "delegate",
            json!({"task": BRIEF, "paths": ["src/a.txt"]}),
        ),
        1 => Turn::text("Waiting for it.").tool_use("w1", "wait", json!({})),
        2 => Turn::text("Reading its record.")
            .tool_use("s1", "show_subtask", json!({"id": "S1", "diff": true}))
            .tool_use("s2", "show_subtask", json!({"id": "result"})),
        _ => Turn::text("Done."),
    };
    usage(turn).into()
}

/// A reviewer that first rejects with a remark only, then, told a rejection needs a
/// blocking finding, approves with the remark.
fn reviewer(request: &RecordedRequest) -> Reply {
    let remark = json!({"path": "src/a.txt", "line": 1, "problem": "a comment would help",
                        "blocking": false});
    let turn = match request.tool_results().len() {
        0 => Turn::new().tool_use(
            "v1",
            "submit_verdict",
            json!({"verdict": "reject", "summary": "Only a nit.", "findings": [remark]}),
        ),
        1 => Turn::new().tool_use(
            "v2",
            "submit_verdict",
            json!({"verdict": "approve", "summary": "Does what the brief asks.",
                   "findings": [remark]}),
        ),
        _ => Turn::text("Verdict given."),
    };
    usage(turn).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lead_reads_whole_summaries_and_records_and_a_remark_never_rejects() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead(request),
        Who::Worker if request.tool_results().is_empty() => write_reply(&request.last_user_text()),
        Who::Worker => usage(Turn::text(long_summary())).into(),
        Who::Reviewer => reviewer(request),
    })
    .await;

    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, "Shout alpha."),
    )
    .await
    .unwrap();
    server.assert_no_violations();

    let subtask = &report.subtasks[0];
    assert_eq!(
        (subtask.status, subtask.verdict),
        (SubtaskOutcome::Merged, Some(VerdictKind::Approve)),
        "an approval with a remark merges"
    );
    assert_eq!(
        serde_json::to_value(subtask).unwrap()["findings"],
        json!([{"path": "src/a.txt", "line": 1, "problem": "a comment would help",
                "blocking": false}]),
        "--json says which findings block"
    );

    let requests = server.requests();
    let reviews: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| who(request) == Who::Reviewer)
        .collect();
    assert_eq!(
        tool_result_errors(reviews[1]),
        vec![("v1".to_owned(), true)],
        "a rejection made only of remarks is sent back as an error, and nothing recorded"
    );

    let leads: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|request| who(request) == Who::Lead)
        .collect();
    let delegated = &leads[2].tool_results()[1].1;
    assert!(
        delegated.contains(&format!("```text\n{}\n```\n", long_summary())),
        "the lead gets the worker's whole summary: {delegated}"
    );
    assert!(
        delegated.contains("- [non-blocking] src/a.txt:1: a comment would help\n"),
        "{delegated}"
    );
    let shown: Vec<String> = leads[3]
        .tool_results()
        .into_iter()
        .skip(2)
        .map(|(_, text)| text)
        .collect();
    assert!(
        shown[0]
            .contains("finding [non-blocking] src/a.txt:1:\n```text\na comment would help\n```")
            && shown[0].contains("-alpha\n+ALPHA\n")
            && shown[0].contains("END-OF-SUMMARY"),
        "show_subtask gives the whole record and the diff: {}",
        shown[0]
    );
    assert!(
        shown[1].starts_with("The run's result against the base.\n")
            && shown[1].contains("+ALPHA\n"),
        "show_subtask \"result\" gives the merged result's diff: {}",
        shown[1]
    );

    let tools = |role: Who| -> Vec<bool> {
        requests
            .iter()
            .filter(|request| who(request) == role)
            .map(|request| request.tool_names().contains(&"show_subtask".to_owned()))
            .collect::<Vec<bool>>()
    };
    assert_eq!(
        (
            tools(Who::Lead).into_iter().all(|has| has),
            tools(Who::Worker).into_iter().any(|has| has),
            tools(Who::Reviewer).into_iter().any(|has| has),
        ),
        (true, false, false),
        "only the lead is offered show_subtask"
    );
}

/// A lead that splits a task in two in one turn, then ends.
fn splitting_lead(request: &RecordedRequest) -> Reply {
    let turn = match request.tool_results().len() {
        0 => Turn::text("Splitting.")
            .tool_use(
                "d1",
                "delegate",
                json!({"task": "Shout alpha.\nWRITE src/a.txt ALPHA", "paths": ["src/a.txt"]}),
            )
            .tool_use(
                "d2",
                "delegate",
                json!({"task": "Shout beta.\nWRITE src/b.txt BETA", "paths": ["src/b.txt"]}),
            ),
        _ => Turn::text("Done."),
    };
    usage(turn).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_is_told_of_the_sibling_subtasks_whose_work_is_not_in_its_diff() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => splitting_lead(request),
        Who::Worker if request.tool_results().is_empty() => write_reply(&request.last_user_text()),
        Who::Worker => usage(Turn::text("Done.")).into(),
        Who::Reviewer => usage(Turn::new().tool_use(
            "v1",
            "submit_verdict",
            json!({"verdict": "approve", "summary": "Does what the brief asks.", "findings": []}),
        ))
        .into(),
    })
    .await;

    run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, "Shout."),
    )
    .await
    .unwrap();
    server.assert_no_violations();

    let mut told: Vec<(String, String)> = server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Reviewer)
        .map(|request| {
            let text = request.first_user_text();
            let brief = text.lines().nth(2).unwrap_or_default().to_owned();
            let others = text
                .split_once("# The run's other subtasks\n\n")
                .and_then(|(_, rest)| rest.split_once("\n\n# "))
                .map(|(section, _)| section.lines().skip(2).collect::<Vec<_>>().join("\n"))
                .unwrap_or_default();
            // Whether the sibling merged first is a race; its brief is not.
            let others = others
                .replace(" (not merged yet)", "")
                .replace(" (merged after the diff's start)", "");
            (brief, others)
        })
        .collect();
    told.sort();
    assert_eq!(
        told,
        vec![
            (
                "Shout alpha.".to_owned(),
                "- S2: Shout beta. WRITE src/b.txt BETA [its files: src/b.txt]".to_owned()
            ),
            (
                "Shout beta.".to_owned(),
                "- S1: Shout alpha. WRITE src/a.txt ALPHA [its files: src/a.txt]".to_owned()
            ),
        ],
        "each reviewer is told of its sibling (neither started after the other merged), \
         so it does not reject a piece of a split task for the other piece"
    );
}
