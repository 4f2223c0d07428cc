//! The resolver end to end (issue 14, Done-means (6)): two subtasks edit the same line,
//! the second conflicts with the result, and a resolver merges the two — the grove
//! binary, real worktrees and merges, every model call over HTTP to the fake server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, grove_in, stderr};
use crate::support::merge_order::MergedFirst;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// Both subtasks rewrite `src/a.txt` (`alpha`): S1 merges, S2 conflicts with it.
const BRIEFS: &[(&str, Option<&str>)] = &[
    ("One.\nWRITE src/a.txt FIRST", None),
    ("Two.\nWRITE src/a.txt SECOND", None),
];

/// What the resolver writes: both lines, no marker.
const BOTH: &str = "FIRST\nSECOND\n";

/// How a resolver's brief starts (`run/subtask/resolve.rs`).
const RESOLVER_BRIEF: &str = "Resolve a merge conflict.";

fn is_resolver(request: &RecordedRequest) -> bool {
    first_user_text(request).starts_with(RESOLVER_BRIEF)
}

fn is_resolvers_review(request: &RecordedRequest) -> bool {
    first_user_text(request).starts_with(&format!("# The subtask's brief\n\n{RESOLVER_BRIEF}"))
}

/// The standard lead, workers and reviewers; a resolver reads the conflicting file, then
/// writes both lines; its reviewer gives `resolver_verdict`.
async fn server(fixture: &GitFixture, resolver_verdict: &'static str) -> FakeServer {
    FakeServer::with_responder(responder(fixture, resolver_verdict)).await
}

fn responder(
    fixture: &GitFixture,
    resolver_verdict: &'static str,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    // Merges follow reviews as they end: S2's waits for S1's merge, so S2 conflicts.
    let order = MergedFirst::new(fixture, "S1", BRIEFS[1].0);
    move |request| match who(request) {
        Who::Lead => lead_reply(request, BRIEFS),
        Who::Worker if is_resolver(request) => resolver_reply(request),
        Who::Worker => worker_reply(request),
        Who::Reviewer if is_resolvers_review(request) => {
            let input = json!({"verdict": resolver_verdict, "summary": "judged the merge"});
            let turn = if request.tool_results().is_empty() {
                Turn::new().tool_use("resolve_review_1", "submit_verdict", input)
            } else {
                Turn::text("Verdict given.")
            };
            usage(turn).into()
        }
        Who::Reviewer => order.hold(request, reviewer_reply(request)),
    }
}

fn resolver_reply(request: &RecordedRequest) -> Reply {
    let turn = match request.tool_calls().len() {
        0 => Turn::text("Reading the conflict.").tool_use(
            "resolver_read",
            "read_file",
            json!({"path": "src/a.txt"}),
        ),
        1 => Turn::text("Keeping both.").tool_use(
            "resolver_write",
            "write_file",
            json!({"path": "src/a.txt", "content": BOTH}),
        ),
        _ => Turn::text("Kept both lines."),
    };
    usage(turn).into()
}

fn fixture() -> GitFixture {
    repo_with_rules()
}

/// `(id, status, kind, resolution)` of each subtask in `--json`.
fn subtasks(json: &Value) -> Vec<(String, String, String, Value)> {
    json["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap().to_owned(),
                s["kind"].as_str().unwrap().to_owned(),
                s.get("resolution").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn row(id: &str, status: &str, kind: &str, resolution: Value) -> (String, String, String, Value) {
    (id.into(), status.into(), kind.into(), resolution)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_is_resolved_reviewed_and_both_changes_land_on_the_users_branch() {
    let fixture = fixture();
    let server = server(&fixture, "approve").await;

    let output = grove_in(&fixture, Some(&server), &["run", USER_TASK, "--json"]).await;

    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        subtasks(&json),
        vec![
            row("S1", "merged", "task", Value::Null),
            row("S2", "merged", "task", json!("resolver")),
            row("S3", "merged", "resolve", Value::Null),
        ],
        "S2 conflicted, its resolver S3 got it merged"
    );
    assert_eq!(json["applied"], json!(true));
    assert_eq!(
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        BOTH,
        "both changes are on the user's branch"
    );
    assert!(
        stderr(&output).contains(
            "S2    merged    approve  1 file changed, 1 insertion(+), 1 deletion(-…       300       30   $0.0010\n      \
             conflicted with earlier work in src/a.txt; resolver S3 merged the two and its \
             review passed\n"
        ),
        "the report says how S2 was merged: {}",
        stderr(&output)
    );
    let run_id = json["run_id"].as_str().unwrap();
    let requests = server.requests();
    let resolver: Vec<&RecordedRequest> = requests.iter().filter(|r| is_resolver(r)).collect();
    assert_eq!(resolver.len(), 3, "read, write, final answer");
    let brief = first_user_text(resolver[0]);
    assert!(
        brief.contains("# S2's brief (the subtask being merged")
            && brief.contains("Two.\nWRITE src/a.txt SECOND")
            && brief.contains("## S1\n\nOne.\nWRITE src/a.txt FIRST")
            && brief.contains("- src/a.txt\n"),
        "the resolver is briefed with both briefs and the path: {brief}"
    );
    let read = &resolver[1].tool_results()[0].1;
    assert!(
        read.contains(&format!(
            "     1\t<<<<<<< grove/{run_id}/result\n     2\tFIRST\n     3\t=======\n     \
             4\tSECOND\n     5\t>>>>>>> grove/{run_id}/2"
        )),
        "the resolver's worktree holds git-merge markers naming both sides: {read}"
    );
    let reviews: Vec<&RecordedRequest> =
        requests.iter().filter(|r| is_resolvers_review(r)).collect();
    assert_eq!(
        reviews[0].messages().len(),
        1,
        "a fresh reviewer: one message"
    );
    let review = first_user_text(reviews[0]);
    assert!(
        review.contains("Two.\nWRITE src/a.txt SECOND")
            && review.contains("One.\nWRITE src/a.txt FIRST")
            && review.contains("# The diff against the run's result (1 file changed, 1 insertion(+), 0 deletions(-))")
            && review.contains("+SECOND"),
        "the resolver's reviewer sees both briefs and the diff against the result: {review}"
    );
    let result = format!("grove/{run_id}/result");
    let log = fixture.git(&["log", "--first-parent", "--format=%s", "-2", &result]);
    assert_eq!(
        log,
        format!("grove {run_id}: merge S2, resolved by S3\ngrove {run_id}: merge S1"),
        "one merge per subtask on the result's first-parent chain"
    );
    assert_eq!(
        fixture.git(&[
            "log",
            "--format=%s|%(trailers:key=Grove-Subtask,valueonly,separator=%x2C)",
            "-2"
        ]),
        "Two.|S2\nWORKER-FINAL: wrote the file as asked.|S1",
        "the user's branch gets one commit per subtask, the resolved one under its own brief"
    );
}

/// Holds what `suite::run`'s `two_subtasks_editing_the_same_line_conflict_and_both_are_kept`
/// asserted before conflicts got a resolver: S1 merged, S2 approved but `conflict` on
/// `src/a.txt`, the branch with S1's line, S2's line in its archive.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejected_resolution_leaves_the_subtask_in_conflict_and_both_sides_recoverable() {
    let fixture = fixture();
    let server = server(&fixture, "reject").await;

    let output = grove_in(
        &fixture,
        Some(&server),
        &["run", USER_TASK, "--json", "--provider", "openai"],
    )
    .await;

    server.assert_no_violations();
    assert_eq!(
        output.status.code(),
        Some(3),
        "a subtask left in conflict exits 3: {}",
        stderr(&output)
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        subtasks(&json),
        vec![
            row("S1", "merged", "task", Value::Null),
            row("S2", "conflict", "task", Value::Null),
            row("S3", "rejected", "resolve", Value::Null),
        ],
        "approved work merges in subtask order; the rejected resolution merges nothing"
    );
    assert_eq!(json["subtasks"][1]["verdict"], json!("approve"));
    assert_eq!(json["subtasks"][1]["conflict_paths"], json!(["src/a.txt"]));
    let archive = |index: usize| {
        json["subtasks"][index]["archive_ref"]
            .as_str()
            .unwrap_or_else(|| panic!("subtask {index} is archived: {json}"))
            .to_owned()
    };
    let kept = (
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        fixture.git(&["show", &format!("{}:src/a.txt", archive(1))]),
        fixture.git(&["show", &format!("{}:src/a.txt", archive(2))]),
    );
    assert_eq!(
        kept,
        (
            "FIRST\n".to_owned(),
            "SECOND".to_owned(),
            BOTH.trim_end().to_owned()
        ),
        "the branch has S1; S2's work and the rejected resolution are both kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_killed_while_its_resolver_works_resumes_and_resolves_anew_never_half_merged() {
    let fixture = fixture();
    let respond = responder(&fixture, "approve");
    let server = FakeServer::with_responder(move |request| {
        if who(request) == Who::Worker && is_resolver(request) {
            // The resolver's first call never ends: grove dies while it works.
            return Reply::Stall(Turn::text("Reading"));
        }
        respond(request)
    })
    .await;
    let mut child = Grove::in_repo(&fixture)
        .with_server(&server)
        .spawn(["run", USER_TASK]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !server.requests().iter().any(is_resolver) {
        assert!(
            std::time::Instant::now() < deadline,
            "no resolver started: {:?}",
            server.requests().len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    child.kill().await.unwrap(); // SIGKILL, while the resolver works
    let runs = grove_in(&fixture, None, &["runs", "--json"]).await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    let result = format!("grove/{run_id}/result");
    assert_eq!(
        fixture.git(&["show", &format!("{result}:src/a.txt")]),
        "FIRST",
        "nothing of the resolution is on the result"
    );

    server.set_responder(responder(&fixture, "approve"));
    let output = grove_in(&fixture, Some(&server), &["resume", "--json", &run_id]).await;

    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        subtasks(&json),
        vec![
            row("S1", "merged", "task", Value::Null),
            row("S2", "merged", "task", json!("resolver")),
            row("S3", "failed", "resolve", Value::Null),
            row("S4", "merged", "resolve", Value::Null),
        ],
        "the interrupted resolver is closed, and a new one resolves the conflict"
    );
    assert_eq!(
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        BOTH,
        "both changes are on the user's branch"
    );
    assert_eq!(
        fixture.git(&[
            "log",
            "--first-parent",
            "--format=%s",
            "-2",
            &format!("grove/{run_id}/result")
        ]),
        format!("grove {run_id}: merge S2, resolved by S4\ngrove {run_id}: merge S1"),
        "one merge of the resolution on the result, by the new resolver"
    );
    assert!(
        json["subtasks"][2]["archive_ref"].is_string(),
        "the interrupted resolver's branch is archived: {json}"
    );
}

/// Row 49: grove is killed just as the resolver starts (its worktree being made,
/// S1's cleanup still waiting for its turn). The resume resolves the conflict anew, as
/// above, and leaves nothing of the run registered or on disk, saying what it removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kill_as_the_resolver_starts_leaves_nothing_behind_once_resumed() {
    let fixture = fixture();
    let server = server(&fixture, "approve").await;
    let grove = Grove::in_repo(&fixture).with_server(&server);
    let watched = grove
        .spawn_until(["run", USER_TASK], |line| {
            line.starts_with("S3: delegated: ")
        })
        .await;
    watched.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = watched.output().await;
    assert_eq!(killed.status.code(), None, "killed: {}", stderr(&killed));
    let runs = grove.grove_async(["runs", "--json"]).await;
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_owned();
    let merged_before = fixture.worktree_dir(&run_id, 1);
    assert!(
        merged_before.exists(),
        "the kill came before S1's cleanup: {}",
        merged_before.display()
    );

    let output = grove_in(&fixture, Some(&server), &["resume", "--json", &run_id]).await;

    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8(fixture.read("src/a.txt")).unwrap(),
        BOTH,
        "both changes are on the user's branch"
    );
    let err = stderr(&output);
    assert_eq!(
        fixture.leftovers(),
        crate::support::git_fixture::Leftovers::default(),
        "nothing of the run is left registered or on disk: {err}"
    );
    assert!(
        err.lines().any(|line| {
            line.starts_with("grove: removed the worktrees an earlier grove of this run left: ")
                && line.contains(&merged_before.display().to_string())
        }),
        "the resume says what it removed: {err}"
    );
}
