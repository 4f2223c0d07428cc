//! One cache for siblings (issue 46): the sibling hold over HTTP, the cache hints on
//! both wires, and a whole run's workers sharing the prefix the first one wrote, all
//! against the fake server's prompt cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use grove::event::EventSink;
use grove::model::{
    AnthropicClient, CacheHints, Message, Model, OpenAiClient, Provider, Request, Response,
    SIBLING_HOLD_VAR, Usage,
};
use grove::run::{ModelChoice, Models, RunEnd};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::fake_server::cache::{self, Lookup};
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::grove::{Grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{
    USER_TASK, lead_reply, options, repo_with_rules, reviewer_reply, worker_reply,
};

/// A system prompt long enough to be cached (the fake counts 4 characters a token; the
/// minimum is 1024 tokens).
fn long_system() -> String {
    "You are a careful engineer. ".repeat(200)
}

fn request(brief: &str, hints: CacheHints) -> Request {
    Request {
        model: "claude-sonnet-4-5".into(),
        system: long_system(),
        messages: vec![Message::user_text(brief)],
        tools: Vec::new(),
        max_tokens: 1024,
        cache: hints,
    }
}

fn sibling(long_wait: bool) -> CacheHints {
    CacheHints {
        key: Some(CacheHints::group("r1", "worker")),
        long_wait,
    }
}

/// An Anthropic client of `server` holding siblings up to `hold`.
fn client(server: &FakeServer, stream: bool, hold: Duration) -> Arc<dyn Model> {
    Arc::new(
        AnthropicClient::new(grove::model::AnthropicConfig {
            sibling_hold: hold,
            request_timeout: Duration::from_secs(30),
            ..server.anthropic_config(stream)
        })
        .unwrap(),
    )
}

async fn complete(model: &Arc<dyn Model>, request: &Request) -> Result<Response, String> {
    model
        .complete(request, &CancellationToken::new(), &|_| {})
        .await
        .map_err(|error| error.to_string())
}

/// Two siblings sent at once; the first one's reply is `first` (the second's a turn).
async fn two_siblings(
    server: &FakeServer,
    model: &Arc<dyn Model>,
    first: Reply,
) -> (Result<Response, String>, Result<Response, String>, Instant) {
    server.push(first);
    server.push(Turn::text("second"));
    let started = Instant::now();
    let (a, b) = (model.clone(), model.clone());
    let first =
        tokio::spawn(async move { complete(&a, &request("brief 1", sibling(false))).await });
    // The first request is in the hold's hands before the second enters it.
    while server.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let second =
        tokio::spawn(async move { complete(&b, &request("brief 2", sibling(false))).await });
    let second = second.await.unwrap();
    (first.await.unwrap(), second, started)
}

fn cached(usage: &Usage) -> (u64, u64) {
    (
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sibling_is_sent_only_once_the_first_response_began_and_reads_its_prefix() {
    for stream in [true, false] {
        let server = FakeServer::start().await;
        server.prompt_cache();
        let model = client(&server, stream, Duration::from_secs(60));
        let latency = Duration::from_millis(300);
        let (first, second, _) = two_siblings(
            &server,
            &model,
            Reply::Delayed {
                delay: latency,
                reply: Box::new(Turn::text("first").into()),
            },
        )
        .await;
        let (first, second) = (first.unwrap(), second.unwrap());
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "stream={stream}");
        assert!(
            requests[1].received_at >= requests[0].received_at + latency,
            "stream={stream}: the second sibling is sent only after the first's response began"
        );
        let (written, read) = (
            first.usage.cache_creation_input_tokens,
            second.usage.cache_read_input_tokens,
        );
        assert!(
            written >= 1024,
            "stream={stream}: the first writes the prefix: {:?}",
            first.usage
        );
        assert!(
            read >= 1024 && read < written,
            "stream={stream}: the second reads the shared system prompt the first wrote, \
             not its brief: {:?}",
            second.usage
        );
        server.assert_no_violations();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_hold_siblings_started_together_both_write() {
    let server = FakeServer::start().await;
    server.prompt_cache();
    let model = client(&server, true, Duration::ZERO);
    let (first, second, _) = two_siblings(
        &server,
        &model,
        Reply::Delayed {
            delay: Duration::from_millis(300),
            reply: Box::new(Turn::text("first").into()),
        },
    )
    .await;
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(
        cached(&second.usage).0,
        0,
        "nothing was written yet when it came"
    );
    assert_eq!(
        cached(&second.usage).1,
        cached(&first.usage).1,
        "each sibling pays the same write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_that_hangs_holds_its_sibling_no_longer_than_the_bound() {
    let server = FakeServer::start().await;
    server.prompt_cache();
    let bound = Duration::from_millis(400);
    let model = client(&server, true, bound);
    server.push(Reply::Hang);
    server.push(Turn::text("second"));
    let a = model.clone();
    let first =
        tokio::spawn(async move { complete(&a, &request("brief 1", sibling(false))).await });
    while server.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let entered = Instant::now();
    let second = complete(&model, &request("brief 2", sibling(false))).await;
    assert!(
        second.is_ok(),
        "the sibling goes once the bound passed: {second:?}"
    );
    assert!(
        entered.elapsed() >= bound,
        "it waited for the first response, up to the bound"
    );
    assert!(
        !first.is_finished(),
        "the sibling did not wait for the hung request to fail (its timeout is 30 s)"
    );
    first.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_first_request_releases_its_siblings_at_once() {
    let server = FakeServer::start().await;
    server.prompt_cache();
    let model = client(&server, true, Duration::from_secs(120));
    let (first, second, started) = two_siblings(
        &server,
        &model,
        Reply::Delayed {
            delay: Duration::from_millis(200),
            reply: Box::new(Reply::error(400, "invalid_request_error", "bad request")),
        },
    )
    .await;
    assert!(first.is_err(), "the first fails: {first:?}");
    assert!(second.is_ok(), "the sibling goes on: {second:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "released when the first failed, long before the 120 s bound"
    );
}

#[tokio::test]
async fn the_openai_wire_sends_the_cache_group_as_prompt_cache_key() {
    for stream in [true, false] {
        let server = FakeServer::with_script(vec![Turn::text("ok").into()]).await;
        let model: Arc<dyn Model> =
            Arc::new(OpenAiClient::new(server.openai_config(stream)).unwrap());
        complete(&model, &request("brief", sibling(false)))
            .await
            .unwrap();
        let body = &server.requests()[0].body;
        assert_eq!(
            body["prompt_cache_key"],
            Value::from("grove-r1-worker"),
            "stream={stream}: one key per role and run: {body}"
        );
        server.assert_no_violations();
    }
}

#[tokio::test]
async fn a_conversation_that_waits_long_writes_for_an_hour_and_reads_after_ten_minutes() {
    let server = FakeServer::start().await;
    server.prompt_cache();
    server.push(Turn::text("delegating"));
    server.push(Turn::text("done"));
    let model = client(&server, true, Duration::from_secs(30));
    let lead = request("the task", sibling(true));
    let first = complete(&model, &lead).await.unwrap();
    let controls: Vec<Value> = {
        let body = &server.requests()[0].body;
        [&body["system"][0], &body["messages"][0]["content"][0]]
            .iter()
            .map(|block| block["cache_control"].clone())
            .collect()
    };
    assert_eq!(
        controls,
        vec![serde_json::json!({"type": "ephemeral", "ttl": "1h"}); 2],
        "every breakpoint of a long-waiting conversation asks for an hour"
    );
    assert_eq!(
        server.cache_write_1h_sent(),
        first.usage.cache_creation_input_tokens,
        "all of its write lives an hour"
    );
    server.clock().advance(Duration::from_secs(10 * 60));
    let mut next = lead.clone();
    next.messages.push(first.message.clone());
    next.messages
        .push(Message::user_text("the subtasks are done"));
    let second = complete(&model, &next).await.unwrap();
    assert_eq!(
        second.usage.cache_read_input_tokens, first.usage.cache_creation_input_tokens,
        "after a 10-minute wait the whole history is read, not written again"
    );
    server.assert_no_violations();
}

/// A run whose lead delegates three subtasks at once, with the prompt cache on and the
/// workers' client holding siblings up to `hold`.
async fn three_workers(hold: Duration) -> Vec<(RecordedRequest, Lookup)> {
    let fixture = repo_with_rules();
    let server = three_subtasks().await;
    let choice = |name: &str| ModelChoice {
        client: client(&server, true, hold),
        name: name.into(),
    };
    let models = Models {
        provider: Provider::Anthropic.as_str().into(),
        lead: choice("claude-sonnet-4-5"),
        worker: choice("claude-sonnet-4-5"),
        reviewer: choice("claude-sonnet-4-5"),
    };
    let report = grove::run::run(
        &fixture.repo,
        options(&fixture, USER_TASK),
        models,
        EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.status, RunEnd::Finished, "{report:#?}");
    first_worker_requests(&server)
}

/// A server, its prompt cache on, whose lead delegates three subtasks at once; each
/// worker's first reply comes after a second.
async fn three_subtasks() -> FakeServer {
    let server = FakeServer::with_responder(|request| match who(request) {
        Who::Lead => lead_reply(
            request,
            &[
                ("Make a shout.\nWRITE src/a.txt ALPHA", None),
                ("Make b shout.\nWRITE src/b.txt BETA", None),
                ("Make c shout.\nWRITE src/c.txt GAMMA", None),
            ],
        ),
        Who::Worker if request.tool_results().is_empty() => Reply::Delayed {
            delay: Duration::from_millis(1000),
            reply: Box::new(worker_reply(request)),
        },
        Who::Worker => worker_reply(request),
        Who::Reviewer => reviewer_reply(request),
    })
    .await;
    server.prompt_cache();
    server
}

/// The workers' first requests of a finished run, with what the cache found for each.
fn first_worker_requests(server: &FakeServer) -> Vec<(RecordedRequest, Lookup)> {
    server.assert_no_violations();
    server
        .requests()
        .into_iter()
        .filter(|request| who(request) == Who::Worker && request.tool_results().is_empty())
        .map(|request| {
            let lookup = server.cache_lookup(&request.request_id).unwrap();
            (request, lookup)
        })
        .collect()
}

/// How many of `firsts` wrote their shared prefix (read less than half of it).
fn writers(firsts: &[(RecordedRequest, Lookup)]) -> usize {
    let shared = cache::tokens(shared_prefix(&firsts[0].0));
    firsts
        .iter()
        .filter(|(_, lookup)| lookup.read < shared / 2)
        .count()
}

/// The body up to its last breakpoint before the messages (the system prompt's).
fn shared_prefix(request: &RecordedRequest) -> &str {
    let end = request
        .raw_body
        .find("],\"messages\":")
        .expect("a body with a system prompt before its messages");
    &request.raw_body[..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_started_together_send_a_byte_identical_prefix_and_write_it_once() {
    let firsts = three_workers(Duration::from_secs(30)).await;
    assert_eq!(firsts.len(), 3, "three workers, one first request each");
    let prefix = shared_prefix(&firsts[0].0);
    assert!(
        prefix.ends_with("\"cache_control\":{\"type\":\"ephemeral\"}}"),
        "the shared prefix ends at the system prompt's breakpoint: …{}",
        &prefix[prefix.len().saturating_sub(80)..]
    );
    for (other, _) in &firsts[1..] {
        assert_eq!(
            shared_prefix(other),
            prefix,
            "siblings' tools and system prompt are byte-identical up to the breakpoint"
        );
    }
    assert!(
        cache::tokens(prefix) >= cache::minimum_tokens("claude-sonnet-4-5"),
        "the workers' prefix is long enough to be cached"
    );
    assert_eq!(
        writers(&firsts),
        1,
        "with the hold, one worker writes the shared prefix and the others read it: {firsts:#?}"
    );

    let without = three_workers(Duration::ZERO).await;
    assert_eq!(
        shared_prefix(&without[0].0),
        prefix,
        "the same prefix without the hold"
    );
    assert!(
        writers(&without) >= 2,
        "without it, workers started together each write it (main's behaviour)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_run_holds_siblings_by_default_and_the_variable_bounds_or_ends_the_hold() {
    for (hold, held) in [(None, true), (Some("0"), false)] {
        let fixture = repo_with_rules();
        let server = three_subtasks().await;
        let mut grove = Grove::in_repo(&fixture).with_server(&server);
        grove = match hold {
            // The runner turns the hold off for every other test: back to the default.
            None => grove.env_remove(SIBLING_HOLD_VAR),
            Some(seconds) => grove.env(SIBLING_HOLD_VAR, seconds),
        };
        let output = grove.grove_async(["run", USER_TASK, "--json"]).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let firsts = first_worker_requests(&server);
        assert_eq!(firsts.len(), 3);
        let writers = writers(&firsts);
        assert!(
            if held { writers == 1 } else { writers >= 2 },
            "{SIBLING_HOLD_VAR}={hold:?}: with the hold one worker writes the shared prefix, \
             without it the workers started together each do ({writers} did)"
        );
    }
}
