//! What a subtask's stages found, each stage's outcome a typed value of its own, and the
//! one fold that turns them into the subtask's report.
//!
//! The stages ([`super`]'s pipeline, a resolver's, a fixer's) never write a report: each
//! returns its outcome, the pipeline keeps them in a [`Stages`], and [`Stages::report`]
//! decides, in one place, the subtask's status and the reason the lead, the journal and
//! the user read. A reason has one precedence, written down there: why the pipeline
//! stopped short, else how its resolution ended, else its conflict, else the rule that
//! rejected it, else its author's own summary.

use crate::agent::Ledger;
use crate::git::DiffStat;
use crate::run::report::{Resolution, SubtaskReport};
use crate::run::subtask::integrate::Integration;
use crate::run::verdict::Verdict;
use crate::store::journal::{CheckRun, SubtaskOutcome};
use crate::text::excerpt;

/// How much of a worker's (or resolver's) final message the report's one reason keeps.
const SUMMARY_CHARS: usize = 800;
/// How much of it `show_subtask` can show the lead: all of any summary a model writes
/// to end a task, yet bounded against one that pastes a log.
const WHOLE_SUMMARY_CHARS: usize = 32_000;

/// Who did a subtask's work: the summary it ends with is its own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Author {
    Worker,
    Resolver,
}

/// What the work and commit stages made: the author's summary, the diff, and the paths
/// flagged for the reviewer and the user.
#[derive(Debug, Clone)]
pub(crate) struct Made {
    pub(crate) author: Author,
    /// The author's final message, trimmed.
    pub(crate) summary: String,
    pub(crate) stat: DiffStat,
    /// Changed files that run on the host or in CI later.
    pub(crate) executes_later: Vec<String>,
    /// Paths the commit left out as git data.
    pub(crate) left_out: Vec<String>,
    /// Changed paths outside the subtask's `paths`.
    pub(crate) outside_paths: Vec<String>,
}

/// What decided the verdict: the reviewer, or a rule that stands for one (`[check]
/// subtask = "require"`, conflict markers left), with the reason it gives.
#[derive(Debug, Clone)]
pub(crate) enum Judge {
    Reviewer,
    Rule(String),
}

/// Where a subtask's diff went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Landing {
    /// As the merge stage left it: merged, rejected, or in conflict.
    Integrated(Integration),
    /// Approved, it conflicted; resolver `by` merged the two and its review passed.
    Resolved { paths: Vec<String>, by: String },
    /// Approved, it conflicted, and no resolver got it merged (the last one's reason).
    Unresolved { paths: Vec<String>, reason: String },
}

/// How the pipeline stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Left to `grove resume` (interrupted, paused, a full disk): never failed.
    Resumable(String),
    /// A stage failed: the subtask failed.
    Failed(String),
}

impl Stop {
    fn reason(&self) -> &str {
        match self {
            Self::Resumable(reason) | Self::Failed(reason) => reason,
        }
    }
}

/// The outcomes of the stages a subtask reached, in the order they ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stages {
    /// The author's turns, whether or not its work was committed.
    pub(crate) worker_ledger: Ledger,
    pub(crate) made: Option<Made>,
    pub(crate) check: Option<CheckRun>,
    /// The reviewer's turns, whether or not it gave a verdict.
    pub(crate) reviewer_ledger: Ledger,
    pub(crate) judged: Option<(Judge, Verdict)>,
    pub(crate) landing: Option<Landing>,
}

impl Stages {
    /// The subtask's report: `base` (its id, brief, branch and kind) with what these
    /// stages found, ended by `stop` when the pipeline stopped short.
    pub(crate) fn report(self, mut base: SubtaskReport, stop: Option<&Stop>) -> SubtaskReport {
        let reason = self.reason(stop);
        let report = &mut base;
        report.worker_ledger = self.worker_ledger;
        report.reviewer_ledger = self.reviewer_ledger;
        report.reason = reason;
        report.check = self.check;
        if let Some(made) = self.made {
            if !made.summary.is_empty() {
                report.worker_summary = Some(excerpt(&made.summary, WHOLE_SUMMARY_CHARS));
            }
            report.diffstat = Some(made.stat);
            report.executes_later = made.executes_later;
            report.left_out = made.left_out;
            report.outside_paths = made.outside_paths;
        }
        if let Some((_, verdict)) = self.judged {
            report.verdict = Some(verdict.kind);
            report.review_summary = Some(verdict.summary);
            report.findings = verdict.findings;
        }
        report.status = match &self.landing {
            Some(Landing::Integrated(integration)) => integration.outcome(),
            Some(Landing::Resolved { .. }) => SubtaskOutcome::Merged,
            Some(Landing::Unresolved { .. }) => SubtaskOutcome::Conflict,
            None => SubtaskOutcome::Failed,
        };
        match self.landing {
            Some(Landing::Integrated(Integration::Conflict { paths }))
            | Some(Landing::Unresolved { paths, .. }) => report.conflict_paths = paths,
            Some(Landing::Resolved { paths, .. }) => {
                report.conflict_paths = paths;
                report.resolution = Some(Resolution::Resolver);
            }
            _ => {}
        }
        base
    }

    /// The one reason: why the pipeline stopped short, else how its resolution ended,
    /// else its conflict, else the rule that rejected it, else the author's summary.
    fn reason(&self, stop: Option<&Stop>) -> Option<String> {
        if let Some(stop) = stop {
            return Some(stop.reason().to_owned());
        }
        let conflicts = |paths: &[String]| paths.join(", ");
        match &self.landing {
            Some(Landing::Resolved { paths, by }) => {
                return Some(format!(
                    "conflicted with earlier work in {}; resolver {by} merged the two and \
                     its review passed",
                    conflicts(paths)
                ));
            }
            Some(Landing::Unresolved { paths, reason }) => {
                return Some(format!(
                    "approved, but it conflicts with work merged before it in: {}; its \
                     resolver did not get it merged ({reason})",
                    conflicts(paths)
                ));
            }
            Some(Landing::Integrated(Integration::Conflict { paths })) => {
                return Some(format!(
                    "approved, but it conflicts with work merged before it in: {}",
                    conflicts(paths)
                ));
            }
            _ => {}
        }
        if let Some((Judge::Rule(reason), _)) = &self.judged {
            return Some(reason.clone());
        }
        let made = self.made.as_ref().filter(|made| !made.summary.is_empty())?;
        let author = match made.author {
            Author::Worker => "worker",
            Author::Resolver => "resolver",
        };
        Some(format!(
            "{author}: {}",
            excerpt(&made.summary, SUMMARY_CHARS)
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::id::SubtaskId;
    use crate::store::journal::VerdictKind;

    fn reached(landing: Option<Landing>, rule: bool) -> Stages {
        let verdict = Verdict {
            kind: VerdictKind::Approve,
            summary: "fine".into(),
            findings: Vec::new(),
        };
        let judge = if rule {
            Judge::Rule("rejected by the rule".into())
        } else {
            Judge::Reviewer
        };
        Stages {
            made: Some(Made {
                author: Author::Worker,
                summary: "Rename it".into(),
                stat: DiffStat::default(),
                executes_later: Vec::new(),
                left_out: Vec::new(),
                outside_paths: Vec::new(),
            }),
            judged: Some((judge, verdict)),
            landing,
            ..Stages::default()
        }
    }

    fn ended(stages: Stages, stop: Option<&Stop>) -> (SubtaskOutcome, Option<String>) {
        let base = SubtaskReport::new(SubtaskId(1), "b".into(), "grove/r/1".into());
        let report = stages.report(base, stop);
        (report.status, report.reason)
    }

    #[test]
    fn one_reason_stands_by_a_written_precedence() {
        let paths = vec!["a.py".to_owned()];
        let conflict = Landing::Integrated(Integration::Conflict {
            paths: paths.clone(),
        });
        let stop = Stop::Failed("the review failed".into());
        assert_eq!(
            [
                ended(reached(Some(conflict.clone()), true), Some(&stop)),
                ended(
                    reached(
                        Some(Landing::Resolved {
                            paths: paths.clone(),
                            by: "S2".into()
                        }),
                        true
                    ),
                    None
                ),
                ended(reached(Some(conflict), true), None),
                ended(
                    reached(Some(Landing::Integrated(Integration::Rejected)), true),
                    None
                ),
                ended(
                    reached(Some(Landing::Integrated(Integration::Merged)), false),
                    None
                ),
                ended(Stages::default(), None),
            ],
            [
                (SubtaskOutcome::Conflict, Some("the review failed".into())),
                (
                    SubtaskOutcome::Merged,
                    Some(
                        "conflicted with earlier work in a.py; resolver S2 merged the two and \
                         its review passed"
                            .into()
                    )
                ),
                (
                    SubtaskOutcome::Conflict,
                    Some("approved, but it conflicts with work merged before it in: a.py".into())
                ),
                (
                    SubtaskOutcome::Rejected,
                    Some("rejected by the rule".into())
                ),
                (SubtaskOutcome::Merged, Some("worker: Rename it".into())),
                (SubtaskOutcome::Failed, None),
            ],
            "a stop, then the resolution, the conflict, the rule, the author's summary"
        );
    }
}
