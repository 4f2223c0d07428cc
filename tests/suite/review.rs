//! `grove review` end to end: a real run against the fake model server, then a person's
//! overrides through the library and the binary — the rebuilt result, the apply and its
//! refusals, the journal, and the rendered diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::git::{Colour, CommitId};
use grove::git::{RefusalReason, Repo};
use grove::model::Provider;
use grove::review::{self, AfterReview, ApplyResult, RecordedDecision, ReviewError, ReviewOutcome};
use grove::run::{ModelChoice, Models, RunOptions};
use grove::status::SubtaskId;
use grove::store::journal::{
    Entry, RebuiltSubtask, Record, RunOutcome, SubtaskOutcome, VerdictKind,
};
use grove::store::lock::RepoLock;
use grove::store::state::{MergeState, RunState, RunStatus, SubtaskStatus};
use grove::store::{RunStart, RunStore};

use crate::support::entries;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::Grove;
use crate::support::requests::role;
use crate::support::scripted_run::own_review_text;

/// Three briefs: S1 and S3 are approved, S2 adds a junk file and is rejected.
const BRIEFS: &[&str] = &[
    "Shout beta.\nWRITE src/a.txt alpha BETA gamma",
    "Add a file.\nWRITE junk.txt JUNK",
    "Shout delta.\nWRITE src/b.txt DELTA",
];

/// A lead that delegates `briefs` at once; workers that follow `WRITE <path> <content>`
/// (and change nothing without one); a reviewer that rejects any diff naming `junk`.
fn scripted(briefs: &'static [&'static str]) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let done = !request.tool_results().is_empty();
        let turn = match (role(request), done) {
            ("lead", false) => {
                briefs
                    .iter()
                    .enumerate()
                    .fold(Turn::text("Delegating."), |turn, (i, brief)| {
                        turn.tool_use(&format!("d{i}"), "delegate", json!({ "task": brief }))
                    })
            }
            ("worker", false) => {
                let brief = request.last_user_text();
                match brief.lines().rev().find(|l| l.starts_with("WRITE ")) {
                    Some(line) => {
                        let mut parts = line.splitn(3, ' ').skip(1);
                        let (path, content) = (parts.next().unwrap(), parts.next().unwrap());
                        Turn::new().tool_use(
                            "w1",
                            "write_file",
                            json!({ "path": path, "content": format!("{content}\n") }),
                        )
                    }
                    None => Turn::text("Nothing to change."),
                }
            }
            ("reviewer", false) => {
                let input = if own_review_text(request).contains("junk") {
                    json!({
                        "verdict": "reject",
                        "summary": "Adds a junk file nobody asked for.",
                        "findings": [{ "path": "junk.txt", "line": 1, "problem": "not part of the task" }]
                    })
                } else {
                    json!({ "verdict": "approve", "summary": "Does what the brief asks." })
                };
                Turn::new().tool_use("r1", "submit_verdict", input)
            }
            (_, true) => Turn::text("Done."),
            _ => unreachable!(),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

fn fixture() -> GitFixture {
    GitFixture::with_files(&[
        ("src/a.txt", "alpha beta gamma\n"),
        ("src/b.txt", "delta\n"),
    ])
}

/// Runs `briefs` to the end with `apply` as given; returns the run id.
async fn finished_run(
    fixture: &GitFixture,
    briefs: &'static [&'static str],
    apply: bool,
) -> String {
    let server = FakeServer::with_responder(scripted(briefs)).await;
    let choice = |name: &str| ModelChoice {
        client: server.model(Provider::Anthropic, true),
        name: name.into(),
    };
    let models = Models {
        provider: "anthropic".into(),
        lead: choice("lead-model"),
        worker: choice("worker-model"),
        reviewer: choice("reviewer-model"),
    };
    let options = RunOptions {
        jobs: 3,
        git: fixture.options(),
        apply,
        ..RunOptions::new("review me")
    };
    let report = grove::run::run(
        &fixture.repo,
        options,
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(report.applied, apply, "{report:#?}");
    report.run_id
}

/// The standard run: S1 and S3 merged, S2 rejected, the user's branch not touched.
async fn standard_run(fixture: &GitFixture) -> (Repo, String) {
    let run_id = finished_run(fixture, BRIEFS, false).await;
    let repo = fixture.open().await;
    let state = read_state(&repo, &run_id);
    assert_eq!(
        statuses(&state),
        vec![
            ("S1".into(), SubtaskStatus::Merged),
            ("S2".into(), SubtaskStatus::Rejected),
            ("S3".into(), SubtaskStatus::Merged),
        ],
        "the reviewer approved S1 and S3 and rejected S2"
    );
    (repo, run_id)
}

fn read_state(repo: &Repo, run_id: &str) -> RunState {
    RunStore::new(repo.common_dir())
        .read_state(&run_id.parse().unwrap())
        .unwrap()
}

fn journal_entries(repo: &Repo, run_id: &str) -> Vec<Entry> {
    let path = RunStore::new(repo.common_dir())
        .run_dir(&run_id.parse().unwrap())
        .join("journal.jsonl");
    grove::store::journal::read_journal(&path)
        .unwrap()
        .records
        .into_iter()
        .map(|r| r.entry)
        .collect()
}

/// Each subtask's status, by label (the journal lists them in the order they started).
fn statuses(state: &RunState) -> Vec<(String, SubtaskStatus)> {
    let mut statuses: Vec<(String, SubtaskStatus)> = state
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status))
        .collect();
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    statuses
}

fn rebuilt_statuses(outcome: &ReviewOutcome) -> Vec<(String, SubtaskOutcome)> {
    outcome
        .rebuilt
        .as_ref()
        .expect("the result was rebuilt")
        .subtasks
        .iter()
        .map(|s| (s.subtask.to_string(), s.status))
        .collect()
}

fn show(fixture: &GitFixture, rev: &str, path: &str) -> Option<String> {
    let output = crate::support::git_fixture::sealed_command(
        &fixture.home(),
        &fixture.repo,
        &["show", &format!("{rev}:{path}")],
    )
    .output()
    .unwrap();
    output
        .status
        .success()
        .then(|| String::from_utf8(output.stdout).unwrap())
}

fn approve(id: &str) -> (String, VerdictKind) {
    (id.to_owned(), VerdictKind::Approve)
}

fn reject(id: &str) -> (String, VerdictKind) {
    (id.to_owned(), VerdictKind::Reject)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approving_a_rejected_subtask_rebuilds_the_result_with_it_and_applies() {
    let fixture = fixture();
    let (repo, run_id) = standard_run(&fixture).await;
    let base = fixture.rev("main");

    let outcome = review::override_verdicts(&repo, &run_id, &[approve("S2")], AfterReview::Apply)
        .await
        .unwrap();

    assert_eq!(
        outcome.recorded,
        vec![RecordedDecision {
            subtask: SubtaskId(2),
            verdict: VerdictKind::Approve,
            previous: Some(VerdictKind::Reject),
        }],
        "the person's decision is recorded with the reviewer's it replaced"
    );
    assert_eq!(
        rebuilt_statuses(&outcome),
        vec![
            ("S1".into(), SubtaskOutcome::Merged),
            ("S2".into(), SubtaskOutcome::Merged),
            ("S3".into(), SubtaskOutcome::Merged),
        ]
    );
    let result = outcome.rebuilt.as_ref().unwrap().result;
    let Some(ApplyResult::Applied {
        from,
        to,
        merged_on_top,
        ..
    }) = outcome.apply
    else {
        panic!("the apply went through: {:#?}", outcome.apply);
    };
    let squashed = fixture.rev(&format!("grove/{run_id}/squashed"));
    assert_eq!(
        (from, to, merged_on_top),
        (base, squashed, false),
        "main fast-forwards from the base to the rebuilt result, squashed"
    );
    assert_eq!(
        (
            fixture.rev("main"),
            fixture.git(&["rev-parse", "main^{tree}"]),
            fixture.git(&[
                "log",
                "--reverse",
                "--format=%s|%(trailers:key=Grove-Subtask,key=Grove-Verdict,valueonly,separator=%x20)",
                &format!("{base}..main"),
            ]),
        ),
        (
            squashed,
            fixture.git(&["rev-parse", &format!("{result}^{{tree}}")]),
            "Done.|S1 approve\nDone.|S2 approve\nDone.|S3 approve".to_owned(),
        ),
        "main gets one commit per subtask of the rebuilt result, S2 on the person's word, \
         with the rebuilt result's tree"
    );
    let files: Vec<String> = ["src/a.txt", "junk.txt", "src/b.txt"]
        .iter()
        .map(|path| String::from_utf8(fixture.read(path)).unwrap())
        .collect();
    assert_eq!(
        files,
        vec!["alpha BETA gamma\n", "JUNK\n", "DELTA\n"],
        "the work tree holds all three subtasks' changes"
    );
    assert_eq!(
        fixture.git(&["status", "--porcelain"]),
        "",
        "the work tree and index match main"
    );

    let state = read_state(&repo, &run_id);
    assert!(state.applied, "the journal says the result was applied");
    assert_eq!(state.result_commit, Some(result));
    let s2 = state.subtask(SubtaskId(2)).unwrap();
    assert_eq!(
        (
            s2.status,
            s2.human_verdict,
            s2.verdict.as_ref().map(|v| v.verdict)
        ),
        (
            SubtaskStatus::Merged,
            Some(VerdictKind::Approve),
            Some(VerdictKind::Reject)
        ),
        "S2 is merged on the person's word; the reviewer's verdict is kept as it was"
    );
    let review_entries: Vec<&str> = journal_entries(&repo, &run_id)
        .iter()
        .map(Entry::type_name)
        .skip_while(|name| *name != "run_finished")
        .collect();
    assert_eq!(
        review_entries,
        vec![
            "run_finished",
            "human_verdict",
            "result_rebuilt",
            "result_applied"
        ],
        "the review appends its records after the run's end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rejecting_a_merged_subtask_drops_it_from_the_result_and_archives_its_work() {
    let fixture = fixture();
    let (repo, run_id) = standard_run(&fixture).await;
    let main_before = fixture.rev("main");
    let result_branch = format!("grove/{run_id}/result");

    let outcome =
        review::override_verdicts(&repo, &run_id, &[reject("S1")], AfterReview::RecordOnly)
            .await
            .unwrap();

    assert_eq!(
        rebuilt_statuses(&outcome),
        vec![
            ("S1".into(), SubtaskOutcome::Rejected),
            ("S2".into(), SubtaskOutcome::Rejected),
            ("S3".into(), SubtaskOutcome::Merged),
        ]
    );
    assert_eq!(outcome.apply, None, "no apply was asked for");
    assert_eq!(
        (
            show(&fixture, &result_branch, "src/a.txt"),
            show(&fixture, &result_branch, "src/b.txt"),
            show(&fixture, &result_branch, "junk.txt"),
        ),
        (
            Some("alpha beta gamma\n".to_owned()),
            Some("DELTA\n".to_owned()),
            None
        ),
        "the result lacks S1 (and S2) and keeps S3"
    );
    let archived: Vec<String> = outcome
        .rebuilt
        .as_ref()
        .unwrap()
        .archived
        .iter()
        .map(|a| a.reference.clone())
        .collect();
    let s1_archive = format!("refs/grove/archive/{run_id}/1");
    assert!(archived.contains(&s1_archive), "{archived:?}");
    assert_eq!(
        show(&fixture, &s1_archive, "src/a.txt").as_deref(),
        Some("alpha BETA gamma\n"),
        "S1's work is kept though no branch or result holds it any more"
    );
    assert_eq!(fixture.rev("main"), main_before, "main did not move");
    let state = read_state(&repo, &run_id);
    assert_eq!(
        (statuses(&state), state.applied),
        (
            vec![
                ("S1".into(), SubtaskStatus::Rejected),
                ("S2".into(), SubtaskStatus::Rejected),
                ("S3".into(), SubtaskStatus::Merged),
            ],
            false
        )
    );

    // Looking again finds S1's work in its archive, and nothing to record or rebuild.
    let again = review::override_verdicts(&repo, &run_id, &[reject("S1")], AfterReview::RecordOnly)
        .await
        .unwrap();
    assert_eq!(
        (
            again.recorded.len(),
            again.unchanged.clone(),
            again.rebuilt.is_none()
        ),
        (0, vec![SubtaskId(1)], true),
        "a decision already in force is not journaled again"
    );
    let s1 = again.review.subtask("S1").unwrap();
    assert_eq!(
        s1.commit_source,
        Some(review::CommitSource::Archive {
            reference: s1_archive
        })
    );
}

/// A kill during a ref update left the result's `<ref>.lock` (a minute old): `grove
/// review` removes it before it rebuilds the result, and says so; the rebuild then moves
/// the result as asked (before, no rebuild could update the result while the lock was
/// there).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_lock_on_the_result_is_removed_before_the_review_rebuilds_it() {
    let fixture = fixture();
    let (repo, run_id) = standard_run(&fixture).await;
    let git_dir = fixture.repo.join(".git");
    let result_lock = format!("refs/heads/grove/{run_id}/result.lock");
    crate::suite::leftovers::plant_lock(&git_dir, &result_lock);

    let outcome =
        review::override_verdicts(&repo, &run_id, &[reject("S1")], AfterReview::RecordOnly)
            .await
            .unwrap();

    assert_eq!(
        (
            outcome.removed_locks.clone(),
            crate::suite::leftovers::ref_locks(&git_dir),
            show(&fixture, &format!("grove/{run_id}/result"), "src/a.txt"),
        ),
        (
            vec![git_dir.join(&result_lock)],
            Vec::<String>::new(),
            Some("alpha beta gamma\n".to_owned()),
        ),
        "the stale lock is removed and named, and the result is rebuilt without S1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_applied_run_is_refused_and_its_journal_is_left_alone() {
    let fixture = fixture();
    let run_id = finished_run(&fixture, BRIEFS, true).await;
    let repo = fixture.open().await;
    let journal_before = journal_entries(&repo, &run_id);
    let main_before = fixture.rev("main");

    let error = review::override_verdicts(&repo, &run_id, &[reject("S1")], AfterReview::Apply)
        .await
        .unwrap_err();

    assert!(
        matches!(&error, ReviewError::AlreadyApplied { branch, .. } if branch == "main"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("git revert") && message.contains("git reset"),
        "the refusal says what to do instead: {message}"
    );
    assert_eq!(journal_entries(&repo, &run_id), journal_before);
    assert_eq!(fixture.rev("main"), main_before);
    let undo = message
        .split('`')
        .find(|part| part.starts_with("git revert"))
        .unwrap()
        .to_owned();
    let undone = std::process::Command::new("sh")
        .args(["-c", &undo])
        .current_dir(&fixture.repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", fixture.home())
        .env("GIT_AUTHOR_NAME", "U")
        .env("GIT_AUTHOR_EMAIL", "u@example.org")
        .env("GIT_COMMITTER_NAME", "U")
        .env("GIT_COMMITTER_EMAIL", "u@example.org")
        .output()
        .unwrap();
    assert!(
        undone.status.success(),
        "{undo}: {}",
        String::from_utf8_lossy(&undone.stderr)
    );
    let run_commits = fixture.git(&["rev-list", "--grep=^Grove-Run:", &main_before.to_string()]);
    let base = format!("{}^", run_commits.lines().last().unwrap());
    assert_eq!(
        fixture.git(&["rev-parse", "main^{tree}"]),
        fixture.git(&["rev-parse", &format!("{base}^{{tree}}")]),
        "the undo the refusal names, run as it is, takes the squashed history back: {undo}"
    );

    let output = grove(&fixture, &["review", &run_id, "--reject", "S1", "--apply"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("was already applied to main"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dirty_tree_refuses_the_apply_but_the_decision_stays_recorded() {
    let fixture = fixture();
    let (repo, run_id) = standard_run(&fixture).await;
    fixture.write("junk.txt", "my own notes\n");
    let before = fixture.user_state();

    let outcome = review::override_verdicts(&repo, &run_id, &[approve("S2")], AfterReview::Apply)
        .await
        .unwrap();

    let Some(ApplyResult::Refused {
        reason, command, ..
    }) = &outcome.apply
    else {
        panic!("the apply is refused: {:#?}", outcome.apply);
    };
    assert_eq!(
        (reason, command.as_str()),
        (
            &RefusalReason::LocalChangesInTheWay {
                paths: vec!["junk.txt".into()]
            },
            format!("git merge --ff-only grove/{run_id}/squashed").as_str()
        ),
        "the refusal names the file in the way and the command that applies the result \
         (squashed, as the run's history says)"
    );
    assert_eq!(
        fixture.user_state(),
        before,
        "nothing of the user's was touched"
    );
    let state = read_state(&repo, &run_id);
    assert_eq!(
        (
            state
                .subtask(SubtaskId(2))
                .map(|s| (s.status, s.human_verdict)),
            state.applied
        ),
        (
            Some((SubtaskStatus::Merged, Some(VerdictKind::Approve))),
            false
        ),
        "the decision and the rebuilt result are recorded; the run is not applied"
    );

    // The binary says the same and exits 1; once the file is out of the way, --apply
    // alone applies the recorded result.
    let refused = grove(&fixture, &["review", &run_id, "--apply"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(
        stdout(&refused).contains("uncommitted changes are in the way in junk.txt"),
        "{}",
        stdout(&refused)
    );
    std::fs::remove_file(fixture.repo.join("junk.txt")).unwrap();
    let applied = grove(&fixture, &["review", &run_id, "--apply"]);
    assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
    assert_eq!(
        String::from_utf8(fixture.read("junk.txt")).unwrap(),
        "JUNK\n"
    );
    assert!(read_state(&repo, &run_id).applied);
}

/// S1 and S2 write the same file; the reviewer rejects S2 (its content says junk).
const CONFLICTING: &[&str] = &[
    "First.\nWRITE src/a.txt FIRST",
    "Second.\nWRITE src/a.txt junk SECOND",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approving_a_subtask_that_conflicts_reports_it_and_loses_nothing() {
    let fixture = fixture();
    let run_id = finished_run(&fixture, CONFLICTING, false).await;
    let repo = fixture.open().await;
    let result_branch = format!("grove/{run_id}/result");
    let result_before = fixture.rev(&result_branch);

    let output = grove(
        &fixture,
        &["review", &run_id, "--approve", "S2", "--no-apply", "--json"],
    );

    assert_eq!(
        output.status.code(),
        Some(3),
        "an approved subtask left out of the result exits 3\n{}",
        stderr(&output)
    );
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let subtasks: Vec<(String, String)> = json["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        subtasks,
        vec![
            ("S1".to_owned(), "merged".to_owned()),
            ("S2".to_owned(), "conflict".to_owned())
        ]
    );
    assert_eq!(json["subtasks"][1]["conflict_paths"], json!(["src/a.txt"]));
    assert_eq!(json["applied"], json!(false));
    assert!(
        stderr(&output).contains("S2 conflict in src/a.txt (left out of the result)"),
        "the text goes to stderr with --json: {}",
        stderr(&output)
    );
    let result_after = fixture.rev(&result_branch);
    assert_eq!(
        (
            show(&fixture, &result_branch, "src/a.txt"),
            show(
                &fixture,
                &format!("refs/grove/archive/{run_id}/2"),
                "src/a.txt"
            ),
        ),
        (Some("FIRST\n".to_owned()), Some("junk SECOND\n".to_owned())),
        "the result keeps S1, and S2's work is kept in its archive"
    );
    assert!(
        repo.is_ancestor(fixture.rev(&format!("{result_before}^2")), result_after)
            .unwrap(),
        "S1's commit is still in the result"
    );
    let state = read_state(&repo, &run_id);
    assert_eq!(
        state
            .subtask(SubtaskId(2))
            .map(|s| (s.status, s.conflict_paths.clone())),
        Some((SubtaskStatus::Conflict, vec!["src/a.txt".to_owned()]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rendered_diff_is_stable_without_colour_and_highlights_words_with_it() {
    let fixture = fixture();
    let (repo, run_id) = standard_run(&fixture).await;
    let review = review::load(&repo, &run_id).await.unwrap();
    let s1 = review.subtask("S1").unwrap();
    assert_eq!(
        (
            s1.decision,
            s1.executes_later.clone(),
            s1.diffstat.as_ref().map(|d| d.summary())
        ),
        (
            Some(VerdictKind::Approve),
            vec![],
            Some("1 file changed, 1 insertion(+), 1 deletion(-)".to_owned())
        )
    );

    let plain = review
        .render_diff(&repo, s1, Colour::Never)
        .unwrap()
        .unwrap();
    insta::assert_snapshot!("s1_diff_without_colour", plain);

    let coloured = review
        .render_diff(&repo, s1, Colour::Always)
        .unwrap()
        .unwrap();
    assert!(
        coloured.contains("\x1b[1;4mBETA\x1b[0m"),
        "the changed word is highlighted within its line: {coloured:?}"
    );
    assert!(
        !plain.contains('\x1b'),
        "no escape codes without colour: {plain:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_binary_lists_a_run_and_refuses_bad_decisions_with_clear_messages() {
    let fixture = fixture();
    let run_id = finished_run(&fixture, NOTHING_AND_JUNK, false).await;

    let listed = grove(&fixture, &["review", &run_id, "--list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let text = stdout(&listed);
    for expected in [
        "── S1 · failed ──",
        "reviewer: no verdict (the subtask ended before its review)",
        "work: none (it failed before producing a commit)",
        "── S2 · rejected · reviewer: reject ──",
        "reviewer: Adds a junk file nobody asked for.",
        "  - [blocking] junk.txt:1: not part of the task",
        "+JUNK",
    ] {
        assert!(
            text.contains(expected),
            "--list shows {expected:?}:\n{text}"
        );
    }
    assert!(!text.contains('\x1b'), "no colour off a terminal: {text:?}");

    let failed = grove(&fixture, &["review", &run_id, "--approve", "S1"]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        stderr(&failed).contains("S1 cannot be approved: it failed before producing a commit"),
        "{}",
        stderr(&failed)
    );
    let unknown = grove(&fixture, &["review", &run_id, "--reject", "S9"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("has no subtask S9 (it has: S1, S2)"),
        "{}",
        stderr(&unknown)
    );
    let both = grove(
        &fixture,
        &["review", &run_id, "--approve", "S2", "--reject", "S2"],
    );
    assert_eq!(both.status.code(), Some(2), "{}", stderr(&both));
    let repo = fixture.open().await;
    assert!(
        !journal_entries(&repo, &run_id)
            .iter()
            .any(|e| e.type_name() == "human_verdict"),
        "refused decisions journal nothing"
    );
}

/// S1 changes nothing (it fails); S2 adds a junk file (rejected).
const NOTHING_AND_JUNK: &[&str] = &["Look around.", "Add a file.\nWRITE junk.txt JUNK"];

fn grove(fixture: &GitFixture, args: &[&str]) -> Output {
    Grove::in_repo(fixture).grove(args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn record(ts_ms: u64, entry: Entry) -> Record {
    Record { ts_ms, entry }
}

/// A run with one rejected subtask, up to (not including) its `run_finished`.
fn rejected_run_records() -> Vec<Record> {
    vec![
        record(
            1,
            Entry::RunStarted {
                run_id: "20261130-000000-0000".parse().unwrap(),
                task: "task".into(),
                base: CommitId::parse(&"b".repeat(40)).unwrap(),
                branch: "refs/heads/main".into(),
                provider: "anthropic".into(),
                model: "m".into(),
                options: grove::run::RunOptions::default().into(),
            },
        ),
        record(
            2,
            entries::subtask_started(1, "brief", "grove/20261130-000000-0000/1"),
        ),
        record(
            3,
            Entry::Verdict {
                subtask: SubtaskId(1),
                verdict: VerdictKind::Reject,
                summary: "no".into(),
                findings: Vec::new(),
            },
        ),
        record(
            4,
            Entry::SubtaskFinished {
                subtask: SubtaskId(1),
                status: SubtaskOutcome::Rejected,
                ledger: Default::default(),
                reason: None,
                summary: None,
            },
        ),
    ]
}

fn finished(ts_ms: u64) -> Record {
    record(
        ts_ms,
        Entry::RunFinished {
            status: RunOutcome::Finished,
            applied: false,
            result_commit: Some(CommitId::parse(&"b".repeat(40)).unwrap()),
            error: None,
        },
    )
}

fn human_approves_s1(ts_ms: u64) -> Record {
    record(
        ts_ms,
        Entry::HumanVerdict {
            subtask: SubtaskId(1),
            verdict: VerdictKind::Approve,
            previous: Some(VerdictKind::Reject),
        },
    )
}

#[test]
fn review_records_fold_only_into_a_finished_run_whose_result_is_not_applied() {
    let mut unfinished = RunState::replay(&rejected_run_records()).unwrap();
    let refused = unfinished.apply(&human_approves_s1(5)).unwrap_err();
    assert!(
        refused.reason.to_string().contains("not finished"),
        "a run still going takes no person's decision: {refused}"
    );

    let mut records = rejected_run_records();
    records.push(finished(5));
    let mut state = RunState::replay(&records).unwrap();
    state.apply(&human_approves_s1(6)).unwrap();
    let s1 = state.subtask(SubtaskId(1)).unwrap();
    assert_eq!(
        (s1.status, s1.human_verdict, s1.decision()),
        (
            SubtaskStatus::Rejected,
            Some(VerdictKind::Approve),
            Some(VerdictKind::Approve)
        ),
        "the decision counts at once; the status changes only with the rebuild"
    );
    state
        .apply(&record(
            7,
            Entry::ResultRebuilt {
                result: CommitId::parse(&"e".repeat(40)).unwrap(),
                subtasks: vec![RebuiltSubtask {
                    subtask: SubtaskId(1),
                    status: SubtaskOutcome::Merged,
                    commit: Some(CommitId::parse(&"d".repeat(40)).unwrap()),
                    result: Some(CommitId::parse(&"e".repeat(40)).unwrap()),
                    conflict_paths: Vec::new(),
                }],
            },
        ))
        .unwrap();
    let s1 = state.subtask(SubtaskId(1)).unwrap();
    assert_eq!(
        (
            s1.status,
            s1.merge.clone(),
            state.result_commit,
            state.applied
        ),
        (
            SubtaskStatus::Merged,
            Some(MergeState {
                commit: CommitId::parse(&"d".repeat(40)).unwrap(),
                result: CommitId::parse(&"e".repeat(40)).unwrap()
            }),
            Some(CommitId::parse(&"e".repeat(40)).unwrap()),
            false
        )
    );
    state
        .apply(&record(
            8,
            Entry::ResultApplied {
                result: CommitId::parse(&"e".repeat(40)).unwrap(),
            },
        ))
        .unwrap();
    assert!(state.applied);
    let after_apply = state.apply(&human_approves_s1(9)).unwrap_err();
    assert!(
        after_apply.reason.to_string().contains("already applied"),
        "an applied run takes no more decisions: {after_apply}"
    );
    let paused = state
        .apply(&record(10, Entry::Paused { reason: "x".into() }))
        .unwrap_err();
    assert!(
        paused.reason.to_string().contains("already finished"),
        "only review records may follow run_finished: {paused}"
    );
}

#[test]
fn a_merged_rebuild_record_without_its_commit_is_refused_and_changes_nothing() {
    let mut records = rejected_run_records();
    records.push(finished(5));
    let mut state = RunState::replay(&records).unwrap();
    let before = state.clone();
    let bad = record(
        6,
        Entry::ResultRebuilt {
            result: CommitId::parse(&"e".repeat(40)).unwrap(),
            subtasks: vec![RebuiltSubtask {
                subtask: SubtaskId(1),
                status: SubtaskOutcome::Merged,
                commit: None,
                result: None,
                conflict_paths: Vec::new(),
            }],
        },
    );
    assert!(state.apply(&bad).is_err());
    assert_eq!(state, before, "a refused record leaves the state as it was");
}

#[test]
fn review_records_have_a_flat_wire_format_and_old_snapshots_still_parse() {
    assert_eq!(
        serde_json::to_value(human_approves_s1(6)).unwrap(),
        json!({
            "ts_ms": 6,
            "type": "human_verdict",
            "subtask": "S1",
            "verdict": "approve",
            "previous": "reject"
        })
    );
    let mut records = rejected_run_records();
    records.push(finished(5));
    let state = RunState::replay(&records).unwrap();
    let mut old = serde_json::to_value(&state).unwrap();
    for subtask in old["subtasks"].as_array_mut().unwrap() {
        subtask.as_object_mut().unwrap().remove("human_verdict");
    }
    assert_eq!(
        serde_json::from_value::<RunState>(old).unwrap(),
        state,
        "a state.json written before `grove review` existed parses, with no decision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_can_be_listed_but_not_changed() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let store = RunStore::new(repo.common_dir());
    let run_id = store.new_run_id();
    {
        let lock = RepoLock::acquire(repo.common_dir(), run_id.as_str()).unwrap();
        let mut active = store
            .create_run(
                &lock,
                RunStart {
                    task: "task".into(),
                    base: fixture.rev("main"),
                    branch: "refs/heads/main".into(),
                    provider: "anthropic".into(),
                    model: "m".into(),
                    options: grove::run::RunOptions::default(),
                },
            )
            .unwrap();
        active
            .append(Entry::Paused {
                reason: "the model API is down".into(),
            })
            .unwrap();
    }
    let journal_before = journal_entries(&repo, run_id.as_str());

    let error = review::override_verdicts(&repo, run_id.as_str(), &[], AfterReview::Apply)
        .await
        .unwrap_err();

    assert!(
        matches!(
            error,
            ReviewError::NotFinished {
                status: RunStatus::Paused,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&format!("`grove resume {run_id}` finishes it first")),
        "the refusal says what to do: {error}"
    );
    assert_eq!(journal_entries(&repo, run_id.as_str()), journal_before);
    let listed = grove(&fixture, &["review", run_id.as_str(), "--list"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    assert!(
        stdout(&listed).contains("It cannot be changed: run"),
        "{}",
        stdout(&listed)
    );
}
