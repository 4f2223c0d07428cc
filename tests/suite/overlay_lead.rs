//! The lead's worktree in a run with copy-on-write trees: a tree over the run's base tree,
//! mounted in the background (no checkout of the repository for the lead), read through
//! its tree host, and gone at the run's end; with a setup command to run in the base, a
//! git worktree as before (the lead's reads would wait for the setup).
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
use grove::tools::tree::WorktreeMode;

use super::overlay::overlay_or_skip;
use crate::support::fake_server::{FakeServer, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::role as who;

/// What the test saw of the lead's worktree while the lead was reading.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Seen {
    /// What the lead's `read_file` of README returned.
    lead_read: String,
    /// Whether README was a file at the lead's worktree path in grove's own view (a
    /// checkout) while the lead read it.
    checked_out: bool,
}

/// The lead's worktree folders (`<cache>/<repo>/<run>/0`) under `home`.
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

/// A lead that reads README, then delegates one subtask (approved) and finishes;
/// `seen` records its read and the lead's worktree as grove's own view shows it.
async fn reading_lead(home: PathBuf, seen: Arc<Mutex<Seen>>) -> FakeServer {
    FakeServer::with_responder(move |request| {
        let results = request.tool_results();
        match who(request) {
            "lead" if results.is_empty() => Turn::text("Reading first.")
                .tool_use("lead_read", "read_file", json!({ "path": "README" }))
                .into(),
            "lead" if results.len() == 1 => {
                *seen.lock().unwrap() = Seen {
                    lead_read: results[0].1.clone(),
                    checked_out: lead_dirs(&home)
                        .iter()
                        .any(|dir| dir.join("README").is_file()),
                };
                Turn::text("Delegating.")
                    .tool_use("lead_go", "delegate", json!({ "task": "Add a line." }))
                    .into()
            }
            "lead" => Turn::text("Done.").into(),
            "reviewer" if results.is_empty() => Turn::new()
                .tool_use(
                    "review_1",
                    "submit_verdict",
                    json!({ "verdict": "approve", "summary": "Fine." }),
                )
                .into(),
            "reviewer" => Turn::text("Verdict given.").into(),
            _ if results.is_empty() => Turn::text("Writing.")
                .tool_use(
                    "worker_1",
                    "write_file",
                    json!({ "path": "added.txt", "content": "a line\n" }),
                )
                .into(),
            _ => Turn::text("WORKER-FINAL: done.").into(),
        }
    })
    .await
}

/// What a run left: what the lead saw, its worktree folders, the subtask's outcome, and
/// what is left in the run's folder of worktrees and of its numbered branches.
type Left = (Seen, Vec<PathBuf>, SubtaskOutcome, Vec<String>, String);

async fn run_reading_lead(setup: Option<&str>, jobs: usize) -> Option<Left> {
    let fixture = GitFixture::with_files(&[("README", "the base\n")]);
    let repo = fixture.open().await;
    if !overlay_or_skip("the_lead_reads_through_a_tree", repo.worktrees_home()).await {
        return None;
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let server = reading_lead(fixture.home(), Arc::clone(&seen)).await;
    let options = RunOptions {
        jobs,
        git: fixture.options(),
        worktree_mode: WorktreeMode::Overlay,
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
    let seen = seen.lock().unwrap().clone();
    let run_dir = repo.default_worktrees_dir(&report.run_id.parse().unwrap());
    let mut in_run_dir: Vec<String> = std::fs::read_dir(&run_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    in_run_dir.sort();
    let numbered = fixture.git(&[
        "for-each-ref",
        "--format=%(refname)",
        &format!("refs/heads/grove/{}/[0-9]*", report.run_id),
    ]);
    Some((
        seen,
        lead_dirs(&fixture.home()),
        report.subtasks[0].status,
        in_run_dir,
        numbered,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_reads_through_a_copy_on_write_tree_and_leaves_nothing() {
    // Four slots, one subtask: three trees are mounted ahead for nothing.
    let Some(left) = run_reading_lead(None, 4).await else {
        return;
    };
    assert_eq!(
        left,
        (
            Seen {
                lead_read: "     1\tthe base\n".to_owned(),
                checked_out: false,
            },
            Vec::new(),
            SubtaskOutcome::Merged,
            Vec::new(),
            String::new(),
        ),
        "the lead read the base through its tree, no checkout was made for it, and its \
         tree, the subtask's and the three made ahead for nothing are gone, branches too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_setup_to_run_in_the_base_the_lead_gets_a_git_worktree() {
    let Some(left) = run_reading_lead(Some("true"), 1).await else {
        return;
    };
    assert_eq!(
        left,
        (
            Seen {
                lead_read: "     1\tthe base\n".to_owned(),
                checked_out: true,
            },
            Vec::new(),
            SubtaskOutcome::Merged,
            Vec::new(),
            String::new(),
        ),
        "the lead's reads do not wait for the base's setup: it reads a checkout"
    );
}
