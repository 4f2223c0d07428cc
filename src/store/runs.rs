//! The run store: run ids and run directories under `<common git dir>/grove/runs/`.
//!
//! This module owns the layout of a run directory (`journal.jsonl`, `state.json`), run
//! creation, reopening a run to resume it, and listing runs for `grove runs`. It must
//! never write to a run without holding the repository lock ([`RepoLock`]), and never
//! resolve git paths itself: callers pass the common git dir.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

use crate::settings::RunOptions;
use crate::store::durable::{self, DurableError};
use crate::store::journal::{self, Durability, Entry, Journal, JournalError, Record, TornTail};
use crate::store::lock::{self, Liveness, LockError, RepoLock};
use crate::store::snapshot::{self, SnapshotError};
use crate::store::state::{ReplayError, RunState, RunStatus};

/// The journal's file name inside a run directory.
pub const JOURNAL_FILE: &str = "journal.jsonl";
/// The snapshot's file name inside a run directory.
pub const SNAPSHOT_FILE: &str = "state.json";

use crate::git::CommitId;
pub use crate::git::RunId;

/// Parsing a run id a user typed (`grove resume ID`, `grove report ID`): the store
/// accepts only the ids it generates ([`RunId::generate`]).
impl FromStr for RunId {
    type Err = StoreError;

    /// Accepts exactly `8 digits - 6 digits - 4 lowercase hex digits`, which also keeps
    /// a user-supplied id from naming any path outside the runs directory.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bytes = text.as_bytes();
        let shape_ok = bytes.len() == 20
            && bytes.iter().enumerate().all(|(i, &b)| match i {
                8 | 15 => b == b'-',
                0..8 | 9..15 => b.is_ascii_digit(),
                _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            });
        let invalid = || StoreError::InvalidRunId {
            id: text.to_string(),
        };
        if !shape_ok {
            return Err(invalid());
        }
        // The shape is a subset of what the git layer accepts; this cannot fail.
        RunId::new(text).map_err(|_| invalid())
    }
}

/// Why a run could not be created, opened, written or listed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Not a run id. Not retried.
    #[error("`{id}` is not a grove run id (expected e.g. 20261129-215530-7f3a)")]
    InvalidRunId { id: String },
    /// No such run directory. Not retried.
    #[error("no grove run {run_id} (looked in {path})")]
    RunNotFound { run_id: RunId, path: PathBuf },
    /// A run with this id already exists. The caller picks a new id.
    #[error("grove run {run_id} already exists at {path}")]
    RunExists { run_id: RunId, path: PathBuf },
    /// The run finished; there is nothing to resume. Not retried.
    #[error("grove run {run_id} already {status}; there is nothing to resume")]
    AlreadyFinished { run_id: RunId, status: RunStatus },
    /// The journal in a run directory belongs to another run. Not retried.
    #[error("journal {path} belongs to run {found}, not to {run_id}")]
    ForeignJournal {
        run_id: RunId,
        found: RunId,
        path: PathBuf,
    },
    /// The journal's records do not add up to a run. Not retried.
    #[error("journal {path}: {source}")]
    Replay {
        path: PathBuf,
        #[source]
        source: Box<ReplayError>,
    },
    /// A record was refused before being journaled because it does not fit the run's
    /// state (a bug in the caller). The journal is unchanged. Not retried.
    #[error("grove run {run_id}: refused to journal a record: {source}")]
    RecordRejected {
        run_id: RunId,
        #[source]
        source: Box<ReplayError>,
    },
    /// A directory operation failed. Not retried.
    #[error("run store {path}: {operation}: {source}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error(transparent)]
    Lock(#[from] LockError),
}

impl StoreError {
    /// True when the disk (or the user's quota) was full under this error, wherever in
    /// the store it was met (the journal, the snapshot, a directory): the run pauses,
    /// resumable, never fails (see [`disk_full`](super::disk_full)).
    pub fn is_disk_full(&self) -> bool {
        super::disk_full::is_disk_full(self)
    }
}

/// What the user asked for, recorded as the journal's first record.
#[derive(Debug, Clone)]
pub struct RunStart {
    pub task: String,
    /// The commit the run starts from.
    pub base: CommitId,
    /// The user's branch.
    pub branch: String,
    pub provider: String,
    pub model: String,
    /// The options to journal: everything a resume needs to run the same.
    pub options: RunOptions,
}

/// The runs of one repository.
#[derive(Debug, Clone)]
pub struct RunStore {
    common_git_dir: PathBuf,
    runs_dir: PathBuf,
}

/// What reopening a run found and repaired.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// A torn last journal line that was cut off.
    pub torn_tail: Option<TornTail>,
    /// Whether `state.json` was missing, unreadable or behind the journal and was
    /// rewritten from it.
    pub snapshot_rebuilt: bool,
}

impl RunStore {
    /// The store of the repository whose common git dir is `common_git_dir`.
    pub fn new(common_git_dir: &Path) -> RunStore {
        RunStore {
            common_git_dir: common_git_dir.to_path_buf(),
            runs_dir: common_git_dir.join("grove").join("runs"),
        }
    }

    /// `<common git dir>/grove/runs`.
    pub fn runs_dir(&self) -> &Path {
        &self.runs_dir
    }

    /// The directory of run `run_id` (which may not exist).
    pub fn run_dir(&self, run_id: &RunId) -> PathBuf {
        self.runs_dir.join(run_id.as_str())
    }

    /// A fresh run id no existing run uses.
    pub fn new_run_id(&self) -> RunId {
        loop {
            let id = RunId::generate();
            if !self.run_dir(&id).exists() {
                return id;
            }
        }
    }

    /// Creates the directory of the run the lock was taken for, with a journal holding
    /// its `run_started` record and a first snapshot. The directory appears complete or
    /// not at all: it is assembled under a dot-name and renamed into place.
    pub fn create_run(&self, lock: &RepoLock, start: RunStart) -> Result<ActiveRun, StoreError> {
        let run_id: RunId = lock.run_id().parse()?;
        let final_dir = self.run_dir(&run_id);
        if final_dir.exists() {
            return Err(StoreError::RunExists {
                run_id,
                path: final_dir,
            });
        }
        let grove_dir = durable::parent_dir(&self.runs_dir).to_path_buf();
        std::fs::create_dir_all(&self.runs_dir)
            .map_err(io_error("create directory", &self.runs_dir))?;
        durable::sync_dir(&grove_dir)?;

        let staging = self.runs_dir.join(format!(".{run_id}.tmp"));
        if staging.exists() {
            // Left by a crash during an earlier creation of this very id.
            std::fs::remove_dir_all(&staging)
                .map_err(io_error("remove stale staging directory", &staging))?;
        }
        std::fs::create_dir(&staging).map_err(io_error("create directory", &staging))?;
        let first = Record::now(Entry::RunStarted {
            run_id: run_id.clone(),
            task: start.task,
            base: start.base,
            branch: start.branch,
            provider: start.provider,
            model: start.model,
            options: start.options.into(),
        });
        let state = RunState::start(&first).map_err(|source| StoreError::RecordRejected {
            run_id: run_id.clone(),
            source: Box::new(source),
        })?;
        Journal::create(&staging.join(JOURNAL_FILE))?.append(&first)?;
        snapshot::write_snapshot(&staging.join(SNAPSHOT_FILE), &state)?;
        std::fs::rename(&staging, &final_dir).map_err(io_error("rename into place", &final_dir))?;
        durable::sync_dir(&self.runs_dir)?;

        let (journal, _) = Journal::open(&final_dir.join(JOURNAL_FILE))?;
        Ok(ActiveRun {
            run_id,
            dir: final_dir,
            journal,
            state,
            recovery: Recovery::default(),
            snapshot_behind: false,
        })
    }

    /// Reopens the run the lock was taken for, to continue it: cuts a torn journal tail,
    /// replays the journal, and rewrites `state.json` if it is missing or stale.
    pub fn resume_run(&self, lock: &RepoLock) -> Result<ActiveRun, StoreError> {
        let run_id: RunId = lock.run_id().parse()?;
        let dir = self.existing_run_dir(&run_id)?;
        let journal_path = dir.join(JOURNAL_FILE);
        let (journal, contents) = Journal::open(&journal_path)?;
        let state = replay_checked(&run_id, &journal_path, &contents.records)?;
        if state.is_finished() {
            return Err(StoreError::AlreadyFinished {
                run_id,
                status: state.status,
            });
        }
        let snapshot_path = dir.join(SNAPSHOT_FILE);
        let snapshot_current = matches!(
            snapshot::read_snapshot(&snapshot_path),
            Ok(Some(snapshot)) if snapshot == state
        );
        if !snapshot_current {
            snapshot::write_snapshot(&snapshot_path, &state)?;
        }
        Ok(ActiveRun {
            run_id,
            dir,
            journal,
            state,
            recovery: Recovery {
                torn_tail: contents.torn_tail,
                snapshot_rebuilt: !snapshot_current,
            },
            snapshot_behind: false,
        })
    }

    /// The state of run `run_id` as its journal says, without writing anything (safe
    /// while another process runs it). The status is as journaled: `running` is not
    /// checked against the lock here; [`RunStore::list_runs`] does that.
    pub fn read_state(&self, run_id: &RunId) -> Result<RunState, StoreError> {
        let dir = self.existing_run_dir(run_id)?;
        let journal_path = dir.join(JOURNAL_FILE);
        let contents = journal::read_journal(&journal_path)?;
        replay_checked(run_id, &journal_path, &contents.records)
    }

    /// Every run, oldest first, with its status checked against the repository lock:
    /// a run journaled as running whose process no longer holds the lock is
    /// `interrupted`. A run whose journal cannot be read is listed as `unreadable` with
    /// the problem, not hidden and not fatal to the listing.
    pub fn list_runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        let entries = match std::fs::read_dir(&self.runs_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StoreError::Io {
                    operation: "list directory",
                    path: self.runs_dir.clone(),
                    source,
                });
            }
        };
        let mut run_ids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_error("list directory", &self.runs_dir))?;
            let is_dir = entry
                .file_type()
                .map_err(io_error("stat", &entry.path()))?
                .is_dir();
            // Staging directories (`.<id>.tmp`) and anything foreign are not runs.
            let parsed = entry.file_name().to_str().map(RunId::from_str);
            if let (true, Some(Ok(run_id))) = (is_dir, parsed) {
                run_ids.push(run_id);
            }
        }
        run_ids.sort();

        let holder = lock::read_holder(&self.common_git_dir)?;
        let live_run = holder
            .filter(|h| h.liveness() != Liveness::Dead)
            .map(|h| h.run_id);
        Ok(run_ids
            .into_iter()
            .map(|run_id| match self.read_state(&run_id) {
                Ok(state) => {
                    let is_live = live_run.as_deref() == Some(run_id.as_str());
                    RunSummary::from_state(run_id, state, is_live)
                }
                Err(problem) => RunSummary {
                    run_id,
                    status: RunStatus::Unreadable,
                    details: None,
                    problem: Some(problem.to_string()),
                },
            })
            .collect())
    }

    fn existing_run_dir(&self, run_id: &RunId) -> Result<PathBuf, StoreError> {
        let dir = self.run_dir(run_id);
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(StoreError::RunNotFound {
                run_id: run_id.clone(),
                path: dir,
            })
        }
    }
}

/// Folds the `records` of run `run_id`'s journal at `journal_path`, refusing a journal
/// that belongs to another run.
pub(crate) fn replay_checked(
    run_id: &RunId,
    journal_path: &Path,
    records: &[Record],
) -> Result<RunState, StoreError> {
    let state = RunState::replay(records).map_err(|source| StoreError::Replay {
        path: journal_path.to_path_buf(),
        source: Box::new(source),
    })?;
    if state.run_id != *run_id {
        return Err(StoreError::ForeignJournal {
            run_id: run_id.clone(),
            found: state.run_id,
            path: journal_path.to_path_buf(),
        });
    }
    Ok(state)
}

fn io_error(operation: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        operation,
        path,
        source,
    }
}

/// One line of `grove runs`: serialized as a flat JSON object with at least `run_id`
/// and `status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub run_id: RunId,
    pub status: RunStatus,
    /// Absent when the run is unreadable.
    #[serde(flatten)]
    pub details: Option<RunDetails>,
    /// Why the run is unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What a listing shows of a readable run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunDetails {
    pub task: String,
    pub base: CommitId,
    pub branch: String,
    pub started_ms: u64,
    pub updated_ms: u64,
    pub finished_ms: Option<u64>,
    pub result_commit: Option<CommitId>,
    pub applied: bool,
    pub subtasks: usize,
    pub pause_reason: Option<String>,
    pub error: Option<String>,
}

impl RunSummary {
    /// The status a listing shows: a run stopped by Ctrl-C is journaled as a pause whose
    /// reason starts with "interrupted", and `grove run --json` said `interrupted` for it;
    /// the listing says the same (a crashed run is `interrupted` too: both resume alike).
    pub fn shown_status(&self) -> RunStatus {
        let interrupted = self
            .details
            .as_ref()
            .and_then(|details| details.pause_reason.as_deref())
            .is_some_and(|reason| reason.starts_with("interrupted"));
        match self.status {
            RunStatus::Paused if interrupted => RunStatus::Interrupted,
            status => status,
        }
    }

    /// Summarizes `state`; `is_live` says whether a live process holds the lock for it.
    pub fn from_state(run_id: RunId, state: RunState, is_live: bool) -> RunSummary {
        let status = match state.status {
            RunStatus::Running if !is_live => RunStatus::Interrupted,
            status => status,
        };
        RunSummary {
            run_id,
            status,
            details: Some(RunDetails {
                subtasks: state.subtasks.len(),
                task: state.task,
                base: state.base,
                branch: state.branch,
                started_ms: state.started_ms,
                updated_ms: state.updated_ms,
                finished_ms: state.finished_ms,
                result_commit: state.result_commit,
                applied: state.applied,
                pause_reason: state.pause_reason,
                error: state.error,
            }),
            problem: None,
        }
    }
}

/// A run this process is writing: its journal, and its state kept in step.
#[derive(Debug)]
pub struct ActiveRun {
    run_id: RunId,
    dir: PathBuf,
    journal: Journal,
    state: RunState,
    recovery: Recovery,
    /// A milestone's snapshot was left to the next append (see
    /// [`ActiveRun::append_leaving_snapshot`]).
    snapshot_behind: bool,
}

/// When an append rewrites the snapshot (`state.json`) it put behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotWrite {
    /// As the append ends: no other append is waiting for the journal.
    Now,
    /// Left to the last append of a burst: another one waits for the journal and will
    /// write it (or leave it to the one after it).
    LeftToLast,
}

/// Whether an append fsyncs its record itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fsync {
    /// Synced at once when its kind needs it, under the run's lock.
    AsItsKindNeeds,
    /// Written only: the caller syncs it when the returned durability asks for it.
    LeftToCaller,
}

impl ActiveRun {
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state after every record journaled so far.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// What reopening the run repaired (nothing for a new run).
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Journals `entry` stamped with the current time; see [`ActiveRun::append_record`].
    pub fn append(&mut self, entry: Entry) -> Result<Record, StoreError> {
        let record = Record::now(entry);
        self.append_record(&record)?;
        Ok(record)
    }

    /// [`ActiveRun::append`], but with [`SnapshotWrite::LeftToLast`] (another append
    /// waits for this journal) the snapshot is left to the last of them: 32 subtasks
    /// starting at once each rewrote the whole state, one after another (measured: the
    /// last waited 50 ms). The snapshot is a cache of the journal; the journal has every
    /// record.
    pub fn append_leaving_snapshot(
        &mut self,
        entry: Entry,
        snapshot: SnapshotWrite,
    ) -> Result<(), StoreError> {
        self.append_checked(&Record::now(entry), snapshot, Fsync::AsItsKindNeeds)
            .map(drop)
    }

    /// [`ActiveRun::append_leaving_snapshot`] without the fsync: the record is written,
    /// and the durability it needs returned. The caller makes it durable before relying
    /// on it, with the [`ActiveRun::syncer`] (appends made meanwhile share that fsync).
    pub fn append_unsynced(
        &mut self,
        entry: Entry,
        snapshot: SnapshotWrite,
    ) -> Result<Durability, StoreError> {
        self.append_checked(&Record::now(entry), snapshot, Fsync::LeftToCaller)
    }

    /// A handle that fsyncs the journal from outside this run's lock.
    pub fn syncer(&self) -> Result<journal::JournalSyncer, StoreError> {
        Ok(self.journal.syncer()?)
    }

    /// Journals `record` (fsynced, but for the records named below) and folds it
    /// into the state. A record that does not fit the state is refused before anything is
    /// written. The snapshot is rewritten after
    /// records that change a subtask's or the run's standing; tool-call, checkpoint,
    /// verdict and merge records only reach it with the next such record (the journal
    /// has them already, and the subtask's `subtask_finished` follows soon).
    pub fn append_record(&mut self, record: &Record) -> Result<(), StoreError> {
        self.append_checked(record, SnapshotWrite::Now, Fsync::AsItsKindNeeds)
            .map(drop)
    }

    /// Appends `record`, synced as `fsync` says, and writes the snapshot as `snapshot`
    /// says; returns the durability the record needs.
    fn append_checked(
        &mut self,
        record: &Record,
        snapshot: SnapshotWrite,
        fsync: Fsync,
    ) -> Result<Durability, StoreError> {
        let mut next = self.state.clone();
        next.apply(record)
            .map_err(|source| StoreError::RecordRejected {
                run_id: self.run_id.clone(),
                source: Box::new(source),
            })?;
        // Losing these in a machine crash errs on the safe side: a finished call then
        // reads as interrupted (reported, never re-run), a read-only call that was running
        // is harmless either way, and a merge whose record is lost is found already merged
        // on resume (its `subtask_finished`, synced, follows at once). A verdict is only
        // read back once its subtask finished, and that synced record flushes it too: a
        // subtask still running on resume is worked and reviewed again whatever its
        // verdict. A `subtask_started` lost with the machine leaves a subtask that has
        // changed nothing yet: its first mutating call is synced before it runs, which
        // flushes this record too, so before that the lead is told no subtask was
        // recorded for its `delegate` call, and the worktree, if any, is reused when the
        // lead delegates again.
        // Every other record is synced at once.
        let durability = match &record.entry {
            Entry::ToolCallFinished { .. }
            | Entry::Merged { .. }
            | Entry::Verdict { .. }
            | Entry::SubtaskStarted { .. }
            | Entry::ToolCallStarted {
                mutating: false, ..
            } => Durability::Buffered,
            _ => Durability::Synced,
        };
        let written = match fsync {
            Fsync::AsItsKindNeeds => durability,
            Fsync::LeftToCaller => Durability::Buffered,
        };
        self.journal.append_with(record, written)?;
        self.state = next;
        // A verdict or a merge leaves its subtask running until its `subtask_finished`,
        // which follows soon and rewrites the snapshot: skipping it here keeps a
        // whole-state write off the path from the last review to the lead.
        let milestone = !matches!(
            record.entry,
            Entry::ToolCallStarted { .. }
                | Entry::ToolCallFinished { .. }
                | Entry::Checkpoint { .. }
                | Entry::Verdict { .. }
                | Entry::Merged { .. }
        );
        self.snapshot_behind |= milestone;
        if self.snapshot_behind && snapshot == SnapshotWrite::Now {
            self.write_snapshot()?;
            self.snapshot_behind = false;
        }
        Ok(durability)
    }

    /// Rewrites `state.json` from the current state.
    pub fn write_snapshot(&self) -> Result<(), StoreError> {
        snapshot::write_snapshot(&self.dir.join(SNAPSHOT_FILE), &self.state)?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_says_whether_the_disk_was_full() {
        let io = |source| StoreError::Io {
            operation: "create",
            path: PathBuf::from("/store/run"),
            source,
        };
        let full = io(std::io::Error::from_raw_os_error(
            nix::errno::Errno::ENOSPC as i32,
        ));
        let quota = io(std::io::Error::from_raw_os_error(
            nix::errno::Errno::EDQUOT as i32,
        ));
        let denied = io(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert_eq!(
            [&full, &quota, &denied].map(StoreError::is_disk_full),
            [true, true, false],
            "a full disk or quota, and nothing else"
        );
    }

    #[test]
    fn run_ids_sort_in_time_order_and_round_trip() {
        let earlier = RunId::from_parts(1_795_989_330, 0xffff);
        let later = RunId::from_parts(1_795_989_331, 0x0000);
        assert!(earlier < later, "ids sort by start time before suffix");
        assert_eq!(earlier.as_str().parse::<RunId>().unwrap(), earlier);
        let generated = RunId::generate();
        assert_eq!(generated.as_str().parse::<RunId>().unwrap(), generated);
    }

    #[test]
    fn run_id_parsing_rejects_anything_else() {
        for bad in [
            "",
            "../../etc",
            "20261129-215530-7F3A",
            "20261129-215530-7f3",
            "20261129_215530-7f3a",
            "2026112a-215530-7f3a",
            ".20261129-215530-7f3a.tmp",
        ] {
            assert!(
                matches!(
                    bad.parse::<RunId>(),
                    Err(StoreError::InvalidRunId { ref id }) if id == bad
                ),
                "`{bad}` must be refused as a run id"
            );
        }
    }
}
