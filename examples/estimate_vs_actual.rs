//! How close `grove run --dry-run`'s estimate comes to what the run then costs: one dry
//! run and one real run of the same scripted task against the fake model server, on a
//! repository of N modules, the lead delegating one subtask per module.
//!
//! The fake server bills every request as a provider without prompt caching would: its
//! input tokens are the request body's bytes / 4 (the demo's replay counts them so too),
//! its output tokens a fixed 150 a turn. Each worker reads its module, writes it and
//! reports (3 turns), each reviewer approves (1 turn), the lead delegates all at once and
//! summarises (2 turns). Priced as `--model` (default claude-sonnet-5-5) at the built-in
//! table.
//!
//! Prints the estimate's range, the actual cost, and the actual cost's ratio to each end.
//! It is a figure, not a test: it exits non-zero only when a run did not merge every
//! subtask (a broken run is not measured).
//!
//! Usage: `estimate_vs_actual [--subtasks N] [--model NAME]` (defaults 8,
//! claude-sonnet-5-5); run it with `scripts/estimate-vs-actual.sh`.

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
}

use anyhow::{Context, bail, ensure};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::prices::format_usd;
use grove::run::{ModelChoice, Models, RunOptions};
use grove::store::journal::SubtaskOutcome;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

const TASK: &str = "Rewrite every module as its brief says.";
const OUTPUT_TOKENS: u64 = 150;

fn module(index: usize) -> String {
    format!("src/module_{index}.py")
}

/// The scripted reply of each role, billed by the request's size.
fn respond(request: &RecordedRequest, subtasks: usize) -> Reply {
    let system = request.system_text();
    let answered = request.tool_results().len();
    let turn = if system.starts_with("You are the lead engineer") {
        lead(answered, subtasks)
    } else if system.starts_with("You are an independent code reviewer") {
        Turn::new().tool_use(
            "verdict",
            "submit_verdict",
            json!({"verdict": "approve", "summary": "Does what the brief asks."}),
        )
    } else {
        worker(request, answered)
    };
    let input = (request.raw_body.len() / 4) as u64;
    turn.usage(input, OUTPUT_TOKENS, 0, 0).into()
}

fn lead(answered: usize, subtasks: usize) -> Turn {
    if answered > 0 {
        return Turn::text("Every module is rewritten.");
    }
    (0..subtasks).fold(Turn::text("One subtask per module."), |turn, index| {
        turn.tool_use(
            &format!("d{index}"),
            "delegate",
            json!({"task": format!("Rewrite the module.\nFILE {}", module(index))}),
        )
    })
}

fn worker(request: &RecordedRequest, answered: usize) -> Turn {
    let path = request
        .raw_body
        .split("FILE ")
        .nth(1)
        .and_then(|rest| rest.split(['\\', '"', '\n']).next())
        .unwrap_or("src/module_0.py")
        .to_owned();
    match answered {
        0 => Turn::text("Reading.").tool_use("r", "read_file", json!({"path": path})),
        1 => Turn::text("Writing.").tool_use(
            "w",
            "write_file",
            json!({"path": path, "content": "def rewritten():\n    return True\n"}),
        ),
        _ => Turn::text("Rewrote the module as asked."),
    }
}

fn parse() -> anyhow::Result<(usize, String)> {
    let mut args = std::env::args().skip(1);
    let (mut subtasks, mut model) = (8, "claude-sonnet-5-5".to_owned());
    while let Some(flag) = args.next() {
        let value = args.next().context("a flag without its value")?;
        match flag.as_str() {
            "--subtasks" => subtasks = value.parse().context("--subtasks N")?,
            "--model" => model = value,
            other => bail!("usage: estimate_vs_actual [--subtasks N] [--model NAME]; not {other}"),
        }
    }
    ensure!((1..=16).contains(&subtasks), "--subtasks is 1 to 16");
    Ok((subtasks, model))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (subtasks, model) = parse()?;
    let body = "def original(value):\n    \"\"\"A module of the estimate's scenario.\"\"\"\n    \
                return value * 2\n"
        .repeat(12);
    let files: Vec<(String, String)> = (0..subtasks).map(|i| (module(i), body.clone())).collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let fixture = GitFixture::with_files(&refs);
    let server = FakeServer::with_responder(move |request| respond(request, subtasks)).await;
    let client = server.model(Provider::Anthropic, true);
    let choice = ModelChoice {
        client,
        name: model.clone(),
    };
    let models = Models {
        provider: "anthropic".into(),
        lead: choice.clone(),
        worker: choice.clone(),
        reviewer: choice,
    };
    let options = RunOptions {
        jobs: subtasks,
        git: fixture.options(),
        model_names: models.names(),
        ..RunOptions::new(TASK)
    };
    let plan = grove::run::dry_run::plan(
        &fixture.repo,
        options.clone(),
        models.clone(),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await?;
    ensure!(
        plan.subtasks.len() == subtasks,
        "the dry run planned {} subtasks, not {subtasks}",
        plan.subtasks.len()
    );
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await?;
    ensure!(
        report
            .subtasks
            .iter()
            .all(|subtask| subtask.status == SubtaskOutcome::Merged),
        "not every subtask merged: {:?}",
        report.error
    );
    let (low, high, actual) = (
        plan.estimate.low_usd,
        plan.estimate.high_usd,
        report.cost.total_usd,
    );
    println!(
        "{subtasks}-subtask scenario ({model}): estimate {}–{}, actual {} ({} requests); \
         actual/low {:.2}, actual/high {:.2}, {}",
        format_usd(low),
        format_usd(high),
        format_usd(actual),
        server.requests().len(),
        actual / low,
        actual / high,
        if (low..=high).contains(&actual) {
            "within the range"
        } else if actual < low {
            "BELOW the range"
        } else {
            "ABOVE the range"
        }
    );
    Ok(())
}
