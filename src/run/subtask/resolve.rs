//! A resolver: when an approved subtask conflicts with the run's result, a worker merges
//! the two by hand and a fresh reviewer judges the merge.
//!
//! The resolver is a subtask of its own (kind `resolve`, its own number and branch
//! `grove/<run>/<n>`, journaled like any other) that starts from a commit grove writes:
//! the result with the conflicting subtask's branch merged in, conflict markers in the
//! files (`<<<<<<< grove/<run>/result` … `>>>>>>> grove/<run>/<k>`). Its brief holds the
//! conflicting subtask's brief, the briefs of the merged subtasks that changed the
//! conflicting paths (from the journal's merges) and the paths. Its pipeline is a task's
//! ([`pipeline::judged`] from [`Start::Resolving`]) — prepare, work, commit, check — with
//! a marker check (a marker left goes back to the worker while
//! [`MARKER_RETURNS`](super::pipeline::MARKER_RETURNS) and its turns allow, and is a
//! rejection after), then a fresh reviewer that sees the resolver's brief and the diff against the result.
//! Approved, the resolver's commit is merged onto the result and the conflicting
//! subtask counts as merged (`resolution: resolver`); otherwise the result is unchanged,
//! the subtask stays `conflict` and both sides are archived.
//!
//! Merge order. A resolver's number is settled the moment it is taken (nothing ever
//! merges under it: its merge counts as the conflicting subtask's). It takes the merge
//! turn only for its merge, like any subtask, so other subtasks go on merging while it
//! works (issue 43): its commit, made on the result as it was when the conflict came, is
//! merged onto the result as it is then, and a new conflict there is the resolution's
//! conflict (nothing merged, both sides archived). It works in a `--jobs` slot like any
//! worker; the conflicting subtask gave its own up before it merged, and every slot
//! holder gives its up before it waits for the merge turn, so the slot always comes.
//!
//! Numbering. A resolver takes the next subtask number (so its branch, worktree path,
//! transcripts and archive are named like any subtask's, and it counts toward the run's
//! subtask cap). Its worktree is made like any subtask's — the one registered ahead for
//! that number is used — then moved forward (`Repo::restart_worktree`, a compare-and-swap
//! of a branch that holds nothing yet) to the conflicted merge: a start no other subtask
//! has (a commit grove writes), so it does not share the start-from-the-result plumbing of
//! subtasks that wait for others.
//!
//! Resume. A resolver interrupted mid-way is not resumed: it is closed as failed (its
//! branch archived), and the conflicting subtask, still open, is resumed, conflicts
//! again and starts a new resolver from the result as it is then. A resolution is
//! merged whole or not at all.
//!
//! This file owns the resolver's pipeline and what it and its reviewer are told. It must
//! never merge a resolution no fresh reviewer approved or one that leaves a conflict
//! marker, and never lose either side: what is not merged is archived.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::event::Event;
use crate::git::{CommitId, MergeOutcome, MergeSide};
use crate::run::context::{RunContext, RunFacts, RunRecord};
use crate::run::id::SubtaskId;
use crate::run::merge_queue::MergeQueue;
use crate::run::report::SubtaskReport;
use crate::run::subtask::error::{SubtaskError, journal_out};
use crate::run::subtask::integrate::Integration;
use crate::run::subtask::outcome::{Landing, Stages, Stop};
use crate::run::subtask::pipeline::{self, Start};
use crate::run::subtask::prepare::{self, AheadWorktrees};
use crate::run::subtask::{close, integrate, trees};
use crate::store::StoreError;
use crate::store::journal::{ContextMode, Entry, SubtaskKind, SubtaskOutcome, VerdictKind};
use crate::store::state::SubtaskState;
use crate::text::truncate;
use crate::worktree::Worktree;

/// How many resolvers one conflict gets: a rejected or failed resolution is final.
pub(crate) const MAX_RESOLVERS: u32 = 1;

/// How much of each brief a resolver's brief quotes.
const QUOTED_BRIEF_CHARS: usize = 4_000;

/// What a resolver needs of the run's subtasks.
pub(crate) struct Resolving<'a> {
    pub(crate) ctx: &'a Arc<RunContext>,
    pub(crate) queue: &'a Arc<MergeQueue>,
    pub(crate) ahead: &'a AheadWorktrees,
    pub(crate) jobs: &'a Arc<Semaphore>,
    pub(crate) tasks: &'a TaskTracker,
}

/// An approved subtask whose merge onto the result conflicted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conflict<'a> {
    pub(crate) id: SubtaskId,
    pub(crate) brief: &'a str,
    /// Its approved commit.
    pub(crate) tip: CommitId,
    pub(crate) paths: &'a [String],
}

/// How the resolution of one conflict ended.
#[derive(Debug)]
pub(crate) struct Resolution {
    /// Each resolver's report, with its number.
    pub(crate) resolvers: Vec<(SubtaskId, SubtaskReport)>,
    pub(crate) end: ResolutionEnd,
}

/// Where the conflicting subtask stands once its resolvers are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResolutionEnd {
    /// Resolver `by` merged it; the result is now `result`.
    Merged { by: SubtaskId, result: CommitId },
    /// No resolver got it merged; the result is unchanged. The last one's reason.
    Unresolved { reason: String },
    /// The run stopped meanwhile; nothing was merged.
    Interrupted,
}

/// Starts resolvers for `conflict`, one after another, until one is merged or
/// [`MAX_RESOLVERS`] have tried; journals the conflicting subtask's merge when one is.
pub(crate) async fn resolve_conflict(
    env: &Resolving<'_>,
    conflict: Conflict<'_>,
) -> Result<Resolution, StoreError> {
    let mut resolvers = Vec::new();
    let mut end = ResolutionEnd::Unresolved {
        reason: "no resolver ran".to_owned(),
    };
    for _ in 0..MAX_RESOLVERS {
        if env.ctx.agents.budget.is_spent() {
            end = ResolutionEnd::Unresolved {
                reason: "the run's token budget is spent; no resolver started".to_owned(),
            };
            break;
        }
        let (id, report, attempt) = resolve(env, conflict).await?;
        let reason = report.reason.clone().unwrap_or_default();
        resolvers.push((id, report));
        end = match attempt {
            Attempt::Merged { result } => {
                env.ctx.journal(Entry::Merged {
                    subtask: conflict.id,
                    commit: conflict.tip,
                    result,
                })?;
                ResolutionEnd::Merged { by: id, result }
            }
            Attempt::NotMerged => ResolutionEnd::Unresolved {
                reason: format!("{id}: {reason}"),
            },
            Attempt::Interrupted => ResolutionEnd::Interrupted,
        };
        if !matches!(end, ResolutionEnd::Unresolved { .. }) {
            break;
        }
    }
    Ok(Resolution { resolvers, end })
}

/// How one resolver ended.
enum Attempt {
    Merged { result: CommitId },
    NotMerged,
    Interrupted,
}

/// One resolver from its start to its close.
async fn resolve(
    env: &Resolving<'_>,
    conflict: Conflict<'_>,
) -> Result<(SubtaskId, SubtaskReport, Attempt), StoreError> {
    let ctx = env.ctx;
    // Nothing merges under its number: its merge is the conflicting subtask's (module doc).
    let id = env.queue.next_id();
    env.queue.settle(id);
    let branch = ctx.facts.run.subtask_branch(id.number());
    let brief = resolver_brief(&ctx.facts, &ctx.record, conflict);
    ctx.journal(Entry::SubtaskStarted {
        subtask: id,
        task: brief.clone(),
        branch: branch.clone(),
        mode: ContextMode::Isolated,
        agent: "worker".into(),
        kind: SubtaskKind::Resolve,
        replaces: None,
        start_from: None,
        paths: Vec::new(),
        after: Vec::new(),
        waits_for: Vec::new(),
    })?;
    ctx.record.events.emit(Event::SubtaskStarted {
        label: id,
        task: format!(
            "resolve {}'s conflict with the result in {}",
            conflict.id,
            conflict.paths.join(", ")
        ),
        branch: branch.clone(),
    });
    let mut base = SubtaskReport::new(id, brief.clone(), branch);
    base.kind = SubtaskKind::Resolve;
    let permit = tokio::select! {
        permit = Arc::clone(env.jobs).acquire_owned() => permit.ok(),
        () = ctx.record.cancel.cancelled() => None,
    };
    let mut found = Stages::default();
    let (worktree, reached) = match permit {
        None => (None, Err(SubtaskError::Interrupted)),
        Some(_permit) => start_and_run(env, id, &brief, conflict, &mut found).await,
    };
    let (attempt, stop) = match journal_out(reached)? {
        Ok(attempt) => (attempt, None),
        Err(error)
            if matches!(error, SubtaskError::Interrupted)
                || ctx.pause_if_disk_full(&format!("resolver {id}"), &error)
                || ctx.stopping() =>
        {
            // Left open: a resume closes it and starts the resolution again.
            let stop = Stop::Resumable(format!("interrupted ({error}); nothing was merged"));
            let mut report = found.report(base, Some(&stop));
            report.sum_ledgers();
            return Ok((id, report, Attempt::Interrupted));
        }
        Err(error) => (Attempt::NotMerged, Some(Stop::Failed(error.to_string()))),
    };
    let report = found.report(base, stop.as_ref());
    let report = close::close(ctx, env.queue, env.tasks, id, report, worktree.as_ref()).await?;
    Ok((id, report, attempt))
}

/// Makes the resolver's start (the subtask merged onto the result, with conflict
/// markers) and its worktree — made like any subtask's, then moved forward to that
/// start — and runs the stages there. The worktree, once made, is returned whatever
/// happened, so that its close archives and removes it.
async fn start_and_run(
    env: &Resolving<'_>,
    id: SubtaskId,
    brief: &str,
    conflict: Conflict<'_>,
    found: &mut Stages,
) -> (Option<Worktree>, Result<Attempt, SubtaskError>) {
    let ctx = env.ctx;
    let (start, result) = match conflicted_start(&ctx.facts, id, conflict).await {
        Ok(started) => started,
        Err(error) => return (None, Err(error)),
    };
    let fresh = match prepare::create_worktree(ctx.tree_stage(), env.ahead, id, None, None).await {
        Ok(fresh) => fresh,
        Err(error) => return (None, Err(error)),
    };
    let worktree = match ctx.facts.repo.restart_worktree(fresh.clone(), start).await {
        Ok(worktree) => worktree,
        Err(source) => return (Some(fresh), Err(source.into())),
    };
    let reached = stages(env, id, brief, conflict, result, &worktree, found).await;
    (Some(worktree), reached)
}

/// The conflicted merge of the subtask onto the result, and the result it is made on.
async fn conflicted_start(
    facts: &RunFacts,
    id: SubtaskId,
    conflict: Conflict<'_>,
) -> Result<(CommitId, CommitId), SubtaskError> {
    let result_ref = facts.run.result_ref();
    let result = facts
        .repo
        .ref_target(&result_ref)
        .map_err(|source| SubtaskError::Branch { source })?
        .ok_or_else(|| SubtaskError::BranchVanished {
            branch: result_ref.clone(),
        })?;
    let (ours, theirs) = (
        facts.run.result_branch(),
        facts.run.subtask_branch(conflict.id.number()),
    );
    let message = format!(
        "grove {}: {id} starts: {} merged onto the result, with conflict markers\n",
        facts.run, conflict.id
    );
    let merged = facts
        .repo
        .conflicted_merge(
            MergeSide {
                label: &ours,
                commit: result,
            },
            MergeSide {
                label: &theirs,
                commit: conflict.tip,
            },
            &message,
        )
        .await
        .map_err(|source| SubtaskError::ConflictedMerge { source })?;
    Ok((merged.commit, result))
}

/// Stages 1 to 5 from the conflicted start ([`pipeline::judged`]), then the merge onto
/// the result, holding the merge turn; each stage's outcome kept in `found`.
async fn stages(
    env: &Resolving<'_>,
    id: SubtaskId,
    brief: &str,
    conflict: Conflict<'_>,
    result: CommitId,
    worktree: &Worktree,
    found: &mut Stages,
) -> Result<Attempt, SubtaskError> {
    let ctx = env.ctx;
    let start = Start::Resolving { result };
    let judged = pipeline::judged(ctx, id, brief, worktree, start, found).await?;
    if judged.verdict == VerdictKind::Reject {
        found.landing = Some(Landing::Integrated(Integration::Rejected));
        return Ok(Attempt::NotMerged);
    }
    let message = integrate::merge_message(
        &ctx.facts.run,
        &format!("merge {}, resolved by {id}", conflict.id),
        conflict.id,
        conflict.brief,
    );
    let Some(_turn) = env.queue.merge_turn().await else {
        return Err(SubtaskError::Interrupted);
    };
    match integrate::merge_journaled(&ctx.facts, &ctx.record, id, judged.tip, &message).await? {
        MergeOutcome::Merged { commit } => {
            found.landing = Some(Landing::Integrated(Integration::Merged));
            Ok(Attempt::Merged { result: commit })
        }
        // The result holds the resolution already: only a second process could do that.
        MergeOutcome::AlreadyMerged => Ok(Attempt::NotMerged),
        MergeOutcome::Conflict { paths } => {
            found.landing = Some(Landing::Integrated(Integration::Conflict { paths }));
            Ok(Attempt::NotMerged)
        }
    }
}

/// The resolver's brief: what to do, the conflicting paths, the conflicting subtask's
/// brief and the briefs of the merged subtasks that changed those paths.
fn resolver_brief(facts: &RunFacts, record: &RunRecord, conflict: Conflict<'_>) -> String {
    let (ours, theirs) = (
        facts.run.result_branch(),
        facts.run.subtask_branch(conflict.id.number()),
    );
    let k = conflict.id;
    let mut text = format!(
        "Resolve a merge conflict. Subtask {k} was approved by its reviewer, but merging \
         its branch onto the run's result conflicted. Your working directory is the \
         result (`{ours}`) with {k}'s branch (`{theirs}`) merged in: the conflicting \
         files hold `git merge` conflict markers (`<<<<<<< {ours}`, `=======`, \
         `>>>>>>> {theirs}`).\n\nMake each conflicting file hold both changes as their \
         briefs intend, remove every marker, and change nothing else. grove commits your \
         work; do not commit, merge or reset with git yourself.\n\n# Conflicting paths\n\n"
    );
    for path in conflict.paths {
        text.push_str(&format!("- {}\n", crate::text::quoted_path(path)));
    }
    text.push_str(&format!(
        "\n# {k}'s brief (the subtask being merged, `{theirs}`)\n\n{}\n",
        truncate(conflict.brief.trim(), QUOTED_BRIEF_CHARS)
    ));
    let merged = merged_briefs(facts, record, conflict.paths);
    text.push_str(&format!(
        "\n# The briefs of the work already merged that changed these paths (`{ours}`)\n"
    ));
    if merged.is_empty() {
        text.push_str("\nNone found in the run's merges: read the result's history.\n");
    }
    for (id, brief) in merged {
        text.push_str(&format!(
            "\n## {id}\n\n{}\n",
            truncate(brief.trim(), QUOTED_BRIEF_CHARS)
        ));
    }
    text
}

/// The subtasks merged onto the result (resolvers aside: their subtask is listed) whose
/// merge changed one of `paths`, with their briefs, in merge order.
fn merged_briefs(
    facts: &RunFacts,
    record: &RunRecord,
    paths: &[String],
) -> Vec<(SubtaskId, String)> {
    let state = record.journal.state();
    state
        .subtasks
        .iter()
        .filter(|subtask| subtask.kind != SubtaskKind::Resolve)
        .filter_map(|subtask| {
            let merge = subtask.merge.as_ref()?;
            let changed = facts.repo.paths_changed_by(merge.result).ok()?;
            changed
                .iter()
                .any(|path| paths.contains(path))
                .then(|| (subtask.id, subtask.task.clone()))
        })
        .collect()
}

/// Closes resolver `state`, left running by an interrupted run, as failed: its work is
/// archived, and the conflicting subtask, resumed, starts the resolution again.
pub(crate) async fn close_interrupted(
    env: &Resolving<'_>,
    id: SubtaskId,
    state: &SubtaskState,
) -> Result<SubtaskReport, StoreError> {
    let ctx = env.ctx;
    let mut report = SubtaskReport::new(state.id, state.task.clone(), state.branch.clone());
    report.kind = SubtaskKind::Resolve;
    report.worker_ledger = state.ledger;
    if state.merge.is_some() {
        // Merged before the run stopped: the conflicting subtask, resumed, finds its
        // work on the result already.
        report.status = SubtaskOutcome::Merged;
        report.reason = Some("merged before the run was interrupted".to_owned());
    } else {
        report.reason = Some(
            "interrupted; a resolver is not resumed: the conflicting subtask, resumed, \
             starts the resolution again"
                .to_owned(),
        );
    }
    let spec = ctx.facts.worktree_spec(id);
    let found = ctx
        .facts
        .repo
        .find_worktree(&ctx.facts.run, id.number(), ctx.facts.base, &spec.path)
        .ok()
        .flatten();
    // A copy-on-write one is mounted again, so that its close archives what it holds.
    let worktree = match found {
        Some(found) => trees::remount(ctx.tree_stage(), found).await.ok(),
        None => None,
    };
    close::close(ctx, env.queue, env.tasks, id, report, worktree.as_ref()).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::run::test_support::{ScriptedModel, TestRun};
    use crate::settings::options::RunOptions;
    use crate::store::journal::Finding;

    const BASE: &str = "one\ntwo\nthree\n";
    const BOTH: &str = "one\nTWO by S1\nTWO by S2\nthree\n";

    /// A run whose result holds S1's change to line 2 of `a.txt`, and S2's approved
    /// branch changing the same line: S2's tip, and the queue with S1 settled.
    async fn conflicting(model: Arc<ScriptedModel>) -> (TestRun, CommitId, Arc<MergeQueue>) {
        conflicting_with(model, RunOptions::new("t")).await
    }

    async fn conflicting_with(
        model: Arc<ScriptedModel>,
        options: RunOptions,
    ) -> (TestRun, CommitId, Arc<MergeQueue>) {
        let run = TestRun::new(&[("a.txt", BASE)], options, model).await;
        let ctx = &run.ctx;
        ctx.facts
            .repo
            .create_result_branch(&ctx.facts.run, ctx.facts.base)
            .await
            .unwrap();
        let queue = Arc::new(MergeQueue::new(ctx.record.cancel.clone()));
        let (s1, _s2) = (queue.next_id(), queue.next_id());
        let first = run.worktree(1).await;
        std::fs::write(first.path().join("a.txt"), "one\nTWO by S1\nthree\n").unwrap();
        first
            .checkpoint(&ctx.facts.repo, "S1: final")
            .await
            .unwrap();
        let tip1 = run.rev(&first.branch_ref());
        let MergeOutcome::Merged { commit } = ctx
            .facts
            .repo
            .merge_onto(&ctx.facts.run.result_ref(), tip1, "merge S1")
            .await
            .unwrap()
        else {
            panic!("S1 merges cleanly");
        };
        ctx.journal(Entry::Merged {
            subtask: SubtaskId(1),
            commit: tip1,
            result: commit,
        })
        .unwrap();
        queue.settle(s1);
        let second = run.worktree(2).await;
        std::fs::write(second.path().join("a.txt"), "one\nTWO by S2\nthree\n").unwrap();
        second
            .checkpoint(&ctx.facts.repo, "S2: final")
            .await
            .unwrap();
        let tip2 = run.rev(&second.branch_ref());
        (run, tip2, queue)
    }

    async fn resolve_s2(run: &TestRun, queue: &Arc<MergeQueue>, tip: CommitId) -> Resolution {
        let env = Resolving {
            ctx: &run.ctx,
            queue,
            ahead: &AheadWorktrees::default(),
            jobs: &Arc::new(Semaphore::new(2)),
            tasks: &TaskTracker::new(),
        };
        let paths = vec!["a.txt".to_owned()];
        let conflict = Conflict {
            id: SubtaskId(2),
            brief: "task 2",
            tip,
            paths: &paths,
        };
        resolve_conflict(&env, conflict).await.unwrap()
    }

    fn read_then_write(content: &str) -> Vec<crate::model::Response> {
        vec![
            ScriptedModel::tool_calls(&[("r1", "read_file", json!({"path": "a.txt"}))]),
            ScriptedModel::tool_calls(&[(
                "w1",
                "write_file",
                json!({"path": "a.txt", "content": content}),
            )]),
            ScriptedModel::text("kept both lines"),
        ]
    }

    fn verdict(verdict: &str) -> Vec<crate::model::Response> {
        vec![
            ScriptedModel::tool_calls(&[(
                "v1",
                "submit_verdict",
                json!({"verdict": verdict, "summary": format!("{verdict}d")}),
            )]),
            ScriptedModel::text("done"),
        ]
    }

    #[tokio::test]
    async fn an_approved_resolution_is_merged_in_the_subtasks_turn_and_both_changes_land() {
        let model = ScriptedModel::new([read_then_write(BOTH), verdict("approve")].concat());
        let (run, tip2, queue) = conflicting(model.clone()).await;
        let before = run.rev(&run.ctx.facts.run.result_ref());

        let resolution = resolve_s2(&run, &queue, tip2).await;

        let after = run.rev(&run.ctx.facts.run.result_ref());
        assert_eq!(
            resolution.end,
            ResolutionEnd::Merged {
                by: SubtaskId(3),
                result: after
            }
        );
        let result = run.ctx.facts.run.result_ref();
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["show", &format!("{result}:a.txt")]
            ),
            BOTH.trim_end(),
            "both changes are on the result"
        );
        let resolver_tip = run.rev(&format!("{}^2", after));
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["rev-parse", &format!("{after}^1")]
            ),
            before.to_string(),
            "the result moved by one merge commit"
        );
        assert!(
            run.ctx.facts.repo.is_ancestor(tip2, resolver_tip).unwrap(),
            "S2's work is in the result's history"
        );
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["log", "-1", "--format=%s", &result]
            ),
            format!("grove {}: merge S2, resolved by S3", run.ctx.facts.run)
        );
        let (ours, theirs) = (
            run.ctx.facts.run.result_branch(),
            run.ctx.facts.run.subtask_branch(2),
        );
        let read = &model.tool_results(1)[0].1;
        assert!(
            read.contains(&format!("<<<<<<< {ours}"))
                && read.contains(&format!(">>>>>>> {theirs}")),
            "the resolver reads git-merge markers naming both sides: {read}"
        );
        let requests = model.requests();
        let brief = requests[0].messages[0].text();
        assert!(
            brief.contains("# S2's brief") && brief.contains("task 2"),
            "{brief}"
        );
        assert!(
            brief.contains("## S1\n\ntask 1"),
            "S1 changed a.txt: {brief}"
        );
        assert!(brief.contains("- a.txt\n"), "{brief}");
        let review = requests[3].messages[0].text();
        assert_eq!(requests[3].messages.len(), 1, "a fresh reviewer");
        assert!(
            review.starts_with("# The subtask's brief\n\nResolve a merge conflict.")
                && review.contains("task 1")
                && review.contains("task 2")
                && review.contains("# The diff against the run's result (1 file changed, 1 insertion(+), 0 deletions(-))")
                && review.contains("+TWO by S2"),
            "both briefs and the diff against the result: {review}"
        );
        let [(id, report)] = resolution.resolvers.as_slice() else {
            panic!("one resolver: {:?}", resolution.resolvers);
        };
        assert_eq!(*id, SubtaskId(3));
        assert_eq!(
            (report.status, report.kind, report.verdict),
            (
                SubtaskOutcome::Merged,
                SubtaskKind::Resolve,
                Some(VerdictKind::Approve)
            )
        );
        let types = run.journal_types();
        assert_eq!(
            types[types.len() - 5..],
            [
                "checkpoint",
                "verdict",
                "merged",
                "subtask_finished",
                "merged"
            ],
            "the resolver's merge, its end, then S2's merge: {types:?}"
        );
        let state = run.ctx.record.journal.state();
        let s2 = state.subtask(SubtaskId(2)).unwrap();
        assert_eq!(
            s2.merge.as_ref().map(|m| m.result.to_string()),
            Some(after.to_string())
        );
        assert_eq!(
            state.subtask(SubtaskId(3)).unwrap().kind,
            SubtaskKind::Resolve
        );
    }

    #[tokio::test]
    async fn a_rejected_resolution_leaves_the_result_and_keeps_the_resolvers_work() {
        let model = ScriptedModel::new([read_then_write(BOTH), verdict("reject")].concat());
        let (run, tip2, queue) = conflicting(model).await;
        let before = run.rev(&run.ctx.facts.run.result_ref());

        let resolution = resolve_s2(&run, &queue, tip2).await;

        assert!(
            matches!(&resolution.end, ResolutionEnd::Unresolved { reason } if reason.starts_with("S3: ")),
            "{:?}",
            resolution.end
        );
        assert_eq!(
            run.rev(&run.ctx.facts.run.result_ref()),
            before,
            "nothing merged"
        );
        let report = &resolution.resolvers[0].1;
        assert_eq!(report.status, SubtaskOutcome::Rejected);
        let archive = report
            .archive_ref
            .clone()
            .expect("the resolution is archived");
        assert_eq!(
            run.git(
                &run.ctx.facts.user_root,
                &["show", &format!("{archive}:a.txt")]
            ),
            BOTH.trim_end()
        );
        assert!(
            !run.journal_types().ends_with(&["merged".to_owned()]),
            "S2 is not merged"
        );
    }

    #[tokio::test]
    async fn a_marker_left_goes_back_to_the_resolver_then_its_fix_is_reviewed() {
        let left = "one\nTWO by S1\nTWO by S2\n>>>>>>> leftover\nthree\n";
        let model = ScriptedModel::new(
            [
                vec![
                    ScriptedModel::tool_calls(&[(
                        "w0",
                        "write_file",
                        json!({"path": "a.txt", "content": left}),
                    )]),
                    ScriptedModel::text("resolved"),
                ],
                read_then_write(BOTH),
                verdict("approve"),
            ]
            .concat(),
        );
        let (run, tip2, queue) = conflicting(model.clone()).await;

        let resolution = resolve_s2(&run, &queue, tip2).await;

        assert!(
            matches!(resolution.end, ResolutionEnd::Merged { .. }),
            "{:?}",
            resolution.end
        );
        let requests = model.requests();
        let back = requests[2].messages.last().unwrap().text();
        assert!(
            back.contains("conflict markers are still in the files") && back.contains("- a.txt:4"),
            "the marker goes back as a finding: {back}"
        );
        assert_eq!(
            requests[2].messages[requests[2].messages.len() - 2].text(),
            "resolved",
            "after the resolver's own last answer"
        );
    }

    #[tokio::test]
    async fn markers_left_after_every_return_are_a_rejection_without_a_reviewer() {
        let left = "one\n<<<<<<< mine\nTWO\nthree\n";
        let round = || {
            vec![
                ScriptedModel::tool_calls(&[(
                    "w",
                    "write_file",
                    json!({"path": "a.txt", "content": left}),
                )]),
                ScriptedModel::text("resolved"),
            ]
        };
        let model = ScriptedModel::new([round(), round(), round()].concat());
        let (run, tip2, queue) = conflicting(model.clone()).await;
        let before = run.rev(&run.ctx.facts.run.result_ref());

        let resolution = resolve_s2(&run, &queue, tip2).await;

        assert_eq!(
            run.rev(&run.ctx.facts.run.result_ref()),
            before,
            "nothing merged"
        );
        let report = &resolution.resolvers[0].1;
        assert_eq!(
            (report.status, report.findings.clone()),
            (
                SubtaskOutcome::Rejected,
                vec![Finding {
                    path: "a.txt".into(),
                    line: Some(2),
                    problem: "a conflict marker is left".into(),
                    blocking: true,
                }]
            )
        );
        assert_eq!(
            model.requests().len(),
            2 * (pipeline::MARKER_RETURNS as usize + 1),
            "no reviewer is asked about a resolution with markers"
        );
    }

    #[tokio::test]
    async fn the_projects_check_runs_on_the_resolvers_worktree_and_its_reviewer_weighs_it() {
        let model = ScriptedModel::new([read_then_write(BOTH), verdict("approve")].concat());
        let options = RunOptions {
            check: Some(crate::settings::options::CheckOptions::new(
                "grep -c TWO a.txt",
            )),
            ..RunOptions::new("t")
        };
        let (run, tip2, queue) = conflicting_with(model.clone(), options).await;

        let resolution = resolve_s2(&run, &queue, tip2).await;

        let report = &resolution.resolvers[0].1;
        let check = report.check.clone().expect("the check ran on the resolver");
        assert_eq!(
            (check.on.as_str(), check.status, check.output_tail.trim()),
            ("S3", crate::store::journal::CheckStatus::Passed, "2"),
            "it ran on the resolved worktree, both lines in it"
        );
        let review = model.requests()[3].messages[0].text();
        assert!(
            review.contains("# The project's check on this worktree\n\n`grep -c TWO a.txt` passed"),
            "the reviewer gets the check as evidence: {review}"
        );
    }

    #[tokio::test]
    async fn a_worktree_whose_branch_moved_since_it_was_made_is_never_restarted() {
        let run = TestRun::new(
            &[("a.txt", BASE)],
            RunOptions::new("t"),
            ScriptedModel::new(vec![]),
        )
        .await;
        let worktree = run.worktree(1).await;
        std::fs::write(worktree.path().join("a.txt"), "work\n").unwrap();
        worktree
            .checkpoint(&run.ctx.facts.repo, "S1: turn 1")
            .await
            .unwrap();
        let work = run.rev(&worktree.branch_ref());
        let elsewhere = run.ctx.facts.repo.resolve("main").unwrap();

        let restarted = run
            .ctx
            .facts
            .repo
            .restart_worktree(worktree.clone(), elsewhere)
            .await;

        assert!(restarted.is_err(), "the branch holds work: {restarted:?}");
        assert_eq!(
            (
                run.rev(&worktree.branch_ref()),
                std::fs::read_to_string(worktree.path().join("a.txt")).unwrap()
            ),
            (work, "work\n".to_owned()),
            "the work on the branch and in the files is untouched"
        );
    }
}
