//! The kill/resume matrix of issue 31: for each phase of a run, grove is stopped there by
//! each signal (`SIGKILL`, `SIGTERM`, `SIGINT`) `--times` times, resumed, and the outcome
//! checked. It is not a pass/fail test; it prints a table, phase × signal → runs, passed,
//! failed, and the first failure's reason.
//!
//! The run is the rename of `tests/suite/result_check.rs`: the lead delegates three
//! pieces (S1 renames `greet`, S2 and S3 update its callers, S3 forgetting one), every
//! reviewer approves, the result's check (the package's tests) is red, the culprit is S3,
//! and a fixer (S4) makes it pass; then the result is applied as four commits. The model
//! is the fake server of `tests/support/fake_server.rs` (in this process), the
//! repository a sealed fixture (`tests/support/git_fixture.rs`), grove the binary named
//! by `--grove`.
//!
//! Where grove is held at each phase: the lead's first model call, the three workers'
//! first calls, a reviewer's first call and the fixer's first call never get an answer
//! until the resume (the signal is sent once the server holds them); a subtask's check
//! and the result's check sleep 2 s first (the signal is sent once grove says it checks);
//! the merge and the apply cannot be held, so the signal is sent as grove prints S1's
//! `merged` line and as it prints the fixer's (S4) `merged` line (the result's check
//! takes the fixer's verdict, then the apply follows at once): those two are races, and
//! a run that finished before its signal is checked as it is and counted as `early`.
//! `FAULT_MATRIX_SHOW=1` prints grove's stderr of a run that ended before its signal, and
//! of both the stopped run and its resume when the resume did not exit 0, and each lock
//! file on the run's refs a resume removed (or left) after a kill.
//!
//! Checked after the resume (or after the stopped grove, if it had finished): the stop's
//! exit code (none, killed, for `SIGKILL`; 130 and the `grove resume` command for the
//! others), the resume's exit 0, the user's branch holding the renamed package in exactly
//! four new commits (each change applied once), and nothing of the run left: no subtask
//! branch, registered worktree or folder in the cache directory (base trees aside), no
//! mount under it in any process's view, no process working under it.
//!
//! Run it with `scripts/fault-matrix.sh`.
//!
//! Usage: `fault_matrix --grove PATH [--times N] [--phases a,b] [--signals KILL,TERM,INT]`

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a report's job is to print its table, and its progress as it goes"
)]

#[path = "../tests/support/"]
#[allow(dead_code, reason = "the example uses a part of the test support")]
mod support {
    pub mod fake_server;
    pub mod git_fixture;
    pub mod processes;
}

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;

use support::fake_server::{FakeServer, RecordedRequest, Reply, TEST_API_KEY, Turn};
use support::git_fixture::{GitFixture, Leftovers, sealed_env};
use support::processes::{mounts_under, running_under, settled};

/// The phases of a run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Lead,
    Workers,
    Check,
    Review,
    Merge,
    ResultCheck,
    Fixer,
    Apply,
}

const PHASES: [Phase; 8] = [
    Phase::Lead,
    Phase::Workers,
    Phase::Check,
    Phase::Review,
    Phase::Merge,
    Phase::ResultCheck,
    Phase::Fixer,
    Phase::Apply,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Lead => "lead planning",
            Phase::Workers => "workers working",
            Phase::Check => "a subtask's check",
            Phase::Review => "review",
            Phase::Merge => "merge (race)",
            Phase::ResultCheck => "result check",
            Phase::Fixer => "fixer",
            Phase::Apply => "apply (race)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Phase::Lead => "lead",
            Phase::Workers => "workers",
            Phase::Check => "check",
            Phase::Review => "review",
            Phase::Merge => "merge",
            Phase::ResultCheck => "result-check",
            Phase::Fixer => "fixer",
            Phase::Apply => "apply",
        }
    }

    /// Whether grove is stopped there: the stderr lines so far and how many model calls
    /// the server holds.
    fn reached(self, lines: &[String], held: usize) -> bool {
        let any = |f: &dyn Fn(&str) -> bool| lines.iter().any(|line| f(line));
        match self {
            Phase::Lead | Phase::Review | Phase::Fixer => held >= 1,
            Phase::Workers => held >= 3,
            Phase::Check => any(&|l| l.starts_with("S1: checking with ")),
            Phase::Merge => any(&|l| l.starts_with("S1: merged")),
            Phase::ResultCheck => any(&|l| l.starts_with("result: checking with ")),
            // The fixer's merge; the result's check takes its verdict, then the apply.
            Phase::Apply => any(&|l| l.starts_with("S4: merged")),
        }
    }
}

const CHECK: &str = "PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s tests -t .";
const FIXER_HEADING: &str = "# Fix the project's check on the merged result";
const BRIEFS: [&str; 3] = [
    "S1-RENAME: in pkg/core.py rename the function greet to welcome.",
    "S2-CALLERS-A: in pkg/a.py call core.welcome instead of core.greet.",
    "S3-CALLERS-B: in pkg/b.py call core.welcome instead of core.greet.",
];
const CORE: &str = "def greet(name):\n    return f\"Hello, {name}!\"\n";
const CORE_RENAMED: &str = "def welcome(name):\n    return f\"Hello, {name}!\"\n";
const A: &str = "from pkg import core\n\n\ndef hello_alice():\n    return core.greet(\"Alice\")\n";
const A_RENAMED: &str =
    "from pkg import core\n\n\ndef hello_alice():\n    return core.welcome(\"Alice\")\n";
const B: &str = "from pkg import core\n\n\ndef hello_bob():\n    return core.greet(\"Bob\")\n\n\n\
                 def hello_carol():\n    return core.greet(\"Carol\")\n";
const B_FORGOT: &str = "from pkg import core\n\n\ndef hello_bob():\n    return \
                        core.welcome(\"Bob\")\n\n\ndef hello_carol():\n    return \
                        core.greet(\"Carol\")\n";
const B_RENAMED: &str = "from pkg import core\n\n\ndef hello_bob():\n    return \
                         core.welcome(\"Bob\")\n\n\ndef hello_carol():\n    return \
                         core.welcome(\"Carol\")\n";
const TESTS: &str = "import unittest\n\nfrom pkg import a, b\n\n\nclass Greetings(unittest.TestCase):\n    \
                     def test_alice(self):\n        self.assertEqual(a.hello_alice(), \"Hello, Alice!\")\n\n    \
                     def test_bob(self):\n        self.assertEqual(b.hello_bob(), \"Hello, Bob!\")\n\n    \
                     def test_carol(self):\n        self.assertEqual(b.hello_carol(), \"Hello, Carol!\")\n";

/// What the matrix was asked for.
struct Settings {
    grove: PathBuf,
    times: usize,
    phases: Vec<Phase>,
    signals: Vec<Signal>,
}

/// One cell of the table.
#[derive(Default)]
struct Cell {
    runs: usize,
    passed: usize,
    failed: usize,
    /// Passed runs in which grove ended before the signal (a race phase lost the race).
    early: usize,
    first_failure: Option<String>,
}

/// How a run that passed went.
enum Passed {
    /// Stopped at its phase by the signal, then resumed.
    Stopped,
    /// Ended before the signal could be sent (only a race phase may).
    Early,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let settings = settings()?;
    let mut table = Vec::new();
    for phase in &settings.phases {
        for signal in &settings.signals {
            let mut cell = Cell::default();
            for _ in 0..settings.times {
                cell.runs += 1;
                match one(&settings.grove, *phase, *signal).await {
                    Ok(passed) => {
                        cell.passed += 1;
                        cell.early += usize::from(matches!(passed, Passed::Early));
                    }
                    Err(error) => {
                        cell.failed += 1;
                        cell.first_failure.get_or_insert(format!("{error:#}"));
                    }
                }
            }
            eprintln!(
                "fault-matrix: {} × {}: {} of {} passed",
                phase.name(),
                signal.as_str(),
                cell.passed,
                cell.runs
            );
            table.push((*phase, *signal, cell));
        }
    }
    print_table(&table);
    Ok(())
}

fn print_table(table: &[(Phase, Signal, Cell)]) {
    println!(
        "{:<20} {:<8} {:>4} {:>6} {:>6} {:>5}  first failure",
        "phase", "signal", "runs", "passed", "failed", "early"
    );
    for (phase, signal, cell) in table {
        let reason = cell
            .first_failure
            .as_deref()
            .map(|reason| reason.replace('\n', " ⏎ "))
            .unwrap_or_default();
        println!(
            "{:<20} {:<8} {:>4} {:>6} {:>6} {:>5}  {}",
            phase.name(),
            signal.as_str(),
            cell.runs,
            cell.passed,
            cell.failed,
            cell.early,
            grove::text::truncate(&reason, 300)
        );
    }
}

fn settings() -> anyhow::Result<Settings> {
    let mut grove = None;
    let mut times = 2;
    let mut phases = PHASES.to_vec();
    let mut signals = vec![Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT];
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--grove" => grove = Some(PathBuf::from(value)),
            "--times" => times = value.parse().context("--times takes a whole number")?,
            "--phases" => {
                phases = value
                    .split(',')
                    .map(|key| {
                        PHASES
                            .into_iter()
                            .find(|phase| phase.key() == key)
                            .with_context(|| format!("no phase {key}"))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--signals" => {
                signals = value
                    .split(',')
                    .map(|name| match name {
                        "KILL" => Ok(Signal::SIGKILL),
                        "TERM" => Ok(Signal::SIGTERM),
                        "INT" => Ok(Signal::SIGINT),
                        other => bail!("--signals takes KILL, TERM and INT, not {other}"),
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            other => bail!("unknown flag {other}"),
        }
    }
    let grove: PathBuf = grove.context("--grove PATH (the grove binary) is needed")?;
    // Grove runs in the fixture's directory: the path must not be relative to this one.
    let grove = grove
        .canonicalize()
        .with_context(|| format!("no grove binary at {}", grove.display()))?;
    Ok(Settings {
        grove,
        times,
        phases,
        signals,
    })
}

/// The package, its tests and a `[check]` (slow for the phases that stop in a check).
fn fixture(phase: Phase) -> GitFixture {
    let command = if matches!(phase, Phase::Check | Phase::ResultCheck) {
        format!("sleep 2; {CHECK}")
    } else {
        CHECK.to_owned()
    };
    let config = format!("[check]\ncommand = '{command}'\nfix_attempts = 1\nbase = \"skip\"\n");
    GitFixture::with_files(&[
        ("pkg/__init__.py", ""),
        ("pkg/core.py", CORE),
        ("pkg/a.py", A),
        ("pkg/b.py", B),
        ("tests/__init__.py", ""),
        ("tests/test_pkg.py", TESTS),
        (".grove/config.toml", &config),
    ])
}

fn write(path: &str, content: &str) -> Turn {
    Turn::text("Writing.").tool_use(
        "worker_call_1",
        "write_file",
        json!({ "path": path, "content": content }),
    )
}

/// The model side of the rename; while `hold` is set, the calls of `phase` that are
/// held (see the module doc) hang, counted in `held`.
fn responder(
    phase: Phase,
    hold: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |request| {
        let system = request.system_text();
        // A call grove answers as interrupted (it never runs twice) is made again, as a
        // model would: the work is not done until a call of it returned.
        let answered = request
            .tool_results()
            .last()
            .is_some_and(|(_, text)| !text.contains("interrupted"));
        let brief = request.first_user_text();
        let fixer = brief.starts_with(FIXER_HEADING) || brief.contains(FIXER_HEADING);
        let role = if system.starts_with("You are the lead engineer") {
            Phase::Lead
        } else if system.starts_with("You are an independent code reviewer") {
            Phase::Review
        } else if fixer {
            Phase::Fixer
        } else {
            Phase::Workers
        };
        let held_here = role == phase && !answered && !(role == Phase::Review && fixer);
        if held_here && hold.load(Ordering::SeqCst) {
            held.fetch_add(1, Ordering::SeqCst);
            return Reply::Hang;
        }
        let turn =
            match (role, answered) {
                (Phase::Lead, false) => BRIEFS.iter().enumerate().fold(
                    Turn::text("Delegating."),
                    |turn, (index, task)| {
                        turn.tool_use(
                            &format!("lead_call_{index}"),
                            "delegate",
                            json!({ "task": task }),
                        )
                    },
                ),
                (Phase::Lead, true) => Turn::text("All subtasks are done."),
                (Phase::Review, false) => Turn::new().tool_use(
                    "review_call_1",
                    "submit_verdict",
                    json!({ "verdict": "approve", "summary": "Does what the brief asks." }),
                ),
                (Phase::Review, true) => Turn::text("Verdict given."),
                (_, true) => Turn::text("WORKER-FINAL: done."),
                (Phase::Fixer, false) => write("pkg/b.py", B_RENAMED),
                (_, false) if brief.starts_with("S1-") => write("pkg/core.py", CORE_RENAMED),
                (_, false) if brief.starts_with("S2-") => write("pkg/a.py", A_RENAMED),
                (_, false) => write("pkg/b.py", B_FORGOT),
            };
        turn.usage(100, 10, 50, 5).into()
    }
}

/// `grove ARGS` in the fixture, sealed, the model APIs on `server`.
fn grove_command(
    grove: &Path,
    fixture: &GitFixture,
    server: &FakeServer,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(grove);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sealed_env(&fixture.home()))
        .env("NO_COLOR", "1")
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .current_dir(&fixture.repo)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// One run stopped at `phase` by `signal`, resumed, and checked.
async fn one(grove: &Path, phase: Phase, signal: Signal) -> anyhow::Result<Passed> {
    let fixture = fixture(phase);
    let base = fixture.git(&["rev-parse", "HEAD"]);
    let hold = Arc::new(AtomicBool::new(true));
    let held = Arc::new(AtomicUsize::new(0));
    let server =
        FakeServer::with_responder(responder(phase, Arc::clone(&hold), Arc::clone(&held))).await;
    let stop = stopped(grove, &fixture, &server, phase, signal, &held).await?;
    let (code, stopped_err) = (stop.code, stop.stderr);
    hold.store(false, Ordering::SeqCst);
    let runs = grove_command(grove, &fixture, &server, &["runs", "--json"])
        .output()
        .await?;
    let runs: Value = serde_json::from_slice(&runs.stdout).context("grove runs --json")?;
    let run_id = runs[0]["run_id"]
        .as_str()
        .context("no run listed")?
        .to_owned();
    let mut resume_err = String::new();
    if !stop.signalled {
        ensure!(
            matches!(phase, Phase::Merge | Phase::Apply),
            "grove ended (exit {code:?}) before {} was reached: {}",
            phase.name(),
            last_lines(&stopped_err)
        );
        ensure!(
            code == Some(0),
            "grove ended with exit {code:?} before the signal: {}",
            last_lines(&stopped_err)
        );
    } else if code != Some(0) {
        let expected = (signal != Signal::SIGKILL).then_some(130);
        ensure!(
            code == expected,
            "stopped with exit {code:?}, not {expected:?}: {}",
            last_lines(&stopped_err)
        );
        ensure!(
            signal == Signal::SIGKILL || stopped_err.contains(&format!("grove resume {run_id}")),
            "the stop does not name `grove resume {run_id}`: {}",
            last_lines(&stopped_err)
        );
        let resumed = grove_command(grove, &fixture, &server, &["resume", &run_id])
            .output()
            .await?;
        let err = String::from_utf8_lossy(&resumed.stderr).into_owned();
        if resumed.status.code() != Some(0) && std::env::var_os("FAULT_MATRIX_SHOW").is_some() {
            eprintln!("{stopped_err}\n--- the resume ---\n{err}");
        }
        if std::env::var_os("FAULT_MATRIX_SHOW").is_some() {
            // What the resume did about lock files the kill left on the run's refs.
            for line in err
                .lines()
                .filter(|line| line.contains("lock on one of this run"))
            {
                eprintln!("fault-matrix: {}: {line}", phase.name());
            }
        }
        ensure!(
            resumed.status.code() == Some(0),
            "the resume exited {:?}: {}",
            resumed.status.code(),
            last_lines(&err)
        );
        resume_err = err;
    }
    let checked = outcome(&fixture, &base);
    if checked.is_err() && std::env::var_os("FAULT_MATRIX_SHOW").is_some() {
        eprintln!(
            "{stopped_err}\n--- the resume ---\n{resume_err}\n--- lock files in .git ---\n{}",
            lock_files(&fixture.repo.join(".git")).join("\n")
        );
    }
    checked?;
    Ok(if stop.signalled {
        Passed::Stopped
    } else {
        Passed::Early
    })
}

/// How the first grove ended.
struct Stop {
    /// Whether the signal was sent (else grove ended first).
    signalled: bool,
    code: Option<i32>,
    stderr: String,
}

/// Starts `grove run`, sends `signal` once `phase` is reached, and waits for the end.
async fn stopped(
    grove: &Path,
    fixture: &GitFixture,
    server: &FakeServer,
    phase: Phase,
    signal: Signal,
    held: &AtomicUsize,
) -> anyhow::Result<Stop> {
    let mut child = grove_command(grove, fixture, server, &["run", "rename greet"]).spawn()?;
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = child.stderr.take().context("grove's stderr")?;
    let reading = tokio::spawn({
        let lines = Arc::clone(&lines);
        async move {
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().map(|mut l| l.push(line)).ok();
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let reached = {
            let lines = lines.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            phase.reached(&lines, held.load(Ordering::SeqCst))
        };
        if reached {
            break;
        }
        if let Some(status) = child.try_wait()? {
            // Ended before the phase: a race the apply and merge phases can lose.
            reading.await.ok();
            let text = lines.lock().map(|l| l.join("\n")).unwrap_or_default();
            if std::env::var_os("FAULT_MATRIX_SHOW").is_some() {
                eprintln!("{text}");
            }
            return Ok(Stop {
                signalled: false,
                code: status.code(),
                stderr: text,
            });
        }
        ensure!(
            Instant::now() < deadline,
            "never reached {}: {}",
            phase.name(),
            last_lines(&lines.lock().map(|l| l.join("\n")).unwrap_or_default())
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let pid = child.id().context("grove's pid")?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid)?), signal)?;
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .context("grove did not stop within 60 s of the signal")??;
    reading.await.ok();
    let text = lines.lock().map(|l| l.join("\n")).unwrap_or_default();
    Ok(Stop {
        signalled: true,
        code: status.code(),
        stderr: text,
    })
}

/// The right result applied exactly once, and nothing of the run left.
fn outcome(fixture: &GitFixture, base: &str) -> anyhow::Result<()> {
    let files: Vec<Vec<u8>> = ["pkg/core.py", "pkg/a.py", "pkg/b.py"]
        .iter()
        .map(|path| std::fs::read(fixture.repo.join(path)).unwrap_or_default())
        .collect();
    ensure!(
        files
            == [CORE_RENAMED, A_RENAMED, B_RENAMED]
                .map(|text| text.as_bytes().to_vec())
                .to_vec(),
        "the user's work tree does not hold the renamed package"
    );
    let log = fixture.git(&["log", "--format=%s", &format!("{base}..main")]);
    let commits = log.lines().count();
    ensure!(
        commits == 4,
        "the branch gained {commits} commits, not 4 (three pieces and the fix): {log}"
    );
    let cache = fixture.home().join(".cache").join("grove");
    let left = (
        fixture.leftovers(),
        settled(|| running_under(&cache)),
        mounts_under(&cache),
    );
    ensure!(
        left == (Leftovers::default(), Vec::new(), Vec::new()),
        "left behind (registrations and folders, processes, mounts): {left:?}"
    );
    Ok(())
}

/// Every `*.lock` file under `dir`, by path: what a killed process may have left.
fn lock_files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(lock_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "lock") {
            found.push(path.display().to_string());
        }
    }
    found
}

/// The last few lines of grove's stderr, for a failure's reason.
fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" | ")
}
