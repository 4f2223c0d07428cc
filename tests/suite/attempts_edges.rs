//! Best of N at its edges: a judge that rejects every attempt (the run exits 3 with
//! nothing merged), `attempts` the lead gets wrong (a tool error, no subtask started),
//! and the run's `--attempts` with an agent CLI worker (each attempt one CLI run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use grove::agent::external::{BackendEnv, WorkerBackend};
use grove::model::Provider;
use grove::run::RunOptions;
use grove::store::journal::{Entry, SubtaskOutcome, VerdictKind};

use crate::suite::backends::{BRIEF, repo, statuses};
use crate::support::attempts::*;
use crate::support::fake_cli::{self, FakeClis};
use crate::support::fake_server::FakeServer;
use crate::support::grove::{grove_in as grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// The brief the attempts get; the arrival-order worker writes `{}`'s replacement.
const QUIET: &str = "Shout a.\nWRITE src/a.txt whisper";

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
    assert_eq!(
        told,
        "S1 was tried 3 ways (attempts A, B, C); none was picked, so nothing of it was merged.\n\
         - attempt A (S1) rejected by the judge with every other attempt: A whispers\n\
         - attempt B (S2) rejected by the judge with every other attempt: B whispers\n\
         - attempt C (S3) rejected by the judge with every other attempt: C whispers\n\
         the judge's summary, in its words:\n```text\nNone of them shouts.\n```\n\n\
         No other subtask is running.",
        "the lead hears that nothing was picked, why each attempt lost and the judge's summary"
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
