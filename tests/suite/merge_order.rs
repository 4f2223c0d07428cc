//! Merges are serialized, not ordered by delegation (issue 43): an approved subtask
//! merges while a subtask delegated before it is still working. A real repository, the
//! real orchestrator, every model call over HTTP to the fake server; the slow worker's
//! first model request is held until the test lets it go.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use tokio::sync::{Barrier, mpsc};
use tokio_util::sync::CancellationToken;

use grove::event::{AgentLabel, Event, EventSink};
use grove::model::Provider;
use grove::status::SubtaskId;
use grove::store::journal::SubtaskOutcome;

use crate::support::fake_server::{FakeServer, Reply};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    answered, lead_reply, models, options, reviewer_reply, worker_reply,
};

const SLOW: &str = "Add the slow file.\nWRITE slow.txt slow";
const FAST: &str = "Add the fast file.\nWRITE fast.txt fast";

/// What the test saw of one subtask, in the order the run emitted it.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    WorkerFinished(SubtaskId),
    SubtaskFinished(SubtaskId, SubtaskOutcome),
}

fn seen(event: &Event) -> Option<Seen> {
    match event {
        Event::AgentFinished { agent, .. } if agent.role == "worker" => match agent.label {
            AgentLabel::Subtask(id) => Some(Seen::WorkerFinished(id)),
            AgentLabel::Lead => None,
        },
        Event::SubtaskFinished { label, status, .. } => {
            Some(Seen::SubtaskFinished(*label, *status))
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approved_subtask_merges_while_one_delegated_before_it_still_works() {
    let fixture = GitFixture::with_files(&[("README.md", "two files to add\n")]);
    // The slow worker's first request is answered only once the test waits here too
    // (once: a retry of it is not held, so that the test's one arrival opens the gate).
    let gate = Arc::new(Barrier::new(2));
    let held = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, held) = (Arc::clone(&gate), Arc::clone(&held));
        FakeServer::with_responder(move |request| match who(request) {
            Who::Lead => lead_reply(request, &[(SLOW, None), (FAST, None)]),
            Who::Worker
                if !answered(request)
                    && request.last_user_text().contains(SLOW)
                    && !held.swap(true, Ordering::SeqCst) =>
            {
                Reply::Gated {
                    gate: Arc::clone(&gate),
                    reply: Box::new(worker_reply(request)),
                }
            }
            Who::Worker => worker_reply(request),
            Who::Reviewer => reviewer_reply(request),
        })
        .await
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let started = Instant::now();
    let (repo, options, models) = (
        fixture.repo.clone(),
        options(&fixture, "Add two files."),
        models(&server, Provider::Anthropic, true),
    );
    let run = tokio::spawn(async move {
        grove::run::run(
            &repo,
            options,
            models,
            EventSink::new(tx),
            CancellationToken::new(),
        )
        .await
    });

    // Until S2 is over: S1's worker cannot finish before the gate opens below.
    let mut events = Vec::new();
    let s2_over = |event: &Event| matches!(event, Event::SubtaskFinished { label, .. } if *label == SubtaskId(2));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !events.iter().any(s2_over) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(event)) => events.push(event),
            // Before the fix S2 waited for S1 here: the gate below is then opened late.
            Ok(None) | Err(_) => break,
        }
    }
    let s2_finished_after = started.elapsed();
    let run_id = events
        .iter()
        .find_map(|event| match event {
            Event::RunStarted { run_id, .. } => Some(run_id.clone()),
            _ => None,
        })
        .expect("the run says its id");
    let result_files = fixture.git(&[
        "ls-tree",
        "--name-only",
        &format!("refs/heads/{}", run_id.result_branch()),
    ]);
    // Bounded: should the held request have gone (a timeout), nobody else arrives.
    let _ = tokio::time::timeout(Duration::from_secs(20), gate.wait()).await;
    let report = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ends once the slow worker is let go")
        .unwrap()
        .unwrap();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    eprintln!(
        "S2 over {:.2} s after the start; the run took {:.2} s",
        s2_finished_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    server.assert_no_violations();

    assert_eq!(
        result_files, "README.md\nfast.txt",
        "while S1's worker is held, the result holds S2's work and not S1's"
    );
    assert_eq!(
        events.iter().filter_map(seen).collect::<Vec<_>>(),
        vec![
            Seen::WorkerFinished(SubtaskId(2)),
            Seen::SubtaskFinished(SubtaskId(2), SubtaskOutcome::Merged),
            Seen::WorkerFinished(SubtaskId(1)),
            Seen::SubtaskFinished(SubtaskId(1), SubtaskOutcome::Merged),
        ],
        "S2 is merged and over before S1's worker finishes: no merge waits for a neighbour"
    );
    assert_eq!(
        report
            .subtasks
            .iter()
            .map(|subtask| (subtask.id, subtask.status))
            .collect::<Vec<_>>(),
        vec![
            (SubtaskId(1), SubtaskOutcome::Merged),
            (SubtaskId(2), SubtaskOutcome::Merged)
        ],
        "both merge in the end"
    );
}
