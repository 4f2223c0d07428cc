//! What a worker's change to one big file costs grove's memory: a repository with one
//! tracked text file of `--mb` MiB; the lead delegates one subtask whose worker appends a
//! line to it with `bash`; the reviewer approves; the result merges and the branch moves.
//!
//! Printed: grove's peak resident memory during the run over its resident memory just
//! before it (the fake model server, in the same process, holds a few KiB), the file's
//! size, and their ratio (issue 31's target: about the file, not three times it). The
//! peak is the kernel's own high-water mark (`VmHWM`), reset before the run through
//! `/proc/self/clear_refs`. It is not a pass/fail test.
//!
//! Run it with `scripts/bench-big-file.sh` (release mode).
//!
//! Usage: `bench_big_file [--mb N] [--mode auto|overlay|git]` (defaults 200, auto).

#![allow(
    clippy::print_stdout,
    reason = "a benchmark's job is to print its numbers"
)]

#[path = "../tests/support/"]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
}

use std::io::Write as _;

use anyhow::{Context, bail, ensure};
use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{ModelChoice, Models, RunEnd, RunOptions};
use grove::store::journal::SubtaskOutcome;
use grove::worktree::WorktreeMode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use support::git_fixture::GitFixture;

const BIG: &str = "big.txt";
const APPENDED: &str = "appended by the benchmark";

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let (mb, mode) = settings()?;
    let fixture = GitFixture::with_files(&[("README.md", "a big file\n")]);
    write_big_file(&fixture.repo.join(BIG), mb)?;
    fixture.commit_all("a big file");
    let size = std::fs::metadata(fixture.repo.join(BIG))?.len();

    let server = FakeServer::with_responder(respond).await;
    let client = server.model(Provider::Anthropic, true);
    let choice = |name: &str| ModelChoice {
        client: client.clone(),
        name: name.into(),
    };
    let models = Models {
        provider: Provider::Anthropic.as_str().into(),
        lead: choice("lead"),
        worker: choice("worker"),
        reviewer: choice("reviewer"),
    };
    let options = RunOptions {
        worktree_mode: mode,
        git: fixture.options(),
        ..RunOptions::new("Append a line to big.txt.")
    };
    grove::tools::exec::return_freed_memory();
    let before = status_kib("VmRSS")?;
    std::fs::write("/proc/self/clear_refs", "5").context("resetting the peak (clear_refs)")?;
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .context("the run failed")?;
    let peak = status_kib("VmHWM")?;
    ensure!(
        report.status == RunEnd::Finished
            && report
                .subtasks
                .iter()
                .all(|subtask| subtask.status == SubtaskOutcome::Merged),
        "the run did not merge its subtask: {report:#?}"
    );
    let result = std::fs::read(fixture.repo.join(BIG))?;
    ensure!(
        result.ends_with(format!("{APPENDED}\n").as_bytes()),
        "the merged file does not end with the appended line"
    );

    let mib = |kib: u64| kib as f64 / 1024.0;
    let file_kib = size / 1024;
    let used = peak.saturating_sub(before);
    println!("a worker appends one line to a {mb} MiB tracked file ({mode:?} worktrees)");
    println!("  resident before the run   {:8.1} MiB", mib(before));
    println!("  peak during the run       {:8.1} MiB", mib(peak));
    println!(
        "  peak over before          {:8.1} MiB   ratio to the file {:.2}x (target about 1x)",
        mib(used),
        used as f64 / file_kib.max(1) as f64
    );
    Ok(())
}

fn settings() -> anyhow::Result<(u64, WorktreeMode)> {
    let mut mb = 200;
    let mut mode = WorktreeMode::Auto;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--mb" => mb = value.parse().context("--mb takes a whole number")?,
            "--mode" => {
                mode = match value.as_str() {
                    "auto" => WorktreeMode::Auto,
                    "overlay" => WorktreeMode::Overlay,
                    "git" => WorktreeMode::Git,
                    other => bail!("--mode takes auto, overlay or git, not {other}"),
                }
            }
            other => bail!("unknown flag {other}"),
        }
    }
    Ok((mb, mode))
}

/// `mb` MiB of numbered text lines (a text file git diffs line by line).
fn write_big_file(path: &std::path::Path, mb: u64) -> anyhow::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut line = 0u64;
    while written < mb * 1024 * 1024 {
        let text = format!("line {line:012} of the big file, text for git to diff\n");
        file.write_all(text.as_bytes())?;
        written += text.len() as u64;
        line += 1;
    }
    file.flush()?;
    Ok(())
}

/// A field of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").parse().ok())
        .with_context(|| format!("no {field} in /proc/self/status"))
}

fn respond(request: &RecordedRequest) -> Reply {
    let system = request.system_text();
    let answered = request.tool_results().len();
    let turn = if system.starts_with("You are the lead engineer") {
        if answered == 0 {
            Turn::text("Delegating.").tool_use(
                "lead_call",
                "delegate",
                json!({ "task": "Append a line to big.txt with bash." }),
            )
        } else {
            Turn::text("Done.")
        }
    } else if system.starts_with("You are an independent code reviewer") {
        if answered == 0 {
            Turn::new().tool_use(
                "review_call",
                "submit_verdict",
                json!({ "verdict": "approve", "summary": "Appends the line." }),
            )
        } else {
            Turn::text("Verdict given.")
        }
    } else if answered == 0 {
        Turn::text("Appending.").tool_use(
            "worker_call",
            "bash",
            json!({ "command": format!("echo '{APPENDED}' >> {BIG}") }),
        )
    } else {
        Turn::text("Appended the line.")
    };
    turn.usage(100, 10, 0, 0).into()
}
