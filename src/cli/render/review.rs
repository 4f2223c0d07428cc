//! The terminal side of `grove review`: each subtask's header, verdict, findings and
//! diff, the prompts, and what was recorded.
//!
//! This file owns what a person reads and answers during a review; it must never record
//! or apply anything itself (the command does, through the library).

use std::io::{BufRead, IsTerminal as _, Write};

use grove::git::{Colour, GitError};
use grove::review::{
    AfterReview, ApplyResult, CommitSource, ReviewOutcome, RunReview, SubtaskReview,
};
use grove::store::journal::{CheckRun, CheckStatus, VerdictKind};
use grove::store::state::SubtaskStatus;
use grove::text::{first_line, printable};

use super::Output;

/// Where the text goes and whether it is coloured.
pub struct Out {
    stream: Box<dyn Write>,
    pub colour: Colour,
}

impl Out {
    /// Stdout, or stderr when stdout carries JSON; colour only on a terminal and
    /// without `NO_COLOR`.
    pub fn new(output: Output) -> Self {
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        let (stream, terminal): (Box<dyn Write>, bool) = match output {
            Output::Json => (Box::new(std::io::stderr()), std::io::stderr().is_terminal()),
            Output::Human => (Box::new(std::io::stdout()), std::io::stdout().is_terminal()),
        };
        let colour = if terminal && !no_colour {
            Colour::Always
        } else {
            Colour::Never
        };
        Self { stream, colour }
    }

    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.colour == Colour::Always {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    pub fn line(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.stream, "{text}")
    }
}

/// Subtask labels with the decision a person gave them.
pub type Decisions = Vec<(String, VerdictKind)>;

/// What a person answered for one subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Approve,
    Reject,
    Keep,
    Quit,
}

/// Asks until the answer is one of `choices` (first letters; an empty answer is
/// `default`, when there is one); end of input is `None`.
pub fn ask(
    out: &mut Out,
    input: &mut dyn BufRead,
    question: &str,
    choices: &[char],
    default: Option<char>,
) -> std::io::Result<Option<char>> {
    loop {
        write!(out.stream, "{question} ")?;
        out.stream.flush()?;
        let mut line = String::new();
        if input.read_line(&mut line)? == 0 {
            out.line("")?;
            return Ok(None);
        }
        let answer = line.trim().to_lowercase();
        if answer.is_empty()
            && let Some(default) = default
        {
            return Ok(Some(default));
        }
        if let Some(choice) = answer.chars().next().filter(|c| choices.contains(c))
            && answer.chars().count() <= "approve".len()
        {
            return Ok(Some(choice));
        }
        out.line(&format!(
            "Please answer one of: {}",
            choices
                .iter()
                .map(char::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
    }
}

/// Shows each subtask and asks for a decision; then shows the changes and asks what to
/// do. `None` when the person quit.
pub fn walk(
    out: &mut Out,
    input: &mut dyn BufRead,
    run: &RunReview,
    diff: &RenderDiff<'_>,
) -> anyhow::Result<Option<(Decisions, bool)>> {
    let mut changes = Vec::new();
    out.line(&format!(
        "Reviewing run {} ({}, {} subtask{}): {}",
        run.run_id,
        run.status,
        run.subtasks.len(),
        if run.subtasks.len() == 1 { "" } else { "s" },
        printable(run.task.lines().next().unwrap_or_default().trim())
    ))?;
    out.line("")?;
    for subtask in &run.subtasks {
        show_subtask(out, subtask, diff)?;
        if !subtask.approvable() {
            out.line("(no commit: there is nothing to approve)")?;
            out.line("")?;
            continue;
        }
        let answer = match ask(
            out,
            input,
            &format!(
                "{}: [a]pprove / [r]eject / [k]eep as is ({}) / [q]uit?",
                subtask.id,
                subtask.decision.map_or("undecided", VerdictKind::as_str)
            ),
            &['a', 'r', 'k', 'q'],
            None,
        )? {
            Some('a') => Answer::Approve,
            Some('r') => Answer::Reject,
            Some('k') => Answer::Keep,
            _ => Answer::Quit,
        };
        out.line("")?;
        let verdict = match answer {
            Answer::Quit => return Ok(None),
            Answer::Keep => continue,
            Answer::Approve => VerdictKind::Approve,
            Answer::Reject => VerdictKind::Reject,
        };
        if subtask.decision == Some(verdict) {
            continue;
        }
        // Approving an attempt picks it: its group's approved attempt is rejected.
        let picked = match (verdict, &subtask.attempt) {
            (VerdictKind::Approve, Some(_)) => {
                grove::review::pick_changes(run, &subtask.id.to_string())?
            }
            _ => vec![(subtask.id.to_string(), verdict)],
        };
        for change in picked {
            if let Some(given) = changes.iter_mut().find(|(id, _)| *id == change.0) {
                *given = change;
            } else {
                changes.push(change);
            }
        }
    }

    let branch = run
        .branch
        .strip_prefix("refs/heads/")
        .unwrap_or(&run.branch);
    if changes.is_empty() {
        out.line("No decision changed.")?;
        let apply = ask(
            out,
            input,
            &format!("Apply the result to {branch}? [y/N]"),
            &['y', 'n'],
            Some('n'),
        )?;
        return Ok(Some((changes, apply == Some('y'))));
    }
    out.line("Your decisions:")?;
    for (id, verdict) in &changes {
        let before = run
            .subtask(id)
            .and_then(|s| s.decision)
            .map_or("undecided", VerdictKind::as_str);
        out.line(&format!("  {id}: {before} → {}", verdict.as_str()))?;
    }
    let next = ask(
        out,
        input,
        &format!("[a]pply to {branch} / [s]ave without applying / [d]iscard?"),
        &['a', 's', 'd'],
        None,
    )?;
    Ok(match next {
        Some('a') => Some((changes, true)),
        Some('s') => Some((changes, false)),
        _ => None,
    })
}

/// How many lines of a red check's output the review shows.
const CHECK_TAIL_LINES: usize = 8;

/// `check: passed (exited with status 0) in 1.4 s`, and the end of a red one's output.
fn check_lines(out: &mut Out, check: &CheckRun) -> anyhow::Result<()> {
    let (code, word) = match check.status {
        CheckStatus::Passed => ("32", "passed"),
        CheckStatus::Failed => ("31", "failed"),
    };
    out.line(&format!(
        "check: {} ({}) in {:.1} s",
        out.paint(code, word),
        printable(&check.ended),
        check.seconds
    ))?;
    for tally in &check.ratchets {
        out.line(&format!("ratchet {}", printable(&tally.counts())))?;
    }
    if check.status == CheckStatus::Failed {
        let tail = printable(&check.output_tail);
        let lines: Vec<&str> = tail.lines().collect();
        for line in &lines[lines.len().saturating_sub(CHECK_TAIL_LINES)..] {
            out.line(&format!("  | {line}"))?;
        }
    }
    Ok(())
}

/// Renders a subtask's diff (`None`: it has no commit).
pub type RenderDiff<'a> = dyn Fn(&SubtaskReview) -> Result<Option<String>, GitError> + 'a;

/// The header (id, task, status, verdicts, findings, warnings) and the diff.
pub fn show_subtask(
    out: &mut Out,
    subtask: &SubtaskReview,
    diff: &RenderDiff<'_>,
) -> anyhow::Result<()> {
    let status = subtask.status.as_str();
    let status_code = match subtask.status {
        SubtaskStatus::Merged => "32",
        SubtaskStatus::Conflict => "33",
        _ => "31",
    };
    let mut title = format!(
        "{} · {}",
        out.paint("1", &subtask.id.to_string()),
        out.paint(status_code, status)
    );
    if let Some(reviewer) = &subtask.reviewer {
        title.push_str(&format!(" · reviewer: {}", reviewer.verdict.as_str()));
    }
    if let Some(human) = subtask.human_verdict {
        title.push_str(&format!(" · you: {}", human.as_str()));
    }
    out.line(&format!("── {title} ──"))?;
    if let Some(of) = &subtask.attempt {
        let mut line = format!(
            "attempt {} of {}: {}",
            of.label,
            of.group,
            of.status.words()
        );
        if let Some(reason) = &of.reason {
            line.push_str(&format!(": {}", printable(reason.trim())));
        }
        out.line(&line)?;
    }
    // Task, summaries, findings and paths come from models and the repository: every one
    // is shown through `printable`, the colours around them are grove's.
    let task = printable(&subtask.task);
    let mut task_lines = task.lines();
    out.line(&format!("task: {}", task_lines.next().unwrap_or_default()))?;
    for line in task_lines {
        out.line(&format!("      {line}"))?;
    }
    if let Some(reviewer) = &subtask.reviewer {
        out.line(&format!("reviewer: {}", printable(reviewer.summary.trim())))?;
        for finding in &reviewer.findings {
            out.line(&format!(
                "  - {} {}: {}",
                finding.severity(),
                printable(&finding.place().to_string()),
                printable(finding.problem.trim())
            ))?;
        }
    } else {
        out.line("reviewer: no verdict (the subtask ended before its review)")?;
    }
    if let Some(check) = &subtask.check {
        check_lines(out, check)?;
    }
    for path in &subtask.executes_later {
        let warning = format!(
            "executes later: {} runs on your machine or in CI; read it yourself, whatever \
             the reviewer said",
            printable(path)
        );
        out.line(&out.paint("33", &warning))?;
    }
    if !subtask.conflict_paths.is_empty() {
        out.line(&format!(
            "conflicts with work merged before it in: {}",
            printable(&subtask.conflict_paths.join(", "))
        ))?;
    }
    match (&subtask.commit, &subtask.commit_source) {
        (Some(commit), Some(source)) => {
            let hex = commit.to_string();
            let short = hex.get(..10).unwrap_or(&hex);
            let place = match source {
                CommitSource::Merged => "merged into the result".to_owned(),
                CommitSource::Branch { reference } | CommitSource::Archive { reference } => {
                    reference.clone()
                }
                CommitSource::Checkpoint => "its last checkpoint".to_owned(),
            };
            out.line(&format!("work: {short} ({place})"))?;
        }
        _ => out.line("work: none (it failed before producing a commit)")?,
    }
    if let Some(diff) = diff(subtask)? {
        out.line("")?;
        write!(out.stream, "{diff}")?;
    }
    out.line("")?;
    Ok(())
}

pub fn show_run_footer(out: &mut Out, run: &RunReview) -> anyhow::Result<()> {
    let branch = run
        .branch
        .strip_prefix("refs/heads/")
        .unwrap_or(&run.branch);
    out.line(&format!(
        "run {} ({}): {}",
        run.run_id,
        run.status,
        printable(run.task.trim())
    ))?;
    if run.applied {
        out.line(&format!("The result was applied to {branch}."))?;
    } else {
        out.line(&format!(
            "The result is on {}; {branch} does not have it yet.",
            run.result_branch
        ))?;
    }
    for line in group_lines(run) {
        out.line(&line)?;
    }
    if let Some(refusal) = run.refusal() {
        out.line(&format!("It cannot be changed: {refusal}."))?;
    }
    Ok(())
}

/// Each group of attempts in one place: which attempt is picked, why the others lost,
/// the judge's words, and how to pick another.
fn group_lines(run: &RunReview) -> Vec<String> {
    let mut lines = Vec::new();
    for group in &run.attempt_groups {
        lines.push(format!(
            "{} was tried {} ways:",
            group.group,
            group.subtasks.len()
        ));
        for subtask in run.subtasks.iter() {
            let Some(of) = subtask
                .attempt
                .as_ref()
                .filter(|of| of.group == group.group)
            else {
                continue;
            };
            let why = of
                .reason
                .as_deref()
                .map(|reason| format!(": {}", printable(&first_line(reason, 100))))
                .unwrap_or_default();
            lines.push(format!(
                "  {} {} ({}) {}{why}",
                of.label,
                subtask.id,
                subtask.status.as_str(),
                of.status.words()
            ));
        }
        if let Some(pick) = &group.pick {
            lines.push(format!(
                "  the judge: {}",
                printable(&first_line(&pick.summary, 200))
            ));
        }
        let other = run
            .subtasks
            .iter()
            .filter(|s| s.attempt.as_ref().is_some_and(|of| of.group == group.group))
            .find(|s| s.decision != Some(VerdictKind::Approve) && s.approvable());
        if let Some(other) = other {
            lines.push(format!(
                "  to keep another attempt instead: grove review {} --pick {}",
                run.run_id, other.id
            ));
        }
    }
    lines
}

pub fn show_outcome(
    out: &mut Out,
    outcome: &ReviewOutcome,
    after: AfterReview,
) -> anyhow::Result<()> {
    let run = &outcome.review;
    for lock in &outcome.removed_locks {
        out.line(&format!(
            "Removed {}, a stale lock a stopped process left on one of the run's refs.",
            lock.display()
        ))?;
    }
    for decision in &outcome.recorded {
        out.line(&format!(
            "Recorded: {} {} → {}",
            decision.subtask,
            decision.previous.map_or("undecided", VerdictKind::as_str),
            decision.verdict.as_str()
        ))?;
    }
    for id in &outcome.unchanged {
        out.line(&format!(
            "{id}: already decided that way; nothing to record"
        ))?;
    }
    if let Some(rebuilt) = &outcome.rebuilt {
        let result = rebuilt.result.to_string();
        let short = result.get(..10).unwrap_or(&result);
        out.line(&format!(
            "The result was rebuilt: {} is now {short}.",
            run.result_branch
        ))?;
        for subtask in &rebuilt.subtasks {
            let mut line = format!("  {} {}", subtask.subtask, subtask.status.as_str());
            if !subtask.conflict_paths.is_empty() {
                line.push_str(&format!(
                    " in {} (left out of the result)",
                    subtask.conflict_paths.join(", ")
                ));
            }
            out.line(&line)?;
        }
        for archive in &rebuilt.archived {
            out.line(&format!(
                "  S{}'s work is kept at {}",
                archive.subtask, archive.reference
            ))?;
        }
    }
    match &outcome.apply {
        Some(ApplyResult::Refused {
            message, command, ..
        }) => {
            out.line(message)?;
            out.line(&format!("To apply it: {command}"))?;
            out.line(&format!(
                "(or, once that is fixed: grove review {} --apply)",
                run.run_id
            ))?;
        }
        Some(result) => out.line(result.message())?,
        None if after == AfterReview::RecordOnly && !run.applied => out.line(&format!(
            "Your branch was not touched; `grove review {} --apply` applies the result.",
            run.run_id
        ))?,
        None => {}
    }
    for subtask in outcome.approved_but_not_merged() {
        out.line(&format!(
            "{} is approved but not in the result ({}).",
            subtask.id,
            subtask.status.as_str()
        ))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn silent() -> Out {
        Out {
            stream: Box::new(std::io::sink()),
            colour: Colour::Never,
        }
    }

    #[test]
    fn a_prompt_asks_again_until_it_gets_a_choice_and_treats_end_of_input_as_none() {
        let mut input: &[u8] = b"maybe\n\nR\n";
        let answer = ask(&mut silent(), &mut input, "?", &['a', 'r'], None).unwrap();
        assert_eq!(answer, Some('r'), "unclear answers are asked again");
        let mut empty: &[u8] = b"";
        assert_eq!(
            ask(&mut silent(), &mut empty, "?", &['a'], None).unwrap(),
            None
        );
    }

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Shared(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn subtask(id: &str, status: SubtaskStatus, verdict: Option<VerdictKind>) -> SubtaskReview {
        let commit = (status != SubtaskStatus::Failed)
            .then(|| grove::git::CommitId::parse(&"c".repeat(40)).unwrap());
        SubtaskReview {
            id: id.parse().unwrap(),
            task: format!("brief of {id}"),
            status,
            reviewer: verdict.map(|verdict| grove::store::state::VerdictState {
                verdict,
                summary: "judged".into(),
                findings: Vec::new(),
            }),
            human_verdict: None,
            decision: verdict,
            commit,
            commit_source: commit.map(|_| CommitSource::Checkpoint),
            start: None,
            diffstat: None,
            executes_later: Vec::new(),
            conflict_paths: Vec::new(),
            check: (status == SubtaskStatus::Rejected).then(|| grove::store::journal::CheckRun {
                on: id.into(),
                status: grove::store::journal::CheckStatus::Failed,
                seconds: 2.0,
                ended: "exited with status 1".into(),
                output_tail: "test_a ok\ntest_b FAILED\n1 failed".into(),
                opened: Vec::new(),
                tree: None,
                same_as: None,
                ratchets: Vec::new(),
            }),
            attempt: None,
        }
    }

    fn run() -> RunReview {
        RunReview {
            run_id: "20261130-000000-0000".parse().unwrap(),
            task: "task".into(),
            status: grove::store::state::RunStatus::Finished,
            base: grove::git::CommitId::parse(&"b".repeat(40)).unwrap(),
            branch: "refs/heads/main".into(),
            result_branch: "grove/20261130-000000-0000/result".into(),
            result_commit: None,
            applied: false,
            history: grove::settings::options::History::Squash,
            error: None,
            subtasks: vec![
                subtask("S1", SubtaskStatus::Merged, Some(VerdictKind::Approve)),
                subtask("S2", SubtaskStatus::Rejected, Some(VerdictKind::Reject)),
                subtask("S3", SubtaskStatus::Failed, None),
            ],
            attempt_groups: Vec::new(),
        }
    }

    /// Walks `run()` answering `answers`; returns the outcome and what was shown.
    fn walk_with(answers: &str) -> (Option<(Decisions, bool)>, String) {
        let shown = Shared::default();
        let mut out = Out {
            stream: Box::new(shown.clone()),
            colour: Colour::Never,
        };
        let diff = |s: &SubtaskReview| Ok(Some(format!("diff of {}\n", s.id)));
        let outcome = walk(&mut out, &mut answers.as_bytes(), &run(), &diff).unwrap();
        let text = String::from_utf8(shown.0.borrow().clone()).unwrap();
        (outcome, text)
    }

    #[test]
    fn the_walk_records_only_changed_decisions_and_skips_subtasks_without_work() {
        let (outcome, shown) = walk_with("k\na\ns\n");
        assert_eq!(
            outcome,
            Some((vec![("S2".to_owned(), VerdictKind::Approve)], false)),
            "keep leaves S1 to the reviewer; approving S2 is the one change; s saves only"
        );
        for expected in [
            "S1: [a]pprove / [r]eject / [k]eep as is (approve) / [q]uit?",
            "diff of S2",
            "S2: [a]pprove / [r]eject / [k]eep as is (reject) / [q]uit?",
            "(no commit: there is nothing to approve)",
            "  S2: reject → approve",
            "Reviewing run 20261130-000000-0000 (finished, 3 subtasks): task",
            "check: failed (exited with status 1) in 2.0 s\n  | test_a ok\n  | test_b FAILED\n  \
             | 1 failed\n",
        ] {
            assert!(shown.contains(expected), "shows {expected:?}:\n{shown}");
        }
        assert!(
            !shown.contains("S3: [a]pprove"),
            "a subtask without work is not asked about:\n{shown}"
        );
    }

    #[test]
    fn each_ratchet_of_a_check_is_counted_under_its_line() {
        let shown = Shared::default();
        let mut out = Out {
            stream: Box::new(shown.clone()),
            colour: Colour::Never,
        };
        let mut check = subtask("S2", SubtaskStatus::Rejected, None).check.unwrap();
        check.ratchets = vec![grove::store::findings::RatchetTally {
            command: "mypy src".into(),
            new: 1,
            fixed: 2,
            unchanged: 15,
            new_findings: Vec::new(),
            fixed_findings: Vec::new(),
            error: None,
        }];

        check_lines(&mut out, &check).unwrap();

        let text = String::from_utf8(shown.0.borrow().clone()).unwrap();
        assert!(
            text.starts_with(
                "check: failed (exited with status 1) in 2.0 s\nratchet mypy src: 1 new, 2 \
                 fixed, 15 unchanged\n  | test_a ok\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_walk_quits_on_q_or_end_of_input_and_asks_to_apply_when_nothing_changed() {
        assert_eq!(walk_with("r\nq\n").0, None, "q records nothing");
        assert_eq!(walk_with("r\n").0, None, "end of input records nothing");
        assert_eq!(
            walk_with("a\nr\n\n").0,
            Some((vec![], false)),
            "confirming the reviewer changes nothing; then only the apply is asked (no is the default)"
        );
        assert_eq!(walk_with("a\nr\ny\n").0, Some((vec![], true)));
        assert_eq!(
            walk_with("r\nk\na\n").0,
            Some((vec![("S1".to_owned(), VerdictKind::Reject)], true))
        );
    }
}
