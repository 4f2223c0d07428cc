//! Best of N at its edges: a judge that rejects every attempt (the run exits 3 with
//! nothing merged), `attempts` the lead gets wrong (a tool error, no subtask started),
//! and the run's `--attempts` with an agent CLI worker (each attempt one CLI run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use grove::agent::external::{BackendEnv, WorkerBackend};
use grove::model::Provider;
use grove::run::RunOptions;
use grove::store::journal::{Entry, SubtaskOutcome, VerdictKind};

use crate::suite::backends::{BRIEF, repo, statuses};
use crate::suite::sandbox::sandbox_or_skip;
use crate::support::attempts::*;
use crate::support::fake_cli::{self, FakeClis};
use crate::support::fake_server::{FakeServer, Reply};
use crate::support::git_fixture::{GitFixture, Leftovers};
use crate::support::grove::{Grove, grove_in as grove, only_run, stderr};
use crate::support::requests::{Who, heard_by_lead, who};
use crate::support::scripted_run::*;

/// The brief the attempts get; the arrival-order worker writes `{}`'s replacement.
const QUIET: &str = "Shout a.\nWRITE src/a.txt whisper";

/// The brief of attempts whose workers learn their attempt from their branch.
const LOUD: &str = "Make src/a.txt loud.";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_judge_that_rejects_every_attempt_merges_nothing_tells_the_lead_why_and_the_run_exits_3()
{
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => attempts_lead(request, QUIET, &json!(3)),
        Who::Worker => worker_reply(request),
        Who::Reviewer => rejecting_judge(request),
    })
    .await;
    let output = grove(&fixture, Some(&server), &["run", "--json", USER_TASK]).await;
    server.assert_no_violations();
    let err = stderr(&output);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let subtasks: Vec<(Value, Value, Value)> = report["subtasks"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| (s["id"].clone(), s["status"].clone(), s["verdict"].clone()))
        .collect();
    let rejected = |id: &str| (json!(id), json!("rejected"), json!("reject"));
    assert_eq!(
        (output.status.code(), subtasks),
        (
            Some(3),
            vec![rejected("S1"), rejected("S2"), rejected("S3")]
        ),
        "every attempt rejected is a subtask not done: exit 3\n{err}"
    );
    assert_eq!(
        fixture.read("src/a.txt"),
        b"alpha\n".to_vec(),
        "nothing of a rejected group reaches the branch"
    );
    let run_id = report["run_id"].as_str().unwrap();
    assert_eq!(
        verdicts(&journal(&fixture.repo, run_id)),
        ["S1", "S2", "S3"]
            .into_iter()
            .map(|id| (
                id.to_owned(),
                VerdictKind::Reject,
                "None of them shouts.".into()
            ))
            .collect::<Vec<_>>(),
        "each attempt carries the judge's rejection"
    );
    let told = lead_heard(&server);
    let kept = format!("refs/grove/archive/{run_id}");
    assert_eq!(
        told,
        format!(
            "S1 was tried 3 ways (attempts A, B, C); none was picked, so nothing of it was \
             merged.\n\
             - attempt A (S1) rejected by the judge with every other attempt: A whispers (kept \
             at {kept}/1)\n\
             - attempt B (S2) rejected by the judge with every other attempt: B whispers (kept \
             at {kept}/2)\n\
             - attempt C (S3) rejected by the judge with every other attempt: C whispers (kept \
             at {kept}/3)\n\
             the judge's summary, in its words:\n```text\nNone of them shouts.\n```\n\n\
             No other subtask is running."
        ),
        "the lead hears that nothing was picked, why each attempt lost, where its work is \
         kept and the judge's summary"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempts_of_zero_over_the_maximum_or_not_an_integer_is_a_tool_error_and_starts_nothing() {
    let fixture = repo_with_rules();
    let bad = [json!(0), json!(99), json!(2.5), json!("3")];
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead if request.tool_results().is_empty() => {
            let mut turn = crate::support::fake_server::Turn::text("Trying.");
            for (index, attempts) in bad.iter().enumerate() {
                turn = turn.tool_use(
                    &format!("d{index}"),
                    "delegate",
                    json!({"task": QUIET, "attempts": attempts}),
                );
            }
            usage(turn).into()
        }
        Who::Lead => usage(crate::support::fake_server::Turn::text("Gave up.")).into(),
        _ => panic!("no subagent runs: {}", request.raw_body),
    })
    .await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(
        lead_results(&server),
        vec![
            (
                true,
                "invalid input for `delegate`: the field `attempts` must be an integer ≥ 1, got an \
                 integer 0"
                    .into()
            ),
            (
                true,
                "`attempts` is 99, over this run's maximum of 4 (`max_attempts` in \
                 .grove/config.toml); ask for 4 or fewer"
                    .into()
            ),
            (
                true,
                "invalid input for `delegate`: the field `attempts` must be an integer ≥ 1, got a \
                 number 2.5"
                    .into()
            ),
            (
                true,
                "invalid input for `delegate`: the field `attempts` must be an integer ≥ 1, got a \
                 string \"3\""
                    .into()
            ),
        ],
        "each bad `attempts` is an error the lead reads, naming what it must be"
    );
    assert_eq!(
        report.subtasks.len(),
        0,
        "no subtask started: {:?}",
        report.subtasks
    );
    let started: Vec<Entry> = journal(&fixture.repo, &report.run_id)
        .into_iter()
        .filter(|entry| matches!(entry, Entry::SubtaskStarted { .. } | Entry::Attempts { .. }))
        .collect();
    assert_eq!(started, Vec::new(), "the journal holds no attempt group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_attempts_for_the_run_an_agent_cli_works_each_attempt_in_one_run_and_the_judge_picks()
{
    let fixture = repo();
    let clis = FakeClis::new();
    let runs = clis.state().join("runs");
    // Each run notes its subtask; attempt B's writes RIGHT, the others a whisper.
    let edit = format!(
        "n=$(git branch --show-current); n=${{n##*/}}; echo \"$n\" >> '{}'\n\
         if [ \"$n\" = 2 ]; then printf 'RIGHT\\n' > src/a.txt; else printf 'whisper\\n' > \
         src/a.txt; fi",
        runs.display()
    );
    clis.install(
        "claude",
        "BRIEF-MARK-7",
        &fake_cli::claude_script(&edit, fake_cli::CLAUDE_SAMPLE),
    );
    let server = FakeServer::with_responder(|request| match who(request) {
        // No `attempts` in the call: the run's `--attempts 2` says how many.
        Who::Lead => attempts_lead(request, BRIEF, &Value::Null),
        Who::Worker => panic!("grove's own worker is never called"),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let options = RunOptions {
        attempts: 2,
        worker_backend: WorkerBackend::Claude,
        backend_env: Some(BackendEnv(clis.env(&fixture.home()))),
        ..options(&fixture, USER_TASK)
    };
    let report = run(&fixture, &server, Provider::Anthropic, options)
        .await
        .unwrap();
    server.assert_no_violations();
    assert_eq!(
        statuses(&report),
        vec![
            (
                "S1".into(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject)
            ),
            (
                "S2".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            ),
        ],
        "two CLI attempts, the judge's pick merged"
    );
    let mut ran: Vec<String> = std::fs::read_to_string(&runs)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    ran.sort();
    assert_eq!(ran, vec!["1", "2"], "each attempt is one CLI run");
    assert_eq!(
        judge_briefs(&server)
            .iter()
            .map(|text| shown_attempts(text))
            .collect::<Vec<_>>(),
        vec![vec!['A', 'B']],
        "one judge compares both CLI attempts"
    );
    assert_eq!(fixture.read("src/a.txt"), b"RIGHT\n".to_vec());
}

/// Waits (at most a minute) until run `run_id`'s journal holds the check of `subtask`:
/// the last record an attempt writes before it takes its seat on the bench.
async fn checked(fixture: &GitFixture, run_id: &str, subtask: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !journal(&fixture.repo, run_id)
        .iter()
        .any(|entry| matches!(entry, Entry::Checked { run } if run.on == subtask))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{subtask} was never checked"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_during_attempts_then_resume_runs_every_attempt_and_merges_only_the_pick() {
    if !sandbox_or_skip("an_interrupt_during_attempts") {
        return;
    }
    let fixture = repo_with_rules();
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = '! grep -q BROKEN src/a.txt'\n",
    );
    fixture.commit_all("a check that BROKEN fails");
    let contents = ["quiet", "RIGHT", "BROKEN"];
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => attempts_lead(request, LOUD, &json!(3)),
        // A is checked and waits at the bench; B and C are stopped mid-work.
        Who::Worker if matches!(attempt_of(request), Some(2 | 3)) => Reply::Hang,
        Who::Worker => labelled_worker(request, &contents),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let watched = grove
        .spawn_until(["run", USER_TASK], |line| {
            line.starts_with("[worker S1 ") && line.contains("] finished")
        })
        .await;
    let run_id = only_run(&grove).await;
    checked(&fixture, &run_id, "S1").await;
    watched.signal(Signal::SIGINT);
    let stopped = watched.output().await;
    assert_eq!(
        (stopped.status.code(), journal_types(&fixture, &run_id)),
        (Some(130), (0, 0)),
        "Ctrl-C while B and C work: no attempt is decided, nothing merged\n{}",
        stderr(&stopped)
    );
    let before = server.requests().len();

    server.set_responder(move |request| match who(request) {
        Who::Lead => attempts_lead(request, LOUD, &json!(3)),
        Who::Worker => labelled_worker(request, &contents),
        Who::Reviewer => picking_judge(request),
    });
    let resumed = grove.grove_async(["resume", "--json", &run_id]).await;
    server.assert_no_violations();
    let err = stderr(&resumed);
    let report: Value = serde_json::from_slice(&resumed.stdout).unwrap_or(Value::Null);
    let subtasks: Vec<(Value, Value, Value)> = report["subtasks"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|s| (s["id"].clone(), s["status"].clone(), s["reason"].clone()))
        .collect();
    assert_eq!(
        (resumed.status.code(), subtasks),
        (
            Some(0),
            vec![
                (
                    json!("S1"),
                    json!("rejected"),
                    json!("not picked: A is not loud")
                ),
                (
                    json!("S2"),
                    json!("merged"),
                    json!("worker: WORKER-FINAL: wrote it.")
                ),
                (
                    json!("S3"),
                    json!("rejected"),
                    json!("not picked: its check failed while that of A, B passed")
                ),
            ]
        ),
        "the resume finishes B and C, puts red C aside and merges the judge's pick B\n{err}"
    );
    assert_eq!(
        fixture.read(TARGET),
        b"RIGHT\n".to_vec(),
        "only the pick reaches the branch"
    );
    let after: Vec<_> = server.requests().into_iter().skip(before).collect();
    let a_again: Vec<usize> = after
        .iter()
        .filter(|request| who(request) == Who::Worker && attempt_of(request) == Some(1))
        .map(|request| request.tool_results().len())
        .collect();
    assert_eq!(
        a_again,
        vec![2],
        "A, checked before the interrupt, goes on from its transcript (its branch read and \
         its file written): one closing call, no work done again"
    );
    assert_eq!(
        judge_briefs(&server)
            .iter()
            .map(|text| shown_attempts(text))
            .collect::<Vec<_>>(),
        vec![vec!['A', 'B']],
        "one judge, after the resume, compares A (from before it) and B under their labels"
    );
    let told = heard_by_lead(after.iter().rfind(|r| who(r) == Who::Lead).unwrap());
    assert_eq!(
        told.matches("S1 was tried 3 ways (attempts A, B, C); attempt B (S2) was picked.")
            .count(),
        1,
        "the resumed lead hears the group's one result, once: {told}"
    );
    assert_eq!(
        fixture.leftovers(),
        Leftovers::default(),
        "nothing of the run is left registered or on disk"
    );
}

/// How many `verdict` and `merged` records run `run_id`'s journal holds.
fn journal_types(fixture: &GitFixture, run_id: &str) -> (usize, usize) {
    let entries = journal(&fixture.repo, run_id);
    let count = |name: &str| entries.iter().filter(|e| e.type_name() == name).count();
    (count("verdict"), count("merged"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_judge_gets_one_reviews_patch_bound_shared_out_among_the_attempts() {
    let fixture = repo_with_rules();
    // Each attempt writes some 20 KB; the three together are far over the bound.
    let big: Vec<String> = ["RIGHT", "quiet", "meh"]
        .iter()
        .map(|word| format!("{word}\n{}", format!("{word} line\n").repeat(2_000)))
        .collect();
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => attempts_lead(request, LOUD, &json!(3)),
        Who::Worker => {
            let contents: Vec<&str> = big.iter().map(String::as_str).collect();
            labelled_worker(request, &contents)
        }
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let bound = 30_000;
    let options = RunOptions {
        max_review_patch_bytes: bound,
        ..options(&fixture, USER_TASK)
    };
    run(&fixture, &server, Provider::Anthropic, options)
        .await
        .unwrap();
    server.assert_no_violations();
    let briefs = judge_briefs(&server);
    let brief = briefs.first().expect("a judge compared the attempts");
    let diffs = brief
        .split("\n## Its diff")
        .skip(1)
        .map(|section| section.len())
        .collect::<Vec<_>>();
    assert!(
        diffs.len() == 3 && diffs.iter().all(|len| *len < bound / 3 + 2_000),
        "each of the three diffs gets a third of the bound one review gets (with a note \
         saying what was left out), not the whole bound each: {diffs:?}"
    );
    assert_eq!(
        fixture.read("src/a.txt").starts_with(b"RIGHT\n"),
        true,
        "the judge still found the right attempt"
    );
}
