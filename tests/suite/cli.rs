//! The `grove` binary's contracts (DESIGN.md): the `--json` object, exit codes,
//! environment variables, and `grove runs --json`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, TEST_API_KEY, Turn};
use crate::support::git_fixture::{GitFixture, sealed_env};

/// Runs the grove binary in `fixture`'s repository with a sealed environment, the model
/// APIs pointed at `server`.
pub(crate) async fn grove(
    fixture: &GitFixture,
    server: Option<&FakeServer>,
    args: &[&str],
) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_grove"));
    command.env_clear();
    command.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    command.envs(sealed_env(&fixture.home()));
    if let Some(server) = server {
        command
            .env("ANTHROPIC_BASE_URL", server.url())
            .env("ANTHROPIC_API_KEY", TEST_API_KEY)
            .env("OPENAI_BASE_URL", server.openai_url())
            .env("OPENAI_API_KEY", TEST_API_KEY);
    }
    command.current_dir(&fixture.repo).args(args);
    command.output().await.unwrap()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub(crate) fn role(request: &RecordedRequest) -> &'static str {
    let system = request.system_text();
    if system.starts_with("You are the lead engineer") {
        "lead"
    } else if system.starts_with("You are an independent code reviewer") {
        "reviewer"
    } else {
        "worker"
    }
}

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
                let verdict = if request.last_user_text().contains("+bad") {
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
    assert_eq!(
        report["result_commit"],
        fixture.rev("HEAD").to_string().as_str()
    );
    let run_id = report["run_id"].as_str().unwrap();
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
    assert_eq!(subtasks[0]["steps"], 4);
    assert_eq!(subtasks[0]["input_tokens"], 40);
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
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_grove"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sealed_env(&fixture.home()))
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap())
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .current_dir(dir)
        .args(args);
    command.output().await.unwrap()
}

/// The first file named `name` in worktree 1 of any run of `fixture`, if any.
pub(crate) fn find_in_worktrees(fixture: &GitFixture, name: &str) -> Option<std::path::PathBuf> {
    let runs = fixture.repo.join(".git/grove/runs");
    for run in std::fs::read_dir(runs).ok()?.flatten() {
        let run_id = run.file_name().to_string_lossy().into_owned();
        let candidate = fixture.worktree_dir(&run_id, 1).join(name);
        if candidate.exists() {
            return Some(candidate);
        }
    }
    None
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

    let mut first = tokio::process::Command::new(env!("CARGO_BIN_EXE_grove"));
    first
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(sealed_env(&fixture.home()))
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .current_dir(&fixture.repo)
        .args(["run", "leave a marker"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = first.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while find_in_worktrees(&fixture, "marker").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's command never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    child.kill().await.unwrap(); // SIGKILL, mid tool call

    let runs = grove(&fixture, None, &["runs", "--json"]).await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(
        runs[0]["status"], "interrupted",
        "a killed run is listed as interrupted: {runs:#}"
    );
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();

    let output = grove(&fixture, Some(&server), &["resume", "--json", &run_id]).await;
    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
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
