//! The retry policy both model clients share: which failures are tried again, how long
//! to wait between attempts, and how cancellation cuts a wait short.
//!
//! This module owns the retry loop and `retry-after` parsing. It never inspects wire
//! formats (each client turns its answers into [`ModelError`]s first) and never prints:
//! every retry is reported through the caller's `on_retry` callback.

use std::future::Future;
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::{ModelError, RetryNotice};

/// The longest `retry-after` grove honours as given; longer values are clamped so a
/// broken header cannot park an agent for days (or overflow a `Duration`).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);

/// How often and how patiently a failed turn is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; `0` means one attempt only.
    pub max_retries: u32,
    /// The backoff cap of the first retry; doubled for each further retry.
    pub base_delay: Duration,
    /// The largest backoff cap (a server's `retry-after` may ask for longer).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 6,
            base_delay: Duration::from_millis(1000),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1 for the first retry) after `error`.
    ///
    /// Exponential backoff with full jitter: a uniformly random wait between zero and
    /// `min(max_delay, base_delay * 2^(retry-1))`, so many agents hitting the same
    /// overloaded API do not come back in lockstep. A `retry-after` from the server is a
    /// lower bound on top of that.
    pub fn delay_for(&self, retry: u32, error: &ModelError) -> Duration {
        let exponent = retry.saturating_sub(1).min(30);
        let cap = self
            .base_delay
            .saturating_mul(1_u32 << exponent)
            .min(self.max_delay);
        let jittered = cap.mul_f64(fastrand::f64());
        match error.api_error().and_then(|api| api.retry_after) {
            Some(asked) => jittered.max(asked.min(MAX_RETRY_AFTER)),
            None => jittered,
        }
    }

    /// Runs `attempt` until it succeeds, fails with an error that is not retryable, or
    /// the retries are used up.
    ///
    /// `attempt` is given its number (1 for the first). Before each retry `on_retry` is
    /// told the attempt number, the wait and the reason.
    /// Cancelling `cancel` aborts the running attempt or the wait at once with
    /// [`ModelError::Cancelled`]. When every attempt failed retryably the result is
    /// [`ModelError::RetriesExhausted`] holding the last error.
    pub async fn run<T, F, Fut>(
        &self,
        cancel: &CancellationToken,
        on_retry: &(dyn Fn(RetryNotice) + Send + Sync),
        mut attempt: F,
    ) -> Result<T, ModelError>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, ModelError>>,
    {
        let mut failures: u32 = 0;
        loop {
            if cancel.is_cancelled() {
                return Err(ModelError::Cancelled);
            }
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                outcome = attempt(failures.saturating_add(1)) => outcome,
            };
            let error = match outcome {
                Ok(value) => return Ok(value),
                Err(error) if !error.is_retryable() => return Err(error),
                Err(error) => error,
            };
            failures += 1;
            if failures > self.max_retries {
                return Err(ModelError::RetriesExhausted {
                    attempts: failures,
                    last: Box::new(error),
                });
            }
            let delay = self.delay_for(failures, &error);
            on_retry(RetryNotice {
                attempt: failures,
                delay,
                reason: error.to_string(),
            });
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                () = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// The wait a response asks for: `retry-after-ms` (milliseconds) if present, else
/// `retry-after` as seconds or as an HTTP date. Unreadable values count as absent.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, SystemTime::now())
}

fn retry_after_at(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    if let Some(millis) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds_to_duration(millis / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return seconds_to_duration(seconds);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

fn seconds_to_duration(seconds: f64) -> Option<Duration> {
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        seconds.min(MAX_RETRY_AFTER.as_secs_f64()),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU32, Ordering};

    use reqwest::header::HeaderValue;

    use super::*;
    use crate::model::ApiError;

    fn api(status: u16, retry_after: Option<Duration>) -> ModelError {
        ModelError::Api(ApiError {
            status,
            error_type: None,
            message: "test".into(),
            request_id: None,
            retry_after,
        })
    }

    fn fast(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        }
    }

    #[test]
    fn retry_after_reads_seconds_millis_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(
            retry_after_at(&headers, now),
            Some(Duration::from_secs(3)),
            "integer seconds"
        );
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            retry_after_at(&headers, now),
            Some(Duration::from_millis(1500)),
            "retry-after-ms wins over retry-after"
        );
        let mut dated = HeaderMap::new();
        let in_ten = httpdate::fmt_http_date(now + Duration::from_secs(10));
        dated.insert("retry-after", HeaderValue::from_str(&in_ten).unwrap());
        assert_eq!(
            retry_after_at(&dated, now),
            Some(Duration::from_secs(10)),
            "an HTTP date is a wait until then"
        );
        let mut junk = HeaderMap::new();
        junk.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after_at(&junk, now), None, "junk is ignored");
        junk.insert("retry-after", HeaderValue::from_static("-4"));
        assert_eq!(retry_after_at(&junk, now), None, "negative is ignored");
        junk.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(
            retry_after_at(&junk, now),
            Some(MAX_RETRY_AFTER),
            "absurd values are clamped, not overflowed"
        );
    }

    #[test]
    fn delay_is_bounded_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
        };
        for retry in 1..=10 {
            let delay = policy.delay_for(retry, &api(500, None));
            assert!(
                delay <= Duration::from_millis(400),
                "backoff never exceeds max_delay, got {delay:?} at retry {retry}"
            );
        }
        assert!(
            policy.delay_for(1, &api(429, Some(Duration::from_secs(2)))) >= Duration::from_secs(2),
            "a retry-after is a lower bound"
        );
    }

    #[test]
    fn classification_follows_the_policy() {
        for status in [408, 409, 429, 500, 502, 503, 529] {
            assert!(api(status, None).is_retryable(), "{status} is retried");
        }
        for status in [400, 401, 403, 404, 413] {
            assert!(!api(status, None).is_retryable(), "{status} is not retried");
        }
        let spend = ModelError::Api(ApiError {
            status: 429,
            error_type: Some("insufficient_quota".into()),
            message: "You exceeded your current quota".into(),
            request_id: None,
            retry_after: None,
        });
        assert!(!spend.is_retryable(), "a spend-limit 429 is not retried");
        let anthropic_spend = ModelError::Api(ApiError {
            status: 429,
            error_type: Some("rate_limit_error".into()),
            message: "You have reached your specified API usage limits.".into(),
            request_id: None,
            retry_after: None,
        });
        assert!(
            !anthropic_spend.is_retryable(),
            "a usage-limit 429 is not retried"
        );
        assert!(ModelError::Stream("cut".into()).is_retryable());
        assert!(!ModelError::Decode("bad".into()).is_retryable());
        assert!(!ModelError::Cancelled.is_retryable());
    }

    #[tokio::test]
    async fn exhausted_retries_report_every_attempt() {
        let calls = AtomicU32::new(0);
        let notices = Mutex::new(Vec::new());
        let result: Result<(), _> = fast(2)
            .run(
                &CancellationToken::new(),
                &|notice| notices.lock().unwrap().push(notice.attempt),
                |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    async { Err(api(529, None)) }
                },
            )
            .await;
        let Err(ModelError::RetriesExhausted { attempts, last }) = result else {
            panic!("expected RetriesExhausted, got {result:?}");
        };
        assert_eq!(attempts, 3, "max_retries + 1 attempts");
        assert_eq!(last.api_error().map(|a| a.status), Some(529));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(*notices.lock().unwrap(), vec![1, 2], "one notice per retry");
    }

    #[tokio::test]
    async fn non_retryable_errors_return_at_once() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = fast(5)
            .run(&CancellationToken::new(), &|_| {}, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err(api(401, None)) }
            })
            .await;
        assert!(matches!(
            result,
            Err(ModelError::Api(ApiError { status: 401, .. }))
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "401 is tried exactly once");
    }

    #[tokio::test]
    async fn cancellation_cuts_a_backoff_sleep_short() {
        let cancel = CancellationToken::new();
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_secs(3600),
            max_delay: Duration::from_secs(3600),
        };
        let result: Result<(), _> = policy
            .run(&cancel, &|_| cancel.cancel(), |_| async {
                Err(api(429, Some(Duration::from_secs(3600))))
            })
            .await;
        assert!(
            matches!(result, Err(ModelError::Cancelled)),
            "cancelling during the hour-long backoff ends the turn: {result:?}"
        );
    }
}
