//! The agent loop's own CPU cost per model turn, against the fake model server with zero
//! latency, so later changes to the loop can be compared.
//!
//! For each provider (streaming), runs of N model turns each, every turn one
//! `read_file` call of a small file, so the history grows by one call and one result
//! per turn:
//!
//! - loop: `run_agent` with the read-only tools, through the real client over HTTP;
//! - baseline: N bare `Model::complete` calls with the same growing request bodies,
//!   built by hand, no loop and no tools.
//!
//! Each side runs [`ROUNDS`] times, in alternating order, and its cheapest run counts.
//!
//! CPU is the whole process's user + system time (`getrusage(RUSAGE_SELF)`): the fake
//! server runs in this process, so its cost (parsing and validating every request,
//! rendering every reply) is inside both numbers and is not subtracted. The ratio says
//! how much the loop adds on top of what talking to the model costs anyway.
//!
//! Run it with `scripts/bench-loop.sh` (release mode). Not a test: it prints numbers and
//! fails only when a run did not do what it should (a violation, a wrong stop).
//!
//! Usage: `bench_loop [--turns N]` (default 500).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
}

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use grove::agent::{AgentSpec, LoopInput, StopKind, run_agent};
use grove::event::{AgentId, AgentLabel, EventSink};
use grove::model::{ContentBlock, Message, Provider, Request, Role, ToolSpec};
use grove::status::SubtaskId;
use grove::tools::{Registry, ToolContext, ToolSet, builtin};
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, Turn};

/// The history grows with every turn and the fake server parses and validates all of
/// it on every request, so the cost of a run grows with the square of this.
const DEFAULT_TURNS: u32 = 500;
/// Measured runs of each side; the cheapest counts.
const ROUNDS: u32 = 3;
/// Turns run before measuring, so connection setup and lazy initialisation are not counted.
const WARMUP_TURNS: u32 = 20;
const PROBE_PATH: &str = "probe.txt";
const PROBE_TEXT: &str = "fn probe() -> u32 {\n    42\n}\n";
const SYSTEM: &str = "You are a benchmark worker.";
const BRIEF: &str = "Read probe.txt again and again.";
const MODEL_NAME: &str = "bench-model";
const MAX_TOKENS: u32 = 1024;

/// CPU and wall time spent by one run.
#[derive(Debug, Clone, Copy)]
struct Cost {
    cpu: Duration,
    wall: Duration,
}

impl Cost {
    fn worst() -> Cost {
        Cost {
            cpu: Duration::MAX,
            wall: Duration::MAX,
        }
    }

    /// The cheaper of two runs, each measure on its own.
    fn min(self, other: Cost) -> Cost {
        Cost {
            cpu: self.cpu.min(other.cpu),
            wall: self.wall.min(other.wall),
        }
    }

    fn per_turn_micros(self, turns: u32) -> (f64, f64) {
        let turns = f64::from(turns);
        (
            self.cpu.as_secs_f64() * 1e6 / turns,
            self.wall.as_secs_f64() * 1e6 / turns,
        )
    }
}

/// The user + system CPU time this process has used so far, all threads.
fn process_cpu() -> anyhow::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_SELF).context("getrusage(RUSAGE_SELF)")?;
    let micros = |time: nix::sys::time::TimeVal| {
        let secs = u64::try_from(time.tv_sec()).unwrap_or(0);
        let micros = u64::try_from(time.tv_usec()).unwrap_or(0);
        Duration::from_secs(secs) + Duration::from_micros(micros)
    };
    Ok(micros(usage.user_time()) + micros(usage.system_time()))
}

/// Measures the CPU and wall time of `work`.
async fn measure<T>(work: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<(Cost, T)> {
    let cpu_before = process_cpu()?;
    let wall_before = Instant::now();
    let value = work.await?;
    let cost = Cost {
        cpu: process_cpu()?.saturating_sub(cpu_before),
        wall: wall_before.elapsed(),
    };
    Ok((cost, value))
}

/// A server that answers every request with one `read_file` call of the probe file.
async fn probing_server() -> FakeServer {
    let next_call = Arc::new(AtomicU64::new(1));
    FakeServer::with_responder(move |_| {
        let call = next_call.fetch_add(1, Ordering::Relaxed);
        Turn::new()
            .tool_use(
                &format!("call_{call}"),
                "read_file",
                json!({"path": PROBE_PATH}),
            )
            .usage(100, 20, 0, 0)
            .into()
    })
    .await
}

fn tool_specs(registry: &Registry) -> Vec<ToolSpec> {
    registry
        .descriptions()
        .into_iter()
        .map(|tool| ToolSpec {
            name: tool.name,
            description: tool.description,
            input_schema: tool.input_schema,
        })
        .collect()
}

fn tool_context(root: &Path) -> ToolContext {
    ToolContext::plain(root.to_path_buf(), CancellationToken::new())
}

/// (a) The full loop: `turns` model turns of `run_agent`, each running one tool call.
async fn run_loop(
    provider: Provider,
    root: &Path,
    tools: &Registry,
    turns: u32,
) -> anyhow::Result<Cost> {
    let server = probing_server().await;
    let spec = AgentSpec {
        id: AgentId {
            role: "worker".to_owned(),
            label: AgentLabel::Subtask(SubtaskId(1)),
        },
        system: SYSTEM.to_owned(),
        model: server.model(provider, true),
        model_name: MODEL_NAME.to_owned(),
        max_tokens: MAX_TOKENS,
        max_turns: turns,
        budget_tokens: None,
        budget_usd: None,
        max_consecutive_tool_errors: 5,
        tools: tools.clone(),
        cache: Default::default(),
    };
    let input = LoopInput {
        messages: vec![Message::user_text(BRIEF)],
        tool_context: tool_context(root),
        events: EventSink::discard(),
        observer: None,
    };
    let (cost, run) = measure(async { Ok(run_agent(&spec, input).await) }).await?;
    let outcome = run
        .result
        .map_err(|error| anyhow::anyhow!("the benchmark loop failed: {error}"))?;
    ensure!(
        outcome.stop == StopKind::TurnCap && run.ledger.steps == turns,
        "the benchmark loop should run {turns} turns to its turn cap, but stopped with {} \
         after {} turns: {}",
        outcome.stop,
        run.ledger.steps,
        outcome.detail
    );
    let failed_calls = run
        .messages
        .iter()
        .flat_map(|message| &message.content)
        .filter(|block| matches!(block, ContentBlock::ToolResult { is_error: true, .. }))
        .count();
    ensure!(
        failed_calls == 0,
        "{failed_calls} benchmark tool calls failed"
    );
    check_server(&server, turns)?;
    Ok(cost)
}

/// (b) The baseline: `turns` bare `complete` calls with the same growing history the
/// loop builds (the tool result text is the real tool's, computed once beforehand).
async fn run_baseline(
    provider: Provider,
    tools: &Registry,
    probe_result: &str,
    turns: u32,
) -> anyhow::Result<Cost> {
    let server = probing_server().await;
    let model = server.model(provider, true);
    let mut request = Request {
        model: MODEL_NAME.to_owned(),
        system: SYSTEM.to_owned(),
        messages: vec![Message::user_text(BRIEF)],
        tools: tool_specs(tools),
        max_tokens: MAX_TOKENS,
        cache: Default::default(),
    };
    let cancel = CancellationToken::new();
    let (cost, ()) = measure(async {
        for _ in 0..turns {
            let response = model.complete(&request, &cancel, &|_| {}).await?;
            let results: Vec<ContentBlock> = response
                .message
                .tool_uses()
                .map(|(id, _, _)| ContentBlock::ToolResult {
                    tool_use_id: id.to_owned(),
                    content: probe_result.to_owned(),
                    is_error: false,
                })
                .collect();
            ensure!(results.len() == 1, "every baseline turn has one tool call");
            request.messages.push(response.message);
            request.messages.push(Message {
                role: Role::User,
                content: results,
            });
        }
        Ok(())
    })
    .await?;
    check_server(&server, turns)?;
    Ok(cost)
}

fn check_server(server: &FakeServer, turns: u32) -> anyhow::Result<()> {
    let violations = server.violations();
    ensure!(
        violations.is_empty(),
        "the fake server saw protocol violations:\n  {}",
        violations.join("\n  ")
    );
    let requests = server.requests().len();
    ensure!(
        requests == turns as usize,
        "expected {turns} requests, the server got {requests}"
    );
    Ok(())
}

fn parse_turns() -> anyhow::Result<u32> {
    let mut args = std::env::args().skip(1);
    let mut turns = DEFAULT_TURNS;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--turns" => {
                let value = args.next().context("--turns needs a number")?;
                turns = value
                    .parse()
                    .with_context(|| format!("--turns: {value:?} is not a number"))?;
                ensure!(turns > 0, "--turns must be at least 1");
            }
            other => bail!("unknown argument {other:?}; usage: bench_loop [--turns N]"),
        }
    }
    Ok(turns)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let turns = parse_turns()?;
    let dir = tempfile::tempdir().context("create the benchmark's temp dir")?;
    let root = dir
        .path()
        .canonicalize()
        .context("canonicalize the temp dir")?;
    std::fs::write(root.join(PROBE_PATH), PROBE_TEXT).context("write the probe file")?;
    let tools = builtin(ToolSet::ReadOnly);
    let probe = tools
        .dispatch(
            "read_file",
            json!({"path": PROBE_PATH}),
            &tool_context(&root),
        )
        .await
        .context("read the probe file with the real tool")?;
    ensure!(
        !probe.is_error,
        "reading the probe failed: {}",
        probe.content
    );

    println!(
        "grove loop benchmark: {turns} model turns per run (cheapest of {ROUNDS} runs each), \
         one read_file call per turn (history grows to {} messages), fake server with zero \
         latency, streaming",
        1 + 2 * u64::from(turns)
    );
    println!(
        "CPU = user+sys of this whole process (getrusage RUSAGE_SELF). The fake server runs \
         in this process:"
    );
    println!(
        "its CPU (parsing and validating every request, rendering every reply) is included \
         in both columns, not subtracted."
    );
    println!();
    println!(
        "{:<10} {:>16} {:>16} {:>12} {:>16} {:>16}",
        "provider",
        "loop cpu µs/turn",
        "base cpu µs/turn",
        "ratio",
        "loop wall µs/t",
        "base wall µs/t"
    );
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        run_baseline(provider, &tools, &probe.content, WARMUP_TURNS).await?;
        run_loop(provider, &root, &tools, WARMUP_TURNS).await?;
        // Alternate the order and keep each side's cheapest run: other load on a shared
        // machine only ever adds CPU time (cache misses, frequency), so the minimum is
        // the least disturbed measurement.
        let mut baseline = Cost::worst();
        let mut looped = Cost::worst();
        for round in 0..ROUNDS {
            if round % 2 == 0 {
                baseline =
                    baseline.min(run_baseline(provider, &tools, &probe.content, turns).await?);
                looped = looped.min(run_loop(provider, &root, &tools, turns).await?);
            } else {
                looped = looped.min(run_loop(provider, &root, &tools, turns).await?);
                baseline =
                    baseline.min(run_baseline(provider, &tools, &probe.content, turns).await?);
            }
        }
        let (loop_cpu, loop_wall) = looped.per_turn_micros(turns);
        let (base_cpu, base_wall) = baseline.per_turn_micros(turns);
        let ratio = if base_cpu > 0.0 {
            format!("{:.3}", loop_cpu / base_cpu)
        } else {
            "n/a".to_owned()
        };
        println!(
            "{:<10} {loop_cpu:>16.1} {base_cpu:>16.1} {ratio:>12} {loop_wall:>16.1} {base_wall:>16.1}",
            provider.as_str()
        );
    }
    println!();
    println!(
        "ratio = loop CPU / baseline CPU per turn; (ratio - 1) x baseline is what the loop \
         itself adds per turn (tool dispatch, the read_file call, bookkeeping)."
    );
    Ok(())
}
