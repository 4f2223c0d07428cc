//! One cache for siblings (issue 46): the cache-read share of a run's input tokens, and
//! what it costs, before and after the sibling hold and the TTL choice.
//!
//! The same scripted run is made twice against the fake model server with its prompt
//! cache on (Anthropic's rules, see `tests/support/fake_server/cache.rs`): the lead
//! delegates N subtasks (default 8) in one response and, once they are back, ends; each
//! worker reads its file, writes it and ends (3 calls); each reviewer approves (1 call).
//! Every call is answered after the same latency L, and the lead's wait for its
//! subtasks lasts `--lead-wait-s` on the server's clock (default 420 s: a check and a
//! review per subtask outlive a 5-minute cache entry, as they did in the runs the issue
//! measured), without waiting for real.
//!
//! - before: main's behaviour: no sibling hold, every breakpoint at the 5-minute TTL;
//! - after: the sibling hold (its default bound) and the 1-hour TTL for the lead.
//!
//! Printed: each run's wall time (the hold delays a wave of siblings by the first
//! one's latency), per role and in total, the requests, the input tokens (uncached,
//! cache read and cache write) and the cache-read share of them, and the run's cost at
//! the built-in
//! price of `claude-sonnet-4-5` (a 1-hour write at twice the input price, Anthropic's
//! rule, while the table has no column for it), with the dollars the change saves. The
//! figures are the fake's token counts (4 characters a token), not a real model's.
//!
//! Usage: `bench_cache [--subtasks N] [--latency-ms L] [--lead-wait-s S]` (defaults 8,
//! 300, 420). Run it with `scripts/bench-cache.sh`.

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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use grove::event::EventSink;
use grove::model::{AnthropicClient, AnthropicConfig, DEFAULT_SIBLING_HOLD, Provider};
use grove::report::PriceTable;
use grove::run::{ModelChoice, Models, RunEnd, RunOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

const MODEL: &str = "claude-sonnet-4-5";
const FILE_MARKER: &str = "FILE: ";

#[derive(Clone, Copy)]
struct Settings {
    subtasks: usize,
    latency: Duration,
    lead_wait: Duration,
}

/// Tokens of one role (or all), as the fake's cache counted them.
#[derive(Default, Clone, Copy)]
struct Tokens {
    requests: usize,
    input: u64,
    output: u64,
    read: u64,
    write_5m: u64,
    write_1h: u64,
}

impl Tokens {
    fn all_input(&self) -> u64 {
        self.input + self.read + self.write_5m + self.write_1h
    }

    fn read_share(&self) -> f64 {
        self.read as f64 / self.all_input().max(1) as f64
    }

    fn add(&mut self, other: &Tokens) {
        self.requests += other.requests;
        self.input += other.input;
        self.output += other.output;
        self.read += other.read;
        self.write_5m += other.write_5m;
        self.write_1h += other.write_1h;
    }

    /// US dollars at `MODEL`'s built-in price.
    fn usd(&self, prices: &PriceTable) -> anyhow::Result<f64> {
        let (_, price) = prices
            .lookup(MODEL)
            .with_context(|| format!("the price table has no {MODEL}"))?;
        let read = price.cache_read.context("no cache read price")?;
        let write_5m = price.cache_write.context("no cache write price")?;
        let write_1h = 2.0 * price.input;
        let million = 1_000_000.0;
        Ok((self.input as f64 * price.input
            + self.output as f64 * price.output
            + self.read as f64 * read
            + self.write_5m as f64 * write_5m
            + self.write_1h as f64 * write_1h)
            / million)
    }
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

/// The scripted reply of every role; anything unexpected gets a 400 (the run fails).
fn respond(request: &RecordedRequest, subtasks: usize) -> Reply {
    let answered = request.tool_results().len();
    let turn = match (role_of(request), answered) {
        ("lead", 0) => {
            let mut turn = Turn::text("Delegating one subtask per file.");
            for index in 0..subtasks {
                let path = format!("src/f{index}.txt");
                turn = turn.tool_use(
                    &format!("lead_call_{index}"),
                    "delegate",
                    json!({ "task": format!("Rewrite {path} in capitals.\n{FILE_MARKER}{path}") }),
                );
            }
            turn
        }
        ("lead", _) => Turn::text("All subtasks are done."),
        ("worker", step) => {
            let brief = request.first_user_text();
            let Some(path) = brief
                .lines()
                .find_map(|line| line.strip_prefix(FILE_MARKER))
            else {
                return Reply::error(400, "invalid_request_error", "a brief without a file");
            };
            match step {
                0 => {
                    Turn::text("Reading.").tool_use("w_read", "read_file", json!({ "path": path }))
                }
                1 => Turn::text("Writing.").tool_use(
                    "w_write",
                    "write_file",
                    json!({ "path": path, "content": "REWRITTEN\n" }),
                ),
                _ => Turn::text("Rewrote the file in capitals."),
            }
        }
        (_, 0) => Turn::new().tool_use(
            "r_verdict",
            "submit_verdict",
            json!({ "verdict": "approve", "summary": "Does what the brief asks." }),
        ),
        _ => Turn::text("Verdict given."),
    };
    turn.usage(0, 40, 0, 0).into()
}

/// One run of the scenario; `after` turns the hold and the TTL choice on.
async fn measure(settings: Settings, after: bool) -> anyhow::Result<Measured> {
    let files: Vec<(String, String)> = (0..settings.subtasks)
        .map(|index| (format!("src/f{index}.txt"), format!("file {index}\n")))
        .collect();
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(path, content)| (path.as_str(), content.as_str()))
        .collect();
    let fixture = GitFixture::with_files(&borrowed);
    let server = FakeServer::start().await;
    server.prompt_cache();
    server.stream_in_one_write();
    let clock = server.clock();
    let waited = AtomicBool::new(false);
    let (subtasks, latency, lead_wait) = (settings.subtasks, settings.latency, settings.lead_wait);
    server.set_responder(move |request| {
        if role_of(request) == "lead"
            && !request.tool_results().is_empty()
            && !waited.swap(true, Ordering::SeqCst)
        {
            // The lead's wait for its subtasks, on the server's clock.
            clock.advance(lead_wait);
        }
        Reply::Delayed {
            delay: latency,
            reply: Box::new(respond(request, subtasks)),
        }
    });
    let config = AnthropicConfig {
        sibling_hold: if after {
            DEFAULT_SIBLING_HOLD
        } else {
            Duration::ZERO
        },
        one_hour_cache: after,
        ..server.anthropic_config(true)
    };
    let client = Arc::new(AnthropicClient::new(config)?);
    let choice = || ModelChoice {
        client: client.clone(),
        name: MODEL.into(),
    };
    let models = Models {
        provider: Provider::Anthropic.as_str().into(),
        lead: choice(),
        worker: choice(),
        reviewer: choice(),
    };
    let options = RunOptions {
        jobs: settings.subtasks,
        git: fixture.options(),
        ..RunOptions::new("Rewrite every file in capitals.")
    };
    let started = std::time::Instant::now();
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await?;
    let wall = started.elapsed();
    ensure!(
        report.status == RunEnd::Finished && report.subtasks.len() == settings.subtasks,
        "the run did not finish every subtask: {report:#?}"
    );
    let violations = server.violations();
    ensure!(
        violations.is_empty(),
        "the fake server saw: {violations:#?}"
    );
    let mut roles = vec![
        ("lead", Tokens::default()),
        ("worker", Tokens::default()),
        ("reviewer", Tokens::default()),
    ];
    for request in server.requests() {
        let Some(lookup) = server.cache_lookup(&request.request_id) else {
            bail!(
                "request {} was not looked up in the cache",
                request.request_id
            );
        };
        let role = role_of(&request);
        let Some((_, tokens)) = roles.iter_mut().find(|(name, _)| *name == role) else {
            continue;
        };
        tokens.requests += 1;
        tokens.input += lookup.input;
        tokens.output += 40;
        tokens.read += lookup.read;
        tokens.write_5m += lookup.write_5m;
        tokens.write_1h += lookup.write_1h;
    }
    let mut total = Tokens::default();
    for (_, tokens) in &roles {
        total.add(tokens);
    }
    roles.push(("total", total));
    Ok(Measured { roles, wall })
}

/// One run's tokens per role (the total last) and its wall time.
struct Measured {
    roles: Vec<(&'static str, Tokens)>,
    wall: Duration,
}

fn parse() -> anyhow::Result<Settings> {
    let mut settings = Settings {
        subtasks: 8,
        latency: Duration::from_millis(300),
        lead_wait: Duration::from_secs(420),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value: u64 = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("{flag} needs a whole number"))?;
        match flag.as_str() {
            "--subtasks" if value > 0 => settings.subtasks = value as usize,
            "--latency-ms" => settings.latency = Duration::from_millis(value),
            "--lead-wait-s" => settings.lead_wait = Duration::from_secs(value),
            other => bail!(
                "unknown or bad flag {other}; usage: bench_cache [--subtasks N] \
                 [--latency-ms L] [--lead-wait-s S]"
            ),
        }
    }
    Ok(settings)
}

fn print(label: &str, run: &Measured, prices: &PriceTable) -> anyhow::Result<f64> {
    let roles = &run.roles;
    println!("{label}: wall time {:.2} s", run.wall.as_secs_f64());
    println!(
        "  {:<9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "role",
        "requests",
        "uncached",
        "read",
        "write 5m",
        "write 1h",
        "all input",
        "read share",
        "usd"
    );
    for (role, tokens) in roles {
        println!(
            "  {:<9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10.3} {:>9.4}",
            role,
            tokens.requests,
            tokens.input,
            tokens.read,
            tokens.write_5m,
            tokens.write_1h,
            tokens.all_input(),
            tokens.read_share(),
            tokens.usd(prices)?
        );
    }
    roles
        .last()
        .map(|(_, total)| total.usd(prices))
        .context("no total")?
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let settings = parse()?;
    let prices = PriceTable::builtin();
    println!(
        "{} subtasks, every call answered after {} ms, the lead waits {} s for its subtasks; \
         {MODEL} at the built-in prices (a 1-hour write at 2x input)",
        settings.subtasks,
        settings.latency.as_millis(),
        settings.lead_wait.as_secs()
    );
    let before = measure(settings, false).await?;
    let after = measure(settings, true).await?;
    let cost_before = print(
        "before (main: no hold, 5-minute TTL everywhere)",
        &before,
        &prices,
    )?;
    let cost_after = print(
        "after (sibling hold, 1-hour TTL for the lead)",
        &after,
        &prices,
    )?;
    let share = |run: &Measured| run.roles.last().map_or(0.0, |(_, t)| t.read_share());
    println!(
        "SUMMARY cache-read share {:.3} -> {:.3} (goal >= 0.80: {}); cost ${:.4} -> ${:.4}, \
         saved ${:.4} ({:.1}%); wall {:.2} s -> {:.2} s",
        share(&before),
        share(&after),
        if share(&after) >= 0.80 {
            "PASS"
        } else {
            "FAIL"
        },
        cost_before,
        cost_after,
        cost_before - cost_after,
        100.0 * (cost_before - cost_after) / cost_before.max(f64::MIN_POSITIVE),
        before.wall.as_secs_f64(),
        after.wall.as_secs_f64()
    );
    Ok(())
}
