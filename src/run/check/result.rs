//! The check on the merged result, before the user's branch moves: green, the result is
//! applied as before; red, the culprit is looked for and a fixer (a subtask of kind
//! `fix`, through the same pipeline: worker, commit, its check, a fresh reviewer, the
//! merge) works on the result, and the check runs again — at most `[check]
//! fix_attempts` rounds. Still red, nothing is applied.
//!
//! This file owns that loop and its verdict on the run. The lead is not involved (its
//! loop is over). It must never run for an interrupted or paused run, never let a red
//! or unchecked result be applied, and never count a resumed run's fixers twice: the
//! rounds already taken are the fixers the journal holds.

use crate::git::{CommitId, GitError};
use crate::run::check::base::red_without_any_subtask;
use crate::run::check::culprit::{Candidate, culprit_from_runs, find_culprit};
use crate::run::check::fixer::{FixerFacts, fixer_brief};
use crate::run::check::tree::{TreeCheckError, check_commit};
use crate::run::context::{AgentServices, RunFacts, RunRecord, TreeStage};
use crate::run::report::{Culprit, SubtaskReport};
use crate::run::subtask::Subtasks;
use crate::store::StoreError;
use crate::store::journal::{CheckRun, CheckStatus, Entry, ON_RESULT, SubtaskKind, SubtaskOutcome};

/// Why the check on the result could not go on; the run's end is not recorded.
#[derive(Debug, thiserror::Error)]
pub enum ResultCheckError {
    /// The journal cannot be written. Not retried; the run resumes once fixed.
    #[error("run journal: {0}")]
    Journal(#[from] StoreError),
    /// The result ref cannot be read. Not retried.
    #[error("{0}")]
    Git(#[from] GitError),
}

/// What the check on the merged result says about applying it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ResultCheck {
    /// Not run: no check is configured or nothing was merged (applied as before).
    NotRun,
    /// The last check on the result passed: apply it.
    Passed { culprit: Option<Culprit> },
    /// Still red after every fixer round: the branch must not move.
    Failed {
        run: CheckRun,
        culprit: Option<Culprit>,
        /// Set when it fails the same way on the base, without any subtask: the
        /// environment's failure, which no fixer was sent after (the message).
        environment: Option<String>,
    },
    /// The check could not give a verdict (its worktree, its setup, the command): the
    /// result is not applied unchecked.
    Unchecked { reason: String },
    /// The run stopped (Ctrl-C, a pause) during the check or a fixer: nothing is applied,
    /// and `grove resume` checks again. `red` is the check that found the result red,
    /// when the stop came after it (during the culprit search or a fixer).
    Interrupted { red: Option<CheckRun> },
}

impl ResultCheck {
    /// A stop before any check gave a verdict on the result.
    pub(crate) const STOPPED: Self = Self::Interrupted { red: None };

    /// This outcome, an interruption recorded as coming after `red` found the result red.
    fn after_red(self, red: &CheckRun) -> Self {
        match self {
            Self::Interrupted { red: None } => Self::Interrupted {
                red: Some(red.clone()),
            },
            other => other,
        }
    }

    /// The culprit found on the way, for the report.
    pub(crate) fn culprit(&self) -> Option<&Culprit> {
        match self {
            Self::Passed { culprit } | Self::Failed { culprit, .. } => culprit.as_ref(),
            _ => None,
        }
    }
}

/// Whether a run goes on to its end once its lead is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunCourse {
    /// To its end: the merged result is checked (and fixed) before the branch moves.
    ToItsEnd,
    /// Stopped (the lead was interrupted): the check is left to a resume.
    Stopped,
}

/// Checks the merged result and, while it is red and rounds are left, has fixers fix
/// it; nothing at [`RunCourse::Stopped`], nor when the run pauses. An error is the
/// journal failing, or the result ref unreadable.
pub(crate) async fn check_result(
    stage: TreeStage<'_>,
    agents: &AgentServices,
    subtasks: &Subtasks,
    course: RunCourse,
) -> Result<ResultCheck, ResultCheckError> {
    let (facts, record) = (stage.facts, stage.record);
    let Some(check) = &facts.options.check else {
        return Ok(ResultCheck::NotRun);
    };
    if course == RunCourse::Stopped || record.stopping() {
        return Ok(ResultCheck::STOPPED);
    }
    let Some(mut tip) = result_tip(facts)? else {
        return Ok(ResultCheck::NotRun);
    };
    if tip == facts.base {
        return Ok(ResultCheck::NotRun);
    }
    let mut red = match verdict(stage, check_commit(stage, check, tip, ON_RESULT).await)? {
        Ok(run) if run.status == CheckStatus::Passed => {
            return Ok(ResultCheck::Passed { culprit: None });
        }
        Ok(run) => run,
        Err(stop) => return Ok(stop),
    };
    match verdict(stage, red_without_any_subtask(stage, check, &red).await)? {
        Ok(Some(environment)) => {
            return Ok(ResultCheck::Failed {
                run: red,
                culprit: None,
                environment: Some(environment),
            });
        }
        Ok(None) => {}
        Err(stop) => return Ok(stop.after_red(&red)),
    }
    let reports = subtasks.reports();
    let merged: Vec<SubtaskReport> = reports
        .iter()
        .filter(|s| s.status == SubtaskOutcome::Merged && s.kind != SubtaskKind::Fix)
        .cloned()
        .collect();
    let attempts = usize::try_from(check.fix_attempts).unwrap_or(usize::MAX);
    let mut fixers: Vec<SubtaskReport> = reports
        .into_iter()
        .filter(|s| s.kind == SubtaskKind::Fix)
        .collect();
    if fixers.len() >= attempts {
        // No search when nobody would be told; a resumed run's earlier one still counts.
        return Ok(ResultCheck::Failed {
            run: red,
            culprit: culprit_from_runs(&record.journal.checks()),
            environment: None,
        });
    }
    let candidates = candidates(facts, record, &merged).await;
    let culprit = match verdict(
        stage,
        find_culprit(stage, check, &red, tip, &candidates).await,
    )? {
        Ok(culprit) => culprit,
        Err(stop @ ResultCheck::Interrupted { .. }) => return Ok(stop.after_red(&red)),
        Err(ResultCheck::Unchecked { reason }) => {
            record.note(format!("the culprit search stopped: {reason}"));
            None
        }
        Err(other) => return Ok(other),
    };
    if let Some(culprit) = &culprit {
        record.journal(Entry::Culprit {
            subtasks: culprit.subtasks.clone(),
            found_by: culprit.found_by.as_str().to_owned(),
            at: culprit.at.clone(),
        })?;
    }
    while fixers.len() < attempts {
        if agents.budget.is_spent() {
            record.note("the run's token budget is spent: no fixer starts on the red result");
            break;
        }
        let brief = fixer_brief(&FixerFacts {
            command: &check.command,
            red: &red,
            culprit: culprit.as_ref(),
            merged: &merged,
            earlier: &fixers,
        });
        let fixer = subtasks.run_fixer(brief, tip).await?;
        let fixed = fixer.status == SubtaskOutcome::Merged;
        fixers.push(fixer);
        if record.stopping() {
            return Ok(ResultCheck::STOPPED.after_red(&red));
        }
        if !fixed {
            continue;
        }
        tip = result_tip(facts)?.unwrap_or(tip);
        red = match verdict(stage, check_commit(stage, check, tip, ON_RESULT).await)? {
            Ok(run) if run.status == CheckStatus::Passed => {
                return Ok(ResultCheck::Passed { culprit });
            }
            Ok(run) => run,
            // The result changed since `red` (a fixer merged), but no check passed it.
            Err(stop) => return Ok(stop.after_red(&red)),
        };
    }
    Ok(ResultCheck::Failed {
        run: red,
        culprit,
        environment: None,
    })
}

/// Sorts what a check on a tree gave: a value, a stop of the run (`Err`: interrupted,
/// or unchecked with the reason), or the journal failing (the outer error).
fn verdict<T>(
    stage: TreeStage<'_>,
    result: Result<T, TreeCheckError>,
) -> Result<Result<T, ResultCheck>, ResultCheckError> {
    let error = match result {
        Ok(value) => return Ok(Ok(value)),
        Err(error) => match error.into_journal() {
            Ok(journal) => return Err(ResultCheckError::Journal(journal)),
            Err(error) => error,
        },
    };
    let stopped = error.interrupted()
        || stage.record.stopping()
        || stage
            .record
            .pause_if_disk_full(stage.facts, "the check on the merged result", &error);
    Ok(Err(if stopped {
        ResultCheck::STOPPED
    } else {
        ResultCheck::Unchecked {
            reason: error.to_string(),
        }
    }))
}

/// The run's result commit now.
fn result_tip(facts: &RunFacts) -> Result<Option<CommitId>, ResultCheckError> {
    Ok(facts.repo.ref_target(&facts.run.result_ref())?)
}

/// The merged subtasks, with their merged commits (from the journal) and the paths they
/// changed; one whose commit is unknown is left out of the search.
async fn candidates(
    facts: &RunFacts,
    record: &RunRecord,
    merged: &[SubtaskReport],
) -> Vec<Candidate> {
    let journaled = record.journal.subtasks();
    let mut found = Vec::new();
    for report in merged {
        let commit = journaled
            .iter()
            .find(|state| state.id == report.id)
            .and_then(|state| state.merge.as_ref())
            .map(|merge| merge.commit);
        let Some(commit) = commit else {
            continue;
        };
        let changed = match &report.diffstat {
            Some(stat) => stat.files.iter().map(|f| f.path.clone()).collect(),
            None => match facts.repo.diff(facts.base, commit, 0).await {
                Ok(diff) => diff.stat.files.into_iter().map(|f| f.path).collect(),
                Err(error) => {
                    // Only the output's evidence is lost; leaving it out still works.
                    record.note(format!(
                        "{}: could not list the files it changed: {error}",
                        report.id
                    ));
                    Vec::new()
                }
            },
        };
        found.push(Candidate {
            label: report.id.to_string(),
            number: report.id.number(),
            commit,
            changed,
        });
    }
    found
}

/// Why the result must not be applied after its check, for the person; `None` when the
/// check lets it be applied.
pub(crate) fn held_back(facts: &RunFacts, checked: &ResultCheck) -> Option<String> {
    let command = facts.options.check.as_ref().map(|c| c.command.as_str());
    match (checked, command) {
        (
            ResultCheck::Failed {
                run, environment, ..
            },
            Some(command),
        ) => Some(format!(
            "the result's check `{command}` failed ({}){}",
            run.ended,
            environment
                .as_ref()
                .map(|why| format!("; {why}"))
                .unwrap_or_default()
        )),
        (ResultCheck::Interrupted { red: Some(run) }, Some(command)) => Some(format!(
            "the result's check `{command}` failed ({}), and the run was interrupted before \
             a fix passed it",
            run.ended
        )),
        (ResultCheck::Unchecked { reason }, _) => {
            Some(format!("the result could not be checked: {reason}"))
        }
        _ => None,
    }
}
