//! The run journal: an append-only file of JSON records, one per line, each fsynced
//! before `append` returns.
//!
//! This module owns the journal's record vocabulary and its on-disk format. Once `append`
//! has returned `Ok`, the record survives a crash of the process or the machine. It must
//! never rewrite a record that was reported durable: the only truncation it performs is
//! of a torn tail (bytes no `append` ever reported as written).
//!
//! Reading tolerates a torn last line (a crash mid-write) and reports it; anything wrong
//! before the last line is corruption and an error naming the file and line.

pub use crate::store::durable::Durability;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::store::attempts::Pick;
use crate::store::findings::RatchetTally;

use crate::git::{CommitId, RunId};
use crate::ledger::Ledger;
pub use crate::status::{SubtaskId, SubtaskOutcome, VerdictKind};
use crate::store::durable::{self, DurableError};
use crate::store::recorded::RecordedOptions;

/// One journal line: what happened and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the record was written, in milliseconds since the Unix epoch.
    pub ts_ms: u64,
    #[serde(flatten)]
    pub entry: Entry,
}

impl Record {
    /// Stamps `entry` with the current time.
    pub fn now(entry: Entry) -> Self {
        Self {
            ts_ms: now_ms(),
            entry,
        }
    }
}

/// Milliseconds since the Unix epoch; 0 if the clock is set before 1970.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How a worker's conversation starts (DESIGN: context modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextMode {
    /// The brief alone.
    Isolated,
    /// The lead's messages so far, then the brief.
    Fork,
}

/// One problem the reviewer found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    pub problem: String,
    /// True when the finding is a reason to reject; false for a remark the diff may be
    /// merged with. A record from before the field was a rejection's reason: true.
    #[serde(default = "blocking_by_default")]
    pub blocking: bool,
}

/// What a finding without `blocking` is: a reason to reject, as every finding once was.
fn blocking_by_default() -> bool {
    true
}

/// How one subtask ended when `grove review` rebuilt the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuiltSubtask {
    pub subtask: SubtaskId,
    /// `merged`, `conflict` or `rejected`.
    pub status: SubtaskOutcome,
    /// The subtask's commit, when it was merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitId>,
    /// The result right after this subtask was merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CommitId>,
    /// The paths that conflicted, when `status` is `conflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflict_paths: Vec<String>,
}

/// What a subtask is for (`kind` of a subtask in `grove run --json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubtaskKind {
    /// Delegated by the lead.
    #[default]
    Task,
    /// Started by grove to make a red result check green.
    Fix,
    /// Started by grove to resolve an approved subtask's conflict with the result.
    Resolve,
}

impl SubtaskKind {
    /// True for a subtask the lead delegated (the journal leaves the kind out then).
    pub fn is_task(&self) -> bool {
        *self == Self::Task
    }

    /// The name used in JSON and messages, e.g. `fix`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Fix => "fix",
            Self::Resolve => "resolve",
        }
    }
}

/// How one run of the project's check (`[check] command`) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// It exited with status 0.
    Passed,
    /// It exited with another status, was killed, or timed out.
    Failed,
}

impl CheckStatus {
    /// `passed` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
        }
    }
}

/// One run of the project's check: on a subtask's worktree or on the merged result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckRun {
    /// What it ran on: a subtask label (`S2`), `result`, or `result without S2` (the
    /// result rebuilt without those subtasks, to find which one broke it).
    pub on: String,
    pub status: CheckStatus,
    /// Wall-clock seconds it took.
    pub seconds: f64,
    /// How it ended, for a person: `exited with status 1`, `timed out after 900 s`.
    pub ended: String,
    /// The end of its output (stdout and stderr merged), bounded.
    pub output_tail: String,
    /// The files of the subtask's change it opened while it ran (executed, imported or
    /// read): they run later too, so the reviewer is told to look at them twice. Empty
    /// for a check that watched nothing (on the base, on the result).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opened: Vec<String>,
    /// The id of the tree it checked, when grove knows it: a tree is checked once per
    /// run (see `same_as`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// The check whose verdict this one is, not run again: an earlier check of the same
    /// tree with the same command and environment (`S4`, the fixer whose merge made the
    /// result that very tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
    /// What each `[[check.ratchet]]` found on the tree against the base (none on the
    /// base itself): a new finding, or a ratchet with nothing to compare, made it red.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratchets: Vec<RatchetTally>,
}

/// What `on` of a [`CheckRun`] on the merged result says.
pub const ON_RESULT: &str = "result";

/// What `on` of a [`CheckRun`] on the run's base commit says (before any change).
pub const ON_BASE: &str = "base";

/// How `on` of a [`CheckRun`] on the result rebuilt without some subtasks (and without
/// any that built on them) starts: `result without S2`, `result without S2, S3`.
pub const ON_RESULT_WITHOUT: &str = "result without ";

/// The `on` of a [`CheckRun`] on the result rebuilt without `labels` (`S2`, `S3`).
pub fn on_result_without(labels: &[String]) -> String {
    format!("{ON_RESULT_WITHOUT}{}", labels.join(", "))
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// The run went through to the end (some subtasks may still not be merged).
    Finished,
    /// The run stopped on an error it cannot resume from.
    Failed,
}

/// What happened, as recorded in the journal. Serialized with a `"type"` tag, e.g.
/// `{"ts_ms":…,"type":"subtask_started","subtask":"S1",…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    /// The first record of every journal.
    RunStarted {
        run_id: RunId,
        /// The user's task, verbatim.
        task: String,
        /// The commit the run started from (hex object id).
        base: CommitId,
        /// The user's branch the result is applied to.
        branch: String,
        provider: String,
        model: String,
        /// The run's options (jobs, caps, models, ...), so that a resume runs the same.
        #[serde(default)]
        options: RecordedOptions,
    },
    /// A `grove resume` process took the run over.
    Resumed { pid: u32 },
    /// The lead delegated a subtask.
    SubtaskStarted {
        subtask: SubtaskId,
        task: String,
        branch: String,
        mode: ContextMode,
        agent: String,
        /// The globs it may change (`delegate`'s `paths`, normalised); empty: any file.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        paths: Vec<String>,
        /// The subtasks its `after` named (labels).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        after: Vec<SubtaskId>,
        /// Every earlier subtask it waits for before it starts (labels): those of
        /// `after` and those whose `paths` overlap its own.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        waits_for: Vec<SubtaskId>,
        /// Left out for a subtask the lead delegated.
        #[serde(default, skip_serializing_if = "SubtaskKind::is_task")]
        kind: SubtaskKind,
        /// The earlier subtask this one replaces (`delegate`'s `replaces`, or its
        /// `start_from`): once this one merges, that one counts as superseded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<SubtaskId>,
        /// The subtask whose archived work its tree starts from (`start_from`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_from: Option<SubtaskId>,
    },
    /// A subtask that waited for others starts from `commit` (the run's result when its
    /// wait ended), not from the base; written before its worktree is made there.
    StartPoint {
        subtask: SubtaskId,
        commit: CommitId,
    },
    /// The orchestrator committed a worker's worktree after turn `turn`.
    Checkpoint {
        subtask: SubtaskId,
        commit: CommitId,
        turn: u32,
    },
    /// A tool call is about to run. Written before the tool runs, so that resume can
    /// tell a call that may have had effects from one that never started.
    ToolCallStarted {
        /// The subtask label, or `lead`.
        subtask: String,
        call_id: String,
        tool: String,
        /// Whether the tool may change files or run commands.
        mutating: bool,
    },
    /// A tool call returned (successfully or with an error result for the model).
    ToolCallFinished {
        subtask: String,
        call_id: String,
        tool: String,
        is_error: bool,
    },
    /// The reviewer's verdict on a subtask.
    Verdict {
        subtask: SubtaskId,
        verdict: VerdictKind,
        summary: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        findings: Vec<Finding>,
    },
    /// An approved subtask's `commit` was merged; `result` is the run's new result commit.
    Merged {
        subtask: SubtaskId,
        commit: CommitId,
        result: CommitId,
    },
    /// Merging an approved subtask conflicted on `paths`; the result is unchanged.
    Conflict {
        subtask: SubtaskId,
        paths: Vec<String>,
    },
    /// The subtasks of one `delegate` call with `attempts`: the same brief tried N ways.
    /// Written before any of their `subtask_started` records.
    Attempts {
        group: SubtaskId,
        subtasks: Vec<SubtaskId>,
    },
    /// The judge compared a group's attempts: the attempt picked, or none, and why the
    /// others lost. Only a judge writes it (a group left with one attempt after the
    /// checks has none; a person's pick in `grove review` is two `human_verdict`s).
    Picked {
        group: SubtaskId,
        #[serde(flatten)]
        pick: Pick,
    },
    /// A subtask is over.
    SubtaskFinished {
        subtask: SubtaskId,
        status: SubtaskOutcome,
        /// What the subtask's agents cost.
        #[serde(default)]
        ledger: Ledger,
        /// The report's one sentence about it (`worker: <summary>` for work that got
        /// that far), so that a resumed run reports it, and squashes it, as it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The worker's whole final message (bounded), so that a resumed run's lead
        /// still reads it all (`show_subtask`, its delegate results).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    /// The project's check ran (on a subtask's worktree or on the result).
    Checked {
        #[serde(flatten)]
        run: CheckRun,
    },
    /// The merged subtasks a red result check was put down to, and how (`failing_line`,
    /// `failing_file`, `passes_without`, `only_merged`; `at`: where the failure is).
    Culprit {
        subtasks: Vec<String>,
        found_by: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
    },
    /// The run stopped in a resumable state (user interrupt, budget, ...).
    Paused { reason: String },
    /// A person's decision on a subtask in `grove review`, replacing the reviewer's for
    /// what the result holds. `previous` is the decision it replaced (the reviewer's or an
    /// earlier person's; `None` when there was none). May follow `run_finished`.
    HumanVerdict {
        subtask: SubtaskId,
        verdict: VerdictKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<VerdictKind>,
    },
    /// `grove review` rebuilt the run's result from the base with the subtasks now
    /// approved, in subtask order; `result` is the new result commit and `subtasks` says
    /// how each decided subtask ended. May follow `run_finished`.
    ResultRebuilt {
        result: CommitId,
        subtasks: Vec<RebuiltSubtask>,
    },
    /// `grove review` applied the result to the user's branch. May follow `run_finished`.
    ResultApplied { result: CommitId },
    /// The lead was given the results of `subtasks`, in this order: by its `wait` call
    /// `call_id`, or (no call) in a message once it ended with results still to hear.
    /// Written before the lead sees them, so that a resumed run answers that call with
    /// the same results and delivers every other settled subtask's once.
    ResultsDelivered {
        subtasks: Vec<SubtaskId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// The last record of a run's own work; only `grove review`'s records (a person's
    /// decisions, the rebuilt result, its apply) may follow it.
    RunFinished {
        status: RunOutcome,
        /// Whether the result was applied to the user's branch.
        applied: bool,
        result_commit: Option<CommitId>,
        /// Why the run failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Entry {
    /// The `"type"` tag this entry is written with.
    pub fn type_name(&self) -> &'static str {
        match self {
            Entry::RunStarted { .. } => "run_started",
            Entry::Resumed { .. } => "resumed",
            Entry::SubtaskStarted { .. } => "subtask_started",
            Entry::StartPoint { .. } => "start_point",
            Entry::Checkpoint { .. } => "checkpoint",
            Entry::ToolCallStarted { .. } => "tool_call_started",
            Entry::ToolCallFinished { .. } => "tool_call_finished",
            Entry::Verdict { .. } => "verdict",
            Entry::Merged { .. } => "merged",
            Entry::Conflict { .. } => "conflict",
            Entry::Attempts { .. } => "attempts",
            Entry::Picked { .. } => "picked",
            Entry::SubtaskFinished { .. } => "subtask_finished",
            Entry::Checked { .. } => "checked",
            Entry::Culprit { .. } => "culprit",
            Entry::Paused { .. } => "paused",
            Entry::HumanVerdict { .. } => "human_verdict",
            Entry::ResultRebuilt { .. } => "result_rebuilt",
            Entry::ResultApplied { .. } => "result_applied",
            Entry::ResultsDelivered { .. } => "results_delivered",
            Entry::RunFinished { .. } => "run_finished",
        }
    }
}

/// Why the journal could not be read or written. None of these are retried: a journal
/// that cannot be written means the run cannot promise to be resumable, so it stops.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {path}: {operation}: {source}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Syncing the journal's directory failed after the journal was created.
    #[error(transparent)]
    Durable(#[from] DurableError),
    /// A line before the last one is not a valid record. A crash can only tear the last
    /// line, so this is damage (or a foreign edit), not an interrupted write.
    #[error("journal {path} is corrupt at line {line}: {reason}")]
    Corrupt {
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        reason: CorruptLine,
    },
    /// A record could not be encoded.
    #[error("journal {path}: cannot encode a `{record_type}` record: {source}")]
    Encode {
        path: PathBuf,
        record_type: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// An earlier append failed and its partial bytes could not be removed, so appending
    /// more would bury a torn line mid-file.
    #[error(
        "journal {path}: an earlier write failed and could not be rolled back; refusing to append"
    )]
    Poisoned { path: PathBuf },
}

/// The unfinished bytes a crash left at the end of a journal; they were never reported
/// as written, so they are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// 1-based line number of the torn line.
    pub line: usize,
    /// Byte offset where the torn line starts (the length of the intact journal).
    pub offset: u64,
    /// How many bytes were ignored.
    pub len: u64,
}

/// Everything a journal holds.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalContents {
    pub records: Vec<Record>,
    /// Set when the last line was torn and ignored.
    pub torn_tail: Option<TornTail>,
}

/// Reads every intact record of the journal at `path`.
pub fn read_journal(path: &Path) -> Result<JournalContents, JournalError> {
    let bytes = std::fs::read(path).map_err(|source| JournalError::Io {
        operation: "read",
        path: path.to_path_buf(),
        source,
    })?;
    parse_journal(path, &bytes)
}

/// Parses journal bytes; `path` only names the file in errors.
pub fn parse_journal(path: &Path, bytes: &[u8]) -> Result<JournalContents, JournalError> {
    let mut records = Vec::new();
    let mut offset = 0usize;
    let mut line_number = 0usize;
    while offset < bytes.len() {
        line_number += 1;
        let rest = &bytes[offset..];
        let newline = rest.iter().position(|&b| b == b'\n');
        let line_end = newline.unwrap_or(rest.len());
        let line = &rest[..line_end];
        let next_offset = offset + line_end + usize::from(newline.is_some());
        let is_last = next_offset >= bytes.len();
        let torn = || TornTail {
            line: line_number,
            offset: offset as u64,
            len: (bytes.len() - offset) as u64,
        };
        if newline.is_none() {
            // `append` writes the newline with the record; a line without one was never
            // reported durable, even if what is there happens to parse.
            return Ok(JournalContents {
                records,
                torn_tail: Some(torn()),
            });
        }
        match parse_line(line) {
            Ok(record) => records.push(record),
            // The last line may be complete yet damaged when the machine (not just the
            // process) crashed before its fsync: the file system may persist the length
            // before the data. It was not reported durable either.
            Err(_) if is_last => {
                return Ok(JournalContents {
                    records,
                    torn_tail: Some(torn()),
                });
            }
            Err(reason) => {
                return Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    line: line_number,
                    reason,
                });
            }
        }
        offset = next_offset;
    }
    Ok(JournalContents {
        records,
        torn_tail: None,
    })
}

/// What is wrong with one line of a journal.
#[derive(Debug, thiserror::Error)]
pub enum CorruptLine {
    #[error("empty line")]
    Empty,
    #[error("{0}")]
    NotARecord(#[source] serde_json::Error),
}

fn parse_line(line: &[u8]) -> Result<Record, CorruptLine> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(CorruptLine::Empty);
    }
    serde_json::from_slice(line).map_err(CorruptLine::NotARecord)
}

/// An open journal that records are appended to.
/// Fsyncs a journal's file from outside the lock its appends are made under.
#[derive(Debug)]
pub struct JournalSyncer {
    file: File,
    path: PathBuf,
}

impl JournalSyncer {
    /// Makes every record appended so far durable.
    pub fn sync(&self) -> Result<(), JournalError> {
        self.file.sync_data().map_err(|source| JournalError::Io {
            operation: "fsync",
            path: self.path.clone(),
            source,
        })
    }
}

#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
    /// Bytes known to be intact on disk; a failed append is truncated back to this.
    durable_len: u64,
    poisoned: bool,
}

impl Journal {
    /// Creates a new, empty journal at `path` (which must not exist) and fsyncs its
    /// directory so the file itself survives a machine crash.
    pub fn create(path: &Path) -> Result<Self, JournalError> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)
            .map_err(|source| JournalError::Io {
                operation: "create",
                path: path.to_path_buf(),
                source,
            })?;
        durable::sync_dir(durable::parent_dir(path))?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            durable_len: 0,
            poisoned: false,
        })
    }

    /// Opens an existing journal for appending and returns what it holds. A torn tail is
    /// cut off (and reported in the contents) so the next record starts on a fresh line.
    pub fn open(path: &Path) -> Result<(Self, JournalContents), JournalError> {
        let io_error = |operation: &'static str| {
            move |source| JournalError::Io {
                operation,
                path: path.to_path_buf(),
                source,
            }
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(io_error("open"))?;
        let contents = read_journal(path)?;
        let durable_len = match &contents.torn_tail {
            Some(tail) => {
                file.set_len(tail.offset)
                    .map_err(io_error("truncate torn tail"))?;
                file.sync_all().map_err(io_error("fsync"))?;
                tail.offset
            }
            None => file.metadata().map_err(io_error("stat"))?.len(),
        };
        let journal = Self {
            file,
            path: path.to_path_buf(),
            durable_len,
            poisoned: false,
        };
        Ok((journal, contents))
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle that fsyncs this journal without holding it, so that appends made
    /// meanwhile share the fsync (see [`JournalSyncer`]).
    pub fn syncer(&self) -> Result<JournalSyncer, JournalError> {
        let file = self.file.try_clone().map_err(|source| JournalError::Io {
            operation: "open for fsync",
            path: self.path.clone(),
            source,
        })?;
        Ok(JournalSyncer {
            file,
            path: self.path.clone(),
        })
    }

    /// Appends `record` as one line and fsyncs it; when this returns `Ok` the record is
    /// durable. On failure the partial line is cut off again, so the journal stays
    /// readable; if even that fails, every later append is refused.
    pub fn append(&mut self, record: &Record) -> Result<(), JournalError> {
        self.append_with(record, Durability::Synced)
    }

    /// Appends `record`, fsyncing it only when `durability` says so. An unsynced record
    /// survives a crash of the process (it is in the kernel's cache) and becomes durable
    /// with the next synced one; only a crash of the machine can lose it, so it must be a
    /// record whose loss errs on the safe side.
    pub fn append_with(
        &mut self,
        record: &Record,
        durability: Durability,
    ) -> Result<(), JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned {
                path: self.path.clone(),
            });
        }
        let mut line = serde_json::to_vec(record).map_err(|source| JournalError::Encode {
            path: self.path.clone(),
            record_type: record.entry.type_name(),
            source,
        })?;
        line.push(b'\n');
        let written = self.file.write_all(&line).and_then(|()| match durability {
            Durability::Synced => self.file.sync_data(),
            Durability::Buffered => Ok(()),
        });
        if let Err(source) = written {
            if self.file.set_len(self.durable_len).is_err() {
                self.poisoned = true;
            }
            return Err(JournalError::Io {
                operation: "append",
                path: self.path.clone(),
                source,
            });
        }
        self.durable_len += line.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn record(ts_ms: u64, reason: &str) -> Record {
        Record {
            ts_ms,
            entry: Entry::Paused {
                reason: reason.to_string(),
            },
        }
    }

    #[test]
    fn record_wire_format_is_flat_with_a_type_tag() {
        let line = serde_json::to_value(record(7, "ctrl-c")).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"ts_ms": 7, "type": "paused", "reason": "ctrl-c"}),
            "a record is one flat object: timestamp, type tag, fields"
        );
    }

    #[test]
    fn type_name_matches_the_serialized_tag() {
        let entry = Entry::ToolCallStarted {
            subtask: "S1".into(),
            call_id: "c".into(),
            tool: "bash".into(),
            mutating: true,
        };
        let value = serde_json::to_value(Record {
            ts_ms: 0,
            entry: entry.clone(),
        })
        .unwrap();
        assert_eq!(value["type"], entry.type_name());
    }

    #[test]
    fn opening_a_torn_journal_cuts_the_tail_so_appends_stay_on_their_own_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let mut journal = Journal::create(&path).unwrap();
        journal.append(&record(1, "a")).unwrap();
        drop(journal);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"ts_ms":2,"type":"pau"#).unwrap();
        drop(file);

        let (mut journal, contents) = Journal::open(&path).unwrap();
        assert_eq!(
            contents.torn_tail.map(|t| t.line),
            Some(2),
            "the torn second line is reported"
        );
        journal.append(&record(3, "b")).unwrap();
        assert_eq!(
            read_journal(&path).unwrap(),
            JournalContents {
                records: vec![record(1, "a"), record(3, "b")],
                torn_tail: None
            },
            "the record appended after recovery follows the intact ones"
        );
    }

    /// Lines as a grove with string ids wrote them, one of each record that holds an id
    /// (after `run_started`, whose options are written as they are today).
    const OLD_LINES: &str = concat!(
        r#"{"ts_ms":2,"type":"subtask_started","subtask":"S2","task":"t","branch":"grove/r/2","mode":"isolated","agent":"worker","paths":["src/**"],"after":["S1"],"waits_for":["S1"]}"#,
        "\n",
        r#"{"ts_ms":3,"type":"start_point","subtask":"S2","commit":"0123456789abcdef0123456789abcdef01234567"}"#,
        "\n",
        r#"{"ts_ms":4,"type":"checkpoint","subtask":"S2","commit":"1123456789abcdef0123456789abcdef01234567","turn":3}"#,
        "\n",
        r#"{"ts_ms":5,"type":"tool_call_started","subtask":"lead","call_id":"c","tool":"grep","mutating":false}"#,
        "\n",
        r#"{"ts_ms":6,"type":"verdict","subtask":"S2","verdict":"approve","summary":"ok"}"#,
        "\n",
        r#"{"ts_ms":7,"type":"merged","subtask":"S2","commit":"1123456789abcdef0123456789abcdef01234567","result":"2123456789abcdef0123456789abcdef01234567"}"#,
        "\n",
        r#"{"ts_ms":8,"type":"conflict","subtask":"S3","paths":["a.txt"]}"#,
        "\n",
        r#"{"ts_ms":9,"type":"culprit","subtasks":["S2"],"found_by":"only_merged"}"#,
        "\n",
        r#"{"ts_ms":10,"type":"run_finished","status":"finished","applied":false,"result_commit":"2123456789abcdef0123456789abcdef01234567"}"#,
        "\n",
        r#"{"ts_ms":11,"type":"human_verdict","subtask":"S2","verdict":"reject","previous":"approve"}"#,
        "\n",
        r#"{"ts_ms":12,"type":"result_rebuilt","result":"3123456789abcdef0123456789abcdef01234567","subtasks":[{"subtask":"S2","status":"merged","commit":"1123456789abcdef0123456789abcdef01234567","result":"3123456789abcdef0123456789abcdef01234567"},{"subtask":"S3","status":"rejected"}]}"#,
        "\n",
        r#"{"ts_ms":13,"type":"result_applied","result":"3123456789abcdef0123456789abcdef01234567"}"#,
        "\n",
        r#"{"ts_ms":14,"type":"run_finished","status":"failed","applied":false,"result_commit":null,"error":"e"}"#,
        "\n",
    );

    #[test]
    fn an_old_journal_reads_typed_and_writes_back_byte_for_byte() {
        let options = serde_json::to_string(&RecordedOptions::default()).unwrap();
        let old = format!(
            "{{\"ts_ms\":1,\"type\":\"run_started\",\"run_id\":\"20261201-084722-0491\",\"task\":\"t\",\
             \"base\":\"7c6fc19736fcb32873aceaf39f7cb3012df150f5\",\"branch\":\"refs/heads/main\",\
             \"provider\":\"anthropic\",\"model\":\"m\",\"options\":{options}}}\n{OLD_LINES}"
        );
        let contents = parse_journal(Path::new("j"), old.as_bytes()).unwrap();
        assert_eq!(contents.torn_tail, None);
        assert!(matches!(
            &contents.records[1].entry,
            Entry::SubtaskStarted { subtask: SubtaskId(2), after, .. } if after == &[SubtaskId(1)]
        ));
        let mut written = String::new();
        for (record, line) in contents.records.iter().zip(old.lines()) {
            let again = serde_json::to_string(record).unwrap();
            assert_eq!(again, line, "a record is written back as it was read");
            written.push_str(&again);
            written.push('\n');
        }
        assert_eq!(written, old, "every line was read");
    }

    #[test]
    fn a_malformed_id_mid_file_is_corruption_not_a_panic() {
        for bad in [
            r#"{"ts_ms":1,"type":"checkpoint","subtask":"S1","commit":"abc","turn":1}"#,
            r#"{"ts_ms":1,"type":"verdict","subtask":"lead","verdict":"approve","summary":"s"}"#,
            r#"{"ts_ms":1,"type":"run_started","run_id":"a/b","task":"t","base":"0123456789abcdef0123456789abcdef01234567","branch":"b","provider":"p","model":"m"}"#,
        ] {
            let bytes = format!("{bad}\n{{\"ts_ms\":2,\"type\":\"paused\",\"reason\":\"x\"}}\n");
            let err = parse_journal(Path::new("j"), bytes.as_bytes()).unwrap_err();
            assert!(
                matches!(
                    err,
                    JournalError::Corrupt {
                        line: 1,
                        reason: CorruptLine::NotARecord(_),
                        ..
                    }
                ),
                "{bad}: got {err:?}"
            );
        }
    }

    #[test]
    fn a_blank_line_mid_file_is_corruption() {
        let err = parse_journal(
            Path::new("j"),
            b"\n{\"ts_ms\":1,\"type\":\"paused\",\"reason\":\"x\"}\n",
        )
        .unwrap_err();
        assert!(
            matches!(err, JournalError::Corrupt { line: 1, .. }),
            "got {err:?}"
        );
    }
}
