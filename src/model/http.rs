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
use super::turn::{Progress, WaitPhase};
use super::url::redact_userinfo;
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
/// URL userinfo is hidden too ([`redact_userinfo`]).
pub(super) fn redact(text: &str, secret: &str) -> String {
    let text = redact_userinfo(text);
    if secret.len() < 4 {
        return text;
    }
    text.replace(secret, "[redacted]")
}

/// Sends `builder`, waiting at most `timeout` for the response headers (and telling
/// `progress` while it waits). `url` is the endpoint as shown; `target` the one sent to.
pub(super) async fn send(
    builder: reqwest::RequestBuilder,
    url: &str,
    target: &reqwest::Url,
    timeout: Duration,
    progress: &Progress<'_>,
) -> Result<reqwest::Response, ModelError> {
    let phase = "response headers";
    match progress
        .wait(builder.send(), timeout, WaitPhase::FirstByte)
        .await
    {
        Some(Ok(response)) => Ok(response),
        Some(Err(source)) if speaks_other_protocol(&source) => Err(ModelError::NotHttp {
            url: url.to_owned(),
            received: describe_other_protocol(target, &source).await,
        }),
        Some(Err(source)) => Err(ModelError::Transport {
            url: url.to_owned(),
            source: source.without_url(),
        }),
        None => Err(ModelError::Timeout {
            url: url.to_owned(),
            phase,
            after: timeout,
        }),
    }
}

/// Whether reqwest failed because the answer was not HTTP at all (hyper could not
/// parse a response head), as opposed to a refused or broken connection.
fn speaks_other_protocol(error: &reqwest::Error) -> bool {
    let mut cause: Option<&dyn std::error::Error> = Some(error);
    while let Some(current) = cause {
        let text = current.to_string();
        // hyper's words for a response head it cannot parse, or bytes that came
        // before any request was sent (a server that speaks first, such as SSH).
        if [
            "invalid HTTP",
            "message head is too large",
            "unexpected message",
        ]
        .iter()
        .any(|marker| text.contains(marker))
        {
            return true;
        }
        cause = current.source();
    }
    false
}

/// The first bytes a non-HTTP server at `target` sends, escaped: read again over a
/// plain connection (servers such as SSH speak first; others are sent an HTTP request
/// line). Falls back to hyper's complaint when nothing can be read.
async fn describe_other_protocol(target: &reqwest::Url, error: &reqwest::Error) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PROBE: Duration = Duration::from_secs(2);
    let fallback = || {
        let mut cause: Option<&dyn std::error::Error> = Some(error);
        let mut last = error.to_string();
        while let Some(current) = cause {
            last = current.to_string();
            cause = current.source();
        }
        format!("a response that is not HTTP ({last})")
    };
    let (Some(host), Some(port)) = (target.host_str(), target.port_or_known_default()) else {
        return fallback();
    };
    if target.scheme() != "http" {
        return fallback();
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let Ok(Ok(mut tcp)) =
        tokio::time::timeout(PROBE, tokio::net::TcpStream::connect((host, port))).await
    else {
        return fallback();
    };
    let mut buffer = [0_u8; 64];
    let mut read = tokio::time::timeout(PROBE, tcp.read(&mut buffer))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(0);
    if read == 0 {
        let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        if tcp.write_all(request.as_bytes()).await.is_ok() {
            read = tokio::time::timeout(PROBE, tcp.read(&mut buffer))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or(0);
        }
    }
    if read == 0 {
        return fallback();
    }
    let escaped: String = buffer[..read]
        .iter()
        .flat_map(|byte| std::ascii::escape_default(*byte))
        .map(char::from)
        .collect();
    format!("\"{escaped}\"")
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
            "the response body from {url} broke off: {}",
            err.without_url()
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

/// How a model's answer arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Delivery {
    /// Over SSE, event by event (the default): a slow answer shows progress, and a
    /// stalled one is noticed by its idle timeout.
    #[default]
    Streamed,
    /// As one JSON body, for servers that cannot stream.
    Whole,
}

impl Delivery {
    /// True when the answer is streamed (the wire's `stream` field).
    pub fn is_streamed(self) -> bool {
        self == Self::Streamed
    }
}

/// Longest piece of a non-SSE body quoted when a stream was asked for.
const MAX_QUOTED_START: usize = 200;

/// The server-sent events of one streaming response, read with an idle timeout.
pub struct SseEvents<'a> {
    events: Pin<Box<dyn Stream<Item = EventResult> + Send>>,
    idle_timeout: Duration,
    progress: Progress<'a>,
    /// When the last event that was not a keep-alive came (or the stream started).
    quiet_since: tokio::time::Instant,
    /// The first event (`None`: the end), read by [`SseEvents::begun`] ahead of
    /// [`SseEvents::next`].
    peeked: Option<Option<Event>>,
}

/// The event a server sends only to keep a stream open (Anthropic's `ping`).
const KEEP_ALIVE_EVENT: &str = "ping";

impl<'a> SseEvents<'a> {
    pub(super) fn new<B: AsRef<[u8]> + Send + 'static>(
        bytes: impl Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
        idle_timeout: Duration,
        progress: Progress<'a>,
    ) -> Self {
        Self {
            events: Box::pin(bytes.eventsource()),
            idle_timeout,
            progress,
            quiet_since: tokio::time::Instant::now(),
            peeked: None,
        }
    }

    /// Waits for the stream's first event, of any kind, and keeps it for
    /// [`SseEvents::next`]: the moment a response has begun.
    pub(super) async fn begun(&mut self) -> Result<(), ModelError> {
        if self.peeked.is_none() {
            self.peeked = Some(self.next_event().await?);
        }
        Ok(())
    }

    /// The next event; `None` at the end of the stream.
    ///
    /// No event for `idle_timeout`, a broken connection or undecodable bytes are a
    /// [`ModelError::Stream`]: the caller retries the whole turn.
    ///
    /// Keep-alive events are read past, not returned: each one restarts the idle
    /// timeout (the turn's own bound ends a stream that only drips them), but not the
    /// wait the live view tells of, so a server sending nothing else is shown waiting.
    pub(super) async fn next(&mut self) -> Result<Option<Event>, ModelError> {
        loop {
            let event = match self.peeked.take() {
                Some(event) => event,
                None => self.next_event().await?,
            };
            match event {
                Some(event) if event.event == KEEP_ALIVE_EVENT => continue,
                event => {
                    self.quiet_since = tokio::time::Instant::now();
                    return Ok(event);
                }
            }
        }
    }

    async fn next_event(&mut self) -> Result<Option<Event>, ModelError> {
        let next = self.progress.wait_since(
            self.events.next(),
            self.idle_timeout,
            WaitPhase::StreamEvent,
            self.quiet_since,
        );
        match next.await {
            None => Err(ModelError::Stream(format!(
                "no event for {}s (stream idle timeout)",
                self.idle_timeout.as_secs_f64()
            ))),
            Some(None) => Ok(None),
            Some(Some(Ok(event))) => Ok(Some(event)),
            Some(Some(Err(EventStreamError::Transport(err)))) => Err(ModelError::Stream(format!(
                "the connection broke mid-stream: {}",
                err.without_url()
            ))),
            Some(Some(Err(err))) => Err(ModelError::Stream(format!(
                "the event stream could not be decoded: {err}"
            ))),
        }
    }
}

/// What came back from one successful exchange.
pub(super) enum Body<'a> {
    /// An SSE stream, read with its idle timeout.
    Stream(SseEvents<'a>),
    /// A whole JSON body.
    Whole(Vec<u8>),
}

/// One request/response exchange with a model API, shared by both clients: send, turn
/// an error status into a typed [`ModelError::Api`], hand back the body.
pub(super) struct Exchange<'a> {
    /// The endpoint as shown (userinfo hidden).
    pub url: &'a str,
    /// The endpoint as sent.
    pub target: &'a reqwest::Url,
    pub api_key: &'a str,
    pub request_id_header: &'a str,
    /// For the whole response (JSON) or until the headers (streaming).
    pub timeout: Duration,
    /// For the gaps between SSE events.
    pub idle_timeout: Duration,
    /// Which attempt this is, and where its waits are told.
    pub progress: Progress<'a>,
}

impl<'a> Exchange<'a> {
    /// Sends `builder` and returns the body with the provider's request id.
    pub async fn send(
        &self,
        builder: reqwest::RequestBuilder,
        delivery: Delivery,
    ) -> Result<(Body<'a>, Option<String>), ModelError> {
        let started = tokio::time::Instant::now();
        let response = send(builder, self.url, self.target, self.timeout, &self.progress).await?;
        let request_id = header_text(response.headers(), self.request_id_header);
        if !response.status().is_success() {
            return Err(
                api_error(response, self.request_id_header, self.api_key, self.timeout).await,
            );
        }
        let body = if delivery.is_streamed() {
            self.check_event_stream(response).await?
        } else {
            let remaining = self.timeout.saturating_sub(started.elapsed());
            Body::Whole(read_body(response, self.url, remaining).await?)
        };
        Ok((body, request_id))
    }

    /// The response as an event stream, or [`ModelError::NotAStream`] when it is none.
    ///
    /// A missing content type is given the benefit of the doubt, and so is a wrong one
    /// whose first bytes read as SSE (`data:`, `event:`, a `:` comment): some servers
    /// label their streams `text/plain`.
    async fn check_event_stream(
        &self,
        mut response: reqwest::Response,
    ) -> Result<Body<'a>, ModelError> {
        let content_type = header_text(response.headers(), "content-type");
        let Some(content_type) =
            content_type.filter(|kind| !kind.to_ascii_lowercase().contains("text/event-stream"))
        else {
            return Ok(Body::Stream(SseEvents::new(
                response.bytes_stream(),
                self.idle_timeout,
                self.progress,
            )));
        };
        let limit = self.timeout.min(Duration::from_secs(5));
        let first = match tokio::time::timeout(limit, response.chunk()).await {
            Ok(Ok(Some(chunk))) => Some(chunk),
            _ => None,
        };
        let mut start = first
            .as_ref()
            .map(|chunk| chunk.to_vec())
            .unwrap_or_default();
        if let Some(first) = first.filter(|chunk| looks_like_sse(chunk)) {
            let first = futures_util::stream::once(async move { Ok(first) });
            return Ok(Body::Stream(SseEvents::new(
                first.chain(response.bytes_stream()),
                self.idle_timeout,
                self.progress,
            )));
        }
        let _ = tokio::time::timeout(limit, async {
            while start.len() < MAX_QUOTED_START * 4 {
                match response.chunk().await {
                    Ok(Some(chunk)) => start.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => break,
                }
            }
        })
        .await;
        let text = String::from_utf8_lossy(&start);
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut end = collapsed.len().min(MAX_QUOTED_START);
        while !collapsed.is_char_boundary(end) {
            end -= 1;
        }
        let mut body_start = format!("{:?}", &collapsed[..end]);
        if end < collapsed.len() {
            body_start.push('…');
        }
        Err(ModelError::NotAStream {
            url: self.url.to_owned(),
            content_type: redact(&content_type, self.api_key),
            body_start: redact(&body_start, self.api_key),
        })
    }
}

/// Whether `start` begins like a server-sent event stream.
fn looks_like_sse(start: &[u8]) -> bool {
    let text = String::from_utf8_lossy(start);
    let text = text.trim_start();
    ["data:", "event:", "id:", "retry:", ":"]
        .iter()
        .any(|field| text.starts_with(field))
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
