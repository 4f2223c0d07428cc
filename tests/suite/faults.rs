//! Issue 5's fault matrix, the rows not proven elsewhere: the user working on their
//! repository during a run, huge and binary files in every tool, and a disk that fills
//! while run state is written. Each test names the row it proves.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::Barrier;

use grove::model::Provider;
use grove::store::journal::{ContextMode, Entry, SubtaskOutcome, read_journal};
use grove::store::lock::RepoLock;
use grove::store::state::{RunState, read_snapshot};
use grove::store::{JOURNAL_FILE, RunId, RunStart, RunStore, SNAPSHOT_FILE};
use grove::tools::{LocalExecutor, ToolContext, ToolOutput, ToolSet, builtin_with_executor};
use tokio_util::sync::CancellationToken;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    USER_TASK, lead_reply, options, repo_with_rules, reviewer_reply, run, worker_reply,
};

/// A server whose one worker's first reply waits at `gate`, so the test can act on the
/// user's repository while the run is in flight.
async fn gated_server(brief: &'static str, gate: Arc<Barrier>) -> FakeServer {
    FakeServer::with_responder(move |request: &RecordedRequest| match who(request) {
        Who::Lead => lead_reply(request, &[(brief, None)]),
        Who::Worker if request.tool_results().is_empty() => Reply::Gated {
            gate: gate.clone(),
            reply: Box::new(worker_reply(request)),
        },
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await
}

/// Waits until the server has received a worker's request.
async fn worker_in_flight(server: &FakeServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !server.requests().iter().any(|r| who(r) == Who::Worker) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never called the model"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs the standard one-subtask script while `user_acts` works on the repository (once
/// the worker is in flight, before it goes on); returns the report and what it returned.
async fn run_while_the_user_works<T>(
    fixture: &GitFixture,
    user_acts: impl FnOnce(&GitFixture) -> T,
) -> (grove::run::RunReport, T) {
    let gate = Arc::new(Barrier::new(2));
    let server = gated_server("Shout.\nWRITE src/a.txt ALPHA", gate.clone()).await;
    let running = run(
        fixture,
        &server,
        Provider::Anthropic,
        options(fixture, USER_TASK),
    );
    let user = async {
        worker_in_flight(&server).await;
        let acted = user_acts(fixture);
        gate.wait().await;
        acted
    };
    let (report, acted) = tokio::join!(running, user);
    server.assert_no_violations();
    (report.unwrap(), acted)
}

const USER_EDIT: &[u8] = b"the user's edit\r\nwith CRLF and invalid UTF-8: \xff\xfe\n";

/// Rows 3 and 4: a commit and an uncommitted edit made while the run works are kept; the
/// result is merged on top of the user's commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_users_commit_and_edits_during_a_run_are_kept_byte_for_byte() {
    let fixture = repo_with_rules();
    let (report, user_commit) = run_while_the_user_works(&fixture, |fixture| {
        fixture.write("src/c.txt", "the user's gamma\n");
        let user_commit = fixture.commit_all("user: change gamma during the run");
        fixture.write("src/b.txt", USER_EDIT);
        fixture.write("scratch.txt", "untracked notes\n");
        user_commit
    })
    .await;

    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    assert!(
        report.applied,
        "a moved branch that does not conflict gets the result merged on top: {:?}",
        report.apply
    );
    let parents = fixture.git(&["log", "-1", "--format=%P", "HEAD"]);
    assert_eq!(
        parents.split_whitespace().collect::<Vec<_>>(),
        vec![
            user_commit.to_string(),
            report.result_commit.clone().unwrap()
        ],
        "the applied commit merges the run's result onto the user's commit"
    );
    assert_eq!(
        fixture.read("src/b.txt"),
        USER_EDIT,
        "the edit is untouched"
    );
    assert_eq!(fixture.read("scratch.txt"), b"untracked notes\n");
    assert_eq!(fixture.read("src/c.txt"), b"the user's gamma\n");
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
    assert_eq!(
        fixture.git(&["status", "--porcelain=v1", "--untracked-files=all"]),
        " M src/b.txt\n?? scratch.txt",
        "only the user's own changes are uncommitted"
    );
    assert_eq!(
        (
            fixture.git(&["for-each-ref", "--format=%(refname)", "refs/heads/grove/"]),
            fixture
                .git(&["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count()
        ),
        (format!("refs/heads/grove/{}/result", report.run_id), 1),
        "worktrees registered ahead for subtasks the lead never delegated are removed"
    );
}

/// Row 3, the other way: the user commits to the very lines the run changes; the apply is
/// refused, the user's commit stays the branch tip and the run's result waits on its
/// branch with the command that merges it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_users_commit_that_conflicts_with_the_result_refuses_the_apply() {
    let fixture = repo_with_rules();
    let (report, user_commit) = run_while_the_user_works(&fixture, |fixture| {
        fixture.write("src/a.txt", "the user's alpha\n");
        let user_commit = fixture.commit_all("user: change alpha during the run");
        fixture.write("src/b.txt", USER_EDIT);
        user_commit
    })
    .await;

    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    assert!(!report.applied, "a conflicting apply is refused");
    let apply = report.apply.clone().unwrap();
    assert!(
        apply.message.contains("src/a.txt"),
        "the refusal names the conflicting path: {}",
        apply.message
    );
    assert_eq!(
        apply.command.as_deref(),
        Some(format!("git merge grove/{}/result", report.run_id).as_str())
    );
    assert_eq!(
        fixture.rev("HEAD"),
        user_commit,
        "the user's commit stays the tip"
    );
    assert_eq!(fixture.read("src/a.txt"), b"the user's alpha\n");
    assert_eq!(
        fixture.read("src/b.txt"),
        USER_EDIT,
        "the edit is untouched"
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{}/result:src/a.txt", report.run_id)]),
        "ALPHA",
        "the run's work waits on its result branch"
    );
}

/// Row 9: a 2 GB file, a binary file and invalid UTF-8 through `read_file`, `grep` and
/// `bash cat`: every answer is bounded and says what was left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn huge_binary_and_invalid_utf8_files_get_bounded_answers_from_every_tool() {
    const HUGE: u64 = 2 * 1024 * 1024 * 1024;
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().canonicalize().unwrap();
    // Text first, then a sparse 2 GB hole of NULs.
    let huge = root.join("huge.log");
    std::fs::write(&huge, "needle at the start\n").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&huge)
        .unwrap()
        .set_len(HUGE)
        .unwrap();
    let line_count = 4 * 1024 * 1024;
    let lines: String = (1..=line_count)
        .map(|n| format!("needle {n:07}\n"))
        .collect();
    std::fs::write(root.join("lines.txt"), lines).unwrap();
    std::fs::write(root.join("blob.bin"), [0u8, 159, 146, 150, 0, 1, 2, 3]).unwrap();
    std::fs::write(root.join("latin1.txt"), b"caf\xe9 needle\n").unwrap();

    let tools = builtin_with_executor(
        ToolSet::Worker,
        Arc::new(LocalExecutor::with_env([(
            "PATH".into(),
            std::env::var_os("PATH").unwrap_or_default(),
        )])),
    );
    let ctx = ToolContext {
        root: root.clone(),
        cancel: CancellationToken::new(),
    };
    let call = |tool: &'static str, input: serde_json::Value| {
        let tools = &tools;
        let ctx = &ctx;
        async move { tools.dispatch(tool, input, ctx).await.unwrap() }
    };
    const BOUND: usize = 64 * 1024;

    assert_eq!(
        call("read_file", json!({"path": "huge.log"})).await,
        ToolOutput::ok("`huge.log` is a binary file, 2147483648 bytes; not shown"),
        "a 2 GB file of NULs is recognised as binary without reading it whole"
    );
    let read = call("read_file", json!({"path": "lines.txt"})).await;
    assert!(
        !read.is_error && read.content.len() < BOUND && read.content.contains("needle 0000001"),
        "read_file shows the start of a 64 MB text file within its cap: {} bytes",
        read.content.len()
    );

    let grep = call("grep", json!({"pattern": "needle"})).await;
    assert!(
        grep.content.len() < BOUND,
        "grep's answer is bounded: {} bytes",
        grep.content.len()
    );
    assert!(
        grep.content.contains("latin1.txt:1:caf\u{FFFD} needle"),
        "a match in invalid UTF-8 is shown lossily: {}",
        grep.content
    );

    let cat = call("bash", json!({"command": "cat huge.log", "timeout_s": 120})).await;
    assert!(
        cat.content.len() < BOUND,
        "bash output of 2 GB is cut to its head and tail: {} bytes",
        cat.content.len()
    );
    assert!(
        cat.content
            .contains("bytes of output cut here; 2147483648 bytes in total"),
        "the model is told how much was cut: {}",
        &cat.content[cat.content.len().saturating_sub(300)..]
    );

    assert_eq!(
        call("read_file", json!({"path": "blob.bin"})).await,
        ToolOutput::ok("`blob.bin` is a binary file, 8 bytes; not shown"),
    );
}

fn run_start() -> RunStart {
    RunStart {
        task: "fill the disk".into(),
        base: "a".repeat(40),
        branch: "refs/heads/main".into(),
        provider: "anthropic".into(),
        model: "m".into(),
        options: grove::run::RunOptions::default(),
    }
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// A small tmpfs mounted on `dir` for the life of the value.
struct SmallFilesystem<'a>(&'a Path);

impl<'a> SmallFilesystem<'a> {
    /// Mounts one, or says why it cannot (not root, no mount permission).
    fn mount(dir: &'a Path, size: &str) -> Result<Self, String> {
        let output = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|error| format!("cannot run mount: {error}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_owned());
        }
        Ok(Self(dir))
    }
}

impl Drop for SmallFilesystem<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0)
            .status();
    }
}

fn subtask_started(n: u32) -> Entry {
    Entry::SubtaskStarted {
        subtask: format!("S{n}"),
        task: "x".repeat(700),
        branch: format!("grove/run/{n}"),
        mode: ContextMode::Isolated,
        agent: "worker".into(),
    }
}

/// Row 13: the disk fills while run state is written. Every record reported durable is
/// read back, the snapshot is never torn, the failing write is reported with its path,
/// and once space is freed the same run resumes from exactly what was durable.
#[test]
fn a_disk_that_fills_while_state_is_written_keeps_the_previous_state_and_the_run_resumable() {
    let temp = tempfile::tempdir().unwrap();
    let git_dir = temp.path().join("git");
    std::fs::create_dir(&git_dir).unwrap();
    let _mounted = match SmallFilesystem::mount(&git_dir, "256k") {
        Ok(mounted) => mounted,
        Err(reason) if !running_as_root() => {
            eprintln!("skipped: a small filesystem needs root to mount ({reason})");
            return;
        }
        Err(reason) => panic!("root could not mount a tmpfs: {reason}"),
    };
    let store = RunStore::new(&git_dir);
    let id = RunId::from_parts(1_795_989_330, 0x0d15);
    let lock = RepoLock::acquire(&git_dir, id.as_str()).unwrap();
    let mut run = store.create_run(&lock, run_start()).unwrap();
    // Fill what is left but a little, so the next writes run out of space.
    let filler = git_dir.join("filler");
    let free = nix::sys::statvfs::statvfs(&git_dir).unwrap();
    let free_bytes = free.blocks_available() as u64 * free.fragment_size() as u64;
    std::fs::write(&filler, vec![7u8; (free_bytes - 6 * 1024) as usize]).unwrap();

    let mut durable = 0u32;
    let failure = loop {
        match run.append(subtask_started(durable + 1)) {
            Ok(_) => durable += 1,
            Err(error) => break error,
        }
        assert!(durable < 100, "the small filesystem never filled up");
    };
    let message = format!("{failure:#}");
    assert!(
        message.contains(git_dir.to_str().unwrap()) && message.contains("No space left"),
        "the error names the file and the cause: {message}"
    );
    let journal_path = run.dir().join(JOURNAL_FILE);
    let journal = read_journal(&journal_path).unwrap();
    assert_eq!(
        journal.torn_tail, None,
        "a failed append leaves no torn line"
    );
    assert_eq!(
        &RunState::replay(&journal.records).unwrap(),
        run.state(),
        "the state in memory is exactly what the journal holds durably"
    );
    let durable = run.state().subtasks.len() as u32;
    let snapshot: RunState = read_snapshot(&run.dir().join(SNAPSHOT_FILE))
        .unwrap()
        .expect("a snapshot is always in place");
    assert!(
        snapshot.subtasks.len() <= durable as usize,
        "the snapshot is whole and never ahead of the journal"
    );

    // Space comes back: the same process goes on, and a resume sees everything durable.
    std::fs::remove_file(&filler).unwrap();
    run.append(subtask_started(durable + 1)).unwrap();
    drop(run);
    let resumed = store.resume_run(&lock).unwrap();
    assert_eq!(
        resumed.state().subtasks.len(),
        durable as usize + 1,
        "resume folds every durable record and the one written after space came back"
    );
}

/// Row 2: Ctrl-C once stops the workers, checkpoints their work, exits 130 with the
/// command that continues, and `grove resume` finishes the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ctrl_c_once_checkpoints_exits_130_and_the_run_resumes() {
    use crate::support::fake_server::Turn;
    use crate::support::grove::{Grove, find_in_worktrees, grove_in as grove, stderr};
    use crate::support::requests::role;

    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(|request| {
        let results = request.tool_results();
        let turn = match (role(request), results.len()) {
            ("lead", 0) => {
                Turn::new().tool_use("d1", "delegate", json!({"task": "Write the marker."}))
            }
            // The first command is interrupted; after the resume, the worker writes again.
            ("worker", 0) => Turn::new().tool_use(
                "w1",
                "bash",
                json!({"command": "echo started > marker; sleep 30", "timeout_s": 60}),
            ),
            ("worker", 1) => Turn::new().tool_use(
                "w2",
                "write_file",
                json!({"path": "marker", "content": "finished\n"}),
            ),
            ("reviewer", 0) => Turn::new().tool_use(
                "r1",
                "submit_verdict",
                json!({"verdict": "approve", "summary": "the marker"}),
            ),
            _ => Turn::text("done"),
        };
        turn.usage(10, 2, 0, 0).into()
    })
    .await;

    let child = Grove::in_repo(&fixture)
        .with_server(&server)
        .spawn_piped(["run", "write the marker"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while find_in_worktrees(&fixture, "marker").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's command never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("grove stops promptly after one Ctrl-C")
        .unwrap();
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(130), "{message}");

    let runs = grove(&fixture, None, &["runs", "--json"]).await;
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&format!("grove resume {run_id}")),
        "the message says how to continue: {message}"
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{run_id}/1:marker")]),
        "started",
        "the interrupted worker's files are checkpointed on its branch"
    );

    let output = grove(&fixture, Some(&server), &["resume", "--json", &run_id]).await;
    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(fixture.read("marker"), b"finished\n");
}

/// Row 7: the API is down for the whole run, the lead's first call included: retries are
/// bounded, the run pauses with a message that says what happened and what to run, and
/// once the API is back `grove resume` finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outage_from_the_first_call_pauses_the_run_and_resume_finishes_it() {
    use grove::event::EventSink;
    use grove::run::RunEnd;

    use crate::support::scripted_run::{models, scripted_server};

    let fixture = repo_with_rules();
    let down = FakeServer::with_responder(|_| Reply::overloaded()).await;
    let report = tokio::time::timeout(
        Duration::from_secs(120),
        run(
            &fixture,
            &down,
            Provider::Anthropic,
            options(&fixture, USER_TASK),
        ),
    )
    .await
    .expect("an outage never hangs the run")
    .unwrap();
    down.assert_no_violations();
    assert_eq!(report.status, RunEnd::Paused, "{report:#?}");
    let error = report.error.clone().unwrap();
    assert!(
        error.contains("overloaded") && error.contains(&format!("grove resume {}", report.run_id)),
        "the message says what happened and what to run: {error}"
    );
    let attempts = down.requests().len();
    assert!(
        (2..=10).contains(&attempts),
        "retries are bounded: {attempts}"
    );
    assert_eq!(
        fixture.git(&["status", "--porcelain=v1", "--untracked-files=all"]),
        "",
        "the user's tree is untouched"
    );

    let up = scripted_server(&[("Shout.\nWRITE src/a.txt ALPHA", None)]).await;
    let resumed = grove::run::resume(
        &fixture.repo,
        &report.run_id,
        fixture.options(),
        |_| Ok(models(&up, Provider::Anthropic, true)),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    up.assert_no_violations();
    assert_eq!(
        (resumed.status, resumed.subtasks.len(), resumed.applied),
        (RunEnd::Finished, 1, true),
        "{resumed:#?}"
    );
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
}
