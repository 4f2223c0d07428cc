//! Issue 32's figures for workers on other machines: the bytes a worker's start costs
//! (a thin bundle against what the host's mirror holds vs the full one), and the latency
//! a tool call adds over the launcher, each next to its baseline measured in this run.
//!
//! Run through `scripts/bench-remote.sh [--files F] [--calls N] [--launch CMD]`.

#![allow(clippy::print_stdout)]

#[path = "support/bench_repo.rs"]
mod bench_repo;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use grove::git::{CommitId, GitOptions, Repo, RunId};
use grove::remote::protocol::SandboxSpec;
use grove::remote::{HostPool, OpenSpec, RemoteHost, RemoteTree};
use grove::tools::sandbox::SandboxMode;
use grove::tools::tree::TreeAccess;
use grove::tools::{LocalExecutor, ToolContext, ToolSet, builtin_with_executor};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Args {
    files: usize,
    calls: usize,
    launch: Option<String>,
}

fn args() -> anyhow::Result<Args> {
    let mut parsed = Args {
        files: 5000,
        calls: 200,
        launch: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--files" => parsed.files = value.parse()?,
            "--calls" => parsed.calls = value.parse()?,
            "--launch" => parsed.launch = Some(value),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(parsed)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The grove binary built beside this example (`target/<profile>/grove`).
fn grove_binary() -> anyhow::Result<String> {
    let exe = std::env::current_exe()?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .context("the example's folder")?;
    Ok(profile.join("grove").display().to_string())
}

fn host(launch: &str) -> anyhow::Result<RemoteHost> {
    Ok(RemoteHost {
        name: "bench".into(),
        launch: launch.to_owned(),
        program: grove_binary()?,
        slots: 4,
        timeout: Duration::from_secs(60),
        ship: false,
    })
}

async fn open(
    repo: &Repo,
    pool: &HostPool,
    start: CommitId,
    local: &Path,
) -> anyhow::Result<RemoteTree> {
    let placement = pool.place(None).await.context("a slot")?;
    let spec = OpenSpec {
        run: RunId::generate(),
        subtask: 1,
        start,
        sandbox: SandboxSpec::of(SandboxMode::Off, false),
        scope: None,
        local: local.to_path_buf(),
    };
    Ok(RemoteTree::open(repo, placement, spec).await?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let scratch = tempfile::tempdir()?;
    let (home, work, hosts) = (
        scratch.path().join("home"),
        scratch.path().join("repo"),
        scratch.path().join("host"),
    );
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&work)?;
    let env = bench_repo::sealed_env(&home, None);
    let git = |args: &[&str]| bench_repo::git(&env, &work, args);
    git(&["init", "-q", "-b", "main"])?;
    bench_repo::generate(&work, args.files)?;
    git(&["add", "-A"])?;
    git(&["commit", "-q", "-m", "base"])?;
    let first = git(&["rev-parse", "HEAD"])?;
    std::fs::write(
        work.join("pkg000/src/file00000.js"),
        "export const changed = 1;\n",
    )?;
    git(&["commit", "-q", "-am", "one file changed"])?;
    let second = git(&["rev-parse", "HEAD"])?;
    let options = GitOptions {
        env: env.clone(),
        ..GitOptions::default()
    };
    let repo = Repo::open(&work, options).await?;
    let (first, second) = (CommitId::parse(&first)?, CommitId::parse(&second)?);
    let launch = args
        .launch
        .clone()
        .unwrap_or_else(|| format!("env GROVE_REMOTE_HOME={}", hosts.display()));
    let pool = HostPool::new(vec![host(&launch)?]);
    println!("repository: {} files; launcher: {launch}", args.files);

    let full_second = repo.bundle(second, &[]).await?.len() as u64;
    let cold = open(&repo, &pool, first, &work).await?;
    let warm = open(&repo, &pool, second, &work).await?;
    let again = open(&repo, &pool, second, &work).await?;
    println!(
        "bytes for a worker's start: first worker on an empty mirror {} (full bundle); \
         after one file changed {} vs {} for the full bundle of that commit = {:.4}; \
         a second worker on the same commit {}",
        cold.base_bytes(),
        warm.base_bytes(),
        full_second,
        warm.base_bytes() as f64 / full_second as f64,
        again.base_bytes()
    );
    cold.close().await;
    again.close().await;

    // The same tool calls on the same files: grove's own dispatcher here on a checkout of
    // the commit, and through the launcher on the host's tree.
    let local = scratch.path().join("checkout");
    bench_repo::git(
        &env,
        &work,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            &local.display().to_string(),
            &second.to_string(),
        ],
    )?;
    let registry =
        builtin_with_executor(ToolSet::Worker, Arc::new(LocalExecutor::from_process_env()));
    let ctx = ToolContext::plain(std::fs::canonicalize(&local)?, CancellationToken::new());
    let cancel = CancellationToken::new();
    for (tool, input) in [
        ("read_file", json!({ "path": "pkg000/src/file00001.js" })),
        ("bash", json!({ "command": "true" })),
    ] {
        let mut here = Vec::new();
        let mut there = Vec::new();
        for _ in 0..args.calls {
            let started = Instant::now();
            let output = registry.dispatch(tool, input.clone(), &ctx).await?;
            here.push(started.elapsed());
            anyhow::ensure!(!output.is_error, "{tool} failed here: {}", output.content);
            let started = Instant::now();
            let output = warm
                .remote_tools()
                .context("a remote tree")?
                .call(tool, input.clone(), &cancel)
                .await?;
            there.push(started.elapsed());
            anyhow::ensure!(!output.is_error, "{tool} failed there: {}", output.content);
        }
        let (here, there) = (median(here), median(there));
        println!(
            "{tool}: median of {} calls here {:.3} ms, over the launcher {:.3} ms, added {:.3} ms ({:.2}x)",
            args.calls,
            here.as_secs_f64() * 1e3,
            there.as_secs_f64() * 1e3,
            (there.saturating_sub(here)).as_secs_f64() * 1e3,
            there.as_secs_f64() / here.as_secs_f64()
        );
    }
    warm.close().await;
    Ok(())
}
