//! A group of attempts (best of N) in `grove review`: a person picks another attempt,
//! and never keeps two.
//!
//! This file owns turning a pick into decisions (approve the attempt, reject the one its
//! group had approved) and refusing decisions that would approve two attempts at one
//! brief: each is the same work done another way, so merging both would apply it twice.
//! It must never record anything itself: [`super::override_verdicts`] does.

use crate::status::{SubtaskId, VerdictKind};

use super::view::{ReviewError, RunReview};

/// The decisions that make `pick` (a label) its group's pick: approve it, and reject
/// every other attempt of its group the run now approves. Refused when `pick` is no
/// subtask of the run, or no attempt.
pub fn pick_changes(
    review: &RunReview,
    pick: &str,
) -> Result<Vec<(String, VerdictKind)>, ReviewError> {
    let Some(subtask) = review.subtask(pick) else {
        return Err(review.unknown(pick));
    };
    let Some(of) = &subtask.attempt else {
        return Err(ReviewError::NotAnAttempt {
            subtask: pick.to_owned(),
        });
    };
    let mut changes = vec![(subtask.id.to_string(), VerdictKind::Approve)];
    for other in &review.subtasks {
        let sibling = other.attempt.as_ref().is_some_and(|o| o.group == of.group);
        if sibling && other.id != subtask.id && other.decision == Some(VerdictKind::Approve) {
            changes.push((other.id.to_string(), VerdictKind::Reject));
        }
    }
    Ok(changes)
}

/// Refuses `wanted` (with the run's own decisions where it says nothing) when it
/// approves two attempts of one group.
pub(super) fn refuse_two_attempts(
    review: &RunReview,
    wanted: &[(SubtaskId, VerdictKind)],
) -> Result<(), ReviewError> {
    let approved = |id: SubtaskId, decision: Option<VerdictKind>| {
        let given = wanted.iter().find(|(wanted, _)| *wanted == id);
        given.map(|(_, verdict)| *verdict).or(decision) == Some(VerdictKind::Approve)
    };
    let mut kept: Vec<(SubtaskId, SubtaskId)> = Vec::new();
    for subtask in &review.subtasks {
        let Some(of) = &subtask.attempt else {
            continue;
        };
        if !approved(subtask.id, subtask.decision) {
            continue;
        }
        if let Some((_, first)) = kept.iter().find(|(group, _)| *group == of.group) {
            // The one this review approves is the one to name in the advice.
            let (kept, also) = if wanted.iter().any(|(id, _)| id == first) {
                (*first, subtask.id)
            } else {
                (subtask.id, *first)
            };
            return Err(ReviewError::TwoAttempts {
                group: of.group.to_string(),
                first: kept.to_string(),
                second: also.to_string(),
            });
        }
        kept.push((of.group, subtask.id));
    }
    Ok(())
}
