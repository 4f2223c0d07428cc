//! Benchmarks grove's git layer against plain git on a large generated repository.
//!
//! Run through `scripts/bench-git.sh`. Prints, side by side: time to a usable worktree
//! and to a full checkout for 1 and 8 worktrees (grove vs `git worktree add`), diff
//! time, and the merge of 8 branches (grove in memory vs `git merge --no-ff` in a work
//! tree), with ratios.

#![allow(clippy::print_stdout)]

#[path = "support/bench_repo.rs"]
mod bench_repo;

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use grove::git::{CommitId, GitOptions, Repo, RunId};
use grove::worktree::WorktreeSpec;

const WORKTREES: u32 = 8;

fn sealed_env(home: &Path) -> Vec<(OsString, OsString)> {
    bench_repo::sealed_env(home, None)
}

/// Runs plain git (the user's way) in `dir`.
fn git(home: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    bench_repo::git(&sealed_env(home), dir, args)
}

/// Flushes dirty pages so one side's writeback is not billed to the other's timing.
fn settle() {
    let _ = Command::new("sync").status();
}

fn secs(d: Duration) -> String {
    format!("{:8.3} s", d.as_secs_f64())
}

fn row(label: &str, grove: Duration, git: Duration) {
    println!(
        "{label:<44} {}   {}   ratio grove/git {:6.3}",
        secs(grove),
        secs(git),
        grove.as_secs_f64() / git.as_secs_f64().max(1e-9)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let files: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()
        .context("the first argument is the number of files")?
        .unwrap_or(30_000);
    let root = tempfile::Builder::new()
        .prefix("grove-bench-")
        .tempdir_in(std::env::var_os("BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from))?;
    let home = root.path().join("home");
    let repo_dir = root.path().join("repo");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&repo_dir)?;
    println!(
        "repository: {} ({files} files, on disk)",
        repo_dir.display()
    );

    let started = Instant::now();
    bench_repo::generate(&repo_dir, files)?;
    git(
        &home,
        &repo_dir,
        &["init", "--quiet", "--initial-branch=main"],
    )?;
    git(&home, &repo_dir, &["add", "--all"])?;
    git(&home, &repo_dir, &["commit", "--quiet", "-m", "generated"])?;
    println!("generated and committed in {}", secs(started.elapsed()));
    std::io::stdout().flush()?;

    let repo = Repo::open(
        &repo_dir,
        GitOptions {
            env: sealed_env(&home),
            ..GitOptions::default()
        },
    )
    .await?;
    let base = repo.resolve("HEAD")?;
    let plain_dir = root.path().join("plain");

    println!();
    println!("{:<44} {:>10}   {:>10}", "measurement", "grove", "git");

    // One worktree.
    settle();
    let t = Instant::now();
    git(
        &home,
        &repo_dir,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            "plain-1",
            plain_dir.join("1").to_str().unwrap_or_default(),
            "HEAD",
        ],
    )?;
    let git_one = t.elapsed();
    let run = RunId::new("bench1")?;
    settle();
    let t = Instant::now();
    let worktree = repo
        .create_worktree(WorktreeSpec {
            run: run.clone(),
            subtask: 1,
            base,
            path: repo.default_worktrees_dir(&run).join("1"),
        })
        .await?;
    let grove_usable = t.elapsed();
    worktree.ready().await?;
    let grove_full = t.elapsed();
    row(
        "1 worktree: usable (git: full checkout)",
        grove_usable,
        git_one,
    );
    row("1 worktree: full checkout", grove_full, git_one);
    repo.clean_run(&run).await?;

    // Eight worktrees.
    settle();
    let t = Instant::now();
    for n in 2..2 + WORKTREES {
        git(
            &home,
            &repo_dir,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &format!("plain-{n}"),
                plain_dir.join(n.to_string()).to_str().unwrap_or_default(),
                "HEAD",
            ],
        )?;
    }
    let git_eight = t.elapsed();
    let run = RunId::new("bench8")?;
    settle();
    let t = Instant::now();
    let creations = (1..=WORKTREES).map(|n| {
        let spec = WorktreeSpec {
            run: run.clone(),
            subtask: n,
            base,
            path: repo.default_worktrees_dir(&run).join(n.to_string()),
        };
        let repo = repo.clone();
        async move {
            let worktree = repo.create_worktree(spec).await?;
            Ok::<_, grove::worktree::CreateError>((worktree, t.elapsed()))
        }
    });
    let created = futures_util::future::try_join_all(creations).await?;
    let grove_usable = t.elapsed();
    let latencies: Vec<String> = created
        .iter()
        .map(|(_, d)| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .collect();
    let worktrees: Vec<_> = created.into_iter().map(|(w, _)| w).collect();
    println!(
        "  (8 concurrent creates, each usable after ms: {}; first queued first)",
        latencies.join(", ")
    );
    for worktree in &worktrees {
        worktree.ready().await?;
    }
    let grove_full = t.elapsed();
    row(
        "8 worktrees: all usable (git: 8 sequential adds)",
        grove_usable,
        git_eight,
    );
    row("8 worktrees: all fully checked out", grove_full, git_eight);

    // Each subtask changes its own 20 files (the diff) and one shared file region.
    let mut heads: Vec<CommitId> = Vec::new();
    for worktree in &worktrees {
        let n = worktree.subtask() as usize;
        for k in 0..20 {
            // Disjoint files per subtask, so all 8 merges are clean on both sides.
            let i = (n * (files / (WORKTREES as usize + 2)) + k * 7) % files;
            let path = worktree
                .path()
                .join(format!("pkg{:03}/src/file{i:05}.js", i / 100));
            let mut text = std::fs::read_to_string(&path)?;
            text.push_str(&format!("export const subtask_{n} = {k};\n"));
            std::fs::write(&path, text)?;
        }
        let head = worktree
            .checkpoint(&repo, "bench change")
            .await?
            .context("the bench change made no commit")?;
        heads.push(head);
    }

    // Diff of a 20-file branch against its base.
    let t = Instant::now();
    let diff = repo.diff(base, heads[0], 256 * 1024).await?;
    let grove_diff = t.elapsed();
    let t = Instant::now();
    git(
        &home,
        &repo_dir,
        &["diff", &format!("{base}..{}", heads[0])],
    )?;
    let git_diff = t.elapsed();
    println!("  ({})", diff.stat.summary());
    row(
        "diff of a 20-file branch (stat + patch vs patch)",
        grove_diff,
        git_diff,
    );

    // Merge 8 branches: grove in memory vs git merge --no-ff in a work tree.
    let t = Instant::now();
    repo.create_result_branch(&run, base).await?;
    let subtasks: Vec<u32> = (1..=WORKTREES).collect();
    let outcomes = repo.merge_subtasks(&run, &subtasks).await?;
    let grove_merge = t.elapsed();
    let merge_dir = plain_dir.join("1");
    settle();
    let t = Instant::now();
    for n in &subtasks {
        git(
            &home,
            &merge_dir,
            &[
                "merge",
                "--quiet",
                "--no-ff",
                "--no-edit",
                &run.subtask_branch(*n),
            ],
        )?;
    }
    let git_merge = t.elapsed();
    let merged = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, grove::git::MergeOutcome::Merged { .. }))
        .count();
    println!("  (grove merged {merged} of {} branches)", outcomes.len());
    row(
        "merge 8 branches (in memory vs work tree)",
        grove_merge,
        git_merge,
    );

    let same_tree = git(
        &home,
        &repo_dir,
        &["rev-parse", &format!("{}^{{tree}}", run.result_branch())],
    )? == git(&home, &merge_dir, &["rev-parse", "HEAD^{tree}"])?;
    println!("  (grove's result tree equals git's merge result: {same_tree})");

    let t = Instant::now();
    let report = repo.clean_run(&run).await?;
    println!(
        "grove clean: archived {} subtasks, removed {} worktrees in {}",
        report.archived.len(),
        report.removed_worktrees.len(),
        secs(t.elapsed())
    );
    println!("\nremoving {}", root.path().display());
    Ok(())
}
