//! Best of N: the attempts at one brief meet once each is checked, and one judgement
//! decides them all.
//!
//! Each attempt is a subtask of its own (its tree, branch, worker, check and archive);
//! its pipeline takes a [`Seat`] on the group's [`Bench`] and, where it would go to its
//! reviewer, hands the bench what it made and waits for its [`Fate`]. The bench waits
//! for every attempt to arrive or drop out (failed, or rejected by a rule), puts aside
//! those whose check failed while another's passed, and then: none left, nothing to
//! decide; one left, its ordinary review; more, the judge ([`judge`]). The pick goes on
//! to its merge; every other attempt is rejected as not picked, its reason journaled
//! as its verdict, and archived as any rejected subtask.
//!
//! This file owns that meeting and the one result the lead gets for the group. It must
//! never merge two attempts of one brief, and never let an attempt that failed fail the
//! others.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::agent::Ledger;
use crate::git::BranchDiff;
use crate::run::context::RunContext;
use crate::run::delegate::DelegateReport;
use crate::run::id::SubtaskId;
use crate::run::pick::JudgePick;
use crate::run::report::SubtaskReport;
use crate::run::subtask::error::SubtaskError;
use crate::run::subtask::judge::{self, Entrant};
use crate::run::subtask::outcome::{Judge, Made};
use crate::run::subtask::reviewer::{Flagged, check_of};
use crate::run::verdict::Verdict;
use crate::store::StoreError;
use crate::store::attempts::{NotPicked, Pick, label};
use crate::store::journal::{CheckRun, CheckStatus, Entry, VerdictKind};
use crate::text::{excerpt, fenced, printable, quoted_path};
use crate::worktree::Worktree;

use super::close::lead_result_by;

/// What an attempt brings to the bench once it is checked.
pub(crate) struct Candidate {
    pub(crate) diff: BranchDiff,
    pub(crate) check: Option<CheckRun>,
    pub(crate) made: Made,
    /// The subtask's `paths` (its write scope's globs).
    pub(crate) paths: Vec<String>,
    pub(crate) worktree: Worktree,
}

/// What becomes of an attempt that came to the bench.
pub(crate) enum Fate {
    /// It is the only attempt left: its own reviewer decides, as for any subtask.
    Review,
    /// Decided at the bench (journaled): picked or not by the judge, or put aside by a
    /// rule; `ledger` is the judge's, carried by one attempt of the group.
    Decided {
        judge: Judge,
        verdict: Verdict,
        ledger: Ledger,
    },
    /// No decision could be had: the run stops (`interrupted`), or the judge failed.
    NoDecision { interrupted: bool, reason: String },
}

/// Where an attempt's pipeline hands in what it made.
pub(crate) struct Seat {
    arrive: oneshot::Sender<Arrival>,
}

struct Arrival {
    candidate: Candidate,
    fate: oneshot::Sender<Fate>,
}

impl Seat {
    /// Hands `candidate` to the bench and waits for its fate; a bench that is gone (its
    /// group's task ended) is an interruption.
    pub(crate) async fn take(self, candidate: Candidate) -> Fate {
        let (fate, decided) = oneshot::channel();
        let gone = Fate::NoDecision {
            interrupted: true,
            reason: "the run stopped before the attempts were judged".into(),
        };
        if self.arrive.send(Arrival { candidate, fate }).is_err() {
            return gone;
        }
        decided.await.unwrap_or(gone)
    }
}

/// The meeting point of one group's attempts.
pub(crate) struct Bench {
    group: SubtaskId,
    brief: String,
    places: Vec<(SubtaskId, char, oneshot::Receiver<Arrival>)>,
}

/// The bench of group `group` for its attempts `places` (each with its label), and a
/// seat for each, in the same order.
pub(crate) fn bench(
    group: SubtaskId,
    places: &[(SubtaskId, char)],
    brief: &str,
) -> (Bench, Vec<Seat>) {
    let mut waiting = Vec::new();
    let mut seats = Vec::new();
    for (id, label) in places {
        let (arrive, arrival) = oneshot::channel();
        waiting.push((*id, *label, arrival));
        seats.push(Seat { arrive });
    }
    (
        Bench {
            group,
            brief: brief.to_owned(),
            places: waiting,
        },
        seats,
    )
}

/// What the worker of attempt `label` of `count` is told after its brief: that others
/// try the same brief, so that it takes the design it judges best rather than the one
/// it would take by default (identical attempts cost their tokens for nothing).
pub(crate) fn worker_note(label: char, count: usize) -> String {
    format!(
        "\n\n(grove: {count} workers try this brief at once, each on its own; this is \
         attempt {label}. A judge compares the attempts and merges one. Do it the way you \
         judge best, completely: correct first, then exactly what the brief asks or allows. \
         The judge reads your diff and your tree, not your summary: a design choice that \
         needs a reason says it where the code does, in a docstring or a comment. Your \
         summary still becomes the commit message if your attempt is picked.)"
    )
}

/// Every attempt of `ids` with its label: its place in the group.
pub(crate) fn labelled(ids: &[SubtaskId]) -> Vec<(SubtaskId, char)> {
    ids.iter()
        .enumerate()
        .map(|(place, id)| (*id, label(place)))
        .collect()
}

/// An attempt that arrived.
struct Present {
    id: SubtaskId,
    label: char,
    arrival: Arrival,
}

impl Present {
    fn passed(&self) -> bool {
        self.arrival
            .candidate
            .check
            .as_ref()
            .is_none_or(|check| check.status == CheckStatus::Passed)
    }

    fn send(self, fate: Fate) {
        // An attempt that stopped waiting (its task ended) needs no answer.
        let _ = self.arrival.fate.send(fate);
    }
}

impl Bench {
    /// Waits for every attempt, then decides them (see the module's doc). An error is
    /// the journal failing.
    pub(crate) async fn decide(self, ctx: &Arc<RunContext>) -> Result<(), StoreError> {
        let (group, brief) = (self.group, self.brief);
        let mut present = Vec::new();
        for (id, label, arrival) in self.places {
            if let Ok(arrival) = arrival.await {
                present.push(Present { id, label, arrival });
            }
        }
        // A run that stops decides nothing: every attempt is resumed, and judged then.
        if ctx.stopping() {
            for attempt in present {
                attempt.send(Fate::NoDecision {
                    interrupted: true,
                    reason: "the run stopped before the attempts were judged".into(),
                });
            }
            return Ok(());
        }
        let mut not_picked = Vec::new();
        let any_passed = present.iter().any(Present::passed);
        let (running, red): (Vec<Present>, Vec<Present>) = present
            .into_iter()
            .partition(|attempt| attempt.passed() || !any_passed);
        let passed: Vec<String> = running.iter().map(|a| a.label.to_string()).collect();
        for attempt in red {
            let reason = format!(
                "its check failed while that of {} passed",
                passed.join(", ")
            );
            put_aside(ctx, attempt, &reason, &mut not_picked)?;
        }
        match running.len() {
            0 => Ok(()),
            // The one attempt left is reviewed as any subtask; no judge, so no `picked`
            // record (the others' verdicts say why they lost).
            1 => {
                for attempt in running {
                    attempt.send(Fate::Review);
                }
                Ok(())
            }
            _ => judged(ctx, group, &brief, running, not_picked).await,
        }
    }
}

/// Rejects `attempt` for `reason` without the judge (journaled), noting it in
/// `not_picked`.
fn put_aside(
    ctx: &RunContext,
    attempt: Present,
    reason: &str,
    not_picked: &mut Vec<NotPicked>,
) -> Result<(), StoreError> {
    let verdict = not_picked_verdict(attempt.label, reason);
    journal_verdict(ctx, attempt.id, &verdict)?;
    not_picked.push(NotPicked {
        subtask: attempt.id,
        reason: reason.to_owned(),
    });
    attempt.send(Fate::Decided {
        judge: Judge::Rule(format!("not picked: {reason}")),
        verdict,
        ledger: Ledger::default(),
    });
    Ok(())
}

/// The judge over `running` (two or more), its decision journaled and sent to each.
async fn judged(
    ctx: &Arc<RunContext>,
    group: SubtaskId,
    brief: &str,
    mut running: Vec<Present>,
    mut not_picked: Vec<NotPicked>,
) -> Result<(), StoreError> {
    share_the_patch_bound(ctx, &mut running).await;
    let judgement = {
        let entrants: Vec<Entrant<'_>> = running
            .iter()
            .map(|attempt| {
                let candidate = &attempt.arrival.candidate;
                Entrant {
                    label: attempt.label,
                    id: attempt.id,
                    diff: &candidate.diff,
                    flagged: Flagged {
                        executes_later: &candidate.made.executes_later,
                        left_out: &candidate.made.left_out,
                        outside_paths: &candidate.made.outside_paths,
                        paths: &candidate.paths,
                        check: check_of(&ctx.facts, candidate.check.as_ref()),
                        against: None,
                        whole: None,
                    },
                    worktree: &candidate.worktree,
                }
            })
            .collect();
        judge::judge(ctx, group, brief, &entrants).await
    };
    let pick = match judgement.pick {
        Ok(pick) => pick,
        Err(error) => {
            let interrupted = matches!(error, SubtaskError::Interrupted) || ctx.stopping();
            for attempt in running {
                attempt.send(Fate::NoDecision {
                    interrupted,
                    reason: error.to_string(),
                });
            }
            return Ok(());
        }
    };
    let picked = running
        .iter()
        .find(|attempt| Some(attempt.label) == pick.picked)
        .map(|attempt| attempt.id);
    // The judge's spend goes with the pick, else with the first attempt it judged.
    let carrier = picked.or(running.first().map(|attempt| attempt.id));
    let mut decided = Vec::new();
    for attempt in running {
        let ledger = if Some(attempt.id) == carrier {
            judgement.ledger
        } else {
            Ledger::default()
        };
        if Some(attempt.id) == picked {
            let verdict = Verdict {
                kind: VerdictKind::Approve,
                summary: pick.summary.clone(),
                findings: pick.findings.clone(),
            };
            journal_verdict(ctx, attempt.id, &verdict)?;
            decided.push((attempt, Judge::Reviewer, verdict, ledger));
            continue;
        }
        let reason = loser_reason(&pick, attempt.label);
        let verdict = match pick.picked {
            Some(_) => not_picked_verdict(attempt.label, &reason),
            None => Verdict {
                kind: VerdictKind::Reject,
                summary: pick.summary.clone(),
                findings: pick.findings.clone(),
            },
        };
        journal_verdict(ctx, attempt.id, &verdict)?;
        not_picked.push(NotPicked {
            subtask: attempt.id,
            reason: reason.clone(),
        });
        let judge = match pick.picked {
            Some(_) => Judge::Rule(format!("not picked: {reason}")),
            None => Judge::Rule(format!(
                "rejected by the judge with every other attempt: {reason}"
            )),
        };
        decided.push((attempt, judge, verdict, ledger));
    }
    journal_pick(ctx, group, picked, &pick.summary, not_picked)?;
    for (attempt, judge, verdict, ledger) in decided {
        attempt.send(Fate::Decided {
            judge,
            verdict,
            ledger,
        });
    }
    Ok(())
}

/// The judge reads every attempt's diff in one message: together they get the bound
/// one reviewed diff gets (`max_review_patch_bytes`), shared out, so that three
/// attempts do not make a message three times a review's. A diff cut down says what
/// it left out; the judge reads those files in the attempt's tree. A diff that cannot
/// be taken again stays as it was.
async fn share_the_patch_bound(ctx: &RunContext, running: &mut [Present]) {
    let bound = ctx.facts.options.max_review_patch_bytes;
    let total: usize = running
        .iter()
        .map(|attempt| attempt.arrival.candidate.diff.patch.text.len())
        .sum();
    if total <= bound || running.is_empty() {
        return;
    }
    let share = (bound / running.len()).max(MIN_PATCH_SHARE);
    for attempt in running.iter_mut() {
        let diff = &mut attempt.arrival.candidate.diff;
        if diff.patch.text.len() <= share {
            continue;
        }
        if let Ok(smaller) = ctx.facts.repo.diff(diff.base, diff.head, share).await {
            *diff = smaller;
        }
    }
}

/// The least of the patch bound an attempt's diff gets when the judge's share is cut.
const MIN_PATCH_SHARE: usize = 8_000;

/// Why the attempt labelled `label` lost, in the judge's words when it gave them.
fn loser_reason(pick: &JudgePick, label: char) -> String {
    let given = pick
        .not_picked
        .iter()
        .find(|(lost, _)| *lost == label)
        .map(|(_, reason)| reason.clone());
    match (given, pick.picked) {
        (Some(reason), _) => reason,
        (None, Some(picked)) => {
            format!("the judge picked attempt {picked} and gave no reason of its own for this one")
        }
        (None, None) => "the judge rejected every attempt".to_owned(),
    }
}

/// The rejection of an attempt that was not picked.
fn not_picked_verdict(label: char, reason: &str) -> Verdict {
    Verdict {
        kind: VerdictKind::Reject,
        summary: format!("Attempt {label} was not picked: {reason}"),
        findings: Vec::new(),
    }
}

fn journal_verdict(ctx: &RunContext, id: SubtaskId, verdict: &Verdict) -> Result<(), StoreError> {
    ctx.journal(Entry::Verdict {
        subtask: id,
        verdict: verdict.kind,
        summary: verdict.summary.clone(),
        findings: verdict.findings.clone(),
    })
}

fn journal_pick(
    ctx: &RunContext,
    group: SubtaskId,
    picked: Option<SubtaskId>,
    summary: &str,
    not_picked: Vec<NotPicked>,
) -> Result<(), StoreError> {
    ctx.journal(Entry::Picked {
        group,
        pick: Pick {
            picked,
            summary: summary.to_owned(),
            not_picked,
        },
    })
}

/// How much of one attempt's reason the lead reads in the group's result: a judge's
/// line whole, a worker's summary cut.
const REASON_CHARS: usize = 1_200;

/// The one result the lead gets for a group: which attempt was picked and, a line
/// each, why the others lost; then the pick's own result (or, none picked, each
/// attempt's first line).
/// `judged`: whether a judge picked among the attempts (else the pick's own reviewer
/// approved the one attempt left).
pub(crate) fn group_result(
    group: SubtaskId,
    reports: &[SubtaskReport],
    judged: bool,
) -> DelegateReport {
    // Every attempt but the pick is rejected: an approval is the pick.
    let picked = reports
        .iter()
        .position(|report| report.verdict == Some(VerdictKind::Approve));
    let count = reports.len();
    let mut text = match picked {
        Some(place) => format!(
            "{group} was tried {count} ways (attempts {}); attempt {} ({}) was picked.\n",
            labels(count),
            label(place),
            reports[place].id
        ),
        None => format!(
            "{group} was tried {count} ways (attempts {}); none was picked, so nothing of it \
             was merged.\n",
            labels(count)
        ),
    };
    for (place, report) in reports.iter().enumerate() {
        if Some(place) == picked {
            continue;
        }
        let why = report
            .reason
            .clone()
            .unwrap_or_else(|| report.status.as_str().to_owned());
        // A loser's reason says it was not picked; any other says how it ended.
        let how = if why.starts_with("not picked") || why.starts_with("rejected by the judge") {
            String::new()
        } else {
            format!("{}: ", report.status.as_str())
        };
        // Where its work is kept, for a follow-up's `start_from` or a look at its diff.
        let kept = report
            .archive_ref
            .as_ref()
            .map(|archive| format!(" (kept at {archive})"))
            .unwrap_or_default();
        text.push_str(&format!(
            "- attempt {} ({}) {how}{}{kept}\n",
            label(place),
            report.id,
            printable(&excerpt(&why, REASON_CHARS)).replace('\n', " ")
        ));
    }
    match picked {
        Some(place) => {
            let by = if judged { "judge" } else { "reviewer" };
            text.push_str(&format!(
                "The picked attempt's result:\n{}",
                lead_result_by(&reports[place], by).text
            ));
        }
        // A judge that rejected them all gave each its summary and findings.
        None if judged => {
            if let Some(report) = reports.iter().find(|r| r.review_summary.is_some()) {
                text.push_str(&judges_words(report));
            }
        }
        None => {}
    }
    DelegateReport { text }
}

/// The judge's summary and findings, as a rejected attempt's verdict holds them.
fn judges_words(report: &SubtaskReport) -> String {
    let summary = report.review_summary.as_deref().unwrap_or_default();
    let mut text = format!(
        "the judge's summary, in its words:\n{}",
        fenced("text", &excerpt(summary, JUDGE_CHARS))
    );
    for finding in report.findings.iter().take(LISTED_FINDINGS) {
        text.push_str(&format!(
            "- {} {}: {}\n",
            finding.severity(),
            quoted_path(&finding.place().to_string()),
            printable(&excerpt(&finding.problem, REASON_CHARS)).replace('\n', " ")
        ));
    }
    text
}

/// How much of the judge's summary, and how many of its findings, the lead reads here.
const JUDGE_CHARS: usize = 4_000;
const LISTED_FINDINGS: usize = 12;

/// `A, B, C` for `count` attempts.
fn labels(count: usize) -> String {
    (0..count)
        .map(|place| label(place).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
