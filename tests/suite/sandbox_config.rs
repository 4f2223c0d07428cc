//! Issue 28's bad input: a `[worktree] share` naming a tracked or a missing directory, a
//! `[sandbox] deny_read` that would hide the worktrees, a relative one — each stops the
//! run before anything is created, naming the key; an `allow_read` of a secret store is
//! allowed, loudly, and journaled. And the keys at work: a running command does not see
//! what `deny_read` hides, and sees what `allow_read` opens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::Value;

use grove::store::RunStore;

use crate::suite::sandbox::sandbox_or_skip;
use crate::support::fake_server::{FakeServer, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, lead_reply, reviewer_reply, usage};

/// `grove run` with `config` committed and trusted (when valid): its exit code, stderr,
/// and the model requests.
async fn run_with(config: &str) -> (GitFixture, Option<i32>, String, usize) {
    let fixture = GitFixture::with_files(&[
        ("README", "the project\n"),
        ("docs/guide.md", "tracked\n"),
        (".gitignore", ".venv/\n"),
        (".grove/config.toml", config),
    ]);
    std::fs::create_dir_all(fixture.repo.join(".venv/bin")).unwrap();
    // Not asserted: `grove trust` refuses an invalid file as the run does, and the run's
    // refusal is what these tests read.
    let _trusted = grove_in(&fixture, None, &["trust"]).await;
    let server = FakeServer::with_responder(|_| Turn::text("Nothing to do.").into()).await;
    let output = grove_in(&fixture, Some(&server), &["run", "--json", "look around"]).await;
    let requests = server.requests().len();
    (fixture, output.status.code(), stderr(&output), requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_that_is_tracked_or_missing_and_a_deny_read_over_the_worktrees_stop_the_run() {
    let cases = [
        (
            "[worktree]\nshare = [\"docs\"]\n",
            "worktree.share: docs: git tracks it, so every worktree has its own copy that its \
             worker may change; `share` is for ignored directories such as `.venv` or \
             `node_modules`",
        ),
        (
            "[worktree]\nshare = [\"node_modules\"]\n",
            "worktree.share: node_modules: there is no such directory in",
        ),
        (
            "[sandbox]\ndeny_read = [\"~/.cache\"]\n",
            "sandbox.deny_read: ",
        ),
        (
            "[sandbox]\ndeny_read = [\"secrets\"]\n",
            "sandbox.deny_read: expected an array of absolute paths or paths in your home",
        ),
    ];
    for (config, said) in cases {
        let (_fixture, code, message, requests) = run_with(config).await;
        assert_eq!(
            (code, message.contains(said), requests),
            (Some(1), true, 0),
            "{config:?} stops the run at its start (exit 1, no model request), saying \
             {said:?}: {message}"
        );
    }
    let (_fixture, _, message, _) = run_with("[sandbox]\ndeny_read = [\"~/.cache\"]\n").await;
    assert!(
        message.contains("would hide the worktrees' directory"),
        "the deny_read that covers the cache names what it would hide: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_read_of_a_secret_store_is_allowed_loudly_and_journaled() {
    let (fixture, code, message, _) = run_with("[sandbox]\nallow_read = [\"~/.aws\"]\n").await;
    assert_eq!(
        code,
        Some(3),
        "the run goes on (its lead delegates nothing): {message}"
    );
    let home = fixture.home();
    assert!(
        message.contains(&format!(
            "WARNING: [sandbox] allow_read opens {} to workers' commands",
            home.join(".aws").display()
        )),
        "the opening is said loudly: {message}"
    );
    let store = RunStore::new(&fixture.repo.join(".git"));
    let runs = store.list_runs().unwrap();
    let state = store.read_state(&runs[0].run_id).unwrap();
    let options: Value = serde_json::to_value(&state.options).unwrap();
    assert_eq!(
        options["sandbox_paths"]["allow_read"],
        serde_json::json!(["~/.aws"]),
        "the run's journal records it"
    );
}

/// What the user does before running with a config that widens the sandbox (issue 42).
async fn trust(fixture: &GitFixture) {
    let trusted = grove_in(fixture, None, &["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
}

/// What a worker's `cat` of each of `paths` (in its home) printed in a run with `config`
/// committed and trusted: one line per path, its content or `denied` (nothing read).
async fn reads_in_a_run(config: &str, paths: &[&str]) -> Vec<String> {
    let fixture =
        GitFixture::with_files(&[("README", "the project\n"), (".grove/config.toml", config)]);
    let home = fixture.home();
    for (path, content) in [
        ("private/notes.txt", "PRIVATE-NOTES"),
        ("private/open.txt", "OPEN"),
        (".aws/config", "AWS-CONFIG"),
        (".aws/credentials", "AWS-SECRET-KEY"),
        ("public.txt", "PUBLIC"),
    ] {
        std::fs::create_dir_all(home.join(path).parent().unwrap()).unwrap();
        std::fs::write(home.join(path), format!("{content}\n")).unwrap();
    }
    // It leaves a file, so that its subtask has work to merge.
    let command: String = paths
        .iter()
        // A covered file may show as an empty one: no content is as good as none.
        .map(|path| format!("cat ~/{path} 2>/dev/null | grep . || echo denied; "))
        .chain(["echo looked > looked.txt".to_owned()])
        .collect();
    let server = FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[("Look around.", None)]),
        Who::Worker if answered(request) => usage(Turn::text("Done.")).into(),
        Who::Worker => usage(Turn::text("Reading.").tool_use(
            "reads",
            "bash",
            serde_json::json!({ "command": command }),
        ))
        .into(),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    trust(&fixture).await;
    let output = grove_in(&fixture, Some(&server), &["run", "--json", "look around"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let results: Vec<String> = server
        .requests()
        .iter()
        .flat_map(|request| request.tool_results())
        .filter(|(id, _)| id == "reads")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(results.len(), 1, "the worker's command ran once");
    results[0]
        .lines()
        .filter(|line| !line.starts_with("[exit code"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_read_hides_a_path_and_allow_read_opens_one_while_a_command_runs() {
    if !sandbox_or_skip("deny_read_hides_a_path_and_allow_read_opens_one_while_a_command_runs") {
        return;
    }
    let paths = [
        "private/notes.txt",
        "private/open.txt",
        ".aws/config",
        ".aws/credentials",
        "public.txt",
    ];
    let by_default = reads_in_a_run("", &paths).await;
    let configured = reads_in_a_run(
        "[sandbox]\nallow_read = [\"~/private\", \"~/.aws/config\"]\n\
         deny_read = [\"~/private/notes.txt\"]\n",
        &paths,
    )
    .await;

    assert_eq!(
        (by_default, configured),
        (
            ["denied", "denied", "denied", "denied", "denied"]
                .map(str::to_owned)
                .to_vec(),
            ["denied", "OPEN", "AWS-CONFIG", "denied", "denied"]
                .map(str::to_owned)
                .to_vec(),
        ),
        "by default nothing of a home exists for a command; `allow_read` opens ~/private \
         and ~/.aws/config alone (its neighbour, the credentials, stays out), and \
         `deny_read` hides ~/private/notes.txt beneath that grant"
    );
}
