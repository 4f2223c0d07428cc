//! The prompt cache as grove steers it: what a request says about its cache (its group's
//! key, whether its conversation is about to wait long), which time-to-live a breakpoint
//! asks for, and the sibling hold.
//!
//! A provider writes a prompt-cache entry only once the response to the request that
//! wrote it has begun: N subagents of one role started at the same instant, all with the
//! same tools and system prompt, would each pay the write. The [`SiblingHold`] lets the
//! first request of a group go and holds the others until its response has begun (the
//! first event of a stream, the whole body otherwise), never longer than its bound, so
//! that they read what the first wrote. A first request that fails releases the others
//! at once: one of them goes first in its place.
//!
//! This module owns those decisions and nothing of the wire: the wire formats write
//! them (Anthropic's as `cache_control.ttl`, OpenAI's as `prompt_cache_key`). It never
//! sleeps longer than a hold's bound and never prints.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Request;

/// What a request tells the client about its cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheHints {
    /// The group whose requests share a prefix: one role of one run
    /// (`grove-<run>-<role>`). The OpenAI-compatible wire sends it as
    /// `prompt_cache_key`; the sibling hold keys on it and the prefix. `None`: no group
    /// (no hold, no key).
    pub key: Option<String>,
    /// The conversation waits on subtasks after a turn (the lead): the wait may outlive
    /// a 5-minute entry, so its breakpoints ask for the 1-hour TTL when that pays (see
    /// [`CacheRates::one_hour_pays`]).
    pub long_wait: bool,
}

impl CacheHints {
    /// The group key of `role` in run `run`.
    pub fn group(run: &str, role: &str) -> String {
        format!("grove-{run}-{role}")
    }
}

/// How long a prompt-cache entry lives unless it is read again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CacheTtl {
    /// The provider's default (Anthropic: 5 minutes, refreshed by every read).
    #[default]
    FiveMinutes,
    /// Anthropic's `"ttl": "1h"`.
    OneHour,
}

impl CacheTtl {
    /// The TTL of a request with `hints` on a client that allows the 1-hour TTL when
    /// `one_hour` is true.
    pub fn choose(hints: &CacheHints, one_hour: bool) -> CacheTtl {
        if hints.long_wait && one_hour {
            CacheTtl::OneHour
        } else {
            CacheTtl::FiveMinutes
        }
    }

    pub fn duration(self) -> Duration {
        match self {
            CacheTtl::FiveMinutes => Duration::from_secs(5 * 60),
            CacheTtl::OneHour => Duration::from_secs(60 * 60),
        }
    }
}

/// Cache prices as multiples of (or in the same unit as) the input price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheRates {
    /// A write that lives 5 minutes.
    pub write_5m: f64,
    /// A write that lives 1 hour.
    pub write_1h: f64,
    pub read: f64,
}

impl CacheRates {
    /// Anthropic's multipliers of the input price, the same for every model: a 5-minute
    /// write 1.25x, a 1-hour write 2x, a read 0.1x.
    pub const ANTHROPIC: CacheRates = CacheRates {
        write_5m: 1.25,
        write_1h: 2.0,
        read: 0.1,
    };

    /// Whether a conversation that will wait longer than 5 minutes before its next turn
    /// should write at 1 hour: writing a prefix once at 1 hour and reading it after the
    /// wait must cost less than writing it at 5 minutes and, the entry gone, writing it
    /// again. Anthropic's rates: 2 + 0.1 < 1.25 + 1.25, so it pays with a single wait.
    pub fn one_hour_pays(&self) -> bool {
        self.write_1h + self.read < 2.0 * self.write_5m
    }
}

/// A hash of what siblings share: the model, the system prompt and the tools (in the
/// order the wire sorts them, by name). Requests with equal hashes and one group key
/// are siblings.
pub(crate) fn prefix_hash(request: &Request) -> u64 {
    let mut tools: Vec<_> = request.tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    request.model.hash(&mut hasher);
    request.system.hash(&mut hasher);
    for tool in tools {
        tool.name.hash(&mut hasher);
        tool.description.hash(&mut hasher);
        tool.input_schema.to_string().hash(&mut hasher);
    }
    hasher.finish()
}

/// How long a group counts as written after its first response began: later siblings
/// go at once. The provider's shortest TTL; past it the next request leads again.
const WARM_FOR: Duration = Duration::from_secs(5 * 60);

/// Where one group stands.
enum Group {
    /// Its first request is in flight; waiters watch the receiver, which changes (its
    /// sender dropped) once that request's response began or it failed.
    Pending(watch::Receiver<()>),
    /// Its first response began at a moment until which it counts as written.
    Warm(Instant),
}

type GroupKey = (String, u64);

/// The sibling hold of one client: see the module documentation.
#[derive(Default)]
pub(crate) struct SiblingHold {
    groups: Arc<Mutex<HashMap<GroupKey, Group>>>,
}

impl std::fmt::Debug for SiblingHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiblingHold").finish_non_exhaustive()
    }
}

/// What [`SiblingHold::enter`] gave a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// The first of its group: the others wait for its [`Ticket::began`].
    Leader,
    /// Its group's first response had begun (perhaps while it waited).
    Warm,
    /// It waited its whole bound: it goes anyway.
    BoundPassed,
}

/// A request's place in its group; a leader's ticket releases the others when its
/// response begins ([`Ticket::began`]) or, failing, when it is dropped or
/// [`released`](Ticket::release).
pub(crate) struct Ticket {
    pub(crate) entry: Entry,
    lead: Mutex<Option<Lead>>,
}

struct Lead {
    groups: Arc<Mutex<HashMap<GroupKey, Group>>>,
    key: GroupKey,
    /// Dropped to wake the waiters.
    _sender: watch::Sender<()>,
}

impl Ticket {
    fn free(entry: Entry) -> Self {
        Self {
            entry,
            lead: Mutex::new(None),
        }
    }

    /// The response has begun: the entry exists, and the waiters go (warm).
    pub(crate) fn began(&self) {
        self.end(true);
    }

    /// The request failed before its response began: the waiters go, and one of them
    /// leads in its place.
    pub(crate) fn release(&self) {
        self.end(false);
    }

    fn end(&self, began: bool) {
        let lead = self
            .lead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(lead) = lead else {
            return;
        };
        let mut groups = lead.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if began {
            groups.insert(lead.key.clone(), Group::Warm(Instant::now()));
        } else {
            groups.remove(&lead.key);
        }
        drop(groups);
        // `lead` (and its sender) drops here: every waiter wakes.
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.release();
    }
}

impl SiblingHold {
    /// Enters group `key` with prefix `prefix`: at once as its leader, or as a sibling
    /// once the leader's response began (or the leader failed and this request leads
    /// now), or once `bound` passed.
    pub(crate) async fn enter(&self, key: &str, prefix: u64, bound: Duration) -> Ticket {
        let key: GroupKey = (key.to_owned(), prefix);
        let deadline = Instant::now() + bound;
        loop {
            let mut receiver = {
                let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
                match groups.get(&key) {
                    Some(Group::Warm(at)) if at.elapsed() < WARM_FOR => {
                        return Ticket::free(Entry::Warm);
                    }
                    Some(Group::Pending(receiver)) => receiver.clone(),
                    _ => {
                        let (sender, receiver) = watch::channel(());
                        groups.insert(key.clone(), Group::Pending(receiver));
                        return Ticket {
                            entry: Entry::Leader,
                            lead: Mutex::new(Some(Lead {
                                groups: Arc::clone(&self.groups),
                                key,
                                _sender: sender,
                            })),
                        };
                    }
                }
            };
            // Wakes when the leader's sender drops (began, failed or gone).
            if tokio::time::timeout_at(deadline, receiver.changed())
                .await
                .is_err()
            {
                return Ticket::free(Entry::BoundPassed);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const KEY: &str = "grove-r1-worker";

    #[test]
    fn the_one_hour_ttl_pays_at_anthropics_rates_and_not_when_a_write_costs_too_much() {
        assert!(CacheRates::ANTHROPIC.one_hour_pays());
        let dear = CacheRates {
            write_5m: 1.25,
            write_1h: 2.5,
            read: 0.1,
        };
        assert!(!dear.one_hour_pays(), "2.6 is not less than 2.5");
        let lead = CacheHints {
            key: Some(KEY.into()),
            long_wait: true,
        };
        assert_eq!(CacheTtl::choose(&lead, true), CacheTtl::OneHour);
        assert_eq!(CacheTtl::choose(&lead, false), CacheTtl::FiveMinutes);
        assert_eq!(
            CacheTtl::choose(&CacheHints::default(), true),
            CacheTtl::FiveMinutes,
            "a conversation that does not wait long keeps the 5-minute TTL"
        );
    }

    #[tokio::test]
    async fn siblings_wait_for_the_leaders_response_to_begin() {
        let hold = Arc::new(SiblingHold::default());
        let leader = hold.enter(KEY, 7, Duration::from_secs(60)).await;
        assert_eq!(leader.entry, Entry::Leader);
        let sibling = tokio::spawn({
            let hold = Arc::clone(&hold);
            async move { hold.enter(KEY, 7, Duration::from_secs(60)).await.entry }
        });
        let other_prefix = hold.enter(KEY, 8, Duration::from_secs(60)).await;
        assert_eq!(
            other_prefix.entry,
            Entry::Leader,
            "another prefix is another group: it never waits for this one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !sibling.is_finished(),
            "the sibling waits while the leader is in flight"
        );
        leader.began();
        assert_eq!(sibling.await.unwrap(), Entry::Warm);
        let late = hold.enter(KEY, 7, Duration::from_secs(60)).await;
        assert_eq!(late.entry, Entry::Warm, "a later sibling goes at once");
    }

    #[tokio::test]
    async fn a_failed_leader_releases_its_siblings_and_one_of_them_leads() {
        let hold = Arc::new(SiblingHold::default());
        let leader = hold.enter(KEY, 1, Duration::from_secs(60)).await;
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let hold = Arc::clone(&hold);
                tokio::spawn(async move {
                    let ticket = hold.enter(KEY, 1, Duration::from_secs(60)).await;
                    let entry = ticket.entry;
                    // The new leader's response begins a moment later.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    ticket.began();
                    entry
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(leader);
        let mut entries = Vec::new();
        for waiter in waiters {
            entries.push(
                tokio::time::timeout(Duration::from_secs(10), waiter)
                    .await
                    .expect("a failed leader never keeps its siblings waiting")
                    .unwrap(),
            );
        }
        entries.sort_by_key(|entry| format!("{entry:?}"));
        assert_eq!(
            entries,
            vec![Entry::Leader, Entry::Warm],
            "one sibling leads in the failed one's place, the other reads after it"
        );
    }

    #[tokio::test]
    async fn a_leader_that_never_answers_holds_its_siblings_no_longer_than_the_bound() {
        let hold = SiblingHold::default();
        let _hanging = hold.enter(KEY, 3, Duration::from_secs(60)).await;
        let started = Instant::now();
        let sibling = hold.enter(KEY, 3, Duration::from_millis(100)).await;
        assert_eq!(sibling.entry, Entry::BoundPassed);
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "the sibling waited its bound"
        );
    }
}
