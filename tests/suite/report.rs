//! `grove report RUN`: a real run end to end against the fake model server, the report
//! written by the binary, and the page opened in headless Chromium.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::report::{self as html_report, DiffView, PriceTable};
use grove::run::{ModelChoice, Models, RunEnd, RunOptions};
use grove::store::journal::{SubtaskOutcome, VerdictKind};
use grove::store::state::RunStatus;

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::Grove;
use crate::support::requests::role;
use crate::support::scripted_run::own_review_text;

/// Text that breaks out of a `<script>` element if it is not escaped.
const INJECTION: &str = "</script><script>alert(1)</script><img src=x onerror=alert(2)>";

/// A lead that delegates two subtasks, workers that follow `WRITE <path> <content>`, and
/// a reviewer that rejects any diff adding `junk`.
fn responder(request: &RecordedRequest) -> Reply {
    let answered = !request.tool_results().is_empty();
    let turn = match (role(request), answered) {
        ("lead", false) => Turn::text("Delegating.")
            .tool_use(
                "d1",
                "delegate",
                json!({ "task": format!("Greet in a.txt {INJECTION}\nWRITE a.txt hello {INJECTION}") }),
            )
            .tool_use(
                "d2",
                "delegate",
                json!({ "task": "Add a file.\nWRITE junk.txt junk" }),
            ),
        ("lead", true) => Turn::text("Done."),
        ("worker", false) => {
            let brief = request.last_user_text();
            let line = brief.lines().rev().find(|l| l.starts_with("WRITE ")).unwrap();
            let mut parts = line.splitn(3, ' ').skip(1);
            let (path, content) = (parts.next().unwrap(), parts.next().unwrap());
            Turn::text("Writing.").tool_use(
                "w1",
                "write_file",
                json!({ "path": path, "content": format!("{content}\n") }),
            )
        }
        ("worker", true) => Turn::text("Wrote it."),
        ("reviewer", false) => {
            let input = if own_review_text(request).contains("+junk") {
                json!({
                    "verdict": "reject",
                    "summary": format!("Junk nobody asked for {INJECTION}"),
                    "findings": [{ "path": "junk.txt", "line": 1, "problem": "not part of the task" }]
                })
            } else {
                json!({ "verdict": "approve", "summary": "Does what the brief asks." })
            };
            Turn::new().tool_use("r1", "submit_verdict", input)
        }
        (_, _) => Turn::text("Verdict given."),
    };
    turn.usage(1000, 100, 500, 50).into()
}

/// A finished run: S1 approved and merged, S2 rejected and archived. Returns its id.
async fn finished_run(fixture: &GitFixture) -> String {
    let server = FakeServer::with_responder(responder).await;
    let choice = |name: &str| ModelChoice {
        client: server.model(Provider::Anthropic, true),
        name: name.into(),
    };
    let report = grove::run::run(
        &fixture.repo,
        RunOptions {
            jobs: 2,
            git: fixture.options(),
            ..RunOptions::new(format!("Say hello {INJECTION}"))
        },
        Models {
            provider: "anthropic".into(),
            lead: choice("claude-sonnet-4-5"),
            worker: choice("claude-sonnet-4-5-20250929"),
            reviewer: choice("some-local-model"),
        },
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(report.status, RunEnd::Finished, "{report:#?}");
    let outcomes: Vec<_> = report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status, s.verdict))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (
                "S1".to_owned(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve)
            ),
            (
                "S2".to_owned(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject)
            ),
        ],
        "the scripted run merges S1 and rejects S2"
    );
    report.run_id
}

/// Runs the grove binary in `fixture`'s repository (the one sealed runner).
async fn grove(fixture: &GitFixture, args: &[&str]) -> Output {
    Grove::in_repo(fixture).grove_async(args).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every `src`/`href` value in `html` (double-quoted, as the report writes them).
fn linked_urls(html: &str) -> Vec<String> {
    let mut urls = Vec::new();
    for attribute in ["src=\"", "href=\"", "xlink:href=\""] {
        for (start, _) in html.match_indices(attribute) {
            let value = &html[start + attribute.len()..];
            urls.push(value[..value.find('"').unwrap_or(value.len())].to_owned());
        }
    }
    urls
}

/// The first `chromium` (or `chromium-browser`) on `PATH`.
pub(crate) fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| [dir.join("chromium"), dir.join("chromium-browser")])
        .find(|candidate| candidate.is_file())
}

/// The DOM headless Chromium builds from `page`, after its scripts ran.
pub(crate) async fn dump_dom(chromium: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .kill_on_drop(true);
    // A hang guard, not a timing assertion: a healthy Chromium answers in seconds.
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("chromium --dump-dom did not finish within two minutes")
        .unwrap();
    assert!(
        output.status.success(),
        "chromium failed: {}\n{}",
        output.status,
        text(&output.stderr)
    );
    text(&output.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_report_of_a_real_run_renders_in_chromium_with_every_subtask_and_verdict() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let run_id = finished_run(&fixture).await;
    let out_dir = tempfile::tempdir().unwrap();
    let page = out_dir.path().join("run report.html");

    let output = grove(
        &fixture,
        &["report", &run_id, "--output", page.to_str().unwrap()],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let canonical = std::fs::canonicalize(&page).unwrap();
    assert_eq!(
        text(&output.stdout),
        format!(
            "wrote the report of run {run_id} to {0}\nopen it with: xdg-open '{0}'   \
             (or open file://{1} in a browser)\n",
            canonical.display(),
            canonical.display().to_string().replace(' ', "%20")
        ),
        "the binary says where the page is and how to open it"
    );
    let html = std::fs::read_to_string(&page).unwrap();

    assert_eq!(
        linked_urls(&html)
            .into_iter()
            .filter(|url| !url.starts_with('#'))
            .collect::<Vec<_>>(),
        Vec::<String>::new(),
        "the page links and loads nothing but its own sections"
    );
    assert!(
        !html.contains(INJECTION) && !html.contains("<script>alert"),
        "the task, brief, diff and verdict text are escaped"
    );
    assert!(
        html.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the injected text is shown as text"
    );
    assert_eq!(
        html.matches("<script>").count(),
        2,
        "only the page's own two scripts"
    );

    let Some(chromium) = find_chromium() else {
        if std::env::var("GROVE_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
            panic!("GROVE_REQUIRE_CHROMIUM=1 but no chromium on PATH");
        }
        #[allow(clippy::print_stderr)] // the skip must be visible in the test output
        {
            eprintln!(
                "skipping the Chromium half of this test: no chromium on PATH \
                 (set GROVE_REQUIRE_CHROMIUM=1 to make that a failure)"
            );
        }
        return;
    };
    let dom = dump_dom(&chromium, &page).await;
    assert!(
        !dom.contains("data-grove-error=\""),
        "the page's scripts ran without error: {dom}"
    );
    assert!(
        dom.contains("data-grove-report=\"ok\"") && dom.contains("data-subtasks=\"2\""),
        "the page's check script ran to its end and counted both subtasks"
    );
    for (id, status, verdict) in [("S1", "merged", "approve"), ("S2", "rejected", "reject")] {
        assert!(
            dom.contains(&format!(
                "id=\"subtask-{id}\" data-subtask=\"{id}\" data-status=\"{status}\" \
                 data-verdict=\"{verdict}\""
            )),
            "{id} is shown as {status} with verdict {verdict}"
        );
    }
    assert!(
        dom.contains("reviewer: reject") && dom.contains("not part of the task"),
        "the rejection and its finding are shown"
    );
    assert!(
        !dom.contains("<script>alert") && !dom.contains("<img src=\"x\""),
        "no injected element made it into the DOM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gathered_data_has_every_agent_on_the_timeline_diffs_and_costs() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let run_id = finished_run(&fixture).await;
    let repo = fixture.open().await;
    let data = html_report::gather(&repo, &run_id, PriceTable::builtin())
        .await
        .unwrap();

    assert_eq!(data.status, RunStatus::Finished);
    assert_eq!(
        (data.applied, data.applied_history.clone()),
        (
            true,
            Some((fixture.git(&["rev-parse", "refs/heads/main"]), 1))
        ),
        "the report names what the user's branch holds: the squashed history (one commit, \
         S1's), not the result's merge commit"
    );
    let lanes: Vec<(String, String, u32, usize, bool)> = data
        .timeline
        .lanes
        .iter()
        .map(|l| {
            (
                l.role.clone(),
                l.label.clone(),
                l.turns,
                l.turn_ms.len(),
                l.ended_ms.is_some(),
            )
        })
        .collect();
    let lane = |role: &str, label: &str, turns, timed| {
        (role.to_owned(), label.to_owned(), turns, timed, true)
    };
    assert_eq!(
        lanes,
        vec![
            lane("lead", "lead", 3, 1),
            lane("worker", "S1", 2, 1),
            lane("reviewer", "S1", 1, 1),
            lane("worker", "S2", 2, 1),
            lane("reviewer", "S2", 1, 1),
        ],
        "one ended lane per agent, every turn counted, the tool-calling turns timed"
    );
    for lane in &data.timeline.lanes {
        let ended = lane.ended_ms.unwrap();
        assert!(
            data.timeline.start_ms <= lane.started_ms
                && lane
                    .turn_ms
                    .iter()
                    .all(|t| lane.started_ms <= *t && *t <= ended)
                && ended <= data.timeline.end_ms,
            "a lane's turns lie within its bar, within the run: {lane:?}"
        );
    }
    let markers: Vec<Vec<&str>> = data
        .timeline
        .lanes
        .iter()
        .map(|l| l.markers.iter().map(|m| m.kind.as_str()).collect())
        .collect();
    assert_eq!(
        markers,
        vec![
            vec![],
            vec![],
            vec!["approved", "merged"],
            vec![],
            vec!["rejected"]
        ]
    );

    let diffs: Vec<(String, Vec<String>)> = data
        .subtasks
        .iter()
        .map(|s| match &s.diff {
            DiffView::Shown { source, files, .. } => (
                source.clone(),
                files.iter().map(|f| f.path.clone()).collect(),
            ),
            DiffView::Unavailable { reason } => (reason.clone(), vec![]),
        })
        .collect();
    assert_eq!(
        diffs,
        vec![
            ("merged commit".to_owned(), vec!["a.txt".to_owned()]),
            (
                format!("archived work refs/grove/archive/{run_id}/2"),
                vec!["junk.txt".to_owned()]
            ),
        ],
        "a merged subtask shows its merged commit, a rejected one its archive"
    );

    let costs: Vec<(String, String, u32, u64, bool)> = data
        .agents
        .iter()
        .map(|a| {
            (
                a.name(),
                a.model.clone(),
                a.ledger.steps,
                a.ledger.input_tokens,
                a.complete,
            )
        })
        .collect();
    let row = |name: &str, model: &str, steps: u32| {
        let input = 1000 * u64::from(steps);
        (name.to_owned(), model.to_owned(), steps, input, true)
    };
    assert_eq!(
        costs,
        vec![
            row("lead", "claude-sonnet-4-5", 3),
            row("worker S1", "claude-sonnet-4-5-20250929", 2),
            row("reviewer S1", "some-local-model", 1),
            row("worker S2", "claude-sonnet-4-5-20250929", 2),
            row("reviewer S2", "some-local-model", 1),
        ],
        "every agent's whole ledger, last turn included, with the model it used"
    );
    let html = html_report::render_html(&data);
    assert!(
        html.contains("unknown price</td>"),
        "the reviewer's unlisted model is not priced at zero"
    );
    assert!(html.contains("<strong>estimate</strong>"));
}

#[tokio::test]
async fn an_unknown_or_malformed_run_id_is_a_clear_error() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let unknown = grove(&fixture, &["report", "20260101-000000-abcd"]).await;
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = text(&unknown.stderr);
    assert!(
        stderr.starts_with("grove: no grove run 20260101-000000-abcd (looked in "),
        "{stderr}"
    );
    let malformed = grove(&fixture, &["report", "../../etc"]).await;
    assert_eq!(
        malformed.status.code(),
        Some(2),
        "a malformed run id is a usage error (exit 2), an unknown one an error (exit 1)"
    );
    assert!(
        text(&malformed.stderr).contains("`../../etc` is not a grove run id"),
        "{}",
        text(&malformed.stderr)
    );
}

#[tokio::test]
async fn a_bad_price_file_is_named_with_its_line() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    fixture.write(
        "prices.toml",
        "[models.x]\ninput = 1.0\noutput = \"cheap\"\n",
    );
    let output = grove(
        &fixture,
        &["report", "20260101-000000-abcd", "--prices", "prices.toml"],
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "a bad price file is a usage error"
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "grove: price file {}, line 3: ",
            fixture.repo.join("prices.toml").display()
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_interrupted_run_reports_its_open_subtask_from_its_branch() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let base = fixture.rev("HEAD").to_string();
    let run_id = "20260101-000000-0001";
    let work = fixture
        .commit_on_branch(
            &format!("grove/{run_id}/1"),
            "HEAD",
            &[("a.txt", Some("A\n"))],
        )
        .to_string();
    let run_dir = fixture.repo.join(".git/grove/runs").join(run_id);
    std::fs::create_dir_all(&run_dir).unwrap();
    let records = [
        json!({"ts_ms": 1_000, "type": "run_started", "run_id": run_id, "task": "shout",
               "base": base, "branch": "refs/heads/main", "provider": "anthropic",
               "model": "claude-sonnet-4-5"}),
        json!({"ts_ms": 1_500, "type": "subtask_started", "subtask": "S2", "task": "shout b",
               "branch": format!("grove/{run_id}/2"), "mode": "isolated", "agent": "worker"}),
        json!({"ts_ms": 2_000, "type": "subtask_started", "subtask": "S1", "task": "shout a",
               "branch": format!("grove/{run_id}/1"), "mode": "isolated", "agent": "worker"}),
        json!({"ts_ms": 3_000, "type": "checkpoint", "subtask": "S1", "commit": work, "turn": 1}),
    ];
    let journal: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(run_dir.join("journal.jsonl"), journal).unwrap();

    let output = grove(&fixture, &["report", run_id]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    for expected in [
        "id=\"run-status\">interrupted</span>",
        "<code>grove resume 20260101-000000-0001</code>",
        "data-subtask=\"S1\" data-status=\"running\" data-verdict=\"none\"",
        "Diff of the branch grove/20260101-000000-0001/1",
        "<td class=\"code del\"><span class=\"w\">a</span></td>",
        "<rect class=\"bar open\"",
        "<p class=\"note\">No diff: the worker committed nothing</p>",
    ] {
        assert!(
            html.contains(expected),
            "an interrupted run's report shows `{expected}`"
        );
    }
    let position = |id: &str| html.find(&format!("id=\"subtask-{id}\"")).unwrap();
    assert!(
        position("S1") < position("S2"),
        "subtasks are shown in delegation order, whichever started first"
    );
}

#[tokio::test]
async fn paused_and_failed_runs_report_why_they_stopped() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    let base = fixture.rev("HEAD").to_string();
    let cases = [
        (
            "20260101-000000-0002",
            json!({"ts_ms": 2_000, "type": "paused", "reason": "the model API failed <503>"}),
            vec![
                "id=\"run-status\">paused</span>",
                "<dt>paused</dt><dd>the model API failed &lt;503&gt;</dd>",
                "<code>grove resume 20260101-000000-0002</code>",
                "<tr><td><code>gpt-4.1</code></td><td class=\"num\">1.50</td>\
                 <td class=\"num\">6.00</td><td class=\"num\">—</td><td class=\"num\">—</td>\
                 <td class=\"num\">—</td></tr>",
                "with the models of <code>",
            ],
        ),
        (
            "20260101-000000-0003",
            json!({"ts_ms": 2_000, "type": "run_finished", "status": "failed", "applied": false,
                   "result_commit": null, "error": "the lead stopped <x>"}),
            vec![
                "id=\"run-status\">failed</span>",
                "<dt>error</dt><dd>the lead stopped &lt;x&gt;</dd>",
                "<text x=\"1076.0\" y=\"73.0\" text-anchor=\"end\">failed: the lead stopped &lt;x&gt;</text>",
            ],
        ),
    ];
    std::fs::write(
        fixture.repo.join("../prices.toml"),
        "[models.\"gpt-4.1\"]\ninput = 1.5\noutput = 6.0\n",
    )
    .unwrap();
    for (run_id, last, expected) in cases {
        let run_dir = fixture.repo.join(".git/grove/runs").join(run_id);
        std::fs::create_dir_all(&run_dir).unwrap();
        let first = json!({"ts_ms": 1_000, "type": "run_started", "run_id": run_id,
            "task": "t", "base": base, "branch": "refs/heads/main", "provider": "openai",
            "model": "gpt-4.1"});
        std::fs::write(run_dir.join("journal.jsonl"), format!("{first}\n{last}\n")).unwrap();

        let output = grove(&fixture, &["report", run_id, "--prices", "../prices.toml"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
        assert!(
            html.contains("The lead delegated no subtask."),
            "{run_id}: a run without subtasks says so"
        );
        for needle in expected {
            assert!(
                html.contains(needle),
                "{run_id}: the report shows `{needle}`"
            );
        }
    }
}
