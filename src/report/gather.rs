//! Gathering a report's data from a run: its journal, its agents' saved timing and
//! ledgers, its lock, and git for each subtask's diff.
//!
//! This file owns where each fact of the report comes from. It only reads: it never
//! writes to the run directory or the repository, so it is safe while the run goes on.
//! A missing or unreadable piece (a transcript, an archived commit) becomes a note in
//! the report, never a failure of the whole report.

use std::path::Path;

use crate::git::{CommitId, GitError, Repo};
use crate::ledger::Ledger;
use crate::settings::options::ModelNames;
use crate::store::journal::{
    self, CheckStatus, Entry, JournalError, ON_BASE, ON_RESULT, Record, RunOutcome, SubtaskId,
    SubtaskKind, VerdictKind,
};
use crate::store::lock::{self, Liveness};
use crate::store::state::{LEAD_SUBTASK, RunState, RunStatus, SubtaskState, SubtaskStatus};
use crate::store::transcript::{self, AgentEnd, AgentTiming};
use crate::store::{JOURNAL_FILE, RunId, RunStore, StoreError};

use super::diff::side_by_side;
use super::{
    AgentCost, Chain, CheckSpan, DiffView, Lane, Marker, MarkerKind, PriceTable, ReportData,
    RunEvent, SubtaskSection, Timeline,
};

/// A subtask's patch is cut at this many bytes (the cut is said in the report).
const MAX_PATCH_BYTES: usize = 1_000_000;
/// At most this many side-by-side rows per file (the rest are counted, not shown).
const MAX_ROWS_PER_FILE: usize = 400;

/// Why no report could be made. None is retried.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run id is malformed or names no run, or its journal does not replay.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The journal could not be read a second time for its timestamps.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Gathers the report of run `run_id` of `repo`, costed with `prices`. Works for runs
/// in any state: finished, failed, paused, interrupted, or running right now.
pub async fn gather(
    repo: &Repo,
    run_id: &str,
    prices: PriceTable,
) -> Result<ReportData, ReportError> {
    let id: RunId = run_id.parse()?;
    let store = RunStore::new(repo.common_dir());
    let mut state = store.read_state(&id)?;
    let run_dir = store.run_dir(&id);
    let records = journal::read_journal(&run_dir.join(JOURNAL_FILE))?.records;
    let mut notes = Vec::new();
    // Journaled in the order they got going; shown in the order the lead delegated them.
    state.subtasks.sort_by_key(|subtask| subtask.id);

    if state.status == RunStatus::Running {
        match lock::read_holder(repo.common_dir()) {
            Ok(holder) => {
                let live = holder
                    .is_some_and(|h| h.run_id == id.as_str() && h.liveness() != Liveness::Dead);
                if !live {
                    state.status = RunStatus::Interrupted;
                }
            }
            Err(error) => notes.push(format!("cannot tell whether the run is live: {error}")),
        }
    }

    let mut agents = AgentFiles::read(&run_dir, &state, &mut notes);
    // A resume always runs the lead again, so an end it saved before is not its end.
    let last_resume = records
        .iter()
        .filter(|record| matches!(record.entry, Entry::Resumed { .. }))
        .map(|record| record.ts_ms)
        .max();
    if let (Some(end), Some(resumed)) = (agents.lead.end, last_resume)
        && end.ended_ms < resumed
    {
        agents.lead.end = None;
    }
    let timeline = timeline(&state, &records, &agents);
    let costs = costs(&state, &agents);
    let archives = archive_refs(repo, &id, &mut notes);
    let mut subtasks = Vec::new();
    for subtask in &state.subtasks {
        subtasks.push(section(repo, &state, subtask, &archives).await);
    }
    Ok(ReportData {
        run_id: state.run_id.to_string(),
        task: state.task.clone(),
        status: state.status,
        base: state.base.to_string(),
        branch: state.branch.clone(),
        provider: state.provider.clone(),
        result_commit: state.result_commit.map(|commit| commit.to_string()),
        applied: state.applied,
        applied_history: applied_history(repo, &id, &state),
        pause_reason: state.pause_reason.clone(),
        error: state.error.clone(),
        timeline,
        subtasks,
        checks: state.checks.clone(),
        culprit: state.culprit.clone(),
        agents: costs,
        prices,
        attempt_groups: state.attempts.clone(),
        notes,
    })
}

/// What one agent saved of itself: its transcript's timing and ledger, and its end.
#[derive(Debug, Clone, Default)]
struct AgentFile {
    /// Whether a transcript or end file exists at all.
    found: bool,
    timing: AgentTiming,
    /// The ledger as of the last saved turn.
    saved_ledger: Ledger,
    end: Option<AgentEnd>,
}

impl AgentFile {
    fn read(run_dir: &Path, label: &str, role: &str, notes: &mut Vec<String>) -> AgentFile {
        let path = transcript::transcript_path(run_dir, label, role);
        let mut file = AgentFile::default();
        match transcript::load(&path) {
            Ok(Some(saved)) => {
                file.found = true;
                file.timing = saved.timing;
                file.saved_ledger = saved.ledger;
            }
            Ok(None) => {}
            Err(error) => notes.push(error.to_string()),
        }
        match transcript::load_end(&transcript::end_path(&path)) {
            Ok(end) => {
                file.found |= end.is_some();
                // An end older than a turn belongs to an earlier run of the agent that
                // a resume continued.
                file.end = end.filter(|end| {
                    file.timing
                        .turn_ms
                        .last()
                        .is_none_or(|last| *last <= end.ended_ms)
                });
            }
            Err(error) => notes.push(error.to_string()),
        }
        file
    }

    /// The agent's whole ledger if it ended, else the last saved one.
    fn ledger(&self) -> (Ledger, bool) {
        match &self.end {
            Some(end) => (end.ledger, true),
            None => (self.saved_ledger, false),
        }
    }
}

/// The saved files of every agent of the run.
struct AgentFiles {
    lead: AgentFile,
    /// Per subtask, in the state's order: (worker, reviewer).
    subtasks: Vec<(AgentFile, AgentFile)>,
    /// The judge of each group of attempts that had one, by the group's label.
    judges: Vec<(String, AgentFile)>,
    models: ModelNames,
}

impl AgentFiles {
    fn read(run_dir: &Path, state: &RunState, notes: &mut Vec<String>) -> AgentFiles {
        let subtasks = state
            .subtasks
            .iter()
            .map(|s| {
                (
                    AgentFile::read(run_dir, &s.id.to_string(), &s.agent, notes),
                    AgentFile::read(run_dir, &s.id.to_string(), "reviewer", notes),
                )
            })
            .collect();
        let mut models: ModelNames = state
            .options
            .get()
            .map(|options| options.model_names.clone())
            .unwrap_or_default();
        for name in [&mut models.lead, &mut models.worker, &mut models.reviewer] {
            if name.is_empty() {
                name.clone_from(&state.model);
            }
        }
        // Only a judge writes a group's `picked` record: one without it had none.
        let judges = state
            .attempts
            .iter()
            .filter(|group| group.pick.is_some())
            .map(|group| {
                let label = group.group.to_string();
                let file = AgentFile::read(run_dir, &label, "judge", notes);
                (label, file)
            })
            .collect();
        AgentFiles {
            lead: AgentFile::read(run_dir, LEAD_SUBTASK, "lead", notes),
            subtasks,
            judges,
            models,
        }
    }
}

/// The timestamps the journal holds for one subtask.
#[derive(Default)]
struct SubtaskTimes {
    verdict: Option<(u64, VerdictKind)>,
    merged: Option<u64>,
    conflict: Option<u64>,
}

fn subtask_times(records: &[Record], id: SubtaskId) -> SubtaskTimes {
    let mut times = SubtaskTimes::default();
    for record in records {
        match &record.entry {
            Entry::Verdict {
                subtask, verdict, ..
            } if *subtask == id => times.verdict = Some((record.ts_ms, *verdict)),
            Entry::Merged { subtask, .. } if *subtask == id => times.merged = Some(record.ts_ms),
            Entry::Conflict { subtask, .. } if *subtask == id => {
                times.conflict = Some(record.ts_ms);
            }
            _ => {}
        }
    }
    times
}

/// The squashed history the user's branch got, when it got one (`history = "squash"`):
/// its tip and its number of commits. A person who compares the report with `git log`
/// finds that commit there, not the result's.
fn applied_history(repo: &Repo, id: &RunId, state: &RunState) -> Option<(String, usize)> {
    if !state.applied {
        return None;
    }
    let chain = repo
        .first_parent_chain(&id.squashed_ref(), state.base)
        .ok()?;
    let tip = repo.ref_target(&id.squashed_ref()).ok()??;
    Some((tip.to_string(), chain.len()))
}

/// Every run of the project's check over time: journaled when it ended, with how long it
/// took.
fn check_spans(records: &[Record]) -> Vec<CheckSpan> {
    records
        .iter()
        .filter_map(|record| match &record.entry {
            Entry::Checked { run } => {
                // Whole milliseconds are all a timeline can draw.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let took = (run.seconds.max(0.0) * 1000.0) as u64;
                Some(CheckSpan {
                    on: run.on.clone(),
                    started_ms: record.ts_ms.saturating_sub(took),
                    ended_ms: record.ts_ms,
                    passed: run.status == CheckStatus::Passed,
                })
            }
            _ => None,
        })
        .collect()
}

/// What a subtask (waiting for `waits_for`) waited for between its delegation (`queued`) and its worker's start:
/// the subtasks it names or overlaps, else the check on the base when that ended in
/// between (no worker starts before it), else a `--jobs` slot.
fn waited_for(waits_for: &[SubtaskId], queued: u64, started: u64, checks: &[CheckSpan]) -> String {
    if !waits_for.is_empty() {
        let labels: Vec<String> = waits_for.iter().map(ToString::to_string).collect();
        return labels.join(", ");
    }
    let base_ended_between = checks
        .iter()
        .any(|check| check.on == ON_BASE && check.ended_ms > queued && check.ended_ms <= started);
    if base_ended_between {
        "the check on the base".to_owned()
    } else {
        "a slot".to_owned()
    }
}

fn timeline(state: &RunState, records: &[Record], agents: &AgentFiles) -> Timeline {
    let lead = &agents.lead;
    let checks = check_spans(records);
    let mut lanes = vec![Lane {
        role: "lead".to_owned(),
        label: LEAD_SUBTASK.to_owned(),
        subtask: None,
        queued_ms: None,
        waited_for: String::new(),
        started_ms: lead.timing.started_ms.unwrap_or(state.started_ms),
        ended_ms: lead.end.map(|end| end.ended_ms).or(state.finished_ms),
        turn_ms: lead.timing.turn_ms.clone(),
        turns: lead.ledger().0.steps,
        markers: Vec::new(),
        // The run's own checks (the base's, the result's, the culprit search's) happen
        // while the lead plans or waits: drawn on its lane.
        checks: checks
            .iter()
            .filter(|check| check.on == ON_BASE || check.on.starts_with(ON_RESULT))
            .cloned()
            .collect(),
    }];
    for (subtask, (worker, reviewer)) in state.subtasks.iter().zip(&agents.subtasks) {
        subtask_lanes(&mut lanes, subtask, records, &checks, (worker, reviewer));
    }
    let events = run_events(records);
    let start_ms = state.started_ms;
    let end_ms = lanes
        .iter()
        .flat_map(|lane| {
            let markers = lane.markers.iter().map(|m| m.ts_ms);
            [Some(lane.started_ms), lane.ended_ms]
                .into_iter()
                .flatten()
                .chain(lane.turn_ms.iter().copied())
                .chain(markers)
        })
        .chain(events.iter().map(|e| e.ts_ms))
        .chain([state.updated_ms])
        .max()
        .unwrap_or(start_ms)
        .max(start_ms);
    Timeline {
        start_ms,
        end_ms,
        lanes,
        events,
    }
}

/// A subtask's worker lane and, when it was reviewed, its reviewer lane.
fn subtask_lanes(
    lanes: &mut Vec<Lane>,
    subtask: &SubtaskState,
    records: &[Record],
    checks: &[CheckSpan],
    (worker, reviewer): (&AgentFile, &AgentFile),
) {
    let times = subtask_times(records, subtask.id);
    let failed_at = (subtask.status == SubtaskStatus::Failed)
        .then_some(subtask.finished_ms)
        .flatten();
    let has_review = reviewer.found || times.verdict.is_some();
    let worker_end = worker
        .end
        .map(|end| end.ended_ms)
        .or(reviewer.timing.started_ms)
        .or(times.verdict.map(|(ts, _)| ts))
        .or(subtask.finished_ms);
    let mut worker_markers = Vec::new();
    if let (Some(ts_ms), false) = (failed_at, has_review) {
        worker_markers.push(Marker {
            ts_ms,
            kind: MarkerKind::Failed,
        });
    }
    let started_ms = worker.timing.started_ms.unwrap_or(subtask.started_ms);
    let label = subtask.id.to_string();
    lanes.push(Lane {
        role: working_role(subtask),
        label: label.clone(),
        subtask: Some(label.clone()),
        queued_ms: Some(subtask.started_ms),
        waited_for: waited_for(&subtask.waits_for, subtask.started_ms, started_ms, checks),
        started_ms,
        ended_ms: worker_end,
        turn_ms: worker.timing.turn_ms.clone(),
        turns: worker.ledger().0.steps,
        markers: worker_markers,
        checks: checks
            .iter()
            .filter(|check| check.on == label)
            .cloned()
            .collect(),
    });
    if !has_review {
        return;
    }
    let mut markers = Vec::new();
    if let Some((ts_ms, verdict)) = times.verdict {
        let kind = match verdict {
            VerdictKind::Approve => MarkerKind::Approved,
            VerdictKind::Reject => MarkerKind::Rejected,
        };
        markers.push(Marker { ts_ms, kind });
    }
    for (ts, kind) in [
        (times.merged, MarkerKind::Merged),
        (times.conflict, MarkerKind::Conflict),
        (failed_at, MarkerKind::Failed),
    ] {
        if let Some(ts_ms) = ts {
            markers.push(Marker { ts_ms, kind });
        }
    }
    let verdict_ms = times.verdict.map(|(ts, _)| ts);
    lanes.push(Lane {
        role: "reviewer".to_owned(),
        label: subtask.id.to_string(),
        subtask: Some(subtask.id.to_string()),
        queued_ms: None,
        waited_for: String::new(),
        started_ms: reviewer
            .timing
            .started_ms
            .or(verdict_ms)
            .unwrap_or(subtask.started_ms),
        ended_ms: reviewer
            .end
            .map(|end| end.ended_ms)
            .or(verdict_ms)
            .or(subtask.finished_ms),
        turn_ms: reviewer.timing.turn_ms.clone(),
        turns: reviewer.ledger().0.steps,
        markers,
        checks: Vec::new(),
    });
}

/// The run's own events: pauses, resumes, the end.
fn run_events(records: &[Record]) -> Vec<RunEvent> {
    let mut events = Vec::new();
    for record in records {
        let label = match &record.entry {
            Entry::Paused { reason } => format!("paused: {reason}"),
            Entry::Resumed { .. } => "resumed".to_owned(),
            Entry::RunFinished {
                status: RunOutcome::Failed,
                error,
                ..
            } => match error {
                Some(error) => format!("failed: {error}"),
                None => "failed".to_owned(),
            },
            Entry::RunFinished { .. } => "finished".to_owned(),
            _ => continue,
        };
        events.push(RunEvent {
            ts_ms: record.ts_ms,
            label,
        });
    }
    events
}

/// What the agent that did a subtask's work is shown as: `fixer` of a red result,
/// `resolver` of a conflict, else its role (`worker`, or a custom agent's name).
fn working_role(subtask: &SubtaskState) -> String {
    match subtask.kind {
        SubtaskKind::Fix => "fixer".to_owned(),
        SubtaskKind::Resolve => "resolver".to_owned(),
        SubtaskKind::Task => subtask.agent.clone(),
    }
}

fn costs(state: &RunState, agents: &AgentFiles) -> Vec<AgentCost> {
    let row = |role: &str, label: &str, file: &AgentFile, default_model: &str| {
        let (ledger, complete) = file.ledger();
        AgentCost {
            role: role.to_owned(),
            label: label.to_owned(),
            model: file
                .timing
                .model
                .clone()
                .unwrap_or_else(|| default_model.to_owned()),
            ledger,
            complete,
        }
    };
    let mut rows = vec![row("lead", LEAD_SUBTASK, &agents.lead, &agents.models.lead)];
    for (subtask, (worker, reviewer)) in state.subtasks.iter().zip(&agents.subtasks) {
        let mut worker_row = row(
            &working_role(subtask),
            &subtask.id.to_string(),
            worker,
            &agents.models.worker,
        );
        let reviewer_row = row(
            "reviewer",
            &subtask.id.to_string(),
            reviewer,
            &agents.models.reviewer,
        );
        // A finished subtask journaled its agents' exact total; files from before end
        // files existed make up the worker's share from it.
        if subtask.status != SubtaskStatus::Running && !(worker_row.complete) {
            let mut exact = subtask.ledger;
            subtract(&mut exact, &reviewer_row.ledger);
            if reviewer_row.complete || !reviewer.found {
                worker_row.ledger = exact;
                worker_row.complete = true;
            }
        }
        rows.push(worker_row);
        if reviewer.found {
            rows.push(reviewer_row);
        }
    }
    for (label, judge) in &agents.judges {
        rows.push(row("judge", label, judge, &agents.models.reviewer));
    }
    rows
}

fn subtract(ledger: &mut Ledger, other: &Ledger) {
    ledger.steps = ledger.steps.saturating_sub(other.steps);
    ledger.input_tokens = ledger.input_tokens.saturating_sub(other.input_tokens);
    ledger.output_tokens = ledger.output_tokens.saturating_sub(other.output_tokens);
    ledger.cache_read_tokens = ledger
        .cache_read_tokens
        .saturating_sub(other.cache_read_tokens);
    ledger.cache_write_tokens = ledger
        .cache_write_tokens
        .saturating_sub(other.cache_write_tokens);
}

/// The run's archive refs with their commits, e.g. `refs/grove/archive/<run>/2-2`.
fn archive_refs(repo: &Repo, id: &RunId, notes: &mut Vec<String>) -> Vec<(String, CommitId)> {
    match repo.refs_under(&id.archive_prefix()) {
        Ok(refs) => refs
            .into_iter()
            .filter(|(name, _)| name.starts_with(&id.archive_prefix()))
            .collect(),
        Err(error) => {
            notes.push(format!("cannot list the run's archived work: {error}"));
            Vec::new()
        }
    }
}

/// The newest archive of subtask `n`: `<prefix><n>`, or `<prefix><n>-<k>` with the
/// highest `k` (a later archive of different work).
fn newest_archive<'a>(
    archives: &'a [(String, CommitId)],
    run_id: &str,
    n: &str,
) -> Option<&'a (String, CommitId)> {
    let prefix = format!("refs/grove/archive/{run_id}/{n}");
    archives
        .iter()
        .filter_map(|entry| {
            let rest = entry.0.strip_prefix(&prefix)?;
            let generation = match rest.strip_prefix('-') {
                None if rest.is_empty() => 1,
                Some(k) => k.parse::<u32>().ok()?,
                None => return None,
            };
            Some((generation, entry))
        })
        .max_by_key(|(generation, _)| *generation)
        .map(|(_, entry)| entry)
}

async fn section(
    repo: &Repo,
    state: &RunState,
    subtask: &SubtaskState,
    archives: &[(String, CommitId)],
) -> SubtaskSection {
    let number = subtask.id.number().to_string();
    let archive = newest_archive(archives, state.run_id.as_str(), &number);
    let diff = match head_of(repo, subtask, archive) {
        // One that waited for others started from the result then: its own diff is
        // against that start.
        Ok(Some((head, source))) => {
            let start = subtask.start.unwrap_or(state.base);
            diff_view(repo, start, head, source).await
        }
        Ok(None) => DiffView::Unavailable {
            reason: "the worker committed nothing".to_owned(),
        },
        Err(error) => DiffView::Unavailable {
            reason: error.to_string(),
        },
    };
    SubtaskSection {
        id: subtask.id.to_string(),
        kind: subtask.kind,
        task: subtask.task.clone(),
        branch: subtask.branch.clone(),
        agent: subtask.agent.clone(),
        status: subtask.status,
        verdict: subtask.verdict.clone(),
        conflict_paths: subtask.conflict_paths.clone(),
        paths: subtask.paths.clone(),
        waits_for: subtask.waits_for.iter().map(ToString::to_string).collect(),
        chain: Chain {
            replaces: subtask.replaces.map(|id| id.to_string()),
            started_from_it: subtask.start_from.is_some(),
            superseded_by: state.superseded_by(subtask.id).map(|id| id.to_string()),
        },
        waiting: subtask.status == SubtaskStatus::Running
            && subtask.start.is_none()
            && !subtask.waits_for.is_empty()
            && !state.is_finished(),
        archive_ref: archive.map(|(name, _)| name.clone()),
        check: subtask.check.clone(),
        attempt: crate::store::attempt_status::attempt_of(state, subtask.id),
        diff,
    }
}

/// The commit whose diff shows the subtask's work, and what it is: the merged commit,
/// else its newest archive, else its branch tip, else its last checkpoint.
fn head_of(
    repo: &Repo,
    subtask: &SubtaskState,
    archive: Option<&(String, CommitId)>,
) -> Result<Option<(CommitId, String)>, GitError> {
    if let Some(merge) = &subtask.merge {
        return Ok(Some((merge.commit, "merged commit".into())));
    }
    if let Some((name, commit)) = archive {
        return Ok(Some((*commit, format!("archived work {name}"))));
    }
    let branch = format!("refs/heads/{}", subtask.branch);
    if let Some(tip) = repo.ref_target(&branch)? {
        return Ok(Some((tip, format!("branch {}", subtask.branch))));
    }
    match &subtask.last_checkpoint {
        Some(checkpoint) => Ok(Some((
            checkpoint.commit,
            format!("checkpoint after turn {}", checkpoint.turn),
        ))),
        None => Ok(None),
    }
}

async fn diff_view(repo: &Repo, base: CommitId, head: CommitId, source: String) -> DiffView {
    match repo.diff(base, head, MAX_PATCH_BYTES).await {
        Ok(diff) => DiffView::Shown {
            base: diff.base.to_string(),
            head: diff.head.to_string(),
            source,
            summary: diff.stat.summary(),
            files: side_by_side(&diff.stat, &diff.patch, MAX_ROWS_PER_FILE),
        },
        Err(error) => DiffView::Unavailable {
            reason: format!("cannot diff {source} ({head}) against the base: {error}"),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_archive_of_a_subtask_wins_and_other_subtasks_do_not_match() {
        let commit = CommitId::parse("0123456789012345678901234567890123456789").unwrap();
        let archives: Vec<(String, CommitId)> = [
            "refs/grove/archive/R/1",
            "refs/grove/archive/R/12",
            "refs/grove/archive/R/2",
            "refs/grove/archive/R/2-3",
            "refs/grove/archive/R/2-10",
        ]
        .into_iter()
        .map(|name| (name.to_owned(), commit))
        .collect();
        let name = |n| newest_archive(&archives, "R", n).map(|(name, _)| name.as_str());
        assert_eq!(name("1"), Some("refs/grove/archive/R/1"), "S12 is not S1");
        assert_eq!(name("2"), Some("refs/grove/archive/R/2-10"));
        assert_eq!(name("3"), None);
    }

    #[test]
    fn a_check_spans_its_seconds_up_to_its_record_and_a_wait_is_named_by_its_cause() {
        let checked = |ts_ms, on: &str, seconds, status| Record {
            ts_ms,
            entry: Entry::Checked {
                run: journal::CheckRun {
                    on: on.into(),
                    status,
                    seconds,
                    ended: "exited with status 0".into(),
                    output_tail: String::new(),
                    opened: Vec::new(),
                    tree: None,
                    same_as: None,
                    ratchets: Vec::new(),
                },
            },
        };
        let records = [
            checked(5_000, ON_BASE, 4.0, CheckStatus::Passed),
            checked(9_500, "S1", 1.5, CheckStatus::Failed),
        ];
        let checks = check_spans(&records);
        let span = |on: &str, started_ms, ended_ms, passed| CheckSpan {
            on: on.into(),
            started_ms,
            ended_ms,
            passed,
        };
        assert_eq!(
            checks,
            vec![
                span(ON_BASE, 1_000, 5_000, true),
                span("S1", 8_000, 9_500, false)
            ],
            "a check is journaled when it ends: it started its seconds before"
        );
        assert_eq!(
            [
                waited_for(&[], 900, 5_100, &checks),
                waited_for(&[], 6_000, 7_000, &checks),
                waited_for(&[SubtaskId(1), SubtaskId(2)], 900, 5_100, &checks),
            ],
            [
                "the check on the base".to_owned(),
                "a slot".to_owned(),
                "S1, S2".to_owned()
            ],
            "delegated before the base's check ended and started after it: waiting for \
             it, not for a slot; delegated later: a slot; `after` or `paths`: the subtasks"
        );
    }
}
