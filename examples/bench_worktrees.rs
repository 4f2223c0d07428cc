//! Benchmarks grove's worktrees (copy-on-write overlay trees and the git fallback)
//! against 8 sequential `git worktree add` + `git worktree remove` on a large generated
//! repository, measured in the same run.
//!
//! Run through `scripts/bench-worktrees.sh`. Prints each figure with its baseline and
//! the ratio: the base tree against one `git worktree add`; the time until each of 8
//! trees is fully readable (overlay: created by grove, mounted by grove's tree host in
//! a user and mount namespace of its own, and files read through it); `du` of each upper directory after a one-file change; removing the 8
//! trees; a setup step writing 20,000 files once per run against once per worker; the
//! worker's `git status` inside an overlay; a tree's unmount while other data waits to
//! be written (grove's `volatile` mount against a plain one).

#![allow(clippy::print_stdout)]

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use grove::git::{GitOptions, Repo, RunId};
use grove::worktree::overlay::open_scratch;
use grove::worktree::{CommitPath, WorktreeSpec, settle_deletions};
use grove::worktree::{Layers, OverlayTree, TreeHost};

#[path = "support/bench_repo.rs"]
mod bench_repo;

const WORKERS: u32 = 8;

/// A setup step that writes 20,000 small files (an `npm ci` stand-in) into an ignored
/// `node_modules`.
const SETUP: &str = "python3 -c \"import os\nfor d in range(200):\n  p=f'node_modules/p{d}'\n  os.makedirs(p, exist_ok=True)\n  for f in range(100):\n    open(f'{p}/f{f}.js','w').write('module.exports=1\\n')\"";

fn sealed_env(home: &Path, cache: &Path) -> Vec<(OsString, OsString)> {
    bench_repo::sealed_env(home, Some(cache))
}

struct Bench {
    home: PathBuf,
    cache: PathBuf,
    repo_dir: PathBuf,
}

impl Bench {
    /// Runs plain git (the user's way) in `dir`.
    fn git(&self, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
        bench_repo::git(&sealed_env(&self.home, &self.cache), dir, args)
    }

    /// Runs `script` in the tree `host` mounts at `path` (in its namespaces).
    fn in_tree(&self, tree: &OverlayTree, path: &Path, script: &str) -> anyhow::Result<String> {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .envs(sealed_env(&self.home, &self.cache))
            .current_dir("/");
        tree.namespace_ref()
            .entry(path)
            .context("a path the tree can enter")?
            .at_exec(&mut command);
        let output = command.output()?;
        if !output.status.success() {
            bail!("in the tree: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// With `BENCH_SYNC=1`, flushes dirty pages so one side's writeback is not billed to
/// the other's timing; off by default, since on a shared machine a `sync` waits for
/// everyone's writes (minutes, measured).
fn settle() {
    if std::env::var_os("BENCH_SYNC").is_some_and(|v| v == "1") {
        let _ = Command::new("sync").status();
    }
}

fn secs(d: Duration) -> String {
    format!("{:8.3} s", d.as_secs_f64())
}

fn row(label: &str, grove: Duration, baseline: Duration) {
    println!(
        "{label:<52} {}   {}   ratio {:7.3}",
        secs(grove),
        secs(baseline),
        grove.as_secs_f64() / baseline.as_secs_f64().max(1e-9)
    );
    let _ = std::io::stdout().flush();
}

fn run_setup(dir: &Path) -> anyhow::Result<()> {
    let status = Command::new("sh")
        .args(["-c", SETUP])
        .current_dir(dir)
        .status()?;
    if !status.success() {
        bail!("the setup failed in {}", dir.display());
    }
    Ok(())
}

/// `du -sk` of `dir`, in KiB.
fn du_kib(dir: &Path) -> anyhow::Result<u64> {
    let output = Command::new("du").arg("-sk").arg(dir).output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0))
}

/// The baseline: 8 sequential `git worktree add`, then 8 `git worktree remove`; returns
/// (add total, one add, remove total).
fn baseline(bench: &Bench, plain: &Path) -> anyhow::Result<[Duration; 3]> {
    settle();
    let mut first = Duration::ZERO;
    let t = Instant::now();
    for n in 1..=WORKERS {
        let one = Instant::now();
        let path = plain.join(n.to_string());
        bench.git(
            &bench.repo_dir,
            &[
                "worktree",
                "add",
                "--quiet",
                "--detach",
                path.to_str().unwrap_or_default(),
                "HEAD",
            ],
        )?;
        if n == 1 {
            first = one.elapsed();
        }
    }
    let add = t.elapsed();

    settle();
    let t = Instant::now();
    for n in 1..=WORKERS {
        let path = plain.join(n.to_string());
        bench.git(
            &bench.repo_dir,
            &[
                "worktree",
                "remove",
                "--force",
                path.to_str().unwrap_or_default(),
            ],
        )?;
    }
    let remove = t.elapsed();
    Ok([add, first, remove])
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
        .prefix("grove-bench-wt-")
        .tempdir_in(std::env::var_os("BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from))?;
    let bench = Bench {
        home: root.path().join("home"),
        cache: root.path().join("cache"),
        repo_dir: root.path().join("repo"),
    };
    std::fs::create_dir_all(&bench.home)?;
    std::fs::create_dir_all(&bench.repo_dir)?;
    println!(
        "repository: {} ({files} files, on disk), {WORKERS} workers",
        bench.repo_dir.display()
    );
    bench_repo::generate(&bench.repo_dir, files)?;
    bench.git(
        &bench.repo_dir,
        &["init", "--quiet", "--initial-branch=main"],
    )?;
    bench.git(&bench.repo_dir, &["add", "--all"])?;
    bench.git(&bench.repo_dir, &["commit", "--quiet", "-m", "generated"])?;
    let repo = Repo::open(
        &bench.repo_dir,
        GitOptions {
            env: sealed_env(&bench.home, &bench.cache),
            ..GitOptions::default()
        },
    )
    .await?;
    let base = repo.resolve("HEAD")?;

    let [git_add, git_one, git_remove] = baseline(&bench, &root.path().join("plain"))?;
    println!();
    println!("{:<52} {:>10}   {:>10}", "measurement", "grove", "baseline");
    println!(
        "baseline: 8 sequential git worktree add {}, 8 git worktree remove {}",
        secs(git_add),
        secs(git_remove)
    );
    let per_worker = git_mode(&repo, base, [git_add, git_remove]).await?;
    overlay_mode(
        files,
        &bench,
        &repo,
        base,
        [git_add, git_one, per_worker, git_remove],
    )
    .await?;
    // The trees grove removed are still being deleted in the background; the temp dir
    // goes the same way, so that the bench ends when its figures are printed.
    let kept = root.keep();
    let _ = Command::new("rm").arg("-rf").arg(&kept).spawn();
    Ok(())
}

async fn overlay_mode(
    files: usize,
    bench: &Bench,
    repo: &Repo,
    base: grove::git::CommitId,
    [git_add, git_one, git_setup, git_remove]: [Duration; 4],
) -> anyhow::Result<()> {
    println!();
    println!("overlay mode (base tree + 8 copy-on-write trees, each with its tree host)");
    settle();
    let t = Instant::now();
    let base_tree = repo.base_tree(base, Some(SETUP)).await?;
    let base_cost = t.elapsed();
    // Its baseline right after it, so that both see the same (shared) disk.
    let t = Instant::now();
    let paired = bench.cache.join("paired-add");
    bench.git(
        &bench.repo_dir,
        &[
            "worktree",
            "add",
            "--quiet",
            "--detach",
            paired.to_str().unwrap_or_default(),
            "HEAD",
        ],
    )?;
    let git_one_paired = t.elapsed();
    row(
        "base tree, built once (vs one git worktree add after it)",
        base_cost,
        git_one_paired,
    );
    settle();
    let t = Instant::now();
    run_setup(&base_tree.tree_dir())?;
    if let Some(guard) = base_tree.lock_for_setup().await? {
        guard.record_done()?;
    }
    let setup_once = t.elapsed();
    row(
        "setup writing 20,000 files: once per run (vs per worker)",
        setup_once,
        git_setup,
    );
    let t = Instant::now();
    let again = repo.base_tree(base, Some(SETUP)).await?;
    let reused = t.elapsed();
    println!(
        "{:<52} {}   (setup done: {}, rebuilt: {})",
        "a second run on the same base: base + setup",
        secs(reused),
        again.is_set_up(),
        again.was_built()
    );

    let run = RunId::new("benchov")?;
    let mut trees = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut slowest_create = Duration::ZERO;
    let t = Instant::now();
    for n in 1..=WORKERS {
        let one = Instant::now();
        let spec = WorktreeSpec {
            run: run.clone(),
            subtask: n,
            base,
            path: repo.default_worktrees_dir(&run).join(n.to_string()),
        };
        let worktree = repo.create_overlay_worktree(spec, &base_tree).await?;
        slowest_create = slowest_create.max(one.elapsed());
        // Mounted as a run mounts it (run/subtask/trees.rs): its `.git` file in the upper
        // directory, a tree host of its own.
        let layers = Layers::beside(&base_tree.tree_dir(), worktree.path());
        std::fs::create_dir_all(&layers.upper)?;
        std::fs::copy(worktree.path().join(".git"), layers.upper.join(".git"))?;
        let host = Arc::new(OverlayTree::new(TreeHost::start(layers).await?));
        let worktree = worktree.mounted(Arc::clone(&host));
        // Fully readable: the last file and a setup file, read through the overlay.
        let last = format!("pkg{:03}/src/file{:05}.js", (files - 1) / 100, files - 1);
        bench.in_tree(
            &host,
            worktree.path(),
            &format!(
                "cat {last} node_modules/p199/f99.js > /dev/null && echo change{n} > \
                 pkg000/src/file00000.js"
            ),
        )?;
        slowest = slowest.max(one.elapsed());
        trees.push((worktree, host));
    }
    let all = t.elapsed();
    row(
        "slowest tree: grove's part, created (vs one add)",
        slowest_create,
        git_one,
    );
    row(
        "slowest tree: created + mounted + read (vs one add)",
        slowest,
        git_one,
    );
    row(
        "8 trees fully readable (vs 8 sequential adds)",
        all,
        git_add,
    );
    for (worktree, host) in &trees {
        println!(
            "  du of upper dir {}: {} KiB (one changed file of ~1 KiB)",
            worktree.subtask(),
            du_kib(&host.layers().context("a running host")?.upper)?
        );
    }
    for (label, path) in [
        ("from the upper dir", CommitPath::Fastest),
        ("git add --all in the tree", CommitPath::Cli),
    ] {
        let worktree = &trees[if path == CommitPath::Fastest { 0 } else { 1 }].0;
        let t = Instant::now();
        let commit = repo.checkpoint_with(worktree, "bench", path).await?;
        println!(
            "{:<52} {}   ({})",
            format!("checkpoint {label}"),
            secs(t.elapsed()),
            commit.map_or_else(|| "no commit".to_owned(), |c| c.to_string())
        );
    }
    for (label, flags) in [
        ("default config", ""),
        (
            "core.checkStat=minimal, core.untrackedCache",
            "-c core.checkStat=minimal -c core.untrackedCache=true",
        ),
    ] {
        let script = format!(
            "git {flags} status --porcelain >/dev/null; s=$(date +%s%N); git {flags} status \
             --porcelain > /dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000000 ))"
        );
        let (worktree, host) = &trees[2];
        let ms = bench.in_tree(host, worktree.path(), &script)?;
        println!(
            "  worker's git status inside the tree ({label}): {} ms",
            ms.trim()
        );
    }
    settle();
    let t = Instant::now();
    // As a run removes them (run/subtask/trees.rs): each subtask's own task, at once,
    // their work already committed.
    let removals = trees.into_iter().map(|(worktree, host)| async move {
        let layers = host.layers().context("a running host")?;
        host.stop().await;
        grove::worktree::overlay::remove_own_dirs(&layers)?;
        repo.unregister_worktree(&worktree).await?;
        anyhow::Ok(())
    });
    for removed in futures_util::future::join_all(removals).await {
        removed?;
    }
    let removed = t.elapsed();
    row(
        "removing the 8 trees (vs 8 git worktree remove)",
        removed,
        git_remove,
    );
    let t = Instant::now();
    settle_deletions().await;
    println!(
        "  (their background deletion took {} more)",
        secs(t.elapsed())
    );
    unmount_with_unwritten_data(&bench.cache)
}

/// How much unwritten data sits on the disk when a tree is unmounted.
const DIRTY_MIB: usize = 200;

/// A tree's life (mount, one write, unmount) while [`DIRTY_MIB`] of someone else's data
/// is not yet written to the disk: grove's `volatile` mount against a plain one, three
/// alternating pairs, medians. A plain overlay's unmount syncs the whole upper
/// filesystem, so it waits for that data.
fn unmount_with_unwritten_data(scratch: &Path) -> anyhow::Result<()> {
    let dir = scratch.join("unmount");
    let [lower, upper, mount_point] = ["lower", "upper", "tree"].map(|name| dir.join(name));
    for made in [&lower, &upper, &mount_point] {
        std::fs::create_dir_all(made)?;
    }
    let life = |n: usize, volatile: bool| -> anyhow::Result<Duration> {
        // A new file each time: ext4 writes a file rewritten after truncation at once.
        std::fs::write(
            dir.join(format!("unwritten-{n}")),
            vec![1u8; DIRTY_MIB << 20],
        )?;
        // Emptied as grove empties it before a mount: a volatile mount's mark refuses
        // the next one.
        let work = dir.join("work");
        if work.exists() {
            open_scratch(&work);
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(&work)?;
        let options = format!(
            "lowerdir={},upperdir={},workdir={},userxattr{}",
            lower.display(),
            upper.display(),
            work.display(),
            if volatile { ",volatile" } else { "" }
        );
        let t = Instant::now();
        let status = Command::new("unshare")
            .args(["-Urm", "sh", "-c"])
            .arg(format!(
                "mount -t overlay overlay -o {options} {} && echo change > {}/file",
                mount_point.display(),
                mount_point.display()
            ))
            .status()?;
        let took = t.elapsed();
        if !status.success() {
            bail!("unshare + mount failed ({status})");
        }
        Ok(took)
    };
    let (mut volatile, mut plain) = (Vec::new(), Vec::new());
    for n in 0..3 {
        plain.push(life(2 * n, false)?);
        volatile.push(life(2 * n + 1, true)?);
    }
    let median = |mut all: Vec<Duration>| {
        all.sort();
        all[all.len() / 2]
    };
    row(
        &format!("a tree's mount+write+unmount, {DIRTY_MIB} MB unwritten (vs plain)"),
        median(volatile),
        median(plain),
    );
    open_scratch(&dir.join("work"));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Grove's git worktrees; returns the time of the setup run once per worker.
async fn git_mode(
    repo: &Repo,
    base: grove::git::CommitId,
    [git_add, git_remove]: [Duration; 2],
) -> anyhow::Result<Duration> {
    println!();
    println!("git fallback mode (grove's git worktrees, with 20,000 setup files each)");
    let run = RunId::new("benchgit")?;
    settle();
    let t = Instant::now();
    let mut worktrees = Vec::new();
    for n in 1..=WORKERS {
        worktrees.push(
            repo.create_worktree(WorktreeSpec {
                run: run.clone(),
                subtask: n,
                base,
                path: repo.default_worktrees_dir(&run).join(n.to_string()),
            })
            .await?,
        );
    }
    let usable = t.elapsed();
    for worktree in &worktrees {
        worktree.ready().await?;
    }
    let full = t.elapsed();
    row(
        "8 worktrees usable (lazy; vs 8 sequential adds)",
        usable,
        git_add,
    );
    row(
        "8 worktrees fully checked out (vs 8 sequential adds)",
        full,
        git_add,
    );
    settle();
    let t = Instant::now();
    for worktree in &worktrees {
        run_setup(worktree.path())?;
    }
    let per_worker = t.elapsed();
    println!(
        "{:<52} {}",
        "setup writing 20,000 files, once per worker",
        secs(per_worker)
    );
    for worktree in &worktrees {
        println!(
            "  du of worktree {}: {} KiB",
            worktree.subtask(),
            du_kib(worktree.path())?
        );
    }
    settle();
    let t = Instant::now();
    // As a run removes them: each subtask's own task, at once.
    let removals = worktrees
        .iter()
        .map(|worktree| repo.remove_worktree(worktree));
    for removed in futures_util::future::join_all(removals).await {
        removed?;
    }
    let removed = t.elapsed();
    row(
        "removing the 8 worktrees (vs 8 git worktree remove)",
        removed,
        git_remove,
    );
    // Waited for here only so that the overlay figures do not share the disk with it.
    let t = Instant::now();
    settle_deletions().await;
    println!(
        "  (their background deletion took {} more; a run does not wait for it)",
        secs(t.elapsed())
    );
    Ok(per_worker)
}
