//! Crash-safe run state: the journal, the snapshot, the repository lock and the run
//! store, including across processes that are killed with SIGKILL.
//!
//! Cross-process tests re-run this test binary with `GROVE_RUN_STATE_CHILD` set, which
//! makes the ignored `child_process_helper` test act as a tiny helper program. The helper
//! reports progress as lines starting with `GROVE-CHILD ` on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use grove::agent::Ledger;
use grove::git::CommitId;
use grove::settings::RunOptions;
use grove::status::SubtaskId;
use grove::store::journal::{
    ContextMode, Entry, Finding, Journal, JournalContents, JournalError, Record, RunOutcome,
    SubtaskKind, SubtaskOutcome, TornTail, VerdictKind, read_journal,
};
use grove::store::lock::{LockError, RepoLock, StaleLock, read_holder, this_hostname};
use grove::store::snapshot::{read_snapshot, write_snapshot};
use grove::store::state::{
    CheckpointState, MergeState, ReplayError, ReplayReason, RunState, RunStatus, SubtaskState,
    SubtaskStatus, ToolCallState, VerdictState,
};
use grove::store::{
    JOURNAL_FILE, RunId, RunStart, RunStore, SNAPSHOT_FILE, SnapshotWrite, StoreError,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::entries;

const CHILD_MODE: &str = "GROVE_RUN_STATE_CHILD";
const CHILD_DIR: &str = "GROVE_RUN_STATE_CHILD_DIR";
const CHILD_RUN_ID: &str = "GROVE_RUN_STATE_CHILD_RUN_ID";
const MARKER: &str = "GROVE-CHILD ";

fn run_id(second: i64) -> RunId {
    RunId::from_parts(1_795_989_330 + second, 0x7f3a)
}

fn start(task: &str) -> RunStart {
    RunStart {
        task: task.to_string(),
        base: CommitId::parse(&"a".repeat(40)).unwrap(),
        branch: "main".to_string(),
        provider: "anthropic".to_string(),
        model: "claude-test".to_string(),
        options: RunOptions {
            jobs: 2,
            ..RunOptions::default()
        },
    }
}

fn two_jobs_eight_subtasks() -> RunOptions {
    RunOptions {
        jobs: 2,
        max_subtasks: 8,
        ..RunOptions::default()
    }
}

fn at(ts_ms: u64, entry: Entry) -> Record {
    Record { ts_ms, entry }
}

/// A journal exercising every record type, with fixed timestamps.
fn full_journal(run: &RunId) -> Vec<Record> {
    vec![
        at(
            1000,
            Entry::RunStarted {
                run_id: run.clone(),
                task: "rename Config::load".into(),
                base: CommitId::parse(&"b".repeat(40)).unwrap(),
                branch: "main".into(),
                provider: "anthropic".into(),
                model: "claude-test".into(),
                options: two_jobs_eight_subtasks().into(),
            },
        ),
        at(
            1100,
            entries::subtask_started(1, "rename in src/", &format!("grove/{run}/1")),
        ),
        at(
            1150,
            Entry::SubtaskStarted {
                subtask: SubtaskId(2),
                task: "rename in tests/".into(),
                branch: format!("grove/{run}/2"),
                mode: ContextMode::Fork,
                agent: "tester".into(),
                paths: Vec::new(),
                after: Vec::new(),
                waits_for: Vec::new(),
                kind: SubtaskKind::Task,
                replaces: None,
                start_from: None,
            },
        ),
        at(
            1200,
            Entry::ToolCallStarted {
                subtask: "S1".into(),
                call_id: "call_1".into(),
                tool: "edit_file".into(),
                mutating: true,
            },
        ),
        at(
            1210,
            Entry::ToolCallFinished {
                subtask: "S1".into(),
                call_id: "call_1".into(),
                tool: "edit_file".into(),
                is_error: false,
            },
        ),
        at(
            1220,
            Entry::ToolCallStarted {
                subtask: "S2".into(),
                call_id: "call_2".into(),
                tool: "bash".into(),
                mutating: true,
            },
        ),
        at(
            1230,
            Entry::ToolCallStarted {
                subtask: "lead".into(),
                call_id: "call_3".into(),
                tool: "grep".into(),
                mutating: false,
            },
        ),
        at(
            1300,
            Entry::Checkpoint {
                subtask: SubtaskId(1),
                commit: CommitId::parse(&"c".repeat(40)).unwrap(),
                turn: 1,
            },
        ),
        at(
            1310,
            Entry::Checkpoint {
                subtask: SubtaskId(1),
                commit: CommitId::parse(&"d".repeat(40)).unwrap(),
                turn: 2,
            },
        ),
        at(
            1400,
            Entry::Verdict {
                subtask: SubtaskId(1),
                verdict: VerdictKind::Approve,
                summary: "clean rename".into(),
                findings: vec![Finding {
                    path: "src/config.rs".into(),
                    line: Some(3),
                    problem: "doc comment still says load".into(),
                    blocking: true,
                }],
            },
        ),
        at(
            1500,
            Entry::Merged {
                subtask: SubtaskId(1),
                commit: CommitId::parse(&"d".repeat(40)).unwrap(),
                result: CommitId::parse(&"e".repeat(40)).unwrap(),
            },
        ),
        at(
            1510,
            Entry::SubtaskFinished {
                subtask: SubtaskId(1),
                status: SubtaskOutcome::Merged,
                ledger: Ledger {
                    steps: 4,
                    input_tokens: 1000,
                    output_tokens: 200,
                    cache_read_tokens: 0,
                    cache_write_tokens: 50,
                    cache_write_1h_tokens: 0,
                },
                reason: Some("worker: renamed it".into()),
                summary: Some("Rename it\n\nRenamed every call; the tests pass.".into()),
            },
        ),
        at(
            1600,
            Entry::Paused {
                reason: "interrupted by the user".into(),
            },
        ),
        at(1700, Entry::Resumed { pid: 4242 }),
        at(
            1800,
            Entry::Conflict {
                subtask: SubtaskId(2),
                paths: vec!["tests/config.rs".into()],
            },
        ),
    ]
}

fn expected_full_state(run: &RunId) -> RunState {
    RunState {
        run_id: run.clone(),
        task: "rename Config::load".into(),
        base: CommitId::parse(&"b".repeat(40)).unwrap(),
        branch: "main".into(),
        provider: "anthropic".into(),
        model: "claude-test".into(),
        options: two_jobs_eight_subtasks().into(),
        status: RunStatus::Running,
        started_ms: 1000,
        updated_ms: 1800,
        finished_ms: None,
        pause_reason: None,
        error: None,
        result_commit: Some(CommitId::parse(&"e".repeat(40)).unwrap()),
        applied: false,
        subtasks: vec![
            SubtaskState {
                id: SubtaskId(1),
                task: "rename in src/".into(),
                branch: format!("grove/{run}/1"),
                mode: ContextMode::Isolated,
                agent: "worker".into(),
                status: SubtaskStatus::Merged,
                started_ms: 1100,
                finished_ms: Some(1510),
                last_checkpoint: Some(CheckpointState {
                    commit: CommitId::parse(&"d".repeat(40)).unwrap(),
                    turn: 2,
                }),
                verdict: Some(VerdictState {
                    verdict: VerdictKind::Approve,
                    summary: "clean rename".into(),
                    findings: vec![Finding {
                        path: "src/config.rs".into(),
                        line: Some(3),
                        problem: "doc comment still says load".into(),
                        blocking: true,
                    }],
                }),
                merge: Some(MergeState {
                    commit: CommitId::parse(&"d".repeat(40)).unwrap(),
                    result: CommitId::parse(&"e".repeat(40)).unwrap(),
                }),
                conflict_paths: vec![],
                ledger: Ledger {
                    steps: 4,
                    input_tokens: 1000,
                    output_tokens: 200,
                    cache_read_tokens: 0,
                    cache_write_tokens: 50,
                    cache_write_1h_tokens: 0,
                },
                human_verdict: None,
                paths: Vec::new(),
                after: Vec::new(),
                waits_for: Vec::new(),
                start: None,
                kind: SubtaskKind::Task,
                check: None,
                reason: Some("worker: renamed it".into()),
                worker_summary: Some("Rename it\n\nRenamed every call; the tests pass.".into()),
                replaces: None,
                start_from: None,
            },
            SubtaskState {
                id: SubtaskId(2),
                task: "rename in tests/".into(),
                branch: format!("grove/{run}/2"),
                mode: ContextMode::Fork,
                agent: "tester".into(),
                status: SubtaskStatus::Running,
                started_ms: 1150,
                finished_ms: None,
                last_checkpoint: None,
                verdict: None,
                merge: None,
                conflict_paths: vec!["tests/config.rs".into()],
                ledger: Ledger::default(),
                human_verdict: None,
                paths: Vec::new(),
                after: Vec::new(),
                waits_for: Vec::new(),
                start: None,
                kind: SubtaskKind::Task,
                check: None,
                reason: None,
                worker_summary: None,
                replaces: None,
                start_from: None,
            },
        ],
        open_tool_calls: vec![],
        interrupted_tool_calls: vec![
            ToolCallState {
                subtask: "S2".into(),
                call_id: "call_2".into(),
                tool: "bash".into(),
                mutating: true,
                started_ms: 1220,
            },
            ToolCallState {
                subtask: "lead".into(),
                call_id: "call_3".into(),
                tool: "grep".into(),
                mutating: false,
                started_ms: 1230,
            },
        ],
        resumes: 1,
        journal_records: 15,
        checks: vec![],
        culprit: None,
        deliveries: Vec::new(),
        attempts: Vec::new(),
    }
}

fn write_journal(path: &Path, records: &[Record]) {
    let mut journal = Journal::create(path).unwrap();
    for record in records {
        journal.append(record).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Journal

#[test]
fn journal_reads_back_exactly_the_records_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let records = full_journal(&run_id(0));
    write_journal(&path, &records);
    assert_eq!(
        read_journal(&path).unwrap(),
        JournalContents {
            records: records.clone(),
            torn_tail: None
        },
        "every appended record reads back unchanged, in order"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().count(),
        records.len(),
        "one record per line, each terminated by a newline"
    );
    assert!(
        text.ends_with('\n'),
        "the last record is newline-terminated"
    );
}

#[test]
fn journal_appends_continue_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let records = full_journal(&run_id(0));
    write_journal(&path, &records[..3]);
    let (mut journal, contents) = Journal::open(&path).unwrap();
    assert_eq!(contents.records, records[..3].to_vec());
    for record in &records[3..] {
        journal.append(record).unwrap();
    }
    assert_eq!(read_journal(&path).unwrap().records, records);
}

#[test]
fn journal_create_refuses_to_clobber_an_existing_journal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    write_journal(&path, &full_journal(&run_id(0))[..1]);
    let err = Journal::create(&path).unwrap_err();
    assert!(
        matches!(&err, JournalError::Io { operation: "create", path: p, source }
            if p == &path && source.kind() == std::io::ErrorKind::AlreadyExists),
        "creating over an existing journal must fail, got {err:?}"
    );
    assert_eq!(
        read_journal(&path).unwrap().records.len(),
        1,
        "the existing journal is untouched"
    );
}

#[test]
fn journal_ignores_and_reports_a_torn_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let records = full_journal(&run_id(0));
    write_journal(&path, &records[..2]);
    let intact_len = std::fs::metadata(&path).unwrap().len();
    let torn = br#"{"ts_ms":1150,"type":"subtask_sta"#;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(torn)
        .unwrap();

    assert_eq!(
        read_journal(&path).unwrap(),
        JournalContents {
            records: records[..2].to_vec(),
            torn_tail: Some(TornTail {
                line: 3,
                offset: intact_len,
                len: torn.len() as u64,
            }),
        },
        "the intact records are read, the torn line is ignored and reported"
    );
}

#[test]
fn journal_treats_an_unterminated_last_line_as_torn_even_if_it_parses() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let records = full_journal(&run_id(0));
    write_journal(&path, &records[..1]);
    let unterminated = serde_json::to_vec(&records[1]).unwrap();
    let intact_len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&unterminated)
        .unwrap();
    let contents = read_journal(&path).unwrap();
    assert_eq!(
        contents.records,
        records[..1].to_vec(),
        "a record whose newline never reached the file was never reported durable"
    );
    assert_eq!(contents.torn_tail.map(|t| t.offset), Some(intact_len));
}

#[test]
fn journal_corruption_before_the_last_line_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(JOURNAL_FILE);
    let records = full_journal(&run_id(0));
    write_journal(&path, &records[..3]);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = r#"{"ts_ms":1100,"type":"no_such_record"}"#;
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let err = read_journal(&path).unwrap_err();
    assert!(
        matches!(&err, JournalError::Corrupt { path: p, line: 2, .. } if p == &path),
        "mid-file damage is corruption at line 2, got {err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("line 2"),
        "the message names the file and the line: {message}"
    );
    assert!(
        matches!(
            Journal::open(&path),
            Err(JournalError::Corrupt { line: 2, .. })
        ),
        "a corrupt journal is not opened for appending either"
    );
}

#[test]
fn journal_read_of_a_missing_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.jsonl");
    let err = read_journal(&path).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "the error names the missing journal: {err}"
    );
}

// ---------------------------------------------------------------------------------------
// State and snapshot

#[test]
fn replay_folds_a_journal_into_the_expected_state() {
    let run = run_id(0);
    let state = RunState::replay(&full_journal(&run)).unwrap();
    assert_eq!(state, expected_full_state(&run));
}

#[test]
fn replay_of_a_finished_run_records_outcome_and_result() {
    let run = run_id(0);
    let mut records = full_journal(&run);
    records.push(at(
        1900,
        Entry::SubtaskFinished {
            subtask: SubtaskId(2),
            status: SubtaskOutcome::Conflict,
            ledger: Ledger::default(),
            reason: None,
            summary: None,
        },
    ));
    records.push(at(
        2000,
        Entry::RunFinished {
            status: RunOutcome::Finished,
            applied: true,
            result_commit: Some(CommitId::parse(&"f".repeat(40)).unwrap()),
            error: None,
        },
    ));
    let mut expected = expected_full_state(&run);
    expected.subtasks[1].status = SubtaskStatus::Conflict;
    expected.subtasks[1].finished_ms = Some(1900);
    expected.status = RunStatus::Finished;
    expected.applied = true;
    expected.result_commit = Some(CommitId::parse(&"f".repeat(40)).unwrap());
    expected.finished_ms = Some(2000);
    expected.updated_ms = 2000;
    expected.journal_records = 17;
    assert_eq!(RunState::replay(&records).unwrap(), expected);
}

#[test]
fn replay_refuses_records_that_do_not_fit() {
    let run = run_id(0);
    let records = full_journal(&run);
    let cases: Vec<(Vec<Record>, ReplayError, &str)> = vec![
        (
            vec![],
            ReplayError {
                record: 1,
                record_type: "none",
                reason: ReplayReason::EmptyJournal,
            },
            "the journal is empty; it must start with `run_started`",
        ),
        (
            vec![records[1].clone()],
            ReplayError {
                record: 1,
                record_type: "subtask_started",
                reason: ReplayReason::NotStartedFirst,
            },
            "a journal must start with `run_started`",
        ),
        (
            vec![records[0].clone(), records[0].clone()],
            ReplayError {
                record: 2,
                record_type: "run_started",
                reason: ReplayReason::AlreadyStarted,
            },
            "the run already started",
        ),
        (
            vec![records[0].clone(), records[7].clone()],
            ReplayError {
                record: 2,
                record_type: "checkpoint",
                reason: ReplayReason::SubtaskNeverStarted {
                    subtask: SubtaskId(1),
                },
            },
            "subtask `S1` was never started",
        ),
        (
            vec![records[0].clone(), records[1].clone(), records[1].clone()],
            ReplayError {
                record: 3,
                record_type: "subtask_started",
                reason: ReplayReason::SubtaskAlreadyStarted {
                    subtask: SubtaskId(1),
                },
            },
            "subtask `S1` already started",
        ),
        (
            vec![records[0].clone(), records[4].clone()],
            ReplayError {
                record: 2,
                record_type: "tool_call_finished",
                reason: ReplayReason::ToolCallNeverStarted {
                    subtask: "S1".into(),
                    call_id: "call_1".into(),
                },
            },
            "tool call `call_1` of `S1` finished but never started",
        ),
        (
            vec![
                records[0].clone(),
                at(
                    5,
                    Entry::RunFinished {
                        status: RunOutcome::Failed,
                        applied: false,
                        result_commit: None,
                        error: Some("boom".into()),
                    },
                ),
                records[1].clone(),
            ],
            ReplayError {
                record: 3,
                record_type: "subtask_started",
                reason: ReplayReason::AlreadyFinished,
            },
            "the run already finished",
        ),
    ];
    for (journal, expected, reason) in cases {
        let refused = RunState::replay(&journal).unwrap_err();
        assert_eq!(
            refused, expected,
            "a record sequence no run can produce is refused with its position"
        );
        assert_eq!(
            refused.reason.to_string(),
            reason,
            "the refusal says why in words"
        );
    }
}

#[test]
fn snapshot_write_replaces_a_stale_temp_file_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    let temp = dir.path().join("state.json.tmp");
    std::fs::write(&temp, "{\"half written by a crash").unwrap();
    let state = expected_full_state(&run_id(0));

    write_snapshot(&path, &state).unwrap();
    assert_eq!(read_snapshot(&path).unwrap(), Some(state));
    assert!(
        !temp.exists(),
        "the temp file is renamed into place, not left behind"
    );
}

#[test]
fn snapshot_read_of_a_missing_file_is_none_and_of_garbage_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    assert_eq!(read_snapshot(&path).unwrap(), None);
    std::fs::write(&path, "not json").unwrap();
    let err = read_snapshot(&path).unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "the error names the snapshot: {err}"
    );
}

// ---------------------------------------------------------------------------------------
// Store

/// Subtask `n` of run `id` started, with the brief "do it".
fn subtask_started(id: &RunId, n: u32) -> Entry {
    entries::subtask_started(n, "do it", &format!("grove/{id}/{n}"))
}

#[test]
fn create_run_writes_journal_and_snapshot_that_agree() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let id = run_id(0);
    let lock = RepoLock::acquire(git_dir.path(), id.as_str()).unwrap();
    let mut run = store.create_run(&lock, start("add a flag")).unwrap();
    let run_dir = git_dir.path().join("grove").join("runs").join(id.as_str());
    assert_eq!(run.dir(), run_dir.as_path());
    run.append(subtask_started(&id, 1)).unwrap();

    let journal = read_journal(&run_dir.join(JOURNAL_FILE)).unwrap();
    assert_eq!(journal.torn_tail, None);
    let replayed = RunState::replay(&journal.records).unwrap();
    assert_eq!(
        &replayed,
        run.state(),
        "the in-memory state is the journal's fold"
    );
    assert_eq!(
        read_snapshot(&run_dir.join(SNAPSHOT_FILE))
            .unwrap()
            .as_ref(),
        Some(&replayed),
        "the snapshot is current after a subtask starts"
    );
    assert_eq!(
        (
            replayed.task.as_str(),
            replayed.options.get().unwrap().jobs,
            replayed.subtasks.len()
        ),
        ("add a flag", 2, 1)
    );
    let leftovers: Vec<_> = std::fs::read_dir(store.runs_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers,
        vec![std::ffi::OsString::from(id.as_str())],
        "only the run directory remains; the staging directory was renamed"
    );
}

#[test]
fn a_snapshot_left_to_the_next_append_is_written_by_the_last_of_a_burst() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let id = run_id(0);
    let lock = RepoLock::acquire(git_dir.path(), id.as_str()).unwrap();
    let mut run = store.create_run(&lock, start("add a flag")).unwrap();
    let snapshot = run.dir().join(SNAPSHOT_FILE);
    let subtasks_in_snapshot = || read_snapshot(&snapshot).unwrap().unwrap().subtasks.len();

    run.append_leaving_snapshot(subtask_started(&id, 1), SnapshotWrite::LeftToLast)
        .unwrap();
    run.append_leaving_snapshot(subtask_started(&id, 2), SnapshotWrite::LeftToLast)
        .unwrap();
    let behind = subtasks_in_snapshot();
    // The last of the burst is not a milestone itself: it still writes the snapshot.
    run.append_leaving_snapshot(
        Entry::ToolCallStarted {
            subtask: "S1".into(),
            call_id: "c1".into(),
            tool: "read_file".into(),
            mutating: false,
        },
        SnapshotWrite::Now,
    )
    .unwrap();

    assert_eq!(
        (behind, subtasks_in_snapshot()),
        (0, 2),
        "the snapshot waits while more appends are coming, and the last one catches it up"
    );
}

#[test]
fn create_run_refuses_an_existing_id() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let lock = RepoLock::acquire(git_dir.path(), run_id(0).as_str()).unwrap();
    drop(store.create_run(&lock, start("one")).unwrap());
    let err = store.create_run(&lock, start("two")).unwrap_err();
    assert!(
        matches!(&err, StoreError::RunExists { run_id: id, .. } if id == &run_id(0)),
        "got {err:?}"
    );
}

#[test]
fn a_record_that_does_not_fit_is_refused_before_it_is_journaled() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let lock = RepoLock::acquire(git_dir.path(), run_id(0).as_str()).unwrap();
    let mut run = store.create_run(&lock, start("t")).unwrap();
    let before = read_journal(&run.dir().join(JOURNAL_FILE)).unwrap();
    let err = run
        .append(Entry::Merged {
            subtask: SubtaskId(9),
            commit: CommitId::parse(&"1".repeat(40)).unwrap(),
            result: CommitId::parse(&"2".repeat(40)).unwrap(),
        })
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::RecordRejected { source, .. } if source.record == 2),
        "got {err:?}"
    );
    assert_eq!(
        read_journal(&run.dir().join(JOURNAL_FILE)).unwrap(),
        before,
        "a refused record never reaches the journal"
    );
}

#[test]
fn resume_rebuilds_a_missing_snapshot_ignores_a_stale_temp_and_cuts_a_torn_tail() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let id = run_id(0);
    let lock = RepoLock::acquire(git_dir.path(), id.as_str()).unwrap();
    let mut run = store.create_run(&lock, start("t")).unwrap();
    for record in &full_journal(&id)[1..8] {
        run.append_record(record).unwrap();
    }
    let dir = run.dir().to_path_buf();
    drop(run);
    // The crash: snapshot gone, a half-written temp left, a torn journal line.
    std::fs::remove_file(dir.join(SNAPSHOT_FILE)).unwrap();
    std::fs::write(dir.join("state.json.tmp"), "{\"run_id\":").unwrap();
    let intact = std::fs::metadata(dir.join(JOURNAL_FILE)).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(JOURNAL_FILE))
        .unwrap()
        .write_all(b"{\"ts_ms\":9")
        .unwrap();

    let resumed = store.resume_run(&lock).unwrap();
    let journal = read_journal(&dir.join(JOURNAL_FILE)).unwrap();
    assert_eq!(journal.torn_tail, None, "the torn tail was cut off");
    let replayed = RunState::replay(&journal.records).unwrap();
    assert_eq!(resumed.state(), &replayed);
    assert_eq!(
        (
            resumed.recovery().snapshot_rebuilt,
            resumed.recovery().torn_tail.clone()
        ),
        (
            true,
            Some(TornTail {
                line: 9,
                offset: intact,
                len: 10
            })
        ),
        "resume reports what it repaired"
    );
    assert_eq!(
        read_snapshot(&dir.join(SNAPSHOT_FILE)).unwrap(),
        Some(replayed.clone()),
        "state.json is rebuilt from the journal"
    );
    assert!(
        !dir.join("state.json.tmp").exists(),
        "the stale temp was replaced"
    );
    assert_eq!(
        replayed
            .open_tool_calls
            .iter()
            .map(|c| (c.call_id.as_str(), c.mutating))
            .collect::<Vec<_>>(),
        vec![("call_2", true), ("call_3", false)],
        "started-but-unfinished calls are visible to resume, to be reported not rerun"
    );
}

#[test]
fn resume_rewrites_a_snapshot_older_than_the_journal_and_keeps_a_current_one() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let id = run_id(0);
    let lock = RepoLock::acquire(git_dir.path(), id.as_str()).unwrap();
    let mut run = store.create_run(&lock, start("t")).unwrap();
    run.append_record(&full_journal(&id)[1]).unwrap();
    // Checkpoint-like records do not rewrite the snapshot, so it falls behind.
    run.append_record(&full_journal(&id)[3]).unwrap();
    let dir = run.dir().to_path_buf();
    drop(run);
    let stale = read_snapshot(&dir.join(SNAPSHOT_FILE)).unwrap().unwrap();
    assert_eq!(
        stale.journal_records, 2,
        "precondition: the snapshot is behind"
    );

    let resumed = store.resume_run(&lock).unwrap();
    assert!(resumed.recovery().snapshot_rebuilt);
    assert_eq!(
        read_snapshot(&dir.join(SNAPSHOT_FILE)).unwrap().as_ref(),
        Some(resumed.state())
    );
    assert_eq!(resumed.state().journal_records, 3);
    drop(resumed);
    let again = store.resume_run(&lock).unwrap();
    assert!(
        !again.recovery().snapshot_rebuilt,
        "a current snapshot is not rewritten"
    );
}

#[test]
fn resume_refuses_a_finished_run_and_an_unknown_one() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let lock = RepoLock::acquire(git_dir.path(), run_id(0).as_str()).unwrap();
    let mut run = store.create_run(&lock, start("t")).unwrap();
    run.append(Entry::RunFinished {
        status: RunOutcome::Finished,
        applied: true,
        result_commit: None,
        error: None,
    })
    .unwrap();
    drop(run);
    let err = store.resume_run(&lock).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::AlreadyFinished {
                status: RunStatus::Finished,
                ..
            }
        ),
        "got {err:?}"
    );
    drop(lock);

    let other = RepoLock::acquire(git_dir.path(), run_id(1).as_str()).unwrap();
    let err = store.resume_run(&other).unwrap_err();
    assert!(
        matches!(&err, StoreError::RunNotFound { run_id: id, .. } if id == &run_id(1)),
        "got {err:?}"
    );
}

#[test]
fn list_runs_is_oldest_first_with_each_status() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    assert_eq!(
        store.list_runs().unwrap(),
        vec![],
        "no runs directory, no runs"
    );

    let finish = |status| Entry::RunFinished {
        status,
        applied: false,
        result_commit: None,
        error: None,
    };
    // Created out of order; listed by id, which is start time.
    let plan: Vec<(i64, Option<Entry>)> = vec![
        (
            30,
            Some(Entry::Paused {
                reason: "budget".into(),
            }),
        ),
        (10, Some(finish(RunOutcome::Finished))),
        (20, Some(finish(RunOutcome::Failed))),
        (40, None),
    ];
    for (second, last) in plan {
        let lock = RepoLock::acquire(git_dir.path(), run_id(second).as_str()).unwrap();
        let mut run = store
            .create_run(&lock, start(&format!("task {second}")))
            .unwrap();
        if let Some(entry) = last {
            run.append(entry).unwrap();
        }
        lock.release().unwrap();
    }
    // A run directory whose journal is damaged mid-file.
    let broken = store.run_dir(&run_id(50));
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join(JOURNAL_FILE), "garbage\n{}\n").unwrap();
    // Things in the runs directory that are not runs.
    std::fs::create_dir_all(store.runs_dir().join(format!(".{}.tmp", run_id(5)))).unwrap();
    std::fs::write(store.runs_dir().join("README"), "x").unwrap();
    // The live run, holding the lock while we list.
    let live = RepoLock::acquire(git_dir.path(), run_id(60).as_str()).unwrap();
    drop(store.create_run(&live, start("task 60")).unwrap());

    let runs = store.list_runs().unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| (r.run_id.clone(), r.status))
            .collect::<Vec<_>>(),
        vec![
            (run_id(10), RunStatus::Finished),
            (run_id(20), RunStatus::Failed),
            (run_id(30), RunStatus::Paused),
            (run_id(40), RunStatus::Interrupted),
            (run_id(50), RunStatus::Unreadable),
            (run_id(60), RunStatus::Running),
        ],
        "oldest first; a running journal without a live lock holder is interrupted"
    );
    let problem = runs[4].problem.clone().unwrap_or_default();
    assert!(
        problem.contains("line 1") && problem.contains(JOURNAL_FILE),
        "an unreadable run says why: {problem}"
    );
    let paused = runs[2].details.clone().unwrap();
    assert_eq!(
        (paused.task.as_str(), paused.pause_reason.as_deref()),
        ("task 30", Some("budget"))
    );

    let json = serde_json::to_value(&runs).unwrap();
    assert_eq!(
        (
            json[0]["run_id"].clone(),
            json[0]["status"].clone(),
            json[3]["status"].clone()
        ),
        (
            json!(run_id(10).as_str()),
            json!("finished"),
            json!("interrupted")
        ),
        "`grove runs --json`: an array of objects with run_id and status"
    );
    assert_eq!(json[4]["status"], json!("unreadable"));
    assert_eq!(
        json[0]["task"],
        json!("task 10"),
        "details are flattened in"
    );
}

// ---------------------------------------------------------------------------------------
// Lock

#[test]
fn a_second_acquirer_in_the_same_process_is_refused_naming_the_first_run() {
    let git_dir = tempfile::tempdir().unwrap();
    let first = RepoLock::acquire(git_dir.path(), run_id(0).as_str()).unwrap();
    assert_eq!(first.taken_over(), None, "a fresh lock takes nothing over");
    let err = RepoLock::acquire(git_dir.path(), run_id(1).as_str()).unwrap_err();
    match &err {
        LockError::Busy { holder, .. } => assert_eq!(holder, first.holder()),
        other => panic!("expected Busy, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(run_id(0).as_str())
            && message.contains(&format!("pid {}", std::process::id())),
        "the refusal names the running run and its pid: {message}"
    );
    assert_eq!(
        read_holder(git_dir.path()).unwrap().as_ref(),
        Some(first.holder()),
        "a refused acquirer does not disturb the holder record"
    );
    drop(first);
    let second = RepoLock::acquire(git_dir.path(), run_id(1).as_str()).unwrap();
    assert_eq!(
        second.taken_over(),
        None,
        "a dropped lock is released cleanly"
    );
}

#[test]
fn a_second_acquirer_in_another_process_is_refused_naming_the_first_run() {
    let git_dir = tempfile::tempdir().unwrap();
    let held = RepoLock::acquire(git_dir.path(), run_id(0).as_str()).unwrap();
    let mut child = spawn_child("try-lock", git_dir.path(), &run_id(1));
    let mut lines = child_lines(&mut child);
    let report = lines.next().expect("the child reports its attempt");
    assert!(
        report.starts_with("refused grove run ")
            && report.contains(run_id(0).as_str())
            && report.contains(&format!("pid {}", std::process::id())),
        "the other process is refused with our run id and pid: {report}"
    );
    assert!(child.wait().unwrap().success());
    assert_eq!(
        read_holder(git_dir.path()).unwrap().as_ref(),
        Some(held.holder())
    );
}

#[test]
fn a_lock_left_by_a_killed_process_is_taken_over_and_reported() {
    let git_dir = tempfile::tempdir().unwrap();
    let store = RunStore::new(git_dir.path());
    let child_run = run_id(0);
    let mut child = spawn_child("hold-lock", git_dir.path(), &child_run);
    let child_pid = child.id();
    let mut lines = child_lines(&mut child);
    assert_eq!(
        lines.next().as_deref(),
        Some("holding"),
        "the child took the lock"
    );

    let err = RepoLock::acquire(git_dir.path(), run_id(1).as_str()).unwrap_err();
    let LockError::Busy { holder, .. } = &err else {
        panic!("expected Busy while the child lives, got {err:?}");
    };
    let child_holder = holder.clone();
    assert_eq!(
        (
            child_holder.run_id.as_str(),
            child_holder.pid,
            child_holder.hostname.clone()
        ),
        (child_run.as_str(), child_pid, this_hostname()),
        "the refusal names the child's run and pid"
    );
    assert_eq!(
        status_of(&store, &child_run),
        RunStatus::Running,
        "a run whose process holds the lock is running"
    );

    child.kill().unwrap(); // SIGKILL: no destructor runs, the record stays in the file.
    child.wait().unwrap();

    assert_eq!(
        status_of(&store, &child_run),
        RunStatus::Interrupted,
        "a running journal whose lock holder died is interrupted"
    );
    let lock = RepoLock::acquire(git_dir.path(), run_id(1).as_str()).unwrap();
    assert_eq!(
        lock.taken_over(),
        Some(&StaleLock::Holder(child_holder)),
        "the takeover is reported with the dead holder's record"
    );
    let report = lock
        .taken_over()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        report.contains(child_run.as_str()) && report.contains(&format!("pid {child_pid}")),
        "the takeover message names the dead run and pid: {report}"
    );
    assert_eq!(
        read_holder(git_dir.path()).unwrap().as_ref(),
        Some(lock.holder()),
        "the lock file now names the new holder"
    );
    assert_eq!(status_of(&store, &child_run), RunStatus::Interrupted);
}

#[test]
fn a_journal_writer_killed_mid_write_loses_no_record_it_reported_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_child("append-forever", dir.path(), &run_id(0));
    let mut lines = child_lines(&mut child);
    let mut reported = 0u64;
    for line in lines.by_ref() {
        reported = parse_durable(&line);
        if reported >= 50 {
            break;
        }
    }
    assert!(
        reported >= 50,
        "the child appended records before it was killed"
    );
    child.kill().unwrap();
    // Lines already in the pipe were reported before the kill.
    for line in lines {
        reported = parse_durable(&line);
    }
    child.wait().unwrap();

    let contents = read_journal(&dir.path().join(JOURNAL_FILE)).unwrap();
    let written = contents.records.len() as u64;
    assert!(
        (reported..=reported + 1).contains(&written),
        "every record reported durable ({reported}) is there, and at most the one being \
         reported when the kill landed is extra ({written} read)"
    );
    let expected: Vec<Record> = (0..written).map(numbered_record).collect();
    assert_eq!(
        contents.records, expected,
        "records read back intact and in order"
    );
}

fn status_of(store: &RunStore, run: &RunId) -> RunStatus {
    let runs = store.list_runs().unwrap();
    let found = runs
        .iter()
        .find(|r| &r.run_id == run)
        .expect("the run is listed");
    found.status
}

fn numbered_record(n: u64) -> Record {
    at(
        n,
        Entry::Checkpoint {
            subtask: SubtaskId(1),
            commit: CommitId::parse(&format!("{n:040x}")).unwrap(),
            turn: u32::try_from(n).unwrap(),
        },
    )
}

fn parse_durable(line: &str) -> u64 {
    line.strip_prefix("durable ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected child line: {line}"))
}

// ---------------------------------------------------------------------------------------
// Child processes

fn spawn_child(mode: &str, dir: &Path, run: &RunId) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "suite::run_state::child_process_helper",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_MODE, mode)
        .env(CHILD_DIR, dir)
        .env(CHILD_RUN_ID, run.as_str())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The child's reports, with the test harness's own output filtered out.
fn child_lines(child: &mut Child) -> impl Iterator<Item = String> + use<> {
    let stdout: ChildStdout = child.stdout.take().unwrap();
    BufReader::new(stdout).lines().filter_map(|line| {
        let line = line.unwrap();
        line.find(MARKER)
            .map(|at| line[at + MARKER.len()..].to_string())
    })
}

/// Not a test: the helper program the cross-process tests run. It does nothing unless
/// `GROVE_RUN_STATE_CHILD` names a mode.
#[test]
#[ignore = "helper process for the cross-process run-state tests"]
fn child_process_helper() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(CHILD_DIR).unwrap());
    let run = std::env::var(CHILD_RUN_ID).unwrap();
    match mode.as_str() {
        "try-lock" => match RepoLock::acquire(&dir, &run) {
            Ok(_) => println!("{MARKER}acquired"),
            Err(err) => println!("{MARKER}refused {err}"),
        },
        "hold-lock" => {
            let lock = RepoLock::acquire(&dir, &run).unwrap();
            drop(
                RunStore::new(&dir)
                    .create_run(&lock, start("child"))
                    .unwrap(),
            );
            println!("{MARKER}holding");
            // Hold until killed, or until the parent goes away and closes our stdin.
            let mut sink = String::new();
            let _ = std::io::stdin().read_line(&mut sink);
        }
        "append-forever" => {
            let mut journal = Journal::create(&dir.join(JOURNAL_FILE)).unwrap();
            for n in 0..1_000_000 {
                journal.append(&numbered_record(n)).unwrap();
                // Printed only once `append` returned: the record is durable.
                println!("{MARKER}durable {}", n + 1);
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A journal as grove wrote it before its options were typed (main at 76a8d80, byte for
/// byte): a run the model API's outage paused before the lead's first answer, in the
/// sealed `repo_with_rules` repository, whose commit ids are fixed.
const JOURNAL_BEFORE_TYPED_OPTIONS: &str = include_str!("fixtures/paused_run.journal.jsonl");

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grove_resume_finishes_a_run_journaled_before_options_were_typed() {
    use crate::support::requests::{Who, who};
    use crate::support::scripted_run::{repo_with_rules, scripted_server};

    let fixture = repo_with_rules();
    assert_eq!(
        fixture.rev("HEAD").to_string(),
        "7c6fc19736fcb32873aceaf39f7cb3012df150f5",
        "the sealed repository is the one the journal was written in"
    );
    let run_id = "20261201-084722-0491";
    let run_dir = fixture.repo.join(".git/grove/runs").join(run_id);
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join(JOURNAL_FILE), JOURNAL_BEFORE_TYPED_OPTIONS).unwrap();

    let server = scripted_server(&[("Shout.\nWRITE src/a.txt ALPHA", None)]).await;
    let output = crate::support::grove::Grove::in_repo(&fixture)
        .with_server(&server)
        .grove_async(["resume", run_id, "--json"])
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "grove resume: {stderr}");
    server.assert_no_violations();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (
            report["run_id"].clone(),
            report["status"].clone(),
            report["applied"].clone(),
            report["subtasks"][0]["status"].clone()
        ),
        (
            json!(run_id),
            json!("finished"),
            json!(true),
            json!("merged")
        ),
        "the old run resumes and ends like a new one: {report:#}"
    );
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
    let models: Vec<(Who, String)> = server
        .requests()
        .iter()
        .map(|r| {
            (
                who(r),
                r.body["model"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        models.iter().all(|(who, model)| *model
            == match who {
                Who::Lead => "lead-model",
                Who::Worker => "worker-model",
                Who::Reviewer => "reviewer-model",
            }),
        "every role uses the model the old journal recorded for it: {models:?}"
    );

    let state = RunStore::new(&fixture.repo.join(".git"))
        .read_state(&run_id.parse().unwrap())
        .unwrap();
    let options = state.options.get().unwrap();
    assert_eq!(
        (options.jobs, options.max_subtasks, options.apply),
        (3, 16, true),
        "the old journal's options read back typed"
    );
}
