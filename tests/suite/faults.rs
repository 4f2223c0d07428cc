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

use grove::git::CommitId;
use grove::model::Provider;
use grove::store::journal::{Entry, SubtaskOutcome, read_journal};
use grove::store::lock::RepoLock;
use grove::store::snapshot::read_snapshot;
use grove::store::state::RunState;
use grove::store::{JOURNAL_FILE, RunId, RunStart, RunStore, SNAPSHOT_FILE};
use grove::tools::{LocalExecutor, ToolContext, ToolOutput, ToolSet, builtin_with_executor};
use tokio_util::sync::CancellationToken;

use crate::support::entries;
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
    let squashed = format!("grove/{}/squashed", report.run_id);
    let result = report.result_commit.clone().unwrap();
    assert_eq!(
        parents.split_whitespace().collect::<Vec<_>>(),
        vec![user_commit.to_string(), fixture.rev(&squashed).to_string()],
        "the applied commit merges the run's squashed history onto the user's commit"
    );
    assert_eq!(
        (
            fixture.rev(&format!("{squashed}~1")).to_string(),
            fixture.git(&["rev-parse", &format!("{squashed}^{{tree}}")]),
        ),
        (
            report.base.clone(),
            fixture.git(&["rev-parse", &format!("{result}^{{tree}}")]),
        ),
        "that history is one commit on the run's base holding the result's tree"
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
        (
            format!(
                "refs/heads/grove/{0}/result\nrefs/heads/grove/{0}/squashed",
                report.run_id
            ),
            1
        ),
        "worktrees registered ahead for subtasks the lead never delegated are removed; \
         the result and its squashed history are the only branches left"
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
        Some(format!("git merge grove/{}/squashed", report.run_id).as_str()),
        "the command applies what grove would have: the squashed history"
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
    let ctx = ToolContext::plain(root.clone(), CancellationToken::new());
    let call = |tool: &'static str, input: serde_json::Value| {
        let tools = &tools;
        let ctx = &ctx;
        async move { tools.dispatch(tool, input, ctx).await.unwrap() }
    };
    const BOUND: usize = 64 * 1024;

    assert_eq!(
        call("read_file", json!({"path": "huge.log"})).await,
        ToolOutput::ok(format!(
            "     1\tneedle at the start\n     2\t{} … [{} more bytes on this line: bash \
             `sed -n 2p huge.log | cut -b 501-` shows them]\n\
             [`huge.log` is binary: only its first 1048576 of 2147483648 bytes are read here; \
             use bash (e.g. `xxd -s OFFSET -l 512`) for the rest]\n\
             [1 line(s) longer than 2000 bytes (500 when written out) were cut; use bash (e.g. \
             `cut -c`) to see the rest]\n\
             [`huge.log` holds NUL bytes, so git calls it binary; line 2 is written out: a \
             control character or a byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n",
            "\\x00".repeat(500),
            1024 * 1024 - 20 - 500,
        )),
        "a 2 GB file of NULs is shown written out from its start, and read no further than \
         its first MiB"
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
        ToolOutput::ok(
            "     1\t\\x00\\x9f\\x92\\x96\\x00\\x01\\x02\\x03\n\
             [`blob.bin` holds NUL bytes, so git calls it binary; line 1 is written out: a \
             control character or a byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n"
        ),
        "a binary file's bytes are shown written out, never 'not shown'"
    );
}

fn run_start() -> RunStart {
    RunStart {
        task: "fill the disk".into(),
        base: CommitId::parse(&"a".repeat(40)).unwrap(),
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
    entries::subtask_started(n, &"x".repeat(700), &format!("grove/run/{n}"))
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
    use crate::support::grove::{Grove, grove_in as grove, stderr, wait_in_worktrees};
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
    wait_in_worktrees(&fixture, "marker", b"started\n").await;
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

/// The one run directory of `fixture` (the test started a single run).
fn only_run_dir(fixture: &GitFixture) -> std::path::PathBuf {
    let runs: Vec<_> = std::fs::read_dir(fixture.repo.join(".git/grove/runs"))
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "the test started one run: {runs:?}");
    runs.into_iter().next().unwrap()
}

/// Issue 12 item 14: a lead that ends without ever calling a tool — the task already
/// done, a refusal, a paused turn then an answer, an empty answer, a budget stop — ends
/// the run with exit 3 (nothing was delegated), and its transcript and end file exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_that_ends_without_any_tool_call_exits_3_and_keeps_its_transcript() {
    use crate::support::fake_server::Turn;
    use crate::support::grove::{grove_in, stderr};
    let endings: Vec<(&str, Vec<Reply>, Vec<&str>)> = vec![
        (
            "already done",
            vec![Turn::text("The task is already done.").into()],
            vec![],
        ),
        (
            "refusal",
            vec![Turn::text("I will not do that.").stop("refusal").into()],
            vec![],
        ),
        (
            "pause_turn",
            vec![
                Turn::text("Let me think.").stop("pause_turn").into(),
                Turn::text("Nothing needs changing.").into(),
            ],
            vec![],
        ),
        ("empty content", vec![Turn::new().into()], vec![]),
        (
            "budget stop",
            vec![
                Turn::text("Thinking hard.")
                    .stop("pause_turn")
                    .usage(5000, 10, 0, 0)
                    .into(),
            ],
            vec!["--budget-tokens", "100"],
        ),
    ];
    for (ending, replies, flags) in endings {
        let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
        let before = fixture.user_state();
        let server = FakeServer::with_script(replies).await;
        let mut args = vec!["run"];
        args.extend(flags);
        args.push("change a");
        let output = grove_in(&fixture, Some(&server), &args).await;
        let err = stderr(&output);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{ending}: a lead that delegated nothing finishes with exit 3\n{err}"
        );
        assert!(
            !err.contains("No such file or directory"),
            "{ending}: no file write fails\n{err}"
        );
        let run_dir = only_run_dir(&fixture);
        let transcript = run_dir.join("transcripts/lead-lead.json");
        let saved = grove::store::transcript::load(&transcript)
            .unwrap()
            .unwrap_or_else(|| panic!("{ending}: the lead's transcript is saved\n{err}"));
        // An empty answer adds no message: the transcript then holds the task alone.
        let least = if ending == "empty content" { 1 } else { 2 };
        assert!(
            saved.messages.len() >= least,
            "{ending}: the transcript holds the task and the lead's answer: {:?}",
            saved.messages
        );
        assert!(
            grove::store::transcript::load_end(&grove::store::transcript::end_path(&transcript))
                .unwrap()
                .is_some(),
            "{ending}: the lead's end file is saved\n{err}"
        );
        assert_eq!(
            fixture.user_state(),
            before,
            "{ending}: the user's branch and tree are untouched"
        );
    }
}

/// A server whose lead delegates one subtask, whose worker makes one call (`call`, then
/// ends) and whose reviewer approves.
async fn one_call_server(call: (&'static str, serde_json::Value)) -> FakeServer {
    use crate::support::fake_server::Turn;
    use crate::support::scripted_run::{answered, usage};
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Write the files.", None)]),
        Who::Worker if answered(request) => usage(Turn::text("WORKER-FINAL: done.")).into(),
        Who::Worker => usage(Turn::text("Writing.").tool_use("w1", call.0, call.1.clone())).into(),
        Who::Reviewer => reviewer_reply(request),
    })
    .await
}

/// The commits of the run's result branch and archives that hold `path`.
fn kept_anywhere(fixture: &GitFixture, run_id: &str, path: &str) -> Vec<String> {
    let refs = fixture.git(&[
        "for-each-ref",
        "--format=%(refname)",
        &format!("refs/heads/grove/{run_id}/result"),
        &format!("refs/grove/archive/{run_id}/"),
    ]);
    refs.lines()
        .filter(|reference| {
            sealed_git_ok(fixture, &["cat-file", "-e", &format!("{reference}:{path}")])
        })
        .map(str::to_owned)
        .collect()
}

fn sealed_git_ok(fixture: &GitFixture, args: &[&str]) -> bool {
    crate::support::git_fixture::sealed_command(&fixture.home(), &fixture.repo, args)
        .output()
        .unwrap()
        .status
        .success()
}

/// Issue 12 item 11, sparse checkout: worktrees inherit the cone, so `git add --all`
/// refused a worker's file outside it and the work was lost with its branch. Now the file
/// is staged (`--sparse`), committed, reviewed and merged, and no worktree stays behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_file_outside_a_sparse_checkout_cone_is_kept_never_lost() {
    let fixture = GitFixture::with_files(&[("in/a.txt", "a\n"), ("out/b.txt", "b\n")]);
    fixture.git(&["sparse-checkout", "set", "in"]);
    let server = one_call_server((
        "write_file",
        json!({ "path": "out/new.txt", "content": "NEW\n" }),
    ))
    .await;

    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();

    assert_eq!(
        kept_anywhere(&fixture, &report.run_id, "out/new.txt"),
        vec![format!("refs/heads/grove/{}/result", report.run_id)],
        "the file outside the cone is committed and merged into the result: {:?}",
        report.subtasks
    );
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    assert_eq!(
        fixture
            .git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
        1,
        "no worktree stays registered"
    );
}

/// Issue 12 item 11, a path git refuses (`x/git~1/y`, a `.git` under its NTFS short
/// name): everything else is committed and archived, and the worktree holding the refused
/// file is kept with its branch — never removed — and `grove clean` lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_path_git_refuses_to_record_keeps_the_worktree_and_grove_clean_lists_it() {
    use crate::support::grove::{grove_in, stderr};
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = one_call_server((
        "bash",
        json!({ "command": "mkdir -p 'x/git~1' && echo refused > 'x/git~1/y' && echo ok > ok.txt" }),
    ))
    .await;

    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    let run_id = report.run_id.clone();

    assert_eq!(
        kept_anywhere(&fixture, &run_id, "ok.txt"),
        vec![format!("refs/grove/archive/{run_id}/1")],
        "what git can record is archived, never merged half: {:?}",
        report.subtasks
    );
    let worktree = fixture.worktree_dir(&run_id, 1);
    assert_eq!(
        std::fs::read(worktree.join("x/git~1/y")).ok(),
        Some(b"refused\n".to_vec()),
        "the refused file stays in its kept worktree"
    );
    let clean = grove_in(&fixture, None, &["clean", &run_id]).await;
    let out = String::from_utf8_lossy(&clean.stdout).into_owned();
    assert!(
        out.contains(&format!("kept worktree {}", worktree.display())) && out.contains("x/git~1/y"),
        "grove clean lists the kept worktree and the refused file:\n{out}\n{}",
        stderr(&clean)
    );
    assert!(
        worktree.join("x/git~1/y").exists(),
        "grove clean does not delete the file git cannot record"
    );
}

/// Issue 12 item 1, wired into the pipeline: paths that lead into git data (a link to
/// `.git`, a nested repository) are left out of the commit, flagged to the reviewer and
/// listed in the subtask's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn links_into_git_data_are_flagged_to_the_reviewer_and_listed_in_the_result() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = one_call_server((
        "bash",
        json!({ "command": "ln -s .git gp && mkdir nested && git -C nested init -q && echo ok > ok.txt" }),
    ))
    .await;

    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();

    let left_out = &report.subtasks[0].left_out;
    assert!(
        left_out.iter().any(|p| p == "gp") && left_out.iter().any(|p| p.starts_with("nested")),
        "the link and the nested repository are listed in the result: {:?}",
        report.subtasks
    );
    let review = server
        .requests()
        .into_iter()
        .find(|request| who(request) == Who::Reviewer)
        .expect("the subtask was reviewed");
    let brief = crate::support::scripted_run::first_user_text(&review);
    assert!(
        brief.contains("left out of the commit") && brief.contains("- gp\n"),
        "the reviewer is told about the link:\n{brief}"
    );
    assert!(
        !sealed_git_ok(
            &fixture,
            &[
                "cat-file",
                "-e",
                &format!("refs/heads/grove/{}/result:gp", report.run_id)
            ]
        ),
        "the link never reaches the result"
    );
}

/// The bytes free on the file system holding `dir`.
fn free_bytes(dir: &Path) -> u64 {
    let output = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Fills the file system holding `dir` with `dir/filler` until `left` bytes are free.
fn fill_leaving(dir: &Path, left: u64) -> std::path::PathBuf {
    let filler = dir.join("filler");
    let size = free_bytes(dir).saturating_sub(left);
    let file = std::fs::File::create(&filler).unwrap();
    // tmpfs has no fallocate limit trick: write real zeros, in one go.
    std::io::Write::write_all(&mut &file, &vec![0u8; usize::try_from(size).unwrap()]).ok();
    file.sync_all().ok();
    filler
}

/// Issue 12 item 10 (row 13, end to end): the repository and the worktrees on a small
/// disk, filled to leave 150 KB and then 500 KB free. The run pauses — exit 1 with the
/// `grove resume RUN_ID` line, `paused` in the journal and `grove runs` — and the user's
/// branch is untouched; once space is freed, `grove resume` merges and applies it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_pauses_the_run_and_resume_finishes_it_once_space_is_freed() {
    use crate::support::grove::{Grove, stderr};
    if !running_as_root() {
        eprintln!("skipped: a small filesystem needs root to mount");
        return;
    }
    for left in [150 * 1024, 500 * 1024] {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk");
        std::fs::create_dir_all(&disk).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let _mounted = SmallFilesystem::mount(&disk, "24m").expect("root mounts a tmpfs");
        let repo = disk.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let fixture = GitFixture { dir, repo };
        fixture.git(&["init", "--quiet", "--initial-branch=main"]);
        fixture.write("src/a.txt", "alpha\n");
        fixture.write("src/b.txt", "beta\n");
        fixture.commit_all("initial");
        let before = fixture.user_state();
        // With 500 KB free, a file of 160 KB (in the brief, the transcripts, the object
        // store and the merge) fills the disk later in the run.
        let big = if left > 200 * 1024 {
            "A".repeat(160 * 1024)
        } else {
            "ALPHA".to_owned()
        };
        let brief_a: &'static str =
            Box::leak(format!("Shout a.\nWRITE src/a.txt {big}").into_boxed_str());
        let briefs: &'static [(&'static str, Option<&'static str>)] = Box::leak(
            vec![(brief_a, None), ("Shout b.\nWRITE src/b.txt BETA", None)].into_boxed_slice(),
        );
        let server = FakeServer::with_responder(move |request| match who(request) {
            Who::Lead => redelegate(request, briefs).unwrap_or_else(|| lead_reply(request, briefs)),
            // A write reported as interrupted (the run paused while it was pending) is
            // made again, as a model would; the call itself is never re-run by grove.
            Who::Worker
                if request.tool_results().last().is_some_and(|(_, text)| {
                    text.contains(grove::store::transcript::INTERRUPTED_CALL)
                }) =>
            {
                redo_write(&crate::support::scripted_run::first_user_text(request))
            }
            Who::Worker => worker_reply(request),
            Who::Reviewer => reviewer_reply(request),
        })
        .await;
        let grove = Grove::in_repo(&fixture)
            .with_server(&server)
            .env("XDG_CACHE_HOME", disk.join("cache"));
        let filler = fill_leaving(&disk, left);

        let output = grove.grove_async(["run", "--jobs", "2", "shout"]).await;
        let err = stderr(&output);
        let run_dir = only_run_dir(&fixture);
        let run_id = run_dir.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            output.status.code(),
            Some(1),
            "{left} B free: a full disk pauses the run (exit 1)\n{err}"
        );
        assert!(
            err.contains(&format!("grove resume {run_id}"))
                && (err.contains("disk is full") || err.contains("No space left on device")),
            "{left} B free: the message says the disk is full and names the resume command\n{err}"
        );
        assert_eq!(
            fixture.user_state(),
            before,
            "{left} B free: the user's branch and tree are untouched"
        );
        let runs = grove.grove_async(["runs"]).await;
        let listed = String::from_utf8_lossy(&runs.stdout).into_owned();
        assert!(
            listed
                .lines()
                .any(|line| line.starts_with(&run_id) && line.contains("paused")),
            "{left} B free: `grove runs` shows the run paused:\n{listed}"
        );

        std::fs::remove_file(&filler).unwrap();
        let resumed = grove.grove_async(["resume", &run_id]).await;
        let err = stderr(&resumed);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "{left} B free, then freed: the resume merges everything\n{err}\n{}",
            std::fs::read_to_string(run_dir.join(JOURNAL_FILE)).unwrap_or_default()
        );
        assert_eq!(
            (fixture.read("src/a.txt"), fixture.read("src/b.txt")),
            (format!("{big}\n").into_bytes(), b"BETA\n".to_vec()),
            "{left} B free, then freed: both subtasks are applied\n{err}"
        );
    }
}

/// A lead's answer to delegations reported as interrupted or never recorded (the disk
/// filled as the first run journaled them, so they never started): it delegates each again, once, as a model
/// would; grove never re-runs a call itself. `None` when there is none to redo.
fn redelegate(request: &RecordedRequest, briefs: &[(&str, Option<&str>)]) -> Option<Reply> {
    use crate::support::fake_server::Turn;
    let results = request.tool_results();
    let redone = |index: usize| {
        let id = format!("lead_redo_{index}");
        results.iter().any(|(answered, _)| *answered == id)
    };
    let interrupted: Vec<usize> = results
        .iter()
        .filter(|(_, text)| {
            text.contains(grove::store::transcript::INTERRUPTED_CALL)
                || text.contains(grove::run::lead::UNRECORDED_DELEGATION)
        })
        .filter_map(|(id, _)| id.strip_prefix("lead_call_")?.parse().ok())
        .filter(|index| !redone(*index))
        .collect();
    if interrupted.is_empty() {
        return None;
    }
    let mut turn = Turn::text("Delegating again.");
    for index in interrupted {
        let (brief, _) = briefs[index];
        turn = turn.tool_use(
            &format!("lead_redo_{index}"),
            "delegate",
            json!({ "task": brief }),
        );
    }
    Some(crate::support::scripted_run::usage(turn).into())
}

/// The `write_file` call a `WRITE <path> <content>` brief asks for, made again after
/// the first was reported interrupted (a new call id: ids are unique per conversation).
fn redo_write(brief: &str) -> Reply {
    use crate::support::fake_server::Turn;
    let line = brief
        .lines()
        .rev()
        .find(|line| line.starts_with("WRITE "))
        .unwrap();
    let mut parts = line.splitn(3, ' ').skip(1);
    let (path, content) = (parts.next().unwrap(), parts.next().unwrap_or_default());
    crate::support::scripted_run::usage(Turn::text("Writing again.").tool_use(
        "worker_call_redo",
        "write_file",
        json!({ "path": path, "content": format!("{content}\n") }),
    ))
    .into()
}

/// Issue 31: the cache directory (where worktrees are checked out) on a disk too small
/// for the repository's 80 files. git says `unable to write file` once per file it could
/// not write; grove's pause says it once: the first such file, how many more, and the
/// space left where it was writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_checkout_on_a_full_disk_is_one_line_naming_the_file_and_the_free_space() {
    use crate::support::grove::{Grove, stderr};
    if !running_as_root() {
        eprintln!("skipped: a small filesystem needs root to mount");
        return;
    }
    let files: Vec<(String, String)> = (0..80)
        .map(|n| (format!("src/f{n:02}.txt"), format!("{n}\n").repeat(2_000)))
        .collect();
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let fixture = GitFixture::with_files(&files);
    let cache = fixture.dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let _mounted = SmallFilesystem::mount(&cache, "256k").expect("root mounts a tmpfs");
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/f00.txt ALPHA", None)]),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;

    let output = Grove::in_repo(&fixture)
        .with_server(&server)
        .env("XDG_CACHE_HOME", &cache)
        .grove_async(["run", "shout"])
        .await;

    let err = stderr(&output);
    let mentions: Vec<&str> = err
        .lines()
        .filter(|line| line.contains("unable to write file") || line.contains("could not write"))
        .collect();
    assert_eq!(
        output.status.code(),
        Some(1),
        "a full disk pauses the run: {err}"
    );
    assert_eq!(
        mentions.len(),
        1,
        "one line says what could not be written: {err}"
    );
    assert!(
        mentions[0].starts_with("grove: the disk is full: ")
            && mentions[0].contains("src/f")
            && mentions[0].contains(" free on ")
            && mentions[0].contains(&cache.display().to_string()),
        "it names the file and the space left where it was written: {}",
        mentions[0]
    );
}
