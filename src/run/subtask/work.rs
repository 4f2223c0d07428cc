//! Stage 2, work: grove's own worker loop in the worktree, or another agent CLI
//! (`--worker-backend`) standing in for it.
//!
//! This file owns what a worker sees: its brief (or a fork of the lead), the role's
//! prompt and the project rules — an external CLI gets the same system prompt and the
//! brief, never the lead's messages. It commits nothing itself beyond the per-turn
//! checkpoints (the observer's); the final commit is the next stage's.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::external::{self as agent_cli, BackendEnv, Progress};
use crate::agent::roles::{Checkpoints, RoleDef, worktree_note};
use crate::agent::{AgentError, Ledger, StopKind};
use crate::event::{AgentId, AgentLabel, Event};
use crate::model::{ContentBlock, Message, Role};
use crate::run::check::ratchet;
use crate::run::checkout::waiting_for_checkout;
use crate::run::context::{AgentCaps, RunContext, RunFacts, RunRecord};
use crate::run::id::SubtaskId;
use crate::run::observer::{AgentObserver, SaveError};
use crate::run::subtask::error::SubtaskError;
use crate::settings::options::SubtaskCheck;
use crate::store::journal;
use crate::store::transcript::{self, AgentTiming, Transcript};
use crate::tools::Registry;
use crate::worktree::Worktree;

/// One subtask as the lead asked for it, ready to work.
#[derive(Clone)]
pub(crate) struct Assignment {
    pub(crate) id: SubtaskId,
    /// The brief: everything the worker knows about its subtask.
    pub(crate) brief: String,
    /// What an agent CLI is given as its brief: the brief, with the files it may change
    /// when the subtask has `paths`.
    pub(crate) worker_brief: String,
    pub(crate) role: RoleDef,
    pub(crate) tools: Registry,
    /// The worker's conversation so far (its first messages; on resume, its transcript).
    pub(crate) start: Transcript,
}

/// How a worker (built-in or external) ended, before its work is committed.
pub(crate) struct WorkEnd {
    /// What the worker spent in all, earlier attempts (before a resume) included.
    pub(crate) ledger: Ledger,
    /// Whether every checkpoint and transcript save during the work succeeded.
    pub(crate) saved: Result<(), SaveError>,
    /// The worker's final message, or why its subtask fails.
    pub(crate) summary: Result<String, SubtaskError>,
}

/// Runs the subtask's worker in `worktree` to its end.
pub(crate) async fn work(
    ctx: &Arc<RunContext>,
    assignment: Assignment,
    worktree: &Worktree,
) -> WorkEnd {
    if !ctx.facts.options.worker_backend.is_builtin() {
        return external(ctx, &assignment, worktree).await;
    }
    let Some(tree) = worktree.remote() else {
        return builtin(ctx, assignment, worktree).await;
    };
    let again = assignment.clone();
    let first = builtin(ctx, assignment, worktree).await;
    if first.summary.is_ok() || !tree.is_lost() || ctx.stopping() {
        return first;
    }
    // Its host was lost mid-work: once, the tree moves to another host at its last
    // checkpoint, and the worker goes on from its saved conversation.
    let (id, lost) = (again.id, tree.host());
    if let Err(error) = super::hosts::move_remote(ctx.tree_stage(), id, tree, &lost).await {
        ctx.note(format!("{id}: no other host took its tree: {error}"));
        return first;
    }
    let path = ctx.transcript_path(AgentLabel::Subtask(id), &again.role.name);
    let start = match transcript::load(&path) {
        Ok(Some(mut saved)) => {
            transcript::answer_pending(&mut saved.messages, |_, _, _| {
                transcript::PendingAnswer::Interrupted
            });
            saved
        }
        _ => again.start.clone(),
    };
    builtin(ctx, Assignment { start, ..again }, worktree).await
}

/// grove's own worker loop, with a checkpoint commit after every turn that changed
/// files.
async fn builtin(ctx: &Arc<RunContext>, assignment: Assignment, worktree: &Worktree) -> WorkEnd {
    let Assignment {
        id,
        role,
        tools,
        start,
        ..
    } = assignment;
    let label = AgentLabel::Subtask(id);
    let mut spec = ctx.spec(
        AgentId {
            role: role.name.clone(),
            label,
        },
        &role,
        AgentCaps {
            model: &ctx.agents.models.worker,
            max_turns: ctx.facts.options.max_turns.worker,
            budget: ctx.facts.options.subagent_budget_tokens,
            tools: waiting_for_checkout(&tools, worktree),
        },
    );
    spec.system
        .push_str(&worktree_git(&ctx.facts, worktree, Checkpoints::EveryTurn));
    spec.system.push_str(&check_note(&ctx.facts));
    let observer = Arc::new(
        AgentObserver::new(
            ctx,
            label,
            ctx.transcript_path(label, &role.name),
            start.ledger,
        )
        .checkpointing(id, worktree)
        .with_timing(&spec.model_name, start.timing),
    );
    let worker = ctx
        .run_agent(
            &spec,
            start.messages,
            worktree.path(),
            worktree.access(),
            observer.clone(),
        )
        .await;
    // Its transcript stays as its last tool-calling turn left it: a resume goes on from there.
    observer.finished(&worker.ledger, &[]);
    let saved = observer.flush().await;
    ctx.agents.budget.spend(&worker.ledger);
    if let Err(AgentError::Model { source, .. }) = &worker.result {
        ctx.pause(format!("the model API failed for {label}: {source}"));
    }
    let summary = match worker.result {
        Ok(outcome) => match outcome.stop {
            StopKind::Finished | StopKind::TurnCap => Ok(outcome.final_text),
            stop => Err(SubtaskError::WorkerStopped {
                stop,
                detail: outcome.detail,
            }),
        },
        Err(source) => Err(SubtaskError::Worker {
            source: Box::new(source),
        }),
    };
    let mut ledger = start.ledger;
    ledger.add(&worker.ledger);
    WorkEnd {
        ledger,
        saved,
        summary,
    }
}

/// Another agent CLI (`--worker-backend`) in the worktree, given the role's prompt,
/// the project rules and the brief. Its conversation cannot be resumed: after an
/// interrupt it starts again on the brief, from the subtask's last checkpoint.
async fn external(ctx: &RunContext, assignment: &Assignment, worktree: &Worktree) -> WorkEnd {
    let earlier = assignment.start.ledger;
    let failed = |error| WorkEnd {
        ledger: earlier,
        saved: Ok(()),
        summary: Err(error),
    };
    // The CLI sees the whole tree at once: it must wait for the background checkout.
    tokio::select! {
        ready = worktree.ready() => if let Err(source) = ready {
            return failed(SubtaskError::CliNotCheckedOut { source });
        },
        () = ctx.record.cancel.cancelled() => return failed(SubtaskError::CliNotStarted),
    }
    let started_ms = journal::now_ms();
    let backend = &ctx.facts.options.worker_backend;
    let (id, role) = (assignment.id, &assignment.role);
    let agent = AgentId {
        role: role.name.clone(),
        label: AgentLabel::Subtask(id),
    };
    // The very system prompt a built-in worker would get: role and project rules.
    let caps = AgentCaps {
        model: &ctx.agents.models.worker,
        max_turns: 0,
        budget: None,
        tools: Registry::new(),
    };
    let mut system = ctx.spec(agent.clone(), role, caps).system;
    system.push_str(&worktree_git(&ctx.facts, worktree, Checkpoints::AtTheEnd));
    system.push_str(&check_note(&ctx.facts));
    let rerun = worktree.start() != worktree.base();
    if rerun {
        ctx.note(format!(
            "{id}: {} starts again on the brief from the subtask's last checkpoint (a \
             CLI's own conversation is not resumed)",
            backend.name()
        ));
    }
    let transcript_path = ctx.transcript_path(agent.label, &role.name);
    let job = agent_cli::ExternalWork {
        backend,
        system: &system,
        brief: &assignment.worker_brief,
        rerun,
        cwd: worktree.path(),
        tree: worktree.access(),
        transcript: &transcript_path,
        env: ctx
            .facts
            .options
            .backend_env
            .clone()
            .unwrap_or_else(BackendEnv::from_process),
        pass_env: &ctx.facts.options.worker_pass_env,
        timeout: Duration::from_secs(ctx.facts.options.worker_backend_timeout_secs.max(1)),
        max_turns: role.max_turns.unwrap_or(ctx.facts.options.max_turns.worker),
        budget_tokens: ctx.facts.options.subagent_budget_tokens,
        cancel: ctx.record.cancel.child_token(),
    };
    ctx.record.events.emit(Event::AgentStarted {
        agent: agent.clone(),
    });
    let done = agent_cli::work(job, |progress| {
        progress_event(&ctx.record, &agent, progress)
    })
    .await;
    if let Some(note) = &done.note {
        ctx.note(format!("{id}: {note}"));
    }
    ctx.agents.budget.spend(&done.ledger);
    ctx.record.events.emit(Event::AgentFinished {
        agent,
        ledger: done.ledger,
        outcome: done.described,
    });
    let mut total = earlier;
    total.add(&done.ledger);
    let timing = AgentTiming {
        started_ms: Some(started_ms),
        turn_ms: Vec::new(),
        model: Some(format!("{backend} (external CLI)")),
    };
    let saved = save_cli_transcript(
        &transcript_path,
        done.prompt,
        done.final_message,
        total,
        timing,
    );
    WorkEnd {
        ledger: total,
        saved,
        summary: done.summary.map_err(SubtaskError::from),
    }
}

/// What the worker is told of its worktree's git: when grove commits, and the commit
/// its subtask started from (the base, or the result it waited for).
fn worktree_git(facts: &RunFacts, worktree: &Worktree, checkpoints: Checkpoints) -> String {
    let start = worktree.base();
    let what = if start == facts.base {
        "the run's base"
    } else {
        "the run's result as this subtask found it, with the work merged before it"
    };
    let short = start.to_string();
    worktree_note(&short[..short.len().min(12)], what, checkpoints)
}

/// What the worker is told of the project's check, when one is configured: that grove
/// runs it on the worktree once the worker is done and the reviewer reads it, so that a
/// worker does not spend minutes running the whole of it first (a bridge run's workers
/// each ran a 57 s suite that grove then ran again).
fn check_note(facts: &RunFacts) -> String {
    let Some(check) = &facts.options.check else {
        return String::new();
    };
    let red = match check.subtask {
        SubtaskCheck::Evidence => "your reviewer reads its outcome",
        SubtaskCheck::Require => {
            "your reviewer reads its outcome, and a red check rejects your work without a \
             review"
        }
    };
    format!(
        "\n\n# The project's check\n\nOnce you are done, grove runs the project's check on \
         your worktree, `{}` (stopped after {} s), and {red}. Run the part of it that covers \
         your change (a test file, a build) as you work; run all of it yourself only when it \
         is quick.{}",
        check.command,
        check.timeout_s,
        ratchet::prompt_note(check)
    )
}

/// Shows an external CLI's progress as the built-in worker's would be.
fn progress_event(record: &RunRecord, agent: &AgentId, progress: Progress) {
    let agent = agent.clone();
    record.events.emit(match progress {
        Progress::Turn { turn, ledger } => Event::TurnCompleted {
            agent,
            turn,
            ledger,
        },
        Progress::Tool { name, is_error } => Event::ToolCalled {
            agent,
            tool: name,
            is_error,
        },
    });
}

/// Saves an external worker's transcript: what it was asked, what it answered, and the
/// ledger of every attempt so far (so a resume keeps counting from there).
fn save_cli_transcript(
    path: &std::path::Path,
    prompt: String,
    final_message: Option<String>,
    ledger: Ledger,
    timing: AgentTiming,
) -> Result<(), SaveError> {
    let mut messages = vec![Message::user_text(prompt)];
    if let Some(text) = final_message {
        messages.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text }],
        });
    }
    let transcript = Transcript {
        messages,
        ledger,
        timing,
    };
    transcript::save(path, &transcript).map_err(|source| SaveError::Transcript { source })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::roles::{self, RoleKind};
    use crate::run::test_support::{ScriptedModel, TestRun};
    use crate::settings::options::RunOptions;
    use crate::tools::{self, ToolSet};

    #[tokio::test]
    async fn the_builtin_worker_works_in_its_worktree_and_each_changing_turn_is_checkpointed() {
        let model = ScriptedModel::new(vec![
            ScriptedModel::tool_calls(&[(
                "w1",
                "write_file",
                json!({"path": "b.txt", "content": "beta\n"}),
            )]),
            ScriptedModel::text("wrote b.txt"),
        ]);
        let run = TestRun::new(&[("a.txt", "alpha\n")], RunOptions::new("t"), model.clone()).await;
        let worktree = run.worktree(1).await;
        let assignment = Assignment {
            id: SubtaskId(1),
            brief: "write b.txt".into(),
            worker_brief: "write b.txt".into(),
            role: roles::builtin(RoleKind::Worker),
            tools: tools::builtin(ToolSet::Worker),
            start: Transcript {
                messages: crate::agent::isolated_messages("write b.txt"),
                ..Transcript::default()
            },
        };

        let end = work(&run.ctx, assignment, &worktree).await;

        assert_eq!(end.summary.unwrap(), "wrote b.txt");
        assert!(end.saved.is_ok(), "every checkpoint and save succeeded");
        assert_eq!((end.ledger.steps, end.ledger.input_tokens), (2, 20));
        assert_eq!(
            std::fs::read_to_string(worktree.path().join("b.txt")).unwrap(),
            "beta\n"
        );
        assert_eq!(
            run.git(worktree.path(), &["log", "-1", "--format=%s"]),
            format!("grove {}/1: S1: turn 1", run.ctx.facts.run),
            "the turn that wrote a file is committed by grove"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "checkpoint"],
            "the checkpoint is journaled"
        );
        assert_eq!(
            model.requests()[0].messages,
            crate::agent::isolated_messages("write b.txt"),
            "an isolated worker sees its brief alone"
        );
    }
}
