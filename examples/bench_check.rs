//! What the project's check (`[check]`) costs on top of a run: the same run of N
//! subtasks with and without a check of fixed duration D, in one invocation.
//!
//! Every model call goes over HTTP to the fake model server, which answers each one after
//! a fixed latency L. The lead delegates N subtasks in one response and then ends; each
//! worker reads its file, writes it and ends (3 calls); each reviewer approves (2 calls).
//! With a check configured, every subtask runs it (`sleep D`, sandboxed like a worker's
//! `bash`) after its commit and before its review, and the merged result runs it too
//! when grove checks the result (counted from the report, whatever it holds).
//!
//! The subtask checks need no model: while one runs, its subtask holds no `--jobs` slot,
//! so with N > `--jobs` the next wave's workers call the model during the checks. The
//! run can grow by no less than one check (some subtask's reviewer reads its check) plus
//! each result check; the target is that bound within 15% (plus one latency of jitter):
//! not the N × D of checks run one after another, nor the waves × D of checks holding
//! slots.
//!
//! Each run gets a fresh sealed repository and a fresh server; a run that does not merge
//! every subtask is an error, not a number.
//!
//! Run it with `scripts/bench-check.sh` (release mode).
//!
//! Usage: `bench_check [--latency-ms L] [--check-s D] [--jobs J] [--subtasks N]
//! [--rounds R]` (defaults 300, 2, 4, 8, 1).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
}

use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{ModelChoice, Models, RunEnd, RunOptions, RunReport};
use grove::settings::options::CheckOptions;
use grove::store::journal::{ON_RESULT, SubtaskOutcome};
use grove::tools::sandbox::CommandHost;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

/// Marks the line of a worker's brief that names its file.
const FILE_MARKER: &str = "BENCH-FILE ";
const TASK: &str = "Rewrite every module file under src/ (check benchmark).";
/// The target: extra wall time at most this multiple of its lower bound.
const TARGET_OVER_BOUND: f64 = 1.15;

#[derive(Debug, Clone, Copy)]
struct Settings {
    latency: Duration,
    check: Duration,
    jobs: usize,
    subtasks: usize,
    rounds: usize,
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    wall: Duration,
    subtask_checks: usize,
    result_checks: usize,
    /// The checks' own seconds, summed: what they would cost one after another.
    check_seconds: f64,
}

fn parse_args() -> anyhow::Result<Settings> {
    let mut settings = Settings {
        latency: Duration::from_millis(300),
        check: Duration::from_secs(2),
        jobs: 4,
        subtasks: 8,
        rounds: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || -> anyhow::Result<u64> {
            let text = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            text.parse()
                .with_context(|| format!("{flag}: `{text}` is not a whole number"))
        };
        match flag.as_str() {
            "--latency-ms" => settings.latency = Duration::from_millis(value()?),
            "--check-s" => settings.check = Duration::from_secs(value()?),
            "--jobs" => settings.jobs = usize::try_from(value()?)?.max(1),
            "--subtasks" => settings.subtasks = usize::try_from(value()?)?.max(1),
            "--rounds" => settings.rounds = usize::try_from(value()?)?.max(1),
            other => bail!(
                "unknown argument {other}; usage: bench_check [--latency-ms L] [--check-s D] \
                 [--jobs J] [--subtasks N] [--rounds R]"
            ),
        }
    }
    Ok(settings)
}

fn role_of(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if system.starts_with("You are an independent code reviewer") {
        "reviewer"
    } else {
        "worker"
    }
}

fn module_path(index: usize) -> String {
    format!("src/module_{index}.txt")
}

/// The scripted reply of every role; the turn is told by the tool results so far.
fn respond(request: &RecordedRequest, subtasks: usize) -> Reply {
    let answered = request.tool_results().len();
    let turn = match (role_of(request), answered) {
        ("lead", 0) => Ok(
            (0..subtasks).fold(Turn::text("Delegating."), |turn, index| {
                let path = module_path(index);
                turn.tool_use(
                    &format!("lead_call_{index}"),
                    "delegate",
                    json!({ "task": format!("Rewrite {path}.\n{FILE_MARKER}{path}") }),
                )
            }),
        ),
        ("lead", _) => Ok(Turn::text("All subtasks are done.")),
        ("worker", 0) => brief_file(request).map(|path| {
            Turn::text("Reading.").tool_use("worker_read", "read_file", json!({ "path": path }))
        }),
        ("worker", 1) => brief_file(request).map(|path| {
            Turn::text("Writing.").tool_use(
                "worker_write",
                "write_file",
                json!({ "path": path, "content": "rewritten by the check benchmark\n" }),
            )
        }),
        ("worker", 2) => Ok(Turn::text("Rewrote the file.")),
        ("reviewer", 0) => Ok(Turn::new().tool_use(
            "review_verdict",
            "submit_verdict",
            json!({ "verdict": "approve", "summary": "Does what the brief asks." }),
        )),
        ("reviewer", 1) => Ok(Turn::text("Verdict given.")),
        (role, more) => Err(format!("{role} asked for a turn after {more} tool results")),
    };
    match turn {
        Ok(turn) => turn.usage(100, 10, 50, 5).into(),
        Err(problem) => Reply::error(400, "invalid_request_error", &problem),
    }
}

/// The file named by the newest `BENCH-FILE` line in the user's messages.
fn brief_file(request: &RecordedRequest) -> Result<String, String> {
    request
        .messages()
        .iter()
        .rev()
        .filter(|message| message["role"] == "user")
        .flat_map(|message| match &message["content"] {
            Value::String(text) => vec![text.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|block| block["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        })
        .find_map(|text| {
            text.lines()
                .rev()
                .find_map(|line| line.strip_prefix(FILE_MARKER))
                .map(str::to_owned)
        })
        .ok_or_else(|| "the worker's brief names no file".to_owned())
}

fn models(server: &FakeServer) -> Models {
    let client = server.model(Provider::Anthropic, true);
    let choice = |name: &str| ModelChoice {
        client: client.clone(),
        name: name.into(),
    };
    Models {
        provider: "anthropic".into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    }
}

fn repository(subtasks: usize) -> GitFixture {
    let modules: Vec<(String, String)> = (0..subtasks)
        .map(|index| (module_path(index), format!("module {index}\n")))
        .collect();
    let mut files: Vec<(&str, &str)> = modules
        .iter()
        .map(|(path, content)| (path.as_str(), content.as_str()))
        .collect();
    files.push(("README.md", "A repository for the check benchmark.\n"));
    GitFixture::with_files(&files)
}

async fn measure(settings: Settings, with_check: bool) -> anyhow::Result<Measured> {
    let fixture = repository(settings.subtasks);
    let (latency, subtasks) = (settings.latency, settings.subtasks);
    let server = FakeServer::with_responder(move |request| Reply::Delayed {
        delay: latency,
        reply: Box::new(respond(request, subtasks)),
    })
    .await;
    let check = with_check.then(|| CheckOptions {
        timeout_s: settings.check.as_secs() + 60,
        ..CheckOptions::new(format!("sleep {}", settings.check.as_secs()))
    });
    let options = RunOptions {
        jobs: settings.jobs,
        git: fixture.options(),
        commands: CommandHost {
            env: Some(vec![("PATH".into(), OsString::from("/usr/bin:/bin"))]),
        },
        check,
        ..RunOptions::new(TASK)
    };
    let models = models(&server);
    let started = Instant::now();
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .context("the run failed")?;
    let wall = started.elapsed();
    check_run(&server, &report, settings.subtasks)?;
    let runs = &report.check.runs;
    Ok(Measured {
        wall,
        subtask_checks: runs.iter().filter(|run| run.on != ON_RESULT).count(),
        result_checks: runs.iter().filter(|run| run.on == ON_RESULT).count(),
        check_seconds: runs.iter().map(|run| run.seconds).sum(),
    })
}

fn check_run(server: &FakeServer, report: &RunReport, subtasks: usize) -> anyhow::Result<()> {
    let violations = server.violations();
    ensure!(
        violations.is_empty(),
        "protocol violations: {violations:#?}"
    );
    ensure!(
        report.status == RunEnd::Finished,
        "the run ended {:?}: {:?}",
        report.status,
        report.error
    );
    let merged = report
        .subtasks
        .iter()
        .filter(|subtask| subtask.status == SubtaskOutcome::Merged)
        .count();
    ensure!(
        merged == subtasks && report.applied,
        "expected {subtasks} merged subtasks and the result applied: {:#?}",
        report.subtasks
    );
    Ok(())
}

/// The run with the median wall time of `rounds` runs.
async fn median(settings: Settings, with_check: bool) -> anyhow::Result<Measured> {
    let mut runs = Vec::new();
    for _ in 0..settings.rounds {
        runs.push(measure(settings, with_check).await?);
    }
    runs.sort_by_key(|run| run.wall);
    Ok(runs[runs.len() / 2])
}

/// One row: the run under `jobs`, without and with the check; whether it met its target.
async fn row(settings: Settings) -> anyhow::Result<bool> {
    let check_s = settings.check.as_secs_f64();
    let without = median(settings, false).await?;
    let with = median(settings, true).await?;
    ensure!(
        with.subtask_checks == settings.subtasks,
        "every subtask ran its check: {} of {}",
        with.subtask_checks,
        settings.subtasks
    );
    let extra = with.wall.as_secs_f64() - without.wall.as_secs_f64();
    let waves = settings.subtasks.div_ceil(settings.jobs);
    let held = check_s * (waves + with.result_checks) as f64;
    // One wave: the floor is one subtask check (its reviewer reads it) and each result
    // check. More waves: the checks must beat holding --jobs slots, where each wave
    // waits for its checks before the next starts.
    let (target, name) = if waves == 1 {
        let floor = check_s * (1 + with.result_checks) as f64;
        (
            floor * TARGET_OVER_BOUND + settings.latency.as_secs_f64(),
            format!("{} check(s) x 1.15 + L", 1 + with.result_checks),
        )
    } else {
        (
            held,
            format!("{waves} waves of checks holding --jobs slots"),
        )
    };
    let met = extra <= target;
    println!(
        "{:>4} {:>5} {:>9.2} {:>9.2} {:>7.2} {:>8.2} {:>10.1} {:>8.1}   {} (<= {target:.2} s: {name})",
        settings.jobs,
        waves,
        without.wall.as_secs_f64(),
        with.wall.as_secs_f64(),
        extra,
        extra / check_s,
        with.check_seconds,
        held,
        if met { "PASS" } else { "FAIL" },
    );
    Ok(met)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let settings = parse_args()?;
    println!(
        "bench-check: {} subtasks, model latency {} ms, check `sleep {}` in each subtask \
         (and on the result, if grove checks it); {} round(s), median",
        settings.subtasks,
        settings.latency.as_millis(),
        settings.check.as_secs(),
        settings.rounds
    );
    println!(
        "{:>4} {:>5} {:>9} {:>9} {:>7} {:>8} {:>10} {:>8}",
        "jobs", "waves", "without", "with", "extra", "extra", "serial", "held"
    );
    println!(
        "{:>4} {:>5} {:>9} {:>9} {:>7} {:>8} {:>10} {:>8}",
        "", "", "(s)", "(s)", "(s)", "(x D)", "(s)", "(s)"
    );
    let mut all_met = true;
    let mut jobs = vec![settings.jobs];
    if settings.jobs < settings.subtasks {
        jobs.push(settings.subtasks);
    }
    for jobs in jobs {
        all_met &= row(Settings { jobs, ..settings }).await?;
    }
    println!(
        "\nserial: the checks' own time summed (one after another); held: what they would \
         add holding their --jobs slots (each wave waits for its checks). With more waves \
         than one the checks also share --jobs check slots among themselves."
    );
    println!("{}", if all_met { "PASS" } else { "FAIL" });
    Ok(())
}
