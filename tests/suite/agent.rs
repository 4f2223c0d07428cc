//! The agent loop against a scripted in-process model and small test tools.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use grove::agent::{
    AgentError, AgentOutcome, AgentRun, AgentSpec, CONTINUE_AFTER_MAX_TOKENS, Ledger, LoopInput,
    StopKind, TRUNCATED_TOOL_CALL, TurnObserver, TurnState, fork_messages, isolated_messages,
    run_agent,
};
use grove::event::{AgentId, AgentLabel, Event, EventSink};
use grove::model::{
    ContentBlock, Message, ModelError, Request, RetryNotice, Role, StopReason, ToolSpec, Usage,
};
use grove::status::SubtaskId;
use grove::tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::{Barrier, Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::support::scripted_model::{
    ScriptedModel, Step, assert_every_tool_use_answered, costing, reply, tool_result, tool_turn,
    tool_use, turn,
};

/// A deadlock guard, not a timing assertion: only a hung loop ever gets near it.
const HANG_GUARD: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- test tools

/// Read-only: answers with its `text` input, or fails with its `fail_with` input.
struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    fn description(&self) -> &str {
        "Repeats `text`."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    }
    fn mutates(&self) -> bool {
        false
    }
    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if let Some(message) = input.get("fail_with").and_then(Value::as_str) {
            return Ok(ToolOutput::error(message));
        }
        match input.get("text").and_then(Value::as_str) {
            Some(text) => Ok(ToolOutput::ok(text)),
            None => Err(ToolError::RespondToModel("`text` is required".to_owned())),
        }
    }
}

/// Read-only: its success is the agent's last act (as a reviewer's recorded verdict is);
/// with `fail` it fails, which ends nothing.
struct Conclude;

#[async_trait]
impl Tool for Conclude {
    fn name(&self) -> &'static str {
        "conclude"
    }
    fn description(&self) -> &str {
        "Records the conclusion."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn mutates(&self) -> bool {
        false
    }
    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        if input.get("fail").is_some() {
            return Ok(ToolOutput::error("not recorded"));
        }
        Ok(ToolOutput::last("recorded"))
    }
}

/// Mutating: logs `start <label>`, yields to the scheduler, logs `end <label>`.
/// Two of them running at once would interleave their lines.
struct Write {
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Tool for Write {
    fn name(&self) -> &'static str {
        "write"
    }
    fn description(&self) -> &str {
        "Writes `label`."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"label": {"type": "string"}}})
    }
    fn mutates(&self) -> bool {
        true
    }
    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let label = input["label"].as_str().unwrap_or("?").to_owned();
        self.log.lock().unwrap().push(format!("start {label}"));
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
        self.log.lock().unwrap().push(format!("end {label}"));
        Ok(ToolOutput::ok(format!("wrote {label}")))
    }
}

/// Read-only: waits until `parties` calls have arrived, then answers with its `label`.
/// Run one after another, two calls deadlock.
struct Meet {
    barrier: Arc<Barrier>,
}

#[async_trait]
impl Tool for Meet {
    fn name(&self) -> &'static str {
        "meet"
    }
    fn description(&self) -> &str {
        "Waits for the other callers."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn mutates(&self) -> bool {
        false
    }
    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.barrier.wait().await;
        Ok(ToolOutput::ok(input["label"].as_str().unwrap_or("?")))
    }
}

/// Read-only: signals that it started, then never finishes and ignores cancellation.
struct Stall {
    started: Arc<Notify>,
}

#[async_trait]
impl Tool for Stall {
    fn name(&self) -> &'static str {
        "stall"
    }
    fn description(&self) -> &str {
        "Never finishes."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn mutates(&self) -> bool {
        false
    }
    async fn run(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.started.notify_one();
        std::future::pending().await
    }
}

/// Fails fatally, as when the worktree vanished.
struct Explode;

#[async_trait]
impl Tool for Explode {
    fn name(&self) -> &'static str {
        "explode"
    }
    fn description(&self) -> &str {
        "Fails fatally."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn mutates(&self) -> bool {
        true
    }
    async fn run(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Fatal("the worktree vanished".to_owned()))
    }
}

/// Records every `after_turn` call; fails on `fail_on_turn`.
#[derive(Default)]
struct RecordingObserver {
    calls: Mutex<Vec<(u32, bool)>>,
    fail_on_turn: Option<u32>,
}

#[async_trait]
impl TurnObserver for RecordingObserver {
    async fn after_turn(
        &self,
        state: TurnState<'_>,
        mutated: bool,
    ) -> Result<(), grove::agent::ObserverError> {
        let turn = state.turn;
        self.calls.lock().unwrap().push((turn, mutated));
        if self.fail_on_turn == Some(turn) {
            return Err("checkpoint commit failed".into());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- harness

fn worker() -> AgentId {
    AgentId {
        role: "worker".to_owned(),
        label: AgentLabel::Subtask(SubtaskId(1)),
    }
}

fn spec(model: Arc<ScriptedModel>, tools: Registry) -> AgentSpec {
    AgentSpec {
        id: worker(),
        system: "You are a worker.".to_owned(),
        model,
        model_name: "test-model".to_owned(),
        max_tokens: 1000,
        max_turns: 10,
        budget_tokens: None,
        budget_usd: None,
        max_consecutive_tool_errors: 50,
        tools,
        cache: Default::default(),
    }
}

fn echo_only() -> Registry {
    Registry::new().with(Arc::new(Echo))
}

fn input(messages: Vec<Message>, cancel: CancellationToken, events: EventSink) -> LoopInput {
    LoopInput {
        messages,
        tool_context: ToolContext::plain(PathBuf::from("/nonexistent-grove-test-root"), cancel),
        events,
        observer: None,
    }
}

/// Runs `spec` on the brief "do it", failing the test if the loop hangs.
async fn run(spec: &AgentSpec) -> AgentRun {
    let loop_input = input(
        isolated_messages("do it"),
        CancellationToken::new(),
        EventSink::discard(),
    );
    guarded(run_agent(spec, loop_input)).await
}

async fn guarded<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, future)
        .await
        .expect("the agent loop hung")
}

fn outcome(run: &AgentRun) -> &AgentOutcome {
    match &run.result {
        Ok(outcome) => outcome,
        Err(error) => panic!("the loop failed: {error}"),
    }
}

fn assistant(content: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::Assistant,
        content,
    }
}

fn user(content: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::User,
        content,
    }
}

fn text(text: &str) -> ContentBlock {
    ContentBlock::Text {
        text: text.to_owned(),
    }
}

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: cache_read,
        cache_creation_input_tokens: cache_write,
    }
}

// ---------------------------------------------------------------- the loop

#[tokio::test]
async fn multi_turn_loop_answers_every_call_in_the_next_request() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tools = echo_only().with(Arc::new(Write { log: log.clone() }));
    let model = ScriptedModel::replying([
        tool_turn(&[
            ("c1", "echo", json!({"text": "one"})),
            ("c2", "echo", json!({"text": "two"})),
        ]),
        tool_turn(&[("c3", "write", json!({"label": "a"}))]),
        reply("all done"),
    ]);
    let spec = spec(model.clone(), tools);

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::Finished,
            final_text: "all done".to_owned(),
            detail: "the model ended its turn 3".to_owned(),
        }
    );
    let expected_transcript = vec![
        Message::user_text("do it"),
        assistant(vec![
            tool_use("c1", "echo", json!({"text": "one"})),
            tool_use("c2", "echo", json!({"text": "two"})),
        ]),
        user(vec![
            tool_result("c1", "one", false),
            tool_result("c2", "two", false),
        ]),
        assistant(vec![tool_use("c3", "write", json!({"label": "a"}))]),
        user(vec![tool_result("c3", "wrote a", false)]),
        assistant(vec![text("all done")]),
    ];
    assert_eq!(
        run.messages, expected_transcript,
        "the transcript is the brief, then each turn followed by its results"
    );
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        3,
        "one request per model turn, none after the end"
    );
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(
            request.messages,
            expected_transcript[..1 + 2 * index],
            "request {index} carries every message so far"
        );
        assert_every_tool_use_answered(&request.messages);
    }
    assert_eq!(*log.lock().unwrap(), ["start a", "end a"]);
}

#[tokio::test]
async fn request_carries_the_role_and_the_registry_tools() {
    let model = ScriptedModel::replying([reply("ok")]);
    let spec = spec(model.clone(), echo_only());

    run(&spec).await;

    assert_eq!(
        model.requests(),
        vec![Request {
            model: "test-model".to_owned(),
            system: "You are a worker.".to_owned(),
            messages: vec![Message::user_text("do it")],
            tools: vec![ToolSpec {
                name: "echo".to_owned(),
                description: "Repeats `text`.".to_owned(),
                input_schema: Echo.input_schema(),
            }],
            max_tokens: 1000,
            cache: Default::default(),
        }]
    );
}

#[tokio::test]
async fn non_mutating_calls_of_one_turn_run_concurrently() {
    let tools = Registry::new().with(Arc::new(Meet {
        barrier: Arc::new(Barrier::new(2)),
    }));
    let model = ScriptedModel::replying([
        tool_turn(&[
            ("m1", "meet", json!({"label": "first"})),
            ("m2", "meet", json!({"label": "second"})),
        ]),
        reply("met"),
    ]);
    let spec = spec(model.clone(), tools);

    // Each call waits for the other at a barrier: run one after the other, they deadlock.
    let run = run(&spec).await;

    assert_eq!(outcome(&run).stop, StopKind::Finished);
    assert_eq!(
        model.requests()[1].messages.last(),
        Some(&user(vec![
            tool_result("m1", "first", false),
            tool_result("m2", "second", false),
        ])),
        "concurrent results are appended in call order"
    );
}

#[tokio::test]
async fn mutating_calls_run_alone_in_call_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tools = echo_only().with(Arc::new(Write { log: log.clone() }));
    let model = ScriptedModel::replying([
        tool_turn(&[
            ("w1", "write", json!({"label": "1"})),
            ("e1", "echo", json!({"text": "between"})),
            ("w2", "write", json!({"label": "2"})),
            ("w3", "write", json!({"label": "3"})),
        ]),
        reply("written"),
    ]);
    let spec = spec(model.clone(), tools);

    let run = run(&spec).await;

    assert_eq!(outcome(&run).stop, StopKind::Finished);
    assert_eq!(
        *log.lock().unwrap(),
        ["start 1", "end 1", "start 2", "end 2", "start 3", "end 3"],
        "mutating calls never overlap and run in the order the model gave them"
    );
    assert_eq!(
        model.requests()[1].messages.last(),
        Some(&user(vec![
            tool_result("w1", "wrote 1", false),
            tool_result("e1", "between", false),
            tool_result("w2", "wrote 2", false),
            tool_result("w3", "wrote 3", false),
        ]))
    );
}

#[tokio::test]
async fn turn_cap_stops_the_loop_after_running_the_last_turns_tools() {
    let model = ScriptedModel::replying([
        tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
        turn(
            vec![
                text("still going"),
                tool_use("c2", "echo", json!({"text": "b"})),
            ],
            StopReason::ToolUse,
        ),
        reply("never asked for"),
    ]);
    let mut spec = spec(model.clone(), echo_only());
    spec.max_turns = 2;

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::TurnCap,
            final_text: "still going".to_owned(),
            detail: "stopped itself after 2 model turns, the turn cap of this role".to_owned(),
        }
    );
    assert_eq!(model.requests().len(), 2, "no request beyond the cap");
    assert_eq!(
        run.messages.last(),
        Some(&user(vec![tool_result("c2", "b", false)])),
        "the last allowed turn's tool calls still run and are answered"
    );
}

#[tokio::test]
async fn a_successful_last_act_ends_the_loop_without_another_request_and_a_failed_one_does_not() {
    let model = ScriptedModel::replying([
        tool_turn(&[("c1", "conclude", json!({"fail": true}))]),
        turn(
            vec![
                text("concluding"),
                tool_use("c2", "echo", json!({"text": "a"})),
                tool_use("c3", "conclude", json!({})),
            ],
            StopReason::ToolUse,
        ),
        reply("never asked for"),
    ]);
    let tools = echo_only().with(Arc::new(Conclude));
    let spec = spec(model.clone(), tools);

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::Finished,
            final_text: "concluding".to_owned(),
            detail: "its `conclude` call ended turn 2, its last".to_owned(),
        },
        "a failed last act lets the model try again; a recorded one ends the loop"
    );
    assert_eq!(model.requests().len(), 2, "no request after the last act");
    assert_eq!(
        run.messages.last(),
        Some(&user(vec![
            tool_result("c2", "a", false),
            tool_result("c3", "recorded", false),
        ])),
        "every call of the last turn is answered in the transcript"
    );
}

#[tokio::test]
async fn zero_max_turns_stops_before_the_first_request() {
    let model = ScriptedModel::replying([reply("never asked for")]);
    let mut spec = spec(model.clone(), echo_only());
    spec.max_turns = 0;

    let run = run(&spec).await;

    assert_eq!(outcome(&run).stop, StopKind::TurnCap);
    assert_eq!(model.requests(), Vec::<Request>::new());
}

#[tokio::test]
async fn budget_stops_before_running_the_turns_tools() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tools = echo_only().with(Arc::new(Write { log: log.clone() }));
    let model = ScriptedModel::replying([
        costing(
            tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
            usage(40, 10, 0, 0),
        ),
        costing(
            tool_turn(&[
                ("w1", "write", json!({"label": "1"})),
                ("w2", "write", json!({"label": "2"})),
            ]),
            usage(50, 10, 0, 0),
        ),
        reply("never asked for"),
    ]);
    let mut spec = spec(model.clone(), tools);
    spec.budget_tokens = Some(100);

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::Budget,
            final_text: String::new(),
            detail: "spent 110 tokens, reaching the budget of 100; stopped before running the \
                     2 tool calls of turn 2"
                .to_owned(),
        }
    );
    assert_eq!(
        *log.lock().unwrap(),
        Vec::<String>::new(),
        "nothing the over-budget turn asked for runs"
    );
    assert_eq!(model.requests().len(), 2);
    assert_eq!(run.ledger.total_tokens(), 110);
}

#[tokio::test]
async fn fifty_failing_calls_in_a_row_stop_the_loop_and_a_success_resets_the_count() {
    let bad_calls = |prefix: &str, count: usize| -> Vec<(String, &'static str, Value)> {
        (0..count)
            .map(|n| (format!("{prefix}{n}"), "nope", json!({})))
            .collect()
    };
    let as_turn = |calls: &[(String, &'static str, Value)]| {
        let borrowed: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, name, input)| (id.as_str(), *name, input.clone()))
            .collect();
        tool_turn(&borrowed)
    };
    let model = ScriptedModel::replying([
        as_turn(&bad_calls("a", 49)),
        tool_turn(&[("ok", "echo", json!({"text": "fine"}))]),
        as_turn(&bad_calls("b", 30)),
        as_turn(&bad_calls("c", 20)),
        reply("never asked for"),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::ToolErrors,
            final_text: String::new(),
            detail: "50 tool calls in a row failed; last: `nope`: tool `nope` is not available \
                     to you; your tools are: echo"
                .to_owned(),
        }
    );
    assert_eq!(
        model.requests().len(),
        4,
        "49 failures then a success do not stop the loop; 30 + 20 failures across turns do"
    );
    assert_every_tool_use_answered(&run.messages);
}

#[tokio::test]
async fn unknown_tools_and_invalid_input_are_answered_as_errors_and_the_loop_goes_on() {
    let model = ScriptedModel::replying([
        tool_turn(&[
            ("c1", "write_file", json!({"path": "a"})),
            ("c2", "echo", Value::String("{\"text\": \"cut".to_owned())),
            ("c3", "echo", json!({})),
            ("c4", "echo", json!({"text": ""})),
            ("c5", "echo", json!({"fail_with": ""})),
        ]),
        reply("recovered"),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(outcome(&run).stop, StopKind::Finished);
    assert_eq!(
        model.requests()[1].messages.last(),
        Some(&user(vec![
            tool_result(
                "c1",
                "tool `write_file` is not available to you; your tools are: echo",
                true
            ),
            tool_result(
                "c2",
                "the input to `echo` must be a JSON object matching its schema (it is not valid \
                 JSON: EOF while parsing a string at line 1 column 13); got: {\"text\": \"cut",
                true
            ),
            tool_result("c3", "`text` is required", true),
            tool_result("c4", "(no output)", false),
            tool_result("c5", "(the tool failed without a message)", true),
        ])),
        "errors are answers the model sees; an empty answer gets a placeholder"
    );
}

#[tokio::test]
async fn a_fatal_tool_error_stops_the_loop_and_keeps_the_cost() {
    let model = ScriptedModel::replying([
        costing(
            tool_turn(&[("x1", "explode", json!({}))]),
            usage(7, 3, 0, 0),
        ),
        reply("never asked for"),
    ]);
    let spec = spec(model.clone(), echo_only().with(Arc::new(Explode)));

    let run = run(&spec).await;

    match &run.result {
        Err(error @ AgentError::Tool { tool, message, .. }) => {
            assert_eq!(
                (tool.as_str(), message.as_str()),
                ("explode", "the worktree vanished")
            );
            assert_eq!(
                error.to_string(),
                "worker S1: tool `explode` failed fatally: the worktree vanished"
            );
        }
        other => panic!("expected a fatal tool error, got {other:?}"),
    }
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        run.ledger,
        Ledger {
            steps: 1,
            input_tokens: 7,
            output_tokens: 3,
            ..Ledger::default()
        },
        "a failed loop still reports what it cost"
    );
}

#[tokio::test]
async fn a_model_error_fails_the_loop_and_keeps_the_transcript() {
    let model = ScriptedModel::new([
        Step::Respond(costing(
            tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
            usage(5, 1, 0, 0),
        )),
        Step::Fail(ModelError::Decode("garbage".to_owned())),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert!(
        matches!(
            &run.result,
            Err(AgentError::Model {
                source: ModelError::Decode(message),
                ..
            }) if message == "garbage"
        ),
        "got {:?}",
        run.result
    );
    assert_eq!(run.ledger.steps, 1);
    assert_eq!(
        run.messages.len(),
        3,
        "brief, the first turn, its results: {:?}",
        run.messages
    );
}

#[tokio::test]
async fn cut_last_tool_call_is_answered_without_running_and_the_loop_goes_on() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tools = echo_only().with(Arc::new(Write { log: log.clone() }));
    let model = ScriptedModel::replying([
        turn(
            vec![
                text("writing"),
                tool_use("c1", "echo", json!({"text": "first"})),
                tool_use("c2", "write", Value::String("{\"label\": \"hal".to_owned())),
            ],
            StopReason::MaxTokens,
        ),
        reply("split it"),
    ]);
    let spec = spec(model.clone(), tools);

    let run = run(&spec).await;

    assert_eq!(outcome(&run).stop, StopKind::Finished);
    assert_eq!(
        model.requests()[1].messages.last(),
        Some(&user(vec![
            tool_result("c1", "first", false),
            tool_result("c2", TRUNCATED_TOOL_CALL, true),
        ]))
    );
    assert_eq!(
        *log.lock().unwrap(),
        Vec::<String>::new(),
        "a call cut at max_tokens never runs"
    );
}

#[tokio::test]
async fn text_cut_at_max_tokens_is_continued_once() {
    let model = ScriptedModel::replying([
        turn(
            vec![text("The summary: renamed Conf")],
            StopReason::MaxTokens,
        ),
        reply("ig::load everywhere."),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::Finished,
            final_text: "The summary: renamed Config::load everywhere.".to_owned(),
            detail: "the model ended its turn 2".to_owned(),
        }
    );
    assert_eq!(
        model.requests()[1].messages[1..],
        [
            assistant(vec![text("The summary: renamed Conf")]),
            Message::user_text(CONTINUE_AFTER_MAX_TOKENS),
        ]
    );
}

#[tokio::test]
async fn text_cut_at_max_tokens_twice_in_a_row_stops_the_loop() {
    let model = ScriptedModel::replying([
        turn(vec![text("a")], StopReason::MaxTokens),
        turn(vec![text("b")], StopReason::MaxTokens),
        reply("never asked for"),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::ModelStopped("max_tokens".to_owned()),
            final_text: "ab".to_owned(),
            detail: "the model's reply was cut at max_tokens (1000) in turns 1 and 2, even \
                     after it was asked to continue"
                .to_owned(),
        }
    );
}

#[tokio::test]
async fn an_empty_cut_turn_asks_to_continue_without_breaking_alternation() {
    let model = ScriptedModel::replying([
        tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
        turn(vec![], StopReason::MaxTokens),
        reply("ok"),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(outcome(&run).final_text, "ok");
    assert_eq!(
        model.requests()[2].messages[1..],
        [
            assistant(vec![tool_use("c1", "echo", json!({"text": "a"}))]),
            user(vec![
                tool_result("c1", "a", false),
                text(CONTINUE_AFTER_MAX_TOKENS)
            ]),
        ],
        "an empty turn is not sent back, and the request goes into the user turn already last"
    );
}

#[tokio::test]
async fn an_unknown_stop_reason_stops_the_loop_and_names_it() {
    let model = ScriptedModel::replying([turn(
        vec![text("hm")],
        StopReason::Other("model_context_window_exceeded".to_owned()),
    )]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::ModelStopped("model_context_window_exceeded".to_owned()),
            final_text: "hm".to_owned(),
            detail: "the model stopped turn 1 with `model_context_window_exceeded`, which grove \
                     cannot continue from"
                .to_owned(),
        }
    );
}

#[tokio::test]
async fn pause_turn_sends_the_assistant_message_back() {
    let model = ScriptedModel::replying([
        turn(vec![text("searching… ")], StopReason::PauseTurn),
        reply("found it"),
    ]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(outcome(&run).final_text, "searching… found it");
    assert_eq!(
        model.requests()[1].messages,
        vec![
            Message::user_text("do it"),
            assistant(vec![text("searching… ")]),
        ],
        "the paused turn goes back as the last message, with nothing after it"
    );
}

#[tokio::test]
async fn refusal_stops_the_loop() {
    let model = ScriptedModel::replying([turn(vec![text("I can't.")], StopReason::Refusal)]);
    let spec = spec(model.clone(), echo_only());

    let run = run(&spec).await;

    assert_eq!(
        outcome(&run),
        &AgentOutcome {
            stop: StopKind::ModelStopped("refusal".to_owned()),
            final_text: "I can't.".to_owned(),
            detail: "the model refused in turn 1".to_owned(),
        }
    );
}

#[tokio::test]
async fn observer_runs_after_each_tool_turn_and_its_failure_is_fatal() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let tools = echo_only().with(Arc::new(Write { log }));
    let model = ScriptedModel::replying([
        tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
        tool_turn(&[("w1", "write", json!({"label": "1"}))]),
        reply("done"),
    ]);
    let spec = spec(model.clone(), tools.clone());
    let observer = Arc::new(RecordingObserver::default());
    let mut loop_input = input(
        isolated_messages("do it"),
        CancellationToken::new(),
        EventSink::discard(),
    );
    loop_input.observer = Some(observer.clone());

    let run = guarded(run_agent(&spec, loop_input)).await;

    assert_eq!(outcome(&run).stop, StopKind::Finished);
    assert_eq!(
        *observer.calls.lock().unwrap(),
        [(1, false), (2, true)],
        "one call per turn with tool results, `mutated` only when a mutating tool ran"
    );

    let failing_model = ScriptedModel::replying([
        tool_turn(&[("c1", "echo", json!({"text": "a"}))]),
        reply("never asked for"),
    ]);
    let spec = self::spec(failing_model.clone(), tools);
    let mut loop_input = input(
        isolated_messages("do it"),
        CancellationToken::new(),
        EventSink::discard(),
    );
    loop_input.observer = Some(Arc::new(RecordingObserver {
        fail_on_turn: Some(1),
        ..RecordingObserver::default()
    }));

    let run = guarded(run_agent(&spec, loop_input)).await;

    assert_eq!(
        run.result.map_err(|error| error.to_string()).err(),
        Some("worker S1: after turn 1: checkpoint commit failed".to_owned())
    );
    assert_eq!(failing_model.requests().len(), 1);
}

// ---------------------------------------------------------------- cancellation

#[tokio::test]
async fn cancelling_mid_model_call_returns_cancelled() {
    for (step, kind) in [
        (Step::BlockUntilCancelled, "a model that honours the token"),
        (Step::Hang, "a model that ignores the token"),
    ] {
        let model = ScriptedModel::new([step]);
        let spec = Arc::new(spec(model.clone(), echo_only()));
        let cancel = CancellationToken::new();
        let loop_input = input(
            isolated_messages("do it"),
            cancel.clone(),
            EventSink::discard(),
        );
        let task = tokio::spawn({
            let spec = spec.clone();
            async move { run_agent(&spec, loop_input).await }
        });

        guarded(model.wait_until_blocked()).await;
        cancel.cancel();
        let run = guarded(task).await.unwrap();

        assert!(
            matches!(run.result, Err(AgentError::Cancelled { .. })),
            "{kind}: got {:?}",
            run.result
        );
    }
}

#[tokio::test]
async fn cancelling_mid_tool_returns_cancelled() {
    let started = Arc::new(Notify::new());
    let tools = echo_only().with(Arc::new(Stall {
        started: started.clone(),
    }));
    let model = ScriptedModel::replying([
        tool_turn(&[("s1", "stall", json!({}))]),
        reply("never asked for"),
    ]);
    let spec = Arc::new(spec(model.clone(), tools));
    let cancel = CancellationToken::new();
    let loop_input = input(
        isolated_messages("do it"),
        cancel.clone(),
        EventSink::discard(),
    );
    let task = tokio::spawn({
        let spec = spec.clone();
        async move { run_agent(&spec, loop_input).await }
    });

    guarded(started.notified()).await;
    cancel.cancel();
    let run = guarded(task).await.unwrap();

    assert!(
        matches!(run.result, Err(AgentError::Cancelled { .. })),
        "a tool that ignores the token is dropped; got {:?}",
        run.result
    );
    assert_eq!(model.requests().len(), 1);
    assert_eq!(
        run.messages.last().map(|message| message.role),
        Some(Role::Assistant),
        "the unanswered turn stays in the transcript for fork_messages to trim"
    );
}

// ---------------------------------------------------------------- ledger and events

#[tokio::test]
async fn ledger_sums_usage_and_events_tell_the_whole_story() {
    let notice = RetryNotice {
        attempt: 1,
        delay: Duration::from_millis(1500),
        reason: "HTTP 529 overloaded_error".to_owned(),
    };
    let model = ScriptedModel::new([
        Step::RetryThenRespond(
            vec![notice],
            costing(
                tool_turn(&[
                    ("c1", "echo", json!({"text": "a"})),
                    ("c2", "nope", json!({})),
                ]),
                usage(1200, 90, 0, 800),
            ),
        ),
        Step::Respond(costing(reply("done"), usage(2200, 200, 2900, 0))),
    ]);
    let spec = spec(model, echo_only());
    let (tx, mut rx) = mpsc::unbounded_channel();

    let run = guarded(run_agent(
        &spec,
        input(
            isolated_messages("do it"),
            CancellationToken::new(),
            EventSink::new(tx),
        ),
    ))
    .await;

    let total = Ledger {
        steps: 2,
        input_tokens: 3400,
        output_tokens: 290,
        cache_read_tokens: 2900,
        cache_write_tokens: 800,
    };
    assert_eq!(run.ledger, total);
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    assert_eq!(
        events,
        vec![
            Event::AgentStarted { agent: worker() },
            Event::ModelRetry {
                agent: worker(),
                attempt: 1,
                delay_ms: 1500,
                reason: "HTTP 529 overloaded_error".to_owned(),
            },
            Event::TurnCompleted {
                agent: worker(),
                turn: 1,
                ledger: Ledger {
                    steps: 1,
                    input_tokens: 1200,
                    output_tokens: 90,
                    cache_read_tokens: 0,
                    cache_write_tokens: 800,
                },
            },
            Event::ToolCalled {
                agent: worker(),
                tool: "echo".to_owned(),
                is_error: false,
            },
            Event::ToolCalled {
                agent: worker(),
                tool: "nope".to_owned(),
                is_error: true,
            },
            Event::TurnCompleted {
                agent: worker(),
                turn: 2,
                ledger: total,
            },
            Event::AgentFinished {
                agent: worker(),
                ledger: total,
                outcome: "finished: the model ended its turn 2".to_owned(),
            },
        ]
    );
    assert_eq!(
        total.line(&worker()).to_string(),
        "[worker S1 · steps=2 in=3400 out=290 cache_read=2900 cache_write=800]"
    );
}

#[tokio::test]
async fn agent_finished_is_emitted_on_failure_too() {
    let model = ScriptedModel::new([Step::Fail(ModelError::Config("no API key".to_owned()))]);
    let spec = spec(model, echo_only());
    let (tx, mut rx) = mpsc::unbounded_channel();

    guarded(run_agent(
        &spec,
        input(
            isolated_messages("do it"),
            CancellationToken::new(),
            EventSink::new(tx),
        ),
    ))
    .await;

    let mut last = None;
    while let Ok(event) = rx.try_recv() {
        last = Some(event);
    }
    assert_eq!(
        last,
        Some(Event::AgentFinished {
            agent: worker(),
            ledger: Ledger::default(),
            outcome: "failed: worker S1: no API key".to_owned(),
        })
    );
}

// ---------------------------------------------------------------- context modes

#[test]
fn isolated_messages_are_the_brief_alone() {
    assert_eq!(
        isolated_messages("rename Config::load"),
        vec![Message::user_text("rename Config::load")]
    );
}

#[test]
fn fork_drops_the_pending_delegate_call_and_keeps_the_lead_text() {
    let lead = vec![
        Message::user_text("the task"),
        assistant(vec![tool_use("r1", "read_file", json!({"path": "a.rs"}))]),
        user(vec![tool_result("r1", "fn a() {}", false)]),
        assistant(vec![
            text("I will split this."),
            tool_use("d1", "delegate", json!({"task": "part 1"})),
            tool_use("d2", "delegate", json!({"task": "part 2"})),
        ]),
    ];

    assert_eq!(
        fork_messages(&lead, "part 1"),
        vec![
            Message::user_text("the task"),
            assistant(vec![tool_use("r1", "read_file", json!({"path": "a.rs"}))]),
            user(vec![tool_result("r1", "fn a() {}", false)]),
            assistant(vec![text("I will split this.")]),
            Message::user_text("part 1"),
        ]
    );
}

#[test]
fn fork_drops_an_assistant_turn_left_empty_and_merges_the_brief_into_the_user_turn() {
    let lead = vec![
        Message::user_text("the task"),
        assistant(vec![tool_use("r1", "read_file", json!({"path": "a.rs"}))]),
        user(vec![tool_result("r1", "fn a() {}", false)]),
        assistant(vec![tool_use("d1", "delegate", json!({"task": "part 1"}))]),
    ];

    assert_eq!(
        fork_messages(&lead, "part 1"),
        vec![
            Message::user_text("the task"),
            assistant(vec![tool_use("r1", "read_file", json!({"path": "a.rs"}))]),
            user(vec![tool_result("r1", "fn a() {}", false), text("part 1")]),
        ],
        "user and assistant turns must alternate, tool results first"
    );
}

#[test]
fn fork_of_an_empty_or_finished_history() {
    assert_eq!(
        fork_messages(&[], "brief"),
        vec![Message::user_text("brief")]
    );
    let finished = vec![
        Message::user_text("the task"),
        assistant(vec![text("done")]),
    ];
    assert_eq!(
        fork_messages(&finished, "brief"),
        vec![
            Message::user_text("the task"),
            assistant(vec![text("done")]),
            Message::user_text("brief"),
        ]
    );
}
