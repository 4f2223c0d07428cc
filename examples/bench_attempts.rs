//! What best of N costs (issue 47): the wall time and the tokens of one subtask tried
//! N ways at once (default 3) against the same subtask tried once, in the same build and
//! invocation, rounds alternated. The goal: the attempts cost their tokens, not their
//! time — a wall ratio near 1 (the judge's calls and the sibling hold's wait are all the
//! attempts should add), tokens about N times a worker's plus the judge's.
//!
//! Every model call goes to the fake model server with its prompt cache on (Anthropic's
//! rules) and is answered after the same latency L; the model client holds siblings as
//! grove's does by default (the attempts' first requests wait for the first one's cache
//! write). The lead delegates one brief (`attempts: N`, or none), waits for it and ends.
//! Each worker reads its file K-2 times, writes it and ends (K calls, `--turns`). With
//! one attempt its reviewer approves (1 call and the loop's last); with N the judge reads
//! attempt A's file and picks A (2 calls and the last), the others archived.
//!
//! Printed: each round's wall time both ways, the medians and their ratio, and per role
//! the requests and tokens of the last round both ways (input as the fake's cache counted
//! it: uncached + cache read + cache write; 4 characters a token) with the ratio of the
//! totals. The figures are the fake's, not a real model's.
//!
//! Usage: `bench_attempts [--attempts N] [--latency-ms L] [--turns K] [--rounds R]`
//! (defaults 3, 300, 6, 3). Run it with `scripts/bench-attempts.sh` (release mode).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
}

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use grove::event::EventSink;
use grove::model::{AnthropicClient, AnthropicConfig, DEFAULT_SIBLING_HOLD, Provider};
use grove::run::{ModelChoice, Models, RunEnd, RunOptions, RunReport};
use grove::store::journal::SubtaskOutcome;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

const TARGET: &str = "src/a.txt";
const ROLES: [&str; 4] = ["lead", "worker", "reviewer", "judge"];

#[derive(Debug, Clone, Copy)]
struct Settings {
    attempts: u32,
    latency: Duration,
    turns: usize,
    rounds: usize,
}

fn parse() -> anyhow::Result<Settings> {
    let mut settings = Settings {
        attempts: 3,
        latency: Duration::from_millis(300),
        turns: 6,
        rounds: 3,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value: u64 = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("{flag} needs a whole number"))?;
        match flag.as_str() {
            "--attempts" if value >= 2 => settings.attempts = u32::try_from(value)?,
            "--latency-ms" => settings.latency = Duration::from_millis(value.max(1)),
            "--turns" => settings.turns = usize::try_from(value)?.max(2),
            "--rounds" => settings.rounds = usize::try_from(value)?.max(1),
            other => bail!(
                "unknown or bad flag {other}; usage: bench_attempts [--attempts N (2 or more)] \
                 [--latency-ms L] [--turns K] [--rounds R]"
            ),
        }
    }
    Ok(settings)
}

fn role_of(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if !system.starts_with("You are an independent code reviewer") {
        "worker"
    } else if request.first_user_text().contains("# How to judge") {
        "judge"
    } else {
        "reviewer"
    }
}

/// The labels of the attempts the judge is shown.
fn shown(request: &RecordedRequest) -> Vec<String> {
    request
        .first_user_text()
        .split("\n# Attempt ")
        .skip(1)
        .filter_map(|section| section.chars().next())
        .map(String::from)
        .collect()
}

fn respond(request: &RecordedRequest, attempts: u32, turns: usize) -> Turn {
    let answered = request.tool_results().len();
    match (role_of(request), answered) {
        ("lead", 0) => {
            let mut input = json!({"task": format!("Make {TARGET} loud.")});
            if attempts > 1 {
                input["attempts"] = json!(attempts);
            }
            Turn::text("Delegating.").tool_use("d1", "delegate", input)
        }
        ("lead", 1) => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
        ("lead", _) => Turn::text("Done."),
        ("worker", step) if step + 2 < turns => Turn::text("Reading.").tool_use(
            &format!("r{step}"),
            "read_file",
            json!({"path": TARGET}),
        ),
        ("worker", step) if step + 2 == turns => Turn::text("Writing.").tool_use(
            "w",
            "write_file",
            json!({"path": TARGET, "content": "LOUD\n"}),
        ),
        ("worker", _) => Turn::text("Made it loud."),
        ("judge", 0) => {
            Turn::new().tool_use("j1", "read_file", json!({"path": TARGET, "attempt": "A"}))
        }
        ("judge", 1) => {
            let others: Vec<Value> = shown(request)
                .into_iter()
                .filter(|label| label != "A")
                .map(|label| json!({"attempt": label, "reason": "the same, found later"}))
                .collect();
            Turn::new().tool_use(
                "j2",
                "submit_verdict",
                json!({"verdict": "approve", "pick": "A", "summary": "A is loud.",
                       "not_picked": others}),
            )
        }
        (_, 0) => Turn::new().tool_use(
            "v1",
            "submit_verdict",
            json!({"verdict": "approve", "summary": "Does what the brief asks."}),
        ),
        (_, _) => Turn::text("Verdict given."),
    }
}

/// One role's requests and tokens in a run.
#[derive(Debug, Default, Clone, Copy)]
struct Tokens {
    requests: usize,
    input: u64,
    output: u64,
}

/// One run: its wall time and each role's tokens (in [`ROLES`] order, the total last).
struct Measured {
    wall: Duration,
    roles: Vec<(&'static str, Tokens)>,
}

impl Measured {
    fn total(&self) -> Tokens {
        self.roles
            .last()
            .map(|(_, tokens)| *tokens)
            .unwrap_or_default()
    }
}

const OUTPUT_TOKENS: u64 = 20;

async fn measure(attempts: u32, settings: Settings) -> anyhow::Result<Measured> {
    let fixture = GitFixture::with_files(&[(TARGET, "quiet\n")]);
    let server = FakeServer::start().await;
    server.prompt_cache();
    let (latency, turns) = (settings.latency, settings.turns);
    server.set_responder(move |request| Reply::Delayed {
        delay: latency,
        reply: Box::new(
            respond(request, attempts, turns)
                .usage(0, OUTPUT_TOKENS, 0, 0)
                .into(),
        ),
    });
    let config = AnthropicConfig {
        sibling_hold: DEFAULT_SIBLING_HOLD,
        ..server.anthropic_config(true)
    };
    let client = Arc::new(AnthropicClient::new(config)?);
    let choice = |name: &str| ModelChoice {
        client: client.clone(),
        name: name.into(),
    };
    let models = Models {
        provider: Provider::Anthropic.as_str().into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    };
    let options = RunOptions {
        jobs: 4,
        git: fixture.options(),
        ..RunOptions::new("Make the file loud (benchmark task).")
    };
    let started = Instant::now();
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await?;
    let wall = started.elapsed();
    server.assert_no_violations();
    ensure_scripted(&report, attempts)?;
    let mut roles: Vec<(&'static str, Tokens)> = ROLES
        .iter()
        .map(|role| (*role, Tokens::default()))
        .collect();
    let mut total = Tokens::default();
    for request in server.requests() {
        let lookup = server
            .cache_lookup(&request.request_id)
            .with_context(|| format!("request {} was not looked up", request.request_id))?;
        let input = lookup.input + lookup.read + lookup.write_5m + lookup.write_1h;
        let role = role_of(&request);
        for (_, tokens) in roles.iter_mut().filter(|(name, _)| *name == role) {
            tokens.requests += 1;
            tokens.input += input;
            tokens.output += OUTPUT_TOKENS;
        }
        total.requests += 1;
        total.input += input;
        total.output += OUTPUT_TOKENS;
    }
    roles.push(("total", total));
    Ok(Measured { wall, roles })
}

/// One subtask merged and every other attempt rejected, or the figure means nothing.
fn ensure_scripted(report: &RunReport, attempts: u32) -> anyhow::Result<()> {
    let outcomes: Vec<SubtaskOutcome> = report.subtasks.iter().map(|s| s.status).collect();
    let merged = outcomes
        .iter()
        .filter(|status| **status == SubtaskOutcome::Merged)
        .count();
    ensure!(
        report.status == RunEnd::Finished
            && outcomes.len() == attempts as usize
            && merged == 1
            && outcomes.len() - merged
                == outcomes
                    .iter()
                    .filter(|status| **status == SubtaskOutcome::Rejected)
                    .count(),
        "{attempts} attempt(s): the run did not go as scripted (one merged, the rest \
         rejected): {:?}",
        report
            .subtasks
            .iter()
            .map(|s| (s.id, s.status, s.reason.clone()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn print_tokens(label: &str, run: &Measured) {
    println!("  {label}:");
    for (role, tokens) in &run.roles {
        println!(
            "    {role:<9} {:>3} requests {:>8} input {:>6} output",
            tokens.requests, tokens.input, tokens.output
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let settings = parse()?;
    let n = settings.attempts;
    println!(
        "one subtask, {n} attempts against 1; every call answered after {} ms; workers of {} \
         calls; the sibling hold on; {} rounds, alternated",
        settings.latency.as_millis(),
        settings.turns,
        settings.rounds
    );
    let (mut once, mut several) = (Vec::new(), Vec::new());
    let mut last = None;
    for round in 0..settings.rounds {
        let one = measure(1, settings).await?;
        let many = measure(n, settings).await?;
        println!(
            "round {}: 1 attempt {:.2} s, {n} attempts {:.2} s",
            round + 1,
            one.wall.as_secs_f64(),
            many.wall.as_secs_f64()
        );
        once.push(one.wall);
        several.push(many.wall);
        last = Some((one, many));
    }
    let (one, many) = last.context("no round ran")?;
    println!("TOKENS of the last round (the fake's count):");
    print_tokens("1 attempt", &one);
    print_tokens(&format!("{n} attempts"), &many);
    let (once, several) = (median(once), median(several));
    let (t1, tn) = (one.total(), many.total());
    println!(
        "WALL median: 1 attempt {:.2} s, {n} attempts {:.2} s: {:.2}x the wall time \
         (+{:.2} s, {:.1} calls of {} ms)",
        once.as_secs_f64(),
        several.as_secs_f64(),
        several.as_secs_f64() / once.as_secs_f64(),
        several.as_secs_f64() - once.as_secs_f64(),
        (several.as_secs_f64() - once.as_secs_f64()) / settings.latency.as_secs_f64(),
        settings.latency.as_millis()
    );
    println!(
        "TOKENS: 1 attempt {} in + {} out, {n} attempts {} in + {} out: {:.2}x the tokens",
        t1.input,
        t1.output,
        tn.input,
        tn.output,
        (tn.input + tn.output) as f64 / (t1.input + t1.output).max(1) as f64
    );
    Ok(())
}
