//! What hearing results as they settle, and retrying on top of rejected work, buys a run
//! (issue 44). Every model call goes to the fake model server, answered after a fixed
//! latency L; the scenarios are scripted per role.
//!
//! Wall time: the lead delegates 6 subtasks at once. S1's worker is quick (2 calls) and
//! its reviewer rejects it; the 5 siblings' workers take K calls each (`--slow-turns`).
//! Told of S1, the lead delegates a follow-up that starts from S1's kept work
//! (`start_from`, 2 worker calls, approved), then waits for everything and ends. Run
//! twice, alternated, in the same build and repository kind:
//!
//! - `before`: the lead's first wait is `wait {"all": true}`: it hears S1 only when the
//!   slowest sibling has settled too — what grove's lead always did before (its
//!   delegations of one turn returned together);
//! - `after`: its first wait is `wait {}`: it hears S1 as soon as S1 settles, and the
//!   follow-up runs beside the siblings.
//!
//! Tokens: one subtask writes F files (`--files`), one per turn, and is rejected for one
//! of them; its follow-up either starts from its work (`start_from`: it rewrites that one
//! file) or from scratch (`replaces`: it writes all F again). The fake server bills each
//! call's input as its request's bytes / 4 and 20 output tokens — a proxy for what a
//! model would bill, growing with the conversation as a real one does. Printed: the
//! follow-up's tokens (worker and reviewer) each way and their ratio.
//!
//! Usage: `bench_settle [--latency-ms L] [--slow-turns K] [--files F] [--rounds R]`
//! (defaults 200, 8, 12, 3). Run it with `scripts/bench-settle.sh` (release mode).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
}

use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{ModelChoice, Models, RunOptions, RunReport};
use grove::store::journal::SubtaskOutcome;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

/// Marks a brief its reviewer rejects.
const REJECT: &str = "BENCH-REJECT";
/// Marks the line of a brief that names the files to write, space-separated.
const FILES: &str = "BENCH-FILES ";
/// Marks a sibling's brief: its worker reads before it writes.
const SLOW: &str = "BENCH-SLOW";
/// What a follow-up's worker is told when its tree starts from earlier work.
const STARTS_FROM: &str = "(grove: your tree starts from";
/// The follow-up's brief.
const FIX: &str = "Fix what S1's reviewer found.";
const SIBLINGS: usize = 5;

#[derive(Debug, Clone, Copy)]
struct Settings {
    latency: Duration,
    slow_turns: usize,
    files: usize,
    rounds: usize,
}

/// How the lead hears S1's rejection, or how the token scenario's follow-up starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Wall time: hears every result at once (grove's lead before issue 44).
    Before,
    /// Wall time: hears S1 as it settles.
    After,
    /// Tokens: the follow-up starts from S1's kept work.
    StartFrom,
    /// Tokens: the follow-up starts from the base.
    Scratch,
}

fn parse() -> anyhow::Result<Settings> {
    let mut settings = Settings {
        latency: Duration::from_millis(200),
        slow_turns: 8,
        files: 12,
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
            "--latency-ms" => settings.latency = Duration::from_millis(value.max(1)),
            "--slow-turns" => settings.slow_turns = usize::try_from(value)?.max(2),
            "--files" => settings.files = usize::try_from(value)?.max(1),
            "--rounds" => settings.rounds = usize::try_from(value)?.max(1),
            other => bail!(
                "unknown flag {other}; usage: bench_settle [--latency-ms L] [--slow-turns K] \
                 [--files F] [--rounds R]"
            ),
        }
    }
    Ok(settings)
}

fn first_user_text(request: &RecordedRequest) -> String {
    request.first_user_text()
}

fn role(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if system.starts_with("You are an independent code reviewer") {
        "reviewer"
    } else {
        "worker"
    }
}

fn files_of(brief: &str) -> Vec<String> {
    brief
        .lines()
        .find_map(|line| line.strip_prefix(FILES))
        .map(|files| files.split(' ').map(str::to_owned).collect())
        .unwrap_or_default()
}

fn brief(marker: &str, files: &[String]) -> String {
    format!("Rewrite the files. {marker}\n{FILES}{}", files.join(" "))
}

/// The lead of either scenario, its turn told by how many results it has.
fn lead(request: &RecordedRequest, variant: Variant, files: &[String]) -> Turn {
    let answered = request.tool_results().len();
    let (delegated, retry) = match variant {
        Variant::Before | Variant::After => (1 + SIBLINGS, json!({"start_from": "S1"})),
        Variant::StartFrom => (1, json!({"start_from": "S1"})),
        Variant::Scratch => (1, json!({"replaces": "S1"})),
    };
    // The wall-time scenario's S1 and follow-up write one file: they are quick.
    let files = match variant {
        Variant::Before | Variant::After => &files[..1],
        Variant::StartFrom | Variant::Scratch => files,
    };
    if answered == 0 {
        let mut turn = Turn::text("Delegating.").tool_use(
            "d1",
            "delegate",
            json!({"task": brief(REJECT, files)}),
        );
        for n in 1..delegated {
            let own = vec![format!("sibling_{n}.txt")];
            turn = turn.tool_use(
                &format!("d{}", n + 1),
                "delegate",
                json!({"task": brief(SLOW, &own)}),
            );
        }
        return turn;
    }
    match answered - delegated {
        0 => Turn::text("Waiting.").tool_use(
            "w1",
            "wait",
            json!({"all": variant == Variant::Before}),
        ),
        1 => {
            let mut input = retry;
            input["task"] = json!(brief(FIX, files));
            Turn::text("Following up on S1.").tool_use("d9", "delegate", input)
        }
        2 => Turn::text("Waiting for the rest.").tool_use("w2", "wait", json!({"all": true})),
        _ => Turn::text("All done."),
    }
}

/// A worker: a sibling reads K-2 times then writes; S1 writes its files one per turn; a
/// follow-up from S1's work rewrites only the file S1's reviewer named.
fn worker(request: &RecordedRequest, slow_turns: usize) -> Turn {
    let brief = first_user_text(request);
    let answered = request.tool_results().len();
    let mut files = files_of(&brief);
    if brief.contains(STARTS_FROM) {
        files.truncate(1);
    }
    let reads = if brief.contains(SLOW) {
        slow_turns.saturating_sub(2)
    } else {
        0
    };
    if answered < reads {
        return Turn::text("Reading.").tool_use(
            &format!("r{answered}"),
            "read_file",
            json!({"path": files[0]}),
        );
    }
    // A follow-up writes what S1 got wrong differently.
    let how = if brief.contains(FIX) {
        "fixed"
    } else {
        "rewritten"
    };
    match files.get(answered - reads) {
        Some(path) => Turn::text("Writing.").tool_use(
            &format!("w{answered}"),
            "write_file",
            json!({"path": path, "content": format!("{how} {path}\n")}),
        ),
        None => Turn::text("Rewrote the files as asked."),
    }
}

fn reviewer(request: &RecordedRequest, files: &[String]) -> Turn {
    let input = if first_user_text(request).contains(REJECT) {
        json!({"verdict": "reject", "summary": "One file is wrong.",
               "findings": [{"path": files[0], "line": 1, "problem": "rewritten wrongly"}]})
    } else {
        json!({"verdict": "approve", "summary": "Does what the brief asks."})
    };
    Turn::new().tool_use("v1", "submit_verdict", input)
}

fn respond(request: &RecordedRequest, variant: Variant, settings: Settings) -> Reply {
    let files: Vec<String> = (0..settings.files)
        .map(|n| format!("src/file_{n}.txt"))
        .collect();
    let turn = match role(request) {
        "lead" => lead(request, variant, &files),
        "reviewer" => reviewer(request, &files),
        _ => worker(request, settings.slow_turns),
    };
    let billed = u64::try_from(request.raw_body.len() / 4).unwrap_or(u64::MAX);
    Reply::Delayed {
        delay: settings.latency,
        reply: Box::new(turn.usage(billed, 20, 0, 0).into()),
    }
}

fn models(server: &FakeServer) -> Models {
    let client = server.model(Provider::Anthropic, true);
    let choice = |name: &str| ModelChoice {
        client: client.clone(),
        name: name.into(),
    };
    Models {
        provider: Provider::Anthropic.as_str().into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    }
}

/// One run of `variant` in a fresh repository: its wall time and report.
async fn measure(variant: Variant, settings: Settings) -> anyhow::Result<(Duration, RunReport)> {
    let mut files: Vec<(String, String)> = (0..settings.files)
        .map(|n| (format!("src/file_{n}.txt"), format!("file {n}\n")))
        .collect();
    files.extend((1..=SIBLINGS).map(|n| (format!("sibling_{n}.txt"), format!("sibling {n}\n"))));
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let fixture = GitFixture::with_files(&borrowed);
    let server =
        FakeServer::with_responder(move |request| respond(request, variant, settings)).await;
    let options = RunOptions {
        jobs: 8,
        git: fixture.options(),
        ..RunOptions::new("Rewrite the files (benchmark task).")
    };
    let started = Instant::now();
    let report = grove::run::run(
        &fixture.repo,
        options,
        models(&server),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await?;
    let wall = started.elapsed();
    server.assert_no_violations();
    let outcomes: Vec<SubtaskOutcome> = report.subtasks.iter().map(|s| s.status).collect();
    ensure!(
        report.all_merged() && outcomes.first() == Some(&SubtaskOutcome::Rejected),
        "{variant:?}: the run did not go as scripted (S1 rejected, the rest merged, S1 \
         superseded): {:?}",
        report
            .subtasks
            .iter()
            .map(|s| (s.id, s.status, s.reason.clone()))
            .collect::<Vec<_>>()
    );
    Ok((wall, report))
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let settings = parse()?;
    println!(
        "6 subtasks, S1 rejected after 2 worker calls, 5 siblings of {} worker calls; L = {} ms; \
         {} rounds, alternated",
        settings.slow_turns,
        settings.latency.as_millis(),
        settings.rounds
    );
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for round in 0..settings.rounds {
        let (b, _) = measure(Variant::Before, settings).await?;
        let (a, _) = measure(Variant::After, settings).await?;
        println!(
            "round {}: before {:.2} s, after {:.2} s",
            round + 1,
            b.as_secs_f64(),
            a.as_secs_f64()
        );
        before.push(b);
        after.push(a);
    }
    let (before, after) = (median(before), median(after));
    println!(
        "WALL median: before (lead hears all at once) {:.2} s, after (as they settle) {:.2} s: \
         {:.2}x the wall time, {:.2} s saved",
        before.as_secs_f64(),
        after.as_secs_f64(),
        after.as_secs_f64() / before.as_secs_f64(),
        before.as_secs_f64() - after.as_secs_f64()
    );
    let retry_tokens = |report: &RunReport| -> anyhow::Result<(u64, u32)> {
        let retry = report.subtasks.get(1).context("no follow-up subtask")?;
        Ok((retry.input_tokens + retry.output_tokens, retry.steps))
    };
    let (_, from) = measure(Variant::StartFrom, settings).await?;
    let (_, scratch) = measure(Variant::Scratch, settings).await?;
    let ((from_tokens, from_steps), (scratch_tokens, scratch_steps)) =
        (retry_tokens(&from)?, retry_tokens(&scratch)?);
    println!(
        "TOKENS of the follow-up to a rejected {}-file subtask: start_from {from_tokens} \
         ({from_steps} calls), from scratch {scratch_tokens} ({scratch_steps} calls): \
         {:.2}x, {} tokens saved",
        settings.files,
        from_tokens as f64 / scratch_tokens.max(1) as f64,
        scratch_tokens.saturating_sub(from_tokens)
    );
    Ok(())
}
