//! The `grove` binary's contracts (DESIGN.md): the `--json` object, exit codes,
//! environment variables, and `grove runs --json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use grove::text;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, grove_in as grove, stderr, wait_in_worktrees};
use crate::support::requests::{heard_by_lead, role};
use crate::support::scripted_run::own_review_text;

/// A lead that delegates one subtask per `(path, content)`, workers that write it, and
/// a reviewer that rejects any content starting with `bad`.
fn scripted(writes: &'static [(&'static str, &'static str)]) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let done = !request.tool_results().is_empty();
        let turn = match (role(request), done) {
            ("lead", false) => {
                writes
                    .iter()
                    .enumerate()
                    .fold(Turn::new(), |turn, (i, (path, content))| {
                        turn.tool_use(
                            &format!("d{i}"),
                            "delegate",
                            json!({ "task": format!("WRITE {path} {content}") }),
                        )
                    })
            }
            ("worker", false) => {
                let brief = request.last_user_text();
                let mut words = brief.split(' ').skip(1);
                let (path, content) = (words.next().unwrap(), words.next().unwrap());
                Turn::new().tool_use(
                    "w1",
                    "write_file",
                    json!({ "path": path, "content": format!("{content}\n") }),
                )
            }
            ("reviewer", false) => {
                let verdict = if own_review_text(request).contains("+bad") {
                    "reject"
                } else {
                    "approve"
                };
                Turn::new().tool_use(
                    "r1",
                    "submit_verdict",
                    json!({ "verdict": verdict, "summary": "judged" }),
                )
            }
            (_, true) => Turn::text("done"),
            _ => unreachable!(),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_json_prints_the_contract_object_and_exits_3_when_something_is_not_merged() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let base = fixture.rev("HEAD").to_string();
    let server = FakeServer::with_responder(scripted(&[("a.txt", "good"), ("b.txt", "bad")])).await;

    let output = grove(
        &fixture,
        Some(&server),
        &["run", "--json", "--jobs", "2", "change the files"],
    )
    .await;

    server.assert_no_violations();
    assert_eq!(
        output.status.code(),
        Some(3),
        "one subtask rejected: exit 3\n{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON object ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    for key in [
        "run_id",
        "status",
        "base",
        "result_commit",
        "applied",
        "subtasks",
        "totals",
    ] {
        assert!(
            report.get(key).is_some(),
            "the report has `{key}`: {report:#}"
        );
    }
    assert_eq!(report["status"], "finished");
    assert_eq!(report["base"], base.as_str());
    assert_eq!(report["applied"], true);
    let run_id = report["run_id"].as_str().unwrap();
    let result = report["result_commit"].as_str().unwrap();
    assert_eq!(
        (
            fixture.git(&["rev-parse", "HEAD^{tree}"]),
            fixture.rev("HEAD"),
            fixture.rev(&format!("grove/{run_id}/result")).to_string(),
        ),
        (
            fixture.git(&["rev-parse", &format!("{result}^{{tree}}")]),
            fixture.rev(&format!("grove/{run_id}/squashed")),
            result.to_owned(),
        ),
        "result_commit is the run's result; the branch has its tree, as the squashed history"
    );
    let subtasks = report["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2);
    for subtask in subtasks {
        for key in [
            "id",
            "task",
            "branch",
            "status",
            "verdict",
            "steps",
            "input_tokens",
            "output_tokens",
        ] {
            assert!(
                subtask.get(key).is_some(),
                "a subtask has `{key}`: {subtask:#}"
            );
        }
    }
    let summary: Vec<(Value, Value, Value, Value)> = subtasks
        .iter()
        .map(|s| {
            (
                s["id"].clone(),
                s["status"].clone(),
                s["verdict"].clone(),
                s["branch"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                json!("S1"),
                json!("merged"),
                json!("approve"),
                json!(format!("grove/{run_id}/1"))
            ),
            (
                json!("S2"),
                json!("rejected"),
                json!("reject"),
                json!(format!("grove/{run_id}/2"))
            ),
        ]
    );
    assert_eq!(
        subtasks[0]["steps"], 3,
        "two worker turns, one reviewer turn"
    );
    assert_eq!(subtasks[0]["input_tokens"], 30);
    assert_eq!(fixture.read("a.txt"), b"good\n");
    assert_eq!(fixture.read("b.txt"), b"b\n");
    let err = stderr(&output);
    assert!(
        err.contains("[worker S1 · steps=2 in=20 out=4]"),
        "the ledger lines are printed:\n{err}"
    );

    let runs = grove(&fixture, None, &["runs", "--json"]).await;
    assert_eq!(runs.status.code(), Some(0), "{}", stderr(&runs));
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let listed: Vec<(Value, Value)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["run_id"].clone(), r["status"].clone()))
        .collect();
    assert_eq!(listed, vec![(json!(run_id), json!("finished"))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_exits_0_when_every_subtask_merged_over_openai_too() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(scripted(&[("a.txt", "good")])).await;
    let output = grove(
        &fixture,
        Some(&server),
        &[
            "run",
            "--provider",
            "openai",
            "--model",
            "local-model",
            "--json",
            "change a",
        ],
    )
    .await;
    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let requests = server.requests();
    assert!(
        requests.iter().all(|r| r.body["model"] == "local-model"),
        "--model reaches every request"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        keys(&report["totals"]),
        [
            "cache_read_tokens",
            "cache_write_tokens",
            "input_tokens",
            "output_tokens",
            "steps"
        ]
    );
}

#[tokio::test]
async fn usage_errors_exit_2_and_setup_errors_exit_1_with_one_clear_line() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let usage = grove(&fixture, None, &["run", "--provider", "nope", "x"]).await;
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));

    let no_key = grove(&fixture, None, &["run", "do it"]).await;
    assert_eq!(no_key.status.code(), Some(1));
    assert!(
        stderr(&no_key).contains("ANTHROPIC_API_KEY"),
        "says which variable to set: {}",
        stderr(&no_key)
    );

    let not_a_repo = tempfile::tempdir().unwrap();
    let server = FakeServer::start().await;
    let outside = grove_in(not_a_repo.path(), &fixture, &server, &["run", "do it"]).await;
    assert_eq!(outside.status.code(), Some(1));
    let message = stderr(&outside);
    assert!(message.starts_with("grove: "), "{message}");
    assert!(
        message.contains("is not inside a git repository"),
        "{message}"
    );
    assert_eq!(message.trim_end().lines().count(), 1, "one line: {message}");
    assert!(
        server.requests().is_empty(),
        "nothing is sent before the checks pass"
    );
}

async fn grove_in(dir: &Path, fixture: &GitFixture, server: &FakeServer, args: &[&str]) -> Output {
    Grove::new(dir, fixture.home())
        .with_server(server)
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .grove_async(args)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_mid_tool_call_then_resume_finishes_without_running_the_call_twice() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(|request| {
        let done = !request.tool_results().is_empty();
        let turn = match (role(request), done) {
            ("lead", false) => {
                Turn::new().tool_use("d1", "delegate", json!({"task": "Leave a marker."}))
            }
            ("worker", false) => Turn::new().tool_use(
                "w1",
                "bash",
                json!({"command": "echo run >> marker; sleep 5", "timeout_s": 30}),
            ),
            ("reviewer", false) => Turn::new().tool_use(
                "r1",
                "submit_verdict",
                json!({"verdict": "approve", "summary": "a marker"}),
            ),
            (_, true) => Turn::text("done"),
            _ => unreachable!(),
        };
        turn.usage(10, 2, 0, 0).into()
    })
    .await;

    let mut child = Grove::in_repo(&fixture)
        .with_server(&server)
        .spawn(["run", "leave a marker"]);
    wait_in_worktrees(&fixture, "marker", b"run\n").await;
    child.kill().await.unwrap(); // SIGKILL, mid tool call

    let runs = grove(&fixture, None, &["runs", "--json"]).await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(
        runs[0]["status"], "interrupted",
        "a killed run is listed as interrupted: {runs:#}"
    );
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    // A copy-on-write worktree's mark of the machine start it was mounted in, as an
    // earlier start would have left it: its resume mounts it again and says so.
    let mut mark = fixture.worktree_dir(&run_id, 1).into_os_string();
    mark.push(".cow/boot_id");
    let restarted = std::path::Path::new(&mark).exists();
    if restarted {
        std::fs::write(&mark, "00000000-0000-0000-0000-000000000000\n").unwrap();
    }

    let output = grove(&fixture, Some(&server), &["resume", "--json", &run_id]).await;
    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stderr(&output).contains("the machine restarted since the copy-on-write worktree"),
        restarted,
        "a resume says when the machine restarted since a tree was mounted: {}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["status"], "finished");
    assert_eq!(report["subtasks"][0]["status"], "merged");
    assert_eq!(
        fixture.read("marker"),
        b"run\n",
        "the command that was running when grove died is never run again"
    );
    let resumed_worker = server
        .requests()
        .into_iter()
        .filter(|r| role(r) == "worker")
        .nth(1)
        .unwrap();
    assert!(
        resumed_worker.tool_results()[0]
            .1
            .contains("grove was interrupted"),
        "the model is told the call was interrupted: {:?}",
        resumed_worker.tool_results()
    );
}

// ---------------------------------------------------------------------------------------
// Text from outside, exit codes that do not hide failure, usage errors, long tasks.

/// Control characters a model (or an external CLI) may send: clear the screen, set the
/// window title, a C1 CSI, a carriage return that overwrites a line.
const ESCAPES: &str = "\x1b[2J\x1b]0;pwned\x07\u{9b}31m\r";

/// True when `bytes` hold a raw ESC, BEL, CR or C1 CSI (in UTF-8).
fn has_raw_controls(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| matches!(b, 0x1b | 0x07 | b'\r'))
        || bytes.windows(2).any(|w| w == [0xc2, 0x9b])
}

/// A lead that delegates a brief carrying [`ESCAPES`], a reviewer that rejects with them
/// in its summary, and a lead whose closing text carries them too.
fn escaping(request: &RecordedRequest) -> Reply {
    let done = !request.tool_results().is_empty();
    let turn = match (role(request), done) {
        ("lead", false) => Turn::new().tool_use(
            "d1",
            "delegate",
            json!({ "task": format!("Write a.txt.{ESCAPES}") }),
        ),
        ("worker", false) => Turn::new().tool_use(
            "w1",
            "write_file",
            // One escape only: more control characters and git calls the file binary.
            json!({ "path": "a.txt", "content": "changed\x1b[2J\n" }),
        ),
        ("reviewer", false) => Turn::new().tool_use(
            "r1",
            "submit_verdict",
            json!({
                "verdict": "reject",
                "summary": format!("rejected{ESCAPES}"),
                "findings": [{"path": "a.txt", "line": 1, "problem": format!("bad{ESCAPES}")}],
            }),
        ),
        ("lead", true) => Turn::text(format!("all done{ESCAPES}")),
        (_, true) => Turn::text("done"),
        _ => unreachable!(),
    };
    turn.usage(10, 2, 0, 0).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminal_escapes_from_a_model_reach_neither_the_terminal_nor_the_json_nor_the_lead() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(escaping).await;

    let output = grove(&fixture, Some(&server), &["run", "--json", "change a"]).await;

    let err = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(3),
        "S1 is rejected: exit 3\n{err}"
    );
    assert!(
        err.contains("rejected\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}31m"),
        "the reviewer's summary is shown with its escapes written out:\n{err}"
    );
    assert!(
        !has_raw_controls(&output.stderr),
        "no raw control character reaches the terminal:\n{err:?}"
    );
    assert!(
        !has_raw_controls(&output.stdout),
        "nor stdout's JSON, even decoded"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let decoded = serde_json::to_string(&report).unwrap();
    assert!(
        !decoded.contains("\\u001b") && !decoded.contains('\u{9b}'),
        "a JSON reader that prints a field gets no escape either: {decoded}"
    );
    assert!(
        report["subtasks"][0]["task"]
            .as_str()
            .unwrap()
            .ends_with("Write a.txt.\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}31m\\r"),
        "the brief is kept, written out: {report:#}"
    );
    let lead_results: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| role(request) == "lead")
        .map(heard_by_lead)
        .collect();
    assert!(
        lead_results.iter().any(|content| content.contains("pwned")),
        "the reviewer's words reach the lead: {lead_results:?}"
    );
    assert!(
        lead_results
            .iter()
            .all(|content| !has_raw_controls(content.as_bytes())),
        "the lead's tool result carries no raw control character: {lead_results:?}"
    );

    let run_id = report["run_id"].as_str().unwrap();
    let review = grove(&fixture, None, &["review", "--list", run_id]).await;
    let shown = String::from_utf8_lossy(&review.stdout).into_owned();
    assert!(
        shown.contains("reviewer: rejected\\x1b[2J") && shown.contains("changed\\x1b[2J"),
        "grove review shows the summary and the diff, escapes written out:\n{shown}"
    );
    assert!(
        !has_raw_controls(&review.stdout) && !has_raw_controls(&review.stderr),
        "grove review prints no raw control character:\n{shown:?}"
    );
}

/// A lead that answers `text` without delegating anything.
fn lead_only(text: &'static str) -> impl Fn(&RecordedRequest) -> Reply {
    move |_| Turn::text(text).usage(10, 2, 0, 0).into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_3_when_the_lead_delegated_nothing_or_stopped_at_its_turn_cap() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(lead_only("Nothing to do here.")).await;
    let nothing = grove(&fixture, Some(&server), &["run", "change a"]).await;
    let err = stderr(&nothing);
    assert_eq!(
        nothing.status.code(),
        Some(3),
        "a run that delegated nothing did not do the task: exit 3\n{err}"
    );
    assert!(
        err.contains("grove: finished, but not everything was done: the lead delegated nothing"),
        "the reason is said:\n{err}"
    );

    let server = FakeServer::with_responder(scripted(&[("a.txt", "good")])).await;
    let capped = grove(
        &fixture,
        Some(&server),
        &["run", "--json", "--max-turns", "lead=1", "change a"],
    )
    .await;
    let err = stderr(&capped);
    let report: Value = serde_json::from_slice(&capped.stdout).unwrap();
    assert_eq!(
        (
            capped.status.code(),
            report["subtasks"][0]["status"].clone()
        ),
        (Some(3), json!("merged")),
        "every subtask merged, but the lead was stopped by its turn cap: exit 3\n{err}"
    );
    assert!(
        err.contains("grove: finished, but not everything was done: the lead stopped: turn cap"),
        "the reason is said:\n{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leads_long_closing_text_is_cut_saying_how_much_and_where_the_rest_is() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let long: &'static str = "All fine. ".repeat(20_000).leak();
    let writes = scripted(&[("a.txt", "good")]);
    let server = FakeServer::with_responder(move |request| {
        if role(request) == "lead" && !request.tool_results().is_empty() {
            Turn::text(long).usage(10, 2, 0, 0).into()
        } else {
            writes(request)
        }
    })
    .await;
    let output = grove(&fixture, Some(&server), &["run", "--json", "change a"]).await;
    let err = stderr(&output);
    assert!(
        err.len() < 12_000,
        "200 000 characters of closing text are not all printed ({} bytes)",
        err.len()
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let summary = report["summary"].as_str().unwrap();
    assert_eq!(
        (summary.len(), summary.trim()),
        (long.len(), long.trim()),
        "--json keeps the whole text"
    );
    assert!(
        err.contains(
            "[… 195999 more characters of the lead's text left out; the whole text is \
             `summary` in the JSON on stdout]"
        ),
        "how much was left out and where the whole text is:\n{}",
        text::last_chars(&err, 600)
    );
}

#[tokio::test]
async fn usage_errors_found_after_parsing_exit_2_and_an_unknown_run_is_an_error() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let unknown = "20260101-000000-abcd";
    let cases: [(&[&str], i32, &str); 8] = [
        (&["run", "  "], 2, "grove: the task is empty"),
        (
            &["run", "--max-turns", "lead=x", "t"],
            2,
            "grove: --max-turns lead=x: expected a positive whole number",
        ),
        (
            &["run", "--max-turns", "boss=3", "t"],
            2,
            "grove: --max-turns boss=3: unknown role \"boss\"",
        ),
        (
            &["resume", "../x"],
            2,
            "grove: `../x` is not a grove run id",
        ),
        (&["clean", "../x"], 2, "grove: `../x` is not a grove run id"),
        (
            &["review", "../x"],
            2,
            "grove: `../x` is not a grove run id",
        ),
        (
            &["clean", unknown],
            1,
            "grove: there is no run 20260101-000000-abcd in this repository",
        ),
        (
            &["run", "--task-file", "missing.md"],
            1,
            "grove: cannot read the task file",
        ),
    ];
    for (args, code, message) in cases {
        let output = grove(&fixture, None, args).await;
        let err = stderr(&output);
        assert_eq!(
            (output.status.code(), err.starts_with(message)),
            (Some(code), true),
            "grove {args:?} exits {code} saying {message:?}; it said:\n{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_over_128_kib_comes_from_a_file_or_stdin() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    fixture.write(
        ".grove/agents/broken.md",
        "---\ncolour: red\n---\nA prompt.\n",
    );
    let server = FakeServer::with_responder(lead_only("A plan.")).await;
    let task: String = "Rename every item. ".repeat(10_000);
    assert!(task.len() > 128 * 1024, "longer than one argument may be");
    let task_file = fixture.repo.join("task.md");
    std::fs::write(&task_file, &task).unwrap();

    let from_file = grove(
        &fixture,
        Some(&server),
        &["run", "--dry-run", "--task-file", "task.md"],
    )
    .await;
    let from_stdin = Grove::in_repo(&fixture)
        .with_server(&server)
        .grove_with_stdin(["run", "--dry-run", "--task-file", "-"], task.as_bytes())
        .await;
    for output in [&from_file, &from_stdin] {
        let err = stderr(output);
        assert_eq!(output.status.code(), Some(0), "{err}");
        assert!(
            err.contains("grove: note: ") && err.contains("broken.md:2: "),
            "a broken agent file is shown to the user, with its line:\n{err}"
        );
    }
    let leads: Vec<String> = server
        .requests()
        .iter()
        .map(RecordedRequest::last_user_text)
        .collect();
    assert_eq!(leads.len(), 2, "one lead request per run");
    for text in leads {
        assert!(
            text.contains(task.trim()),
            "the lead gets the whole task ({} bytes)",
            text.len()
        );
    }
    let both = grove(
        &fixture,
        None,
        &["run", "--task-file", "task.md", "a task too"],
    )
    .await;
    assert_eq!(
        both.status.code(),
        Some(2),
        "a task and a task file: usage error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_stopped_by_ctrl_c_is_interrupted_in_its_json_and_in_grove_runs() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let server = FakeServer::with_responder(|request| {
        let turn = match (role(request), request.tool_results().len()) {
            ("lead", 0) => Turn::new().tool_use("d1", "delegate", json!({"task": "Wait."})),
            ("worker", 0) => Turn::new().tool_use(
                "w1",
                "bash",
                json!({"command": "echo started > marker; sleep 30", "timeout_s": 60}),
            ),
            _ => Turn::text("done"),
        };
        turn.usage(10, 2, 0, 0).into()
    })
    .await;
    let child = Grove::in_repo(&fixture)
        .with_server(&server)
        .spawn_piped(["run", "--json", "wait"]);
    wait_in_worktrees(&fixture, "marker", b"started\n").await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().unwrap()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("grove stops promptly after one Ctrl-C")
        .unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();

    let listed = grove(&fixture, None, &["runs", "--json"]).await;
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let table = grove(&fixture, None, &["runs"]).await;
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    let run_id = report["run_id"].as_str().unwrap();
    let table: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        (report["status"].clone(), listed[0]["status"].clone(), table),
        (
            json!("interrupted"),
            json!("interrupted"),
            vec![
                vec!["RUN", "STATUS", "TASK"],
                vec![run_id, "interrupted", "wait"]
            ]
        ),
        "the run's own --json, `grove runs --json` and `grove runs` (a header, then one \
         line per run) agree"
    );
}
