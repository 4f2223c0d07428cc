//! The remote hosts a run may place workers on, and the placement by free slots.
//!
//! This file owns which host a tree goes to: the one with the most free slots, waiting
//! when every slot is taken, and never one a worker of this run has just lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::text::shell_quote;

/// One `[remote.NAME]` host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteHost {
    /// Its name in the configuration.
    pub name: String,
    /// The launcher: a command line that, followed by a command, runs that command on
    /// the host with its standard input and output piped back (`ssh build1`, `kubectl
    /// exec -i pod-0 --`, `podman exec -i box`).
    pub launch: String,
    /// The grove binary on the host.
    pub program: String,
    /// Workers it takes at once.
    pub slots: usize,
    /// How long the host may leave a ping unanswered before it counts as lost.
    pub timeout: Duration,
    /// Ship this grove to the host when it has none (`program` not found there).
    pub ship: bool,
}

impl RemoteHost {
    /// The default [`RemoteHost::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// The local shell command that starts the exec-server through the launcher.
    pub fn command_line(&self) -> String {
        format!("{} {} exec-server", self.launch, shell_quote(&self.program))
    }

    /// How long a silent connection is given.
    pub fn silence(&self) -> Duration {
        self.timeout
    }
}

/// The hosts of a run, each with its free slots.
#[derive(Debug, Clone, Default)]
pub struct HostPool {
    hosts: Vec<(RemoteHost, Arc<Semaphore>)>,
}

/// A slot on a host, held while a tree lives there.
#[derive(Debug)]
pub struct Placement {
    pub host: RemoteHost,
    pub slot: OwnedSemaphorePermit,
}

impl HostPool {
    /// A pool of `hosts`.
    pub fn new(hosts: Vec<RemoteHost>) -> Self {
        Self {
            hosts: hosts
                .into_iter()
                .map(|host| {
                    let slots = Arc::new(Semaphore::new(host.slots.max(1)));
                    (host, slots)
                })
                .collect(),
        }
    }

    /// True when the run has no remote host (its workers run here).
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// How many hosts the run has.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// A slot on the host with the most free slots, but `avoid` (a host just lost)
    /// when another is configured; waits for one when all are taken.
    pub async fn place(&self, avoid: Option<&str>) -> Option<Placement> {
        let candidates: Vec<_> = self
            .hosts
            .iter()
            .filter(|(host, _)| Some(host.name.as_str()) != avoid || self.hosts.len() == 1)
            .collect();
        // The most free slots; of equals, the one configured first.
        let best = candidates
            .iter()
            .enumerate()
            .max_by_key(|(index, (_, slots))| {
                (slots.available_permits(), std::cmp::Reverse(*index))
            })
            .map(|(_, best)| best)?;
        if let Ok(slot) = Arc::clone(&best.1).try_acquire_owned() {
            return Some(Placement {
                host: best.0.clone(),
                slot,
            });
        }
        let waits = candidates.iter().map(|(host, slots)| {
            let slots = Arc::clone(slots);
            Box::pin(async move {
                let slot = slots.acquire_owned().await.ok()?;
                Some(Placement {
                    host: host.clone(),
                    slot,
                })
            })
        });
        futures_util::future::select_all(waits).await.0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn host(name: &str, slots: usize) -> RemoteHost {
        RemoteHost {
            name: name.into(),
            launch: format!("ssh {name}"),
            program: "grove".into(),
            slots,
            timeout: RemoteHost::DEFAULT_TIMEOUT,
            ship: true,
        }
    }

    #[tokio::test]
    async fn workers_go_to_the_host_with_most_free_slots_and_avoid_a_lost_one() {
        let pool = HostPool::new(vec![host("a", 1), host("b", 2)]);
        let first = pool.place(None).await.unwrap();
        let second = pool.place(None).await.unwrap();
        let third = pool.place(None).await.unwrap();
        assert_eq!(
            [&first.host.name, &second.host.name, &third.host.name].map(String::as_str),
            ["b", "a", "b"],
            "each worker goes where most slots are free"
        );
        drop((first, second));
        let again = pool.place(Some("b")).await.unwrap();
        assert_eq!(
            again.host.name, "a",
            "a lost host is avoided while another exists"
        );
        assert_eq!(
            host("a", 1).command_line(),
            "ssh a grove exec-server",
            "the exec-server follows the launcher"
        );
    }
}
