//! A smoke test against a model server nobody here wrote: grove's OpenAI-compatible
//! client and agent loop, with the real worker tools, talking to a local llama.cpp
//! server (`scripts/smoke-local-model.sh` starts one with SmolLM2-135M-Instruct).
//!
//! A tiny model's tool calls are nonsense and now and then not even valid JSON; grove
//! must answer whatever it sends as tool results (errors included) and never crash.
//! The loop runs twice, streaming and not, for a few turns each, in a temp dir; every
//! turn is printed (text, tool calls with their raw input, results), then the ledger.
//!
//! Exit status: 0 when grove handled everything the server sent; 1 when something went
//! wrong that is grove's fault (the server refused grove's request as invalid, grove
//! could not read a reply, a tool failed fatally); 2 when the setup is wrong. A failure
//! that is the server's (a 5xx, a crash, a hang, an exhausted context window) is
//! reported and does not fail the smoke test.
//!
//! Environment: `OPENAI_BASE_URL` (required, e.g. `http://127.0.0.1:8000/v1`),
//! `OPENAI_API_KEY` (may be empty), `GROVE_SMOKE_MODEL` (the model name sent, default
//! `SmolLM2-135M-Instruct`), `GROVE_SMOKE_TURNS` (turns per mode, default 3).

#![allow(
    clippy::print_stdout,
    reason = "a smoke test reports what it saw on stdout"
)]

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use grove::agent::{AgentError, AgentRun, AgentSpec, LoopInput, run_agent};
use grove::event::{AgentId, AgentLabel, Event, EventSink};
use grove::model::{ContentBlock, Message, ModelError, OpenAiClient, OpenAiConfig, Role};
use grove::status::SubtaskId;
use grove::text::truncate;
use grove::tools::{ToolContext, ToolSet, builtin};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct";
const DEFAULT_TURNS: u32 = 3;
/// A small model on two busy cores is slow, but never this slow.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How much of a tool result is shown.
const SHOWN_RESULT_CHARS: usize = 240;

const SYSTEM: &str = "You are a coding agent working in a small project directory. \
    Use the tools to look at the files and make changes. When you are done, reply \
    with a short summary and no tool call.";
const BRIEF: &str = "Read README.md, then append the line `smoke tested` to notes.txt \
    and run `cat notes.txt` with bash to check it.";

/// Who is to blame for how a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// grove handled everything the server sent (whatever the loop's stop reason).
    Handled,
    /// The run failed, but because of the server (crash, hang, 5xx, context window).
    ServerFault(String),
    /// The run failed because of grove.
    GroveFault(String),
}

/// Decides who is to blame for a failed loop.
fn judge(error: &AgentError) -> Verdict {
    match error {
        AgentError::Model { source, .. } => judge_model_error(source),
        AgentError::Tool { tool, message, .. } => {
            Verdict::GroveFault(format!("tool `{tool}` failed fatally: {message}"))
        }
        AgentError::Observer { source, .. } => {
            Verdict::GroveFault(format!("the turn observer failed: {source}"))
        }
        AgentError::Cancelled { .. } => {
            Verdict::GroveFault("the loop was cancelled, but nothing here cancels it".to_owned())
        }
    }
}

fn judge_model_error(error: &ModelError) -> Verdict {
    match error {
        ModelError::RetriesExhausted { last, .. } => judge_model_error(last),
        // FastAPI-based servers answer a request that fails their schema with a 500.
        ModelError::Api(api) if api.status >= 500 && api.message.contains("validation error") => {
            Verdict::GroveFault(format!(
                "the server refused the shape of grove's request (as a {}): {api}",
                api.status
            ))
        }
        ModelError::Api(api) if api.status >= 500 => {
            Verdict::ServerFault(format!("the server failed internally: {api}"))
        }
        ModelError::Api(api) if mentions_context_window(&api.message) => Verdict::ServerFault(
            format!("the conversation outgrew the server's context window: {api}"),
        ),
        ModelError::Api(api) => {
            Verdict::GroveFault(format!("the server refused grove's request: {api}"))
        }
        ModelError::Transport { .. }
        | ModelError::Timeout { .. }
        | ModelError::TurnTimeout { .. }
        | ModelError::Stream(_) => Verdict::ServerFault(format!(
            "the server crashed, hung or cut the reply: {error}"
        )),
        ModelError::Decode(_) => {
            Verdict::GroveFault(format!("grove could not read the server's reply: {error}"))
        }
        ModelError::NotHttp { .. } | ModelError::NotAStream { .. } => Verdict::ServerFault(
            format!("the server does not speak the API grove asked for: {error}"),
        ),
        ModelError::InvalidRequest(_) | ModelError::Config(_) | ModelError::Cancelled => {
            Verdict::GroveFault(error.to_string())
        }
    }
}

fn mentions_context_window(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("context window") || message.contains("context length")
}

/// A temp project for the tools to work in; the root is canonical, as tools require.
fn project() -> anyhow::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::tempdir().context("create the smoke test's temp dir")?;
    let root = dir
        .path()
        .canonicalize()
        .context("canonicalize the temp dir")?;
    std::fs::write(
        root.join("README.md"),
        "# demo\n\nA tiny project for grove's smoke test.\n",
    )
    .context("write README.md")?;
    std::fs::write(root.join("notes.txt"), "first note\n").context("write notes.txt")?;
    Ok((dir, root))
}

/// Prints one event as it happens: a small model on a busy machine is slow.
fn show_event(event: &Event) {
    match event {
        Event::TurnCompleted { turn, ledger, .. } => {
            println!(
                "  · turn {turn} answered (in={} out={})",
                ledger.input_tokens, ledger.output_tokens
            );
        }
        Event::ModelRetry {
            attempt,
            delay_ms,
            reason,
            ..
        } => println!(
            "  · retry {attempt} in {delay_ms} ms: {}",
            truncate(reason, SHOWN_RESULT_CHARS)
        ),
        _ => {}
    }
}

/// Prints the transcript after the brief: one block per model turn.
fn show_transcript(messages: &[Message]) {
    let mut turn = 0;
    for message in messages.iter().skip(1) {
        match message.role {
            Role::Assistant => {
                turn += 1;
                println!("  turn {turn}:");
                for block in &message.content {
                    show_assistant_block(block);
                }
            }
            Role::User => {
                for block in &message.content {
                    show_user_block(block);
                }
            }
        }
    }
}

fn show_assistant_block(block: &ContentBlock) {
    match block {
        ContentBlock::Text { text } => {
            println!("    text: {:?}", truncate(text, SHOWN_RESULT_CHARS));
        }
        ContentBlock::ToolUse { id, name, input } => match input {
            Value::String(raw) => {
                println!("    tool call {id} `{name}` raw input (NOT valid JSON): {raw}");
            }
            other => println!("    tool call {id} `{name}` input: {other}"),
        },
        ContentBlock::ToolResult { .. } => println!("    (a tool result in an assistant turn?)"),
    }
}

fn show_user_block(block: &ContentBlock) {
    match block {
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let kind = if *is_error {
                "is_error result"
            } else {
                "result"
            };
            println!(
                "    {kind} for {tool_use_id}: {:?}",
                truncate(content, SHOWN_RESULT_CHARS)
            );
        }
        ContentBlock::Text { text } => println!("    user: {:?}", truncate(text, 120)),
        ContentBlock::ToolUse { .. } => println!("    (a tool call in a user turn?)"),
    }
}

/// Counts of what the model sent, for the summary line.
fn tally(messages: &[Message]) -> (usize, usize, usize) {
    let blocks = || messages.iter().flat_map(|message| &message.content);
    let calls = blocks()
        .filter(|block| matches!(block, ContentBlock::ToolUse { .. }))
        .count();
    let invalid_json = blocks()
        .filter(|block| matches!(block, ContentBlock::ToolUse { input, .. } if input.is_string()))
        .count();
    let errors = blocks()
        .filter(|block| matches!(block, ContentBlock::ToolResult { is_error: true, .. }))
        .count();
    (calls, invalid_json, errors)
}

async fn run_once(
    base: &OpenAiConfig,
    model_name: &str,
    turns: u32,
    stream: bool,
    root: &Path,
) -> anyhow::Result<(AgentRun, AgentId)> {
    let config = OpenAiConfig {
        delivery: if stream {
            grove::model::Delivery::Streamed
        } else {
            grove::model::Delivery::Whole
        },
        ..base.clone()
    };
    let client = OpenAiClient::new(config).context("build the OpenAI-compatible client")?;
    let id = AgentId {
        role: format!("worker-{}", if stream { "stream" } else { "json" }),
        label: AgentLabel::Subtask(SubtaskId(1)),
    };
    let spec = AgentSpec {
        id: id.clone(),
        system: SYSTEM.to_owned(),
        model: Arc::new(client),
        model_name: model_name.to_owned(),
        max_tokens: 256,
        max_turns: turns,
        budget_tokens: None,
        budget_usd: None,
        max_consecutive_tool_errors: 0,
        tools: builtin(ToolSet::Worker),
        cache: Default::default(),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            show_event(&event);
        }
    });
    let input = LoopInput {
        messages: vec![Message::user_text(BRIEF)],
        tool_context: ToolContext::plain(root.to_path_buf(), CancellationToken::new()),
        events: EventSink::new(tx),
        observer: None,
    };
    let run = run_agent(&spec, input).await;
    drop(spec);
    // The sink was moved into the loop and dropped with it, so the printer ends.
    printer.await.context("the event printer panicked")?;
    Ok((run, id))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

async fn smoke() -> anyhow::Result<Vec<(String, Verdict)>> {
    anyhow::ensure!(
        std::env::var("OPENAI_BASE_URL").is_ok_and(|url| !url.trim().is_empty()),
        "set OPENAI_BASE_URL to the local server, e.g. http://127.0.0.1:8000/v1"
    );
    let base = OpenAiConfig {
        request_timeout: REQUEST_TIMEOUT,
        idle_timeout: IDLE_TIMEOUT,
        ..OpenAiConfig::from_env().context("read the OpenAI settings from the environment")?
    };
    let model_name = env_or("GROVE_SMOKE_MODEL", DEFAULT_MODEL);
    let turns: u32 = env_or("GROVE_SMOKE_TURNS", &DEFAULT_TURNS.to_string())
        .parse()
        .context("GROVE_SMOKE_TURNS must be a number")?;
    println!(
        "grove smoke test: {} model `{model_name}`, at most {turns} turns per mode, worker tools",
        base.base_url
    );
    let mut verdicts = Vec::new();
    for stream in [true, false] {
        let mode = if stream { "streaming" } else { "non-streaming" };
        let (_dir, root) = project()?;
        println!();
        println!("== {mode} ==");
        let (run, id) = run_once(&base, &model_name, turns, stream, &root).await?;
        show_transcript(&run.messages);
        let (calls, invalid_json, errors) = tally(&run.messages);
        println!(
            "  {calls} tool calls ({invalid_json} with invalid JSON arguments), {errors} \
             answered as is_error"
        );
        println!("  ledger: {}", run.ledger.line(&id));
        let verdict = match &run.result {
            Ok(outcome) => {
                println!("  loop ended: {}: {}", outcome.stop, outcome.detail);
                Verdict::Handled
            }
            Err(error) => {
                println!("  loop failed: {error}");
                judge(error)
            }
        };
        verdicts.push((mode.to_owned(), verdict));
    }
    Ok(verdicts)
}

#[tokio::main]
async fn main() -> ExitCode {
    let verdicts = match smoke().await {
        Ok(verdicts) => verdicts,
        Err(error) => {
            println!("SETUP PROBLEM: {error:#}");
            return ExitCode::from(2);
        }
    };
    println!();
    let mut grove_failed = false;
    for (mode, verdict) in &verdicts {
        match verdict {
            Verdict::Handled => {
                println!("{mode}: OK, grove handled everything the model sent");
            }
            Verdict::ServerFault(why) => {
                println!("{mode}: OK for grove, the server failed (not grove's fault): {why}");
            }
            Verdict::GroveFault(why) => {
                grove_failed = true;
                println!("{mode}: FAIL, grove's fault: {why}");
            }
        }
    }
    if grove_failed {
        println!("SMOKE TEST FAILED");
        ExitCode::FAILURE
    } else {
        println!("SMOKE TEST PASSED");
        ExitCode::SUCCESS
    }
}
