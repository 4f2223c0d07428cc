//! The history the user's branch gets (issue 14, done-means 7), end to end through the
//! binary: by default one commit per merged subtask with the user's own git identity and
//! every `Grove-*` trailer; `history = "merge"` the merge graph as before; grove's
//! identity only when none is configured; a resume after the apply never applies twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::RunEnd;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    first_user_text, models, options, reviewer_reply, scripted_server_s1_first, usage, worker_reply,
};

/// Two subtasks, each brief two lines: a subject line and the `WRITE` the worker does.
const BRIEFS: &[(&str, Option<&str>)] = &[
    ("Make a shout.\nWRITE a.txt ALPHA", None),
    ("Make b shout.\nWRITE b.txt BETA", None),
];

/// The identity variables the sealed runner sets; a test that wants the identity to come
/// from git config (or from nowhere) removes them.
const IDENTITY_VARS: [&str; 4] = [
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// A repository with two files and, when given, `.grove/config.toml` committed.
fn repo(config: Option<&str>) -> GitFixture {
    let fixture = GitFixture::with_files(&[("a.txt", "alpha\n"), ("b.txt", "beta\n")]);
    if let Some(config) = config {
        fixture.write(".grove/config.toml", config);
        fixture.commit_all("grove config");
    }
    fixture
}

/// The sealed binary on `fixture`, with no identity in its environment.
fn grove_without_identity(fixture: &GitFixture, server: &FakeServer) -> Grove {
    IDENTITY_VARS
        .iter()
        .fold(Grove::in_repo(fixture).with_server(server), |grove, var| {
            grove.env_remove(var)
        })
}

async fn run_json(grove: &Grove) -> (Output, Value) {
    let output = grove
        .grove_async([
            "run",
            "--json",
            "--jobs",
            "2",
            "--worker-model",
            "w-model",
            "--reviewer-model",
            "r-model",
            "shout both files",
        ])
        .await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "both subtasks merge: exit 0\n{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    (output, report)
}

/// Author, committer (with their dates) and full message of every commit in `range`,
/// oldest first.
fn log(fixture: &GitFixture, range: &str) -> Vec<String> {
    let text = fixture.git(&[
        "log",
        "--reverse",
        "--format=%an <%ae> %aI%n%cn <%ce> %cI%n%B%x00",
        range,
    ]);
    text.split('\0')
        .map(|entry| entry.trim_start_matches('\n').to_owned())
        .filter(|entry| !entry.is_empty())
        .collect()
}

/// The subtask's total tokens as `--json` reports them.
fn tokens(subtask: &Value) -> u64 {
    [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ]
    .iter()
    .map(|key| subtask[*key].as_u64().unwrap())
    .sum()
}

/// The message the squashed commit of `subtask` (of `report`) must carry: the worker's
/// one-line summary is its subject, the two-line brief is quoted under it.
fn expected_message(report: &Value, index: usize, subject: &str, write: &str) -> String {
    let subtask = &report["subtasks"][index];
    format!(
        "WORKER-FINAL: wrote the file as asked.\n\nThe brief:\n    {subject}\n    {write}\n\n\
         Grove-Run: {run}\nGrove-Subtask: {id}\nGrove-Verdict: approve\n\
         Grove-Reviewer-Model: r-model\nGrove-Worker-Model: w-model\nGrove-Tokens: {tokens}\n",
        run = report["run_id"].as_str().unwrap(),
        id = subtask["id"].as_str().unwrap(),
        tokens = tokens(subtask),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn squash_gives_the_branch_one_commit_per_subtask_with_the_users_identity_and_trailers() {
    let fixture = repo(None);
    fixture.git(&["config", "user.name", "Ursula User"]);
    fixture.git(&["config", "user.email", "ursula@example.org"]);
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;

    let (_, report) = run_json(&grove_without_identity(&fixture, &server)).await;

    server.assert_no_violations();
    let run_id = report["run_id"].as_str().unwrap();
    let user = "Ursula User <ursula@example.org> 2026-01-01T00:00:00Z";
    assert_eq!(
        log(&fixture, &format!("{base}..main")),
        vec![
            format!(
                "{user}\n{user}\n{}",
                expected_message(&report, 0, "Make a shout.", "WRITE a.txt ALPHA")
            ),
            format!(
                "{user}\n{user}\n{}",
                expected_message(&report, 1, "Make b shout.", "WRITE b.txt BETA")
            ),
        ],
        "main gets exactly one commit per subtask, in merge order, authored and committed \
         by the user's configured identity, with the brief, the summary and every trailer"
    );
    let result = format!("grove/{run_id}/result");
    assert_eq!(
        (
            fixture.git(&["rev-parse", "main^{tree}"]),
            fixture.git(&["rev-parse", "main~1^{tree}"]),
            fixture.git(&["rev-parse", "main~2"]),
        ),
        (
            fixture.git(&["rev-parse", &format!("{result}^{{tree}}")]),
            fixture.git(&["rev-parse", &format!("{result}~1^{{tree}}")]),
            base.clone(),
        ),
        "each commit's tree is the result right after its subtask's merge; the last one's \
         is the result's, on the base"
    );
    assert_eq!(
        (
            fixture.git(&["rev-parse", &format!("grove/{run_id}/squashed")]),
            report["result_commit"].as_str().unwrap().to_owned(),
            fixture.git(&[
                "rev-list",
                "--merges",
                "--count",
                &format!("{base}..{result}")
            ]),
            // By the graph, not by `git log`: the checkpoints are dated when they are
            // made, so the log's order is the workers' timing.
            [format!("{result}^2"), format!("{result}~1^2")].map(|checkpoint| fixture.git(&[
                "log",
                "-1",
                "--format=%s",
                &checkpoint
            ])),
        ),
        (
            fixture.rev("main").to_string(),
            fixture.rev(&result).to_string(),
            "2".to_owned(),
            [
                format!("grove {run_id}/2: S2: turn 1"),
                format!("grove {run_id}/1: S1: turn 1"),
            ],
        ),
        "the squashed commits stay on grove/<run>/squashed; the result keeps the merge graph \
         over the workers' checkpoint commits"
    );
    assert_eq!(
        fixture.git(&["status", "--porcelain"]),
        "",
        "the work tree has the result"
    );
    let message = report["apply"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 commits, one per subtask") && message.contains(&result),
        "the person is told what their branch got and where the graph is: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_merge_keeps_the_merge_graph_and_writes_no_squashed_commits() {
    let fixture = repo(Some("history = \"merge\"\n"));
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;

    let (_, report) = run_json(&Grove::in_repo(&fixture).with_server(&server)).await;

    let run_id = report["run_id"].as_str().unwrap();
    assert_eq!(
        (
            fixture.rev("main").to_string(),
            fixture.git(&["rev-list", "--merges", "--count", &format!("{base}..main")]),
            fixture.git(&[
                "log",
                "--first-parent",
                "--format=%s",
                &format!("{base}..main")
            ]),
            fixture.git(&["for-each-ref", "--format=%(refname)", "refs/heads/grove/"]),
        ),
        (
            report["result_commit"].as_str().unwrap().to_owned(),
            "2".to_owned(),
            format!("grove {run_id}: merge S2\ngrove {run_id}: merge S1"),
            format!("refs/heads/grove/{run_id}/result"),
        ),
        "main is the result itself: a merge commit per subtask, no squashed branch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_any_configured_identity_the_squashed_commits_are_groves() {
    let fixture = repo(None);
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;

    let (_, report) = run_json(&grove_without_identity(&fixture, &server)).await;

    let grove = "grove <grove@localhost> 2026-01-01T00:00:00Z";
    assert_eq!(
        log(&fixture, &format!("{base}..main")),
        vec![
            format!(
                "{grove}\n{grove}\n{}",
                expected_message(&report, 0, "Make a shout.", "WRITE a.txt ALPHA")
            ),
            format!(
                "{grove}\n{grove}\n{}",
                expected_message(&report, 1, "Make b shout.", "WRITE b.txt BETA")
            ),
        ],
        "no GIT_AUTHOR_*, no user.name/user.email anywhere: grove's identity, never a \
         name guessed from the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_after_the_apply_finds_the_squashed_commits_and_applies_nothing_twice() {
    let fixture = repo(None);
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let (_, report) = run_json(&grove).await;
    let run_id = report["run_id"].as_str().unwrap();
    let applied = fixture.rev("main");
    let history = log(&fixture, &format!("{base}..main"));
    assert_eq!(history.len(), 2, "precondition: applied as two commits");

    // The crash: the apply is done, the run's end never reached the journal.
    let run_dir = fixture.repo.join(".git/grove/runs").join(run_id);
    let journal = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap();
    let (kept, last) = journal.trim_end().rsplit_once('\n').unwrap();
    assert!(last.contains("\"run_finished\""), "precondition: {last}");
    std::fs::write(run_dir.join("journal.jsonl"), format!("{kept}\n")).unwrap();
    std::fs::remove_file(run_dir.join("state.json")).unwrap();

    // Another day: commits written again would differ from the ones main holds.
    let output = grove
        .clone()
        .env("GIT_AUTHOR_DATE", "2026-02-02T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-02-02T00:00:00Z")
        .grove_async(["resume", "--json", run_id])
        .await;

    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let resumed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            fixture.rev("main"),
            log(&fixture, &format!("{base}..main")),
            fixture.rev(&format!("grove/{run_id}/squashed")),
            resumed["applied"].clone(),
            resumed["apply"]["message"].clone(),
        ),
        (
            applied,
            history,
            applied,
            Value::Bool(true),
            Value::from("main already has the result."),
        ),
        "the resumed run reuses the squashed commits main already holds: nothing is \
         written or applied a second time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_check_that_ran_is_named_in_the_grove_check_trailer_of_each_commit() {
    let fixture = repo(Some(
        "[check]\ncommand = \"test -f a.txt && test -f b.txt\"\n",
    ));
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;

    let (_, report) = run_json(&Grove::in_repo(&fixture).with_server(&server)).await;

    let subtask_checks: Vec<&Value> = report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|subtask| &subtask["check"]["status"])
        .collect();
    assert_eq!(
        subtask_checks,
        vec!["passed", "passed"],
        "precondition: each subtask's check ran: {report:#}"
    );
    // The result's check, when this build runs one, goes on the last commit.
    let result_check = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|run| run["on"] == "result")
        .map(|run| format!(", result {}", run["status"].as_str().unwrap()))
        .unwrap_or_default();
    let trailers: Vec<String> = fixture
        .git(&[
            "log",
            "--reverse",
            "--format=%(trailers:key=Grove-Subtask,key=Grove-Check,valueonly,separator=%x20)",
            &format!("{base}..main"),
        ])
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        trailers,
        vec![
            "S1 S1 passed".to_owned(),
            format!("S2 S2 passed{result_check}")
        ],
        "git reads each commit's check from its trailers: the subtask's own, and the \
         result's on the last"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_users_environment_beats_their_config_as_it_does_for_git_commit() {
    let fixture = repo(None);
    fixture.git(&["config", "user.name", "Ursula User"]);
    fixture.git(&["config", "user.email", "ursula@example.org"]);
    let base = fixture.rev("HEAD").to_string();
    let server = scripted_server_s1_first(&fixture, BRIEFS).await;
    let grove = grove_without_identity(&fixture, &server)
        .env("GIT_AUTHOR_NAME", "Pair Programmer")
        .env("GIT_AUTHOR_EMAIL", "pair@example.org");

    run_json(&grove).await;

    assert_eq!(
        fixture.git(&[
            "log",
            "--format=%an <%ae>|%cn <%ce>",
            &format!("{base}..main")
        ]),
        "Pair Programmer <pair@example.org>|Ursula User <ursula@example.org>\n\
         Pair Programmer <pair@example.org>|Ursula User <ursula@example.org>",
        "GIT_AUTHOR_* from the environment names the author; the committer, unset there, \
         comes from the repository's config"
    );
}

/// A lead that delegates S1, then (once S1's result is back) S2, then finishes.
fn one_after_the_other(request: &RecordedRequest) -> Reply {
    let brief = match request.tool_results().len() {
        0 => BRIEFS[0].0,
        1 => BRIEFS[1].0,
        _ => return usage(Turn::text("Both are done.")).into(),
    };
    usage(Turn::text("Delegating.").tool_use(
        &format!("lead_call_{}", request.tool_results().len()),
        "delegate",
        json!({ "task": brief }),
    ))
    .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subtask_finished_before_an_interrupt_keeps_its_summary_in_the_resumed_history() {
    let fixture = repo(None);
    let base = fixture.rev("HEAD").to_string();
    // S2's first model call hangs until the test interrupts the run: S1 is merged and
    // finished by then (the lead delegates S2 only once S1's result is back).
    let never = Arc::new(Barrier::new(2));
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => one_after_the_other(request),
        Who::Worker
            if first_user_text(request).contains("b.txt") && request.tool_results().is_empty() =>
        {
            Reply::Gated {
                gate: never.clone(),
                reply: Box::new(worker_reply(request)),
            }
        }
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let cancel = CancellationToken::new();
    let running = grove::run::run(
        &fixture.repo,
        options(&fixture, "shout both files"),
        models(&server, Provider::Anthropic, true),
        EventSink::discard(),
        cancel.clone(),
    );
    let interrupt = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !server
            .requests()
            .iter()
            .any(|r| who(r) == Who::Worker && first_user_text(r).contains("b.txt"))
        {
            assert!(tokio::time::Instant::now() < deadline, "S2 never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        cancel.cancel();
    };
    let (interrupted, ()) = tokio::join!(running, interrupt);
    let interrupted = interrupted.unwrap();
    assert_eq!(
        interrupted.status,
        RunEnd::Interrupted,
        "precondition: {interrupted:#?}"
    );

    let healthy = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => one_after_the_other(request),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let resumed = grove::run::resume(
        &fixture.repo,
        &interrupted.run_id,
        fixture.options(),
        |_| Ok(models(&healthy, Provider::Anthropic, true)),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();

    assert!(resumed.applied, "{resumed:#?}");
    let summaries: Vec<String> = fixture
        .git(&[
            "log",
            "--reverse",
            "--format=%s|%b",
            &format!("{base}..main"),
        ])
        .lines()
        .filter(|line| line.contains('|') || line.starts_with("Worker's summary"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        summaries,
        vec![
            "WORKER-FINAL: wrote the file as asked.|The brief:",
            "WORKER-FINAL: wrote the file as asked.|The brief:",
        ],
        "S1 finished in the first process: its summary (its subject) comes back from the \
         journal, never the brief in its place"
    );
}
