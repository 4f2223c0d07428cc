//! The project's check (`[check] command`): one run of it on a tree, as evidence.
//!
//! This file owns how the check runs — sandboxed like a worker's `bash`, with the
//! network only when `[check] network` allows it, bounded in time and output — and the
//! record of each run (an event for the person, a `checked` journal record for the
//! report and a resume). It decides nothing: what a red check means is the caller's
//! (the reviewer weighs a subtask's, the run's end acts on the result's). It must never
//! run the check unconfined while the sandbox is on.
//!
//! The folder holds everything the check decides in a run: [`base`] proves it on the
//! base while the lead plans, and [`gate`] holds the workers until it did;
//! [`diagnosis`] names a red check's likely cause; [`tree`] checks a commit in a tree of
//! its own; [`result`] checks the merged result, [`culprit`] finds which subtasks broke
//! it, and [`fixer`] starts the subtask that fixes it; [`ratchet`] runs the
//! `[[check.ratchet]]`s after the command, each tree's findings compared with the base's.

pub(crate) mod base;
pub(crate) mod culprit;
pub(crate) mod diagnosis;
pub(crate) mod digest;
mod failing_location;
pub(crate) mod fixer;
pub(crate) mod gate;
pub(crate) mod ratchet;
pub(crate) mod result;
pub(crate) mod tree;
mod watch;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::event::Event;
use crate::run::check::ratchet::RatchetSite;
use crate::run::check::watch::OpenWatch;
use crate::run::context::{RunRecord, TreeStage};

use crate::settings::options::CheckOptions;
use crate::store::StoreError;
use crate::store::findings::RatchetTally;
use crate::store::journal::{CheckRun, CheckStatus, Entry, ON_BASE, ON_RESULT, ON_RESULT_WITHOUT};
use crate::text::output_tail;
use crate::tools::tree::{TreeAccess, in_tree};
use crate::tools::{ExecError, ExecOutcome, ExecRequest, OutputCap, SetupPolicy};

/// How much of the check's output a record keeps: its end, where the failures are.
pub(crate) const CHECK_OUTPUT_TAIL_CHARS: usize = 4_000;
/// How much of the check's output grove keeps in all, start and end, for the
/// reviewer's `check_output`: a long test log whole, a runaway one bounded.
const CHECK_OUTPUT_HEAD_BYTES: usize = 64 * 1024;
const CHECK_OUTPUT_END_BYTES: usize = 192 * 1024;

/// Where the whole output of the check on `on` (`S2`, `result`, …) is kept in the run's
/// folder: one file per check, named by what it checked.
pub(crate) fn output_path(run_dir: &Path, on: &str) -> std::path::PathBuf {
    let name: String = on
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    run_dir.join("checks").join(format!("{name}.log"))
}

/// Why the check produced no verdict on a tree.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The command could not be started at all (no shell, the sandbox refused). Not
    /// retried: it would fail the same way on every tree.
    #[error("the check `{command}` could not run: {source}")]
    NotRun {
        command: String,
        #[source]
        source: ExecError,
    },
    /// The run was interrupted while the check ran; it is run again on resume.
    #[error("interrupted while the check ran")]
    Interrupted,
    /// The check's record cannot be journaled. Not retried.
    #[error("run journal: {0}")]
    Journal(#[from] StoreError),
}

impl CheckError {
    /// The journal failing under this error, which ends the run (never a verdict on the
    /// tree); any other error back as it was.
    pub(crate) fn into_journal(self) -> Result<StoreError, Self> {
        match self {
            Self::Journal(source) => Ok(source),
            other => Err(other),
        }
    }
}

/// Runs `check` in `cwd` (a worktree of subtask `on`, or of the result when `on` is
/// [`ON_RESULT`](crate::store::journal::ON_RESULT)), journals and announces what it did.
#[cfg(test)]
pub(crate) async fn run_check(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    cwd: &Path,
    on: &str,
) -> Result<CheckRun, CheckError> {
    let site = CheckSite {
        cwd,
        on,
        tree: None,
        changed: &[],
        access: None,
    };
    run_check_at(stage, check, site).await
}

/// Where one check runs, and what its record says of the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckSite<'a> {
    /// The worktree it runs in.
    pub(crate) cwd: &'a Path,
    /// What it checks: `S2`, `result`, `result without S2`, `base`.
    pub(crate) on: &'a str,
    /// The id of the tree in `cwd`, when known (recorded, so that it is checked once).
    pub(crate) tree: Option<&'a str>,
    /// A subtask's changed paths (relative to `cwd`): those the check opens are noted in
    /// [`CheckRun::opened`].
    pub(crate) changed: &'a [String],
    /// The copy-on-write tree `cwd` is, when it is one: the check runs inside it.
    pub(crate) access: Option<&'a dyn TreeAccess>,
}

/// Runs `check` at `site`, journals and announces what it did.
pub(crate) async fn run_check_at(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    site: CheckSite<'_>,
) -> Result<CheckRun, CheckError> {
    let CheckSite {
        cwd,
        on,
        tree,
        changed,
        access,
    } = site;
    stage.record.events.emit(Event::CheckStarted {
        on: on.to_owned(),
        command: check.command.clone(),
    });
    let request = ExecRequest {
        command: check.command.clone(),
        cwd: cwd.to_path_buf(),
        timeout: Duration::from_secs(check.timeout_s),
        cancel: stage.record.cancel.child_token(),
        output_cap: OutputCap {
            head: CHECK_OUTPUT_HEAD_BYTES,
            tail: CHECK_OUTPUT_END_BYTES,
        },
    };
    let policy = SetupPolicy {
        allow_network: check.network,
        writable: Vec::new(),
    };
    let reach = access.map_or_else(|| cwd.to_path_buf(), TreeAccess::root_for_grove);
    let watch = OpenWatch::start(&reach, changed);
    let started = Instant::now();
    let not_run = |source| CheckError::NotRun {
        command: check.command.clone(),
        source,
    };
    let executor = in_tree(access, &stage.trees.executor.for_setup(&policy)).map_err(not_run)?;
    let result = executor.execute(request).await.map_err(not_run)?;
    let seconds = started.elapsed().as_secs_f64();
    let (status, ended) = match result.outcome {
        ExecOutcome::Cancelled => return Err(CheckError::Interrupted),
        ExecOutcome::Exited(0) => (CheckStatus::Passed, "exited with status 0".to_owned()),
        ExecOutcome::Exited(code) => (CheckStatus::Failed, format!("exited with status {code}")),
        ExecOutcome::Signalled(signal) => (
            CheckStatus::Failed,
            format!("was killed by signal {signal}"),
        ),
        ExecOutcome::TimedOut => (
            CheckStatus::Failed,
            format!("timed out after {} s", check.timeout_s),
        ),
    };
    let mut output = result.output_text();
    let ratchets = if check.ratchets.is_empty() || on == ON_BASE {
        Vec::new()
    } else {
        let site = RatchetSite {
            executor: &executor,
            cwd,
            reach: &reach,
        };
        ratchet::compare(stage, check, site)
            .await
            .map_err(|ratchet::Interrupted| CheckError::Interrupted)?
    };
    let (status, ended) = if ratchets.iter().any(RatchetTally::is_red) {
        (CheckStatus::Failed, ratchet::ended(&ended, &ratchets))
    } else {
        (status, ended)
    };
    let account = ratchet::account(&ratchets);
    // A green command's output says nothing the account does not: its tail is the
    // account alone (the whole output is kept in the file).
    let tail = if !ratchets.is_empty() && result.outcome == ExecOutcome::Exited(0) {
        output_tail(&account, CHECK_OUTPUT_TAIL_CHARS)
    } else {
        String::new()
    };
    if !account.is_empty() {
        output = format!("{}\n\n{account}", output.trim_end());
    }
    keep_output(stage, on, &output).await;
    let run = CheckRun {
        on: on.to_owned(),
        status,
        // Milliseconds are all a person reads; fewer digits keep the journal stable.
        seconds: (seconds * 1000.0).round() / 1000.0,
        ended,
        output_tail: if tail.is_empty() {
            output_tail(&output, CHECK_OUTPUT_TAIL_CHARS)
        } else {
            tail
        },
        opened: watch.map(OpenWatch::opened).unwrap_or_default(),
        tree: tree.map(str::to_owned),
        same_as: None,
        ratchets,
    };
    stage.record.journal(Entry::Checked { run: run.clone() })?;
    stage.record.events.emit(Event::CheckFinished {
        on: on.to_owned(),
        command: check.command.clone(),
        passed: run.status == CheckStatus::Passed,
        ended: run.ended.clone(),
        seconds: run.seconds,
    });
    Ok(run)
}

/// Keeps the whole output of the check on `on` in the run's folder: the reviewer reads
/// it through `check_output` (without the file, it reads the tail).
async fn keep_output(stage: TreeStage<'_>, on: &str, output: &str) {
    let path = output_path(&stage.facts.run_dir, on);
    let kept = match path.parent() {
        Some(dir) => tokio::fs::create_dir_all(dir).await,
        None => Ok(()),
    };
    if let Err(error) = match kept {
        Ok(()) => tokio::fs::write(&path, output).await,
        Err(error) => Err(error),
    } {
        stage.record.note(format!(
            "could not keep the check's output of {on} at {}: {error}",
            path.display()
        ));
    }
}

/// An earlier check of this run whose verdict holds for `tree` under `check` — the same
/// tree, command and environment — the one on `on` itself first. A subtask's check never had the network, so with
/// `[check] network` only the result's and the base's checks count.
pub(crate) fn checked_before(
    record: &RunRecord,
    check: &CheckOptions,
    tree: &str,
    on: &str,
) -> Option<CheckRun> {
    let runs: Vec<CheckRun> = record
        .journal
        .checks()
        .into_iter()
        .filter(|run| {
            run.tree.as_deref() == Some(tree)
                && (!check.network
                    || run.on == ON_BASE
                    || run.on == ON_RESULT
                    || run.on.starts_with(ON_RESULT_WITHOUT))
        })
        .collect();
    // The check on `on` itself, when there is one, is the record to keep.
    runs.iter()
        .find(|run| run.on == on)
        .or(runs.first())
        .cloned()
}

/// Journals and announces `earlier`'s verdict as the check on `on` of the same tree; an
/// earlier check on `on` itself (the result's, checked while the lead worked) is that
/// check, recorded once.
pub(crate) fn reuse(
    record: &RunRecord,
    earlier: &CheckRun,
    on: &str,
) -> Result<CheckRun, CheckError> {
    if earlier.on == on {
        return Ok(earlier.clone());
    }
    let run = CheckRun {
        on: on.to_owned(),
        seconds: 0.0,
        opened: Vec::new(),
        same_as: Some(
            earlier
                .same_as
                .clone()
                .unwrap_or_else(|| earlier.on.clone()),
        ),
        ..earlier.clone()
    };
    record.journal(Entry::Checked { run: run.clone() })?;
    record.note(format!(
        "{on}: the very tree {} checked ({}): not checked again",
        run.same_as.as_deref().unwrap_or_default(),
        match run.status {
            CheckStatus::Passed => "it passed",
            CheckStatus::Failed => "it failed",
        }
    ));
    Ok(run)
}

/// The line of a failing check's output that names its failure, for a one-line account
/// (a fixer's commit): the last line that reads like an error (`AttributeError: …`,
/// `error[E0425]: …`, `thread '…' panicked at …`, `FAIL: test_x`, `not ok 3 …`), else
/// the last line; bounded, escapes stripped. `None` for an empty output.
pub(crate) fn failure_line(output: &str) -> Option<String> {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("[… earlier output cut]"))
        .collect();
    // A named error first (an exception, a compiler's coded error, a panic, a failed
    // test), then any `error:` line (`error: could not compile` says least).
    let named = |line: &str| {
        let head = line.split(':').next().unwrap_or_default();
        (line.contains(':') && (head.ends_with("Error") || head.ends_with("Exception")))
            || line.starts_with("error[")
            || line.contains(" panicked at ")
            || line.starts_with("FAIL:")
            || line.starts_with("ERROR:")
            || line.starts_with("not ok ")
    };
    let line = lines
        .iter()
        .rev()
        .find(|line| named(line))
        .or_else(|| lines.iter().rev().find(|line| line.starts_with("error")))
        .or(lines.last())?;
    Some(crate::text::excerpt(&crate::text::strip_escapes(line), 200))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::test_support::TestRun;
    use crate::store::journal::ON_RESULT;

    #[tokio::test]
    async fn a_check_reports_its_status_and_output_tail_and_is_journaled() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        let green = CheckOptions::new("test -f a.txt && echo all good");
        let red = CheckOptions::new("echo first; echo 'FAILED: test_a' >&2; exit 4");

        let passed = run_check(run.ctx.tree_stage(), &green, worktree.path(), "S1")
            .await
            .unwrap();
        let failed = run_check(run.ctx.tree_stage(), &red, worktree.path(), ON_RESULT)
            .await
            .unwrap();

        assert_eq!(
            (passed.on.as_str(), passed.status, passed.ended.as_str()),
            ("S1", CheckStatus::Passed, "exited with status 0"),
            "a check that exits 0 passed"
        );
        assert_eq!(passed.output_tail, "all good");
        assert_eq!(
            CheckRun {
                seconds: 0.0,
                ..failed
            },
            CheckRun {
                on: "result".into(),
                status: CheckStatus::Failed,
                seconds: 0.0,
                ended: "exited with status 4".into(),
                output_tail: "first\nFAILED: test_a".into(),
                opened: Vec::new(),
                tree: None,
                same_as: None,
                ratchets: Vec::new(),
            },
            "a check that exits 4 failed, with its output"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "checked", "checked"]
        );
    }

    #[test]
    fn the_failure_line_is_the_error_the_output_names() {
        let python = "Traceback (most recent call last):\n  File \"pkg/b.py\", line 9\n\
                      NameError: name 'gret' is not defined\n\n---\nRan 3 tests\n\nFAILED (errors=1)\n";
        let rust =
            "error[E0425]: cannot find value `x`\n --> src/lib.rs:3:5\nerror: could not compile\n";
        assert_eq!(
            (
                failure_line(python),
                failure_line(rust),
                failure_line("just text\nthe end\n"),
                failure_line("\n"),
            ),
            (
                Some("NameError: name 'gret' is not defined".to_owned()),
                Some("error[E0425]: cannot find value `x`".to_owned()),
                Some("the end".to_owned()),
                None,
            )
        );
    }

    #[tokio::test]
    async fn a_check_past_its_time_limit_failed_and_says_so() {
        let run = TestRun::alpha().await;
        let worktree = run.worktree(1).await;
        let slow = CheckOptions {
            timeout_s: 1,
            ..CheckOptions::new("echo started; sleep 30")
        };

        let timed_out = run_check(run.ctx.tree_stage(), &slow, worktree.path(), "S1")
            .await
            .unwrap();

        assert_eq!(
            (timed_out.status, timed_out.ended.as_str()),
            (CheckStatus::Failed, "timed out after 1 s"),
            "a check that does not end in time is red"
        );
        assert!(timed_out.seconds < 10.0, "it was stopped at its limit");
    }
}
