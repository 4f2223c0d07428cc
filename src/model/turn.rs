//! The time bounds of one model turn and the notices a client gives while it waits:
//! how long to wait for the first byte of an answer, for the next event of a stream,
//! and for the whole turn with its retries; and "still waiting" heartbeats so a slow or
//! silent API is never silent to the user.
//!
//! This module owns the turn deadline and the heartbeat timing. It never decides what
//! is retried (that is [`RetryPolicy`]) and never prints: notices go to the caller's
//! callback.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::retry::RetryPolicy;
use super::{ModelError, RetryNotice};

/// Default wait for the first byte of an answer: the response headers of a stream,
/// the whole body otherwise. Local servers may send headers only after processing a
/// long prompt, so this is minutes, not seconds; the wait is shown while it lasts.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(180);
/// Default longest gap between two events of a stream.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default bound of a whole turn: every attempt and every wait between them. A stream
/// that keeps dripping keep-alives never reaches the idle timeout; this ends it.
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default interval of "still waiting" notices.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(15);

/// The environment variables that override the default time bounds (seconds, may be
/// fractional), read by `AnthropicConfig::from_env` and `OpenAiConfig::from_env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutEnv {
    /// `GROVE_MODEL_FIRST_BYTE_TIMEOUT_S`.
    FirstByte,
    /// `GROVE_MODEL_IDLE_TIMEOUT_S`.
    Idle,
    /// `GROVE_MODEL_TURN_TIMEOUT_S`.
    Turn,
    /// `GROVE_MODEL_HEARTBEAT_S`: how often a long wait is shown.
    Heartbeat,
}

impl TimeoutEnv {
    /// The variable's name.
    pub fn name(self) -> &'static str {
        match self {
            TimeoutEnv::FirstByte => "GROVE_MODEL_FIRST_BYTE_TIMEOUT_S",
            TimeoutEnv::Idle => "GROVE_MODEL_IDLE_TIMEOUT_S",
            TimeoutEnv::Turn => "GROVE_MODEL_TURN_TIMEOUT_S",
            TimeoutEnv::Heartbeat => "GROVE_MODEL_HEARTBEAT_S",
        }
    }

    /// The variable's value from `lookup`, or `default` when unset or empty; a value
    /// that is not a positive number of seconds is a [`ModelError::Config`].
    pub fn read(
        self,
        lookup: &dyn Fn(&str) -> Option<String>,
        default: Duration,
    ) -> Result<Duration, ModelError> {
        let Some(text) = lookup(self.name()).filter(|text| !text.trim().is_empty()) else {
            return Ok(default);
        };
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|seconds| seconds.is_finite() && *seconds > 0.0 && *seconds < 1e9)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                ModelError::Config(format!(
                    "{} must be a positive number of seconds, got {text:?}",
                    self.name()
                ))
            })
    }
}

/// The time bounds a client reads from the environment.
#[derive(Debug, Clone, Copy)]
pub(super) struct EnvTimeouts {
    pub first_byte: Duration,
    pub idle: Duration,
    pub turn: Duration,
    pub heartbeat: Duration,
}

impl EnvTimeouts {
    /// Every [`TimeoutEnv`] variable from `lookup`, defaults where unset.
    pub(super) fn read(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Self, ModelError> {
        Ok(Self {
            first_byte: TimeoutEnv::FirstByte.read(lookup, DEFAULT_FIRST_BYTE_TIMEOUT)?,
            idle: TimeoutEnv::Idle.read(lookup, DEFAULT_IDLE_TIMEOUT)?,
            turn: TimeoutEnv::Turn.read(lookup, DEFAULT_TURN_TIMEOUT)?,
            heartbeat: TimeoutEnv::Heartbeat.read(lookup, DEFAULT_HEARTBEAT)?,
        })
    }
}

/// What a client was waiting for when it gave a [`WaitNotice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPhase {
    /// The first byte of an answer (the response headers).
    FirstByte,
    /// The next event of a stream that has started.
    StreamEvent,
}

impl WaitPhase {
    /// `the first byte of the answer` / `the next stream event`.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitPhase::FirstByte => "the first byte of the answer",
            WaitPhase::StreamEvent => "the next stream event",
        }
    }
}

/// The client has been waiting a while; sent every heartbeat interval while it does.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitNotice {
    /// 1 for the first attempt.
    pub attempt: u32,
    /// How many attempts the retry policy allows in all.
    pub attempts: u32,
    /// How long this wait has lasted.
    pub waited: Duration,
    pub phase: WaitPhase,
}

/// What a client tells its caller while a turn is under way.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelNotice {
    /// Still waiting for the API.
    Waiting(WaitNotice),
    /// An attempt failed retryably; the next starts after the notice's delay.
    Retry(RetryNotice),
}

/// One attempt's view of the turn: which attempt it is and where its waits are told.
#[derive(Clone, Copy)]
pub(super) struct Progress<'a> {
    notify: &'a (dyn Fn(ModelNotice) + Send + Sync),
    attempt: u32,
    attempts: u32,
    heartbeat: Duration,
}

impl Progress<'_> {
    /// Awaits `future` for at most `limit`, giving a [`WaitNotice`] every heartbeat;
    /// `None` when the limit passed first.
    pub(super) async fn wait<F: Future>(
        &self,
        future: F,
        limit: Duration,
        phase: WaitPhase,
    ) -> Option<F::Output> {
        self.wait_since(future, limit, phase, Instant::now()).await
    }

    /// [`wait`](Self::wait), the notices counting the wait from `since` (the last thing
    /// worth telling: a stream's keep-alives end no wait a person sees), the limit from
    /// now.
    pub(super) async fn wait_since<F: Future>(
        &self,
        future: F,
        limit: Duration,
        phase: WaitPhase,
        since: Instant,
    ) -> Option<F::Output> {
        let started = since;
        let deadline = Instant::now().checked_add(limit);
        tokio::pin!(future);
        // The next notice is the first heartbeat after now, however long ago `since` is.
        let elapsed_beats = if self.heartbeat.is_zero() {
            0
        } else {
            started.elapsed().as_nanos() / self.heartbeat.as_nanos()
        };
        let mut beats: u32 = u32::try_from(elapsed_beats)
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        loop {
            let beat = (!self.heartbeat.is_zero())
                .then(|| started.checked_add(self.heartbeat.saturating_mul(beats)))
                .flatten();
            let wake = match (beat, deadline) {
                (Some(beat), Some(deadline)) => Some(beat.min(deadline)),
                (one, other) => one.or(other),
            };
            let Some(wake) = wake else {
                return Some(future.await);
            };
            tokio::select! {
                biased;
                output = &mut future => return Some(output),
                () = tokio::time::sleep_until(wake) => {}
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return None;
            }
            beats = beats.saturating_add(1);
            (self.notify)(ModelNotice::Waiting(WaitNotice {
                attempt: self.attempt,
                attempts: self.attempts,
                waited: started.elapsed(),
                phase,
            }));
        }
    }
}

/// Runs one turn: `attempt` under `policy`'s retries, all of it within `turn_timeout`,
/// each attempt told its number and given `heartbeat`-spaced wait notices.
///
/// When the deadline passes the attempt in flight is dropped and the result is
/// [`ModelError::TurnTimeout`] (never retried), naming the attempt and the last failure.
pub(super) async fn run<'a, T, F, Fut>(
    policy: &RetryPolicy,
    turn_timeout: Duration,
    heartbeat: Duration,
    cancel: &CancellationToken,
    on_notice: &'a (dyn Fn(ModelNotice) + Send + Sync),
    mut attempt: F,
) -> Result<T, ModelError>
where
    F: FnMut(Progress<'a>) -> Fut,
    Fut: Future<Output = Result<T, ModelError>>,
{
    let attempts = policy.max_retries.saturating_add(1);
    let current = AtomicU32::new(1);
    let last_failure: Mutex<Option<String>> = Mutex::new(None);
    let on_retry = |notice: RetryNotice| {
        current.store(notice.attempt.saturating_add(1), Ordering::Relaxed);
        *last_failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(notice.reason.clone());
        on_notice(ModelNotice::Retry(notice));
    };
    let turn = policy.run(cancel, &on_retry, |number| {
        attempt(Progress {
            notify: on_notice,
            attempt: number,
            attempts,
            heartbeat,
        })
    });
    match tokio::time::timeout(turn_timeout, turn).await {
        Ok(result) => result,
        Err(_) => Err(ModelError::TurnTimeout {
            after: turn_timeout,
            attempt: current.load(Ordering::Relaxed),
            attempts,
            last_failure: last_failure
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_from_the_environment_or_fall_back() {
        let lookup = |name: &str| match name {
            "GROVE_MODEL_IDLE_TIMEOUT_S" => Some("2.5".to_owned()),
            "GROVE_MODEL_TURN_TIMEOUT_S" => Some("soon".to_owned()),
            "GROVE_MODEL_FIRST_BYTE_TIMEOUT_S" => Some("  ".to_owned()),
            _ => None,
        };
        assert_eq!(
            TimeoutEnv::Idle
                .read(&lookup, DEFAULT_IDLE_TIMEOUT)
                .unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(
            TimeoutEnv::FirstByte
                .read(&lookup, DEFAULT_FIRST_BYTE_TIMEOUT)
                .unwrap(),
            DEFAULT_FIRST_BYTE_TIMEOUT,
            "an empty value is the default"
        );
        let err = TimeoutEnv::Turn
            .read(&lookup, DEFAULT_TURN_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(err.contains("GROVE_MODEL_TURN_TIMEOUT_S"), "{err}");
        for bad in ["0", "-3", "inf", "NaN"] {
            let lookup = |_: &str| Some(bad.to_owned());
            assert!(
                TimeoutEnv::Idle
                    .read(&lookup, DEFAULT_IDLE_TIMEOUT)
                    .is_err(),
                "{bad} is refused"
            );
        }
    }

    #[tokio::test]
    async fn a_long_wait_gives_notices_every_heartbeat_then_times_out() {
        let notices = Mutex::new(Vec::new());
        let notify = |notice: ModelNotice| notices.lock().unwrap().push(notice);
        let heartbeat = Duration::from_millis(20);
        let progress = Progress {
            notify: &notify,
            attempt: 2,
            attempts: 7,
            heartbeat,
        };
        let outcome = progress
            .wait(
                std::future::pending::<()>(),
                Duration::from_millis(150),
                WaitPhase::FirstByte,
            )
            .await;
        assert_eq!(outcome, None, "the limit ends the wait");
        let notices = notices.lock().unwrap().clone();
        assert!(!notices.is_empty(), "a wait of 7 heartbeats is reported");
        for (index, notice) in notices.iter().enumerate() {
            let ModelNotice::Waiting(wait) = notice else {
                panic!("only waits are reported here: {notice:?}");
            };
            assert_eq!(
                (wait.attempt, wait.attempts, wait.phase),
                (2, 7, WaitPhase::FirstByte),
                "each notice names the attempt"
            );
            let beats = u32::try_from(index).unwrap() + 1;
            assert!(
                wait.waited >= heartbeat * beats,
                "notice {beats} comes no earlier than {beats} heartbeats: {wait:?}"
            );
        }
        let answered = progress
            .wait(
                async { 5 },
                Duration::from_millis(150),
                WaitPhase::FirstByte,
            )
            .await;
        assert_eq!(answered, Some(5), "an answer in time is handed back");
    }
}
