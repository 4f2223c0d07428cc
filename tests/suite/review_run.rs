//! Issue 43: the reviewer can run what it judges. Its `run` tool executes in a disposable
//! copy-on-write view of the tree it reviews — the worker's changes there, its own writes
//! thrown away, no network — in both worktree modes; nothing it does reaches the commit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::json;

use grove::worktree::WorktreeMode;

use crate::suite::escapes::mode_or_skip;
use crate::support::fake_server::{FakeServer, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, lead_reply, usage, worker_reply};

/// The reviewer's two commands: the first tries the work and writes beside it, the second
/// looks for what the first wrote and for the network.
const FIRST: &str = "python3 -c 'import greet; print(greet.hello())' && echo scratch > made.txt \
                     && echo tampered >> greet.py && cat made.txt";
const SECOND: &str = "cat made.txt 2>&1; grep -c tampered greet.py; \
                      python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 80), 2)' \
                      2>&1 | tail -1";

async fn a_reviewer_runs_the_work_in_a_throwaway_copy(test: &str, mode: WorktreeMode) {
    let fixture = GitFixture::with_files(&[("README", "the project\n")]);
    if !mode_or_skip(test, &fixture, mode).await {
        return;
    }
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(
            request,
            &[(
                "Add greet.py.\nWRITE greet.py def hello(): return 'hi'",
                None,
            )],
        ),
        Who::Worker => worker_reply(request),
        Who::Reviewer => {
            let ran = request.tool_results().len();
            let turn = match ran {
                0 => Turn::new().tool_use("r1", "run", json!({ "command": FIRST })),
                1 => Turn::new().tool_use("r2", "run", json!({ "command": SECOND })),
                _ if answered(request) && ran == 2 => Turn::new().tool_use(
                    "r3",
                    "submit_verdict",
                    json!({ "verdict": "approve", "summary": "It imports and greets." }),
                ),
                _ => Turn::text("Verdict given."),
            };
            usage(turn).into()
        }
    })
    .await;
    fixture.write(
        ".grove/config.toml",
        format!("[worktree]\nmode = \"{mode}\"\n"),
    );
    fixture.commit_all("the worktree mode");
    let output = grove_in(&fixture, Some(&server), &["run", "--json", "add greet"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Reviewer)
        .flat_map(|request| request.tool_results())
        .filter(|(id, _)| id == "r1" || id == "r2")
        .map(|(_, text)| text)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        (
            results,
            fixture.git(&["show", "HEAD:greet.py"]),
            fixture.git(&["ls-tree", "--name-only", "HEAD"])
        ),
        (
            vec![
                "cat: made.txt: No such file or directory\n0\nOSError: [Errno 101] Network is \
                 unreachable\n[exit code: 0]\n"
                    .to_owned(),
                "hi\nscratch\n[exit code: 0]\n".to_owned(),
            ],
            "def hello(): return 'hi'".to_owned(),
            ".grove\nREADME\ngreet.py".to_owned()
        ),
        "the reviewer's command imports the worker's module and writes beside it; its next \
         command finds none of it and no network; the merged commit holds the worker's file \
         alone, untouched ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_runs_the_work_in_a_throwaway_copy_of_a_copy_on_write_tree() {
    a_reviewer_runs_the_work_in_a_throwaway_copy(
        "a_reviewer_runs_the_work_in_a_throwaway_copy_of_a_copy_on_write_tree",
        WorktreeMode::Overlay,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_runs_the_work_in_a_throwaway_copy_of_a_git_worktree() {
    a_reviewer_runs_the_work_in_a_throwaway_copy(
        "a_reviewer_runs_the_work_in_a_throwaway_copy_of_a_git_worktree",
        WorktreeMode::Git,
    )
    .await;
}
