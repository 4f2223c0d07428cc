//! The fixer's brief: what a worker on the red result is told — the failing check and
//! its output (capped), the culprit if one was found, what the merged subtasks were
//! asked to do, and how earlier fixers fared.
//!
//! This file owns that text and its bounds. It never sees a worker's or a reviewer's
//! messages: only the briefs, verdict summaries and the check's output cross into it.

use crate::run::check::ratchet::{command_passed, new_findings};
use crate::run::report::{Culprit, CulpritEvidence, SubtaskReport};
use crate::store::findings::RatchetTally;
use crate::store::journal::{CheckRun, SubtaskOutcome};
use crate::text::{excerpt, fenced, output_tail};

/// The first line of every fixer's brief (tests and people recognise it by it).
pub const FIXER_HEADING: &str = "# Fix the project's check on the merged result";

/// How much of the failing output the fixer gets: its end, where the failures are.
const OUTPUT_CHARS: usize = 3_000;

/// How much of each merged subtask's brief the fixer gets.
const BRIEF_CHARS: usize = 1_200;

/// What a fixer's brief is built from.
pub(crate) struct FixerFacts<'a> {
    /// `[check] command`.
    pub(crate) command: &'a str,
    /// The result's failed check.
    pub(crate) red: &'a CheckRun,
    pub(crate) culprit: Option<&'a Culprit>,
    /// The merged subtasks the result holds (not the fixers), in subtask order.
    pub(crate) merged: &'a [SubtaskReport],
    /// The fixers before this one, in order.
    pub(crate) earlier: &'a [SubtaskReport],
}

/// The brief of the next fixer.
pub(crate) fn fixer_brief(facts: &FixerFacts<'_>) -> String {
    let mut brief = format!(
        "{FIXER_HEADING}\n\nThis run merged the work of the subtasks below, each reviewed \
         on its own; together they fail the project's check `{command}` (it {ended}). Make \
         the smallest change that makes the check pass while keeping what the subtasks \
         did: finish their work, do not undo it. Run `{command}` with `bash` before you \
         finish, and end with your summary: its first line the commit subject (what you \
         fixed), then what was wrong and what you changed.\n\n\
         ## The check's output (its end)\n\n{output}\n",
        command = facts.command,
        ended = facts.red.ended,
        output = fenced("text", &output_tail(&shown(facts.red), OUTPUT_CHARS)),
    );
    brief.push_str("## The culprit\n\n");
    brief.push_str(&culprit_text(facts.culprit));
    brief.push_str("\n\n## What the merged subtasks were asked to do\n");
    for subtask in facts.merged {
        brief.push_str(&format!(
            "\n### {}\n\n{}\n",
            subtask.id,
            excerpt(subtask.task.trim(), BRIEF_CHARS)
        ));
    }
    if !facts.earlier.is_empty() {
        brief.push_str("\n## Earlier fixers (the check still fails)\n\n");
        for fixer in facts.earlier {
            let outcome = match fixer.status {
                SubtaskOutcome::Merged => "merged".to_owned(),
                other => match &fixer.review_summary {
                    Some(summary) => format!("{}: {}", other.as_str(), excerpt(summary, 400)),
                    None => other.as_str().to_owned(),
                },
            };
            brief.push_str(&format!("- {}: {outcome}\n", fixer.id));
        }
    }
    brief
}

/// The output a fixer is shown: when only `[[check.ratchet]]`s made the result red,
/// their new findings alone (the base's are not its to fix), else the check's output.
fn shown(red: &CheckRun) -> String {
    if red.ratchets.iter().any(RatchetTally::is_red) && command_passed(red) {
        new_findings(red)
    } else {
        red.output_tail.clone()
    }
}

/// What the fixer is told about the culprit.
fn culprit_text(culprit: Option<&Culprit>) -> String {
    let Some(culprit) = culprit else {
        return "No subtask was found to blame: the output names no place in the \
                repository that only some of them changed, and the result rebuilt without \
                each of them fails too."
            .to_owned();
    };
    let who = culprit.subtasks.join(", ");
    match culprit.found_by {
        CulpritEvidence::PassesWithout => {
            format!("{who}: the check passes on the result rebuilt without {who}.")
        }
        CulpritEvidence::FailingLine => format!(
            "Most likely {who}: its merge last changed {}, where the check failed.",
            culprit.at.as_deref().unwrap_or("the failing line")
        ),
        CulpritEvidence::FailingFile => format!(
            "Most likely {who}: it changed {}, where the check failed (that line itself \
             is as the base has it).",
            culprit.at.as_deref().unwrap_or("the failing file")
        ),
        CulpritEvidence::OnlyMerged => format!("{who}: the only subtask merged."),
        CulpritEvidence::FirstHad => format!(
            "{who}: its own tree was the first to have the new finding {}.",
            culprit.at.as_deref().unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::id::SubtaskId;
    use crate::store::journal::CheckStatus;

    #[test]
    fn a_fixer_is_briefed_with_the_check_the_capped_output_the_culprit_and_the_briefs() {
        let red = CheckRun {
            on: "result".into(),
            status: CheckStatus::Failed,
            seconds: 0.5,
            ended: "exited with status 1".into(),
            output_tail: format!("{}\nFAILED test_b", "x".repeat(10_000)),
            opened: Vec::new(),
            tree: None,
            same_as: None,
            ratchets: Vec::new(),
        };
        let merged = [
            SubtaskReport::new(SubtaskId(1), "Rename greet".into(), "b1".into()),
            SubtaskReport::new(SubtaskId(2), "y".repeat(5_000), "b2".into()),
        ];
        let mut earlier = SubtaskReport::new(SubtaskId(3), "fix".into(), "b3".into());
        earlier.status = SubtaskOutcome::Rejected;
        earlier.review_summary = Some("Deletes the test instead.".into());
        let culprit = Culprit {
            subtasks: vec!["S2".into()],
            found_by: CulpritEvidence::PassesWithout,
            at: None,
        };

        let brief = fixer_brief(&FixerFacts {
            command: "make test",
            red: &red,
            culprit: Some(&culprit),
            merged: &merged,
            earlier: std::slice::from_ref(&earlier),
        });

        assert!(brief.starts_with(FIXER_HEADING), "{brief}");
        for part in [
            "fail the project's check `make test` (it exited with status 1)",
            "FAILED test_b\n```",
            "S2: the check passes on the result rebuilt without S2.",
            "### S1\n\nRename greet\n",
            "- S3: rejected: Deletes the test instead.",
        ] {
            assert!(brief.contains(part), "the brief holds {part:?}: {brief}");
        }
        assert!(
            brief.len() < 3_000 + 1_200 * 2 + 1_500,
            "the output and each brief are capped: {} bytes",
            brief.len()
        );
    }
}
