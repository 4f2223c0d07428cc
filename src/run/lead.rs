//! The lead: its first prompt and spec (one place, for the run and the dry run), and its
//! loop, which needs no worktree.
//!
//! This file owns what the lead sees: the user's task, read-only tools on the run's
//! result as it is at each call, read from git objects (never the user's uncommitted or
//! ignored files), and `delegate`. It must never
//! give the lead a tool that writes, and never let anything but a subtask's bounded
//! result reach its conversation.

use std::sync::Arc;

use crate::agent::roles::{self, ProjectRules, RoleKind};
use crate::agent::{
    AgentError, AgentRun, AgentSpec, Ledger, StopKind, TurnObserver, isolated_messages,
};
use crate::event::{AgentId, AgentLabel};
use crate::git::GitError;
use crate::model::{ContentBlock, Message, Role};
use crate::run::agents::agent_catalogue;
use crate::run::check::ratchet;
use crate::run::context::{AgentCaps, RunContext, RunFacts, RunRecord, agent_spec};
use crate::run::delegate::{Delegate, Wait};
use crate::run::lead_news::ResultNews;
use crate::run::observer::AgentObserver;
use crate::run::report::SubtaskReport;
use crate::run::show_subtask::ShowSubtask;
use crate::run::subtask::Subtasks;
use crate::run::subtask::close::lead_result;
use crate::settings::options::{History, ModelChoice, RunOptions};
use crate::store::StoreError;
use crate::store::state::Delivery;
use crate::store::transcript::{self, AgentTiming, PendingAnswer, Transcript};
use crate::tools::Registry;
use crate::tools::result_tree::{self, LiveTree};

/// The lead's first message: the user's task and what to do with it.
pub(crate) fn first_prompt(task: &str) -> String {
    format!(
        "# Task\n\n{task}\n\nPlan the work, delegate it with `delegate`, and end with a \
         summary."
    )
}

/// The lead's spec: its role's prompt with the project rules and the project's check,
/// read-only tools plus `delegate` (in `tools`), the run's budget.
pub(crate) fn lead_spec(
    options: &RunOptions,
    rules: Option<&ProjectRules>,
    model: &ModelChoice,
    tools: Registry,
) -> AgentSpec {
    let mut spec = agent_spec(
        options,
        rules,
        AgentId::lead(),
        &roles::builtin(RoleKind::Lead),
        AgentCaps {
            model,
            max_turns: options.max_turns.lead,
            budget: options.budget_tokens,
            tools,
        },
    );
    if let Some(check) = &options.check {
        spec.system.push_str(&format!(
            "\n\n# The project's check\n\n`{}` is the project's check. grove runs it on \
             each subtask's tree once its work is committed (its reviewer weighs it, and the \
             delegate result says how it went) and on the merged result before anything is \
             applied: after each turn in which work merged you are told how the result fares \
             on it.{}",
            check.command,
            ratchet::prompt_note(check)
        ));
    }
    spec.system.push_str(&history_note(options.history));
    if options.attempts > 1 {
        spec.system.push_str(&format!(
            "\n\n# Attempts\n\nThis run gives each subtask {} attempts unless your \
             `delegate` call says otherwise (`attempts: 1` for one; at most {}).",
            options.attempts, options.max_attempts
        ));
    }
    spec
}

/// What the lead is told its work becomes on the user's branch, so that it splits a task
/// into pieces that read well as that history (a bridge run's lead did not know).
fn history_note(history: History) -> String {
    let commits = match history {
        History::Squash => {
            "one commit per merged subtask, in merge order, its subject the first line of \
             its worker's summary and its body your brief and that summary"
        }
        History::Merge => "a merge commit per merged subtask over its worker's checkpoints",
    };
    format!(
        "\n\n# What the user's branch gets\n\nOnce you end, grove checks the merged result \
         and applies it to the user's branch: {commits}. A subtask that was not merged leaves \
         nothing there (its work is kept aside), so delegate pieces that each make sense as \
         such a commit."
    )
}

/// Why the lead could not run or go on.
#[derive(Debug, thiserror::Error)]
pub enum LeadError {
    #[error("{source}")]
    ResultBranch {
        #[source]
        source: GitError,
    },
    #[error("the run journal failed: {source}")]
    Journal {
        #[source]
        source: StoreError,
    },
    #[error("{source}")]
    Agent {
        #[source]
        source: AgentError,
    },
}

/// Why the lead did not finish normally.
#[derive(Debug)]
pub(crate) enum LeadFailure {
    /// Ctrl-C, or the run paused itself.
    Interrupted,
    /// The lead stopped itself (turn cap, budget...): the run still finishes.
    Stopped {
        stop: StopKind,
        detail: String,
    },
    Error(LeadError),
}

/// How the lead's loop ended.
pub(crate) struct LeadEnd {
    /// Its closing text.
    pub(crate) summary: String,
    /// What it spent in all, earlier runs (before a resume) included.
    pub(crate) ledger: Ledger,
    pub(crate) failure: Option<LeadFailure>,
}

impl LeadEnd {
    /// The lead never ran.
    pub(crate) fn failed(error: LeadError) -> Self {
        Self {
            summary: String::new(),
            ledger: Ledger::default(),
            failure: Some(LeadFailure::Error(error)),
        }
    }
}

/// Runs the lead's loop, from the start or from its saved transcript.
pub(crate) async fn run_lead(
    ctx: &Arc<RunContext>,
    subtasks: &Subtasks,
    resumed: Option<Transcript>,
) -> LeadEnd {
    subtasks.register_worktrees_ahead();
    if ctx.facts.options.history == History::Squash {
        // While the lead's first call is in flight, as the worktrees are.
        let repo = ctx.facts.repo.clone();
        tokio::spawn(async move { repo.prepare_squash().await });
    }
    let delegate = Delegate::new(
        Arc::new(subtasks.clone()),
        &agent_catalogue(&ctx.facts.user_root),
    );
    // The lead reads the result as it is at each call, from git objects: no checkout.
    let live = LiveTree::new(
        ctx.facts.repo.clone(),
        ctx.facts.run.result_ref(),
        ctx.facts.base,
    );
    let records = Arc::new(ShowSubtask::new(Arc::new(subtasks.clone())));
    let tools = result_tree::read_only(&live)
        .with(Arc::new(delegate))
        .with(Arc::new(Wait::new(Arc::new(subtasks.clone()))))
        .with(records);
    let spec = lead_spec(
        &ctx.facts.options,
        ctx.agents.rules.as_ref(),
        &ctx.agents.models.lead,
        tools,
    );
    let (messages, earlier, earlier_timing) = match resumed {
        Some(transcript) => (transcript.messages, transcript.ledger, transcript.timing),
        None => (
            isolated_messages(&first_prompt(&ctx.facts.options.task)),
            Ledger::default(),
            AgentTiming::default(),
        ),
    };
    let observer = Arc::new(
        AgentObserver::new(
            ctx,
            AgentLabel::Lead,
            ctx.transcript_path(AgentLabel::Lead, "lead"),
            earlier,
        )
        .keeping_history(subtasks.lead_history())
        .telling(ResultNews::new(ctx))
        .with_timing(&spec.model_name, earlier_timing),
    );
    let (outcome, spent) = lead_rounds(ctx, subtasks, &spec, messages, &observer).await;
    observer.finished(&spent, &outcome.messages);
    let mut ledger = earlier;
    ledger.add(&spent);
    let (summary, failure) = match outcome.result {
        Ok(outcome) => {
            let failure = match outcome.stop {
                StopKind::Finished => None,
                _ if ctx.record.cancel.is_cancelled() => Some(LeadFailure::Interrupted),
                stop => Some(LeadFailure::Stopped {
                    stop,
                    detail: outcome.detail,
                }),
            };
            (outcome.final_text, failure)
        }
        Err(AgentError::Cancelled { .. }) => (String::new(), Some(LeadFailure::Interrupted)),
        Err(AgentError::Model { source, .. }) => {
            ctx.pause(format!("the model API failed for the lead: {source}"));
            (String::new(), Some(LeadFailure::Interrupted))
        }
        Err(source) if ctx.pause_if_disk_full("the lead", &source) || ctx.stopping() => {
            (String::new(), Some(LeadFailure::Interrupted))
        }
        Err(source) => (
            String::new(),
            Some(LeadFailure::Error(LeadError::Agent { source })),
        ),
    };
    LeadEnd {
        summary,
        ledger,
        failure,
    }
}

/// The lead's loop, run again each time it ends while results it has not heard are
/// still to come: grove waits for them and tells it in a message, so that a lead that
/// never calls `wait` still hears every result before its summary. Each round delivers
/// every result there is, so another round needs another delegation: bounded by the
/// subtask cap. Returns the last round's end and what all rounds spent.
async fn lead_rounds(
    ctx: &Arc<RunContext>,
    subtasks: &Subtasks,
    spec: &AgentSpec,
    mut messages: Vec<Message>,
    observer: &Arc<AgentObserver>,
) -> (AgentRun, Ledger) {
    let mut spent = Ledger::default();
    loop {
        // Its tools read git objects, never a directory: grove's own run folder is their
        // root.
        let mut outcome = ctx
            .run_agent(spec, messages, &ctx.facts.run_dir, None, observer.clone())
            .await;
        ctx.agents.budget.spend(&outcome.ledger);
        spent.add(&outcome.ledger);
        let finished = matches!(&outcome.result, Ok(end) if end.stop == StopKind::Finished);
        let unheard = match finished && !ctx.stopping() {
            true => subtasks.unheard().await,
            false => Ok(None),
        };
        let news = match unheard {
            Ok(Some(news)) => news,
            Ok(None) => {
                if finished && ctx.stopping() && subtasks.has_unheard() {
                    // It ended before hearing what it delegated, and the run stops:
                    // interrupted, so that a resume brings it the results.
                    outcome.result = Err(AgentError::Cancelled {
                        agent: AgentId::lead(),
                    });
                }
                return (outcome, spent);
            }
            Err(error) => {
                let message = error.to_string();
                outcome.result = Err(AgentError::Tool {
                    agent: AgentId::lead(),
                    tool: "wait".into(),
                    message,
                });
                return (outcome, spent);
            }
        };
        // And, as after any turn, how the merged result fares now.
        let news = match observer.news().await {
            Some(check) => format!("{news}\n\n{check}"),
            None => news,
        };
        messages = outcome.messages;
        messages.push(Message::user_text(&news));
        // Saved with the message before it is answered: a resume goes on from it.
        observer.finished(&spent, &messages);
    }
}

/// What the lead is told of a `delegate` call that was pending when grove stopped and
/// that the journal never recorded: no subtask exists for it, and none will start.
pub const UNRECORDED_DELEGATION: &str = "grove stopped before this delegate call was \
     recorded, so no subtask was started for it and none will be; delegate it again if the \
     work is still needed.";

/// The lead's saved transcript of a resumed run, its pending calls answered: a
/// `delegate` call with its subtask's result (matched by brief), or that no subtask was
/// recorded for it; any other as interrupted. `None` when there is none (the lead starts
/// over).
pub(crate) fn resumed_history(
    facts: &RunFacts,
    record: &RunRecord,
    subtasks: &[SubtaskReport],
) -> Option<Transcript> {
    let mut lead = transcript::load(&facts.transcript_path(AgentLabel::Lead, "lead"))
        .unwrap_or_else(|error| {
            record.note(format!("the lead starts over: {error}"));
            None
        })?;
    let mut used = vec![false; subtasks.len()];
    let deliveries = record.journal.state().deliveries;
    transcript::answer_pending(&mut lead.messages, |call_id, name, input| {
        if name == "wait" {
            return PendingAnswer::Result(resumed_wait(&deliveries, call_id, subtasks));
        }
        if name != "delegate" {
            return PendingAnswer::Interrupted;
        }
        let task = input.get("task").and_then(|task| task.as_str());
        let index = subtasks
            .iter()
            .enumerate()
            .position(|(i, s)| !used[i] && Some(s.task.as_str()) == task);
        match index {
            Some(index) => {
                used[index] = true;
                PendingAnswer::Result(format!(
                    "{} accepted (grove stopped and resumed since). `wait` gives its result.",
                    subtasks[index].id
                ))
            }
            None => PendingAnswer::Error(UNRECORDED_DELEGATION.to_owned()),
        }
    });
    drop_final_answer(&mut lead.messages);
    Some(lead)
}

/// The answer to a `wait` call that was pending when grove stopped: the results the
/// journal says it was given (the same, in the same order), else that it may wait again
/// (what settled since comes to its next `wait`).
fn resumed_wait(deliveries: &[Delivery], call_id: &str, subtasks: &[SubtaskReport]) -> String {
    let given = deliveries
        .iter()
        .find(|delivery| delivery.call_id.as_deref() == Some(call_id));
    let Some(given) = given else {
        return "grove stopped and resumed while this wait was pending; call `wait` again \
                for the results."
            .to_owned();
    };
    let results: Vec<String> = given
        .subtasks
        .iter()
        .filter_map(|id| subtasks.iter().find(|report| report.id == *id))
        .map(|report| lead_result(report).text)
        .collect();
    format!(
        "{}\n(grove stopped and resumed since; `wait` again for any other result.)",
        results.join("\n")
    )
}

/// Drops the lead's closing answer (an assistant message without tool calls, saved when
/// its loop ended) so that a resumed lead is asked again rather than sent a conversation
/// that ends with its own words.
fn drop_final_answer(messages: &mut Vec<Message>) {
    let ends_answered = messages.last().is_some_and(|last| {
        last.role == Role::Assistant
            && !last
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolUse { .. }))
    });
    if ends_answered && messages.len() > 1 {
        messages.pop();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::run::id::SubtaskId;
    use crate::run::test_support::TestRun;
    use crate::store::journal::{Entry, SubtaskOutcome};

    #[tokio::test]
    async fn pending_delegations_and_waits_are_answered_as_the_journal_recorded_them() {
        let run = TestRun::alpha().await;
        let call = |id: &str, task: &str| ContentBlock::ToolUse {
            id: id.into(),
            name: "delegate".into(),
            input: json!({ "task": task }),
        };
        let wait = |id: &str| ContentBlock::ToolUse {
            id: id.into(),
            name: "wait".into(),
            input: json!({}),
        };
        let saved = Transcript {
            messages: vec![
                Message::user_text("plan"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        call("a", "recorded"),
                        call("b", "lost"),
                        wait("c"),
                        wait("d"),
                    ],
                },
            ],
            ..Transcript::default()
        };
        run.ctx
            .journal(Entry::ResultsDelivered {
                subtasks: vec![SubtaskId(1)],
                call_id: Some("c".into()),
            })
            .unwrap();
        transcript::save(&run.ctx.transcript_path(AgentLabel::Lead, "lead"), &saved).unwrap();
        let mut merged = SubtaskReport::new(SubtaskId(1), "recorded".into(), "grove/r/1".into());
        merged.status = SubtaskOutcome::Merged;

        let resumed = resumed_history(&run.ctx.facts, &run.ctx.record, &[merged]).unwrap();

        assert_eq!(
            resumed.messages.last().unwrap().content,
            vec![
                ContentBlock::ToolResult {
                    tool_use_id: "a".into(),
                    content: "S1 accepted (grove stopped and resumed since). `wait` gives \
                              its result."
                        .into(),
                    is_error: false,
                },
                ContentBlock::ToolResult {
                    tool_use_id: "b".into(),
                    content: UNRECORDED_DELEGATION.into(),
                    is_error: true,
                },
                ContentBlock::ToolResult {
                    tool_use_id: "c".into(),
                    content: "S1 merged (grove/r/1)\n\n(grove stopped and resumed since; \
                              `wait` again for any other result.)"
                        .into(),
                    is_error: false,
                },
                ContentBlock::ToolResult {
                    tool_use_id: "d".into(),
                    content: "grove stopped and resumed while this wait was pending; call \
                              `wait` again for the results."
                        .into(),
                    is_error: false,
                },
            ],
            "a recorded delegation is told it was accepted, one the journal never had is \
             told so (never that it may have run); a wait gets the very results the journal \
             says it was given, or is asked to wait again"
        );
    }
}
