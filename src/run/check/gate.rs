//! The gate every worker waits at until the check is proven on the base.
//!
//! This file owns only the gate's state (and the base's ratchet findings, known before
//! it is decided); `base_check` decides it. It must never open by
//! itself: a gate nobody decides keeps workers waiting until the run stops.

use tokio::sync::watch;

use crate::store::findings::RatchetFinding;

/// What became of the check on the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaseVerdict {
    /// It passed (in this run, or for this base and environment before).
    Passed,
    /// It was not run: no check, or `[check] base = "skip"`.
    NotChecked,
    /// Red, or it could not run, or the run stopped first: workers must not start.
    Closed,
}

/// Whether workers may start: the base's check passed, was skipped, or is not needed.
#[derive(Debug)]
pub(crate) struct BaseGate(watch::Sender<Option<BaseVerdict>>);

impl Default for BaseGate {
    fn default() -> Self {
        Self(watch::channel(None).0)
    }
}

impl BaseGate {
    pub(crate) fn decide(&self, verdict: BaseVerdict) {
        self.0.send_replace(Some(verdict));
    }

    /// Waits until the gate is decided: true when it opened, false when it closed (the
    /// run is then pausing).
    pub(crate) async fn opened(&self) -> bool {
        self.verdict().await != BaseVerdict::Closed
    }

    /// Waits until the gate is decided, and says how.
    pub(crate) async fn verdict(&self) -> BaseVerdict {
        let mut decided = self.0.subscribe();
        match decided.wait_for(Option::is_some).await {
            Ok(verdict) => verdict.unwrap_or(BaseVerdict::Closed),
            Err(_) => BaseVerdict::Closed,
        }
    }
}

/// The base's findings of each `[[check.ratchet]]` (in the order of the config), once
/// known: set before the gate is decided, read by every check that compares a tree.
#[derive(Debug, Default)]
pub(crate) struct BaseFindings(std::sync::OnceLock<Vec<Vec<RatchetFinding>>>);

impl BaseFindings {
    /// Records the base's findings; the first record stands.
    pub(crate) fn set(&self, findings: Vec<Vec<RatchetFinding>>) {
        let _first = self.0.set(findings);
    }

    /// The base's findings, when they are known.
    pub(crate) fn get(&self) -> Option<&[Vec<RatchetFinding>]> {
        self.0.get().map(Vec::as_slice)
    }
}
