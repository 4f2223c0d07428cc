//! A follow-up on top of earlier work: `delegate`'s `replaces` and `start_from`. Which
//! earlier subtask a call may name, the archived work a `start_from` tree starts from,
//! what its worker is told of that work and of its rejection, and the ref that names it
//! to the worker's git.
//!
//! This file owns those rules. It must never start a tree from work that merged (the
//! result holds it) or from a subtask that has not settled (its work is not kept yet),
//! and never let a quote of the earlier reviewer's words pose as grove's.

use crate::git::CommitId;
use crate::run::context::RunFacts;
use crate::run::id::SubtaskId;
use crate::run::report::SubtaskReport;
use crate::store::journal::{SubtaskKind, SubtaskOutcome};
use crate::store::state::{SubtaskState, SubtaskStatus};
use crate::text::{excerpt, fenced, quoted_path};
use crate::worktree::Worktree;

/// How many of the earlier reviewer's findings the worker's brief lists.
const LISTED_FINDINGS: usize = 12;
/// How much of the earlier reviewer's words the worker's brief quotes.
const QUOTED_CHARS: usize = 6_000;

/// Why a call's `replaces` or `start_from` is refused: for the lead to read and fix;
/// never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplaceError {
    #[error(
        "`{field}` names {id}, which is no subtask you delegated in this run; name a \
         rejected, failed or conflicting subtask by the id its result begins with"
    )]
    Unknown { field: &'static str, id: SubtaskId },
    #[error(
        "`{field}` names {id}, which merged: the result holds its work already; delegate \
         the follow-up without `{field}`"
    )]
    Merged { field: &'static str, id: SubtaskId },
    #[error(
        "`start_from` names {id}, which has not settled yet: its work is kept only once \
         it has; `wait` for its result, then delegate the follow-up"
    )]
    Running { id: SubtaskId },
    #[error(
        "`start_from` names {id}, whose work was not kept (it ended before anything was \
         committed); delegate the follow-up without `start_from`, with `replaces` if it \
         does {id}'s work"
    )]
    NoWork { id: SubtaskId },
    #[error(
        "`replaces` names {replaces} but `start_from` names {start_from}: a subtask \
         replaces one subtask, and `start_from` names it already; leave `replaces` out"
    )]
    Two {
        replaces: SubtaskId,
        start_from: SubtaskId,
    },
}

/// The archived work a `start_from` subtask's tree starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StartFrom {
    /// The subtask whose work it is.
    pub(crate) id: SubtaskId,
    /// Its archive ref, `refs/grove/archive/<run>/<n>`.
    pub(crate) reference: String,
    /// Its last checkpoint, the archive's commit.
    pub(crate) commit: CommitId,
    /// Where that subtask's own work started (the base, or the result when it started):
    /// the older side of the whole change the follow-up's merge brings.
    pub(crate) origin: CommitId,
}

impl StartFrom {
    /// The per-worktree ref that names the start to the worker's git (grove's own refs
    /// are hidden from it; a per-worktree ref lives in the tree's admin dir, which it
    /// reads).
    pub(crate) fn worktree_ref(&self) -> String {
        format!("refs/worktree/{}", self.id)
    }

    /// What the reviewer is told the diff is against.
    pub(crate) fn against(&self) -> String {
        format!(
            "{}'s rejected work it started from (kept at {})",
            self.id, self.reference
        )
    }
}

/// Checks that `id`, named in `field`, is a subtask the lead delegated that has not
/// merged, from the journal's `subtasks`.
pub(crate) fn check_replaced(
    subtasks: &[SubtaskState],
    field: &'static str,
    id: SubtaskId,
) -> Result<(), ReplaceError> {
    let state = subtasks
        .iter()
        .find(|state| state.id == id && state.kind == SubtaskKind::Task)
        .ok_or(ReplaceError::Unknown { field, id })?;
    if state.status == SubtaskStatus::Merged {
        return Err(ReplaceError::Merged { field, id });
    }
    Ok(())
}

/// The work a `start_from` naming `id` starts from: `report`, its settled report
/// (`None` while it runs), and `journaled`, the run's subtasks as journaled.
pub(crate) fn start_from(
    facts: &RunFacts,
    id: SubtaskId,
    report: Option<&SubtaskReport>,
    journaled: &[SubtaskState],
) -> Result<StartFrom, ReplaceError> {
    let report = report.ok_or(ReplaceError::Running { id })?;
    if report.status == SubtaskOutcome::Merged {
        return Err(ReplaceError::Merged {
            field: "start_from",
            id,
        });
    }
    // A resumed run's report of an earlier process's subtask names no archive: its ref
    // is the first one a subtask's archive takes.
    let reference = report
        .archive_ref
        .clone()
        .unwrap_or_else(|| format!("refs/grove/archive/{}/{}", facts.run, id.number()));
    let commit = facts
        .repo
        .ref_target(&reference)
        .ok()
        .flatten()
        .ok_or(ReplaceError::NoWork { id })?;
    let origin = origin(journaled, id).unwrap_or(facts.base);
    if commit == origin {
        return Err(ReplaceError::NoWork { id });
    }
    Ok(StartFrom {
        id,
        reference,
        commit,
        origin,
    })
}

/// Where subtask `id`'s work started: its recorded start point, or, for a follow-up that
/// started from earlier work, where that work started (back along the chain); `None`:
/// the base.
fn origin(journaled: &[SubtaskState], id: SubtaskId) -> Option<CommitId> {
    let mut at = journaled.iter().find(|state| state.id == id)?;
    loop {
        if let Some(start) = at.start {
            return Some(start);
        }
        // Each link names an earlier subtask: the walk ends.
        let earlier = at.start_from?;
        at = journaled.iter().find(|state| state.id == earlier)?;
    }
}

/// What the worker of a follow-up on `from` is told after its brief: its tree holds the
/// earlier work, how its git reads it, and why that work was not merged — the earlier
/// reviewer's words fenced, since a model wrote them.
pub(crate) fn worker_note(from: &StartFrom, earlier: Option<&SubtaskReport>) -> String {
    let mut text = format!(
        "\n\n(grove: your tree starts from {id}'s work, kept at {reference}: its changes \
         are in your files already; build on them, do not redo them. Your git reads that \
         commit as `{named}`: `git diff {named}` shows what you changed on top of it.",
        id = from.id,
        reference = from.reference,
        named = from.worktree_ref(),
    );
    let Some(earlier) = earlier else {
        text.push(')');
        return text;
    };
    text.push_str(&format!(" {} ended {}", from.id, earlier.status));
    let mut words = String::new();
    if let Some(summary) = &earlier.review_summary {
        words.push_str(summary.trim());
        words.push('\n');
    }
    for finding in earlier.findings.iter().take(LISTED_FINDINGS) {
        words.push_str(&format!(
            "- {} {}: {}\n",
            finding.severity(),
            quoted_path(&finding.place().to_string()),
            finding.problem.trim()
        ));
    }
    if words.is_empty()
        && let Some(reason) = &earlier.reason
    {
        words.push_str(reason);
    }
    if words.trim().is_empty() {
        text.push_str(".)");
        return text;
    }
    text.push_str("; what its reviewer found, in its words:)\n\n");
    text.push_str(&fenced("text", &excerpt(&words, QUOTED_CHARS)));
    text
}

/// Names `from`'s commit in `worktree`'s own refs, so that its worker's git reads it
/// (see [`StartFrom::worktree_ref`]); a tree git did not register (a remote one) gets
/// none. Failing is the caller's to note: the tree holds the work all the same.
pub(crate) async fn name_start(
    facts: &RunFacts,
    worktree: &Worktree,
    from: &StartFrom,
) -> Result<(), crate::git::GitError> {
    if worktree.is_remote() || !worktree.admin_dir().is_dir() {
        return Ok(());
    }
    facts
        .repo
        .name_in_worktree(worktree.admin_dir(), &from.worktree_ref(), from.commit)
        .await
}
