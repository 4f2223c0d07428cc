//! The merge queue: subtask numbers in delegation order, and approved work merged in that
//! order whatever the timing.
//!
//! This file owns the numbering of subtasks, who is settled (will merge nothing any
//! more), and when worktree cleanups run. It must never let subtask `n` merge before
//! every lower-numbered subtask is settled, and never let a subtask stay unsettled once
//! its pipeline ended (the [`SettleGuard`] settles on every path, a panic included). A
//! resolver's number is settled when taken: it merges in the turn of the subtask it
//! resolves (`subtask/resolve.rs`).
//!
//! An approved subtask waiting for its turn offers its merge here; the subtask whose turn
//! comes takes the offers that directly follow it (every number between them settled) and
//! merges them with its own in one batch (`subtask/integrate.rs`), then tells each what
//! came of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit, oneshot};
use tokio_util::sync::CancellationToken;

use crate::git::{BatchItem, MergeOutcome};
use crate::run::id::SubtaskId;

/// The longest a finished subtask's worktree cleanup waits for the others to settle.
const CLEANUP_HOLD: Duration = Duration::from_secs(30);

/// Numbers the subtasks of one run and orders their merges.
#[derive(Debug)]
pub(crate) struct MergeQueue {
    next: AtomicU32,
    settled: Mutex<BTreeSet<u32>>,
    /// Approved merges waiting for their turn, for the batch of the one before them.
    offers: Mutex<BTreeMap<u32, Offer>>,
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

    /// Waits until every subtask numbered below `id` is settled; `false` when the run was
    /// interrupted meanwhile.
    pub(crate) async fn wait_for_turn(&self, id: SubtaskId) -> bool {
        self.wait_until(|settled| (1..id.0).all(|k| settled.contains(&k)))
            .await
    }

    /// Offers subtask `id`'s merge to the batch of a subtask before it; the receiver
    /// hears what that batch did with it.
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

    /// The offers that follow `leader`, whose turn it is, in number order up to the first
    /// number neither offered nor settled: each may merge right after the ones before it.
    pub(crate) fn take_followers(&self, leader: SubtaskId) -> Vec<Follower> {
        let settled = self.lock();
        let mut offers = lock(&self.offers);
        let mut followers = Vec::new();
        let mut next = leader.0 + 1;
        loop {
            if let Some(offer) = offers.remove(&next) {
                followers.push(Follower {
                    id: SubtaskId(next),
                    item: offer.item,
                    reply: offer.reply,
                });
            } else if !settled.contains(&next) {
                return followers;
            }
            next += 1;
        }
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

/// An approved merge offered while its subtask waits for its turn.
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
    /// The batch left it out: it offers again and waits for its turn.
    LeftOut,
}

/// Settles its subtask when dropped, so that no later subtask waits forever for its turn.
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
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subtask_merges_only_after_every_lower_one_settled() {
        let queue = Arc::new(MergeQueue::new(CancellationToken::new()));
        let (s1, s2, s3) = (queue.next_id(), queue.next_id(), queue.next_id());
        assert_eq!((s1, s2, s3), (SubtaskId(1), SubtaskId(2), SubtaskId(3)));
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.wait_for_turn(s3).await }
        });
        queue.settle(s2);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "S3 waits while S1 is unsettled");
        drop(queue.guard(s1));
        assert!(
            waiting.await.unwrap_or(false),
            "S3's turn comes once S1 and S2 settled, S1 by its guard"
        );
    }

    #[tokio::test]
    async fn an_interrupt_ends_the_wait_without_a_turn() {
        let cancel = CancellationToken::new();
        let queue = MergeQueue::new(cancel.clone());
        queue.next_id();
        let s2 = queue.next_id();
        cancel.cancel();
        assert!(!queue.wait_for_turn(s2).await, "no turn after an interrupt");
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
