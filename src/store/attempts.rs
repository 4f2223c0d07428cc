//! Best of N in the journal: the subtasks that are attempts at one brief, and what the
//! judge made of them.
//!
//! A `delegate` call with `attempts: N` starts N subtasks with the same brief; the first
//! one's id names the group (the lead knows it by that id). Their `attempts` record is
//! written before any of their `subtask_started` records, so a journal never holds an
//! attempt that does not know its group. Each attempt's label is its place in the
//! group: `A` for the first.

use serde::{Deserialize, Serialize};

use crate::status::SubtaskId;

/// The attempts at one brief, and the judge's pick once it made one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptGroup {
    /// The first attempt, whose id the lead knows the group by.
    pub group: SubtaskId,
    /// Every attempt, the group's first: in label order (A, B, …).
    pub subtasks: Vec<SubtaskId>,
    /// What the judge decided, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pick: Option<Pick>,
}

/// The judge's decision on a group (a `picked` record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pick {
    /// The attempt picked; `None` when every attempt was rejected.
    pub picked: Option<SubtaskId>,
    /// The judge's summary, in its words.
    pub summary: String,
    /// Why each attempt that was not picked lost, in one line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_picked: Vec<NotPicked>,
}

/// One attempt that lost, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotPicked {
    pub subtask: SubtaskId,
    pub reason: String,
}

impl AttemptGroup {
    /// The label of attempt `id` in this group (`A`, `B`, …), when it is one.
    pub fn label_of(&self, id: SubtaskId) -> Option<char> {
        let place = self.subtasks.iter().position(|attempt| *attempt == id)?;
        Some(label(place))
    }

    /// Why attempt `id` was not picked, as the judge's record says.
    pub fn lost_because(&self, id: SubtaskId) -> Option<&str> {
        let pick = self.pick.as_ref()?;
        pick.not_picked
            .iter()
            .find(|lost| lost.subtask == id)
            .map(|lost| lost.reason.as_str())
    }
}

/// The label of the attempt at `place` (0: `A`); past `Z` (never: the maximum is far
/// below), `?`.
pub fn label(place: usize) -> char {
    u8::try_from(place)
        .ok()
        .filter(|place| *place < 26)
        .map_or('?', |place| char::from(b'A' + place))
}

/// Adds group `group` of attempts `subtasks` (an `attempts` record); `Err` names an
/// attempt that is already in a group.
pub fn add_group(
    groups: &mut Vec<AttemptGroup>,
    group: SubtaskId,
    subtasks: &[SubtaskId],
) -> Result<(), SubtaskId> {
    if let Some(known) = subtasks.iter().find(|id| group_of(groups, **id).is_some()) {
        return Err(*known);
    }
    groups.push(AttemptGroup {
        group,
        subtasks: subtasks.to_vec(),
        pick: None,
    });
    Ok(())
}

/// Records the judge's `pick` for group `group` (a `picked` record); `Err` when there
/// is no such group.
pub fn record_pick(
    groups: &mut [AttemptGroup],
    group: SubtaskId,
    pick: &Pick,
) -> Result<(), SubtaskId> {
    let known = groups.iter_mut().find(|known| known.group == group);
    let known = known.ok_or(group)?;
    known.pick = Some(pick.clone());
    Ok(())
}

/// The attempt group `id` belongs to in `groups`, if any.
pub fn group_of(groups: &[AttemptGroup], id: SubtaskId) -> Option<&AttemptGroup> {
    groups.iter().find(|group| group.subtasks.contains(&id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_labelled_by_their_place_and_each_loser_keeps_its_reason() {
        let mut group = AttemptGroup {
            group: SubtaskId(3),
            subtasks: vec![SubtaskId(3), SubtaskId(4), SubtaskId(5)],
            pick: None,
        };
        assert_eq!(
            (
                group.label_of(SubtaskId(3)),
                group.label_of(SubtaskId(5)),
                group.label_of(SubtaskId(6))
            ),
            (Some('A'), Some('C'), None),
            "labels follow the group's order; a subtask outside it has none"
        );
        assert_eq!(
            group.lost_because(SubtaskId(4)),
            None,
            "no reason before the judge"
        );
        group.pick = Some(Pick {
            picked: Some(SubtaskId(5)),
            summary: "C is right.".into(),
            not_picked: vec![NotPicked {
                subtask: SubtaskId(4),
                reason: "B drops the error path.".into(),
            }],
        });
        assert_eq!(
            (
                group.lost_because(SubtaskId(4)),
                group.lost_because(SubtaskId(5))
            ),
            (Some("B drops the error path."), None),
            "a loser keeps the judge's reason; the pick has none"
        );
    }
}
