//! Typed model errors.

use std::time::Duration;

/// What the API said when it refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    /// The provider's error type, e.g. `overloaded_error`, `rate_limit_error`.
    pub error_type: Option<String>,
    pub message: String,
    pub request_id: Option<String>,
    /// The `retry-after` the server asked for, if any.
    pub retry_after: Option<Duration>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if let Some(kind) = &self.error_type {
            write!(f, " {kind}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

/// Why a model turn could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The API answered with an error status. Retried for 408, 409, 429 (unless it
    /// reports a spend limit), 5xx and 529; never for 400, 401, 403, 404, 413.
    #[error("the model API refused the request: {0}")]
    Api(ApiError),
    /// The connection failed (refused, reset, TLS). Retried, unless reqwest could not
    /// even build the request (a malformed URL or header), which no retry fixes.
    #[error("could not reach the model API at {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The response broke after a 200: an `error` event (or an error body), a cut
    /// connection, or no data for longer than the idle timeout. Retried as a failed
    /// attempt of the whole turn.
    #[error("the model's response stream failed: {0}")]
    Stream(String),
    /// The response was not what the wire format promises. Not retried.
    #[error("the model API sent a response grove cannot read: {0}")]
    Decode(String),
    /// Every attempt failed with a retryable error.
    #[error("gave up after {attempts} attempts; last error: {last}")]
    RetriesExhausted {
        attempts: u32,
        #[source]
        last: Box<ModelError>,
    },
    /// The caller cancelled the turn. Never retried.
    #[error("the model request was cancelled")]
    Cancelled,
    /// The client is misconfigured (no API key, bad base URL). Never retried.
    #[error("{0}")]
    Config(String),
    /// No answer within the configured time: the whole response for a non-streaming
    /// request, the response headers for a streaming one. Retried.
    #[error("the model API at {url} did not answer within {}s ({phase})", after.as_secs_f64())]
    Timeout {
        url: String,
        /// What was awaited: `response` or `response headers`.
        phase: &'static str,
        after: Duration,
    },
    /// The request cannot be expressed in the provider's wire format (e.g. a message
    /// with no content). Never retried: the caller must change the request.
    #[error("the model request is invalid: {0}")]
    InvalidRequest(String),
    /// Something answers at the address, but not in HTTP (another service on the port,
    /// a TLS port asked in plain HTTP). Never retried: no retry changes the protocol.
    #[error("the server at {url} does not speak HTTP: it sent {received}")]
    NotHttp {
        url: String,
        /// The first bytes it sent, escaped, or what is known of them.
        received: String,
    },
    /// A stream was asked for and a 200 came back with another kind of body (a proxy's
    /// HTML page, a JSON body from a server that ignores `stream`). Never retried: the
    /// same server answers the same way again.
    #[error(
        "the model API at {url} answered a streaming request with {content_type} instead of an event stream; the body starts: {body_start}"
    )]
    NotAStream {
        url: String,
        content_type: String,
        /// The start of the body, shortened and with secrets removed.
        body_start: String,
    },
    /// The whole turn (every attempt and the waits between them) did not finish within
    /// its bound. Never retried: the bound is the end of trying.
    #[error(
        "the model turn did not finish within {}s (attempt {attempt} of {attempts} was running{})",
        after.as_secs_f64(),
        last_failure.as_ref().map(|last| format!("; the last failure: {last}")).unwrap_or_default()
    )]
    TurnTimeout {
        after: Duration,
        attempt: u32,
        attempts: u32,
        last_failure: Option<String>,
    },
}

impl ApiError {
    /// Whether this refusal reports a spend, billing or quota limit rather than a
    /// momentary rate limit: waiting will not help, so such answers are never retried.
    pub fn is_spend_limit(&self) -> bool {
        // Plain "quota" is deliberately absent: some gateways say "quota exceeded ...
        // per minute" for an ordinary rate limit, which waiting does fix.
        const MARKERS: [&str; 8] = [
            "insufficient_quota",
            "exceeded your current quota",
            "spend limit",
            "spending limit",
            "billing",
            "credit balance",
            "usage limit",
            "budget",
        ];
        let kind = self
            .error_type
            .as_deref()
            .unwrap_or("")
            .to_ascii_lowercase();
        let message = self.message.to_ascii_lowercase();
        MARKERS
            .iter()
            .any(|marker| kind.contains(marker) || message.contains(marker))
    }

    /// Whether the status says the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self.status {
            429 => !self.is_spend_limit(),
            408 | 409 | 529 => true,
            500..=599 => true,
            _ => false,
        }
    }
}

impl ModelError {
    /// Whether the retry policy tries the turn again after this error.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Api(api) => api.is_retryable(),
            // A builder error is a malformed request (bad URL, bad header): sending it
            // again cannot help.
            ModelError::Transport { source, .. } => !source.is_builder(),
            ModelError::Timeout { .. } | ModelError::Stream(_) => true,
            ModelError::Decode(_)
            | ModelError::RetriesExhausted { .. }
            | ModelError::Cancelled
            | ModelError::Config(_)
            | ModelError::InvalidRequest(_)
            | ModelError::NotHttp { .. }
            | ModelError::NotAStream { .. }
            | ModelError::TurnTimeout { .. } => false,
        }
    }

    /// The API's answer behind this error, looking through [`ModelError::RetriesExhausted`].
    pub fn api_error(&self) -> Option<&ApiError> {
        match self {
            ModelError::Api(api) => Some(api),
            ModelError::RetriesExhausted { last, .. } => last.api_error(),
            _ => None,
        }
    }
}
