//! Stage 4, review by the AI reviewer (not `grove review`, where a person decides): a
//! fresh, read-only agent judges the diff and ends with `submit_verdict`.
//!
//! This file owns what the reviewer sees: the brief, the paths that run later, the diff
//! and the project rules — never the worker's messages or its final summary. It must
//! never turn a missing verdict into an approval: no verdict is a rejection.

use std::sync::Arc;

use crate::agent::roles::{self, RoleKind};
use crate::agent::{AgentError, Ledger, isolated_messages};
use crate::event::AgentId;
use crate::git::{BranchDiff, Worktree};
use crate::run::checkout::waiting_for_checkout;
use crate::run::context::{AgentCaps, RunContext};
use crate::run::id::SubtaskId;
use crate::run::observer::AgentObserver;
use crate::run::subtask::error::SubtaskError;
use crate::run::verdict::{SubmitVerdict, Verdict};
use crate::store::journal::{Entry, VerdictKind};
use crate::store::transcript::AgentTiming;
use crate::tools::{self, ToolSet};

/// What the review of one diff came to.
pub(crate) struct Review {
    /// What the reviewer spent.
    pub(crate) ledger: Ledger,
    /// Its journaled verdict, or why none could be had.
    pub(crate) verdict: Result<Verdict, SubtaskError>,
}

/// The isolated review of subtask `id`'s `diff`, in its worktree; the verdict is
/// journaled before it is returned.
pub(crate) async fn review(
    ctx: &Arc<RunContext>,
    id: SubtaskId,
    brief: &str,
    diff: &BranchDiff,
    executes_later: &[String],
    worktree: &Worktree,
) -> Review {
    let label = id.to_string();
    let submit = Arc::new(SubmitVerdict::new());
    let tools =
        waiting_for_checkout(&tools::builtin(ToolSet::ReadOnly), worktree).with(submit.clone());
    let role = roles::builtin(RoleKind::Reviewer);
    let spec = ctx.spec(
        AgentId {
            role: "reviewer".into(),
            label: label.clone(),
        },
        &role,
        AgentCaps {
            model: &ctx.models.reviewer,
            max_turns: ctx.options.max_turns.reviewer,
            budget: ctx.options.subagent_budget_tokens,
            tools,
        },
    );
    // A review always starts from a clean context and is never resumed: its saved
    // transcript is for the report only.
    let observer = Arc::new(
        AgentObserver::new(
            ctx,
            &label,
            ctx.transcript_path(&label, "reviewer"),
            Ledger::default(),
        )
        .with_timing(&spec.model_name, AgentTiming::default()),
    );
    let messages = isolated_messages(&review_brief(brief, diff, executes_later));
    let reviewer = ctx
        .run_agent(&spec, messages, worktree.path(), observer.clone())
        .await;
    observer.finished(&reviewer.ledger);
    ctx.budget.spend(&reviewer.ledger);
    let verdict = match submit.verdict() {
        Some(verdict) => Ok(verdict),
        None => no_verdict(ctx, id, reviewer.result),
    };
    let verdict = verdict.and_then(|verdict| {
        ctx.journal(Entry::Verdict {
            subtask: label,
            verdict: verdict.kind,
            summary: verdict.summary.clone(),
            findings: verdict.findings.clone(),
        })?;
        Ok(verdict)
    });
    Review {
        ledger: reviewer.ledger,
        verdict,
    }
}

/// What a review loop that submitted no verdict means.
fn no_verdict(
    ctx: &RunContext,
    id: SubtaskId,
    result: Result<crate::agent::AgentOutcome, AgentError>,
) -> Result<Verdict, SubtaskError> {
    let error = match result {
        Ok(outcome) => {
            return Ok(Verdict {
                kind: VerdictKind::Reject,
                summary: format!(
                    "The reviewer gave no verdict ({}: {}); an unreviewed diff is never \
                     merged.",
                    outcome.stop, outcome.detail
                ),
                findings: Vec::new(),
            });
        }
        Err(error) => error,
    };
    let failure = match error {
        AgentError::Cancelled { .. } => SubtaskError::ReviewCancelled,
        AgentError::Model { source, .. } => {
            ctx.pause(format!(
                "the model API failed for the reviewer of {id}: {source}"
            ));
            SubtaskError::ReviewModelApi
        }
        source => SubtaskError::Review {
            source: Box::new(source),
        },
    };
    // A pause (just above, or another agent's) or Ctrl-C: the subtask stays open.
    Err(if ctx.cancel.is_cancelled() {
        SubtaskError::Interrupted
    } else {
        failure
    })
}

/// The reviewer's first message: the brief, the flagged paths, the diff. Nothing else.
fn review_brief(brief: &str, diff: &BranchDiff, executes_later: &[String]) -> String {
    let mut text = format!(
        "# The subtask's brief\n\n{}\n\n# The diff against the base ({})\n\n",
        brief.trim(),
        diff.stat.summary()
    );
    if !executes_later.is_empty() {
        text.push_str(
            "Attention: this diff changes files that run on the host or in CI later; check \
             that each change is needed and harmless:\n",
        );
        for path in executes_later {
            text.push_str(&format!("- {path}\n"));
        }
        text.push('\n');
    }
    text.push_str("```diff\n");
    text.push_str(&diff.patch.text);
    if !diff.patch.text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(
        "```\n\nThe resulting tree is your working directory; read what you need. Then call \
         `submit_verdict`.",
    );
    text
}
