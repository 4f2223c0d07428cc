//! A group of attempts (best of N) in the run's report: each attempt's `attempt`, and on
//! the group's first subtask the `attempts` list with every attempt's status and cost.
//!
//! This file owns filling those fields from the journal's state and the prices; where an
//! attempt stands is [`crate::store::attempt_status`]'s to say. It must never change a
//! subtask's own status or verdict.

use crate::run::report::{AttemptEntry, SubtaskReport};
use crate::store::attempt_status::{attempt_of, attempts_of};
use crate::store::state::RunState;

/// Fills each report's `attempt` and each group's `attempts` from `state`; costs come
/// later, from [`CostReport::price`](crate::run::report::CostReport::price).
pub fn mark_attempts(reports: &mut [SubtaskReport], state: &RunState) {
    for report in reports.iter_mut() {
        report.attempt = attempt_of(state, report.id);
        report.attempts = state
            .attempts
            .iter()
            .filter(|group| group.group == report.id)
            .flat_map(|group| attempts_of(state, group))
            .map(|(subtask, of)| AttemptEntry {
                subtask,
                label: of.label,
                status: of.status,
                cost_usd: None,
                reason: of.reason,
            })
            .collect();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::report::price_attempts;
    use crate::run::subtask::report_from_state;
    use crate::store::attempt_status::tests::judged_run;

    #[test]
    fn a_groups_first_subtask_lists_its_attempts_with_their_cost_and_each_knows_its_place() {
        let state = judged_run();
        let mut reports: Vec<SubtaskReport> =
            state.subtasks.iter().map(report_from_state).collect();
        mark_attempts(&mut reports, &state);
        for (report, usd) in reports.iter_mut().zip([0.5, 0.25, 0.75, 1.0]) {
            report.cost_usd = Some(usd);
        }
        price_attempts(&mut reports);
        let json: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| {
                let v = serde_json::to_value(r).unwrap();
                serde_json::json!({"id": v["id"], "status": v["status"], "attempt": v.get("attempt"), "attempts": v.get("attempts")})
            })
            .collect();
        assert_eq!(
            json,
            vec![
                serde_json::json!({"id": "S1", "status": "rejected", "attempt": null, "attempts": null}),
                serde_json::json!({
                    "id": "S2", "status": "rejected",
                    "attempt": {"group": "S2", "label": "A", "status": "not_picked",
                                "reason": "its check failed while that of B, C passed", "merged": "S4"},
                    "attempts": [
                        {"subtask": "S2", "label": "A", "status": "not_picked", "cost_usd": 0.25,
                         "reason": "its check failed while that of B, C passed"},
                        {"subtask": "S3", "label": "B", "status": "not_picked", "cost_usd": 0.75,
                         "reason": "B drops the error path."},
                        {"subtask": "S4", "label": "C", "status": "picked", "cost_usd": 1.0},
                    ]
                }),
                serde_json::json!({
                    "id": "S3", "status": "rejected",
                    "attempt": {"group": "S2", "label": "B", "status": "not_picked",
                                "reason": "B drops the error path.", "merged": "S4"},
                    "attempts": null
                }),
                serde_json::json!({
                    "id": "S4", "status": "merged",
                    "attempt": {"group": "S2", "label": "C", "status": "picked", "merged": "S4"},
                    "attempts": null
                }),
            ],
            "a plain subtask has neither field; every attempt has its `attempt`, and only \
             the group's first lists the group, each attempt with its own cost"
        );
        assert_eq!(
            reports.iter().map(SubtaskReport::done).collect::<Vec<_>>(),
            vec![false, true, true, true],
            "the attempts that lost to a merged pick are done; the plain rejection is not"
        );
    }
}
