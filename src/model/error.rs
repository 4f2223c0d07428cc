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
    /// The connection failed or the request timed out. Retried.
    #[error("could not reach the model API at {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The stream broke: an `error` event after a 200, a cut, or no data for too long.
    /// Retried as a failed attempt of the whole turn.
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
}
