//! The lead's results as they settle: a `delegate` call returns once its subtask is
//! accepted, and each subtask's result waits here, in the order the subtasks settled,
//! until the lead's `wait` (or, when the lead ends with results it has not heard, the run
//! itself) takes it.
//!
//! This file owns that order and the wait. It must never hand a result out twice, and
//! never let a wait hang when nothing is left to settle.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::run::context::lock;
use crate::run::delegate::{DelegateError, DelegateReport};
use crate::run::id::SubtaskId;

/// One subtask's end, as the lead is to hear it.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) id: SubtaskId,
    pub(crate) result: Result<DelegateReport, DelegateError>,
}

/// How much a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    /// At least one result (every one settled by then comes with it).
    Next,
    /// Every subtask still running to settle.
    All,
}

/// What a wait took.
#[derive(Debug)]
pub(crate) struct Taken {
    /// In the order they settled.
    pub(crate) settled: Vec<Settled>,
    /// What still runs, in subtask order.
    pub(crate) running: Vec<SubtaskId>,
}

/// The results of a run's delegated subtasks not yet handed to the lead.
#[derive(Debug)]
pub(crate) struct Inbox {
    state: Mutex<State>,
    /// Bumped on every change, so that a waiter wakes and looks again.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    running: BTreeSet<SubtaskId>,
    ready: Vec<Settled>,
}

impl Default for Inbox {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
        }
    }
}

impl Inbox {
    /// Subtask `id` was accepted: its result is to come.
    pub(crate) fn expect(&self, id: SubtaskId) {
        lock(&self.state).running.insert(id);
        self.bump();
    }

    /// Subtask `id` settled with `result`.
    pub(crate) fn settle(&self, id: SubtaskId, result: Result<DelegateReport, DelegateError>) {
        {
            let mut state = lock(&self.state);
            state.running.remove(&id);
            state.ready.push(Settled { id, result });
        }
        self.bump();
    }

    fn bump(&self) {
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// Whether a result is ready or a subtask still runs: the lead has something to hear.
    pub(crate) fn has_news(&self) -> bool {
        let state = lock(&self.state);
        !state.ready.is_empty() || !state.running.is_empty()
    }

    /// Waits for what `wanted` asks, then takes every result ready; `None` when `cancel`
    /// fired first. With nothing running and nothing ready, returns at once, empty.
    pub(crate) async fn take(&self, wanted: Wanted, cancel: &CancellationToken) -> Option<Taken> {
        let mut changes = self.changed.subscribe();
        loop {
            {
                let mut state = lock(&self.state);
                let enough = match wanted {
                    Wanted::Next => !state.ready.is_empty() || state.running.is_empty(),
                    Wanted::All => state.running.is_empty(),
                };
                if enough {
                    return Some(Taken {
                        settled: std::mem::take(&mut state.ready),
                        running: state.running.iter().copied().collect(),
                    });
                }
            }
            tokio::select! {
                changed = changes.changed() => {
                    // The sender lives as long as `self`: this cannot fail while we wait.
                    if changed.is_err() {
                        return None;
                    }
                }
                () = cancel.cancelled() => return None,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn report(text: &str) -> Result<DelegateReport, DelegateError> {
        Ok(DelegateReport { text: text.into() })
    }

    fn ids(taken: &Taken) -> (Vec<SubtaskId>, Vec<SubtaskId>) {
        (
            taken.settled.iter().map(|s| s.id).collect(),
            taken.running.clone(),
        )
    }

    #[tokio::test]
    async fn a_wait_returns_the_first_result_while_others_run_and_all_waits_for_the_rest() {
        let inbox = Arc::new(Inbox::default());
        let cancel = CancellationToken::new();
        for n in 1..=3 {
            inbox.expect(SubtaskId(n));
        }
        let waiting = {
            let (inbox, cancel) = (Arc::clone(&inbox), cancel.clone());
            tokio::spawn(async move { inbox.take(Wanted::Next, &cancel).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "nothing settled yet: the wait waits"
        );
        inbox.settle(SubtaskId(2), report("S2 rejected"));
        let first = waiting.await.unwrap().unwrap();
        assert_eq!(
            ids(&first),
            (vec![SubtaskId(2)], vec![SubtaskId(1), SubtaskId(3)]),
            "the first settled result comes at once, the others still running"
        );
        inbox.settle(SubtaskId(3), report("S3 merged"));
        let all = {
            let (inbox, cancel) = (Arc::clone(&inbox), cancel.clone());
            tokio::spawn(async move { inbox.take(Wanted::All, &cancel).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!all.is_finished(), "S1 still runs: waiting for all waits");
        inbox.settle(SubtaskId(1), report("S1 merged"));
        assert_eq!(
            ids(&all.await.unwrap().unwrap()),
            (vec![SubtaskId(3), SubtaskId(1)], vec![]),
            "the rest come together, in the order they settled"
        );
        let nothing = inbox.take(Wanted::Next, &cancel).await.unwrap();
        assert_eq!(
            ids(&nothing),
            (vec![], vec![]),
            "with nothing running a wait never hangs"
        );
        assert!(!inbox.has_news());
    }

    #[tokio::test]
    async fn a_cancelled_wait_takes_nothing() {
        let inbox = Inbox::default();
        inbox.expect(SubtaskId(1));
        let cancel = CancellationToken::new();
        cancel.cancel();
        assert!(inbox.take(Wanted::Next, &cancel).await.is_none());
        assert!(inbox.has_news(), "S1's result is still to come");
    }
}
