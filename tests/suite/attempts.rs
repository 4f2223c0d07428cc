//! Best of N: a subtask delegated with `attempts` runs as that many workers at once, a
//! judge compares the attempts that passed their check and picks one, and only the pick
//! is merged; the others are archived with the judge's reasons.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use pretty_assertions::assert_eq;
use serde_json::json;

use std::ffi::OsString;

use grove::model::Provider;
use grove::run::{RunEnd, RunOptions, RunReport};
use grove::settings::options::CheckOptions;
use grove::status::SubtaskId;
use grove::store::attempts::{NotPicked, Pick};
use grove::store::journal::{Entry, SubtaskOutcome, VerdictKind};
use grove::tools::sandbox::CommandHost;

use crate::suite::sandbox::sandbox_or_skip;
use crate::support::attempts::*;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

/// The brief every attempt gets; what each attempt writes comes from the order its
/// worker's first request arrived in.
const BRIEF: &str = "Shout a.\nWRITE src/a.txt {}";

/// A worker whose attempt writes the `n`th of `contents`, in the order the attempts' first
/// requests came.
fn worker(request: &RecordedRequest, started: &AtomicUsize, contents: &[&str]) -> Reply {
    if answered(request) {
        return worker_reply(request);
    }
    let n = started.fetch_add(1, Ordering::SeqCst);
    let brief = first_user_text(request).replace("{}", contents[n % contents.len()]);
    write_reply(&brief)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_attempts_run_at_once_and_only_the_judges_pick_is_merged() {
    let fixture = repo_with_rules();
    let started = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => attempts_lead(request, BRIEF, &json!(3)),
        Who::Worker => worker(request, &started, &["quiet", "RIGHT", "meh"]),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let report = run(
        &fixture,
        &server,
        grove::model::Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    let mut statuses: Vec<_> = report.subtasks.iter().map(|s| s.status).collect();
    statuses.sort_by_key(|status| status.as_str());
    assert_eq!(
        statuses,
        vec![
            SubtaskOutcome::Merged,
            SubtaskOutcome::Rejected,
            SubtaskOutcome::Rejected
        ],
        "one attempt is merged, the two others rejected as not picked"
    );
    assert_eq!(
        fixture.read("src/a.txt"),
        b"RIGHT\n".to_vec(),
        "the pick is merged"
    );
    let requests = server.requests();
    let judged = requests
        .iter()
        .filter(|r| who(r) == Who::Reviewer)
        .filter(|r| r.first_user_text().contains("# How to judge"))
        .find(|r| r.tool_results().len() == 1)
        .expect("the judge read a file");
    assert!(
        judged.tool_results()[0].1.contains("RIGHT"),
        "the judge's read_file read the attempt it named: {:?}",
        judged.tool_results()
    );
    let told = lead_heard(&server);
    assert!(
        told.contains("was tried 3 ways") && told.contains("is not loud"),
        "the lead hears the pick and why the others lost: {told}"
    );
    let picked = report
        .subtasks
        .iter()
        .find(|s| s.status == SubtaskOutcome::Merged)
        .unwrap();
    let label = picked.attempt.as_ref().unwrap().label;
    let message = fixture.git(&["log", "-1", "--format=%B"]);
    assert!(
        message.contains(&format!(
            "Attempt {label} of group S1, picked over the others; the verdict that picked it:\n    The loud one."
        )) && message.contains(&format!("Grove-Attempt: S1·{label}")),
        "the user's branch records which attempt it got and the judge's words: {message}"
    );
    let repo = fixture.open().await;
    let data = grove::report::gather(&repo, &report.run_id, grove::report::PriceTable::builtin())
        .await
        .unwrap();
    let judges: Vec<(String, String, u32)> = data
        .agents
        .iter()
        .filter(|agent| agent.role == "judge")
        .map(|agent| (agent.role.clone(), agent.label.clone(), agent.ledger.steps))
        .collect();
    assert_eq!(
        judges,
        vec![("judge".into(), "S1".into(), 2)],
        "the HTML report's costs hold the judge, under its group, with its two turns (a read, the verdict)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn more_attempts_than_jobs_take_turns_and_are_still_judged_together() {
    let fixture = repo_with_rules();
    let started = Arc::new(AtomicUsize::new(0));
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => attempts_lead(request, BRIEF, &json!(3)),
        Who::Worker => worker(request, &started, &["quiet", "RIGHT", "meh"]),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let options = grove::run::RunOptions {
        jobs: 1,
        ..options(&fixture, USER_TASK)
    };
    // An attempt that kept its `--jobs` slot at the bench would leave none for the next
    // one, and the bench would wait for it forever: bounded here, so that is a failure.
    let ran = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        run(
            &fixture,
            &server,
            grove::model::Provider::Anthropic,
            options,
        ),
    )
    .await
    .expect("three attempts with one --jobs slot end");
    let report = ran.unwrap();
    server.assert_no_violations();
    let judged = server
        .requests()
        .iter()
        .filter(|r| r.first_user_text().contains("# How to judge"))
        .map(|r| r.first_user_text().matches("# Attempt ").count())
        .max();
    assert_eq!(
        (judged, report.subtasks.len(), fixture.read("src/a.txt")),
        (Some(3), 3, b"RIGHT\n".to_vec()),
        "with one slot the attempts work one after the other, and one judge still \
         compares all three"
    );
}

/// The brief of the attempts whose workers learn their attempt from their branch.
const LOUD: &str = "Make src/a.txt loud.";

/// A red check: an attempt that writes BROKEN fails it.
const NOT_BROKEN: &str = "! grep -q BROKEN src/a.txt";

/// [`options`] with the project's check [`NOT_BROKEN`], sandboxed from a bare PATH.
fn checked(fixture: &GitFixture) -> RunOptions {
    RunOptions {
        commands: CommandHost {
            env: Some(vec![
                ("PATH".into(), OsString::from("/usr/bin:/bin")),
                ("HOME".into(), fixture.home().into_os_string()),
            ]),
        },
        check: Some(CheckOptions::new(NOT_BROKEN)),
        ..options(fixture, USER_TASK)
    }
}

/// A run under the check [`NOT_BROKEN`] whose three attempts write `contents` (A the
/// first) and whose judge picks the one that writes RIGHT.
async fn checked_run(contents: &'static [&'static str; 3]) -> (GitFixture, FakeServer, RunReport) {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => attempts_lead(request, LOUD, &json!(3)),
        Who::Worker => labelled_worker(request, contents),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let report = run(&fixture, &server, Provider::Anthropic, checked(&fixture))
        .await
        .unwrap();
    server.assert_no_violations();
    (fixture, server, report)
}

/// Each subtask as `(id, status, verdict, reason)`.
fn outcomes(
    report: &RunReport,
) -> Vec<(String, SubtaskOutcome, Option<VerdictKind>, Option<String>)> {
    report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status, s.verdict, s.reason.clone()))
        .collect()
}

/// The lead's result up to the picked attempt's own result.
fn lead_heard_head(server: &FakeServer) -> String {
    let told = lead_heard(server);
    match told.split_once("The picked attempt's result:") {
        Some((head, _)) => head.to_owned(),
        None => told,
    }
}

/// `(archive ref, src/a.txt in it)` of every archived subtask of run `run_id`.
fn archived(fixture: &GitFixture, run_id: &str) -> Vec<(String, String)> {
    let refs = fixture.git(&[
        "for-each-ref",
        "--format=%(refname)",
        &format!("refs/grove/archive/{run_id}/"),
    ]);
    refs.lines()
        .map(|name| {
            (
                name.to_owned(),
                fixture.git(&["show", &format!("{name}:{TARGET}")]),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_red_attempt_is_put_aside_the_judge_picks_the_right_one_and_both_losers_are_archived_with_their_reasons()
 {
    if !sandbox_or_skip("a_red_attempt_is_put_aside") {
        return;
    }
    let (fixture, server, report) = checked_run(&["BROKEN", "quiet", "RIGHT"]).await;

    let red = "its check failed while that of B, C passed";
    assert_eq!(
        outcomes(&report),
        vec![
            (
                "S1".into(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject),
                Some(format!("not picked: {red}"))
            ),
            (
                "S2".into(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject),
                Some("not picked: B is not loud".into())
            ),
            (
                "S3".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve),
                Some("worker: WORKER-FINAL: wrote it.".into())
            ),
        ],
        "A (red) is put aside by the rule, B loses to the judge's pick C, and only C merges"
    );
    assert_eq!(
        fixture.read(TARGET),
        b"RIGHT\n".to_vec(),
        "the pick reaches the branch"
    );
    let run_id = report.run_id.as_str();
    assert_eq!(
        archived(&fixture, run_id),
        vec![
            (format!("refs/grove/archive/{run_id}/1"), "BROKEN".into()),
            (format!("refs/grove/archive/{run_id}/2"), "quiet".into()),
        ],
        "each attempt that lost keeps its work under an archive ref"
    );
    let entries = journal(&fixture.repo, run_id);
    assert_eq!(
        verdicts(&entries),
        vec![
            (
                "S1".into(),
                VerdictKind::Reject,
                format!("Attempt A was not picked: {red}")
            ),
            (
                "S2".into(),
                VerdictKind::Reject,
                "Attempt B was not picked: B is not loud".into()
            ),
            ("S3".into(), VerdictKind::Approve, "The loud one.".into()),
        ],
        "the journal keeps each attempt's verdict with the reason it lost"
    );
    assert_eq!(
        entries
            .iter()
            .filter(|entry| matches!(entry, Entry::Picked { .. }))
            .cloned()
            .collect::<Vec<_>>(),
        vec![Entry::Picked {
            group: SubtaskId(1),
            pick: Pick {
                picked: Some(SubtaskId(3)),
                summary: "The loud one.".into(),
                not_picked: vec![
                    NotPicked {
                        subtask: SubtaskId(1),
                        reason: red.into()
                    },
                    NotPicked {
                        subtask: SubtaskId(2),
                        reason: "B is not loud".into()
                    },
                ],
            },
        }],
        "one pick record names C and why A and B lost"
    );
    let briefs = judge_briefs(&server);
    assert_eq!(
        briefs
            .iter()
            .map(|text| shown_attempts(text))
            .collect::<Vec<_>>(),
        vec![vec!['B', 'C']],
        "one judge, shown only the attempts whose check passed: {briefs:?}"
    );
    assert!(
        briefs[0].contains("+quiet")
            && briefs[0].contains("+RIGHT")
            && !briefs[0].contains("+BROKEN"),
        "the judge sees B's and C's diffs and nothing of A's: {}",
        briefs[0]
    );
    let kept = format!("refs/grove/archive/{}", report.run_id);
    assert_eq!(
        lead_heard_head(&server),
        format!(
            "S1 was tried 3 ways (attempts A, B, C); attempt C (S3) was picked.\n\
             - attempt A (S1) not picked: {red} (kept at {kept}/1)\n\
             - attempt B (S2) not picked: B is not loud (kept at {kept}/2)\n"
        ),
        "the lead hears the pick and, a line each, why A and B lost and where their work is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_one_attempt_left_after_the_checks_its_own_reviewer_decides_and_it_merges() {
    if !sandbox_or_skip("with_one_attempt_left_after_the_checks") {
        return;
    }
    let (fixture, server, report) = checked_run(&["BROKEN", "RIGHT", "BROKEN too"]).await;

    let red = "not picked: its check failed while that of B passed";
    assert_eq!(
        outcomes(&report),
        vec![
            (
                "S1".into(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject),
                Some(red.into())
            ),
            (
                "S2".into(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve),
                Some("worker: WORKER-FINAL: wrote it.".into())
            ),
            (
                "S3".into(),
                SubtaskOutcome::Rejected,
                Some(VerdictKind::Reject),
                Some(red.into())
            ),
        ],
        "the red attempts are put aside and the one green attempt merges"
    );
    assert_eq!(
        fixture.read(TARGET),
        b"RIGHT\n".to_vec(),
        "B reaches the branch"
    );
    let requests = server.requests();
    let reviews: Vec<String> = requests
        .iter()
        .filter(|request| who(request) == Who::Reviewer && request.tool_results().is_empty())
        .map(own_review_text)
        .collect();
    assert_eq!(
        reviews
            .iter()
            .map(|text| (text.contains("# How to judge"), text.contains("+RIGHT")))
            .collect::<Vec<_>>(),
        vec![(false, true)],
        "no judge: one ordinary review, of B's diff: {reviews:?}"
    );
    let entries = journal(&fixture.repo, &report.run_id);
    assert_eq!(
        verdicts(&entries),
        vec![
            (
                "S1".into(),
                VerdictKind::Reject,
                "Attempt A was not picked: its check failed while that of B passed".into()
            ),
            (
                "S3".into(),
                VerdictKind::Reject,
                "Attempt C was not picked: its check failed while that of B passed".into()
            ),
            (
                "S2".into(),
                VerdictKind::Approve,
                "Does what the brief asks.".into()
            ),
        ],
        "the rule's rejections are journaled before B's own review approves it"
    );
    let kept = format!("refs/grove/archive/{}", report.run_id);
    assert_eq!(
        lead_heard_head(&server),
        format!(
            "S1 was tried 3 ways (attempts A, B, C); attempt B (S2) was picked.\n\
             - attempt A (S1) not picked: its check failed while that of B passed (kept at \
             {kept}/1)\n\
             - attempt C (S3) not picked: its check failed while that of B passed (kept at \
             {kept}/3)\n"
        ),
        "the lead hears that B, reviewed alone, is the pick"
    );
    assert_eq!(
        entries
            .iter()
            .filter(|e| matches!(e, Entry::Picked { .. }))
            .count(),
        0,
        "no judge ran, so no pick is journaled: the verdicts say why A and C lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_attempt_whose_worker_fails_does_not_fail_the_subtask_while_the_others_live() {
    if !sandbox_or_skip("an_attempt_whose_worker_fails") {
        return;
    }
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => attempts_lead(request, LOUD, &json!(3)),
        // A model that refuses mid-attempt: grove cannot go on with A's worker.
        Who::Worker if attempt_of(request) == Some(1) => {
            usage(Turn::text("ATTEMPT-A-REFUSES").stop("refusal")).into()
        }
        Who::Worker => labelled_worker(request, &["", "quiet", "RIGHT"]),
        Who::Reviewer => picking_judge(request),
    })
    .await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    let refused = "the worker stopped: model stopped (refusal): the model refused in turn 2";
    assert_eq!(
        (report.status, outcomes(&report)),
        (
            RunEnd::Finished,
            vec![
                (
                    "S1".into(),
                    SubtaskOutcome::Failed,
                    None,
                    Some(refused.into())
                ),
                (
                    "S2".into(),
                    SubtaskOutcome::Rejected,
                    Some(VerdictKind::Reject),
                    Some("not picked: B is not loud".into())
                ),
                (
                    "S3".into(),
                    SubtaskOutcome::Merged,
                    Some(VerdictKind::Approve),
                    Some("worker: WORKER-FINAL: wrote it.".into())
                ),
            ]
        ),
        "A's failure ends A alone: B and C are judged and the pick merges"
    );
    assert_eq!(
        fixture.read(TARGET),
        b"RIGHT\n".to_vec(),
        "C reaches the branch"
    );
    assert_eq!(
        judge_briefs(&server)
            .iter()
            .map(|text| shown_attempts(text))
            .collect::<Vec<_>>(),
        vec![vec!['B', 'C']],
        "the judge compares the attempts that lived"
    );
    let kept = format!("refs/grove/archive/{}", report.run_id);
    assert_eq!(
        lead_heard_head(&server),
        format!(
            "S1 was tried 3 ways (attempts A, B, C); attempt C (S3) was picked.\n\
             - attempt A (S1) failed: {refused} (kept at {kept}/1)\n\
             - attempt B (S2) not picked: B is not loud (kept at {kept}/2)\n"
        ),
        "the lead hears that A failed and why B lost"
    );
}
