//! Stages 1 to 5 of every subtask — a lead's, a fixer's and a resolver's — as one
//! function: prepare, work, commit, check, judge. Only where it starts differs
//! ([`Start`]); its landing (stage 6) is its caller's, since a delegated subtask merges
//! in its own turn and a resolver in the turn of the subtask it resolves.
//!
//! This file owns what differs by start and nothing else: a resolver works until no
//! conflict marker is left (or it may not go on), is diffed against the result, and a
//! marker left is its rejection; a delegated subtask is held to its write scope, checked
//! outside its `--jobs` slot, and a red check can be its rejection. Each stage's outcome
//! goes into the pipeline's [`Stages`] the moment it is known, so a stage that fails
//! still leaves what came before it in the report.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::agent::roles::{self, RoleDef, RoleKind};
use crate::agent::{Ledger, isolated_messages};
use crate::event::AgentLabel;
use crate::git::{BranchDiff, CommitId, LeftMarker};
use crate::model::{ContentBlock, Message, Role};
use crate::run::context::{RunContext, RunFacts, RunRecord};
use crate::run::id::SubtaskId;
use crate::run::report::executes_later;
use crate::run::subtask::attempts::{Candidate, Fate, Seat};
use crate::run::subtask::check::{self, Slots};
use crate::run::subtask::commit::{self, Committed};
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::outcome::{Author, Judge, Made, Stages};
use crate::run::subtask::retry::StartFrom;
use crate::run::subtask::work::{self, Assignment};
use crate::run::subtask::{prepare, reviewer};
use crate::run::verdict::Verdict;
use crate::store::journal::{Entry, Finding, VerdictKind};
use crate::store::transcript::{self, PendingAnswer, Transcript};
use crate::tools::{self, ToolSet, WriteScope};
use crate::worktree::Worktree;

/// How many times a resolver that left conflict markers gets them back as findings
/// before the markers are its rejection.
pub(crate) const MARKER_RETURNS: u32 = 2;

/// What a resolver's reviewer is told its diff is against.
const AGAINST_RESULT: &str = "the run's result";

/// Where a subtask's pipeline starts, and so what differs on its way.
pub(crate) enum Start<'a> {
    /// A lead's or a fixer's subtask, from its start point: the worker's turns once, its
    /// diff against that start, held to its write `scope`; its check runs outside its
    /// `--jobs` slot (`permit`, given back in [`Judged::permit`]).
    Delegated {
        assignment: Box<Assignment>,
        permit: OwnedSemaphorePermit,
        scope: Option<&'a WriteScope>,
        /// The archived work it starts from (`start_from`): its reviewer sees the diff
        /// against that, and the whole change its merge brings.
        start_from: Option<&'a StartFrom>,
        slots: Slots<'a>,
        /// Its place on its group's bench when it is one attempt of several: the bench
        /// decides it instead of its own reviewer.
        seat: Option<Seat>,
    },
    /// A resolver, from the conflicted merge of a subtask onto `result`: its turns again
    /// while it leaves conflict markers, its diff against `result`.
    Resolving { result: CommitId },
}

/// A subtask judged: its branch's tip, the verdict, and its `--jobs` slot when it came
/// with one.
pub(crate) struct Judged {
    pub(crate) tip: CommitId,
    pub(crate) verdict: VerdictKind,
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

/// What a follow-up's reviewer is told its diff is against (`from`'s work), and the
/// whole change its merge brings: from where `from`'s work started to `tip`.
async fn whole_change(
    facts: &RunFacts,
    from: &StartFrom,
    tip: CommitId,
) -> Result<(String, BranchDiff), SubtaskError> {
    let bounds = facts.options.max_review_patch_bytes;
    let all = facts.repo.diff(from.origin, tip, bounds).await;
    Ok((
        from.against(),
        all.map_err(|source| SubtaskError::Diff { source })?,
    ))
}

/// A resolver's diff: against the run's `result` it resolved onto.
async fn against_result(
    facts: &RunFacts,
    result: CommitId,
    tip: CommitId,
) -> Result<BranchDiff, SubtaskError> {
    let bounds = facts.options.max_review_patch_bytes;
    let diff = facts.repo.diff(result, tip, bounds).await;
    diff.map_err(|source| SubtaskError::Diff { source })
}

/// Stages 1 to 5 of subtask `id` (briefed with `brief`) in `worktree`, from `start`;
/// each stage's outcome kept in `found`.
pub(crate) async fn judged(
    ctx: &Arc<RunContext>,
    id: SubtaskId,
    brief: &str,
    worktree: &Worktree,
    start: Start<'_>,
    found: &mut Stages,
) -> Result<Judged, SubtaskError> {
    prepare::prepare(ctx.tree_stage(), id, worktree).await?;
    // No worker spends a token before the check is proven on the base (a resolver only
    // starts once a subtask merged, past the gate).
    let author = match start {
        Start::Delegated { .. } => Author::Worker,
        Start::Resolving { .. } => Author::Resolver,
    };
    if author == Author::Worker && !ctx.trees.base_gate.opened().await {
        return Err(SubtaskError::Interrupted);
    }
    let mut whole = None;
    let mut seat = None;
    let (committed, diff, markers, scope, slot) = match start {
        Start::Delegated {
            assignment,
            permit,
            scope,
            start_from,
            slots,
            seat: taken,
        } => {
            seat = taken;
            let work = work::work(ctx, *assignment, worktree).await;
            found.worker_ledger = work.ledger;
            let committed = commit::commit(&ctx.facts, &ctx.record, id, worktree, work).await?;
            let diff = committed.diff.clone();
            if let Some(from) = start_from {
                whole = Some(whole_change(&ctx.facts, from, committed.tip).await?);
            }
            (committed, diff, Vec::new(), scope, Some((slots, permit)))
        }
        Start::Resolving { result } => {
            let (ledger, worked) = work_until_clean(ctx, id, brief, result, worktree).await;
            found.worker_ledger = ledger;
            let (committed, markers) = worked?;
            let diff = against_result(&ctx.facts, result, committed.tip).await?;
            (committed, diff, markers, None, None)
        }
    };
    let made = Made {
        author,
        summary: committed.summary.trim().to_owned(),
        stat: diff.stat.clone(),
        executes_later: executes_later(&diff.stat),
        left_out: left_out_of_commit(&ctx.facts, &ctx.record, id, worktree).await,
        outside_paths: scope
            .map_or_else(Vec::new, |scope| commit::outside_scope(&diff.stat, scope)),
    };
    // Kept whatever happens next: a failed review still reports what was made.
    found.made = Some(made.clone());
    let mut permit = match slot {
        Some((slots, permit)) => {
            let (check, permit) =
                check::check_subtask(ctx.tree_stage(), slots, permit, id, worktree, &diff).await?;
            found.check = check;
            Some(permit)
        }
        None => {
            found.check = check::check_in_slot(ctx.tree_stage(), id, worktree, &diff).await?;
            None
        }
    };
    let rule = if author == Author::Worker {
        check::required_rejection(&ctx.facts, &ctx.record, id, found.check.as_ref())?
            .map(|required| (Judge::Rule(required.reason), required.verdict))
    } else if markers.is_empty() {
        None
    } else {
        Some(markers_rejected(&ctx.record, id, &markers)?)
    };
    let judged = match rule {
        Some(judged) => judged,
        None => {
            let flagged = reviewer::Flagged {
                executes_later: &made.executes_later,
                left_out: &made.left_out,
                check: reviewer::check_of(&ctx.facts, found.check.as_ref()),
                outside_paths: &made.outside_paths,
                paths: scope.map_or(&[], WriteScope::globs),
                against: None,
                whole: None,
            };
            let flagged = match (made.author, &whole) {
                (Author::Resolver, _) => flagged.against(AGAINST_RESULT),
                (Author::Worker, Some((against, all))) => flagged.against(against).with_whole(all),
                (Author::Worker, None) => flagged,
            };
            let fate = match seat {
                Some(seat) => {
                    // Its `--jobs` slot goes to the next attempt: held at the bench, the
                    // slots of the attempts there could be all there are while another
                    // attempt waits for one, and the bench would wait for it forever.
                    drop(permit.take());
                    seat.take(candidate(&diff, found, &made, scope, worktree))
                        .await
                }
                None => Fate::Review,
            };
            let (ledger, judged) =
                verdict_of(ctx, (id, brief), &diff, flagged, worktree, fate).await;
            found.reviewer_ledger = ledger;
            judged?
        }
    };
    let verdict = judged.1.kind;
    found.judged = Some(judged);
    Ok(Judged {
        tip: committed.tip,
        verdict,
        permit,
    })
}

/// The verdict on subtask `id`'s diff when no rule decided it: its group's bench's
/// (`fate`) when it is an attempt, else its own reviewer's; and what deciding it cost.
async fn verdict_of(
    ctx: &Arc<RunContext>,
    (id, brief): (SubtaskId, &str),
    diff: &BranchDiff,
    flagged: reviewer::Flagged<'_>,
    worktree: &Worktree,
    fate: Fate,
) -> (Ledger, Result<(Judge, Verdict), SubtaskError>) {
    match fate {
        Fate::Review => {
            let review = reviewer::review(ctx, id, brief, diff, flagged, worktree).await;
            let verdict = review.verdict.map(|verdict| (Judge::Reviewer, verdict));
            (review.ledger, verdict)
        }
        Fate::Decided {
            judge,
            verdict,
            ledger,
        } => (ledger, Ok((judge, verdict))),
        Fate::NoDecision {
            interrupted,
            reason,
        } => (
            Ledger::default(),
            Err(if interrupted || ctx.stopping() {
                SubtaskError::Interrupted
            } else {
                SubtaskError::Judge { reason }
            }),
        ),
    }
}

/// What an attempt hands its group's bench.
fn candidate(
    diff: &BranchDiff,
    found: &Stages,
    made: &Made,
    scope: Option<&WriteScope>,
    worktree: &Worktree,
) -> Candidate {
    Candidate {
        diff: diff.clone(),
        check: found.check.clone(),
        made: made.clone(),
        paths: scope.map_or_else(Vec::new, |scope| scope.globs().to_vec()),
        worktree: worktree.clone(),
    }
}

/// The paths of `worktree` the commit left out as git data (`Repo::git_dir_paths`), for
/// the reviewer and the report. Not knowing them is noted, not fatal: the commit left
/// them out either way.
async fn left_out_of_commit(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    worktree: &Worktree,
) -> Vec<String> {
    // A remote tree's checkpoints are made by its host's grove, which leaves git data
    // out the same way; its files are not here to list.
    if worktree.is_remote() {
        return Vec::new();
    }
    match facts.repo.git_dir_paths(worktree).await {
        Ok(paths) => paths,
        Err(error) => {
            record.note(format!(
                "{id}: could not list the paths left out of its commit: {error}"
            ));
            Vec::new()
        }
    }
}

/// A resolver's work: works and commits; while conflict markers are left and the worker
/// has turns (and [`MARKER_RETURNS`] allow), it gets them back as findings and goes on.
/// Returns the worker's turns, and the last commit and the markers it still holds.
async fn work_until_clean(
    ctx: &Arc<RunContext>,
    id: SubtaskId,
    brief: &str,
    result: CommitId,
    worktree: &Worktree,
) -> (Ledger, Result<(Committed, Vec<LeftMarker>), SubtaskError>) {
    let role = roles::builtin(RoleKind::Worker);
    let mut start = Transcript {
        messages: isolated_messages(brief),
        ..Transcript::default()
    };
    let mut current_brief = brief.to_owned();
    let mut returned = 0;
    loop {
        let assignment = Assignment {
            id,
            brief: current_brief.clone(),
            worker_brief: current_brief.clone(),
            role: role.clone(),
            tools: tools::builtin_with_executor(ToolSet::Worker, ctx.trees.executor.clone()),
            start,
        };
        let work = work::work(ctx, assignment, worktree).await;
        let ledger = work.ledger;
        let committed = match commit::commit(&ctx.facts, &ctx.record, id, worktree, work).await {
            Ok(committed) => committed,
            Err(error) => return (ledger, Err(error)),
        };
        let markers = match ctx.facts.repo.added_conflict_markers(result, committed.tip) {
            Ok(markers) => markers,
            Err(source) => return (ledger, Err(SubtaskError::MarkersUnchecked { source })),
        };
        let turns_left = ledger.steps < ctx.facts.options.max_turns.worker;
        if markers.is_empty() || returned == MARKER_RETURNS || !turns_left {
            return (ledger, Ok((committed, markers)));
        }
        returned += 1;
        let note = markers_note(&markers);
        ctx.note(format!(
            "{id}: {} conflict marker(s) left; back to the resolver",
            markers.len()
        ));
        current_brief = format!("{brief}\n\n{note}");
        start = continued(
            &ctx.facts,
            id,
            &role,
            brief,
            ledger,
            &committed.summary,
            &note,
        );
    }
}

/// The resolver's conversation so far (or its brief), its last answer, then `note`.
fn continued(
    facts: &RunFacts,
    id: SubtaskId,
    role: &RoleDef,
    brief: &str,
    ledger: Ledger,
    summary: &str,
    note: &str,
) -> Transcript {
    let saved = transcript::load(&facts.transcript_path(AgentLabel::Subtask(id), &role.name))
        .ok()
        .flatten();
    let mut messages = match saved {
        Some(saved) => saved.messages,
        None => isolated_messages(brief),
    };
    transcript::answer_pending(&mut messages, |_, _, _| PendingAnswer::Interrupted);
    let answer = if summary.trim().is_empty() {
        "(done)".to_owned()
    } else {
        summary.to_owned()
    };
    messages.push(Message {
        role: Role::Assistant,
        content: vec![ContentBlock::Text { text: answer }],
    });
    messages.push(Message::user_text(note));
    Transcript {
        messages,
        ledger,
        ..Transcript::default()
    }
}

/// What a resolver is told of the markers it left.
fn markers_note(markers: &[LeftMarker]) -> String {
    let mut text = String::from(
        "grove committed your work, but conflict markers are still in the files; resolve \
         each one (keep what both sides intend, remove the marker lines):\n",
    );
    for marker in markers {
        text.push_str(&format!("- {}:{}\n", marker.path, marker.line));
    }
    text
}

/// The rejection of a resolution that still holds conflict markers (no reviewer is
/// asked: such a merge is never merged), journaled.
fn markers_rejected(
    record: &RunRecord,
    id: SubtaskId,
    markers: &[LeftMarker],
) -> Result<(Judge, Verdict), SubtaskError> {
    let verdict = Verdict {
        kind: VerdictKind::Reject,
        summary: format!(
            "The resolution still holds {} conflict marker(s); it is never merged.",
            markers.len()
        ),
        findings: markers
            .iter()
            .map(|marker| Finding {
                path: marker.path.clone(),
                line: Some(marker.line),
                problem: "a conflict marker is left".to_owned(),
                blocking: true,
            })
            .collect(),
    };
    record.journal(Entry::Verdict {
        subtask: id,
        verdict: verdict.kind,
        summary: verdict.summary.clone(),
        findings: verdict.findings.clone(),
    })?;
    let reason = format!(
        "its resolution still holds {} conflict marker(s); no reviewer was asked and it is \
         never merged",
        markers.len()
    );
    Ok((Judge::Rule(reason), verdict))
}
