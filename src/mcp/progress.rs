//! A run's events on their way out of the server: every one to the log sink, and each
//! subtask's start and end to the client as an MCP progress notification.
//!
//! This file owns which events become progress and how they read. It must never hold
//! a run up: a client that stopped listening loses notifications, the run goes on.

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::event::{Event, EventSink};
use crate::text::first_line;

/// Where progress goes: the client and the token of its request.
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

/// Forwards `events` until the run drops its sink; returns how many progress
/// notifications were sent.
pub async fn forward(
    mut events: UnboundedReceiver<Event>,
    log: EventSink,
    progress: Option<Progress>,
) -> u32 {
    let mut sent = 0;
    while let Some(event) = events.recv().await {
        let message = progress_message(&event);
        log.emit(event);
        if let (Some(message), Some(progress)) = (message, &progress) {
            // The count only grows, as the protocol wants; there is no total, since the
            // lead decides as it goes how many subtasks there are.
            sent += 1;
            let param = ProgressNotificationParam::new(progress.token.clone(), f64::from(sent))
                .with_message(message);
            if progress.peer.notify_progress(param).await.is_err() {
                sent -= 1;
            }
        }
    }
    sent
}

/// The progress line of `event`, for the events that are a subtask's start or end.
pub fn progress_message(event: &Event) -> Option<String> {
    match event {
        // First of all: a client that gives up on the call (its tool timeout) still
        // has the id to resume the run with.
        Event::RunStarted {
            run_id,
            resumed: false,
        } => Some(format!(
            "Run {run_id} started; if this call ends before it does, the run stays \
             resumable: `resume` with run_id {run_id}"
        )),
        Event::RunStarted {
            run_id,
            resumed: true,
        } => Some(format!("Run {run_id} resumed")),
        Event::SubtaskStarted { label, task, .. } => {
            Some(format!("{label} started: {}", first_line(task, 120)))
        }
        Event::SubtaskFinished {
            label,
            status,
            verdict,
            diffstat,
        } => {
            let details: Vec<String> = [
                verdict
                    .as_ref()
                    .map(|verdict| format!("reviewer: {verdict}")),
                diffstat.clone(),
            ]
            .into_iter()
            .flatten()
            .collect();
            Some(if details.is_empty() {
                format!("{label} {status}")
            } else {
                format!("{label} {status} ({})", details.join("; "))
            })
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::status::{SubtaskOutcome, VerdictKind};

    #[test]
    fn the_run_id_then_subtask_starts_and_ends_read_as_one_line_each_and_other_events_are_not() {
        let started = Event::SubtaskStarted {
            label: crate::status::SubtaskId(1),
            task: "WRITE a.txt good\nmore detail".into(),
            branch: "grove/r/1".into(),
        };
        let finished = Event::SubtaskFinished {
            label: crate::status::SubtaskId(1),
            status: SubtaskOutcome::Merged,
            verdict: Some(VerdictKind::Approve),
            diffstat: Some("1 file changed, 1 insertion(+)".into()),
        };
        let failed = Event::SubtaskFinished {
            label: crate::status::SubtaskId(2),
            status: SubtaskOutcome::Failed,
            verdict: None,
            diffstat: None,
        };
        let note = Event::Note {
            message: "hello".into(),
        };
        let run = Event::RunStarted {
            run_id: crate::git::RunId::new("r-1").unwrap(),
            resumed: false,
        };
        assert_eq!(
            [&run, &started, &finished, &failed, &note].map(progress_message),
            [
                Some(
                    "Run r-1 started; if this call ends before it does, the run stays \
                     resumable: `resume` with run_id r-1"
                        .to_owned()
                ),
                Some("S1 started: WRITE a.txt good".to_owned()),
                Some("S1 merged (reviewer: approve; 1 file changed, 1 insertion(+))".to_owned()),
                Some("S2 failed".to_owned()),
                None,
            ]
        );
    }
}
