//! The agent loop: one plain `loop` that every role runs with its own data.
//!
//! This file owns the turn protocol between a model and a tool registry. It must never
//! decide which tool mutates what (the [`Registry`] says), touch git (the caller's
//! [`TurnObserver`] does that between turns), or print (it emits [`Event`]s).
//!
//! # Contract of [`run_agent`]
//!
//! Every iteration is one model turn:
//!
//! 1. If `max_turns` turns were taken, stop with [`StopKind::TurnCap`].
//! 2. Send one [`Request`]: the role's model name, system prompt, every message so far,
//!    the registry's tools, `max_tokens`. The usage goes to the ledger, the assistant
//!    message is appended to the transcript, [`Event::TurnCompleted`] is emitted.
//! 3. Decide from the response:
//!    - `refusal` → stop with [`StopKind::ModelStopped`]`("refusal")`;
//!    - tool calls present (whatever the stop reason) → run them (below);
//!    - no tool calls and `end_turn`, `stop_sequence` or `tool_use` → [`StopKind::Finished`];
//!    - no tool calls and `max_tokens` → append [`CONTINUE_AFTER_MAX_TOKENS`] as a user
//!      message and take another turn, once: a second cut in a row stops with
//!      `ModelStopped("max_tokens")`, because a model that cannot finish its answer in
//!      two turns is not converging;
//!    - no tool calls and `pause_turn` → send the assistant message back unchanged so
//!      the provider resumes the paused turn;
//!    - any other stop reason → stop with `ModelStopped(<reason>)`.
//! 4. Before any further work (running tool calls, asking to continue), stop with
//!    [`StopKind::Budget`] if the ledger reached `budget_tokens` or costs `budget_usd`. A budget is
//!    about spending, so nothing the over-budget turn asked for is run.
//! 5. Run the tool calls in call order: each maximal run of consecutive non-mutating
//!    calls runs concurrently, each mutating call runs alone. When the response was cut
//!    at `max_tokens` and ends with a tool call, that last call's input may be cut too:
//!    it is not run but answered with [`TRUNCATED_TOOL_CALL`].
//! 6. Append one user message holding one `tool_result` per `tool_use`, same ids, in
//!    call order, and nothing else (an empty result text is replaced by a placeholder).
//! 7. Add the observer's `news` (grove's own word to the model, if any) as text to that
//!    message, then call its `after_turn(state, mutated)`; its error is fatal. (Its
//!    `before_tools` sees the history just before step 5.)
//! 8. If a call of the turn succeeded with [`ToolOutput::ends_loop`] (a reviewer's
//!    recorded verdict), stop with [`StopKind::Finished`]: nothing the model says after
//!    its last act is worth a request.
//! 9. Count erroring tool calls in a row across turns (a success resets the count);
//!    once it reaches `max_consecutive_tool_errors`, stop with [`StopKind::ToolErrors`].
//!    The tool calls of the turn that hits the turn cap still run (a reviewer's last
//!    turn may be its verdict), then step 1 stops the loop.
//!
//! Cancelling `tool_context.cancel` aborts the model call or the running tools and
//! returns [`AgentError::Cancelled`] promptly, even when a model client or a tool does
//! not honour the token itself (its future is dropped).
//!
//! The transcript may end with an assistant turn whose tool calls have no results (a
//! refusal, the budget, a cancellation, a fatal tool error); [`super::fork_messages`]
//! trims such a turn. [`Event::AgentStarted`] opens every run and
//! [`Event::AgentFinished`] closes it, failures included.

use futures_util::future::join_all;
use serde_json::Value;

use crate::agent::context::append_user_text;
use crate::agent::{
    AgentError, AgentOutcome, AgentSpec, Ledger, LoopInput, StopKind, TurnObserver, TurnState,
};
use crate::event::{AgentId, Event, EventSink};
use crate::model::{
    ContentBlock, Message, ModelError, ModelNotice, Request, Response, Role, StopReason, ToolSpec,
};
use crate::text::truncate;
use crate::tools::{Registry, ToolContext, ToolError, ToolOutput, exited_non_zero};

/// The user message that asks the model to go on after its text was cut at `max_tokens`.
pub const CONTINUE_AFTER_MAX_TOKENS: &str =
    "Your reply was cut off at the output token limit. Continue exactly where you stopped.";

/// The tool result for a tool call that was cut at `max_tokens` and therefore not run.
pub const TRUNCATED_TOOL_CALL: &str = "This tool call was not run: your output was cut at \
     max_tokens, so its input may be incomplete. Send smaller inputs, e.g. split a large \
     file into several smaller writes or edits.";

/// The result text of a tool that succeeded without output.
const NO_OUTPUT: &str = "(no output)";

/// The result text of a tool that failed without saying why.
const NO_ERROR_MESSAGE: &str = "(the tool failed without a message)";

/// How much of a failing tool's message the [`StopKind::ToolErrors`] detail quotes.
const QUOTED_ERROR_CHARS: usize = 300;

/// One finished loop: what it cost and said, and how it ended.
///
/// The ledger and the transcript are kept even when `result` is an error, because the
/// run report must show what a failed subagent cost.
#[derive(Debug)]
pub struct AgentRun {
    pub ledger: Ledger,
    /// The whole conversation, initial messages included.
    pub messages: Vec<Message>,
    pub result: Result<AgentOutcome, AgentError>,
}

/// Runs one agent loop to its end; see the module documentation for the contract.
pub async fn run_agent(spec: &AgentSpec, input: LoopInput) -> AgentRun {
    let LoopInput {
        messages,
        tool_context,
        events,
        observer,
    } = input;
    events.emit(Event::AgentStarted {
        agent: spec.id.clone(),
    });
    let mut conversation = Conversation {
        spec,
        tool_context,
        events,
        observer,
        request: Request {
            model: spec.model_name.clone(),
            system: spec.system.clone(),
            messages,
            tools: tool_specs(&spec.tools),
            max_tokens: spec.max_tokens,
            cache: spec.cache.clone(),
        },
        ledger: Ledger::default(),
        error_streak: ErrorStreak::default(),
    };
    let result = conversation.run().await;
    let outcome = match &result {
        Ok(outcome) => format!("{}: {}", outcome.stop, outcome.detail),
        Err(error) => format!("failed: {error}"),
    };
    conversation.events.emit(Event::AgentFinished {
        agent: spec.id.clone(),
        ledger: conversation.ledger,
        outcome,
    });
    AgentRun {
        ledger: conversation.ledger,
        messages: conversation.request.messages,
        result,
    }
}

/// The registry's tools as the model is shown them, in the registry's stable order.
fn tool_specs(registry: &Registry) -> Vec<ToolSpec> {
    registry
        .descriptions()
        .into_iter()
        .map(|tool| ToolSpec {
            name: tool.name,
            description: tool.description,
            input_schema: tool.input_schema,
        })
        .collect()
}

/// The state of one loop; the transcript lives in `request.messages` so no turn copies it.
struct Conversation<'a> {
    spec: &'a AgentSpec,
    tool_context: ToolContext,
    events: EventSink,
    observer: Option<std::sync::Arc<dyn TurnObserver>>,
    request: Request,
    ledger: Ledger,
    error_streak: ErrorStreak,
}

/// Consecutive erroring tool calls, across turns.
#[derive(Debug, Default)]
struct ErrorStreak {
    count: u32,
    /// The latest failure, as `` `tool`: message ``.
    last: String,
}

impl ErrorStreak {
    fn record(&mut self, tool: &str, output: &ToolOutput) {
        if output.is_error {
            self.count += 1;
            self.last = format!(
                "`{tool}`: {}",
                truncate(&output.content, QUOTED_ERROR_CHARS)
            );
        } else {
            self.count = 0;
            self.last.clear();
        }
    }
}

/// One tool call of the current turn.
struct ToolCall {
    id: String,
    name: String,
    input: Value,
}

/// One model turn as the loop reads it.
struct Reply {
    text: String,
    calls: Vec<ToolCall>,
    stop_reason: StopReason,
    /// The message's last block is a tool call (with `max_tokens`, that call may be cut).
    ends_with_tool_call: bool,
}

/// One logical answer that spans turns: a `max_tokens` cut the model was asked to
/// continue, or a paused turn; its text is joined into the final text.
#[derive(Debug, Default)]
struct Answer {
    carried_text: String,
    asked_to_continue: bool,
}

/// The answered tool calls of one turn, in call order.
struct TurnResults {
    answers: Vec<(String, ToolOutput)>,
    /// True when a mutating tool ran (even if it then failed: it may have half-written).
    mutated: bool,
}

impl Conversation<'_> {
    /// The loop: one model turn per pass, capped by the role's `max_turns`, ended early by
    /// the cancellation token (checked before every turn and raced against every wait).
    async fn run(&mut self) -> Result<AgentOutcome, AgentError> {
        let mut turn: u32 = 0;
        let mut answer = Answer::default();
        let mut last_text = String::new();
        loop {
            if turn >= self.spec.max_turns {
                return Ok(AgentOutcome {
                    stop: StopKind::TurnCap,
                    final_text: last_text,
                    detail: format!(
                        "stopped itself after {turn} model turns, the turn cap of this role"
                    ),
                });
            }
            if self.tool_context.cancel.is_cancelled() {
                return Err(self.cancelled());
            }
            turn += 1;
            let reply = self.take_turn(turn).await?;
            let answer_text = format!("{}{}", answer.carried_text, reply.text);
            last_text = reply.text;
            if reply.stop_reason == StopReason::Refusal || reply.calls.is_empty() {
                match self.without_tools(turn, &reply.stop_reason, answer_text, &mut answer) {
                    Some(outcome) => return Ok(outcome),
                    None => continue,
                }
            }
            let skipped = format!(
                "running the {} of turn {turn}",
                plural(reply.calls.len(), "tool call", "tool calls")
            );
            if let Some(stop) = self.over_budget(&answer_text, &skipped) {
                return Ok(stop);
            }
            answer = Answer::default();
            let last_call =
                if reply.stop_reason == StopReason::MaxTokens && reply.ends_with_tool_call {
                    LastCall::Cut
                } else {
                    LastCall::Whole
                };
            if let Some(stop) = self
                .answer_tool_calls(turn, &reply.calls, last_call, &last_text)
                .await?
            {
                return Ok(stop);
            }
        }
    }

    /// One model turn: asks the model, counts its usage, appends its message to the
    /// conversation and reports the turn.
    async fn take_turn(&mut self, turn: u32) -> Result<Reply, AgentError> {
        let Response {
            message,
            stop_reason,
            usage,
            request_id: _,
        } = self.complete().await?;
        self.ledger.record(&usage);
        if message.role != Role::Assistant {
            return Err(AgentError::Model {
                agent: self.spec.id.clone(),
                source: ModelError::Decode(format!(
                    "turn {turn} came back as a {:?} message, not an assistant message",
                    message.role
                )),
            });
        }
        let calls: Vec<ToolCall> = message
            .tool_uses()
            .map(|(id, name, input)| ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                input: input.clone(),
            })
            .collect();
        let ends_with_tool_call =
            matches!(message.content.last(), Some(ContentBlock::ToolUse { .. }));
        let text = message.text();
        // An empty assistant message would be rejected when sent back; it says nothing.
        if !message.content.is_empty() {
            self.request.messages.push(message);
        }
        self.events.emit(Event::TurnCompleted {
            agent: self.spec.id.clone(),
            turn,
            ledger: self.ledger,
        });
        Ok(Reply {
            text,
            calls,
            stop_reason,
            ends_with_tool_call,
        })
    }

    /// What a turn without tool calls (or a refusal) means: the loop's outcome, or `None`
    /// when the model is asked to go on (a `max_tokens` cut once, a paused turn), with
    /// `answer` carrying the text so far.
    fn without_tools(
        &mut self,
        turn: u32,
        stop_reason: &StopReason,
        answer_text: String,
        answer: &mut Answer,
    ) -> Option<AgentOutcome> {
        let (stop, detail) = match stop_reason {
            StopReason::Refusal => (
                StopKind::ModelStopped("refusal".to_owned()),
                format!("the model refused in turn {turn}"),
            ),
            StopReason::EndTurn | StopReason::StopSequence | StopReason::ToolUse => (
                StopKind::Finished,
                format!("the model ended its turn {turn}"),
            ),
            StopReason::MaxTokens if answer.asked_to_continue => (
                StopKind::ModelStopped("max_tokens".to_owned()),
                format!(
                    "the model's reply was cut at max_tokens ({}) in turns {} and \
                     {turn}, even after it was asked to continue",
                    self.spec.max_tokens,
                    turn - 1
                ),
            ),
            StopReason::MaxTokens => {
                if let Some(stop) = self.over_budget(&answer_text, "asking the model to continue") {
                    return Some(stop);
                }
                // After an empty cut turn the last message is still the user's.
                append_user_text(&mut self.request.messages, CONTINUE_AFTER_MAX_TOKENS);
                answer.asked_to_continue = true;
                answer.carried_text = answer_text;
                return None;
            }
            StopReason::PauseTurn => {
                if let Some(stop) = self.over_budget(&answer_text, "resuming the paused turn") {
                    return Some(stop);
                }
                answer.asked_to_continue = false;
                answer.carried_text = answer_text;
                return None;
            }
            StopReason::Other(reason) => (
                StopKind::ModelStopped(reason.clone()),
                format!(
                    "the model stopped turn {turn} with `{reason}`, which grove cannot \
                     continue from"
                ),
            ),
        };
        Some(AgentOutcome {
            stop,
            final_text: answer_text,
            detail,
        })
    }

    /// Runs one turn's tool calls, appends their results, lets the observer see the
    /// turn, and returns the [`StopKind::ToolErrors`] outcome once too many failed in a
    /// row. The observer is never interrupted: a cancellation during it is seen at the
    /// top of the next turn.
    async fn answer_tool_calls(
        &mut self,
        turn: u32,
        calls: &[ToolCall],
        last_call: LastCall,
        last_text: &str,
    ) -> Result<Option<AgentOutcome>, AgentError> {
        if let Some(observer) = &self.observer {
            let repeatable = self
                .spec
                .tools
                .all_repeatable(calls.iter().map(|call| call.name.as_str()));
            let state = TurnState {
                turn,
                messages: &self.request.messages,
                ledger: &self.ledger,
            };
            observer
                .before_tools(state, repeatable)
                .await
                .map_err(|source| AgentError::Observer {
                    agent: self.spec.id.clone(),
                    turn,
                    source,
                })?;
        }
        let results = tokio::select! {
            biased;
            () = self.tool_context.cancel.cancelled() => return Err(self.cancelled()),
            results = execute_calls(
                &self.spec.tools,
                &self.tool_context,
                &self.events,
                &self.spec.id,
                calls,
                last_call,
            ) => results?,
        };
        for (call, (_, output)) in calls.iter().zip(&results.answers) {
            self.error_streak.record(&call.name, output);
        }
        let ended_by = calls
            .iter()
            .zip(&results.answers)
            .find(|(_, (_, output))| output.ends_loop && !output.is_error)
            .map(|(call, _)| call.name.clone());
        self.request.messages.push(Message {
            role: Role::User,
            content: calls
                .iter()
                .zip(results.answers)
                .map(|(call, (tool_use_id, output))| {
                    // A command that ran and exited non-zero is its output and status, not
                    // a failed call: the model reads it as a result (the loop still counts
                    // it as a failure).
                    let is_error = output.is_error
                        && !(call.name == "bash" && exited_non_zero(&output.content));
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content: shown_content(output.content, is_error),
                        is_error,
                    }
                })
                .collect(),
        });
        if let Some(observer) = &self.observer {
            if let Some(news) = observer.news().await {
                append_user_text(&mut self.request.messages, &news);
            }
            observer
                .after_turn(
                    TurnState {
                        turn,
                        messages: &self.request.messages,
                        ledger: &self.ledger,
                    },
                    results.mutated,
                )
                .await
                .map_err(|source| AgentError::Observer {
                    agent: self.spec.id.clone(),
                    turn,
                    source,
                })?;
        }
        if let Some(tool) = ended_by {
            return Ok(Some(AgentOutcome {
                stop: StopKind::Finished,
                final_text: last_text.to_owned(),
                detail: format!("its `{tool}` call ended turn {turn}, its last"),
            }));
        }
        let cap = self.spec.max_consecutive_tool_errors;
        if cap == 0 || self.error_streak.count < cap {
            return Ok(None);
        }
        Ok(Some(AgentOutcome {
            stop: StopKind::ToolErrors,
            final_text: last_text.to_owned(),
            detail: format!(
                "{} in a row failed; last: {}",
                plural(self.error_streak.count as usize, "tool call", "tool calls"),
                self.error_streak.last
            ),
        }))
    }

    /// One model turn, aborted when the loop is cancelled.
    async fn complete(&self) -> Result<Response, AgentError> {
        let agent = &self.spec.id;
        let events = &self.events;
        let on_retry = |notice: ModelNotice| events.emit(Event::from_model(agent, notice));
        let cancel = &self.tool_context.cancel;
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(self.cancelled()),
            result = self.spec.model.complete(&self.request, cancel, &on_retry) => result,
        };
        result.map_err(|source| match source {
            ModelError::Cancelled => self.cancelled(),
            source => AgentError::Model {
                agent: agent.clone(),
                source,
            },
        })
    }

    /// The [`StopKind::Budget`] outcome when the budget (tokens or dollars) is spent,
    /// saying what was skipped.
    fn over_budget(&self, final_text: &str, skipped: &str) -> Option<AgentOutcome> {
        let spent = self.ledger.total_tokens();
        let tokens = self
            .spec
            .budget_tokens
            .filter(|budget| spent >= *budget)
            .map(|budget| format!("spent {spent} tokens, reaching the budget of {budget}"));
        let reached = tokens.or_else(|| {
            self.spec
                .budget_usd
                .and_then(|budget| budget.spent(&self.spec.model_name, &self.ledger))
        })?;
        Some(AgentOutcome {
            stop: StopKind::Budget,
            final_text: final_text.to_owned(),
            detail: format!("{reached}; stopped before {skipped}"),
        })
    }

    fn cancelled(&self) -> AgentError {
        AgentError::Cancelled {
            agent: self.spec.id.clone(),
        }
    }
}

/// Whether the last tool call of an answer arrived whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastCall {
    /// Every call is complete: each one runs.
    Whole,
    /// The answer hit its token cap while writing the last call: that call is answered
    /// with an error asking for a shorter one, never run on cut arguments.
    Cut,
}

/// Runs one turn's tool calls: consecutive non-mutating calls together, mutating calls
/// alone, answers in call order. Stops at the first batch holding a fatal error.
async fn execute_calls(
    registry: &Registry,
    tool_context: &ToolContext,
    events: &EventSink,
    agent: &AgentId,
    calls: &[ToolCall],
    last_call: LastCall,
) -> Result<TurnResults, AgentError> {
    let (runnable, cut) = match calls.split_last() {
        Some((last, earlier)) if last_call == LastCall::Cut => (earlier, Some(last)),
        _ => (calls, None),
    };
    let mut results = TurnResults {
        answers: Vec::with_capacity(calls.len()),
        mutated: false,
    };
    let runs_alone = |call: &ToolCall| registry.mutates(&call.name);
    for batch in runnable.chunk_by(|a, b| !runs_alone(a) && !runs_alone(b)) {
        results.mutated |= batch
            .iter()
            .any(|call| registry.get(&call.name).is_some_and(|tool| tool.mutates()));
        let outputs = join_all(batch.iter().map(|call| async move {
            let tool_context = ToolContext {
                call_id: Some(call.id.clone()),
                ..tool_context.clone()
            };
            let output = match registry
                .dispatch(&call.name, call.input.clone(), &tool_context)
                .await
            {
                Ok(output) => Ok(output),
                // The registry already answers these as outputs; kept data if it ever does not.
                Err(ToolError::RespondToModel(message)) => Ok(ToolOutput::error(message)),
                Err(ToolError::Fatal(message)) => Err(message),
            };
            events.emit(Event::ToolCalled {
                agent: agent.clone(),
                tool: call.name.clone(),
                is_error: match &output {
                    Ok(output) => output.is_error,
                    Err(_) => true,
                },
            });
            output
        }))
        .await;
        for (call, output) in batch.iter().zip(outputs) {
            match output {
                Ok(output) => results.answers.push((call.id.clone(), output)),
                Err(message) => {
                    return Err(AgentError::Tool {
                        agent: agent.clone(),
                        tool: call.name.clone(),
                        message,
                    });
                }
            }
        }
    }
    if let Some(call) = cut {
        events.emit(Event::ToolCalled {
            agent: agent.clone(),
            tool: call.name.clone(),
            is_error: true,
        });
        results
            .answers
            .push((call.id.clone(), ToolOutput::error(TRUNCATED_TOOL_CALL)));
    }
    Ok(results)
}

/// A tool result's text as sent: never empty, because a provider may reject an empty
/// error result and an empty success reads to the model like a lost answer.
fn shown_content(content: String, is_error: bool) -> String {
    match (content.is_empty(), is_error) {
        (false, _) => content,
        (true, false) => NO_OUTPUT.to_owned(),
        (true, true) => NO_ERROR_MESSAGE.to_owned(),
    }
}

/// `count` followed by the singular or plural noun.
fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("1 {one}")
    } else {
        format!("{count} {many}")
    }
}
