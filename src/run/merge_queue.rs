//! The merge queue: subtask numbers in delegation order, and approved work merged one
//! batch at a time, as soon as it is approved.
//!
//! This file owns the numbering of subtasks, who is settled (will merge nothing any
//! more), the merge turn, and when worktree cleanups run. Merges are serialized (one
//! holder of the merge turn at a time) but never ordered by delegation: an approved
//! subtask merges the moment the turn is free, whatever its neighbours are doing, so that
//! nothing that waits on it (an `after`, the lead's next turn, the live view) waits on a
//! slower subtask it does not name (issue 43). It must never let a subtask stay unsettled
//! once its pipeline ended (the [`SettleGuard`] settles on every path, a panic included).
//!
//! An approved subtask offers its merge here, then waits for the merge turn; the one that
//! gets the turn takes every offer waiting (in number order) and merges them with its own
//! in one batch (`subtask/integrate.rs`), then tells each what came of it, so that reviews
//! ending together move the result ref once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, MutexGuard as AsyncMutexGuard};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, oneshot};
use tokio_util::sync::CancellationToken;

use crate::git::{BatchItem, MergeOutcome};
use crate::run::id::SubtaskId;

/// The longest a finished subtask's worktree cleanup waits for the others to settle.
const CLEANUP_HOLD: Duration = Duration::from_secs(30);

/// Numbers the subtasks of one run and serializes their merges.
#[derive(Debug)]
pub(crate) struct MergeQueue {
    next: AtomicU32,
    settled: Mutex<BTreeSet<u32>>,
    /// Approved merges waiting for the merge turn, for the batch of whoever gets it.
    offers: Mutex<BTreeMap<u32, Offer>>,
    /// Held while the result ref is written; fair, so the first to ask merges first.
    merging: AsyncMutex<()>,
    changed: Notify,
    cancel: CancellationToken,
    /// Worktree cleanups run once the merges are done, right when the lead's next request
    /// goes out, and 32 of them at once took both cores from it: they get half the cores.
    cleanups: Semaphore,
}

impl MergeQueue {
    /// A queue whose first subtask is `S1`; waits end when `cancel` fires.
    pub(crate) fn new(cancel: CancellationToken) -> Self {
        Self {
            next: AtomicU32::new(1),
            settled: Mutex::new(BTreeSet::new()),
            offers: Mutex::new(BTreeMap::new()),
            merging: AsyncMutex::new(()),
            changed: Notify::new(),
            cancel,
            cleanups: Semaphore::new(
                std::thread::available_parallelism().map_or(1, |cores| (cores.get() / 2).max(1)),
            ),
        }
    }

    /// The next subtask's id. Taken before anything awaits, so ids follow call order.
    pub(crate) fn next_id(&self) -> SubtaskId {
        SubtaskId(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The id the next subtask would get, without taking it.
    pub(crate) fn peek_next(&self) -> SubtaskId {
        SubtaskId(self.next.load(Ordering::Relaxed))
    }

    /// A resumed run continues numbering after `highest`, and every number up to it that
    /// is not `continuing` is settled: it never started a subtask (refused, or lost in a
    /// crash before the journal had it) or it has finished.
    pub(crate) fn resume_after(&self, highest: SubtaskId, continuing: &[SubtaskId]) {
        self.next.store(highest.0 + 1, Ordering::Relaxed);
        for k in 1..=highest.0 {
            if !continuing.contains(&SubtaskId(k)) {
                self.settle(SubtaskId(k));
            }
        }
    }

    /// Marks `id` as settled: it will not merge anything (any more).
    pub(crate) fn settle(&self, id: SubtaskId) {
        self.lock().insert(id.0);
        self.changed.notify_waiters();
    }

    /// True once `id` is settled.
    pub(crate) fn is_settled(&self, id: SubtaskId) -> bool {
        self.lock().contains(&id.0)
    }

    /// Waits until every subtask in `ids` is settled; `false` when the run was
    /// interrupted meanwhile.
    pub(crate) async fn wait_settled(&self, ids: &[SubtaskId]) -> bool {
        self.wait_until(|settled| ids.iter().all(|id| settled.contains(&id.0)))
            .await
    }

    /// A guard that settles `id` when dropped, however its pipeline ends.
    pub(crate) fn guard(self: &Arc<Self>, id: SubtaskId) -> SettleGuard {
        SettleGuard {
            queue: Arc::clone(self),
            id,
        }
    }

    /// The merge turn: the right to write the run's result ref, once whoever holds it is
    /// done; `None` when the run was interrupted meanwhile.
    pub(crate) async fn merge_turn(&self) -> Option<AsyncMutexGuard<'_, ()>> {
        tokio::select! {
            turn = self.merging.lock() => Some(turn),
            () = self.cancel.cancelled() => None,
        }
    }

    /// Offers subtask `id`'s merge to the batch of whoever gets the merge turn first; the
    /// receiver hears what that batch did with it.
    pub(crate) fn offer(&self, id: SubtaskId, item: BatchItem) -> oneshot::Receiver<Batched> {
        let (reply, heard) = oneshot::channel();
        lock(&self.offers).insert(id.0, Offer { item, reply });
        heard
    }

    /// Takes back subtask `id`'s offer; `None` when a batch has taken it (and will
    /// answer).
    pub(crate) fn withdraw(&self, id: SubtaskId) -> Option<BatchItem> {
        lock(&self.offers).remove(&id.0).map(|offer| offer.item)
    }

    /// True while subtask `id`'s offer waits (tests).
    #[cfg(test)]
    pub(crate) fn offered(&self, id: SubtaskId) -> bool {
        lock(&self.offers).contains_key(&id.0)
    }

    /// Every offer waiting, in number order: the holder of the merge turn merges them
    /// right after its own.
    pub(crate) fn take_offers(&self) -> Vec<Follower> {
        std::mem::take(&mut *lock(&self.offers))
            .into_iter()
            .map(|(number, offer)| Follower {
                id: SubtaskId(number),
                item: offer.item,
                reply: offer.reply,
            })
            .collect()
    }

    /// A worktree cleanup's turn: once every subtask numbered so far is settled (or the
    /// run is cancelled, or a while has passed), so that cleanups do not compete with the
    /// merges the lead is waiting for, and then as many at once as half the cores (the
    /// permit), so that they leave the rest to the lead and the subtasks still working.
    pub(crate) async fn cleanup_turn(&self) -> Option<SemaphorePermit<'_>> {
        let wait = self.wait_until(|settled| {
            let numbered = self.next.load(Ordering::Relaxed);
            (1..numbered).all(|k| settled.contains(&k))
        });
        // A cleanup is never held back for long, whatever happens to the other subtasks.
        let _ = tokio::time::timeout(CLEANUP_HOLD, wait).await;
        // The semaphore is never closed; without a permit the cleanup just runs.
        self.cleanups.acquire().await.ok()
    }

    async fn wait_until(&self, done: impl Fn(&BTreeSet<u32>) -> bool) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a settle between check and wait is seen.
            notified.as_mut().enable();
            if done(&self.lock()) {
                return true;
            }
            tokio::select! {
                () = notified => {}
                () = self.cancel.cancelled() => return false,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<u32>> {
        lock(&self.settled)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An approved merge offered while its subtask waits for the merge turn.
#[derive(Debug)]
struct Offer {
    item: BatchItem,
    reply: oneshot::Sender<Batched>,
}

/// A subtask whose offer a batch took: the batch answers it through `reply`.
#[derive(Debug)]
pub(crate) struct Follower {
    pub(crate) id: SubtaskId,
    pub(crate) item: BatchItem,
    pub(crate) reply: oneshot::Sender<Batched>,
}

/// What a subtask whose merge was offered hears from the batch that took it.
#[derive(Debug)]
pub(crate) enum Batched {
    /// Its merge is done and journaled.
    Merged(MergeOutcome),
    /// The batch left it out: it offers again and waits for the merge turn.
    LeftOut,
}

/// Settles its subtask when dropped, so that nothing waiting on it (an `after`, a
/// cleanup) waits forever.
#[derive(Debug)]
pub(crate) struct SettleGuard {
    queue: Arc<MergeQueue>,
    id: SubtaskId,
}

impl Drop for SettleGuard {
    fn drop(&mut self) {
        self.queue.settle(self.id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_merge_turn_is_free_whatever_the_lower_subtasks_do_and_taken_by_one_at_a_time() {
        let queue = Arc::new(MergeQueue::new(CancellationToken::new()));
        let (_s1, _s2) = (queue.next_id(), queue.next_id());
        let held = queue
            .merge_turn()
            .await
            .expect("S2 gets the merge turn while S1, unsettled, still works");
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.merge_turn().await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one merge at a time");
        drop(held);
        assert!(
            waiting.await.unwrap_or(false),
            "the next merge gets the turn once the first is done"
        );
    }

    #[tokio::test]
    async fn an_interrupt_ends_the_wait_without_a_turn() {
        let cancel = CancellationToken::new();
        let queue = MergeQueue::new(cancel.clone());
        let _held = queue.merge_turn().await;
        cancel.cancel();
        assert!(
            queue.merge_turn().await.is_none(),
            "no turn after an interrupt"
        );
    }

    #[test]
    fn every_waiting_offer_is_taken_in_number_order() {
        let queue = MergeQueue::new(CancellationToken::new());
        let item = |n: u8| BatchItem {
            commit: crate::git::CommitId::parse(&format!("{n}").repeat(40))
                .expect("forty hex digits"),
            message: format!("merge S{n}"),
        };
        let _heard = [
            queue.offer(SubtaskId(5), item(5)),
            queue.offer(SubtaskId(2), item(2)),
        ];
        let taken: Vec<(SubtaskId, String)> = queue
            .take_offers()
            .into_iter()
            .map(|follower| (follower.id, follower.item.message))
            .collect();
        assert_eq!(
            taken,
            vec![
                (SubtaskId(2), "merge S2".to_owned()),
                (SubtaskId(5), "merge S5".to_owned())
            ],
            "the batch takes every offer, lowest number first, whatever came first"
        );
        assert!(!queue.offered(SubtaskId(2)), "a taken offer is gone");
    }

    #[test]
    fn a_resumed_queue_settles_what_is_not_continuing_and_numbers_after_it() {
        let queue = MergeQueue::new(CancellationToken::new());
        queue.resume_after(SubtaskId(3), &[SubtaskId(2)]);
        assert_eq!(queue.peek_next(), SubtaskId(4));
        assert_eq!(
            queue.lock().iter().copied().collect::<Vec<_>>(),
            vec![1, 3],
            "only the continuing S2 is unsettled"
        );
    }
}
