//! Where each attempt of a best-of-N group stands, as a run's state says: picked, not
//! picked, or not decided yet; why it lost; and which attempt of its group merged.
//!
//! `grove run --json`, the end table, `grove review` and the HTML report all read it
//! here, so they tell one story. The rule: the attempt whose decision (a person's, else
//! its verdict) approves it is the pick — the judge's pick, the one attempt left after
//! the checks that its own reviewer approved, or the one a person picked in `grove
//! review` — and every other settled attempt was not picked. This file only reads a
//! [`RunState`]; it must never decide anything itself.

use serde::Serialize;

use crate::status::{SubtaskId, VerdictKind};
use crate::store::attempts::AttemptGroup;
use crate::store::state::{RunState, SubtaskState, SubtaskStatus};

/// How an attempt ended in its group (`attempt.status` in `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The attempt the group kept (merged, or approved and conflicting: see its status).
    Picked,
    /// Settled, and not the one kept.
    NotPicked,
    /// Not settled yet: the run stopped before its group was decided.
    Undecided,
}

impl AttemptStatus {
    /// Its name in `--json`, in words elsewhere: `picked`, `not picked`, `undecided`.
    pub fn words(self) -> &'static str {
        match self {
            Self::Picked => "picked",
            Self::NotPicked => "not picked",
            Self::Undecided => "undecided",
        }
    }
}

/// One attempt's place in its group (`attempt` of a subtask in `--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptOf {
    /// The group's first attempt, whose id the lead knows the group by.
    pub group: SubtaskId,
    /// `A`, `B`, …: its place in the group.
    pub label: char,
    pub status: AttemptStatus,
    /// Why it was not picked, in one line (the judge's reason, a rule's, or its own end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The attempt of its group that merged, when one did: the group's work is done, so
    /// this one not being merged does not make the run short of anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<SubtaskId>,
}

impl AttemptOf {
    /// `S3·B`: the group and the label, as the end table and `grove review` write it.
    pub fn tag(&self) -> String {
        format!("{}·{}", self.group, self.label)
    }
}

/// Where attempt `id` stands, when it is one.
pub fn attempt_of(state: &RunState, id: SubtaskId) -> Option<AttemptOf> {
    let group = state.attempt_group(id)?;
    let label = group.label_of(id)?;
    let subtask = state.subtask(id);
    let status = status_of(subtask);
    let reason = match status {
        AttemptStatus::NotPicked => subtask.and_then(|subtask| lost_because(state, group, subtask)),
        AttemptStatus::Picked | AttemptStatus::Undecided => None,
    };
    let merged = group.subtasks.iter().copied().find(|attempt| {
        state
            .subtask(*attempt)
            .is_some_and(|s| s.status == SubtaskStatus::Merged)
    });
    Some(AttemptOf {
        group: group.group,
        label,
        status,
        reason,
        merged,
    })
}

/// Every attempt of `group`, in label order, with where it stands.
pub fn attempts_of(state: &RunState, group: &AttemptGroup) -> Vec<(SubtaskId, AttemptOf)> {
    group
        .subtasks
        .iter()
        .filter_map(|id| Some((*id, attempt_of(state, *id)?)))
        .collect()
}

fn status_of(subtask: Option<&SubtaskState>) -> AttemptStatus {
    match subtask {
        Some(subtask) if subtask.decision() == Some(VerdictKind::Approve) => AttemptStatus::Picked,
        Some(subtask) if subtask.status != SubtaskStatus::Running => AttemptStatus::NotPicked,
        _ => AttemptStatus::Undecided,
    }
}

/// Why `subtask` lost: a person's choice in `grove review` first (it overrides the
/// judge), then the judge's (or a rule's) reason, then its own end (failed, rejected by
/// its own reviewer).
fn lost_because(state: &RunState, group: &AttemptGroup, subtask: &SubtaskState) -> Option<String> {
    let picked_by_person = group.subtasks.iter().find_map(|id| {
        let other = state.subtask(*id)?;
        (other.human_verdict == Some(VerdictKind::Approve)).then_some(*id)
    });
    if subtask.human_verdict == Some(VerdictKind::Reject) {
        return Some(match picked_by_person.and_then(|id| group.label_of(id)) {
            Some(label) => format!("a person picked attempt {label} instead in grove review"),
            None => "a person rejected it in grove review".to_owned(),
        });
    }
    if let Some(reason) = group.lost_because(subtask.id) {
        return Some(reason.to_owned());
    }
    let own = subtask.reason.clone();
    let not_picked = own.map(|reason| match reason.strip_prefix("not picked: ") {
        Some(rest) => rest.to_owned(),
        None => reason,
    });
    not_picked.or_else(|| subtask.verdict.as_ref().map(|v| v.summary.clone()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use crate::git::CommitId;
    use crate::ledger::Ledger;
    use crate::store::attempts::{NotPicked, Pick};
    use crate::store::journal::{
        ContextMode, Entry, Record, RunOutcome, SubtaskKind, SubtaskOutcome,
    };
    use crate::store::recorded::RecordedOptions;

    fn commit(c: char) -> CommitId {
        CommitId::parse(&c.to_string().repeat(40)).unwrap()
    }

    fn started(n: u32) -> Entry {
        Entry::SubtaskStarted {
            subtask: SubtaskId(n),
            task: "make parse strict".into(),
            branch: format!("grove/r/{n}"),
            mode: ContextMode::Isolated,
            agent: "worker".into(),
            paths: Vec::new(),
            after: Vec::new(),
            waits_for: Vec::new(),
            kind: SubtaskKind::Task,
            replaces: None,
            start_from: None,
        }
    }

    fn verdict(n: u32, verdict: VerdictKind, summary: &str) -> Entry {
        Entry::Verdict {
            subtask: SubtaskId(n),
            verdict,
            summary: summary.into(),
            findings: Vec::new(),
        }
    }

    fn finished(n: u32, status: SubtaskOutcome, reason: Option<&str>) -> Entry {
        Entry::SubtaskFinished {
            subtask: SubtaskId(n),
            status,
            ledger: Ledger::default(),
            reason: reason.map(str::to_owned),
            summary: None,
        }
    }

    /// S1 a plain subtask; S2, S3, S4 attempts A, B, C: A failed its check, the judge
    /// picked C over B, C merged.
    pub(crate) fn judged_run() -> RunState {
        let group = Pick {
            picked: Some(SubtaskId(4)),
            summary: "C handles the empty input.".into(),
            not_picked: vec![
                NotPicked {
                    subtask: SubtaskId(2),
                    reason: "its check failed while that of B, C passed".into(),
                },
                NotPicked {
                    subtask: SubtaskId(3),
                    reason: "B drops the error path.".into(),
                },
            ],
        };
        let entries = vec![
            Entry::RunStarted {
                run_id: "20261207-000000-abcd".parse().unwrap(),
                task: "t".into(),
                base: commit('a'),
                branch: "refs/heads/main".into(),
                provider: "anthropic".into(),
                model: "m".into(),
                options: RecordedOptions::default(),
            },
            started(1),
            Entry::Attempts {
                group: SubtaskId(2),
                subtasks: vec![SubtaskId(2), SubtaskId(3), SubtaskId(4)],
            },
            started(2),
            started(3),
            started(4),
            finished(
                1,
                SubtaskOutcome::Rejected,
                Some("rejected by its reviewer"),
            ),
            verdict(
                2,
                VerdictKind::Reject,
                "Attempt A was not picked: its check failed",
            ),
            verdict(
                3,
                VerdictKind::Reject,
                "Attempt B was not picked: B drops the error path.",
            ),
            verdict(4, VerdictKind::Approve, "C handles the empty input."),
            Entry::Picked {
                group: SubtaskId(2),
                pick: group,
            },
            Entry::Merged {
                subtask: SubtaskId(4),
                commit: commit('c'),
                result: commit('d'),
            },
            finished(
                2,
                SubtaskOutcome::Rejected,
                Some("not picked: its check failed"),
            ),
            finished(
                3,
                SubtaskOutcome::Rejected,
                Some("not picked: B drops the error path."),
            ),
            finished(4, SubtaskOutcome::Merged, None),
            Entry::RunFinished {
                status: RunOutcome::Finished,
                applied: false,
                result_commit: Some(commit('d')),
                error: None,
            },
        ];
        let records: Vec<Record> = entries.into_iter().map(Record::now).collect();
        RunState::replay(&records).unwrap()
    }

    #[test]
    fn each_attempt_knows_its_group_its_label_whether_it_was_picked_and_why_not() {
        let state = judged_run();
        let of = |n| attempt_of(&state, SubtaskId(n));
        let merged = Some(SubtaskId(4));
        assert_eq!(
            [of(1), of(2), of(3), of(4)],
            [
                None,
                Some(AttemptOf {
                    group: SubtaskId(2),
                    label: 'A',
                    status: AttemptStatus::NotPicked,
                    reason: Some("its check failed while that of B, C passed".into()),
                    merged,
                }),
                Some(AttemptOf {
                    group: SubtaskId(2),
                    label: 'B',
                    status: AttemptStatus::NotPicked,
                    reason: Some("B drops the error path.".into()),
                    merged,
                }),
                Some(AttemptOf {
                    group: SubtaskId(2),
                    label: 'C',
                    status: AttemptStatus::Picked,
                    reason: None,
                    merged,
                }),
            ],
            "a plain subtask is no attempt; the judge's pick is picked, the others lost for \
             the judge's (or the rule's) reason, and all know which attempt merged"
        );
    }

    #[test]
    fn a_persons_pick_overrides_the_judges_and_an_undecided_group_says_so() {
        let mut state = judged_run();
        for (n, verdict) in [(3, VerdictKind::Approve), (4, VerdictKind::Reject)] {
            state
                .apply(&Record::now(Entry::HumanVerdict {
                    subtask: SubtaskId(n),
                    verdict,
                    previous: None,
                }))
                .unwrap();
        }
        let status = |state: &RunState, n| {
            attempt_of(state, SubtaskId(n)).map(|a| (a.label, a.status, a.reason))
        };
        assert_eq!(
            (status(&state, 3), status(&state, 4)),
            (
                Some(('B', AttemptStatus::Picked, None)),
                Some((
                    'C',
                    AttemptStatus::NotPicked,
                    Some("a person picked attempt B instead in grove review".into())
                )),
            ),
            "a person's approval makes the pick, and the judge's pick says who replaced it"
        );

        let records: Vec<Record> = [
            Entry::RunStarted {
                run_id: "20261207-000000-abcd".parse().unwrap(),
                task: "t".into(),
                base: commit('a'),
                branch: "refs/heads/main".into(),
                provider: "anthropic".into(),
                model: "m".into(),
                options: RecordedOptions::default(),
            },
            Entry::Attempts {
                group: SubtaskId(1),
                subtasks: vec![SubtaskId(1), SubtaskId(2)],
            },
            started(1),
            started(2),
            finished(
                1,
                SubtaskOutcome::Failed,
                Some("the worker's model API failed"),
            ),
        ]
        .into_iter()
        .map(Record::now)
        .collect();
        let running = RunState::replay(&records).unwrap();
        assert_eq!(
            (status(&running, 1), status(&running, 2)),
            (
                Some((
                    'A',
                    AttemptStatus::NotPicked,
                    Some("the worker's model API failed".into())
                )),
                Some(('B', AttemptStatus::Undecided, None)),
            ),
            "an attempt that failed lost for its own reason; one still running is undecided"
        );
    }
}
