//! `grove mcp` driven by a real MCP client no one here wrote: the official Python SDK
//! (`mcp` on PyPI, pinned by `.ci/run`) runs `tests/mcp_client.py` against the grove
//! binary, with the fake model server standing in for the model API.
//!
//! Locally the test skips with a message when `python3 -c "import mcp"` fails; with
//! `GROVE_REQUIRE_MCP_CLIENT=1` (as in CI) that is a failure. The skip and the time the
//! client took go to stderr, for `--nocapture` readers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, grove_in as grove, stderr};
use crate::support::requests::role;
use crate::support::scripted_run::own_review_text;

/// The `mcp` release `.ci/run` installs; CI checks that it is the one that ran.
const PINNED_MCP: &str = "2.3.0";

/// The Python interpreter that has the `mcp` package, or `None` (skip) when there is
/// none and CI does not require one.
fn python_with_mcp() -> Option<String> {
    let required = std::env::var("GROVE_REQUIRE_MCP_CLIENT").is_ok_and(|v| v == "1");
    let probe = std::process::Command::new("python3")
        .args(["-c", "import mcp, sys; print(sys.executable)"])
        .output();
    match probe {
        Ok(output) if output.status.success() => {
            Some(String::from_utf8(output.stdout).unwrap().trim().to_owned())
        }
        outcome => {
            let why = match outcome {
                // The traceback's last line says what is missing.
                Ok(output) => String::from_utf8_lossy(&output.stderr)
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_owned(),
                Err(error) => error.to_string(),
            };
            assert!(
                !required,
                "GROVE_REQUIRE_MCP_CLIENT=1 but python3 cannot import mcp: {why}"
            );
            eprintln!(
                "skipped: the MCP client test needs the Python SDK (pip install mcp=={PINNED_MCP}): {why}"
            );
            None
        }
    }
}

/// The first message of a conversation (the lead's task, a worker's brief) as text.
fn opening(request: &RecordedRequest) -> String {
    request.messages()[0]["content"].to_string()
}

fn called(request: &RecordedRequest, id: &str) -> bool {
    request.tool_calls().iter().any(|(call, _)| call == id)
}

/// Run 1 ("write a and b"): S1 writes a.txt (approved), S2 writes b.txt "bad"
/// (rejected). Runs 2 ("write c slowly") and 3 ("write d then crash"): the worker
/// writes c.txt (d.txt) "started", then its next model request hangs once — creating
/// `hang_dir/c.txt` (`d.txt`) — and after the resume it writes "finished".
fn responder(hang_dir: &Path) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    let hung: Arc<Mutex<HashSet<&'static str>>> = Arc::default();
    let hang_dir = hang_dir.to_owned();
    move |request| {
        let answered = !request.tool_results().is_empty();
        let turn = match role(request) {
            "lead" if answered => Turn::text("done"),
            "lead" if opening(request).contains("write a and b") => Turn::new()
                .tool_use("d1", "delegate", json!({"task": "WRITE a.txt good"}))
                .tool_use("d2", "delegate", json!({"task": "WRITE b.txt bad"})),
            "lead" => {
                let path = if opening(request).contains("write c") {
                    "c.txt"
                } else {
                    "d.txt"
                };
                Turn::new().tool_use("d1", "delegate", json!({"task": format!("SLOW {path}")}))
            }
            "reviewer" if answered => Turn::text("done"),
            "reviewer" => {
                let bad = own_review_text(request).contains("+bad");
                Turn::new().tool_use(
                    "r1",
                    "submit_verdict",
                    json!({
                        "verdict": if bad { "reject" } else { "approve" },
                        "summary": if bad { "the content is bad" } else { "fine" },
                        "findings": if bad {
                            json!([{"path": "b.txt", "line": 1, "problem": "says bad"}])
                        } else {
                            json!([])
                        },
                    }),
                )
            }
            _ if opening(request).contains("SLOW ") => {
                let path = if opening(request).contains("SLOW c.txt") {
                    "c.txt"
                } else {
                    "d.txt"
                };
                if !called(request, "w-start") {
                    Turn::new().tool_use(
                        "w-start",
                        "write_file",
                        json!({"path": path, "content": "started\n"}),
                    )
                } else if hung.lock().unwrap().insert(path) {
                    std::fs::write(hang_dir.join(path), "").unwrap();
                    return Reply::Hang;
                } else if !called(request, "w-finish") {
                    Turn::new().tool_use(
                        "w-finish",
                        "write_file",
                        json!({"path": path, "content": "finished\n"}),
                    )
                } else {
                    Turn::text("wrote it")
                }
            }
            _ if answered => Turn::text("wrote it"),
            _ => {
                let brief = opening(request);
                let (path, content) = if brief.contains("WRITE a.txt") {
                    ("a.txt", "good")
                } else {
                    ("b.txt", "bad")
                };
                Turn::new().tool_use(
                    "w1",
                    "write_file",
                    json!({"path": path, "content": format!("{content}\n")}),
                )
            }
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

/// The `(id, status, verdict)` of each subtask of a `--json` report.
fn outcomes(report: &Value) -> Vec<(String, String, Value)> {
    report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap().to_owned(),
                s["verdict"].clone(),
            )
        })
        .collect()
}

fn owned(pairs: &[(&str, &str, Value)]) -> Vec<(String, String, Value)> {
    pairs
        .iter()
        .map(|(id, status, verdict)| ((*id).to_owned(), (*status).to_owned(), verdict.clone()))
        .collect()
}

fn messages(progress: &Value) -> Vec<String> {
    progress
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_sdk_runs_reviews_applies_and_cancels_through_grove_mcp() {
    let Some(python) = python_with_mcp() else {
        return;
    };
    let started = Instant::now();
    let fixture = GitFixture::with_files(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let base = fixture.rev("HEAD").to_string();
    let hang_dir = tempfile::tempdir().unwrap();
    let server = FakeServer::with_responder(responder(hang_dir.path())).await;

    // The client gets grove's sealed environment and hands it on to `grove mcp`.
    let sealed = Grove::in_repo(&fixture)
        .with_server(&server)
        .env("GROVE_BIN", env!("CARGO_BIN_EXE_grove"))
        .env("GROVE_REPO", &fixture.repo)
        .env("GROVE_HANG_DIR", hang_dir.path());
    let client = |args: &[&str]| {
        let mut command = std::process::Command::new(&python);
        sealed.seal(&mut command);
        command
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py"))
            .args(args);
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(true);
        command
    };
    let output = client(&[]).output();
    let output = tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("the MCP client finishes within 3 minutes")
        .unwrap();
    let client_time = started.elapsed();
    assert!(
        output.status.success(),
        "the MCP client's scenario ran through\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&output.stdout),
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "the client prints one JSON object ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    server.assert_no_violations();
    assert_eq!(
        report["stray_output"],
        json!([]),
        "grove writes nothing but the protocol on stdout"
    );
    if std::env::var("GROVE_REQUIRE_MCP_CLIENT").is_ok_and(|v| v == "1") {
        assert_eq!(report["mcp_version"], PINNED_MCP, "CI runs the pinned SDK");
    }

    check_tools(&report);
    let run_id = check_run(&report, &base);
    check_show(&report, &run_id);
    check_review(&report, &fixture);
    check_cancel_and_resume(&report, &fixture);
    check_listing(&report, &fixture).await;
    let stop_time = crash_the_host(client(&["crash"]), &fixture, hang_dir.path(), &server).await;
    eprintln!(
        "MCP client test: {client_time:?} for the client's scenario; the run of a killed host stopped {stop_time:?} after"
    );
}

/// tools/list: the five tools, and `run` takes `grove run`'s flags.
fn check_tools(report: &Value) {
    assert_eq!(
        report["tools"],
        json!(["list_runs", "resume", "review", "run", "show_run"]),
        "tools/list offers grove's five tools"
    );
    let arguments: Vec<&String> = report["run_schema"]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    for flag in [
        "task",
        "jobs",
        "provider",
        "model",
        "max_turns",
        "budget_tokens",
        "subagent_budget_tokens",
        "no_apply",
        "sandbox",
        "allow_network",
    ] {
        assert!(
            arguments.iter().any(|a| *a == flag),
            "the run tool takes `{flag}`: {arguments:?}"
        );
    }
}

/// The first run: `grove run --json`'s object, its summary and its progress; returns its id.
fn check_run(report: &Value, base: &str) -> String {
    // The run: the same JSON as `grove run --json`, and the summary.
    let run = &report["run"];
    assert_eq!(
        run["is_error"], false,
        "a finished run is no tool error: {run:#}"
    );
    let structured = &run["structured"];
    let run_id = structured["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        (
            &structured["status"],
            &structured["base"],
            &structured["applied"]
        ),
        (&json!("finished"), &json!(base), &json!(false)),
        "a no_apply run finishes on the base without touching the branch: {structured:#}"
    );
    assert_eq!(
        outcomes(structured),
        owned(&[
            ("S1", "merged", json!("approve")),
            ("S2", "rejected", json!("reject"))
        ]),
    );
    for key in ["result_commit", "totals", "result_branch", "branch"] {
        assert!(
            structured.get(key).is_some(),
            "the result carries `grove run --json`'s `{key}`"
        );
    }
    assert_eq!(
        structured["hints"],
        json!([
            format!("The result is on grove/{run_id}/result; your branch was not touched."),
            format!("To apply it: git merge --ff-only grove/{run_id}/squashed"),
            "The `review` tool approves or rejects its subtasks and applies it.".to_owned(),
        ]),
        "what to do next is in structuredContent, all that Claude Code and Codex pass on"
    );
    let ledgers: Vec<&str> = [
        "lead_ledger",
        "worker_ledger",
        "reviewer_ledger",
        "cache_read_tokens",
    ]
    .into_iter()
    .filter(|key| structured.get(*key).is_some() || structured["subtasks"][0].get(*key).is_some())
    .collect();
    assert_eq!(
        ledgers,
        Vec::<&str>::new(),
        "the per-agent token ledgers stay out of what a model reads: {structured:#}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(run["texts"][1].as_str().unwrap()).unwrap(),
        *structured,
        "the second text block is the same JSON, for clients that read only text"
    );
    let summary = run["texts"][0].as_str().unwrap();
    for expected in [
        format!("Run {run_id} finished: 1 of 2 subtasks merged."),
        "S1 merged (reviewer: approve; 1 file changed".to_owned(),
        "S2 rejected (reviewer: reject; 1 file changed".to_owned(),
        "the content is bad".to_owned(),
        format!("grove/{run_id}/result"),
    ] {
        assert!(
            summary.contains(&expected),
            "the summary says `{expected}`:\n{summary}"
        );
    }
    let mut progress = messages(&report["run_progress"]);
    assert_eq!(
        progress.remove(0),
        format!(
            "Run {run_id} started; if this call ends before it does, the run stays resumable: \
             `resume` with run_id {run_id}"
        ),
        "the first progress notification carries the run id, for a client that gives up on \
         the call (its tool timeout) before the run ends"
    );
    progress.sort();
    assert_eq!(
        progress,
        vec![
            "S1 merged (reviewer: approve; 1 file changed, 1 insertion(+), 1 deletion(-))",
            "S1 started: WRITE a.txt good",
            "S2 rejected (reviewer: reject; 1 file changed, 1 insertion(+), 1 deletion(-))",
            "S2 started: WRITE b.txt bad",
        ],
        "one progress notification per subtask start and end"
    );
    let counts: Vec<f64> = report["run_progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(counts, vec![1.0, 2.0, 3.0, 4.0, 5.0], "progress only grows");

    run_id
}

/// list_runs after the first run, and show_run: verdicts, findings, diffstats, capped diffs.
fn check_show(report: &Value, run_id: &str) {
    // list_runs is `grove runs --json`.
    let listed = &report["runs"]["structured"]["runs"];
    assert_eq!(listed[0]["run_id"], json!(run_id));
    assert_eq!(listed[0]["status"], "finished");
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");

    // show_run: verdicts, findings, diffstats, capped diffs.
    let show = &report["show"]["structured"];
    assert_eq!(show["run_id"], json!(run_id));
    assert_eq!(
        show["subtasks"][1]["reviewer"],
        json!({
            "verdict": "reject",
            "summary": "the content is bad",
            "findings": [{"path": "b.txt", "line": 1, "problem": "says bad", "blocking": true}],
        }),
        "show_run carries the reviewer's verdict and findings, each blocking or not"
    );
    assert_eq!(
        show["subtasks"][0]["diffstat"]["files"][0]["path"], "a.txt",
        "and each subtask's diffstat"
    );
    let diff = &show["diffs"]["S2"];
    assert!(
        diff["text"].as_str().unwrap().contains("+bad"),
        "with diff: true, each subtask's diff: {diff:#}"
    );
    assert_eq!(diff["truncated"], false, "a short diff is whole: {diff:#}");
    let cut = &report["show_cut"]["structured"]["diffs"]["S2"];
    assert_eq!(
        (
            cut["truncated"].clone(),
            cut["text"].as_str().unwrap().chars().count()
        ),
        (json!(true), 11),
        "a diff over diff_max_chars is cut there and marked: {cut:#}"
    );
    assert_eq!(
        cut["chars"], diff["chars"],
        "the cut diff says how long the whole one is"
    );
    assert_eq!(
        show["recorded"],
        json!([]),
        "show_run is `grove review --list --json`'s object, which records nothing"
    );
    let text = report["show"]["texts"][0].as_str().unwrap();
    assert!(
        text.contains("  - [blocking] b.txt:1: says bad"),
        "the show summary lists findings:\n{text}"
    );
}

/// review: a person's approval applied, then a second review refused.
fn check_review(report: &Value, fixture: &GitFixture) {
    // review: the person approves S2 and applies; then the run can no longer change.
    let review = &report["review"];
    assert_eq!(review["is_error"], false, "{review:#}");
    assert_eq!(
        review["structured"]["recorded"],
        json!([{"subtask": "S2", "verdict": "approve", "previous": "reject"}])
    );
    assert_eq!(review["structured"]["apply"]["status"], "applied");
    assert_eq!(
        (fixture.read("a.txt"), fixture.read("b.txt")),
        (b"good\n".to_vec(), b"bad\n".to_vec()),
        "the approved subtasks are on the user's branch"
    );
    let again = &report["review_again"];
    assert_eq!(again["is_error"], true, "{again:#}");
    assert!(
        again["texts"][0]
            .as_str()
            .unwrap()
            .contains("was already applied"),
        "a run already applied is refused as `grove review` refuses it: {again:#}"
    );
}

/// The cancelled run is paused, resumable, and the `resume` tool finishes it.
fn check_cancel_and_resume(report: &Value, fixture: &GitFixture) {
    // The cancelled run: interrupted, its work checkpointed, listed, resumable.
    assert!(
        report["cancelled_result"].is_null(),
        "the cancelled call returns no result to the client"
    );
    let cancelled_progress = messages(&report["cancelled_progress"]);
    assert_eq!(
        cancelled_progress[1..],
        ["S1 started: SLOW c.txt"],
        "progress went out until the cancellation: {cancelled_progress:?}"
    );
    let after = report["runs_after_cancel"]["structured"]["runs"]
        .as_array()
        .unwrap();
    assert_eq!(after.len(), 2, "{after:#?}");
    // Listed by run id: two runs started in the same second sort by their suffix.
    let cancelled = after
        .iter()
        .find(|run| run["task"] == "write c slowly")
        .unwrap();
    let cancelled_id = cancelled["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&cancelled["status"], &cancelled["pause_reason"]),
        (
            &json!("interrupted"),
            &json!(format!(
                "interrupted; `grove resume {cancelled_id}` continues the run"
            ))
        ),
        "a cancelled MCP request interrupts the run as Ctrl-C does: {after:#?}"
    );

    // The `resume` tool finishes it, as `grove resume` would.
    let resumed = &report["resumed"];
    assert_eq!(resumed["is_error"], false, "{resumed:#}");
    assert_eq!(
        (
            &resumed["structured"]["run_id"],
            outcomes(&resumed["structured"])
        ),
        (
            &json!(cancelled_id),
            owned(&[("S1", "merged", json!("approve"))])
        ),
        "the resume tool finishes the cancelled run: {resumed:#}"
    );
    assert!(
        messages(&report["resumed_progress"])
            .iter()
            .any(|m| m.starts_with("S1 merged")),
        "a resumed run sends progress too: {}",
        report["resumed_progress"]
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{cancelled_id}/result:c.txt")]),
        "finished",
        "the resumed worker's work is in the result (no_apply: the branch is left alone)"
    );
}

/// list_runs at the end of the scenario is `grove runs --json`.
async fn check_listing(report: &Value, fixture: &GitFixture) {
    let cli_runs = grove(fixture, None, &["runs", "--json"]).await;
    let cli_runs: Value = serde_json::from_slice(&cli_runs.stdout).unwrap();
    let cli_run = |field: &str, value: &Value| -> Value {
        cli_runs
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run[field] == *value)
            .cloned()
            .unwrap_or_else(|| {
                panic!("`grove runs` lists the run with {field} {value}: {cli_runs:#}")
            })
    };
    let listed = report["runs_final"]["structured"]["runs"]
        .as_array()
        .unwrap();
    assert_eq!(listed.len(), 2, "{listed:#?}");
    for listed in listed {
        assert_eq!(
            cli_run("run_id", &listed["run_id"]),
            *listed,
            "list_runs is `grove runs --json`, and MCP runs are ordinary runs"
        );
    }
}

/// Starts `host` (the client in `crash` mode), kills it while its run's worker waits on
/// the model, and checks that grove stopped the run itself; returns how long that took.
async fn crash_the_host(
    mut host_command: tokio::process::Command,
    fixture: &GitFixture,
    hang_dir: &Path,
    server: &FakeServer,
) -> Duration {
    // The host dies mid-run (no cancellation, only the end of grove's stdin): grove
    // winds the run down itself and exits; killed, the run would have no pause reason.
    let mut host = host_command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hang_dir.join("d.txt").exists() {
        assert!(
            Instant::now() < deadline,
            "the crash run's worker never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.kill().await.unwrap();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(20);
    let quit = loop {
        let runs = grove(fixture, None, &["runs", "--json"]).await;
        let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
        let run = runs
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run["task"] == "write d then crash")
            .cloned()
            .unwrap();
        if run["status"] != "running" {
            break run;
        }
        assert!(
            Instant::now() < deadline,
            "grove stops the run within 20 s of its client's death: {run:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stop_time = killed.elapsed();
    // rmcp alone would let the run go on for its 5 s drain of in-flight requests.
    assert!(
        stop_time < Duration::from_secs(4),
        "the end of stdin stops the runs at once, not after rmcp's drain: {stop_time:?}"
    );
    let quit_id = quit["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&quit["status"], &quit["pause_reason"]),
        (
            &json!("interrupted"),
            &json!(format!(
                "interrupted; `grove resume {quit_id}` continues the run"
            ))
        ),
        "a client that goes away interrupts its runs as Ctrl-C does: {quit:#}"
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{quit_id}/1:d.txt")]),
        "started",
        "the interrupted worker's write is checkpointed on its branch"
    );
    let resumed = grove(fixture, Some(server), &["resume", "--json", &quit_id]).await;
    server.assert_no_violations();
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(
        outcomes(&resumed),
        owned(&[("S1", "merged", json!("approve"))]),
        "`grove resume` finishes the run the dead host left: {resumed:#}"
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{quit_id}/result:d.txt")]),
        "finished"
    );
    stop_time
}
