//! `grove review`: a person looks at a finished run's subtasks, overrides the reviewer's
//! verdicts, and applies the result.
//!
//! This module owns loading a run for review (each subtask's commit, diff, verdict and
//! flags), journaling a person's decisions, rebuilding the run's result from them (the
//! approved subtasks merged onto the base in subtask order, in memory)
//! and the apply that follows, with the same safety as `grove run`. It must never
//! change a run that has not finished or whose result was already applied, never write
//! without holding the repository lock, never leave a subtask's work reachable from no
//! ref (work dropped from the result is archived), and never print.

use std::path::PathBuf;

use serde::Serialize;

use crate::git::trailers::{CommitMessage, Trailer};
use crate::git::{
    ApplyOutcome, ApplyRequest, ArchivedWork, CommitId, GitError, RebuildPick, RebuildStep,
    RefusalReason, Repo, RunId as GitRunId, STALE_REF_LOCK, subtask_ref,
};
use crate::run::finish::describe_refusal;
use crate::run::history;
use crate::run::report::executes_later;
use crate::settings::options::History;
use crate::store::attempt_status::attempt_of;
use crate::store::journal::{
    Entry, Journal, RebuiltSubtask, Record, SubtaskId, SubtaskOutcome, VerdictKind,
};
use crate::store::lock::RepoLock;
use crate::store::snapshot;
use crate::store::state::{RunState, SubtaskState, SubtaskStatus};
use crate::store::{JOURNAL_FILE, RunId, RunStore, SNAPSHOT_FILE};

/// The patch itself is not needed here (the terminal rendering reads blobs), only the
/// diffstat; a small cap keeps `git diff`'s output from being copied around.
const STAT_ONLY_PATCH_BYTES: usize = 1024;

mod attempts;
mod view;

pub use attempts::pick_changes;
use attempts::refuse_two_attempts;

pub use view::{CommitSource, ReviewError, RunReview, SubtaskReview};
use view::{Standing, refusal, short_branch};

/// Loads run `run_id` of `repo` for review, without writing anything (safe while
/// another process holds the lock). Every run can be loaded; [`RunReview::refusal`]
/// says whether it can be changed.
pub async fn load(repo: &Repo, run_id: &str) -> Result<RunReview, ReviewError> {
    let run_id: RunId = run_id.parse()?;
    let state = RunStore::new(repo.common_dir()).read_state(&run_id)?;
    review_of(repo, &state).await
}

async fn review_of(repo: &Repo, state: &RunState) -> Result<RunReview, ReviewError> {
    let run = &state.run_id;
    let base = state.base;
    // The journal has subtasks in the order they started, which races; people and the
    // rebuild go by number.
    let mut ordered: Vec<&SubtaskState> = state.subtasks.iter().collect();
    ordered.sort_by_key(|s| s.id);
    let mut subtasks = Vec::with_capacity(ordered.len());
    for subtask in ordered {
        // Its own work only: one that waited started from the result, not the base.
        let start = subtask.start;
        let from = start.unwrap_or(base);
        // A subtask that changed nothing is archived at its start: no work of its own.
        let found = find_subtask_commit(repo, run, subtask)?.filter(|(c, _)| *c != from);
        let diffstat = match &found {
            Some((commit, _)) => Some(repo.diff(from, *commit, STAT_ONLY_PATCH_BYTES).await?.stat),
            None => None,
        };
        let (commit, commit_source) = found.unzip();
        subtasks.push(SubtaskReview {
            id: subtask.id,
            task: subtask.task.clone(),
            status: subtask.status,
            reviewer: subtask.verdict.clone(),
            human_verdict: subtask.human_verdict,
            decision: subtask.decision(),
            commit,
            commit_source,
            start,
            executes_later: diffstat.as_ref().map(executes_later).unwrap_or_default(),
            diffstat,
            conflict_paths: subtask.conflict_paths.clone(),
            check: subtask.check.clone(),
            attempt: attempt_of(state, subtask.id),
        });
    }
    Ok(RunReview {
        run_id: state.run_id.clone(),
        task: state.task.clone(),
        status: state.status,
        base,
        branch: state.branch.clone(),
        result_branch: run.result_branch(),
        result_commit: state.result_commit,
        applied: state.applied,
        history: history_of(state),
        error: state.error.clone(),
        subtasks,
        attempt_groups: state.attempts.clone(),
    })
}

/// The history `state`'s run gives the branch; a run whose options cannot be read kept
/// the merge graph, as before `history` existed.
fn history_of(state: &RunState) -> History {
    state
        .options
        .get()
        .map_or(History::Merge, |options| options.history)
}

/// Finds a subtask's work: the merged commit, else its branch, else an archive (one
/// holding the last checkpoint or more, else the newest), else the last checkpoint.
/// Branches go once a subtask is settled and checkpoints may be garbage-collected, so
/// each candidate is checked to exist.
fn find_subtask_commit(
    repo: &Repo,
    run: &GitRunId,
    subtask: &SubtaskState,
) -> Result<Option<(CommitId, CommitSource)>, GitError> {
    if let Some(merge) = &subtask.merge
        && let Some(commit) = repo.find_commit(merge.commit)?
    {
        return Ok(Some((commit, CommitSource::Merged)));
    }
    let number = subtask.id.number();
    let branch = subtask_ref(run, number);
    if let Some(commit) = repo.ref_target(&branch)? {
        return Ok(Some((commit, CommitSource::Branch { reference: branch })));
    }
    let checkpoint = match &subtask.last_checkpoint {
        Some(checkpoint) => repo.find_commit(checkpoint.commit)?,
        None => None,
    };
    let archives = repo.subtask_archives(run, number)?;
    let mut holding_checkpoint = None;
    if let Some(checkpoint) = checkpoint {
        for (reference, commit) in &archives {
            if repo.is_ancestor(checkpoint, *commit)? {
                holding_checkpoint = Some((reference.clone(), *commit));
            }
        }
    }
    if let Some((reference, commit)) = holding_checkpoint.or_else(|| match checkpoint {
        Some(_) => None,
        None => archives.last().cloned(),
    }) {
        return Ok(Some((commit, CommitSource::Archive { reference })));
    }
    Ok(checkpoint.map(|commit| (commit, CommitSource::Checkpoint)))
}

/// One decision recorded by [`override_verdicts`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedDecision {
    pub subtask: SubtaskId,
    pub verdict: VerdictKind,
    /// The decision it replaced.
    pub previous: Option<VerdictKind>,
}

/// What rebuilding the result did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebuildReport {
    /// The result before.
    pub previous: Option<CommitId>,
    /// The result now.
    pub result: CommitId,
    /// How every decided subtask ended, in subtask order.
    pub subtasks: Vec<RebuiltSubtask>,
    /// Work that is not in the result, kept under archive refs.
    pub archived: Vec<ArchivedWork>,
}

/// What [`override_verdicts`] does once the decisions are recorded and the result
/// rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterReview {
    /// Applies the result to the user's branch, with `grove run`'s safety
    /// (`--apply`).
    Apply,
    /// Nothing more: the user's branch is not touched.
    RecordOnly,
}

/// How the apply after a review ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ApplyResult {
    /// The user's branch now has the result.
    Applied {
        from: CommitId,
        to: CommitId,
        /// True when the branch had moved and the result was merged on top of it.
        merged_on_top: bool,
        message: String,
    },
    /// The result holds nothing beyond the base (every subtask rejected); the branch was
    /// not touched.
    NothingToApply { message: String },
    /// Nothing of the user's was touched; `command` applies the result by hand.
    Refused {
        reason: RefusalReason,
        command: String,
        message: String,
    },
}

impl ApplyResult {
    /// One sentence for the user.
    pub fn message(&self) -> &str {
        match self {
            ApplyResult::Applied { message, .. }
            | ApplyResult::NothingToApply { message }
            | ApplyResult::Refused { message, .. } => message,
        }
    }
}

/// What [`override_verdicts`] did, and the run as it is now. Serialized as one flat
/// object: the run's fields (`run_id`, `status`, `applied`, `result_commit`,
/// `subtasks`...) next to `recorded`, `unchanged`, `rebuilt` and `apply`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewOutcome {
    /// Decisions journaled (those that changed something), in the order given.
    pub recorded: Vec<RecordedDecision>,
    /// Subtasks whose decision was already the one given; nothing was journaled for them.
    pub unchanged: Vec<SubtaskId>,
    /// Set when the result was rebuilt.
    pub rebuilt: Option<RebuildReport>,
    /// Set when an apply was asked for.
    pub apply: Option<ApplyResult>,
    /// Stale lock files on the run's refs that a stopped process left, removed before the
    /// result was touched ([`Repo::clear_stale_ref_locks`]). Absent from the JSON when
    /// there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed_locks: Vec<std::path::PathBuf>,
    /// The run after all of it.
    #[serde(flatten)]
    pub review: RunReview,
}

impl ReviewOutcome {
    /// The outcome of looking without changing anything.
    pub fn unchanged(review: RunReview) -> Self {
        Self {
            recorded: Vec::new(),
            unchanged: Vec::new(),
            rebuilt: None,
            apply: None,
            removed_locks: Vec::new(),
            review,
        }
    }

    /// Subtasks the decisions approve that are not in the result (they conflicted).
    pub fn approved_but_not_merged(&self) -> Vec<&SubtaskReview> {
        self.review
            .subtasks
            .iter()
            .filter(|s| s.decision == Some(VerdictKind::Approve))
            .filter(|s| s.status != SubtaskStatus::Merged)
            .collect()
    }
}

/// Records a person's decisions on run `run_id` and rebuilds its result from them, then
/// applies it to the user's branch at [`AfterReview::Apply`].
///
/// Under the repository lock: each decision that changes a subtask's decision is
/// journaled (`human_verdict`); then, if any was (or an earlier review was cut short),
/// the result is rebuilt from the base with every approved subtask merged in subtask
/// order — a conflicting one is reported, left out and archived — and journaled
/// (`result_rebuilt`). The apply has `grove run`'s safety (a dirty work tree or a moved
/// branch is a [`ApplyResult::Refused`] with its advice, and nothing is touched); the
/// decisions stay recorded whatever it says.
///
/// Refused before anything is written: a run that has not finished, a run already
/// applied, an unknown subtask, a subtask both approved and rejected, approving a
/// subtask that left no commit, and approving two attempts at one brief.
pub async fn override_verdicts(
    repo: &Repo,
    run_id: &str,
    changes: &[(String, VerdictKind)],
    after: AfterReview,
) -> Result<ReviewOutcome, ReviewError> {
    let store_id: RunId = run_id.parse()?;
    let store = RunStore::new(repo.common_dir());
    // Fails with a clear message (run not found) before a lock file is created.
    store.read_state(&store_id)?;
    let _lock = RepoLock::acquire(repo.common_dir(), store_id.as_str())?;
    // Checked on a read-only replay, so a refused run is not written to at all (opening
    // the journal for appending would cut a torn tail).
    let state = store.read_state(&store_id)?;
    if let Some(refusal) = refusal(Standing {
        run_id: &state.run_id,
        status: state.status,
        applied: state.applied,
        branch: &state.branch,
        finished: state.is_finished(),
        history: history_of(&state),
    }) {
        return Err(refusal);
    }
    let mut journal = ReviewJournal::open(&store, &store_id)?;
    let state = journal.state.clone();
    let run = state.run_id.clone();
    // A kill during a ref update leaves its `<ref>.lock`: with it there, no rebuild or
    // apply could move the run's refs (a resume or a clean clears them the same way).
    let removed_locks = repo
        .clear_stale_ref_locks(&run, STALE_REF_LOCK)
        .await?
        .removed;
    let before = review_of(repo, &state).await?;
    let wanted = check_changes(&before, changes)?;
    refuse_two_attempts(&before, &wanted)?;
    refuse_built_on_rejected(repo, &before, &wanted)?;

    let mut recorded = Vec::new();
    let mut unchanged = Vec::new();
    for (subtask, verdict) in wanted {
        let previous = before
            .subtasks
            .iter()
            .find(|s| s.id == subtask)
            .and_then(|s| s.decision);
        if previous == Some(verdict) {
            unchanged.push(subtask);
            continue;
        }
        journal.append(Entry::HumanVerdict {
            subtask,
            verdict,
            previous,
        })?;
        recorded.push(RecordedDecision {
            subtask,
            verdict,
            previous,
        });
    }

    let decided = review_of(repo, &journal.state).await?;
    // The result ref is grove's: one that no longer points where the journal says (moved
    // or deleted by hand) is rebuilt from the decisions too.
    let drifted = repo.ref_target(&run.result_ref())? != journal.state.result_commit;
    let rebuilt = if !recorded.is_empty() || !consistent(&decided) || drifted {
        Some(rebuild(repo, &run, &decided, &mut journal).await?)
    } else {
        None
    };

    let apply = if after == AfterReview::Apply {
        let state = journal.state.clone();
        Some(apply_result(repo, &run, &state, &mut journal).await?)
    } else {
        None
    };
    let review = review_of(repo, &journal.state).await?;
    Ok(ReviewOutcome {
        recorded,
        unchanged,
        rebuilt,
        apply,
        removed_locks,
        review,
    })
}

/// Checks the decisions against the run; returns them in subtask order, one per
/// subtask.
fn check_changes(
    review: &RunReview,
    changes: &[(String, VerdictKind)],
) -> Result<Vec<(SubtaskId, VerdictKind)>, ReviewError> {
    let mut wanted: Vec<(SubtaskId, VerdictKind)> = Vec::new();
    for (subtask, verdict) in changes {
        let Some(found) = review.subtask(subtask) else {
            return Err(review.unknown(subtask));
        };
        if *verdict == VerdictKind::Approve && !found.approvable() {
            return Err(ReviewError::NoCommit {
                subtask: subtask.clone(),
                status: match found.status {
                    SubtaskStatus::Running => "stopped",
                    _ => "failed",
                },
            });
        }
        match wanted.iter().find(|(id, _)| *id == found.id) {
            Some((_, earlier)) if earlier != verdict => {
                return Err(ReviewError::ContradictoryDecisions {
                    subtask: subtask.clone(),
                });
            }
            Some(_) => {}
            None => wanted.push((found.id, *verdict)),
        }
    }
    let position = |id: SubtaskId| review.subtasks.iter().position(|s| s.id == id);
    wanted.sort_by_key(|(id, _)| position(*id));
    Ok(wanted)
}

/// Refuses decisions that approve a subtask whose commit holds a rejected subtask's
/// commit: it started from the result after that one merged, so the rebuild would merge
/// the rejected work back in with it.
fn refuse_built_on_rejected(
    repo: &Repo,
    review: &RunReview,
    wanted: &[(SubtaskId, VerdictKind)],
) -> Result<(), ReviewError> {
    let decided = |subtask: &SubtaskReview| {
        let decision = wanted.iter().find(|(id, _)| *id == subtask.id);
        decision.map(|(_, verdict)| *verdict).or(subtask.decision)
    };
    let with = |verdict: VerdictKind| {
        review
            .subtasks
            .iter()
            .filter(move |subtask| decided(subtask) == Some(verdict))
            .filter_map(|subtask| Some((subtask.id, subtask.commit?)))
    };
    for (approved, commit) in with(VerdictKind::Approve) {
        for (rejected, work) in with(VerdictKind::Reject) {
            if repo.is_ancestor(work, commit)? {
                return Err(ReviewError::BuiltOnRejected {
                    subtask: approved.to_string(),
                    on: rejected.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// True when every subtask's status matches its decision: approved ones merged (or
/// conflicting), rejected ones not merged. A review cut short between its decisions
/// and its rebuild leaves this false, and the next review rebuilds.
fn consistent(review: &RunReview) -> bool {
    review.subtasks.iter().all(|s| match s.decision {
        Some(VerdictKind::Approve) if s.commit.is_some() => {
            matches!(s.status, SubtaskStatus::Merged | SubtaskStatus::Conflict)
        }
        Some(VerdictKind::Reject) => s.status != SubtaskStatus::Merged,
        _ => true,
    })
}

async fn rebuild(
    repo: &Repo,
    run: &GitRunId,
    review: &RunReview,
    journal: &mut ReviewJournal,
) -> Result<RebuildReport, ReviewError> {
    let mut archived = Vec::new();
    let mut picks = Vec::new();
    for subtask in &review.subtasks {
        let number = subtask.id.number();
        let Some(commit) = subtask.commit else {
            continue;
        };
        match subtask.decision {
            Some(VerdictKind::Approve) => picks.push(RebuildPick {
                subtask: number,
                commit,
                message: merge_message(run, subtask),
            }),
            // Kept before the result stops holding it.
            Some(VerdictKind::Reject) => {
                archived.push(repo.archive_commit(run, number, commit).await?);
            }
            None => {}
        }
    }
    let previous = repo.ref_target(&run.result_ref())?;
    let rebuilt = repo
        .rebuild_result(run, review.base, &picks, previous)
        .await?;

    let mut subtasks = Vec::new();
    for subtask in &review.subtasks {
        let number = subtask.id.number();
        let step = rebuilt.steps.iter().find(|(n, _)| *n == number);
        let outcome = match (subtask.decision, step, subtask.commit) {
            (Some(VerdictKind::Reject), _, _) => RebuiltSubtask {
                subtask: subtask.id,
                status: SubtaskOutcome::Rejected,
                commit: None,
                result: None,
                conflict_paths: Vec::new(),
            },
            (
                Some(VerdictKind::Approve),
                Some((_, RebuildStep::Merged { result } | RebuildStep::AlreadyMerged { result })),
                Some(commit),
            ) => RebuiltSubtask {
                subtask: subtask.id,
                status: SubtaskOutcome::Merged,
                commit: Some(commit),
                result: Some(*result),
                conflict_paths: Vec::new(),
            },
            (Some(VerdictKind::Approve), Some((_, RebuildStep::Conflict { paths })), Some(c)) => {
                archived.push(repo.archive_commit(run, number, c).await?);
                RebuiltSubtask {
                    subtask: subtask.id,
                    status: SubtaskOutcome::Conflict,
                    commit: None,
                    result: None,
                    conflict_paths: paths.clone(),
                }
            }
            // No decision, or approved by the reviewer but its work is gone: as it was.
            _ => continue,
        };
        subtasks.push(outcome);
    }
    archived.sort_by(|a, b| a.reference.cmp(&b.reference));
    archived.dedup();
    journal.append(Entry::ResultRebuilt {
        result: rebuilt.result,
        subtasks: subtasks.clone(),
    })?;
    Ok(RebuildReport {
        previous,
        result: rebuilt.result,
        subtasks,
        archived,
    })
}

fn merge_message(run: &GitRunId, subtask: &SubtaskReview) -> String {
    let label = subtask.id;
    let mut trailers = vec![
        (Trailer::Run, run.to_string()),
        (Trailer::Subtask, label.to_string()),
    ];
    if subtask.human_verdict == Some(VerdictKind::Approve) {
        trailers.push((Trailer::Review, "approved by a person".to_owned()));
    }
    CommitMessage::new(&format!("grove {run}: merge {label}"))
        .quoted("", &crate::text::first_line(&subtask.task, 200))
        .with_trailers(&trailers)
}

async fn apply_result(
    repo: &Repo,
    run: &GitRunId,
    state: &RunState,
    journal: &mut ReviewJournal,
) -> Result<ApplyResult, ReviewError> {
    let branch = short_branch(&state.branch).to_owned();
    let result_branch = run.result_branch();
    let base = state.base;
    let result = repo.ref_target(&run.result_ref())?;
    if result.is_none_or(|result| result == base) {
        return Ok(ApplyResult::NothingToApply {
            message: format!("The result holds no approved work; {branch} was not touched."),
        });
    }
    let failed = |source| ReviewError::ApplyFailed {
        run_id: state.run_id.clone(),
        result_branch: result_branch.clone(),
        source: Box::new(source),
    };
    let applicable = history::applicable_for_run(repo, run, base, state)
        .await
        .map_err(failed)?;
    let outcome = repo
        .apply(&ApplyRequest {
            run: run.clone(),
            source: applicable.source,
            branch: state.branch.clone(),
            base,
        })
        .await
        .map_err(|source| failed(source.into()))?;
    let applied = match outcome {
        ApplyOutcome::Applied {
            from,
            to,
            merged_on_top,
        } => {
            let hex = to.to_string();
            let how = if merged_on_top {
                ", merged on top of your new commits"
            } else {
                ""
            };
            ApplyResult::Applied {
                from,
                to,
                merged_on_top,
                message: format!(
                    "{branch} now has the result ({}{how}).",
                    hex.get(..10).unwrap_or(&hex)
                ),
            }
        }
        ApplyOutcome::AlreadyApplied => {
            let to = repo.ref_target(&state.branch)?.unwrap_or(base);
            ApplyResult::Applied {
                from: to,
                to,
                merged_on_top: false,
                message: format!("{branch} already has the result."),
            }
        }
        ApplyOutcome::Refused { reason, command } => {
            let message = format!(
                "Your branch was not touched: {}. The result is on {result_branch}.",
                describe_refusal(&reason)
            );
            return Ok(ApplyResult::Refused {
                reason,
                command,
                message,
            });
        }
    };
    if let Some(result) = result {
        journal.append(Entry::ResultApplied { result })?;
    }
    Ok(applied)
}

/// The run's journal opened for appending review records, with the state kept in step
/// (like the store's active run, but for a run that has finished).
struct ReviewJournal {
    journal: Journal,
    state: RunState,
    snapshot: PathBuf,
}

impl ReviewJournal {
    fn open(store: &RunStore, run_id: &RunId) -> Result<Self, ReviewError> {
        let dir = store.run_dir(run_id);
        let path = dir.join(JOURNAL_FILE);
        let (journal, contents) = Journal::open(&path)?;
        let state = crate::store::replay_checked(run_id, &path, &contents.records)?;
        Ok(Self {
            journal,
            state,
            snapshot: dir.join(SNAPSHOT_FILE),
        })
    }

    /// Journals `entry` durably and folds it in; a record that does not fit is refused
    /// before anything is written.
    fn append(&mut self, entry: Entry) -> Result<(), ReviewError> {
        let record = Record::now(entry);
        let mut next = self.state.clone();
        next.apply(&record)
            .map_err(|source| ReviewError::RecordRejected {
                run_id: self.state.run_id.clone(),
                source,
            })?;
        self.journal.append(&record)?;
        self.state = next;
        snapshot::write_snapshot(&self.snapshot, &self.state)?;
        Ok(())
    }
}
