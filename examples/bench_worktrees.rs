//! Benchmarks copy-on-write worktrees (issue 15) against git worktrees on a large
//! generated repository.
//!
//! Run through `scripts/bench-worktrees.sh`. Prints, each with its baseline and ratio:
//! the base tree (once per base commit) against one `git worktree add`; the time until
//! each of 8 trees is fully readable (a file read through it and `git status` run inside
//! it); the disk each worker's upper directory takes; and removing the 8 trees against
//! 8 sequential `git worktree add` + `git worktree remove`. Not measured here: the setup
//! step once per base and the run's wall time against its critical path
//! (`scripts/bench-parallel.sh`).

#![allow(clippy::print_stdout)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use grove::git::{GitOptions, Repo, RunId, WorktreeSpec};
use grove::tools::tree::{self, Layers, OverlayTree, TreeAccess as _, TreeHost};

const TREES: u32 = 8;

fn sealed_env(home: &Path) -> Vec<(OsString, OsString)> {
    [
        ("GIT_CONFIG_GLOBAL", OsString::from("/dev/null")),
        ("GIT_CONFIG_NOSYSTEM", OsString::from("1")),
        ("HOME", home.as_os_str().to_owned()),
        ("GIT_AUTHOR_NAME", OsString::from("bench")),
        ("GIT_AUTHOR_EMAIL", OsString::from("bench@localhost")),
        ("GIT_COMMITTER_NAME", OsString::from("bench")),
        ("GIT_COMMITTER_EMAIL", OsString::from("bench@localhost")),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), v))
    .collect()
}

fn git(home: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("git")
        .envs(sealed_env(home))
        .current_dir(dir)
        .args(args)
        .output()
        .with_context(|| format!("starting git {args:?}"))?;
    if !output.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Writes `files` source-like files of about 1 KiB in directories of 100.
fn generate(repo: &Path, files: usize) -> anyhow::Result<()> {
    for i in 0..files {
        let dir = repo.join(format!("pkg{:03}/src", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let body: String = (0..30)
            .map(|line| format!("export const value_{i}_{line} = {};\n", i * 31 + line))
            .collect();
        std::fs::write(dir.join(format!("file{i:05}.js")), body)?;
    }
    Ok(())
}

fn settle() {
    let _ = Command::new("sync").status();
}

fn row(what: &str, ours: Duration, theirs: Duration) {
    println!(
        "{what:<52} {:>9.3} s {:>9.3} s   x{:.2}",
        ours.as_secs_f64(),
        theirs.as_secs_f64(),
        ours.as_secs_f64() / theirs.as_secs_f64().max(1e-9)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let files: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(30_000);
    let root = tempfile::Builder::new()
        .prefix("grove-bench-worktrees-")
        .tempdir_in(std::env::var_os("BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from))?;
    let home = root.path().join("home");
    let repo_dir = root.path().join("repo");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&repo_dir)?;
    generate(&repo_dir, files)?;
    git(
        &home,
        &repo_dir,
        &["init", "--quiet", "--initial-branch=main"],
    )?;
    git(&home, &repo_dir, &["add", "--all"])?;
    git(&home, &repo_dir, &["commit", "--quiet", "-m", "generated"])?;
    println!("repository: {} ({files} files)", repo_dir.display());
    let options = GitOptions {
        env: sealed_env(&home),
        ..GitOptions::default()
    };
    let repo = Repo::open(&repo_dir, options).await?;
    let base = repo.resolve("HEAD")?;
    if let Err(error) = tree::overlay::probe(repo.worktrees_home()).await {
        bail!("copy-on-write trees are unavailable here: {error}");
    }
    println!(
        "{:<52} {:>11} {:>11}   ratio",
        "measurement", "overlay", "git"
    );

    // Baseline: 8 sequential `git worktree add`, then 8 `git worktree remove`.
    let plain = root.path().join("plain");
    settle();
    let t = Instant::now();
    for n in 1..=TREES {
        let path = plain.join(n.to_string());
        let path = path.to_str().unwrap_or_default();
        git(
            &home,
            &repo_dir,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                &format!("plain-{n}"),
                path,
                "HEAD",
            ],
        )?;
    }
    let git_adds = t.elapsed();
    settle();
    let t = Instant::now();
    for n in 1..=TREES {
        let path = plain.join(n.to_string());
        git(
            &home,
            &repo_dir,
            &[
                "worktree",
                "remove",
                "--force",
                path.to_str().unwrap_or_default(),
            ],
        )?;
    }
    let git_removes = t.elapsed();
    let git_one = git_adds / TREES;

    settle();
    let t = Instant::now();
    let base_tree = repo.base_tree(base).await?;
    row(
        "the base tree, once per base commit (vs 1 worktree add)",
        t.elapsed(),
        git_one,
    );

    let run = RunId::new("bench")?;
    let mut trees = Vec::new();
    let mut slowest = Duration::ZERO;
    let t = Instant::now();
    for n in 1..=TREES {
        let made = Instant::now();
        let spec = WorktreeSpec {
            run: run.clone(),
            subtask: n,
            base,
            path: repo.default_worktrees_dir(&run).join(n.to_string()),
        };
        let worktree = repo.create_overlay_worktree(spec, &base_tree.index).await?;
        let layers = Layers::beside(&base_tree.tree, worktree.path());
        std::fs::create_dir_all(&layers.upper)?;
        std::fs::copy(worktree.path().join(".git"), layers.upper.join(".git"))?;
        let overlay = Arc::new(OverlayTree::new(TreeHost::start(layers.clone()).await?));
        let seen = overlay.root_for_grove();
        let last = format!("pkg{:03}/src/file{:05}.js", (files - 1) / 100, files - 1);
        std::fs::read(seen.join(&last)).with_context(|| format!("reading {last}"))?;
        // Fully readable: git inside sees every file unchanged.
        let status = repo_status(&home, &overlay, &worktree)?;
        if !status.is_empty() {
            bail!("git status in a fresh tree is not clean: {status}");
        }
        slowest = slowest.max(made.elapsed());
        trees.push((worktree, overlay, layers));
    }
    let created = t.elapsed();
    row(
        "8 trees fully readable (vs 8 worktree add)",
        created,
        git_adds,
    );
    row(
        "slowest tree, creation to fully readable (vs 1 add)",
        slowest,
        git_one,
    );

    for (n, (_, overlay, layers)) in trees.iter().enumerate() {
        std::fs::write(
            overlay.root_for_grove().join("pkg000/src/file00000.js"),
            "changed\n",
        )?;
        let du = Command::new("du")
            .args(["-sk"])
            .arg(&layers.upper)
            .output()?;
        println!(
            "upper dir of tree {} after changing one file: {}",
            n + 1,
            String::from_utf8_lossy(&du.stdout)
                .split_whitespace()
                .next()
                .unwrap_or("?")
        );
    }
    let du = Command::new("du")
        .args(["-sk"])
        .arg(&base_tree.tree)
        .output()?;
    println!(
        "base tree (shared, once): {} KiB",
        String::from_utf8_lossy(&du.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );

    settle();
    let t = Instant::now();
    for (worktree, overlay, layers) in trees {
        overlay.stop().await;
        tree::overlay::remove_own_dirs(&layers)?;
        repo.unregister_worktree(&worktree).await?;
    }
    row(
        "removing the 8 trees (vs 8 worktree remove)",
        t.elapsed(),
        git_removes,
    );
    Ok(())
}

/// `git status --porcelain` run inside `overlay`'s namespaces, as a worker's would.
fn repo_status(
    home: &Path,
    overlay: &OverlayTree,
    worktree: &grove::git::Worktree,
) -> anyhow::Result<String> {
    let Some(entry) = overlay.namespace_ref().entry(worktree.path()) else {
        bail!("the tree's path cannot be passed to the kernel");
    };
    let mut command = Command::new("git");
    command
        .envs(sealed_env(home))
        .current_dir("/")
        .args(["status", "--porcelain"]);
    entry.at_exec(&mut command);
    let output = command.output()?;
    if !output.status.success() {
        bail!("git status: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
