//! A scripted run: replies for each role of a `grove run` against the fake server, the
//! models and options a test run uses, and a repository with project rules — what the
//! run, fault, config, backend and sandbox suites share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{ModelChoice, Models, RunError, RunOptions, RunReport};

use super::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use super::git_fixture::GitFixture;
use super::merge_order::MergedFirst;
use super::requests::{Who, who};

pub const RULES: &str = "House rule: keep every line under 80 columns.";

/// The text of the first user message: a subagent's brief.
pub fn first_user_text(request: &RecordedRequest) -> String {
    request.first_user_text()
}

/// A reviewer's first message without the section that lists the run's other subtasks,
/// whose briefs would otherwise match what a test looks for in the reviewed one.
pub fn own_review_text(request: &RecordedRequest) -> String {
    let text = request.first_user_text();
    let Some((before, others)) = text.split_once("# The run's other subtasks\n\n") else {
        return text;
    };
    let after = others.split_once("\n\n# ").map_or("", |(_, rest)| rest);
    format!("{before}# {after}")
}

pub fn answered(request: &RecordedRequest) -> bool {
    !request.tool_results().is_empty()
}

pub fn usage(turn: Turn) -> Turn {
    turn.usage(100, 10, 50, 5)
}

/// A lead that delegates `briefs` at once, then summarises.
pub fn lead_reply(request: &RecordedRequest, briefs: &[(&str, Option<&str>)]) -> Reply {
    if answered(request) {
        return usage(Turn::text("All subtasks are done.")).into();
    }
    let mut turn = Turn::text("Delegating.");
    for (index, (brief, mode)) in briefs.iter().enumerate() {
        let mut input = json!({ "task": brief });
        if let Some(mode) = mode {
            input["mode"] = json!(mode);
        }
        turn = turn.tool_use(&format!("lead_call_{index}"), "delegate", input);
    }
    usage(turn).into()
}

/// A worker that follows briefs of the form `WRITE <path> <content>`, and writes again
/// as a model would when its write did not happen: grove stopped before it ran (a resumed
/// run answers it as interrupted) or it came back as an error (a pause cut it short).
pub fn worker_reply(request: &RecordedRequest) -> Reply {
    let written = request
        .tool_results()
        .last()
        .is_some_and(|(_, text)| text.starts_with("created `") || text.starts_with("overwrote `"));
    if answered(request) && written {
        return usage(Turn::text("WORKER-FINAL: wrote the file as asked.")).into();
    }
    // The brief is the newest user text, in isolated and forked conversations alike (a
    // resumed one's newest user message holds only the interrupted call's answer).
    let brief = request.last_user_text();
    let brief = match brief.contains("WRITE ") {
        true => brief,
        false => first_user_text(request),
    };
    // A call id is used once in a conversation.
    let id = format!("worker_call_{}", request.tool_results().len() + 1);
    write_call(&brief, &id)
}

/// The `write_file` call a `WRITE <path> <content>` line in `brief` asks for.
pub fn write_reply(brief: &str) -> Reply {
    write_call(brief, "worker_call_1")
}

/// [`write_reply`] with the call id `id`.
fn write_call(brief: &str, id: &str) -> Reply {
    let line = brief
        .lines()
        .rev()
        .find(|line| line.starts_with("WRITE "))
        .unwrap_or_else(|| panic!("brief without WRITE: {brief}"));
    let mut parts = line.splitn(3, ' ').skip(1);
    let path = parts.next().unwrap();
    let content = parts.next().unwrap_or_default();
    usage(Turn::text("Writing.").tool_use(
        id,
        "write_file",
        json!({ "path": path, "content": format!("{content}\n") }),
    ))
    .into()
}

/// A reviewer that rejects diffs touching `junk`, approves the rest.
pub fn reviewer_reply(request: &RecordedRequest) -> Reply {
    if answered(request) {
        return usage(Turn::text("Verdict given.")).into();
    }
    let brief = own_review_text(request);
    let input = if brief.contains("junk") {
        json!({
            "verdict": "reject",
            "summary": "Adds a junk file nobody asked for.",
            "findings": [{ "path": "junk.txt", "line": 1, "problem": "not part of the task" }]
        })
    } else {
        json!({ "verdict": "approve", "summary": "Does what the brief asks." })
    };
    usage(Turn::new().tool_use("review_call_1", "submit_verdict", input)).into()
}

pub fn models(server: &FakeServer, provider: Provider, stream: bool) -> Models {
    let choice = |name: &str| ModelChoice {
        client: server.model(provider, stream),
        name: name.into(),
    };
    Models {
        provider: provider.as_str().into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    }
}

pub fn options(fixture: &GitFixture, task: &str) -> RunOptions {
    RunOptions {
        jobs: 3,
        git: fixture.options(),
        ..RunOptions::new(task)
    }
}

pub async fn run(
    fixture: &GitFixture,
    server: &FakeServer,
    provider: Provider,
    options: RunOptions,
) -> Result<RunReport, RunError> {
    grove::run::run(
        &fixture.repo,
        options,
        models(server, provider, true),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
}

pub fn repo_with_rules() -> GitFixture {
    GitFixture::with_files(&[
        ("src/a.txt", "alpha\n"),
        ("src/b.txt", "beta\n"),
        ("src/c.txt", "gamma\n"),
        ("src/notes.txt", "READ-BY-WORKER: private notes\n"),
        ("AGENTS.md", RULES),
    ])
}

pub const USER_TASK: &str = "USER-TASK: shout the two words and add nothing else";

/// A server whose lead delegates `briefs` in one response, with the standard worker and
/// reviewer scripts.
pub async fn scripted_server(
    briefs: &'static [(&'static str, Option<&'static str>)],
) -> FakeServer {
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, briefs),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await
}

/// [`scripted_server`] whose second brief's review waits for S1's merge, so that the
/// result holds S1's work, then S2's, whatever the timing (see `merge_order`).
pub async fn scripted_server_s1_first(
    fixture: &GitFixture,
    briefs: &'static [(&'static str, Option<&'static str>)],
) -> FakeServer {
    let order = MergedFirst::new(fixture, "S1", briefs[1].0);
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, briefs),
        Who::Worker => worker_reply(request),
        Who::Reviewer => order.hold(request, reviewer_reply(request)),
    })
    .await
}
