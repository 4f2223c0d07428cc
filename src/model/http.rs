//! HTTP plumbing both model clients share: sending with a deadline, reading error
//! answers into [`ApiError`]s, reading SSE with an idle timeout, and keeping API keys out
//! of error text.
//!
//! This module knows no wire format beyond the `{"error": {...}}` envelope both
//! providers use for refusals; it never retries (that is [`super::retry`]'s job).

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderValue};

use super::retry::retry_after;
use super::{ApiError, ModelError};

/// How long to wait for a TCP + TLS connection before counting it as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest piece of a non-JSON error body quoted in an error message.
const MAX_QUOTED_BODY: usize = 600;

/// Builds the reqwest client both providers use for `base_url` (already normalised).
///
/// A loopback base URL (a local model server, the demo's replay) bypasses any proxy from
/// the environment: a proxy cannot reach this machine's 127.0.0.1, and reqwest does not
/// exempt loopback by itself.
pub(super) fn build_client(base_url: &str) -> Result<reqwest::Client, ModelError> {
    let mut builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
    if is_loopback(base_url) {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|err| ModelError::Config(format!("could not build the HTTP client: {err}")))
}

/// Whether `url`'s host is this machine (`localhost`, 127.0.0.0/8 or `::1`).
fn is_loopback(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
    else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks and normalises a base URL: http(s), no trailing slash.
pub(super) fn normalise_base_url(base: &str, variable: &str) -> Result<String, ModelError> {
    let trimmed = base.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(trimmed).map_err(|err| {
        ModelError::Config(format!(
            "{variable} is not a valid URL ({trimmed:?}): {err}"
        ))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ModelError::Config(format!(
            "{variable} must be an http:// or https:// URL, got {trimmed:?}"
        )));
    }
    Ok(trimmed.to_owned())
}

/// A header value holding a secret, marked sensitive so it never shows in debug output.
pub(super) fn secret_header(value: &str, variable: &str) -> Result<HeaderValue, ModelError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| {
        ModelError::Config(format!(
            "{variable} contains characters that cannot be sent in an HTTP header"
        ))
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// Replaces every occurrence of `secret` in `text`, so API keys echoed back by a server
/// or a proxy never reach logs. Very short secrets are left alone: masking every `a`
/// would destroy the message and protect nothing.
pub(super) fn redact(text: &str, secret: &str) -> String {
    if secret.len() < 4 {
        return text.to_owned();
    }
    text.replace(secret, "[redacted]")
}

/// Sends `builder`, waiting at most `timeout` for the response headers.
pub(super) async fn send(
    builder: reqwest::RequestBuilder,
    url: &str,
    timeout: Duration,
    phase: &'static str,
) -> Result<reqwest::Response, ModelError> {
    match tokio::time::timeout(timeout, builder.send()).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(source)) => Err(ModelError::Transport {
            url: url.to_owned(),
            source,
        }),
        Err(_) => Err(ModelError::Timeout {
            url: url.to_owned(),
            phase,
            after: timeout,
        }),
    }
}

/// Reads a whole body, failing as a [`ModelError::Timeout`] when it is not complete
/// within `timeout`; a connection that breaks mid-body is a [`ModelError::Stream`].
pub(super) async fn read_body(
    response: reqwest::Response,
    url: &str,
    timeout: Duration,
) -> Result<Vec<u8>, ModelError> {
    match tokio::time::timeout(timeout, response.bytes()).await {
        Ok(Ok(bytes)) => Ok(bytes.to_vec()),
        Ok(Err(err)) => Err(ModelError::Stream(format!(
            "the response body from {url} broke off: {err}"
        ))),
        Err(_) => Err(ModelError::Timeout {
            url: url.to_owned(),
            phase: "response",
            after: timeout,
        }),
    }
}

/// The request id a provider put in `header`, if any.
pub(super) fn header_text(headers: &HeaderMap, header: &str) -> Option<String> {
    headers
        .get(header)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Turns an error status into a [`ModelError::Api`] holding what the server said.
///
/// Both providers wrap refusals as `{"error": {"type", "message", ...}}`; OpenAI-style
/// servers may put the kind in `code` instead, and some send `{"error": "text"}` or no
/// JSON at all, which is quoted (shortened) instead.
pub(super) async fn api_error(
    response: reqwest::Response,
    request_id_header: &str,
    secret: &str,
    timeout: Duration,
) -> ModelError {
    let status = response.status();
    let headers = response.headers().clone();
    let body = match tokio::time::timeout(timeout, response.bytes()).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(Err(_)) | Err(_) => String::new(),
    };
    let parsed: Option<serde_json::Value> = serde_json::from_str(&body).ok();
    let error = parsed.as_ref().and_then(|value| value.get("error"));
    let text_field = |name: &str| {
        error
            .and_then(|e| e.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let error_type = text_field("type").or_else(|| text_field("code"));
    let message = text_field("message")
        .or_else(|| error.and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| describe_body(status, &body));
    let request_id = header_text(&headers, request_id_header).or_else(|| {
        parsed
            .as_ref()
            .and_then(|v| v.get("request_id"))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    });
    ModelError::Api(ApiError {
        status: status.as_u16(),
        error_type,
        message: redact(&message, secret),
        request_id,
        retry_after: retry_after(&headers),
    })
}

fn describe_body(status: reqwest::StatusCode, body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return status
            .canonical_reason()
            .unwrap_or("no error message")
            .to_owned();
    }
    let mut end = body.len().min(MAX_QUOTED_BODY);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    if end < body.len() {
        format!("{}…", &body[..end])
    } else {
        body.to_owned()
    }
}

type EventResult = Result<Event, EventStreamError<reqwest::Error>>;

/// The server-sent events of one streaming response, read with an idle timeout.
pub(super) struct SseEvents {
    events: Pin<Box<dyn Stream<Item = EventResult> + Send>>,
    idle_timeout: Duration,
}

impl SseEvents {
    pub(super) fn new(response: reqwest::Response, idle_timeout: Duration) -> Self {
        Self {
            events: Box::pin(response.bytes_stream().eventsource()),
            idle_timeout,
        }
    }

    /// The next event; `None` at the end of the stream.
    ///
    /// No bytes for `idle_timeout`, a broken connection or undecodable bytes are a
    /// [`ModelError::Stream`]: the caller retries the whole turn.
    pub(super) async fn next(&mut self) -> Result<Option<Event>, ModelError> {
        match tokio::time::timeout(self.idle_timeout, self.events.next()).await {
            Err(_) => Err(ModelError::Stream(format!(
                "no data for {}s (stream idle timeout)",
                self.idle_timeout.as_secs_f64()
            ))),
            Ok(None) => Ok(None),
            Ok(Some(Ok(event))) => Ok(Some(event)),
            Ok(Some(Err(EventStreamError::Transport(err)))) => Err(ModelError::Stream(format!(
                "the connection broke mid-stream: {err}"
            ))),
            Ok(Some(Err(err))) => Err(ModelError::Stream(format!(
                "the event stream could not be decoded: {err}"
            ))),
        }
    }
}

/// What came back from one successful exchange.
pub(super) enum Body {
    /// An SSE stream, read with its idle timeout.
    Stream(SseEvents),
    /// A whole JSON body.
    Whole(Vec<u8>),
}

/// One request/response exchange with a model API, shared by both clients: send, turn
/// an error status into a typed [`ModelError::Api`], hand back the body.
pub(super) struct Exchange<'a> {
    pub url: &'a str,
    pub api_key: &'a str,
    pub request_id_header: &'a str,
    /// For the whole response (JSON) or until the headers (streaming).
    pub timeout: Duration,
    /// For the gaps between SSE events.
    pub idle_timeout: Duration,
}

impl Exchange<'_> {
    /// Sends `builder` and returns the body with the provider's request id.
    pub async fn send(
        &self,
        builder: reqwest::RequestBuilder,
        stream: bool,
    ) -> Result<(Body, Option<String>), ModelError> {
        let phase = if stream {
            "response headers"
        } else {
            "response"
        };
        let started = tokio::time::Instant::now();
        let response = send(builder, self.url, self.timeout, phase).await?;
        let request_id = header_text(response.headers(), self.request_id_header);
        if !response.status().is_success() {
            return Err(
                api_error(response, self.request_id_header, self.api_key, self.timeout).await,
            );
        }
        let body = if stream {
            Body::Stream(SseEvents::new(response, self.idle_timeout))
        } else {
            let remaining = self.timeout.saturating_sub(started.elapsed());
            Body::Whole(read_body(response, self.url, remaining).await?)
        };
        Ok((body, request_id))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machine_counts_as_loopback_for_the_proxy_bypass() {
        let cases = [
            ("http://127.0.0.1:4000", true),
            ("http://127.1.2.3", true),
            ("http://LOCALHOST:8080/v1", true),
            ("http://[::1]:8080", true),
            ("https://api.anthropic.com", false),
            ("http://10.0.0.1", false),
            ("http://localhost.example.com", false),
            ("not a url", false),
        ];
        let actual: Vec<_> = cases
            .iter()
            .map(|(url, _)| (*url, is_loopback(url)))
            .collect();
        assert_eq!(actual, cases.to_vec());
    }

    #[test]
    fn redact_hides_keys_but_not_short_strings() {
        assert_eq!(
            redact("Incorrect API key provided: sk-secret-123", "sk-secret-123"),
            "Incorrect API key provided: [redacted]"
        );
        assert_eq!(redact("a b c", "a"), "a b c");
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        assert_eq!(
            normalise_base_url("http://127.0.0.1:8080/v1/", "X").unwrap(),
            "http://127.0.0.1:8080/v1"
        );
        let err = normalise_base_url("ftp://example.com", "OPENAI_BASE_URL").unwrap_err();
        assert!(err.to_string().contains("OPENAI_BASE_URL"), "{err}");
        assert!(normalise_base_url("not a url", "X").is_err());
    }

    #[test]
    fn long_bodies_are_shortened_on_a_char_boundary() {
        let body = "é".repeat(MAX_QUOTED_BODY);
        let described = describe_body(reqwest::StatusCode::BAD_GATEWAY, &body);
        assert!(described.ends_with('…'));
        assert!(described.len() <= MAX_QUOTED_BODY + '…'.len_utf8());
        assert_eq!(
            describe_body(reqwest::StatusCode::BAD_GATEWAY, ""),
            "Bad Gateway"
        );
    }
}
