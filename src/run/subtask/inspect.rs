//! The run's subtasks as the lead's `show_subtask` reads them: a settled subtask's
//! report, and a subtask's or the result's diff, taken from the commits the journal
//! recorded.
//!
//! It reads the journal and git objects only; it must never change a ref or a tree.

use async_trait::async_trait;

use crate::git::BranchDiff;
use crate::run::context::lock;
use crate::run::id::SubtaskId;
use crate::run::show_subtask::{DiffOf, ShowError, Shown, SubtaskRecords};
use crate::run::subtask::{Subtasks, report_from_state};
use crate::store::attempt_status::attempt_of;

/// How much of a patch one diff holds: far more than a page, so that paging on reads
/// the same patch.
const PATCH_BYTES: usize = 4 * 1024 * 1024;

#[async_trait]
impl SubtaskRecords for Subtasks {
    fn shown(&self, id: SubtaskId) -> Option<Shown> {
        if let Some(report) = lock(&self.reports).get(&id) {
            let mut report = report.clone();
            // An attempt says where it stands in its group (picked or not, and why).
            report.attempt = attempt_of(&self.ctx.record.journal.state(), id);
            return Some(Shown::Settled(Box::new(report)));
        }
        let state = self
            .ctx
            .record
            .journal
            .subtasks()
            .into_iter()
            .find(|state| state.id == id)?;
        // One settled before a resume has no report in this process: the journal's.
        Some(if state.status.outcome().is_some() {
            let mut report = report_from_state(&state);
            report.attempt = attempt_of(&self.ctx.record.journal.state(), id);
            Shown::Settled(Box::new(report))
        } else {
            Shown::Running
        })
    }

    async fn diff(&self, of: DiffOf) -> Result<Option<BranchDiff>, ShowError> {
        let facts = &self.ctx.facts;
        let (what, start, tip) = match of {
            DiffOf::Result => {
                let tip = facts
                    .repo
                    .ref_target(&facts.run.result_ref())
                    .map_err(|source| ShowError {
                        what: "the run's result".into(),
                        source,
                    })?
                    .unwrap_or(facts.base);
                ("the run's result".to_owned(), facts.base, tip)
            }
            DiffOf::Subtask(id) => {
                let state = self
                    .ctx
                    .record
                    .journal
                    .subtasks()
                    .into_iter()
                    .find(|state| state.id == id);
                let Some(state) = state else {
                    return Ok(None);
                };
                let Some(tip) = state.last_checkpoint.map(|checkpoint| checkpoint.commit) else {
                    return Ok(None);
                };
                (id.to_string(), state.start.unwrap_or(facts.base), tip)
            }
        };
        facts
            .repo
            .diff(start, tip, PATCH_BYTES)
            .await
            .map(Some)
            .map_err(|source| ShowError { what, source })
    }
}
