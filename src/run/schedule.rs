//! Order by write scope and `after`: which earlier subtasks a delegated one waits for,
//! the wait itself, and the commit it then starts from.
//!
//! A subtask waits for every earlier one its `after` names and every earlier one whose
//! `paths` may overlap its own; once they are all settled (merged, rejected, failed…) it
//! takes a `--jobs` slot and starts from the run's current result, so it builds on their
//! work instead of conflicting with it. Ids are numbered in call order, so a subtask only
//! ever waits for lower-numbered ones: the waits form no cycle, and merges (in subtask
//! order, [`MergeQueue`]) stay in the same order.
//!
//! This file owns the scopes of a run's subtasks and the `after` rules. It must never let
//! a subtask wait while holding a `--jobs` slot, never let two subtasks with overlapping
//! scopes work at once, and never start a subtask that waited from the base.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::event::Event;
use crate::git::{CommitId, GitError};
use crate::run::context::{RunFacts, RunRecord, lock};
use crate::run::delegate::{AfterError, DelegateError};
use crate::run::id::SubtaskId;
use crate::run::merge_queue::MergeQueue;
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::retry::StartFrom;
use crate::store::journal::Entry;
use crate::store::state::SubtaskState;
use crate::tools::WriteScope;

/// A subtask the schedule took: its id, and the earlier subtasks it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admitted {
    pub(crate) id: SubtaskId,
    /// Every attempt at its brief, `id` first (one: itself).
    pub(crate) attempts: Vec<SubtaskId>,
    /// Sorted; empty when it starts at once, from the base, as subtasks always did.
    pub(crate) waits_for: Vec<SubtaskId>,
}

/// The write scopes of a run's subtasks, by id (`None`: no `paths`, any file).
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    scopes: Mutex<BTreeMap<SubtaskId, Option<Arc<WriteScope>>>>,
    /// The attempts of each group, by the group's id: an `after` naming the group waits
    /// for all of them.
    groups: Mutex<BTreeMap<SubtaskId, Vec<SubtaskId>>>,
}

impl Schedule {
    /// Numbers a delegated subtask's `attempts` (through `queue`, in call order) after
    /// checking its `after`, and finds what they wait for. Past `max_subtasks`, the
    /// numbers are taken and settled, and the call refused.
    pub(crate) fn admit(
        &self,
        queue: &MergeQueue,
        max_subtasks: u32,
        scope: Option<&Arc<WriteScope>>,
        (after, attempts): (&[SubtaskId], u32),
    ) -> Result<Admitted, DelegateError> {
        // One lock over checking, numbering and registering: whatever the interleaving
        // of concurrent calls, each sees every subtask numbered before it.
        let mut scopes = lock(&self.scopes);
        let delegated: Vec<SubtaskId> = scopes.keys().copied().collect();
        check_after(after, queue.peek_next(), &delegated)?;
        let ids: Vec<SubtaskId> = (0..attempts.max(1)).map(|_| queue.next_id()).collect();
        let (Some(&id), Some(&last)) = (ids.first(), ids.last()) else {
            return Err(DelegateError::SubtaskCap { max: max_subtasks });
        };
        if last.number() > max_subtasks {
            for taken in &ids {
                queue.settle(*taken);
            }
            if ids.len() > 1 && id.number() <= max_subtasks {
                return Err(DelegateError::AttemptsOverCap {
                    attempts,
                    max: max_subtasks,
                    left: max_subtasks + 1 - id.number(),
                });
            }
            return Err(DelegateError::SubtaskCap { max: max_subtasks });
        }
        let mut waits_for = after.to_vec();
        let groups = lock(&self.groups);
        for named in after {
            waits_for.extend(groups.get(named).into_iter().flatten());
        }
        drop(groups);
        if let Some(scope) = scope {
            let overlapping = scopes.iter().filter(|(_, earlier)| {
                earlier
                    .as_ref()
                    .is_some_and(|earlier| earlier.overlaps(scope))
            });
            waits_for.extend(overlapping.map(|(earlier, _)| *earlier));
        }
        waits_for.sort();
        waits_for.dedup();
        for attempt in &ids {
            scopes.insert(*attempt, scope.cloned());
        }
        if ids.len() > 1 {
            lock(&self.groups).insert(id, ids.clone());
        }
        Ok(Admitted {
            id,
            attempts: ids,
            waits_for,
        })
    }

    /// Registers the attempts of group `group` of a resumed run.
    pub(crate) fn restore_group(&self, group: SubtaskId, attempts: Vec<SubtaskId>) {
        lock(&self.groups).insert(group, attempts);
    }

    /// Registers subtask `id` of a resumed run, so that new delegations are ordered
    /// after it as they would have been.
    pub(crate) fn restore(&self, id: SubtaskId, scope: Option<Arc<WriteScope>>) {
        lock(&self.scopes).insert(id, scope);
    }
}

/// Where a subtask may write and when it may start.
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement {
    /// The files it may change; `None`: any.
    pub(crate) scope: Option<Arc<WriteScope>>,
    /// The earlier subtasks it waits for; empty: it starts at once, from the base.
    pub(crate) waits_for: Vec<SubtaskId>,
    /// The start point a resumed run recorded for it, a fixer's (the result), or a
    /// follow-up's (the archived work it starts from).
    pub(crate) start: Option<CommitId>,
    /// The archived work of an earlier subtask it starts from (`start_from`).
    pub(crate) start_from: Option<StartFrom>,
}

/// The scope of `paths` as [`DelegateInput`](crate::run::delegate::DelegateInput)
/// normalised them (so they compile).
pub(crate) fn scope_of(paths: &[String]) -> Option<Arc<WriteScope>> {
    WriteScope::new(paths).ok().flatten().map(Arc::new)
}

/// The scope a journal recorded for `state`; one that no longer compiles (a journal
/// edited by hand) is noted and dropped.
pub(crate) fn recorded_scope(record: &RunRecord, state: &SubtaskState) -> Option<Arc<WriteScope>> {
    match WriteScope::new(&state.paths) {
        Ok(scope) => scope.map(Arc::new),
        Err(error) => {
            record.note(format!(
                "{}: its recorded paths are ignored: {error}",
                state.id
            ));
            None
        }
    }
}

/// Refuses an `after` that names anything but an earlier subtask of the run: `this`
/// (the id the call would get), a later one (which is how a cycle shows: ids follow
/// call order), or an id that is no subtask (its call was refused).
pub(crate) fn check_after(
    after: &[SubtaskId],
    this: SubtaskId,
    delegated: &[SubtaskId],
) -> Result<(), AfterError> {
    let listed = || {
        if delegated.is_empty() {
            "none yet".to_owned()
        } else {
            labels(delegated).join(", ")
        }
    };
    for &id in after {
        if id == this {
            return Err(AfterError::Itself { id });
        }
        if id > this {
            return Err(AfterError::NotYet { id, this });
        }
        if !delegated.contains(&id) {
            return Err(AfterError::Unknown {
                id,
                delegated: listed(),
            });
        }
    }
    Ok(())
}

/// Waits until every subtask in `waits_for` is settled, telling the user which ones it
/// still waits for; `false` when the run was interrupted meanwhile.
pub(crate) async fn wait_for_earlier(
    record: &RunRecord,
    queue: &MergeQueue,
    id: SubtaskId,
    task: &str,
    waits_for: &[SubtaskId],
) -> bool {
    let pending: Vec<SubtaskId> = waits_for
        .iter()
        .copied()
        .filter(|earlier| !queue.is_settled(*earlier))
        .collect();
    if !pending.is_empty() {
        record.events.emit(Event::SubtaskWaiting {
            label: id,
            task: task.to_owned(),
            waits_for: pending.clone(),
        });
    }
    queue.wait_settled(waits_for).await && !record.cancel.is_cancelled()
}

/// The commit subtask `id` starts from once its wait is over: the one a resumed run
/// recorded, else the run's result now, journaled before any worktree is made there.
pub(crate) fn start_point(
    facts: &RunFacts,
    record: &RunRecord,
    id: SubtaskId,
    recorded: Option<CommitId>,
) -> Result<CommitId, SubtaskError> {
    if let Some(start) = recorded {
        return Ok(start);
    }
    let result = facts.run.result_ref();
    let start = facts
        .repo
        .ref_target(&result)
        .and_then(|tip| tip.ok_or(GitError::UnknownRevision { rev: result }))
        .map_err(crate::worktree::WorktreeError::from)?;
    record.journal(Entry::StartPoint {
        subtask: id,
        commit: start,
    })?;
    Ok(start)
}

/// What the worker of a subtask is first told: the lead's `task`, and the files it may
/// change when it has a scope (the file tools refuse others; other changes there are
/// flagged to the reviewer).
pub(crate) fn worker_brief(task: &str, scope: Option<&WriteScope>) -> String {
    match scope {
        None => task.to_owned(),
        Some(scope) => format!(
            "{task}\n\n(grove: change only files matching `{}`; the file tools refuse \
             others, and the reviewer is told of any other file your work changes.)",
            scope.globs().join("`, `")
        ),
    }
}

/// The labels (`S1`) of `ids`.
pub(crate) fn labels(ids: &[SubtaskId]) -> Vec<String> {
    ids.iter().map(ToString::to_string).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn scope(globs: &[&str]) -> Option<Arc<WriteScope>> {
        let globs: Vec<String> = globs.iter().map(|glob| (*glob).to_owned()).collect();
        WriteScope::new(&globs).unwrap().map(Arc::new)
    }

    #[test]
    fn a_subtask_waits_for_earlier_overlapping_scopes_and_what_after_names() {
        let queue = MergeQueue::new(CancellationToken::new());
        let schedule = Schedule::default();
        let admit = |globs: &[&str], after: &[SubtaskId]| {
            schedule
                .admit(&queue, 10, scope(globs).as_ref(), (after, 1))
                .unwrap()
        };
        let admitted = vec![
            admit(&["src/config/**"], &[]),
            admit(&["docs/**"], &[]),
            admit(&[], &[]),
            admit(&["src/config/load.rs", "docs/a.md"], &[]),
            admit(&[], &[SubtaskId(3)]),
            admit(&["tests/**"], &[]),
        ];
        let waits = |id: u32, waits_for: &[u32]| Admitted {
            id: SubtaskId(id),
            attempts: vec![SubtaskId(id)],
            waits_for: waits_for.iter().copied().map(SubtaskId).collect(),
        };
        assert_eq!(
            admitted,
            vec![
                waits(1, &[]),
                waits(2, &[]),
                waits(3, &[]),
                waits(4, &[1, 2]),
                waits(5, &[3]),
                waits(6, &[]),
            ],
            "a subtask waits for exactly the earlier subtasks whose scope it may share, and \
             those its `after` names; none without either"
        );
    }

    #[test]
    fn attempts_share_a_scope_without_waiting_for_each_other_and_after_their_group_waits_for_all() {
        let queue = MergeQueue::new(CancellationToken::new());
        let schedule = Schedule::default();
        let group = schedule
            .admit(&queue, 10, scope(&["src/**"]).as_ref(), (&[], 3))
            .unwrap();
        let after_group = schedule
            .admit(&queue, 10, None, (&[SubtaskId(1)], 1))
            .unwrap();
        let overlapping = schedule
            .admit(&queue, 10, scope(&["src/a.rs"]).as_ref(), (&[], 1))
            .unwrap();
        let ids = |ids: &[u32]| ids.iter().copied().map(SubtaskId).collect::<Vec<_>>();
        assert_eq!(
            (group, after_group.waits_for, overlapping.waits_for),
            (
                Admitted {
                    id: SubtaskId(1),
                    attempts: ids(&[1, 2, 3]),
                    waits_for: Vec::new(),
                },
                ids(&[1, 2, 3]),
                ids(&[1, 2, 3]),
            ),
            "three attempts are numbered together and start at once; a later subtask naming \
             the group, or sharing its files, waits for every attempt"
        );
        let over = schedule.admit(&queue, 7, None, (&[], 3)).unwrap_err();
        assert_eq!(
            over.to_string(),
            "3 attempts would take subtask numbers past the run's limit of 7 subtasks (2 \
             left); ask for fewer attempts, or none",
            "attempts past the cap are refused with what is left"
        );
    }

    #[test]
    fn after_may_name_only_earlier_subtasks() {
        let queue = MergeQueue::new(CancellationToken::new());
        let schedule = Schedule::default();
        schedule.admit(&queue, 1, None, (&[], 1)).unwrap();
        let capped = schedule.admit(&queue, 1, None, (&[], 1)).unwrap_err();
        assert!(matches!(capped, DelegateError::SubtaskCap { max: 1 }));
        let refusal = |after: u32| {
            schedule
                .admit(&queue, 10, None, (&[SubtaskId(after)], 1))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            [refusal(3), refusal(4), refusal(2)],
            [
                "`after` names S3, which is this very subtask (this call is S3); name only \
                 subtasks delegated before this call"
                    .to_owned(),
                "`after` names S4, which is not delegated yet (this call is S3): subtasks are \
                 numbered S1, S2, … in call order and wait only for earlier ones, so a cycle \
                 cannot be expressed; delegate the work it must wait for first, then this \
                 one with that subtask's id in `after`"
                    .to_owned(),
                "`after` names S2, which is no subtask of this run (its delegate call was \
                 refused); the subtasks so far are: S1"
                    .to_owned(),
            ],
            "the lead is told what was wrong and what to do"
        );
        assert_eq!(
            queue.peek_next(),
            SubtaskId(3),
            "a refused `after` takes no number"
        );
    }
}
