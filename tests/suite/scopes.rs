//! `delegate`'s `paths` and `after` end to end (issue 14): overlapping scopes and `after`
//! order subtasks, and a waiting one starts from the merged result; `after` may name only
//! earlier subtasks; a worker cannot write outside its `paths` with the file tools, and
//! what it changes there through `bash` is flagged. A real repository, the real
//! orchestrator, every model call over HTTP to the fake server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use grove::event::{Event, EventSink};
use grove::git::{Colour, CommitId};
use grove::model::Provider;
use grove::run::{RunOptions, RunReport};
use grove::status::SubtaskId;
use grove::store::journal::{SubtaskOutcome, VerdictKind};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    answered, first_user_text, models, options, own_review_text, reviewer_reply, usage,
};

/// A lead that makes the `delegate` calls `inputs` in one response, then summarises.
fn lead(request: &RecordedRequest, inputs: &[Value]) -> Reply {
    if answered(request) {
        return usage(Turn::text("All subtasks are done.")).into();
    }
    let turn = inputs
        .iter()
        .enumerate()
        .fold(Turn::text("Delegating."), |turn, (index, input)| {
            turn.tool_use(&format!("lead_call_{index}"), "delegate", input.clone())
        });
    usage(turn).into()
}

/// A worker that makes the calls its brief lists as `CALL <tool> <json input>` lines, one
/// per turn, in order, then ends with a summary.
fn worker(request: &RecordedRequest) -> Reply {
    let brief = first_user_text(request);
    let calls: Vec<&str> = brief
        .lines()
        .filter_map(|line| line.strip_prefix("CALL "))
        .collect();
    let done = request
        .messages()
        .iter()
        .filter(|message| message["role"] == "assistant")
        .count();
    let Some(call) = calls.get(done) else {
        return usage(Turn::text("WORKER-FINAL: done as asked.")).into();
    };
    let (tool, input) = call.split_once(' ').unwrap();
    let input: Value = serde_json::from_str(input).unwrap();
    usage(Turn::text("Working.").tool_use(&format!("w{done}"), tool, input)).into()
}

/// A server whose lead makes the calls `inputs`, with scripted workers and reviewers.
async fn server(inputs: Vec<Value>) -> FakeServer {
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead(request, &inputs),
        Who::Worker => worker(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await
}

/// Runs against `server` with `options`, collecting the events.
async fn run_with_events(
    fixture: &GitFixture,
    server: &FakeServer,
    options: RunOptions,
) -> (RunReport, Vec<Event>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let run = grove::run::run(
        &fixture.repo,
        options,
        models(server, Provider::Anthropic, true),
        EventSink::new(tx),
        CancellationToken::new(),
    );
    let report = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ends: no subtask waits forever")
        .unwrap();
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    (report, events)
}

fn statuses(report: &RunReport) -> Vec<(String, SubtaskOutcome, Option<VerdictKind>)> {
    report
        .subtasks
        .iter()
        .map(|subtask| (subtask.id.to_string(), subtask.status, subtask.verdict))
        .collect()
}

fn merged(ids: &[&str]) -> Vec<(String, SubtaskOutcome, Option<VerdictKind>)> {
    ids.iter()
        .map(|id| {
            (
                (*id).to_owned(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve),
            )
        })
        .collect()
}

/// The positions (in arrival order) of the requests of the subtask whose brief holds
/// `marker`, worker's and reviewer's alike (a review brief quotes the brief).
fn positions(requests: &[RecordedRequest], marker: &str) -> Vec<usize> {
    requests
        .iter()
        .enumerate()
        .filter(|(_, request)| who(request) != Who::Lead)
        .filter(|(_, request)| {
            // A later subtask's reviewer lists the earlier one: only its own brief counts.
            let text = first_user_text(request);
            let own = text
                .strip_prefix("# The subtask's brief\n\n")
                .unwrap_or(&text);
            own.starts_with(marker)
        })
        .map(|(index, _)| index)
        .collect()
}

/// The first worker request of the subtask whose brief holds `marker`.
fn first_worker_request(requests: &[RecordedRequest], marker: &str) -> usize {
    requests
        .iter()
        .position(|request| {
            who(request) == Who::Worker && first_user_text(request).contains(marker)
        })
        .unwrap()
}

/// The results the worker of `marker` got for its tool calls, as `(call id, text,
/// is_error)`, from its last request.
fn worker_results(requests: &[RecordedRequest], marker: &str) -> Vec<(String, String, bool)> {
    let last = requests
        .iter()
        .rfind(|request| who(request) == Who::Worker && first_user_text(request).contains(marker))
        .unwrap();
    tool_results(last)
}

/// Every tool result of `request` (Anthropic format) as `(call id, text, is_error)`.
fn tool_results(request: &RecordedRequest) -> Vec<(String, String, bool)> {
    request
        .messages()
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| {
            let text = match &block["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|part| part["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            (
                block["tool_use_id"].as_str().unwrap_or_default().to_owned(),
                text,
                block["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

fn call(tool: &str, input: Value) -> String {
    format!("CALL {tool} {input}")
}

/// The waits for earlier subtasks (not those for a free `--jobs` slot alone).
fn waiting(events: &[Event]) -> Vec<(String, Vec<String>)> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::SubtaskWaiting {
                label, waits_for, ..
            } if !waits_for.is_empty() => Some((
                label.to_string(),
                waits_for.iter().map(ToString::to_string).collect(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_paths_run_one_after_the_other_and_the_later_builds_on_the_earlier() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n"), ("src/b.txt", "beta\n")]);
    let first = format!(
        "[first] Rewrite a.\n{}",
        call(
            "write_file",
            json!({"path": "src/a.txt", "content": "FIRST\n"})
        )
    );
    let second = format!(
        "[second] Extend a.\n{}\n{}",
        call("read_file", json!({"path": "src/a.txt"})),
        call(
            "edit_file",
            json!({"path": "src/a.txt", "old_string": "FIRST", "new_string": "FIRST SECOND"})
        )
    );
    let server = server(vec![
        json!({"task": first, "paths": ["src/a.txt"]}),
        json!({"task": second, "paths": ["src/*.txt"]}),
    ])
    .await;

    let (report, events) = run_with_events(&fixture, &server, options(&fixture, "t")).await;

    server.assert_no_violations();
    assert_eq!(statuses(&report), merged(&["S1", "S2"]), "{report:#?}");
    assert_eq!(
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        "FIRST SECOND\n",
        "the second subtask's change is on top of the first's"
    );
    let requests = server.requests();
    let base = fixture.rev("HEAD~2").to_string();
    // The result as S1's merge left it: the first parent of S2's merge.
    let second_start = fixture
        .rev(&format!("grove/{}/result~1", report.run_id))
        .to_string();
    let told = |marker: &str| {
        let system = requests[first_worker_request(&requests, marker)].system_text();
        system
            .split_once("Your subtask started from commit ")
            .map(|(_, rest)| rest.split(')').next().unwrap_or_default().to_owned())
    };
    assert_eq!(
        (told("[first]"), told("[second]")),
        (
            Some(format!("{} (the run's base", &base[..12])),
            Some(format!(
                "{} (the run's result as this subtask found it, with the work merged before it",
                &second_start[..12]
            )),
        ),
        "each worker is told the commit its work is diffed against"
    );
    let s1_last = *positions(&requests, "[first]").last().unwrap();
    assert!(
        first_worker_request(&requests, "[second]") > s1_last,
        "the second worker's first request comes after every request of the first \
         subtask (its worker and its reviewer): it started once the first was merged"
    );
    assert_eq!(
        worker_results(&requests, "[second]"),
        vec![
            ("w0".to_owned(), "     1\tFIRST\n".to_owned(), false),
            (
                "w1".to_owned(),
                "edited `src/a.txt`: 1 replacement; as the file now reads:\n     1\tFIRST SECOND\n"
                    .to_owned(),
                false
            ),
        ],
        "the second worker reads the first one's change: it started from the result"
    );
    let review = requests
        .iter()
        .find(|r| who(r) == Who::Reviewer && own_review_text(r).contains("[second]"))
        .map(first_user_text)
        .unwrap();
    assert!(
        review.contains("-FIRST\n+FIRST SECOND") && !review.contains("-alpha"),
        "the second reviewer sees the diff against the second's start, not the base: {review}"
    );
    assert!(
        review.contains(
            "# What the diff starts from\n\nThe diff is against the run's result it started \
             from, not the base: it already holds the merged work of the subtasks below, which \
             is in the tree you read but not in the diff.\n\n- S1: [first] Rewrite a.\n"
        ) && review.contains("# The diff against the run's result it started from ("),
        "the reviewer is told what the subtask built on, each earlier subtask by id and \
         brief: {review}"
    );
    assert_eq!(
        waiting(&events),
        vec![("S2".to_owned(), vec!["S1".to_owned()])],
        "the live view is told who waits for whom"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_after_chain_runs_in_order_each_on_the_previous_result_even_with_one_job() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n")]);
    let step = |marker: &str, old: &str, new: &str| {
        format!(
            "[{marker}] Extend a.\n{}\n{}",
            call("read_file", json!({"path": "src/a.txt"})),
            call(
                "edit_file",
                json!({"path": "src/a.txt", "old_string": old, "new_string": new})
            )
        )
    };
    let server = server(vec![
        json!({"task": step("one", "alpha", "ONE")}),
        json!({"task": step("two", "ONE", "ONE TWO"), "after": ["S1"]}),
        json!({"task": step("three", "ONE TWO", "ONE TWO THREE"), "after": ["S2"]}),
    ])
    .await;
    let options = RunOptions {
        jobs: 1,
        ..options(&fixture, "t")
    };

    let (report, events) = run_with_events(&fixture, &server, options).await;

    server.assert_no_violations();
    assert_eq!(
        statuses(&report),
        merged(&["S1", "S2", "S3"]),
        "{report:#?}"
    );
    assert_eq!(
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        "ONE TWO THREE\n"
    );
    let requests = server.requests();
    let reads: Vec<String> = ["one", "two", "three"]
        .iter()
        .map(|marker| {
            worker_results(&requests, &format!("[{marker}]"))[0]
                .1
                .clone()
        })
        .collect();
    assert_eq!(
        reads,
        vec!["     1\talpha\n", "     1\tONE\n", "     1\tONE TWO\n"],
        "each subtask of the chain sees the change of the one before it"
    );
    for (earlier, later) in [("[one]", "[two]"), ("[two]", "[three]")] {
        assert!(
            first_worker_request(&requests, later) > *positions(&requests, earlier).last().unwrap(),
            "{later} starts only after {earlier} is merged"
        );
    }
    let mut waits = waiting(&events);
    waits.sort();
    assert_eq!(
        waits,
        vec![
            ("S2".to_owned(), vec!["S1".to_owned()]),
            ("S3".to_owned(), vec!["S2".to_owned()]),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_naming_itself_a_later_an_unknown_or_a_malformed_id_is_refused_to_the_lead() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n")]);
    let write = call("write_file", json!({"path": "src/a.txt", "content": "A\n"}));
    let server = server(vec![
        json!({"task": format!("[self] {write}"), "after": ["S1"]}),
        json!({"task": format!("[cycle] {write}"), "after": ["S2"]}),
        json!({"task": format!("[ok]\n{write}")}),
        json!({"task": format!("[later] {write}"), "after": ["S1", "S3"]}),
        json!({"task": format!("[bad] {write}"), "after": ["first"]}),
        json!({"task": format!("[glob] {write}"), "paths": ["../outside/**"]}),
        json!({"task": format!("[capped] {write}")}),
        json!({"task": format!("[unknown] {write}"), "after": ["S2"]}),
    ])
    .await;
    // One subtask at most: the `[capped]` call takes S2 and is refused.
    let options = RunOptions {
        max_subtasks: 1,
        ..options(&fixture, "t")
    };

    let (report, _) = run_with_events(&fixture, &server, options).await;

    assert_eq!(
        statuses(&report),
        merged(&["S1"]),
        "only the valid call made a subtask"
    );
    let lead = server
        .requests()
        .into_iter()
        .rfind(|request| who(request) == Who::Lead)
        .unwrap();
    let refused: Vec<(String, String, bool)> = tool_results(&lead)
        .into_iter()
        .filter(|(id, _, _)| id != "lead_call_2")
        .collect();
    let refusal = |id: &str, text: &str| (id.to_owned(), text.to_owned(), true);
    assert_eq!(
        refused,
        vec![
            refusal(
                "lead_call_0",
                "`after` names S1, which is this very subtask (this call is S1); name only \
                 subtasks delegated before this call"
            ),
            refusal(
                "lead_call_1",
                "`after` names S2, which is not delegated yet (this call is S1): subtasks \
                 are numbered S1, S2, … in call order and wait only for earlier ones, so a \
                 cycle cannot be expressed; delegate the work it must wait for first, then \
                 this one with that subtask's id in `after`"
            ),
            refusal(
                "lead_call_3",
                "`after` names S3, which is not delegated yet (this call is S2): subtasks \
                 are numbered S1, S2, … in call order and wait only for earlier ones, so a \
                 cycle cannot be expressed; delegate the work it must wait for first, then \
                 this one with that subtask's id in `after`"
            ),
            refusal(
                "lead_call_4",
                "`after` entry `first` is not a subtask id; name earlier subtasks by the ids \
                 their results begin with, e.g. [\"S1\"]"
            ),
            refusal(
                "lead_call_5",
                "`paths` entry `../outside/**` climbs out with `..`; write it relative to the \
                 repository root; fix it, or leave `paths` out to let the subtask change any \
                 file"
            ),
            refusal(
                "lead_call_6",
                "the run's limit of 1 subtasks is reached; finish with a summary"
            ),
            refusal(
                "lead_call_7",
                "`after` names S2, which is no subtask of this run (its delegate call was \
                 refused); the subtasks so far are: S1"
            ),
        ],
        "each refusal says what was wrong and what to do, as an error result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_cannot_write_outside_its_paths_and_a_shell_write_there_is_flagged() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n"), ("docs/guide.md", "guide\n")]);
    std::os::unix::fs::symlink("../docs/guide.md", fixture.repo.join("src/guide.md")).unwrap();
    fixture.commit_all("a link from src into docs");
    let calls = [
        call(
            "write_file",
            json!({"path": "docs/guide.md", "content": "X\n"}),
        ),
        call(
            "write_file",
            json!({"path": "src/../docs/guide.md", "content": "X\n"}),
        ),
        call(
            "write_file",
            json!({"path": "src/guide.md", "content": "X\n"}),
        ),
        call(
            "edit_file",
            json!({"path": "./src/guide.md", "old_string": "guide", "new_string": "X"}),
        ),
        call("write_file", json!({"path": "SRC/a.txt", "content": "X\n"})),
        call(
            "edit_file",
            json!({"path": "src/a.txt", "old_string": "alpha", "new_string": "ALPHA"}),
        ),
        call("bash", json!({"command": "echo sneaky > docs/notes.md"})),
    ];
    let brief = format!("[scoped] Shout a.\n{}", calls.join("\n"));
    let server = server(vec![json!({"task": brief, "paths": ["src/**"]})]).await;

    let (report, _) = run_with_events(&fixture, &server, options(&fixture, "t")).await;

    server.assert_no_violations();
    let requests = server.requests();
    let results: Vec<(String, String, bool)> = worker_results(&requests, "[scoped]")
        .into_iter()
        .take(6)
        .collect();
    let refused = |id: &str, shown: &str, outside: &str, through: &str| {
        (
            id.to_owned(),
            format!(
                "cannot write `{shown}`: this subtask may change only files matching its \
                 `paths` (src/**), and `{outside}` is outside them{through}. Leave it \
                 unchanged; if the task needs it changed, say so in your final message."
            ),
            true,
        )
    };
    assert_eq!(
        results,
        vec![
            refused("w0", "docs/guide.md", "docs/guide.md", ""),
            refused("w1", "src/../docs/guide.md", "docs/guide.md", ""),
            refused(
                "w2",
                "src/guide.md",
                "docs/guide.md",
                " (`src/guide.md` leads to `docs/guide.md`)"
            ),
            refused(
                "w3",
                "./src/guide.md",
                "docs/guide.md",
                " (`src/guide.md` leads to `docs/guide.md`)"
            ),
            refused("w4", "SRC/a.txt", "SRC/a.txt", ""),
            (
                "w5".to_owned(),
                "edited `src/a.txt`: 1 replacement; as the file now reads:\n     1\tALPHA\n"
                    .to_owned(),
                false
            ),
        ],
        "the file tools refuse every spelling of a path outside `paths`, a link out of \
         them included, and write inside them"
    );
    let told = requests
        .iter()
        .find(|r| who(r) == Who::Worker)
        .map(first_user_text)
        .unwrap();
    assert_eq!(
        told,
        format!(
            "{brief}\n\n(grove: change only files matching `src/**`; the file tools refuse \
             others, and the reviewer is told of any other file your work changes.)"
        ),
        "the worker is told its scope with its brief"
    );
    assert_eq!(statuses(&report), merged(&["S1"]), "{report:#?}");
    let subtask = &report.subtasks[0];
    assert_eq!(
        subtask.outside_paths,
        vec!["docs/notes.md".to_owned()],
        "what the shell wrote outside `paths` is listed, not rejected by grove"
    );
    assert_eq!(
        (
            String::from_utf8(fixture.read("docs/guide.md")).unwrap(),
            String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        ),
        ("guide\n".to_owned(), "ALPHA\n".to_owned()),
        "nothing outside `paths` was written by the file tools"
    );
    let review = requests
        .iter()
        .find(|r| who(r) == Who::Reviewer)
        .map(first_user_text)
        .unwrap();
    assert!(
        review.contains(
            "# Attention: Changes outside the subtask's paths\n\nThe brief limits this \
             subtask to the files matching `src/**`, but the diff changes these files \
             outside them"
        ) && review.contains("- docs/notes.md\n"),
        "the reviewer is told of the write outside `paths`: {review}"
    );
    let json = serde_json::to_value(subtask).unwrap();
    assert_eq!(json["outside_paths"], json!(["docs/notes.md"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subtask_waiting_when_the_run_stopped_still_waits_after_resume_and_keeps_its_paths() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n"), ("docs/x.md", "x\n")]);
    let first = format!(
        "[first] Rewrite a.\n{}",
        call(
            "write_file",
            json!({"path": "src/a.txt", "content": "FIRST\n"})
        )
    );
    let second = format!(
        "[second] Extend a.\n{}\n{}\n{}",
        call("read_file", json!({"path": "src/a.txt"})),
        call("write_file", json!({"path": "docs/x.md", "content": "X\n"})),
        call(
            "edit_file",
            json!({"path": "src/a.txt", "old_string": "FIRST", "new_string": "FIRST SECOND"})
        )
    );
    let inputs = vec![
        json!({"task": first, "paths": ["src/a.txt"]}),
        json!({"task": second, "paths": ["src/**"]}),
    ];
    let cancel = CancellationToken::new();
    let trip = cancel.clone();
    let delegations = inputs.clone();
    let stopped = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead(request, &delegations),
        Who::Worker => {
            if answered(request) {
                // Ctrl-C once the first worker's write ran, while the second waits.
                trip.cancel();
            }
            worker(request)
        }
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let report = grove::run::run(
        &fixture.repo,
        options(&fixture, "t"),
        models(&stopped, Provider::Anthropic, true),
        EventSink::discard(),
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(
        report.status,
        grove::run::RunEnd::Interrupted,
        "{report:#?}"
    );
    assert_eq!(
        positions(&stopped.requests(), "[second]"),
        Vec::<usize>::new(),
        "the second subtask never started before the interrupt: it was waiting"
    );

    let server = server(inputs).await;
    let resumed = grove::run::resume(
        &fixture.repo,
        &report.run_id,
        fixture.options(),
        |_| Ok(models(&server, Provider::Anthropic, true)),
        EventSink::discard(),
        CancellationToken::new(),
    );
    let resumed = tokio::time::timeout(Duration::from_secs(120), resumed)
        .await
        .expect("the resumed run ends")
        .unwrap();

    server.assert_no_violations();
    assert_eq!(statuses(&resumed), merged(&["S1", "S2"]), "{resumed:#?}");
    let requests = server.requests();
    assert!(
        first_worker_request(&requests, "[second]")
            > *positions(&requests, "[first]").last().unwrap(),
        "after the resume, the second subtask still waits until the first is merged"
    );
    let results = worker_results(&requests, "[second]");
    assert_eq!(
        (results[0].1.as_str(), results[1].2, results[2].2),
        ("     1\tFIRST\n", true, false),
        "it starts from the result, its write outside `paths` is still refused: {results:?}"
    );
    assert_eq!(
        (
            String::from_utf8(fixture.read("src/a.txt")).unwrap(),
            String::from_utf8(fixture.read("docs/x.md")).unwrap()
        ),
        ("FIRST SECOND\n".to_owned(), "x\n".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_review_cannot_keep_a_subtask_built_on_one_it_rejects() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n"), ("src/b.txt", "beta\n")]);
    let first = format!(
        "[first] Rewrite a.\n{}",
        call(
            "write_file",
            json!({"path": "src/a.txt", "content": "FIRST\n"})
        )
    );
    let second = format!(
        "[second] Rewrite b.\n{}",
        call(
            "write_file",
            json!({"path": "src/b.txt", "content": "SECOND\n"})
        )
    );
    let server = server(vec![
        json!({"task": first, "paths": ["src/a.txt"]}),
        json!({"task": second, "paths": ["src/b.txt"], "after": ["S1"]}),
    ])
    .await;
    let options = RunOptions {
        apply: false,
        ..options(&fixture, "t")
    };
    let (report, _) = run_with_events(&fixture, &server, options).await;
    assert_eq!(statuses(&report), merged(&["S1", "S2"]), "{report:#?}");
    let repo = fixture.open().await;
    let review = grove::review::load(&repo, &report.run_id).await.unwrap();
    let shown: Vec<(String, Vec<String>, String)> = review
        .subtasks
        .iter()
        .map(|subtask| {
            let files = subtask.diffstat.as_ref().unwrap().files.iter();
            let diff = review
                .render_diff(&repo, subtask, Colour::Never)
                .unwrap()
                .unwrap();
            (
                subtask.id.to_string(),
                files.map(|file| file.path.clone()).collect(),
                diff.lines()
                    .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            (
                "S1".to_owned(),
                vec!["src/a.txt".to_owned()],
                "+FIRST".to_owned()
            ),
            (
                "S2".to_owned(),
                vec!["src/b.txt".to_owned()],
                "+SECOND".to_owned()
            ),
        ],
        "`grove review` shows each subtask's own work: S2's against where it started"
    );
    let reject = |id: &str| (id.to_owned(), VerdictKind::Reject);

    let refused = grove::review::override_verdicts(
        &repo,
        &report.run_id,
        &[reject("S1")],
        grove::review::AfterReview::RecordOnly,
    )
    .await
    .map(drop)
    .unwrap_err()
    .to_string();

    assert_eq!(
        refused,
        "S2 was built on S1's work (it started from the result once S1 was merged), so \
         approving S2 while rejecting S1 would bring S1's changes back; reject S2 too, or \
         approve S1",
        "rejecting S1 alone would merge it back in with S2"
    );
    let both = grove::review::override_verdicts(
        &repo,
        &report.run_id,
        &[reject("S1"), reject("S2")],
        grove::review::AfterReview::RecordOnly,
    )
    .await
    .unwrap();
    let result = repo
        .ref_target(&format!("refs/heads/grove/{}/result", report.run_id))
        .unwrap()
        .unwrap();
    assert_eq!(
        (both.recorded.len(), result.to_string()),
        (2, report.base.clone()),
        "rejecting both leaves the base"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plain_view_shows_a_waiting_subtask_and_the_json_its_outside_paths() {
    let fixture = GitFixture::with_files(&[("src/a.txt", "alpha\n"), ("docs/x.md", "x\n")]);
    let first = format!(
        "[first] Rewrite a.\n{}\n{}",
        call(
            "write_file",
            json!({"path": "src/a.txt", "content": "FIRST\n"})
        ),
        call("bash", json!({"command": "echo y > docs/y.md"}))
    );
    let second = format!(
        "[second] Extend a.\n{}",
        call(
            "edit_file",
            json!({"path": "src/a.txt", "old_string": "FIRST", "new_string": "FIRST SECOND"})
        )
    );
    let server = server(vec![
        json!({"task": first, "paths": ["src/**"]}),
        json!({"task": second, "paths": ["src/a.txt"]}),
    ])
    .await;

    let output = crate::support::grove::Grove::in_repo(&fixture)
        .with_server(&server)
        .grove_async(["run", "t", "--json"])
        .await;

    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let waiting: Vec<&str> = stderr.lines().filter(|l| l.contains("waits for")).collect();
    assert_eq!(
        waiting,
        vec!["S2: waits for S1 to settle, then starts from their result: [second] Extend a."],
        "the plain view says who waits for whom: {stderr}"
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let outside: Vec<Value> = json["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|subtask| subtask["outside_paths"].clone())
        .collect();
    assert_eq!(
        outside,
        vec![json!(["docs/y.md"]), Value::Null],
        "`outside_paths` lists the shell's write outside `paths`, and is absent when empty"
    );
}

#[test]
fn a_journal_written_before_scopes_still_reads_and_a_scope_round_trips() {
    use grove::store::journal::{ContextMode, Entry, SubtaskKind};
    let old = r#"{"type":"subtask_started","subtask":"S1","task":"t","branch":"b","mode":"isolated","agent":"worker"}"#;
    let started = |paths: &[&str], after: &[&str], waits_for: &[&str]| Entry::SubtaskStarted {
        subtask: SubtaskId(1),
        task: "t".into(),
        branch: "b".into(),
        mode: ContextMode::Isolated,
        agent: "worker".into(),
        paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        after: after.iter().map(|a| a.parse().unwrap()).collect(),
        waits_for: waits_for.iter().map(|w| w.parse().unwrap()).collect(),
        kind: SubtaskKind::Task,
        replaces: None,
        start_from: None,
    };
    assert_eq!(
        serde_json::from_str::<Entry>(old).unwrap(),
        started(&[], &[], &[]),
        "an old record has no scope and waits for nothing"
    );
    assert_eq!(
        serde_json::to_string(&started(&[], &[], &[])).unwrap(),
        old,
        "a subtask without scope is journaled as before, byte for byte"
    );
    let scoped = started(&["src/**"], &["S1"], &["S1", "S2"]);
    let line = serde_json::to_string(&scoped).unwrap();
    assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), scoped);
    let point = r#"{"type":"start_point","subtask":"S3","commit":"0123456789abcdef0123456789abcdef01234567"}"#;
    assert_eq!(
        serde_json::from_str::<Entry>(point).unwrap(),
        Entry::StartPoint {
            subtask: SubtaskId(3),
            commit: CommitId::parse("0123456789abcdef0123456789abcdef01234567").unwrap()
        }
    );
}
