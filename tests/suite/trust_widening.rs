//! A repository's `.grove/config.toml` may not widen the sandbox without `grove trust`
//! (issue 42): `[sandbox] allow_read`, `[worktree] copy` and an explicit `[worktree]
//! share` take effect only once the user trusted their exact value in that repository.
//! Until then `grove run` and `grove resume` stop before any model is asked, naming the
//! key, its value and the command that trusts it. A worker that writes such a file, and
//! a reviewer who approves it, open nothing for the next run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use grove::settings::config::CONFIG_PATH;

use crate::support::fake_server::FakeServer;
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in as grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{lead_reply, reviewer_reply, worker_reply};

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", stderr(output)))
}

/// A server whose lead delegates one subtask with `brief` (a `WRITE <path> <content>`
/// line), approved by the reviewer.
async fn one_subtask_server(brief: &'static str) -> FakeServer {
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, &[(brief, None)]),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await
}

/// What a refused run must not have left: a run store, a `grove/...` ref, a worktree.
fn created_by_grove(fixture: &GitFixture) -> (bool, String, usize) {
    (
        fixture.repo.join(".git/grove").exists(),
        fixture.git(&[
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/grove",
            "refs/grove",
        ]),
        fixture
            .git(&["worktree", "list", "--porcelain"])
            .matches("worktree ")
            .count(),
    )
}

/// A repository whose checkout holds what each widening opens: an ignored `.env.local`
/// and `secrets/` directory, and keys in the scratch home's `~/.ssh`.
fn repository() -> GitFixture {
    let fixture = GitFixture::with_files(&[
        ("src/a.txt", "alpha\n"),
        (".gitignore", ".env.local\nsecrets/\n"),
    ]);
    fixture.write(".env.local", "API_TOKEN=ENV-SECRET\n");
    fixture.write("secrets/token", "DIR-SECRET\n");
    let ssh = fixture.home().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "SSH-SECRET\n").unwrap();
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_widening_in_a_repository_config_stops_the_run_until_its_value_is_trusted() {
    let cases = [
        (
            "[sandbox]\nallow_read = [\"~/.ssh\"]\n",
            "sandbox.allow_read = [\"~/.ssh\"]",
        ),
        (
            "[worktree]\ncopy = [\".env.local\"]\n",
            "worktree.copy = [\".env.local\"]",
        ),
        (
            "[worktree]\nshare = [\"secrets\"]\n",
            "worktree.share = [\"secrets\"]",
        ),
        (
            "[workers]\npass_env = [\"AWS_SECRET_ACCESS_KEY\"]\n",
            "workers.pass_env = [\"AWS_SECRET_ACCESS_KEY\"]",
        ),
    ];
    for (config, widening) in cases {
        let fixture = repository();
        fixture.write(CONFIG_PATH, config);
        fixture.commit_all("a config that widens the sandbox");
        let server = one_subtask_server("Shout.\nWRITE src/a.txt ALPHA").await;

        let refused = grove(&fixture, Some(&server), &["run", "--json", "shout"]).await;
        let message = stderr(&refused);
        assert_eq!(
            (
                refused.status.code(),
                message.contains(&format!("\n    {widening}\n")),
                message.contains("run: grove trust"),
                server.requests().len(),
                created_by_grove(&fixture),
            ),
            (Some(1), true, true, 0, (false, String::new(), 1)),
            "{widening}: an untrusted widening stops the run before any model is asked or \
             anything is created, naming the key, its value and `grove trust`: {message}"
        );

        let trusted = grove(&fixture, None, &["trust"]).await;
        assert_eq!(
            (
                trusted.status.code(),
                stdout(&trusted).contains(&format!("\n    {widening}\n"))
            ),
            (Some(0), true),
            "{widening}: grove trust records the value and shows it: {}{}",
            stdout(&trusted),
            stderr(&trusted)
        );
        let ran = grove(&fixture, Some(&server), &["run", "--json", "shout"]).await;
        assert_eq!(
            (
                ran.status.code(),
                report(&ran)["subtasks"][0]["status"].clone()
            ),
            (Some(0), json!("merged")),
            "{widening}: once trusted, the run goes on: {}",
            stderr(&ran)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_needs_no_trust_runs_without_it() {
    // deny_read narrows; an empty share turns grove's own sharing off; a share grove
    // finds itself (an ignored `.venv`) is not the repository's asking.
    let fixture = GitFixture::with_files(&[
        ("src/a.txt", "alpha\n"),
        (".gitignore", ".venv/\n"),
        (
            CONFIG_PATH,
            "[sandbox]\ndeny_read = [\"~/private\"]\nallow_read = []\n\n[worktree]\ncopy = []\n",
        ),
    ]);
    std::fs::create_dir_all(fixture.repo.join(".venv/bin")).unwrap();
    let server = one_subtask_server("Shout.\nWRITE src/a.txt ALPHA").await;
    let ran = grove(&fixture, Some(&server), &["run", "--json", "shout"]).await;
    assert_eq!(
        (
            ran.status.code(),
            report(&ran)["subtasks"][0]["status"].clone()
        ),
        (Some(0), json!("merged")),
        "a config that widens nothing needs no trust: {}",
        stderr(&ran)
    );
    assert!(
        !fixture.home().join(".local/share/grove/trust").exists(),
        "and no trust record was needed or written"
    );
}

/// Issue 42's scenario: a worker writes a `.grove/config.toml` that copies the user's
/// `.env.local` into every worktree, a reviewer approves it, it is merged onto the
/// user's branch. The next `grove run` stops before any token is spent, until the user
/// trusts that value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_after_a_merged_config_that_widens_the_view_stops_before_any_token() {
    let fixture = repository();
    let server = one_subtask_server(
        "Configure the worktrees.\nWRITE .grove/config.toml worktree = { copy = [\".env.local\"] }",
    )
    .await;
    let first = grove(&fixture, Some(&server), &["run", "--json", "configure"]).await;
    assert_eq!(
        (
            first.status.code(),
            report(&first)["subtasks"][0]["status"].clone(),
            String::from_utf8(fixture.read(CONFIG_PATH)).unwrap(),
        ),
        (
            Some(0),
            json!("merged"),
            "worktree = { copy = [\".env.local\"] }\n".to_owned()
        ),
        "the worker's config is approved and merged onto the user's branch: {}",
        stderr(&first)
    );

    let (head, asked) = (fixture.rev("HEAD"), server.requests().len());
    let second = grove(&fixture, Some(&server), &["run", "--json", "again"]).await;
    let message = stderr(&second);
    assert_eq!(
        (
            second.status.code(),
            message.contains("\n    worktree.copy = [\".env.local\"]\n"),
            message.contains("run: grove trust"),
            server.requests().len() - asked,
            fixture.rev("HEAD"),
        ),
        (Some(1), true, true, 0, head),
        "the next run stops before any token, naming the key, its value and `grove \
         trust`, and leaves the branch alone: {message}"
    );

    let trusted = grove(&fixture, None, &["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    server.set_responder(|request| match who(request) {
        Who::Lead => lead_reply(request, &[("Shout.\nWRITE src/a.txt ALPHA", None)]),
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    });
    let third = grove(&fixture, Some(&server), &["run", "--json", "shout"]).await;
    assert_eq!(
        (
            third.status.code(),
            report(&third)["subtasks"][0]["status"].clone()
        ),
        (Some(0), json!("merged")),
        "once the user trusted it, runs go on: {}",
        stderr(&third)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_resume_refuses_a_journaled_widening_until_it_is_trusted() {
    use crate::support::scripted_run::{repo_with_rules, scripted_server};

    // A run journaled by a grove that did not ask for trust of `copy` (the journal of
    // `run_state`'s old-format fixture, its options given a copy list), paused before its
    // lead's first answer.
    let fixture = repo_with_rules();
    fixture.write(".env.local", "API_TOKEN=ENV-SECRET\n");
    let run_id = "20261201-084722-0491";
    let mut records: Vec<Value> = include_str!("fixtures/paused_run.journal.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    records[0]["options"]["worktree_setup"]["copy"] = json!([".env.local"]);
    let journal: String = records.iter().map(|record| format!("{record}\n")).collect();
    let run_dir = fixture.repo.join(".git/grove/runs").join(run_id);
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join("journal.jsonl"), &journal).unwrap();

    let server = scripted_server(&[("Shout.\nWRITE src/a.txt ALPHA", None)]).await;
    let refused = grove(&fixture, Some(&server), &["resume", run_id]).await;
    let message = stderr(&refused);
    assert_eq!(
        (
            refused.status.code(),
            message.contains("\n    worktree.copy = [\".env.local\"]\n"),
            message.contains("run: grove trust"),
            std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap(),
            server.requests().len(),
        ),
        (Some(1), true, true, journal, 0),
        "the refused resume names the journaled value and how to trust it, journals \
         nothing and asks no model: {message}"
    );

    fixture.write(CONFIG_PATH, "[worktree]\ncopy = [\".env.local\"]\n");
    let trusted = grove(&fixture, None, &["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    let resumed = grove(&fixture, Some(&server), &["resume", "--json", run_id]).await;
    assert_eq!(
        (
            resumed.status.code(),
            report(&resumed)["subtasks"][0]["status"].clone()
        ),
        (Some(0), json!("merged")),
        "once trusted, the run resumes: {}",
        stderr(&resumed)
    );
}
