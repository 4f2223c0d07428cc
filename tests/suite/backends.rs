//! `--worker-backend`: other agent CLIs as workers, end to end. Each stand-in CLI (see
//! `support::fake_cli`) checks the exact argv and environment grove gives the real one
//! (its own credentials and no other secret, the brief and the project rules in the
//! prompt, a linked worktree), edits a file and prints a sample of that CLI's output;
//! the lead and the reviewer are grove's own, played by the fake model server. The
//! stand-ins also play what no real CLI can be made to do on cue (crash, hang, print
//! garbage). That the real, pinned binaries work with that argv is proven in
//! `suite::real_clis`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::agent::external::{BackendEnv, WorkerBackend};
use grove::event::{Event, EventSink};
use grove::ledger::Ledger;
use grove::model::Provider;
use grove::run::{Models, RunEnd, RunOptions, RunReport};
use grove::store::journal::{SubtaskOutcome, VerdictKind};

use crate::support::fake_cli::{self, FakeClis};
use crate::support::fake_server::{FakeServer, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::processes::{running_with_arg, settled};
use crate::support::requests::{Who, who};

pub(crate) const BRIEF: &str = "Make src/a.txt shout: replace alpha with ALPHA. BRIEF-MARK-7";
const BRIEF_MARK: &str = "BRIEF-MARK-7";
/// What every stand-in does to the worktree.
const EDIT: &str = "printf 'ALPHA\\n' > src/a.txt";

/// Lead delegates [`BRIEF`] once, then summarises; the reviewer approves. A request from
/// grove's own worker is answered, and the tests assert there is none.
pub(crate) async fn server() -> FakeServer {
    FakeServer::with_responder(|request| match who(request) {
        Who::Lead if request.tool_results().is_empty() => Turn::text("Delegating.")
            .tool_use("lead_call_0", "delegate", json!({ "task": BRIEF }))
            .usage(100, 10, 0, 0)
            .into(),
        Who::Lead => Turn::text("All done.").usage(100, 10, 0, 0).into(),
        Who::Reviewer if request.tool_results().is_empty() => Turn::new()
            .tool_use(
                "review_call_1",
                "submit_verdict",
                json!({ "verdict": "approve", "summary": "Does what the brief asks." }),
            )
            .usage(50, 5, 0, 0)
            .into(),
        Who::Reviewer => Turn::text("Verdict given.").usage(50, 5, 0, 0).into(),
        Who::Worker => Reply::from(Turn::text("BUILTIN-WORKER-CALLED")),
    })
    .await
}

fn models(server: &FakeServer) -> Models {
    crate::support::scripted_run::models(server, Provider::Anthropic, true)
}

pub(crate) fn repo() -> GitFixture {
    GitFixture::with_files(&[
        ("src/a.txt", "alpha\n"),
        ("src/b.txt", "beta\n"),
        ("AGENTS.md", "House rule: keep every line under 80 columns."),
    ])
}

fn options(fixture: &GitFixture, clis: &FakeClis, backend: WorkerBackend) -> RunOptions {
    RunOptions {
        jobs: 2,
        git: fixture.options(),
        worker_backend: backend,
        backend_env: Some(BackendEnv(clis.env(&fixture.home()))),
        ..RunOptions::new("USER-TASK: make a shout")
    }
}

/// Runs `options` to its end and returns the report and every event.
pub(crate) async fn run(
    fixture: &GitFixture,
    server: &FakeServer,
    options: RunOptions,
) -> (RunReport, Vec<Event>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = grove::run::run(
        &fixture.repo,
        options,
        models(server),
        EventSink::new(tx),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    (report, events)
}

fn transcripts_dir(fixture: &GitFixture, run_id: &str) -> PathBuf {
    fixture
        .repo
        .join(".git/grove/runs")
        .join(run_id)
        .join("transcripts")
}

pub(crate) fn statuses(report: &RunReport) -> Vec<(String, SubtaskOutcome, Option<VerdictKind>)> {
    report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status, s.verdict))
        .collect()
}

fn worker_events(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|event| match event {
            Event::AgentStarted { agent }
            | Event::TurnCompleted { agent, .. }
            | Event::AgentFinished { agent, .. } => agent.role == "worker",
            _ => false,
        })
        .collect()
}

fn notes(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            Event::Note { message } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// The common checks of a backend whose stand-in edited src/a.txt and reported
/// `ledger`: merged through review, applied, the ledger as reported, the raw output
/// saved, and no built-in worker called.
async fn assert_merged_with_ledger(
    backend: WorkerBackend,
    script: String,
    sample: &str,
    ledger: Ledger,
    final_message: &str,
) {
    let fixture = repo();
    let clis = FakeClis::new();
    clis.install(backend.name(), BRIEF_MARK, &script);
    let server = server().await;
    let (report, events) = run(&fixture, &server, options(&fixture, &clis, backend.clone())).await;
    server.assert_no_violations();

    assert_eq!(
        (report.status, statuses(&report)),
        (
            RunEnd::Finished,
            vec![(
                "S1".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            )]
        ),
        "{backend}: the CLI's edit is reviewed and merged: {report:#?}"
    );
    let subtask = &report.subtasks[0];
    assert_eq!(
        subtask.worker_ledger, ledger,
        "{backend}: the worker's ledger is what the CLI reported"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        (
            json["subtasks"][0]["steps"].clone(),
            json["subtasks"][0]["input_tokens"].clone(),
            json["subtasks"][0]["output_tokens"].clone()
        ),
        (
            json!(ledger.steps + subtask.reviewer_ledger.steps),
            json!(ledger.input_tokens + subtask.reviewer_ledger.input_tokens),
            json!(ledger.output_tokens + subtask.reviewer_ledger.output_tokens)
        ),
        "{backend}: the JSON output counts the CLI like a built-in worker"
    );
    assert_eq!(
        subtask.reason.as_deref(),
        Some(format!("worker: {final_message}").as_str()),
        "{backend}: the CLI's final message is the worker's summary"
    );
    assert!(report.applied, "{backend}: the result reaches the branch");
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
    assert_eq!(
        fixture.git(&["ls-tree", "-r", "--name-only", "HEAD"]),
        "AGENTS.md\nsrc/a.txt\nsrc/b.txt",
        "{backend}: nothing but the edit is committed (no CLI scratch files)"
    );

    let requests = server.requests();
    assert!(
        requests.iter().all(|request| who(request) != Who::Worker),
        "{backend}: grove's own worker model is never called"
    );
    let review = requests
        .iter()
        .find(|request| who(request) == Who::Reviewer)
        .expect("a review happened");
    assert!(
        review.raw_body.contains("+ALPHA") && review.raw_body.contains(BRIEF_MARK),
        "{backend}: the reviewer sees the brief and the diff"
    );
    assert!(
        !review.raw_body.contains(final_message),
        "{backend}: the reviewer never sees the worker's final message"
    );

    let raw = transcripts_dir(&fixture, &report.run_id)
        .join(format!("S1-worker.{}.stdout", backend.name()));
    assert_eq!(
        std::fs::read_to_string(&raw).unwrap().trim_end(),
        sample,
        "{backend}: the CLI's raw output is saved next to the transcripts"
    );
    let worker = worker_events(&events);
    assert!(
        matches!(worker.first(), Some(Event::AgentStarted { .. }))
            && matches!(worker.last(), Some(Event::AgentFinished { ledger: l, .. }) if *l == ledger),
        "{backend}: the live view sees the worker start and finish: {worker:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_works_a_subtask_through_review_and_merge() {
    assert_merged_with_ledger(
        WorkerBackend::Claude,
        fake_cli::claude_script(EDIT, fake_cli::CLAUDE_SAMPLE),
        fake_cli::CLAUDE_SAMPLE,
        Ledger {
            steps: 2,
            input_tokens: 8,
            output_tokens: 102,
            cache_read_tokens: 19800,
            cache_write_tokens: 1900,
            cache_write_1h_tokens: 0,
        },
        "CLAUDE-FINAL: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_works_a_subtask_through_review_and_merge() {
    assert_merged_with_ledger(
        WorkerBackend::Codex,
        fake_cli::codex_script(EDIT, fake_cli::CODEX_SAMPLE),
        fake_cli::CODEX_SAMPLE,
        Ledger {
            // One per tool call (a command, a patch) and one for the answer.
            steps: 3,
            input_tokens: 1200,
            output_tokens: 240,
            cache_read_tokens: 17000,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        },
        "CODEX-FINAL: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_works_a_subtask_through_review_and_merge() {
    assert_merged_with_ledger(
        WorkerBackend::Gemini,
        fake_cli::gemini_script(EDIT, fake_cli::GEMINI_SAMPLE),
        fake_cli::GEMINI_SAMPLE,
        Ledger {
            steps: 3,
            input_tokens: 9000,
            output_tokens: 350,
            cache_read_tokens: 3000,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        },
        "GEMINI-FINAL: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aider_works_a_subtask_without_committing_or_leaving_its_cache() {
    assert_merged_with_ledger(
        WorkerBackend::Aider,
        fake_cli::aider_script(EDIT, fake_cli::AIDER_SAMPLE),
        fake_cli::AIDER_SAMPLE,
        Ledger {
            steps: 1,
            input_tokens: 4200,
            output_tokens: 120,
            cache_read_tokens: 1500,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        },
        "src/a.txt\n<<<<<<< SEARCH\nalpha\n=======\nALPHA\n>>>>>>> REPLACE\n\nAIDER-FINAL: src/a.txt now shouts.",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_the_brief_on_stdin_and_in_the_environment_and_no_keys() {
    let fixture = repo();
    let clis = FakeClis::new();
    let script = clis.install(
        "my-agent",
        BRIEF_MARK,
        &format!(
            r#"stdin=$(cat)
[ "$stdin" = "$GROVE_BRIEF" ] || fail "stdin must be the brief"
need_prompt "$GROVE_BRIEF"
no_env ANTHROPIC_API_KEY
no_env OPENAI_API_KEY
no_env GEMINI_API_KEY
[ "$1" = "--fast" ] || fail "the command line's own arguments are kept: $*"
{EDIT}
echo "noise that scrolls away"
echo "CMD-FINAL: done"
"#
        ),
    );
    let server = server().await;
    let backend = WorkerBackend::Command(format!("{} --fast", script.display()));
    let (report, _) = run(&fixture, &server, options(&fixture, &clis, backend)).await;
    assert_eq!(
        statuses(&report),
        vec![(
            "S1".into(),
            SubtaskOutcome::Merged,
            Some(VerdictKind::Approve)
        )],
        "{report:#?}"
    );
    assert_eq!(
        (
            report.subtasks[0].worker_ledger,
            report.subtasks[0].reason.as_deref()
        ),
        (
            Ledger {
                steps: 1,
                ..Ledger::default()
            },
            Some("worker: noise that scrolls away\nCMD-FINAL: done")
        ),
        "a command reports no usage; its stdout tail is its final message"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_variables_reach_the_cli_and_no_others() {
    let fixture = repo();
    let clis = FakeClis::new();
    clis.install(
        "claude",
        BRIEF_MARK,
        &format!(
            "need_env DISABLE_AUTOUPDATER 1\nno_env DISABLE_TELEMETRY\n{}",
            fake_cli::claude_script(EDIT, fake_cli::CLAUDE_SAMPLE)
        ),
    );
    let server = server().await;
    let mut options = options(&fixture, &clis, WorkerBackend::Claude);
    if let Some(env) = &mut options.backend_env {
        env.0.push(("DISABLE_AUTOUPDATER".into(), "1".into()));
        env.0.push(("DISABLE_TELEMETRY".into(), "1".into()));
    }
    options.worker_pass_env = vec!["DISABLE_AUTOUPDATER".into()];
    let (report, _) = run(&fixture, &server, options).await;
    assert_eq!(
        statuses(&report),
        vec![(
            "S1".into(),
            SubtaskOutcome::Merged,
            Some(VerdictKind::Approve)
        )],
        "[workers] pass_env hands the named variable over, and only it: {report:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_exits_non_zero_fails_its_subtask_with_its_stderr() {
    let fixture = repo();
    let clis = FakeClis::new();
    clis.install(
        "claude",
        BRIEF_MARK,
        &format!(
            "{EDIT}\necho 'Invalid API key · Please run /login' >&2\n{}exit 1\n",
            fake_cli::print_sample(
                r#"{"type":"system","subtype":"init","session_id":"s","tools":[],"model":"m"}"#
            )
        ),
    );
    let server = server().await;
    let (report, _) = run(
        &fixture,
        &server,
        options(&fixture, &clis, WorkerBackend::Claude),
    )
    .await;
    let subtask = &report.subtasks[0];
    assert_eq!(
        (subtask.status, subtask.verdict, subtask.reason.as_deref()),
        (
            SubtaskOutcome::Failed,
            None,
            Some("claude exited with status 1: Invalid API key · Please run /login")
        ),
        "a failed CLI fails its subtask with its stderr: {subtask:#?}"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|request| who(request) != Who::Reviewer),
        "a failed worker's diff is never reviewed"
    );
    assert!(
        subtask.archive_ref.is_some(),
        "what the CLI wrote before failing is kept"
    );
    assert_eq!(fixture.read("src/a.txt"), b"alpha\n", "nothing is merged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_output_is_survived_and_said() {
    let fixture = repo();
    let clis = FakeClis::new();
    clis.install(
        "codex",
        BRIEF_MARK,
        &format!("{EDIT}\nprintf 'Segmentation fault?\\n{{\"type\":\"turn.comp'\n"),
    );
    let server = server().await;
    let (report, events) = run(
        &fixture,
        &server,
        options(&fixture, &clis, WorkerBackend::Codex),
    )
    .await;
    assert_eq!(
        (
            statuses(&report),
            report.subtasks[0].worker_ledger,
            report.subtasks[0].reason.clone()
        ),
        (
            vec![(
                "S1".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            )],
            Ledger {
                steps: 1,
                ..Ledger::default()
            },
            None
        ),
        "unreadable output loses the usage and the message, never the work"
    );
    let notes = notes(&events);
    assert!(
        notes
            .iter()
            .any(|note| note.starts_with("S1: codex: 2 line(s)")
                && note.contains("no token usage")
                && note.contains("S1-worker.codex.stdout")),
        "the user is told, with the raw output's path: {notes:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cli_is_killed_with_its_process_group_at_the_timeout() {
    let fixture = repo();
    let clis = FakeClis::new();
    let pid_file = clis.state().join("sleeper.pid");
    clis.install(
        "gemini",
        BRIEF_MARK,
        &format!(
            "{EDIT}\nsleep 600601 &\necho $! > '{}'\nwait\n",
            pid_file.display()
        ),
    );
    let server = server().await;
    let mut options = options(&fixture, &clis, WorkerBackend::Gemini);
    options.worker_backend_timeout_secs = 1;
    let (report, _) = run(&fixture, &server, options).await;
    let subtask = &report.subtasks[0];
    assert_eq!(
        (subtask.status, subtask.reason.as_deref()),
        (
            SubtaskOutcome::Failed,
            Some("gemini did not finish within 1s; its process group was killed")
        ),
        "{subtask:#?}"
    );
    assert!(pid_file.exists(), "the CLI started its background child");
    assert_eq!(
        settled(|| running_with_arg("600601")),
        Vec::<i32>::new(),
        "the CLI's background child is killed with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_over_the_subagent_budget_fails_its_subtask() {
    let fixture = repo();
    let clis = FakeClis::new();
    clis.install(
        "claude",
        BRIEF_MARK,
        &fake_cli::claude_script(EDIT, fake_cli::CLAUDE_SAMPLE),
    );
    let server = server().await;
    let mut options = options(&fixture, &clis, WorkerBackend::Claude);
    options.subagent_budget_tokens = Some(1000);
    let (report, _) = run(&fixture, &server, options).await;
    let subtask = &report.subtasks[0];
    assert_eq!(subtask.status, SubtaskOutcome::Failed, "{subtask:#?}");
    assert!(
        subtask
            .reason
            .as_deref()
            .is_some_and(|reason| reason.contains("over the subagent budget of 1000")),
        "the reason names the budget: {subtask:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cli_says_how_to_point_grove_at_it() {
    let fixture = repo();
    let clis = FakeClis::new();
    let server = server().await;
    let mut options = options(&fixture, &clis, WorkerBackend::Codex);
    // Only the empty stand-in dir: no `codex` anywhere on PATH.
    options.backend_env = Some(BackendEnv(vec![(
        "PATH".into(),
        clis.bin.clone().into_os_string(),
    )]));
    let (report, _) = run(&fixture, &server, options).await;
    let subtask = &report.subtasks[0];
    assert_eq!(subtask.status, SubtaskOutcome::Failed, "{subtask:#?}");
    let reason = subtask.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("codex could not be started (exit status 127: not found); install it or set GROVE_CODEX_BIN to its path"),
        "the reason says what to do: {reason}"
    );
}

async fn wait_for(path: &Path) {
    for _ in 0..600 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_kills_the_cli_and_resume_reruns_it_from_the_checkpoint() {
    let fixture = repo();
    let clis = FakeClis::new();
    let state = clis.state();
    let script = clis.install(
        "resumable-agent",
        BRIEF_MARK,
        &format!(
            r#"state='{state}'
if [ ! -e "$state/first" ]; then
  touch "$state/first"
  need_prompt "$GROVE_BRIEF"
  printf 'half\n' > src/b.txt
  sleep 600602 &
  echo $! > "$state/sleeper.pid"
  wait
  exit 0
fi
case "$GROVE_BRIEF" in *"earlier attempt"*) ;; *) fail "a rerun is told about the earlier attempt" ;; esac
[ "$(cat src/b.txt)" = half ] || fail "the rerun starts from the checkpoint"
{EDIT}
echo "RESUMED-FINAL: finished on the second attempt"
"#,
            state = state.display()
        ),
    );
    let server = server().await;
    let cancel = CancellationToken::new();
    let options = options(
        &fixture,
        &clis,
        WorkerBackend::Command(script.display().to_string()),
    );
    let interrupted = {
        let run = grove::run::run(
            &fixture.repo,
            options,
            models(&server),
            EventSink::discard(),
            cancel.clone(),
        );
        let interrupt = async {
            wait_for(&state.join("sleeper.pid")).await;
            cancel.cancel();
        };
        let (report, ()) = tokio::join!(run, interrupt);
        report.unwrap()
    };
    assert_eq!(interrupted.status, RunEnd::Interrupted, "{interrupted:#?}");
    assert_eq!(
        settled(|| running_with_arg("600602")),
        Vec::<i32>::new(),
        "Ctrl-C kills the CLI's process group"
    );

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let resumed = grove::run::resume(
        &fixture.repo,
        &interrupted.run_id,
        fixture.options(),
        |_| Ok(models(&server)),
        EventSink::new(tx),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    let notes = notes(&events);
    assert!(
        notes.iter().any(|note| note
            == "S1: cmd starts again on the brief from the subtask's last checkpoint (a CLI's \
                own conversation is not resumed)"),
        "the user is told the CLI starts over: {notes:#?}"
    );
    assert_eq!(
        (resumed.status, statuses(&resumed)),
        (
            RunEnd::Finished,
            vec![(
                "S1".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            )]
        ),
        "the resumed run reruns the journaled backend: {resumed:#?}"
    );
    assert_eq!(
        (fixture.read("src/a.txt"), fixture.read("src/b.txt")),
        (b"ALPHA\n".to_vec(), b"half\n".to_vec()),
        "both attempts' work is merged"
    );
    assert_eq!(
        resumed.subtasks[0].worker_ledger.steps, 2,
        "each attempt counts one step"
    );
    let dir = transcripts_dir(&fixture, &interrupted.run_id);
    assert!(
        dir.join("S1-worker.cmd.stdout").exists() && dir.join("S1-worker.cmd-2.stdout").exists(),
        "a rerun keeps the first attempt's raw output"
    );
}

#[test]
fn the_backend_is_journaled_with_the_options_and_old_journals_read_as_builtin() {
    let options = RunOptions {
        worker_backend: WorkerBackend::Command("./agent.sh".into()),
        backend_env: Some(BackendEnv(vec![(
            "ANTHROPIC_API_KEY".into(),
            "secret".into(),
        )])),
        ..RunOptions::new("task")
    };
    let journaled = serde_json::to_value(&options).unwrap();
    assert_eq!(
        (
            journaled["worker_backend"].clone(),
            journaled["worker_backend_timeout_secs"].clone()
        ),
        (json!("cmd:./agent.sh"), json!(3600))
    );
    assert!(
        !journaled.to_string().contains("secret"),
        "the CLI environment is never journaled"
    );
    assert!(
        !format!("{options:?}").contains("secret")
            && format!("{options:?}").contains("ANTHROPIC_API_KEY"),
        "debug output names the variables, never their values"
    );
    let old: RunOptions = serde_json::from_value(json!({ "task": "old run" })).unwrap();
    assert_eq!(
        (old.worker_backend, old.worker_backend_timeout_secs),
        (WorkerBackend::Builtin, 3600),
        "a journal from before the flag resumes with grove's own worker"
    );
}

#[test]
fn an_unknown_backend_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = crate::support::grove::Grove::new(dir.path(), dir.path()).grove([
        "run",
        "--worker-backend",
        "cursor",
        "some task",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown worker backend `cursor`"),
        "the error names the value and the choices: {stderr}"
    );
}
