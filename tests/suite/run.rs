//! `grove run` end to end: a real repository, the real orchestrator, real worktrees and
//! merges, and every model call over HTTP to the fake server, scripted per role.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{RunEnd, RunError, RunOptions, RunReport};
use grove::store::journal::{SubtaskOutcome, VerdictKind};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::{GitFixture, sealed_command};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::*;

fn statuses(report: &RunReport) -> Vec<(String, SubtaskOutcome, Option<VerdictKind>)> {
    report
        .subtasks
        .iter()
        .map(|s| (s.id.to_string(), s.status, s.verdict))
        .collect()
}

/// A worker that reads the shared notes first (all four workers' first replies wait
/// at `gate` until every one of them is in flight), then writes, then reports.
fn reading_worker_reply(request: &RecordedRequest, gate: &Arc<Barrier>) -> Reply {
    match request.tool_results().len() {
        0 => Reply::Gated {
            gate: gate.clone(),
            reply: Box::new(
                usage(Turn::text("Reading first.").tool_use(
                    "worker_read",
                    "read_file",
                    json!({ "path": "src/notes.txt" }),
                ))
                .into(),
            ),
        },
        1 => write_reply(&first_user_text(request)),
        _ => usage(Turn::text("WORKER-FINAL: wrote the file as asked.")).into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_four_subtask_refactor_merges_three_and_archives_the_rejected_one_in_every_mode() {
    for (provider, stream) in [
        (Provider::Anthropic, true),
        (Provider::Anthropic, false),
        (Provider::OpenAi, true),
        (Provider::OpenAi, false),
    ] {
        let mode = format!("{provider}, stream={stream}");
        let fixture = repo_with_rules();
        let base = fixture.rev("HEAD");
        let gate = Arc::new(Barrier::new(4));
        let server = FakeServer::with_responder(move |request| match who(request) {
            Who::Lead => lead_reply(
                request,
                &[
                    ("Make src/a.txt shout.\nWRITE src/a.txt ALPHA", None),
                    ("Make src/b.txt shout.\nWRITE src/b.txt BETA", None),
                    ("Make src/c.txt shout.\nWRITE src/c.txt GAMMA", None),
                    ("Add a file.\nWRITE junk.txt junk", None),
                ],
            ),
            Who::Worker => reading_worker_reply(request, &gate),
            Who::Reviewer => reviewer_reply(request),
        })
        .await;

        let report = grove::run::run(
            &fixture.repo,
            RunOptions {
                jobs: 4,
                ..options(&fixture, USER_TASK)
            },
            models(&server, provider, stream),
            EventSink::discard(),
            CancellationToken::new(),
        )
        .await
        .unwrap();

        server.assert_no_violations(); // includes the gate: all four workers overlapped
        assert_eq!(report.status, RunEnd::Finished, "{mode}: {report:#?}");
        let merged = |id: &str| {
            (
                id.to_owned(),
                SubtaskOutcome::Merged,
                Some(VerdictKind::Approve),
            )
        };
        assert_eq!(
            statuses(&report),
            vec![
                merged("S1"),
                merged("S2"),
                merged("S3"),
                (
                    "S4".into(),
                    SubtaskOutcome::Rejected,
                    Some(VerdictKind::Reject)
                ),
            ],
            "{mode}: approved subtasks merge, the rejected one does not"
        );
        assert!(report.applied, "{mode}: a clean tree gets the result");
        for (path, content) in [
            ("src/a.txt", "ALPHA\n"),
            ("src/b.txt", "BETA\n"),
            ("src/c.txt", "GAMMA\n"),
        ] {
            assert_eq!(
                String::from_utf8(fixture.read(path)).unwrap(),
                content,
                "{mode}: {path}"
            );
        }
        assert!(
            !fixture.repo.join("junk.txt").exists(),
            "{mode}: rejected work never reaches the user's tree"
        );
        assert_eq!(
            fixture.git(&["status", "--porcelain"]),
            "",
            "{mode}: the apply leaves a clean tree"
        );
        let result = report.result_commit.clone().unwrap();
        assert_eq!(
            (
                fixture.git(&["rev-parse", "HEAD^{tree}"]),
                fixture.git(&["log", "--format=%s%x09%P", &format!("{base}..HEAD")]),
            ),
            (
                fixture.git(&["rev-parse", &format!("{result}^{{tree}}")]),
                format!(
                    "WORKER-FINAL: wrote the file as asked.\t{}\n\
                     WORKER-FINAL: wrote the file as asked.\t{}\n\
                     WORKER-FINAL: wrote the file as asked.\t{base}",
                    fixture.rev("HEAD~1"),
                    fixture.rev("HEAD~2"),
                ),
            ),
            "{mode}: the branch has the result's tree as one commit per merged subtask, \
             linear on the base"
        );

        // Rejected work is archived, never deleted; merged branches are gone.
        let archive = report.subtasks[3].archive_ref.clone().unwrap();
        assert_eq!(archive, format!("refs/grove/archive/{}/4", report.run_id));
        assert_eq!(
            fixture.git(&["show", &format!("{archive}:junk.txt")]),
            "junk"
        );
        assert_eq!(
            fixture.git(&["log", "--format=%s", &format!("{base}..{archive}")]),
            format!("grove {}/4: S4: turn 2", report.run_id),
            "{mode}: grove checkpointed the write turn, and made no empty final commit"
        );
        assert_eq!(
            fixture.git(&["for-each-ref", "--format=%(refname)", "refs/heads/grove/"]),
            format!(
                "refs/heads/grove/{0}/result\nrefs/heads/grove/{0}/squashed",
                report.run_id
            ),
            "{mode}: only the result branch and its squashed history are left"
        );
        assert_eq!(
            fixture
                .git(&["worktree", "list", "--porcelain"])
                .matches("worktree ")
                .count(),
            1,
            "{mode}: every worktree is removed: {}",
            fixture.git(&["worktree", "list", "--porcelain"])
        );

        // The lead got one short result per subtask and nothing a worker read.
        let requests = server.requests();
        for lead in requests.iter().filter(|r| who(r) == Who::Lead) {
            assert!(
                !lead.raw_body.contains("READ-BY-WORKER"),
                "{mode}: no lead request holds what a worker read"
            );
            assert!(
                !lead.raw_body.contains("Reading first.") && !lead.raw_body.contains("Writing."),
                "{mode}: nor the worker's messages (only its final one, bounded)"
            );
        }
        // The lead never called `wait`: grove told it every result once it ended.
        let lead_final = requests.iter().rev().find(|r| who(r) == Who::Lead).unwrap();
        let heard = lead_final.last_user_text();
        assert!(
            heard.len() < 4 * 2000,
            "{mode}: the results are bounded: {heard}"
        );
        for result in ["S1 merged", "S2 merged", "S3 merged", "S4 rejected"] {
            assert_eq!(
                heard.matches(result).count(),
                1,
                "{mode}: the lead hears each result once, in one message: {heard}"
            );
        }
        assert!(
            heard.contains("junk.txt:1: not part of the task"),
            "{mode}: the lead sees the findings: {heard}"
        );
        let worker_reads = requests
            .iter()
            .filter(|r| who(r) == Who::Worker && r.tool_results().len() == 1)
            .filter(|r| r.tool_results()[0].1.contains("READ-BY-WORKER"))
            .count();
        assert_eq!(worker_reads, 4, "{mode}: the workers did read the notes");

        // Ledger: 3 lead turns (it delegates, ends, hears every result and ends again),
        // and per subtask 3 worker turns + 1 reviewer turn (its verdict ends it). Chat
        // completions has no cache-write count: those tokens are plain input there.
        let input_per_turn = match provider {
            Provider::Anthropic => 100,
            Provider::OpenAi => 105,
        };
        assert_eq!(report.lead_ledger.steps, 3);
        for subtask in &report.subtasks {
            assert_eq!(
                (subtask.steps, subtask.input_tokens, subtask.output_tokens),
                (4, 4 * input_per_turn, 40),
                "{mode}: {}",
                subtask.id
            );
        }
        assert_eq!(
            (report.totals.steps, report.totals.cache_read_tokens),
            (19, 950),
            "{mode}: totals sum every subagent"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn isolated_contexts_never_leak_the_task_transcripts_or_reasoning() {
    let fixture = repo_with_rules();
    let server = scripted_server(&[("Make src/a.txt shout.\nWRITE src/a.txt ALPHA", None)]).await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    server.assert_no_violations();

    for request in server.requests() {
        let body = request.raw_body.clone();
        assert!(
            request.system_text().contains(RULES),
            "every role's system prompt carries the project rules"
        );
        match who(&request) {
            Who::Lead => assert!(body.contains("USER-TASK")),
            Who::Worker => {
                assert!(
                    !body.contains("USER-TASK"),
                    "an isolated worker never sees the user's task"
                );
                assert!(
                    !body.contains("Delegating."),
                    "an isolated worker never sees the lead's messages"
                );
                assert_eq!(
                    request.tool_names(),
                    [
                        "bash",
                        "edit_file",
                        "grep",
                        "list_files",
                        "read_file",
                        "write_file"
                    ],
                    "workers get the worker tools and no delegate"
                );
            }
            Who::Reviewer => {
                assert!(!body.contains("USER-TASK"));
                assert!(
                    !body.contains("WORKER-FINAL"),
                    "the reviewer never sees the worker's final message"
                );
                assert!(
                    !body.contains("Writing."),
                    "the reviewer never sees the worker's messages"
                );
                let brief = first_user_text(&request);
                assert!(
                    brief.contains("WRITE src/a.txt ALPHA"),
                    "the reviewer sees the brief"
                );
                assert!(
                    brief.contains("+ALPHA"),
                    "the reviewer sees the diff: {brief}"
                );
                assert_eq!(
                    request.tool_names(),
                    ["grep", "list_files", "read_file", "run", "submit_verdict"],
                    "reviewers are read-only: their `run` writes a throwaway copy of the tree"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forked_worker_starts_from_the_leads_history_without_pending_calls() {
    let fixture = repo_with_rules();
    let server = scripted_server(&[("Continue.\nWRITE src/a.txt ALPHA", Some("fork"))]).await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    let worker_first = server
        .requests()
        .into_iter()
        .find(|r| who(r) == Who::Worker)
        .unwrap();
    let messages = worker_first.messages();
    assert_eq!(
        messages.len(),
        3,
        "task, the lead's text turn, the brief: {messages:#?}"
    );
    assert!(
        first_user_text(&worker_first).contains("USER-TASK"),
        "a fork sees the lead's history"
    );
    assert_eq!(messages[1]["content"][0]["text"], "Delegating.");
    assert!(
        !worker_first.raw_body.contains("lead_call_0"),
        "the lead's pending delegate call is not in the fork"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dirty_tree_is_never_touched_and_the_result_waits_on_its_branch() {
    let fixture = repo_with_rules();
    fixture.write("src/a.txt", "my own edit\n");
    fixture.write("notes.txt", "untracked\n");
    let before = fixture.user_state();
    let server = scripted_server(&[("Shout.\nWRITE src/a.txt ALPHA", None)]).await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap();
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    assert!(!report.applied);
    assert_eq!(
        fixture.user_state(),
        before,
        "the user's files are byte-identical"
    );
    let apply = report.apply.unwrap();
    assert!(
        apply.message.contains("uncommitted changes"),
        "{}",
        apply.message
    );
    assert_eq!(
        apply.command.as_deref(),
        Some(format!("git merge --ff-only grove/{}/squashed", report.run_id).as_str()),
        "the command applies what grove would have: the squashed history"
    );
    assert_eq!(
        fixture.git(&["show", &format!("grove/{}/result:src/a.txt", report.run_id)]),
        "ALPHA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_without_a_verdict_rejects_and_a_worker_cannot_delegate() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        Who::Worker => {
            if answered(request) {
                let (_, last_result) = request.tool_results().pop().unwrap();
                if last_result.contains("not available") {
                    return usage(Turn::new().tool_use(
                        "after_refusal",
                        "write_file",
                        json!({"path": "src/a.txt", "content": "ALPHA\n"}),
                    ))
                    .into();
                }
                return usage(Turn::text("WORKER-FINAL")).into();
            }
            usage(Turn::new().tool_use("sneaky", "delegate", json!({"task": "grandchild"}))).into()
        }
        Who::Reviewer => usage(Turn::text("Looks fine to me, I think.")).into(),
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
    let subtask = &report.subtasks[0];
    assert_eq!(
        (subtask.status, subtask.verdict),
        (SubtaskOutcome::Rejected, Some(VerdictKind::Reject))
    );
    assert!(
        subtask
            .review_summary
            .as_deref()
            .unwrap()
            .contains("no verdict"),
        "{subtask:#?}"
    );
    assert_eq!(
        fixture.read("src/a.txt"),
        b"alpha\n",
        "nothing unreviewed is applied"
    );
    let worker_second = server
        .requests()
        .into_iter()
        .filter(|r| who(r) == Who::Worker)
        .nth(1)
        .unwrap();
    assert!(
        worker_second.tool_results()[0]
            .1
            .contains("tool `delegate` is not available"),
        "the dispatcher refuses a tool the worker does not have"
    );
}

#[tokio::test]
async fn a_detached_head_is_refused_before_anything_starts() {
    let fixture = repo_with_rules();
    fixture.git(&["checkout", "--quiet", "--detach"]);
    let server = FakeServer::start().await;
    let error = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, RunError::DetachedHead), "{error}");
    assert!(
        server.requests().is_empty(),
        "no model call before the checks pass"
    );
}

/// Issue 31: a bare repository has no checkout to read or to apply to: refused before
/// anything starts, exit 1, its branch where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bare_repository_is_refused_before_anything_starts() {
    let fixture = repo_with_rules();
    let bare = fixture.dir.path().join("bare.git");
    fixture.git(&["clone", "--quiet", "--bare", ".", bare.to_str().unwrap()]);
    let branch_before = fixture.git(&["-C", bare.to_str().unwrap(), "rev-parse", "main"]);
    let server = scripted_server(&[("Shout a.\nWRITE src/a.txt ALPHA", None)]).await;

    let output = crate::support::grove::Grove::new(&bare, fixture.home())
        .with_server(&server)
        .grove_async(["run", USER_TASK])
        .await;

    let err = crate::support::grove::stderr(&output);
    assert_eq!(
        (
            output.status.code(),
            err.trim_end(),
            fixture.git(&["-C", bare.to_str().unwrap(), "rev-parse", "main"]),
            server.requests().len(),
            bare.join("grove").join("runs").exists(),
        ),
        (
            Some(1),
            "grove: the repository has no work tree (it is bare): grove reads its files and \
             applies its result in a checkout; run it in one (a clone, or `git worktree add \
             DIR BRANCH`)",
            branch_before,
            0,
            false,
        ),
        "a bare repository is refused with one line before any model call or run; its \
         branch stays"
    );
}

#[tokio::test]
async fn a_rebase_in_progress_is_named_not_called_a_detached_head() {
    let fixture = repo_with_rules();
    fixture.git(&["checkout", "--quiet", "-b", "side"]);
    fixture.write("src/a.txt", "side\n");
    fixture.commit_all("side edit");
    fixture.git(&["checkout", "--quiet", "main"]);
    fixture.write("src/a.txt", "main\n");
    fixture.commit_all("main edit");
    let rebase = sealed_command(&fixture.home(), &fixture.repo, &["rebase", "side"])
        .output()
        .unwrap();
    assert!(!rebase.status.success(), "the rebase stops on its conflict");
    let server = FakeServer::start().await;
    let error = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, RunError::OperationInProgress { operation } if operation.starts_with("rebase")),
        "a stopped rebase is named as such: {error}"
    );
    assert!(
        error.to_string().contains("git rebase --abort"),
        "the message says how to go on: {error}"
    );
    assert!(
        server.requests().is_empty(),
        "no model call before the checks pass"
    );
}

#[tokio::test]
async fn a_second_grove_on_the_same_repository_is_refused() {
    let fixture = repo_with_rules();
    let repo = fixture.open().await;
    let _held =
        grove::store::lock::RepoLock::acquire(repo.common_dir(), "20260101-000000-abcd").unwrap();
    let server = FakeServer::start().await;
    let error = run(
        &fixture,
        &server,
        Provider::Anthropic,
        options(&fixture, USER_TASK),
    )
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("grove run 20260101-000000-abcd"),
        "the message names the first run: {error}"
    );
    assert!(server.requests().is_empty());
}

/// Issue 31: a run that finished leaves nothing in the cache directory, not even the
/// empty folder its worktrees were in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_finished_run_leaves_no_folder_in_the_cache_directory() {
    let fixture = repo_with_rules();
    let server = scripted_server(&[("Shout a.\nWRITE src/a.txt ALPHA", None)]).await;

    let output =
        crate::support::grove::grove_in(&fixture, Some(&server), &["run", USER_TASK]).await;

    let err = crate::support::grove::stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(
        fixture.leftovers(),
        crate::support::git_fixture::Leftovers::default(),
        "nothing of the run stays in git or the cache directory: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupted_run_keeps_its_work_and_resume_finishes_it() {
    let fixture = repo_with_rules();
    let cancel = CancellationToken::new();
    let trip = cancel.clone();
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        Who::Worker => {
            if answered(request) {
                // Ctrl-C after the worker's write ran, before its last turn.
                trip.cancel();
            }
            worker_reply(request)
        }
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let report = grove::run::run(
        &fixture.repo,
        options(&fixture, USER_TASK),
        models(&server, Provider::Anthropic, true),
        EventSink::discard(),
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunEnd::Interrupted, "{report:#?}");
    assert!(!report.applied);
    assert_eq!(
        fixture.read("src/a.txt"),
        b"alpha\n",
        "the user's tree is untouched"
    );
    let branch = format!("grove/{}/1", report.run_id);
    assert_eq!(
        fixture.git(&["show", &format!("{branch}:src/a.txt")]),
        "ALPHA",
        "the worker's write is checkpointed on its branch"
    );
    assert!(
        report.subtasks[0].archive_ref.is_none(),
        "interrupted work is not archived"
    );

    // The worktree vanishes while the run is stopped (a cleanup, a reboot of a tmpfs):
    // resume re-creates it from its branch, whose checkpoint holds the work.
    let worktree = fixture.worktree_dir(&report.run_id, 1);
    assert!(
        worktree.join("src/a.txt").exists(),
        "the interrupted worktree is kept"
    );
    std::fs::remove_dir_all(&worktree).unwrap();
    // ...and something else left a directory of its own there, which is kept.
    std::fs::create_dir_all(&worktree).unwrap();
    std::fs::write(worktree.join("stray.txt"), "not grove's").unwrap();

    let first_server = server;
    let (server, resumed) = resume_healthy(&fixture, &report.run_id).await;
    let kept: Vec<_> = std::fs::read_dir(worktree.parent().unwrap())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("1.stray-")
        })
        .collect();
    assert_eq!(
        kept.len(),
        1,
        "the stray directory is moved aside: {kept:?}"
    );
    assert_eq!(
        std::fs::read_to_string(kept[0].join("stray.txt")).unwrap(),
        "not grove's",
        "and kept, never deleted"
    );
    assert!(resumed.applied);
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
    assert_eq!(
        count_tool_calls(&[&first_server, &server], "write_file"),
        1,
        "the resumed worker continues its conversation; nothing is asked or run twice"
    );
    let heard: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| who(r) == Who::Lead)
        .map(|r| r.last_user_text())
        .filter(|text| text.contains("S1 merged"))
        .collect();
    assert!(
        !heard.is_empty(),
        "the resumed lead hears its subtask's result, which it had not before grove stopped"
    );
    assert_eq!(
        resumed.subtasks[0].worker_ledger.steps, 2,
        "the ledger spans both processes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_interrupted_before_worktrees_left_git_resumes_in_its_old_worktree() {
    let fixture = repo_with_rules();
    let cancel = CancellationToken::new();
    let trip = cancel.clone();
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        Who::Worker => {
            if answered(request) {
                trip.cancel();
            }
            worker_reply(request)
        }
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let report = grove::run::run(
        &fixture.repo,
        options(&fixture, USER_TASK),
        models(&server, Provider::Anthropic, true),
        EventSink::discard(),
        cancel,
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunEnd::Interrupted, "{report:#?}");

    // Put the worktree where grove kept worktrees before they moved out of .git, as a
    // run started by an older grove left it.
    let cached = fixture.worktree_dir(&report.run_id, 1);
    let legacy = fixture
        .repo
        .join(".git/grove/runs")
        .join(&report.run_id)
        .join("worktrees");
    std::fs::create_dir_all(&legacy).unwrap();
    fixture.git(&[
        "worktree",
        "move",
        cached.to_str().unwrap(),
        legacy.join("1").to_str().unwrap(),
    ]);
    std::fs::write(legacy.join("1/uncommitted.txt"), "kept\n").unwrap();

    let (_server, resumed) = resume_healthy(&fixture, &report.run_id).await;

    assert!(resumed.applied, "{resumed:#?}");
    assert_eq!(
        (
            fixture.read("src/a.txt"),
            cached.exists(),
            fixture.read("uncommitted.txt"),
        ),
        (b"ALPHA\n".to_vec(), false, b"kept\n".to_vec()),
        "the resume used the old worktree (its uncommitted file was merged too) and made \
         no new one in the cache"
    );
}

/// How many distinct tool calls of `name` the servers' conversations hold (a call made
/// once shows up again in every later request's history, under the same id).
fn count_tool_calls(servers: &[&FakeServer], name: &str) -> usize {
    let mut seen = std::collections::BTreeSet::new();
    for request in servers.iter().flat_map(|server| server.requests()) {
        for (id, tool) in request.tool_calls() {
            if tool == name {
                seen.insert(id);
            }
        }
    }
    seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_api_outage_pauses_the_run_and_resume_finishes_it_once_the_api_is_back() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        // The API goes down once the worker starts, for good.
        Who::Worker | Who::Reviewer => Reply::overloaded(),
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
    assert_eq!(report.status, RunEnd::Paused, "{report:#?}");
    let error = report.error.clone().unwrap();
    assert!(
        error.contains("overloaded") && error.contains(&format!("grove resume {}", report.run_id)),
        "the message says what happened and what to run: {error}"
    );
    let worker_calls = server
        .requests()
        .iter()
        .filter(|r| who(r) == Who::Worker)
        .count();
    assert!(
        (2..=10).contains(&worker_calls),
        "retries are bounded: {worker_calls} worker requests"
    );
    assert!(
        report.subtasks[0].archive_ref.is_none(),
        "an outage is not the worker's failure"
    );
    let listed = grove::store::RunStore::new(fixture.open().await.common_dir())
        .list_runs()
        .unwrap();
    assert_eq!(listed[0].status.as_str(), "paused");

    resume_healthy(&fixture, &report.run_id).await;
    assert_eq!(fixture.read("src/a.txt"), b"ALPHA\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_bounds_how_many_subtasks_work_at_once() {
    let fixture = repo_with_rules();
    let server = scripted_server(&[
        ("One.\nWRITE src/a.txt ALPHA", None),
        ("Two.\nWRITE src/b.txt BETA", None),
    ])
    .await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        RunOptions {
            jobs: 1,
            ..options(&fixture, USER_TASK)
        },
    )
    .await
    .unwrap();
    assert!(report.all_merged(), "{report:#?}");
    // With one slot, a subtask's worker and reviewer finish before the next one starts.
    let order: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| who(r) != Who::Lead)
        .map(|r| {
            let brief = own_review_text(r);
            let subtask = if brief.contains("ALPHA") { "a" } else { "b" };
            format!("{subtask}:{:?}", who(r))
        })
        .collect();
    let first = order[0].split(':').next().unwrap().to_owned();
    let switch = order
        .iter()
        .position(|entry| !entry.starts_with(&first))
        .unwrap();
    assert!(
        order[switch..]
            .iter()
            .all(|entry| !entry.starts_with(&first)),
        "subtasks never overlap with --jobs 1: {order:?}"
    );
    assert_eq!(
        switch, 3,
        "two worker turns, one reviewer turn (its verdict ends it): {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn project_agents_choose_their_prompt_tools_and_model() {
    let fixture = repo_with_rules();
    fixture.write(
        ".grove/agents/scribe.md",
        "---\ndescription: Writes files, nothing else\ntools: [write_file]\nmodel: scribe-model\n---\nYou are a scribe.\n",
    );
    fixture.commit_all("add an agent");
    let server = FakeServer::with_responder(|request| {
        let system = request.system_text();
        if system.starts_with("You are a scribe.") {
            return worker_reply(request);
        }
        match who(request) {
            Who::Lead => {
                if answered(request) {
                    return usage(Turn::text("done")).into();
                }
                usage(Turn::new().tool_use(
                    "d1",
                    "delegate",
                    json!({"task": "WRITE src/a.txt ALPHA", "agent": "scribe"}),
                ))
                .into()
            }
            Who::Reviewer => reviewer_reply(request),
            Who::Worker => panic!("the built-in worker must not run"),
        }
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
    assert!(report.all_merged(), "{report:#?}");
    let scribe = server
        .requests()
        .into_iter()
        .find(|r| r.system_text().starts_with("You are a scribe."))
        .unwrap();
    assert_eq!(scribe.body["model"], "scribe-model");
    assert_eq!(scribe.tool_names(), ["write_file"]);
    assert!(
        scribe.system_text().contains(RULES),
        "project agents get the rules too"
    );
    let lead = server
        .requests()
        .into_iter()
        .find(|r| who(r) == Who::Lead)
        .unwrap();
    assert!(
        lead.raw_body
            .contains("`scribe`: Writes files, nothing else"),
        "the lead is told which agents exist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn budgets_fail_a_greedy_subagent_and_stop_new_delegations() {
    let fixture = repo_with_rules();
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => {
            // One, then its result (`wait`), then Two: by then One spent the budget.
            let results = request.tool_results();
            let (tool, input) = match results.len() {
                0 => ("delegate", json!({"task": "One.\nWRITE src/a.txt ALPHA"})),
                1 => ("wait", json!({})),
                2 => ("delegate", json!({"task": "Two.\nWRITE src/b.txt BETA"})),
                _ => return usage(Turn::text("done")).into(),
            };
            usage(Turn::new().tool_use(&format!("d{}", results.len()), tool, input)).into()
        }
        // Every worker turn costs 1600 tokens: over the subagent budget at once.
        Who::Worker => match worker_reply(request) {
            Reply::Turn(turn) => turn.usage(1500, 100, 0, 0).into(),
            other => other,
        },
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    let report = run(
        &fixture,
        &server,
        Provider::Anthropic,
        RunOptions {
            subagent_budget_tokens: Some(1500),
            budget_tokens: Some(1000),
            ..options(&fixture, USER_TASK)
        },
    )
    .await
    .unwrap();
    assert_eq!(
        report.subtasks.len(),
        1,
        "no subtask starts once the run budget is spent"
    );
    let subtask = &report.subtasks[0];
    assert_eq!(subtask.status, SubtaskOutcome::Failed);
    assert!(
        subtask.reason.as_deref().unwrap().contains("budget"),
        "the reason names the budget: {subtask:#?}"
    );
    let lead_last = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| who(r) == Who::Lead)
        .unwrap();
    assert!(
        lead_last.tool_results()[2].1.contains("budget is spent"),
        "the lead is told why: {:?}",
        lead_last.tool_results()
    );
}

/// Resumes `run_id` against a healthy server and checks that its one subtask merges.
async fn resume_healthy(fixture: &GitFixture, run_id: &str) -> (FakeServer, RunReport) {
    let server = scripted_server(&[("unused", None)]).await;
    let resumed = grove::run::resume(
        &fixture.repo,
        run_id,
        fixture.options(),
        |_| Ok(models(&server, Provider::Anthropic, true)),
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(resumed.status, RunEnd::Finished, "{resumed:#?}");
    assert_eq!(
        statuses(&resumed),
        vec![(
            "S1".into(),
            SubtaskOutcome::Merged,
            Some(VerdictKind::Approve)
        )],
        "the resumed subtask finishes and merges"
    );
    (server, resumed)
}
