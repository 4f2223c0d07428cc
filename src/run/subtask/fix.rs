//! A fixer: a subtask of kind `fix` that the result's check starts (never the lead),
//! through the same stages as any other — worktree (of the current result, not the
//! base), worker, commit, its own check, a fresh reviewer, the merge onto the result.
//!
//! This file owns how a fixer enters the pipeline: its number (the next one), its
//! journal records (kind `fix`, its start point, so that `grove resume` continues it
//! like any running subtask), and its report. It must never bypass a stage: a fixer's
//! diff is merged only if its reviewer approved it.

use std::sync::Arc;

use crate::agent::isolated_messages;
use crate::agent::roles::{self, RoleKind};
use crate::git::CommitId;
use crate::run::context::lock;
use crate::run::report::SubtaskReport;
use crate::run::schedule::Placement;
use crate::run::subtask::Subtasks;
use crate::run::subtask::work::Assignment;
use crate::store::StoreError;
use crate::store::journal::{ContextMode, Entry, SubtaskKind};
use crate::store::transcript::Transcript;
use crate::tools::{self, ToolSet};

impl Subtasks {
    /// Runs a fixer briefed with `brief` on a worktree of `start` (the run's result now)
    /// to its end, and returns its report (also kept among the run's reports). An error
    /// is the journal failing.
    pub(crate) async fn run_fixer(
        &self,
        brief: String,
        start: CommitId,
    ) -> Result<SubtaskReport, StoreError> {
        let ctx = &self.ctx;
        let id = self.queue.next_id();
        let _settle = self.queue.guard(id);
        let branch = ctx.facts.run.subtask_branch(id.number());
        let Ok(permit) = Arc::clone(&self.jobs).acquire_owned().await else {
            return Ok(SubtaskReport::new(id, brief, branch));
        };
        ctx.journal(Entry::SubtaskStarted {
            subtask: id,
            task: brief.clone(),
            branch,
            mode: ContextMode::Isolated,
            agent: "worker".to_owned(),
            kind: SubtaskKind::Fix,
            replaces: None,
            start_from: None,
            paths: Vec::new(),
            after: Vec::new(),
            waits_for: Vec::new(),
        })?;
        // Before its worktree exists there: a resumed run continues it from the same.
        ctx.journal(Entry::StartPoint {
            subtask: id,
            commit: start,
        })?;
        let assignment = Assignment {
            id,
            brief: brief.clone(),
            worker_brief: brief.clone(),
            role: roles::builtin(RoleKind::Worker),
            tools: tools::builtin_with_executor(ToolSet::Worker, ctx.trees.executor.clone()),
            start: Transcript {
                messages: isolated_messages(&brief),
                ..Transcript::default()
            },
        };
        let placement = Placement {
            start: Some(start),
            ..Placement::default()
        };
        let mut report = self
            .run_subtask(assignment, permit, placement, None)
            .await?;
        report.kind = SubtaskKind::Fix;
        lock(&self.reports).insert(id, report.clone());
        Ok(report)
    }
}
