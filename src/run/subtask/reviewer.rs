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
use crate::run::report::SubtaskReport;
use crate::run::subtask::error::SubtaskError;
use crate::run::verdict::{SubmitVerdict, Verdict};
use crate::store::journal::{CheckRun, CheckStatus, Entry, VerdictKind};
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
    flagged: Flagged<'_>,
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
    let messages = isolated_messages(&review_brief(brief, diff, flagged));
    let reviewer = ctx
        .run_agent(&spec, messages, worktree.path(), observer.clone())
        .await;
    // Its transcript stays as its last tool-calling turn left it: a resume goes on from there.
    observer.finished(&reviewer.ledger, &[]);
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

/// The paths a reviewer is told to look at twice.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Flagged<'a> {
    /// Changed files that run on the host or in CI later.
    pub(crate) executes_later: &'a [String],
    /// Paths the commit left out as git data (links into `.git`, nested repositories).
    pub(crate) left_out: &'a [String],
    /// Changed paths outside the subtask's `paths` (written through `bash`, say).
    pub(crate) outside_paths: &'a [String],
    /// The subtask's `paths`, the globs it was to stay within; empty: no limit.
    pub(crate) paths: &'a [String],
    /// The earlier subtasks it waited for: it started from the result after them.
    pub(crate) built_on: &'a [String],
    /// The project's check on the subtask's worktree, when one ran: evidence to weigh.
    pub(crate) check: Option<(&'a str, &'a CheckRun)>,
    /// What the diff is against when it is not the base: a resolver's is against the
    /// run's result (`the run's result`).
    pub(crate) against: Option<&'a str>,
}

impl<'a> Flagged<'a> {
    /// These flags, for a diff against `against` (e.g. `the run's result`), not the base.
    pub(crate) fn against(self, against: &'a str) -> Self {
        Self {
            against: Some(against),
            ..self
        }
    }
}

/// The check evidence of `report` for its reviewer: the command and its run, when one ran.
pub(crate) fn check_of<'a>(
    ctx: &'a RunContext,
    report: &'a SubtaskReport,
) -> Option<(&'a str, &'a CheckRun)> {
    ctx.options
        .check
        .as_ref()
        .zip(report.check.as_ref())
        .map(|(options, run)| (options.command.as_str(), run))
}

/// The reviewer's first message: the brief, the flagged paths, the diff. Nothing else.
fn review_brief(brief: &str, diff: &BranchDiff, flagged: Flagged<'_>) -> String {
    let mut text = format!(
        "# The subtask's brief\n\n{}\n\n# The diff against {} ({})\n\n",
        brief.trim(),
        flagged.against.unwrap_or("the base"),
        diff.stat.summary()
    );
    if !flagged.built_on.is_empty() {
        text.push_str(&format!(
            "This subtask started from the run's result once {} had settled, not from the \
             base: the diff is against that start, so their merged work is in the tree but \
             not in the diff.\n\n",
            flagged.built_on.join(", ")
        ));
    }
    if !flagged.executes_later.is_empty() {
        text.push_str(
            "Attention: this diff changes files that run on the host or in CI later; check \
             that each change is needed and harmless:\n",
        );
        for path in flagged.executes_later {
            text.push_str(&format!("- {path}\n"));
        }
        text.push('\n');
    }
    if !flagged.outside_paths.is_empty() {
        text.push_str(&format!(
            "Attention: the brief limits this subtask to the files matching `{}`, but the \
             diff changes these files outside them (the worker's file tools refuse such \
             writes, so they came through its shell or another tool); check whether each \
             change is needed and belongs to this brief:\n",
            flagged.paths.join("`, `")
        ));
        for path in flagged.outside_paths {
            text.push_str(&format!("- {path}\n"));
        }
        text.push('\n');
    }
    text.push_str(&left_out_note(flagged.left_out));
    if let Some((command, check)) = flagged.check {
        text.push_str(&check_evidence(command, check));
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

/// What the reviewer is told of the paths the commit left out as git data; empty when
/// there is none. Such a path is not always the worker's doing: a submodule of the base
/// is listed once anything touched its directory, so the note never says who made it.
fn left_out_note(left_out: &[String]) -> String {
    if left_out.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        "Attention: these paths are left out of the commit, as they are or lead into git \
         data (a link into `.git`, a nested or bare repository, the inside of a submodule): \
         the diff has nothing of what is in them. One may be a submodule the base already \
         has, which stays as the base has it; any other was made by this subtask's work, \
         which has no reason to make one:\n",
    );
    for path in left_out {
        text.push_str(&format!("- {path}\n"));
    }
    text.push('\n');
    text
}

/// The project's check on the worktree, as the reviewer reads it. A red check is not a
/// rejection by itself: this subtask may be one piece of a change that only builds whole.
fn check_evidence(command: &str, check: &CheckRun) -> String {
    let verdict = match check.status {
        CheckStatus::Passed => "passed".to_owned(),
        CheckStatus::Failed => format!("FAILED ({})", check.ended),
    };
    let mut text = format!(
        "# The project's check on this worktree

`{command}` {verdict} in {:.1} s.",
        check.seconds
    );
    if check.status == CheckStatus::Failed {
        text.push_str(
            " Weigh it: the subtask may be one piece of a larger change that only builds \
             whole (the brief says so), or it may have broken something it should not have.",
        );
    }
    if !check.output_tail.is_empty() {
        text.push_str(&format!(
            " The end of its output:\n\n```text\n{}\n```",
            check.output_tail
        ));
    }
    text.push_str("\n\n");
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::run::test_support::{ScriptedModel, TestRun};
    use crate::settings::options::RunOptions;
    use crate::store::journal::Finding;

    #[tokio::test]
    async fn paths_left_out_as_git_data_are_never_said_to_be_the_workers_doing() {
        let (_run, _worktree, diff) = changed(ScriptedModel::new(vec![])).await;
        let left_out = ["vendor/lib".to_owned()];
        let flagged = Flagged {
            left_out: &left_out,
            ..Flagged::default()
        };

        let brief = review_brief("Shout.", &diff, flagged);

        let note = brief
            .split_once("Attention:")
            .and_then(|(_, rest)| rest.split_once("```diff"))
            .map(|(note, _)| note.trim());
        assert_eq!(
            note,
            Some(
                "these paths are left out of the commit, as they are or lead into git data \
                 (a link into `.git`, a nested or bare repository, the inside of a \
                 submodule): the diff has nothing of what is in them. One may be a submodule \
                 the base already has, which stays as the base has it; any other was made by \
                 this subtask's work, which has no reason to make one:\n- vendor/lib"
            ),
            "a submodule of the base is listed once its directory is touched: the reviewer \
             is never told the worker made it"
        );
    }

    /// A run whose subtask S1 changed `a.txt`, committed; its diff.
    async fn changed(model: std::sync::Arc<ScriptedModel>) -> (TestRun, Worktree, BranchDiff) {
        let run = TestRun::new(&[("a.txt", "alpha\n")], RunOptions::new("t"), model).await;
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("a.txt"), "ALPHA\n").unwrap();
        run.ctx
            .repo
            .checkpoint(&worktree, "S1: final")
            .await
            .unwrap();
        let tip = run.rev(&worktree.branch_ref());
        let diff = run.ctx.repo.diff(run.ctx.base, tip, 60_000).await.unwrap();
        (run, worktree, diff)
    }

    #[tokio::test]
    async fn the_reviewer_sees_the_brief_and_the_diff_and_its_verdict_is_journaled() {
        let model = ScriptedModel::new(vec![
            ScriptedModel::tool_calls(&[(
                "v1",
                "submit_verdict",
                json!({"verdict": "approve", "summary": "Shouts alpha.",
                       "findings": [{"path": "a.txt", "line": 1, "problem": "loud"}]}),
            )]),
            ScriptedModel::text("a turn after the verdict, never asked for"),
        ]);
        let (run, worktree, diff) = changed(model.clone()).await;

        let review = review(
            &run.ctx,
            SubtaskId(1),
            "shout alpha",
            &diff,
            Flagged::default(),
            &worktree,
        )
        .await;

        assert_eq!(
            review.verdict.unwrap(),
            Verdict {
                kind: VerdictKind::Approve,
                summary: "Shouts alpha.".into(),
                findings: vec![Finding {
                    path: "a.txt".into(),
                    line: Some(1),
                    problem: "loud".into()
                }],
            }
        );
        assert_eq!(
            (review.ledger.steps, model.requests().len()),
            (1, 1),
            "a recorded verdict ends the review: no request after it"
        );
        assert_eq!(
            run.journal_types(),
            vec!["run_started", "subtask_started", "verdict"]
        );
        let first = &model.requests()[0];
        assert_eq!(first.messages.len(), 1, "a fresh context: one message");
        let text = first.messages[0].text();
        assert!(
            text.starts_with("# The subtask's brief\n\nshout alpha\n"),
            "{text}"
        );
        assert!(text.contains("+ALPHA"), "the diff is in the brief: {text}");
        let mut tools: Vec<_> = first.tools.iter().map(|tool| tool.name.as_str()).collect();
        tools.sort_unstable();
        assert_eq!(
            tools,
            vec!["grep", "list_files", "read_file", "submit_verdict"],
            "the reviewer reads, and judges; it never writes"
        );
    }

    #[tokio::test]
    async fn a_reviewer_that_ends_without_a_verdict_rejects() {
        let (run, worktree, diff) =
            changed(ScriptedModel::new(vec![ScriptedModel::text("looks fine")])).await;

        let review = review(
            &run.ctx,
            SubtaskId(1),
            "shout alpha",
            &diff,
            Flagged::default(),
            &worktree,
        )
        .await;

        let verdict = review.verdict.unwrap();
        assert_eq!(
            verdict.kind,
            VerdictKind::Reject,
            "an unreviewed diff is never merged"
        );
        assert!(
            verdict
                .summary
                .starts_with("The reviewer gave no verdict (finished: "),
            "{}",
            verdict.summary
        );
    }
}
