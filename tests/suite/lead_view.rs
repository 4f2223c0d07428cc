//! What the lead reads: the run's result as it is at each call, from git objects, in
//! every worktree mode and with a setup command — no checkout of its own. Before any
//! merge its `read_file` shows the base and says so; after S1 merged, its `grep` finds
//! S1's text and its answer names the commit and what it holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{Models, RunOptions};
use grove::settings::options::WorktreeSetup;
use grove::store::journal::SubtaskOutcome;
use grove::worktree::WorktreeMode;

use super::overlay::overlay_or_skip;
use crate::support::fake_server::{FakeServer, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::role as who;

/// What the lead's tools answered, in order: its `read_file` before any merge, its
/// `delegate`, its `wait`, and its `grep` after S1 merged.
type Answers = Arc<Mutex<Vec<String>>>;

/// Folders named like a lead's worktree (`<cache>/<repo>/<run>/0`) under `home`.
fn lead_dirs(home: &Path) -> Vec<PathBuf> {
    let grove = home.join(".cache").join("grove");
    let mut found = Vec::new();
    for repo in std::fs::read_dir(&grove).into_iter().flatten().flatten() {
        for run in std::fs::read_dir(repo.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let lead = run.path().join("0");
            if lead.is_dir() {
                found.push(lead);
            }
        }
    }
    found
}

/// A lead that reads README, delegates one subtask (it appends a line; approved), waits
/// for it, greps for that line, and finishes.
async fn reading_lead(answers: Answers) -> FakeServer {
    FakeServer::with_responder(move |request| {
        let results = request.tool_results();
        if who(request) == "lead" && !results.is_empty() {
            answers
                .lock()
                .unwrap()
                .push(results.last().unwrap().1.clone());
        }
        match (who(request), results.len()) {
            ("lead", 0) => Turn::text("Reading first.")
                .tool_use("lead_read", "read_file", json!({ "path": "README" }))
                .into(),
            ("lead", 1) => Turn::text("Delegating.")
                .tool_use("lead_go", "delegate", json!({ "task": "Add a line." }))
                .into(),
            ("lead", 2) => Turn::text("Waiting.")
                .tool_use("lead_wait", "wait", json!({}))
                .into(),
            ("lead", 3) => Turn::text("Verifying.")
                .tool_use("lead_grep", "grep", json!({ "pattern": "merged line" }))
                .into(),
            ("lead", _) => Turn::text("Done.").into(),
            ("reviewer", _) => Turn::new()
                .tool_use(
                    "review_1",
                    "submit_verdict",
                    json!({ "verdict": "approve", "summary": "Fine." }),
                )
                .into(),
            (_, 0) => Turn::text("Writing.")
                .tool_use(
                    "worker_1",
                    "write_file",
                    json!({ "path": "README", "content": "the base\na merged line\n" }),
                )
                .into(),
            _ => Turn::text("WORKER-FINAL: done.").into(),
        }
    })
    .await
}

/// What one run showed: the lead's answers, and the lead worktrees that were made.
async fn run_reading_lead(
    mode: WorktreeMode,
    setup: Option<&str>,
) -> Option<(Vec<String>, Vec<PathBuf>, String)> {
    let fixture = GitFixture::with_files(&[("README", "the base\n")]);
    let repo = fixture.open().await;
    if mode == WorktreeMode::Overlay
        && !overlay_or_skip("the_lead_reads_the_live_result", repo.worktrees_home()).await
    {
        return None;
    }
    let answers = Answers::default();
    let server = reading_lead(Arc::clone(&answers)).await;
    let options = RunOptions {
        git: fixture.options(),
        worktree_mode: mode,
        worktree_setup: WorktreeSetup {
            setup: setup.map(str::to_owned),
            ..WorktreeSetup::default()
        },
        ..RunOptions::new("Add a line.")
    };
    let report = grove::run::run(
        &fixture.repo,
        options,
        crate::support::scripted_run::models(&server, Provider::Anthropic, true) as Models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    let base = fixture.rev("HEAD~1").to_string();
    let answers = answers.lock().unwrap().clone();
    Some((answers, lead_dirs(&fixture.home()), base))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_reads_the_live_result_from_git_objects_in_every_mode_and_has_no_checkout() {
    for (mode, setup) in [
        (WorktreeMode::Git, None),
        (WorktreeMode::Overlay, None),
        (WorktreeMode::Overlay, Some("true")),
    ] {
        let Some((answers, lead_dirs, base)) = run_reading_lead(mode, setup).await else {
            continue;
        };
        let read = &answers[0];
        assert_eq!(
            read,
            &format!(
                "[the run's result at {}: the base, nothing merged yet]\n     1\tthe base\n",
                &base[..10]
            ),
            "{mode:?}, setup {setup:?}: before any merge the lead reads the base, and is told so"
        );
        let grep = &answers[3];
        assert!(
            grep.starts_with("[the run's result at ")
                && grep.contains(": the base with S1 merged]\n")
                && grep.ends_with("README:2:a merged line\n"),
            "{mode:?}, setup {setup:?}: after S1 merged, the lead's grep finds S1's line and \
             names what it read: {grep}"
        );
        assert_eq!(
            lead_dirs,
            Vec::<PathBuf>::new(),
            "{mode:?}, setup {setup:?}: no worktree was made for the lead"
        );
    }
}
