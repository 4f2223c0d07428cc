//! Merges follow reviews as they end (issue 43), not delegation: a scenario that needs
//! S1 merged before S2 holds S2's first review until S1's merge is on the run's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use super::fake_server::{RecordedRequest, Reply};
use super::git_fixture::{GitFixture, git_in};

/// How a reviewer's first message starts (`run/subtask/reviewer.rs`).
const REVIEW_BRIEF: &str = "# The subtask's brief\n\n";

/// Holds the first review of one subtask until another's merge is on the result.
pub struct MergedFirst {
    /// The held subtask's brief starts with this.
    held_brief: &'static str,
    /// Opened by a watcher once the merge is there.
    gate: Arc<Barrier>,
    held: AtomicBool,
}

impl MergedFirst {
    /// Holds the first review of the subtask whose brief starts with `held_brief` until
    /// a run's result in `fixture` holds the merge of `first` (`S1`), for at most a
    /// minute. Needs a tokio runtime (the watcher is a task).
    pub fn new(fixture: &GitFixture, first: &'static str, held_brief: &'static str) -> Arc<Self> {
        let gate = Arc::new(Barrier::new(2));
        let (home, repo, opens) = (fixture.home(), fixture.repo.clone(), Arc::clone(&gate));
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !merged(&home, &repo, first) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            opens.wait().await;
        });
        Arc::new(Self {
            held_brief,
            gate,
            held: AtomicBool::new(false),
        })
    }

    /// `reply`, held until the merge when `request` is the first of the held review.
    pub fn hold(&self, request: &RecordedRequest, reply: Reply) -> Reply {
        let held_review = request.tool_results().is_empty()
            && request
                .first_user_text()
                .strip_prefix(REVIEW_BRIEF)
                .is_some_and(|brief| brief.starts_with(self.held_brief));
        if held_review && !self.held.swap(true, Ordering::SeqCst) {
            Reply::Gated {
                gate: Arc::clone(&self.gate),
                reply: Box::new(reply),
            }
        } else {
            reply
        }
    }
}

/// True once some run's result in `repo` holds the merge of `subtask`.
fn merged(home: &Path, repo: &Path, subtask: &str) -> bool {
    let refs = git_in(
        home,
        repo,
        &["for-each-ref", "--format=%(refname)", "refs/heads/grove/"],
    );
    let merge = format!(": merge {subtask}");
    refs.lines()
        .filter(|name| name.ends_with("/result"))
        .any(|name| {
            git_in(home, repo, &["log", "--format=%s", name])
                .lines()
                .any(|subject| subject.ends_with(&merge))
        })
}
