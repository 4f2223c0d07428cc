//! The model clients against servers that misbehave at the connection level: one that
//! accepts and never answers, a stream that drips keep-alives forever, a 200 that is not
//! a stream, a port that does not speak HTTP, and credentials or a query in the base URL.
//! Every case must end, say why, and never show a password.
//!
//! Limits are set short by each test; timing is asserted only as a generous upper bound
//! (the invariant is "it ends and says why", not a latency figure).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use grove::model::{
    AnthropicClient, AnthropicConfig, Message, Model, ModelError, ModelNotice, OpenAiClient,
    OpenAiConfig, Provider, Request, Response, RetryPolicy, WaitPhase,
};
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::support::fake_server::{FakeServer, Reply, TEST_API_KEY, Turn, fast_retry};

/// No test here may take longer than this; far above what any of them needs.
const GENEROUS: Duration = Duration::from_secs(30);

/// The time bounds a test sets for itself.
#[derive(Clone, Copy)]
struct Limits {
    retries: u32,
    first_byte: Duration,
    idle: Duration,
    turn: Duration,
    heartbeat: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            retries: 3,
            first_byte: Duration::from_secs(10),
            idle: Duration::from_secs(10),
            turn: Duration::from_secs(20),
            heartbeat: Duration::from_secs(10),
        }
    }
}

fn client(provider: Provider, base_url: &str, stream: bool, limits: Limits) -> Box<dyn Model> {
    let retry = RetryPolicy {
        max_retries: limits.retries,
        ..fast_retry()
    };
    match provider {
        Provider::Anthropic => Box::new(
            AnthropicClient::new(AnthropicConfig {
                delivery: crate::support::fake_server::delivery(stream),
                retry,
                request_timeout: limits.first_byte,
                idle_timeout: limits.idle,
                turn_timeout: limits.turn,
                heartbeat: limits.heartbeat,
                ..AnthropicConfig::new(base_url, TEST_API_KEY)
            })
            .expect("anthropic client"),
        ),
        Provider::OpenAi => Box::new(
            OpenAiClient::new(OpenAiConfig {
                delivery: crate::support::fake_server::delivery(stream),
                retry,
                request_timeout: limits.first_byte,
                idle_timeout: limits.idle,
                turn_timeout: limits.turn,
                heartbeat: limits.heartbeat,
                ..OpenAiConfig::new(base_url, TEST_API_KEY)
            })
            .expect("openai client"),
        ),
    }
}

fn request() -> Request {
    Request {
        model: "test-model".to_owned(),
        system: "You are a careful engineer.".to_owned(),
        messages: vec![Message::user_text("Rename Config::load to Config::open.")],
        tools: Vec::new(),
        max_tokens: 1024,
        cache: Default::default(),
    }
}

/// One turn, bounded by [`GENEROUS`], with every notice and the time it took.
async fn turn(model: &dyn Model) -> (Result<Response, ModelError>, Vec<ModelNotice>, Duration) {
    let notices = Mutex::new(Vec::new());
    let started = Instant::now();
    let result = tokio::time::timeout(
        GENEROUS,
        model.complete(&request(), &CancellationToken::new(), &|notice| {
            notices.lock().unwrap().push(notice);
        }),
    )
    .await
    .expect("the turn ends on its own, well within the generous bound");
    (result, notices.into_inner().unwrap(), started.elapsed())
}

/// (attempt, attempts, phase) of every wait notice, and the attempt of every retry.
fn summary(notices: &[ModelNotice]) -> (Vec<(u32, u32, WaitPhase)>, Vec<u32>) {
    let mut waits = Vec::new();
    let mut retries = Vec::new();
    for notice in notices {
        match notice {
            ModelNotice::Waiting(wait) => waits.push((wait.attempt, wait.attempts, wait.phase)),
            ModelNotice::Retry(retry) => retries.push(retry.attempt),
        }
    }
    waits.dedup();
    (waits, retries)
}

/// A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte
/// (the connections are held open until the test ends).
async fn silent_listener() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (format!("http://{address}"), task)
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_is_shown_waiting_then_given_up() {
    let (url, listener) = silent_listener().await;
    let limits = Limits {
        retries: 1,
        first_byte: Duration::from_millis(400),
        heartbeat: Duration::from_millis(100),
        ..Limits::default()
    };
    for (provider, base) in [
        (Provider::Anthropic, url.clone()),
        (Provider::OpenAi, format!("{url}/v1")),
    ] {
        let model = client(provider, &base, true, limits);
        let (result, notices, took) = turn(model.as_ref()).await;
        let Err(ModelError::RetriesExhausted { attempts, last }) = &result else {
            panic!("{provider}: expected the retries to run out, got {result:?}");
        };
        assert_eq!(*attempts, 2, "{provider}: both attempts were made");
        assert!(
            matches!(**last, ModelError::Timeout { .. }),
            "{provider}: the reason is the first-byte timeout: {last:?}"
        );
        let message = result.as_ref().unwrap_err().to_string();
        assert!(
            message.contains("did not answer within 0.4s"),
            "{provider}: the message says how long grove waited: {message}"
        );
        assert_eq!(
            summary(&notices),
            (
                vec![(1, 2, WaitPhase::FirstByte), (2, 2, WaitPhase::FirstByte)],
                vec![1]
            ),
            "{provider}: each attempt is shown waiting, and the retry between them"
        );
        assert!(took < GENEROUS, "{provider}: bounded");
    }
    listener.abort();
}

#[tokio::test]
async fn a_stream_that_drips_keep_alives_forever_is_ended_by_the_turn_bound() {
    let server = FakeServer::with_responder(|_| Reply::Drip {
        gap: Duration::from_millis(50),
    })
    .await;
    let limits = Limits {
        idle: Duration::from_secs(5),
        turn: Duration::from_millis(800),
        ..Limits::default()
    };
    for (provider, base) in [
        (Provider::Anthropic, server.url()),
        (Provider::OpenAi, server.openai_url()),
    ] {
        let model = client(provider, &base, true, limits);
        let (result, _, took) = turn(model.as_ref()).await;
        let Err(
            error @ ModelError::TurnTimeout {
                attempt, attempts, ..
            },
        ) = &result
        else {
            panic!("{provider}: expected the turn bound to end it, got {result:?}");
        };
        assert_eq!(
            (*attempt, *attempts),
            (1, 4),
            "{provider}: the first attempt was still dripping"
        );
        assert_eq!(
            error.to_string(),
            "the model turn did not finish within 0.8s (attempt 1 of 4 was running)",
            "{provider}: the message says why it ended"
        );
        assert!(
            took >= Duration::from_millis(800) && took < GENEROUS,
            "{provider}: {took:?}"
        );
    }
    server.assert_no_violations();
}

#[tokio::test]
async fn a_stream_of_keep_alives_alone_is_shown_as_a_wait() {
    let server = FakeServer::with_responder(|_| Reply::Drip {
        gap: Duration::from_millis(50),
    })
    .await;
    let limits = Limits {
        idle: Duration::from_secs(5),
        turn: Duration::from_millis(800),
        heartbeat: Duration::from_millis(200),
        ..Limits::default()
    };
    let model = client(Provider::Anthropic, &server.url(), true, limits);

    let (_, notices, _) = turn(model.as_ref()).await;

    let waits: Vec<Duration> = notices
        .iter()
        .filter_map(|notice| match notice {
            ModelNotice::Waiting(wait) if wait.phase == WaitPhase::StreamEvent => Some(wait.waited),
            _ => None,
        })
        .collect();
    assert!(
        waits.len() >= 2 && waits.windows(2).all(|pair| pair[1] > pair[0]),
        "a ping every 50 ms is no answer: the wait is told every heartbeat and keeps \
         growing ({waits:?})"
    );
}

#[tokio::test]
async fn a_page_or_a_json_body_where_a_stream_was_asked_fails_at_once_and_says_what_came() {
    let cases = [
        (
            "text/html; charset=utf-8",
            "<html>\n  <body>Welcome to the captive portal</body>\n</html>",
            "text/html; charset=utf-8",
            "\"<html> <body>Welcome to the captive portal</body> </html>\"",
        ),
        (
            "application/json",
            "{\"id\":\"msg_1\",\"type\":\"message\",\"content\":[]}",
            "application/json",
            "\"{\\\"id\\\":\\\"msg_1\\\",\\\"type\\\":\\\"message\\\",\\\"content\\\":[]}\"",
        ),
    ];
    for (content_type, body, shown_type, shown_start) in cases {
        let server = FakeServer::with_responder(move |_| {
            Reply::Raw {
                status: 200,
                body: body.to_owned(),
                headers: Vec::new(),
            }
            .with_header("content-type", content_type)
        })
        .await;
        for (provider, base) in [
            (Provider::Anthropic, server.url()),
            (Provider::OpenAi, server.openai_url()),
        ] {
            let before = server.requests().len();
            let model = client(provider, &base, true, Limits::default());
            let (result, notices, _) = turn(model.as_ref()).await;
            let Err(ModelError::NotAStream {
                content_type,
                body_start,
                ..
            }) = &result
            else {
                panic!("{provider}: expected NotAStream, got {result:?}");
            };
            assert_eq!(
                (content_type.as_str(), body_start.as_str()),
                (shown_type, shown_start),
                "{provider}: the error names the content type and the start of the body"
            );
            assert_eq!(
                (server.requests().len() - before, notices.len()),
                (1, 0),
                "{provider}: not retried, it is not transient"
            );
        }
    }
}

#[tokio::test]
async fn a_port_that_does_not_speak_http_is_named_with_what_it_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut accepted = 0_u32;
        while let Ok((mut socket, _)) = listener.accept().await {
            accepted += 1;
            let _ = socket.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
            let mut sink = [0_u8; 256];
            let _ = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut sink)).await;
            drop(socket);
            if accepted > 20 {
                break;
            }
        }
    });
    let model = client(
        Provider::OpenAi,
        &format!("http://{address}/v1"),
        true,
        Limits::default(),
    );
    let (result, notices, _) = turn(model.as_ref()).await;
    let message = result.as_ref().map(|_| ()).unwrap_err().to_string();
    assert!(
        matches!(result, Err(ModelError::NotHttp { .. })),
        "expected NotHttp, got {result:?}"
    );
    assert_eq!(
        message,
        format!(
            "the server at http://{address}/v1/chat/completions does not speak HTTP: it sent \
             \"SSH-2.0-OpenSSH_9.6\\r\\n\""
        ),
        "the message says what answered instead of 'could not reach'"
    );
    assert!(notices.is_empty(), "not retried: {notices:?}");
    server.abort();
}

#[tokio::test]
async fn a_password_in_the_base_url_is_sent_as_basic_auth_and_never_shown() {
    // Reached: the credentials go as basic auth, the query survives, the turn works.
    let server = FakeServer::with_responder(|_| Turn::text("done").into()).await;
    let base = server
        .url()
        .replace("http://", "http://grove:hunter2-secret@");
    let model = client(
        Provider::Anthropic,
        &format!("{base}?api-version=1"),
        true,
        Limits::default(),
    );
    let (result, _, _) = turn(model.as_ref()).await;
    assert!(
        result.is_ok(),
        "a query in the base URL stays a query, the path is the endpoint: {result:?}"
    );
    server.assert_no_violations();
    let auth = server.requests()[0]
        .header("authorization")
        .map(str::to_owned);
    assert_eq!(
        auth.as_deref(),
        Some("Basic Z3JvdmU6aHVudGVyMi1zZWNyZXQ="),
        "the userinfo travels as basic auth, not in the request line"
    );

    // Unreachable: every error text hides the password.
    let (url, listener) = silent_listener().await;
    let base = url.replace("http://", "http://grove:hunter2-secret@");
    let limits = Limits {
        retries: 1,
        first_byte: Duration::from_millis(200),
        ..Limits::default()
    };
    for provider in [Provider::Anthropic, Provider::OpenAi] {
        let model = client(provider, &base, true, limits);
        let (result, notices, _) = turn(model.as_ref()).await;
        let mut shown = vec![result.unwrap_err().to_string()];
        shown.extend(notices.iter().filter_map(|notice| match notice {
            ModelNotice::Retry(retry) => Some(retry.reason.clone()),
            ModelNotice::Waiting(_) => None,
        }));
        for text in &shown {
            assert!(
                !text.contains("hunter2") && text.contains("http://***@127.0.0.1"),
                "{provider}: the URL is shown with its userinfo hidden: {text}"
            );
        }
    }
    listener.abort();

    // A fragment is refused by name before anything is sent.
    let err = OpenAiClient::new(OpenAiConfig::new(
        "http://grove:hunter2-secret@127.0.0.1:9/v1?q=1#f",
        TEST_API_KEY,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("fragment (#f)") && !err.contains("hunter2"),
        "a fragment is refused without showing the password: {err}"
    );
}

/// Every file under `dir`, read as lossy text (the run store: journal, state.json,
/// transcripts).
fn texts_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(texts_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            found.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    found
}

#[tokio::test]
async fn grove_run_against_a_silent_api_shows_the_wait_ends_and_never_shows_the_password() {
    let (url, listener) = silent_listener().await;
    let fixture = crate::support::git_fixture::GitFixture::with_files(&[("a.txt", "a\n")]);
    let started = Instant::now();
    let output = tokio::time::timeout(
        GENEROUS,
        crate::support::grove::Grove::in_repo(&fixture)
            .env(
                "ANTHROPIC_BASE_URL",
                url.replace("http://", "http://grove:hunter2-secret@"),
            )
            .env("ANTHROPIC_API_KEY", TEST_API_KEY)
            .env("GROVE_MODEL_FIRST_BYTE_TIMEOUT_S", "0.6")
            .env("GROVE_MODEL_HEARTBEAT_S", "0.25")
            .env("GROVE_MODEL_TURN_TIMEOUT_S", "2")
            .grove_async(["run", "Fix the typo in a.txt."]),
    )
    .await
    .expect("grove ends on its own");
    listener.abort();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "a turn that never came fails the run"
    );
    assert!(
        stderr.lines().any(|line| {
            line.starts_with("lead: waiting for the model API (")
                && line.ends_with(" s, attempt 1 of 7)")
        }),
        "the user sees the lead waiting, with the attempt:\n{stderr}"
    );
    for shown in [
        "lead: retrying in ",
        "the model turn did not finish within 2s (attempt ",
    ] {
        assert!(
            stderr.contains(shown),
            "the user sees {shown:?} while and after waiting:\n{stderr}"
        );
    }
    assert!(started.elapsed() < GENEROUS, "bounded");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut leaks: Vec<String> = [("stderr", &stderr), ("stdout", &stdout)]
        .iter()
        .filter(|(_, text)| text.contains("hunter2"))
        .map(|(name, _)| (*name).to_owned())
        .collect();
    leaks.extend(
        texts_under(&fixture.repo.join(".git/grove"))
            .into_iter()
            .filter(|(_, text)| text.contains("hunter2"))
            .map(|(path, _)| path.display().to_string()),
    );
    assert_eq!(
        leaks,
        Vec::<String>::new(),
        "the base URL's password is printed and recorded nowhere"
    );
}

#[tokio::test]
async fn a_real_stream_labelled_text_plain_is_still_read_as_one() {
    let frames = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"labelled wrong"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let body: String = frames
        .iter()
        .map(|data| {
            let kind = serde_json::from_str::<serde_json::Value>(data).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned();
            format!("event: {kind}\ndata: {data}\n\n")
        })
        .collect();
    let server = FakeServer::with_script(vec![
        Reply::Raw {
            status: 200,
            body,
            headers: Vec::new(),
        }
        .with_header("content-type", "text/plain; charset=utf-8"),
    ])
    .await;
    let model = client(Provider::Anthropic, &server.url(), true, Limits::default());
    let (result, notices, _) = turn(model.as_ref()).await;
    let response = result.expect("an SSE body under a wrong label is still a stream");
    assert_eq!(
        (response.message.text(), notices.len()),
        ("labelled wrong".to_owned(), 0)
    );
}
