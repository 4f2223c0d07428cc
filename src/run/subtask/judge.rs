//! Stage 5 for a subtask tried several ways (best of N): one fresh, read-only judge
//! sees every attempt that is still in the running, side by side, and picks one or
//! rejects them all.
//!
//! This file owns what the judge sees: the brief once, then each attempt under its
//! label (`A`, `B`, …) with its check, its flagged paths and its diff — never a worker's
//! messages, and nothing of which attempt ran first or what it cost. Its file tools
//! read any attempt's tree, named by `attempt` in each call. It must never turn a
//! missing decision into a pick: no decision rejects every attempt.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::agent::Ledger;
use crate::event::AgentLabel;
use crate::git::BranchDiff;
use crate::run::context::RunContext;
use crate::run::id::SubtaskId;
use crate::run::pick::{JudgePick, SubmitPick};
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::reviewer::{self, Flagged};
use crate::text::fenced;
use crate::tools::{Registry, Tool, ToolContext, ToolError, ToolOutput};
use crate::worktree::Worktree;

/// One attempt as the judge is shown it.
pub(crate) struct Entrant<'a> {
    pub(crate) label: char,
    pub(crate) id: SubtaskId,
    pub(crate) diff: &'a BranchDiff,
    pub(crate) flagged: Flagged<'a>,
    pub(crate) worktree: &'a Worktree,
}

/// What the judge came to.
pub(crate) struct Judgement {
    pub(crate) ledger: Ledger,
    /// Its decision, or why none could be had (an interrupt, a failing model API).
    pub(crate) pick: Result<JudgePick, SubtaskError>,
}

/// The judge of group `group` (briefed with `brief`) on `entrants`.
pub(crate) async fn judge(
    ctx: &Arc<RunContext>,
    group: SubtaskId,
    brief: &str,
    entrants: &[Entrant<'_>],
) -> Judgement {
    let label = AgentLabel::Subtask(group);
    let labels: Vec<char> = entrants.iter().map(|entrant| entrant.label).collect();
    let submit = Arc::new(SubmitPick::new(labels.clone()));
    let tools = in_attempts(ctx, entrants).with(submit.clone());
    let text = judge_brief(ctx, brief, entrants);
    let first = entrants.first().map(|entrant| entrant.worktree);
    let tree = first.map_or((ctx.facts.user_root.as_path(), None), |worktree| {
        (worktree.path(), worktree.access())
    });
    let run =
        reviewer::run_read_only(ctx, (label, "judge"), (tools, JUDGE_NOTE), &text, tree).await;
    let pick = match submit.pick() {
        Some(pick) => Ok(pick),
        None => reviewer::no_verdict(&ctx.record, group, run.result).map(|verdict| JudgePick {
            picked: None,
            summary: verdict.summary.replace("The reviewer", "The judge"),
            findings: Vec::new(),
            not_picked: Vec::new(),
        }),
    };
    Judgement {
        ledger: run.ledger,
        pick,
    }
}

/// What the judge's system prompt adds to the reviewer's: it compares, and what its
/// verdict means (a bridge run's judge found the single-diff prompt alone unclear).
const JUDGE_NOTE: &str = "\n\n# Judging attempts\n\nHere you judge several attempts at \
     one brief, made independently, instead of one diff. Read each attempt's code, not only \
     its diff's summary; where a brief leaves a design open, judge each design against what \
     the brief asks and allows and against the code around it. When you have `run`, try \
     the same edge cases on each attempt (`attempt` names the tree it runs in). `approve` \
     means: merge the attempt you `pick`, and only that one; the others are kept aside with \
     your one-line reason each, and your findings are remarks on the pick. `reject` means \
     none of them may be merged; its findings say what stops each. A bug you find in an \
     attempt counts against its correctness, not as a tie-breaker. When two attempts are \
     both correct and complete, prefer the one that follows the code's own precedent (where \
     precedent points both ways, the one more useful within what the brief allows), then \
     the simpler one.";

/// The judge's first message: the brief, how to judge, then each attempt under its label.
fn judge_brief(ctx: &RunContext, brief: &str, entrants: &[Entrant<'_>]) -> String {
    let labels: Vec<String> = entrants.iter().map(|e| e.label.to_string()).collect();
    let mut text = format!("# The subtask's brief\n\n{}\n\n", brief.trim());
    if let Some(first) = entrants.first() {
        let held = reviewer::held_by(&ctx.facts, &ctx.record, first.diff.base);
        let ids: Vec<SubtaskId> = entrants.iter().map(|entrant| entrant.id).collect();
        let others = reviewer::others_of(ctx, &ids, &held);
        text.push_str(&reviewer::context_notes(first.flagged, &held, &others));
    }
    text.push_str(&format!(
        "# How to judge\n\nWorkers tried this brief on their own, each in its own tree from \
         the same start; their attempts are below, labelled {} (a label says nothing of \
         which ran first or what it cost). Pick the one attempt that best does what the \
         brief asks: correct first, then complete, then no more than asked and in keeping \
         with the code around it. If none of them may be merged, reject them all. Your file \
         tools read any attempt's tree: name it in each call's `attempt`. Then call \
         `submit_verdict` with `pick`, and for each other attempt one line on why it \
         lost.\n\n",
        labels.join(", ")
    ));
    for entrant in entrants {
        text.push_str(&format!("# Attempt {}\n\n", entrant.label));
        // The check's journaled tail, not its whole output: the judge has no
        // `check_output` to read more with.
        text.push_str(&one_level_down(&reviewer::flag_notes(
            entrant.flagged,
            None,
        )));
        text.push_str(&format!(
            "## Its diff ({})\n\n{}\n",
            entrant.diff.stat.summary(),
            fenced("diff", &entrant.diff.patch.text),
        ));
    }
    text.push_str("Read what you need in the attempts' trees, then call `submit_verdict`.");
    text
}

/// `text`'s headings (outside its fences) one level down, to sit under an attempt's.
fn one_level_down(text: &str) -> String {
    let mut fence: Option<usize> = None;
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches('\n');
        let ticks = bare.len() - bare.trim_start_matches('`').len();
        match fence {
            Some(open) if ticks == open && bare.len() == open => fence = None,
            Some(_) => {}
            None if ticks >= 3 => fence = Some(ticks),
            None if bare.starts_with('#') => out.push('#'),
            None => {}
        }
        out.push_str(line);
    }
    out
}

/// The read-only tools (and `run`, where the sandbox can make a throwaway copy of a
/// tree), each taking the `attempt` whose tree it reads.
fn in_attempts(ctx: &RunContext, entrants: &[Entrant<'_>]) -> Registry {
    let trees: Vec<(char, Worktree)> = entrants
        .iter()
        .map(|entrant| (entrant.label, entrant.worktree.clone()))
        .collect();
    let read_only = reviewer::read_only_tools(ctx);
    read_only
        .names()
        .into_iter()
        .filter_map(|name| read_only.get(name).cloned())
        .fold(Registry::new(), |registry, inner| {
            registry.with(Arc::new(InAttempt {
                inner,
                trees: trees.clone(),
            }))
        })
}

/// A read-only tool that reads the tree of the attempt its call names.
struct InAttempt {
    inner: Arc<dyn Tool>,
    trees: Vec<(char, Worktree)>,
}

#[async_trait]
impl Tool for InAttempt {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn input_schema(&self) -> Value {
        let mut schema = self.inner.input_schema();
        let labels: Vec<String> = self
            .trees
            .iter()
            .map(|(label, _)| label.to_string())
            .collect();
        schema["properties"]["attempt"] = serde_json::json!({
            "type": "string",
            "enum": labels,
            "description": "The attempt whose tree to read."
        });
        let mut required = schema["required"].as_array().cloned().unwrap_or_default();
        required.push(Value::from("attempt"));
        schema["required"] = Value::Array(required);
        schema
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, mut input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let named = input
            .as_object_mut()
            .and_then(|fields| fields.remove("attempt"))
            .and_then(|attempt| attempt.as_str().map(str::to_owned));
        let labels: Vec<String> = self
            .trees
            .iter()
            .map(|(label, _)| label.to_string())
            .collect();
        let tree = named.as_deref().and_then(|named| {
            let named = named.trim().to_ascii_uppercase();
            self.trees
                .iter()
                .find(|(label, _)| label.to_string() == named)
        });
        let Some((_, worktree)) = tree else {
            return Err(ToolError::RespondToModel(format!(
                "`attempt` must name the attempt whose tree to read: one of {}",
                labels.join(", ")
            )));
        };
        let in_tree = ToolContext {
            root: worktree.path().to_path_buf(),
            cancel: ctx.cancel.clone(),
            tree: worktree.access(),
            call_id: ctx.call_id.clone(),
        };
        self.inner.run(input, &in_tree).await
    }
}
