//! `grove review RUN`: walk a finished run's subtasks (header, reviewer's verdict and
//! findings, coloured diff), let a person approve or reject each one, then apply.
//!
//! This file owns the flags for scripts, the choice between asking and not, and the exit
//! code; `render::review` shows the walk and asks. Every decision goes through the
//! library's [`override_verdicts`]; this file never writes to the repository itself.

use std::io::{IsTerminal as _, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::git::{GitOptions, Repo};
use grove::review::{
    self, AfterReview, ApplyResult, ReviewOutcome, SubtaskReview, override_verdicts,
};
use grove::store::journal::VerdictKind;

use crate::cli::drive;
use crate::cli::exit::EXIT_USAGE;
use crate::cli::render::Output;
use crate::cli::render::review::{
    Decisions, Out, show_outcome, show_run_footer, show_subtask, walk,
};

/// Exit code: the decisions approve a subtask that is not in the result (it conflicts).
const EXIT_APPROVED_NOT_MERGED: u8 = 3;

/// Arguments of `grove review`.
#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// The run to review, as `grove runs` lists it.
    pub run_id: String,
    /// Approve these subtasks, whatever the reviewer said (labels, comma-separated).
    #[arg(long, value_name = "S1,S3", value_delimiter = ',')]
    pub approve: Vec<String>,
    /// Reject these subtasks, whatever the reviewer said (labels, comma-separated).
    #[arg(long, value_name = "S2", value_delimiter = ',')]
    pub reject: Vec<String>,
    /// Keep this attempt of a group (best of N) instead of the one picked: approves it
    /// and rejects the group's approved attempt (labels, comma-separated, one per group).
    #[arg(long, value_name = "S4", value_delimiter = ',')]
    pub pick: Vec<String>,
    /// Apply the result to your branch afterwards (same safety as `grove run`).
    #[arg(long, conflicts_with = "no_apply")]
    pub apply: bool,
    /// Record the decisions and rebuild the result, but leave your branch alone.
    #[arg(long)]
    pub no_apply: bool,
    /// Print every subtask (verdict, findings, diff) and change nothing.
    #[arg(long, conflicts_with_all = ["approve", "reject", "pick", "apply", "no_apply"])]
    pub list: bool,
    /// Print the resulting state as one JSON object on stdout (the text goes to stderr).
    #[arg(long)]
    pub json: bool,
}

impl ReviewArgs {
    /// True when the flags ask for a change (decisions, or what to do with the result).
    fn wants_change(&self) -> bool {
        !self.approve.is_empty()
            || !self.reject.is_empty()
            || !self.pick.is_empty()
            || self.apply
            || self.no_apply
    }

    /// The labels `--pick` names.
    fn picks(&self) -> Vec<String> {
        self.pick.iter().map(|s| label(s)).collect()
    }

    /// The decisions the flags give, or the label given to both flags.
    fn changes(&self) -> Result<Decisions, String> {
        let approve: Vec<String> = self.approve.iter().map(|s| label(s)).collect();
        let reject: Vec<String> = self.reject.iter().map(|s| label(s)).collect();
        if let Some(both) = approve.iter().find(|id| reject.contains(id)) {
            return Err(format!("{both} is given to both --approve and --reject"));
        }
        if let Some(empty) = approve.iter().chain(&reject).find(|id| id.is_empty()) {
            return Err(format!(
                "an empty subtask label {empty:?} in --approve/--reject (e.g. --approve S1,S3)"
            ));
        }
        Ok(approve
            .into_iter()
            .map(|id| (id, VerdictKind::Approve))
            .chain(reject.into_iter().map(|id| (id, VerdictKind::Reject)))
            .collect())
    }
}

/// A label as a person typed it: `s2` and `2` mean `S2`.
fn label(text: &str) -> String {
    let text = text.trim();
    let digits = text.strip_prefix(['S', 's']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        format!("S{digits}")
    } else {
        text.to_owned()
    }
}

/// `grove review RUN`.
pub async fn review(directory: &Path, args: &ReviewArgs) -> anyhow::Result<ExitCode> {
    let changes = match args.changes() {
        Ok(changes) => changes,
        Err(problem) => {
            let mut stderr = std::io::stderr();
            writeln!(stderr, "grove: {problem}")?;
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    let run_id = drive::parse_run_id(&args.run_id)?;
    let repo = Repo::open(directory, GitOptions::default()).await?;
    let run = review::load(&repo, run_id.as_str()).await?;
    let mut out = Out::new(Output::of_flag(args.json));
    let interactive = !args.wants_change()
        && !args.list
        && !args.json
        && std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal();

    if !args.wants_change() && !interactive {
        let colour = out.colour;
        let diff = |subtask: &SubtaskReview| run.render_diff(&repo, subtask, colour);
        for subtask in &run.subtasks {
            show_subtask(&mut out, subtask, &diff)?;
        }
        show_run_footer(&mut out, &run)?;
        if !args.list && !args.json {
            let mut stderr = std::io::stderr();
            writeln!(
                stderr,
                "grove: not a terminal, so nothing was asked; decide with --approve/--reject \
                 and --apply/--no-apply"
            )?;
        }
        if args.json {
            print_json(&ReviewOutcome::unchanged(run))?;
        }
        return Ok(ExitCode::SUCCESS);
    }

    let (changes, apply) = if interactive {
        if let Some(refusal) = run.refusal() {
            return Err(refusal.into());
        }
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        let colour = out.colour;
        let diff = |subtask: &SubtaskReview| run.render_diff(&repo, subtask, colour);
        match walk(&mut out, &mut input, &run, &diff)? {
            Some(decided) => decided,
            None => {
                out.line("Quit: nothing was recorded.")?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    } else {
        let mut changes = changes;
        for pick in args.picks() {
            changes.extend(review::pick_changes(&run, &pick)?);
        }
        (changes, args.apply)
    };

    let after = if apply {
        AfterReview::Apply
    } else {
        AfterReview::RecordOnly
    };
    let outcome = override_verdicts(&repo, run_id.as_str(), &changes, after).await?;
    show_outcome(&mut out, &outcome, after)?;
    if args.json {
        print_json(&outcome)?;
    }
    Ok(exit_code(&outcome))
}

/// 1 when the apply was refused; 3 when a subtask the decisions approve is not in the
/// result; 0 otherwise (applied, nothing to apply, or not asked to apply).
fn exit_code(outcome: &ReviewOutcome) -> ExitCode {
    if matches!(outcome.apply, Some(ApplyResult::Refused { .. })) {
        ExitCode::FAILURE
    } else if !outcome.approved_but_not_merged().is_empty() {
        ExitCode::from(EXIT_APPROVED_NOT_MERGED)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_json(outcome: &ReviewOutcome) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", serde_json::to_string_pretty(outcome)?)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn labels_typed_by_hand_are_normalised() {
        let args = ReviewArgs {
            run_id: "x".into(),
            approve: vec!["s1".into(), " 3 ".into()],
            reject: vec!["S2".into(), "lead".into()],
            pick: Vec::new(),
            apply: false,
            no_apply: false,
            list: false,
            json: false,
        };
        assert_eq!(
            args.changes(),
            Ok(vec![
                ("S1".to_owned(), VerdictKind::Approve),
                ("S3".to_owned(), VerdictKind::Approve),
                ("S2".to_owned(), VerdictKind::Reject),
                ("lead".to_owned(), VerdictKind::Reject),
            ]),
            "anything else is passed on, for the library to refuse by name"
        );
    }

    #[test]
    fn a_label_given_to_both_flags_is_a_usage_error() {
        let args = ReviewArgs {
            run_id: "x".into(),
            approve: vec!["S1".into(), "S2".into()],
            reject: vec!["S2".into()],
            pick: Vec::new(),
            apply: false,
            no_apply: false,
            list: false,
            json: false,
        };
        assert_eq!(
            args.changes(),
            Err("S2 is given to both --approve and --reject".to_owned())
        );
    }
}
