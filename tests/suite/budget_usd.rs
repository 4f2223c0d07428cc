//! Budgets in money (`--budget-usd`, `--subagent-budget-usd`) and the price table they
//! count with (`--prices`), through the grove binary against the fake model server: the
//! run pauses at its cap, resumable, a higher cap finishes it, and bad input is refused
//! before anything starts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::Value;

use grove::run::{RunEnd, RunOptions};
use grove::store::journal::SubtaskOutcome;

use crate::support::fake_server::FakeServer;
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// Every token of `test-model` costs a thousand dollars a million: one scripted turn
/// (100 + 10 + 50 + 5 tokens) costs $0.165.
const PRICES: &str = "[models.\"test-model\"]\ninput = 1000.0\noutput = 1000.0\n\
                      cache_read = 1000.0\ncache_write = 1000.0\n";
const TURN_USD: f64 = 0.165;

const BRIEFS: &[(&str, Option<&str>)] = &[
    ("Make src/a.txt shout.\nWRITE src/a.txt ALPHA", None),
    ("Make src/b.txt shout.\nWRITE src/b.txt BETA", None),
];

fn json(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", stderr(output)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_money_budget_pauses_the_run_at_its_cap_and_a_higher_one_finishes_it() {
    let fixture = repo_with_rules();
    fixture.write("prices.toml", PRICES);
    fixture.git(&["add", "prices.toml"]);
    fixture.git(&["commit", "-qm", "prices"]);
    let base = fixture.rev("HEAD");
    let server = scripted_server(BRIEFS).await;
    let run = [
        "run",
        "--json",
        "--jobs",
        "2",
        "--model",
        "test-model",
        "--prices",
        "prices.toml",
        "--budget-usd",
        "0.50",
        USER_TASK,
    ];
    let paused = grove_in(&fixture, Some(&server), &run).await;
    let report = json(&paused);
    assert_eq!(
        (paused.status.code(), report["status"].as_str()),
        (Some(1), Some("paused")),
        "the cap pauses the run: {}",
        stderr(&paused)
    );
    let spent = report["cost"]["total_usd"].as_f64().unwrap();
    assert!(
        (0.50..0.50 + TURN_USD + 1e-9).contains(&spent),
        "the run stops at its cap, over it by at most one turn, though two workers run \
         at once (near the cap their requests go one at a time): spent {spent}"
    );
    let error = report["error"].as_str().unwrap();
    let run_id = report["run_id"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("the run's budget of $0.50 is spent: ")
            && error.contains(&format!(
                "`grove resume {run_id} --budget-usd HIGHER` finishes the run"
            )),
        "says what it spent and what to run: {error}"
    );
    assert_eq!(
        (report["applied"].as_bool(), fixture.rev("HEAD")),
        (Some(false), base),
        "a paused run leaves the user's branch alone"
    );
    assert_eq!(report["cost"]["budget_usd"].as_f64(), Some(0.5));
    let asked = server.requests().len();
    assert_eq!(
        asked,
        (spent / TURN_USD).round() as usize,
        "every request sent was counted, and none left once the cap was reached"
    );

    // The same cap again: nothing more is spent, the run stays paused.
    let again = grove_in(
        &fixture,
        Some(&server),
        &["resume", &run_id, "--json", "--prices", "prices.toml"],
    )
    .await;
    assert_eq!(json(&again)["status"].as_str(), Some("paused"));
    assert_eq!(
        server.requests().len(),
        asked,
        "a resume under the spent cap sends nothing"
    );

    let resumed = grove_in(
        &fixture,
        Some(&server),
        &[
            "resume",
            &run_id,
            "--json",
            "--prices",
            "prices.toml",
            "--budget-usd",
            "10",
        ],
    )
    .await;
    let finished = json(&resumed);
    assert_eq!(
        (resumed.status.code(), finished["status"].as_str()),
        (Some(0), Some("finished")),
        "a higher cap finishes it: {}",
        stderr(&resumed)
    );
    let statuses: Vec<&str> = finished["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["merged", "merged"]);
    assert_eq!(
        (fixture.read("src/a.txt"), fixture.read("src/b.txt")),
        (b"ALPHA\n".to_vec(), b"BETA\n".to_vec())
    );
    let total = finished["cost"]["total_usd"].as_f64().unwrap();
    assert!(
        (total - server.requests().len() as f64 * TURN_USD).abs() < 1e-6,
        "the resumed run's cost counts the earlier process's turns too: {total}"
    );
    server.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subagent_over_its_money_budget_fails_its_subtask_naming_the_budget() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &BRIEFS[..1]),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let mut options = RunOptions {
        subagent_budget_usd: "0.10".parse().ok(),
        ..options(&fixture, USER_TASK)
    };
    options.prices = options
        .prices
        .with_overrides(
            std::path::Path::new("prices.toml"),
            &PRICES.replace("test-model", "worker-model"),
        )
        .unwrap();
    let report = run(
        &fixture,
        &server,
        grove::model::Provider::Anthropic,
        options,
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunEnd::Finished, "{report:#?}");
    let subtask = &report.subtasks[0];
    assert_eq!(subtask.status, SubtaskOutcome::Failed);
    let reason = subtask.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("spent $0.1650, reaching the subagent budget of $0.10"),
        "the reason names what was spent and the budget: {reason}"
    );
    assert_eq!(
        subtask.cost_usd.map(|usd| (usd * 1e6).round()),
        Some(TURN_USD * 1e6),
        "the subtask's cost is its worker's one turn (no reviewer ran)"
    );
}

#[tokio::test]
async fn bad_money_input_is_a_usage_error_naming_the_flag_or_line_and_starts_nothing() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    fixture.write("missing.toml", "[models.m]\ninput = 1.0\n");
    fixture.write(
        "negative.toml",
        "\n[models.m]\ninput = 1.0\noutput = -2.0\n",
    );
    let server = FakeServer::start().await;
    let cases: [(&[&str], &str); 6] = [
        (
            &["run", "--budget-usd", "-5", "t"],
            "invalid value '-5' for '--budget-usd <USD>': expected a positive number of US \
             dollars",
        ),
        (
            &["run", "--subagent-budget-usd", "lots", "t"],
            "invalid value 'lots' for '--subagent-budget-usd <USD>'",
        ),
        (
            &["run", "--prices", "missing.toml", "t"],
            "missing.toml, line 1: missing field `output`",
        ),
        (
            &["run", "--prices", "negative.toml", "t"],
            "negative.toml, line 2: model \"m\": `output` must be a non-negative number",
        ),
        (
            &["run", "--budget-usd", "5", "--model", "local-model", "t"],
            "--budget-usd (budget_usd) needs the price of every model the run uses, and \
             this one has no price: local-model; give its rates in a price file with \
             `--prices FILE`",
        ),
        (
            &[
                "report",
                "20260101-000000-abcd",
                "--prices",
                "negative.toml",
            ],
            "line 2: model \"m\": `output` must be a non-negative number",
        ),
    ];
    for (args, needle) in cases {
        let output = grove_in(&fixture, Some(&server), args).await;
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
        assert!(message.contains(needle), "{args:?}: {message}");
    }
    let runs = grove_in(&fixture, None, &["runs", "--json"]).await;
    assert_eq!(
        (json(&runs), server.requests().len()),
        (serde_json::json!([]), 0),
        "nothing started: no run, no request"
    );
}
