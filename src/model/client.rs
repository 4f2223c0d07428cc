//! The core both model clients share: their configuration (base URL, key, streaming,
//! retries, time bounds), the client built from it, and one attempt of a turn. Only the
//! wire format differs between the Anthropic Messages API and OpenAI-compatible chat
//! completions, and that is a [`Wire`].
//!
//! This module owns two rules for every provider: an attempt is only ever made through
//! [`turn::run`] (which alone retries, under the [`RetryPolicy`]), and the API key goes
//! into the headers its wire names and nowhere else (never into `Debug` output).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::cache::{CacheTtl, Entry, SiblingHold, Ticket, prefix_hash};
use super::http::{self, Delivery, SseEvents};
use super::retry::RetryPolicy;
use super::turn::{self, Progress};
use super::url::{self as base_url, redact_userinfo};
use super::{Model, ModelError, ModelNotice, Request, Response};

/// One provider's wire format: where it is reached, how the key is sent, and how a
/// request and a response are written.
#[async_trait]
pub trait Wire: Default + Clone + fmt::Debug + Send + Sync + 'static {
    /// The configuration's name in `Debug` output (`AnthropicConfig`).
    const CONFIG_NAME: &'static str;
    /// Where the API lives unless [`Wire::BASE_URL_VAR`] says otherwise.
    const DEFAULT_BASE_URL: &'static str;
    const BASE_URL_VAR: &'static str;
    const KEY_VAR: &'static str;
    /// Appended to the base URL (`/v1/messages`).
    const PATH: &'static str;
    /// The response header the provider puts its request id in.
    const REQUEST_ID_HEADER: &'static str;

    /// Refuses a key this API cannot go without, naming the variable to set.
    fn check_key(base_url: &str, api_key: &str) -> Result<(), ModelError>;

    /// The headers that carry `api_key` (already checked) and the API version.
    fn headers(api_key: &str) -> Result<HeaderMap, ModelError>;

    /// The client's name in the ledger and in messages.
    fn name(base_url: &str, endpoint: &reqwest::Url) -> String;

    /// The exact JSON body for `request`, asking for the answer as `delivery` says, its
    /// cache breakpoints (where the wire has them) living `ttl`.
    fn encode(request: &Request, delivery: Delivery, ttl: CacheTtl) -> Result<Vec<u8>, ModelError>;

    /// A whole (non-streamed) response; `secret` is kept out of any error text.
    fn decode(body: &[u8], secret: &str) -> Result<Response, ModelError>;

    /// A streamed response, read to its end; `secret` is kept out of any error text.
    async fn read_stream(events: &mut SseEvents<'_>, secret: &str) -> Result<Response, ModelError>;
}

/// How to reach a model API speaking wire `W`.
#[derive(Clone)]
pub struct ClientConfig<W> {
    /// The base the wire's path is appended to (`https://api.anthropic.com`,
    /// `https://api.openai.com/v1`).
    pub base_url: String,
    /// Empty means "send no key" where the wire allows it (local servers only).
    pub api_key: String,
    /// How the answer arrives: streamed over SSE (the default) or as one JSON body.
    pub delivery: Delivery,
    pub retry: RetryPolicy,
    /// Deadline for the first byte of an answer: the whole response (non-streaming) or
    /// its headers (streaming). A failed attempt, retried.
    pub request_timeout: Duration,
    /// A stream that delivers no event for this long is a failed attempt, retried.
    pub idle_timeout: Duration,
    /// Deadline for the whole turn, every attempt and wait included. Not retried.
    pub turn_timeout: Duration,
    /// How often a long wait is reported as a [`ModelNotice::Waiting`].
    pub heartbeat: Duration,
    /// The longest a request waits for the first response of its sibling group to begin
    /// (see [`super::cache`]); zero turns the hold off.
    pub sibling_hold: Duration,
    /// Whether a conversation that waits long after its turn (the lead) writes its
    /// cache at the 1-hour TTL: true where the provider's cache rates make it pay
    /// ([`super::CacheRates::one_hour_pays`]). Only the Anthropic wire has the choice.
    pub one_hour_cache: bool,
    /// The API this configuration speaks (a unit type).
    pub wire: W,
}

impl<W: Wire> fmt::Debug for ClientConfig<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.api_key.is_empty() {
            ""
        } else {
            "[redacted]"
        };
        f.debug_struct(W::CONFIG_NAME)
            .field("base_url", &redact_userinfo(&self.base_url))
            .field("api_key", &key)
            .field("delivery", &self.delivery)
            .field("retry", &self.retry)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("turn_timeout", &self.turn_timeout)
            .field("heartbeat", &self.heartbeat)
            .field("sibling_hold", &self.sibling_hold)
            .field("one_hour_cache", &self.one_hour_cache)
            .finish()
    }
}

impl<W: Wire> ClientConfig<W> {
    /// A config for `base_url` and `api_key` with default streaming, retries and timeouts
    /// (see [`turn`] for the defaults).
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: api_key.into(),
            delivery: Delivery::Streamed,
            retry: RetryPolicy::default(),
            request_timeout: turn::DEFAULT_FIRST_BYTE_TIMEOUT,
            idle_timeout: turn::DEFAULT_IDLE_TIMEOUT,
            turn_timeout: turn::DEFAULT_TURN_TIMEOUT,
            heartbeat: turn::DEFAULT_HEARTBEAT,
            sibling_hold: DEFAULT_SIBLING_HOLD,
            one_hour_cache: super::CacheRates::ANTHROPIC.one_hour_pays(),
            wire: W::default(),
        }
    }

    /// Reads the wire's key and base URL variables and the time bounds of
    /// [`super::TimeoutEnv`] from the environment.
    pub fn from_env() -> Result<Self, ModelError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`ClientConfig::from_env`], with variables looked up by `lookup`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ModelError> {
        let base_url = lookup(W::BASE_URL_VAR)
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| W::DEFAULT_BASE_URL.to_owned());
        let api_key = lookup(W::KEY_VAR)
            .map(|key| key.trim().to_owned())
            .unwrap_or_default();
        W::check_key(&base_url, &api_key)?;
        let timeouts = turn::EnvTimeouts::read(&lookup)?;
        Ok(Self {
            sibling_hold: sibling_hold(&lookup)?,
            request_timeout: timeouts.first_byte,
            idle_timeout: timeouts.idle,
            turn_timeout: timeouts.turn,
            heartbeat: timeouts.heartbeat,
            ..Self::new(base_url, api_key)
        })
    }
}

/// How long a request waits at most for its siblings' first response to begin: a
/// model's time to first token on a long prefix is seconds; a first request slower
/// than this is treated as hung, and the others go without the cache it would write.
pub const DEFAULT_SIBLING_HOLD: Duration = Duration::from_secs(30);

/// The variable that bounds the sibling hold, in seconds; `0` turns it off.
pub const SIBLING_HOLD_VAR: &str = "GROVE_MODEL_SIBLING_HOLD_S";

/// [`SIBLING_HOLD_VAR`] from `lookup`, [`DEFAULT_SIBLING_HOLD`] when unset or empty.
fn sibling_hold(lookup: &impl Fn(&str) -> Option<String>) -> Result<Duration, ModelError> {
    let Some(text) = lookup(SIBLING_HOLD_VAR).filter(|text| !text.trim().is_empty()) else {
        return Ok(DEFAULT_SIBLING_HOLD);
    };
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0 && *seconds < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            ModelError::Config(format!(
                "{SIBLING_HOLD_VAR} must be a number of seconds (0 turns the hold off), got \
                 {text:?}"
            ))
        })
}

/// A [`Model`] speaking wire `W`.
#[derive(Debug)]
pub struct Client<W: Wire> {
    config: ClientConfig<W>,
    hold: SiblingHold,
    http: reqwest::Client,
    endpoint: base_url::Endpoint,
    /// The key and version headers, the key marked sensitive.
    headers: HeaderMap,
}

impl<W: Wire> Client<W> {
    /// Checks `config` (key present where required and sendable, base URL valid) and
    /// builds a client.
    pub fn new(mut config: ClientConfig<W>) -> Result<Self, ModelError> {
        // Trimmed once, so the header and the redaction of error text use the same key.
        config.api_key = config.api_key.trim().to_owned();
        W::check_key(&config.base_url, &config.api_key)?;
        let headers = W::headers(&config.api_key)?;
        let endpoint = base_url::endpoint(&config.base_url, W::PATH, W::BASE_URL_VAR)?;
        Ok(Self {
            hold: SiblingHold::default(),
            http: http::build_client(endpoint.send.as_str())?,
            endpoint,
            headers,
            config,
        })
    }

    /// The exact JSON body this client sends for `request`.
    ///
    /// Public so tests and tools can inspect what the API sees (cache breakpoints,
    /// block order) without a server.
    pub fn request_body(&self, request: &Request) -> Result<Vec<u8>, ModelError> {
        let ttl = CacheTtl::choose(&request.cache, self.config.one_hour_cache);
        W::encode(request, self.config.delivery, ttl)
    }

    /// True when the client sends a key at all (an OpenAI-compatible local server may
    /// take none).
    pub fn sends_key(&self) -> bool {
        !self.config.api_key.is_empty()
    }

    /// The request's place in its sibling group: it may wait here for the first
    /// response of its group to begin (see [`super::cache`]).
    async fn hold(&self, request: &Request) -> Option<Ticket> {
        let key = request.cache.key.as_deref()?;
        if self.config.sibling_hold.is_zero() {
            return None;
        }
        let ticket = self
            .hold
            .enter(key, prefix_hash(request), self.config.sibling_hold)
            .await;
        (ticket.entry == Entry::Leader).then_some(ticket)
    }

    async fn attempt(
        &self,
        body: &[u8],
        progress: Progress<'_>,
        ticket: Option<&Ticket>,
    ) -> Result<Response, ModelError> {
        let result = self.exchange(body, progress, ticket).await;
        if let (Err(_), Some(ticket)) = (&result, ticket) {
            // Failed before its response began (else `began` came first, a no-op now):
            // the siblings go, one of them first.
            ticket.release();
        }
        result
    }

    async fn exchange(
        &self,
        body: &[u8],
        progress: Progress<'_>,
        ticket: Option<&Ticket>,
    ) -> Result<Response, ModelError> {
        let builder = self
            .http
            .post(self.endpoint.send.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body.to_vec());
        let exchange = http::Exchange {
            url: &self.endpoint.shown,
            target: &self.endpoint.send,
            progress,
            api_key: &self.config.api_key,
            request_id_header: W::REQUEST_ID_HEADER,
            timeout: self.config.request_timeout,
            idle_timeout: self.config.idle_timeout,
        };
        let (body, request_id) = exchange.send(builder, self.config.delivery).await?;
        let began = || {
            if let Some(ticket) = ticket {
                ticket.began();
            }
        };
        let mut parsed = match body {
            http::Body::Stream(mut events) => {
                if ticket.is_some() {
                    events.begun().await?;
                    began();
                }
                W::read_stream(&mut events, &self.config.api_key).await?
            }
            http::Body::Whole(bytes) => {
                began();
                W::decode(&bytes, &self.config.api_key)?
            }
        };
        parsed.request_id = request_id;
        Ok(parsed)
    }
}

#[async_trait]
impl<W: Wire> Model for Client<W> {
    fn name(&self) -> String {
        W::name(&self.config.base_url, &self.endpoint.send)
    }

    async fn complete(
        &self,
        request: &Request,
        cancel: &CancellationToken,
        on_notice: &(dyn Fn(ModelNotice) + Send + Sync),
    ) -> Result<Response, ModelError> {
        let body = self.request_body(request)?;
        let ticket = self.hold(request).await;
        turn::run(
            &self.config.retry,
            self.config.turn_timeout,
            self.config.heartbeat,
            cancel,
            on_notice,
            |progress| self.attempt(&body, progress, ticket.as_ref()),
        )
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_sibling_hold_is_read_from_the_environment_and_zero_turns_it_off() {
        let with = |value: &'static str| {
            move |name: &str| (name == SIBLING_HOLD_VAR).then(|| value.to_owned())
        };
        assert_eq!(sibling_hold(&|_: &str| None).unwrap(), DEFAULT_SIBLING_HOLD);
        assert_eq!(
            sibling_hold(&with("2.5")).unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(sibling_hold(&with("0")).unwrap(), Duration::ZERO);
        for bad in ["-1", "soon", "inf"] {
            let error = sibling_hold(&with(bad)).unwrap_err().to_string();
            assert!(error.contains(SIBLING_HOLD_VAR), "{bad}: {error}");
        }
    }
}
