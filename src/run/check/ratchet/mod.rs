//! `[[check.ratchet]]`: commands whose findings may not grow past the base's — a type
//! checker, a linter, a suite with known failures. One run of a ratchet in a tree, its
//! findings read ([`parse`]), compared with the base's ([`base`] proves and caches them
//! once per base commit), and the account a check's output gets of it.
//!
//! This file owns running a ratchet as the check runs (the same sandbox, executor and
//! time limit) and deciding when it gave nothing to compare: it timed out or was killed,
//! its output was cut, it exited non-zero without a finding grove could read, its JUnit
//! file is missing or not XML. It must never count a ratchet that gave nothing as clean.

pub(crate) mod base;
mod parse;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::run::context::TreeStage;
use crate::settings::options::CheckOptions;
use crate::settings::ratchet::{RatchetOptions, RatchetParse};
use crate::store::findings::{RatchetFinding, RatchetTally};
use crate::store::journal::CheckRun;
use crate::text::output_tail;
use crate::tools::{CommandExecutor, ExecOutcome, ExecRequest, OutputCap};

/// A ratchet's output kept whole up to this size; a longer one is not compared (a cut
/// would drop findings on one side only).
const OUTPUT_BYTES: usize = 32 * 1024 * 1024;

/// The largest JUnit file read: a large suite's report with its failures' output.
const JUNIT_BYTES: u64 = 64 * 1024 * 1024;

/// How much of a ratchet's output an error about it quotes.
const QUOTED_CHARS: usize = 1_500;

/// What an agent's prompt says of `check`'s ratchets (empty without any): that they may
/// not get worse than the base, not that they must be clean, so that no agent sets out to
/// fix the base's own findings or takes them for its own.
pub(crate) fn prompt_note(check: &CheckOptions) -> String {
    if check.ratchets.is_empty() {
        return String::new();
    }
    let commands: Vec<String> = check
        .ratchets
        .iter()
        .map(|ratchet| format!("`{}`", ratchet.command))
        .collect();
    format!(
        " Beside it, {} may report what the base already reports: a tree's check is red only \
         with a finding the base does not have (lines moved do not count), and those new \
         findings are shown.",
        commands.join(", ")
    )
}

/// Why a ratchet gave nothing to compare; its text is what the check's account and the
/// journal say. Never retried: the tree's check is red with it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoFindings {
    #[error("it could not run: {0}")]
    NotRun(String),
    #[error("it was killed by signal {0}")]
    Signalled(i32),
    #[error("it timed out after {0} s")]
    TimedOut(u64),
    #[error("its output passed {} MiB, so part of it would go uncompared", OUTPUT_BYTES >> 20)]
    OutputCut,
    #[error("its pattern does not compile: {0}")]
    Pattern(#[source] regex::Error),
    #[error(
        "it wrote no JUnit file at `{junit}` (it exited with status {code}). Its output ends with:\n{tail}"
    )]
    NoJunit {
        junit: String,
        code: i32,
        tail: String,
    },
    #[error("its JUnit file `{junit}` cannot be read: {source}")]
    JunitUnreadable {
        junit: String,
        #[source]
        source: std::io::Error,
    },
    #[error("its JUnit file `{junit}` is {why}")]
    JunitInvalid { junit: String, why: parse::NotJunit },
    #[error(
        "it exited with status {code} and reported no finding grove could read. Its output ends with:\n{tail}"
    )]
    Unread { code: i32, tail: String },
}

/// The run stopped while a ratchet ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interrupted;

/// Where a ratchet runs: the tree as the command sees it, and as grove reaches it.
#[derive(Clone, Copy)]
pub(crate) struct RatchetSite<'a> {
    pub(crate) executor: &'a Arc<dyn CommandExecutor>,
    /// The directory the command runs in.
    pub(crate) cwd: &'a Path,
    /// The same tree as grove reads it (a copy-on-write tree's host path).
    pub(crate) reach: &'a Path,
}

/// Runs `ratchet` at `site` and reads its findings; the inner error says why it gave
/// nothing to compare (naming the command, or the JUnit file).
pub(crate) async fn findings(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    ratchet: &RatchetOptions,
    site: RatchetSite<'_>,
) -> Result<Result<Vec<RatchetFinding>, NoFindings>, Interrupted> {
    if let RatchetParse::Junit { junit } = &ratchet.parse {
        // One left by a worker, or by an earlier run, must not stand for this one.
        // Through the tree's own links only: a directory link out must not make grove
        // delete a file of the same name elsewhere.
        let _gone = crate::repo_file::remove(site.reach, Path::new(junit));
    }
    let request = ExecRequest {
        command: ratchet.command.clone(),
        cwd: site.cwd.to_path_buf(),
        timeout: Duration::from_secs(check.timeout_s),
        cancel: stage.record.cancel.child_token(),
        output_cap: OutputCap {
            head: OUTPUT_BYTES,
            tail: 0,
        },
    };
    let result = match site.executor.execute(request).await {
        Ok(result) => result,
        Err(error) => return Ok(Err(NoFindings::NotRun(error.to_string()))),
    };
    let output = result.output_text();
    let code = match result.outcome {
        ExecOutcome::Cancelled => return Err(Interrupted),
        ExecOutcome::Exited(code) => code,
        ExecOutcome::Signalled(signal) => {
            return Ok(Err(NoFindings::Signalled(signal)));
        }
        ExecOutcome::TimedOut => {
            return Ok(Err(NoFindings::TimedOut(check.timeout_s)));
        }
    };
    if result.cut_bytes() > 0 {
        return Ok(Err(NoFindings::OutputCut));
    }
    let tree = site.cwd.to_string_lossy();
    let found = match &ratchet.parse {
        RatchetParse::Lines { pattern } => match regex::Regex::new(pattern) {
            Ok(pattern) => parse::lines(&output, &pattern, &tree),
            Err(error) => return Ok(Err(NoFindings::Pattern(error))),
        },
        RatchetParse::CargoJson => parse::cargo_json(&output, &tree),
        RatchetParse::Junit { junit } => {
            // The tree's code wrote it: a link out of the tree, a FIFO or a device is
            // refused, never followed into what a model reads.
            let read = crate::repo_file::read_at_most(site.reach, Path::new(junit), JUNIT_BYTES);
            let text = match read {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    return Ok(Err(NoFindings::NoJunit {
                        junit: junit.clone(),
                        code,
                        tail: output_tail(&output, QUOTED_CHARS),
                    }));
                }
                Err(source) => {
                    return Ok(Err(NoFindings::JunitUnreadable {
                        junit: junit.clone(),
                        source,
                    }));
                }
            };
            match parse::junit(&text) {
                Ok(found) => found,
                Err(why) => {
                    return Ok(Err(NoFindings::JunitInvalid {
                        junit: junit.clone(),
                        why,
                    }));
                }
            }
        }
    };
    if found.is_empty() && code != 0 && !matches!(ratchet.parse, RatchetParse::Junit { .. }) {
        return Ok(Err(NoFindings::Unread {
            code,
            tail: output_tail(&output, QUOTED_CHARS),
        }));
    }
    Ok(Ok(found))
}

/// Every ratchet of `check` run at `site` and compared with the base's findings; empty
/// when there is none.
pub(crate) async fn compare(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    site: RatchetSite<'_>,
) -> Result<Vec<RatchetTally>, Interrupted> {
    let base = stage.trees.base_findings.get();
    let mut tallies = Vec::new();
    for (n, ratchet) in check.ratchets.iter().enumerate() {
        let Some(before) = base.and_then(|base| base.get(n)) else {
            tallies.push(RatchetTally::failed(
                &ratchet.command,
                "the base's findings are not known".to_owned(),
            ));
            continue;
        };
        tallies.push(match findings(stage, check, ratchet, site).await? {
            Ok(found) => RatchetTally::compare(&ratchet.command, before, &found),
            Err(why) => RatchetTally::failed(&ratchet.command, why.to_string()),
        });
    }
    Ok(tallies)
}

/// How a check ended once its ratchets are counted: `ended` as the command ended, plus
/// what made a ratchet red.
pub(crate) fn ended(ended: &str, tallies: &[RatchetTally]) -> String {
    let mut text = ended.to_owned();
    for tally in tallies.iter().filter(|tally| tally.is_red()) {
        match &tally.error {
            Some(_) => text.push_str(&format!("; `{}` gave nothing to compare", tally.command)),
            None => text.push_str(&format!(
                "; `{}` has {} new finding{} the base has not",
                tally.command,
                tally.new,
                if tally.new == 1 { "" } else { "s" }
            )),
        }
    }
    text
}

/// Whether the check's own command passed on `run`, so that only its ratchets made it
/// red (what [`ended`] wrote says so).
pub(crate) fn command_passed(run: &CheckRun) -> bool {
    run.ended == "exited with status 0" || run.ended.starts_with("exited with status 0; ")
}

/// The red ratchets of `run` and their new findings alone, one a line: what a fixer and
/// the culprit search are told when only ratchets made it red.
pub(crate) fn new_findings(run: &CheckRun) -> String {
    let mut text = String::new();
    for tally in run.ratchets.iter().filter(|tally| tally.is_red()) {
        match &tally.error {
            Some(error) => text.push_str(&format!(
                "`{}` gave nothing to compare: {error}\n",
                tally.command
            )),
            None => {
                text.push_str(&format!(
                    "`{}`: {} new finding{} (the base's own are not shown):\n",
                    tally.command,
                    tally.new,
                    if tally.new == 1 { "" } else { "s" }
                ));
                for finding in &tally.new_findings {
                    text.push_str(&format!("{}\n", finding.line()));
                }
            }
        }
    }
    text
}

/// The account of the ratchets a check's output ends with: per ratchet its counts, its
/// new findings (only those: the base's are not the tree's doing), the fixed ones.
pub(crate) fn account(tallies: &[RatchetTally]) -> String {
    let mut text = String::new();
    for tally in tallies {
        text.push_str(&format!("== [[check.ratchet]] {}\n", tally.counts()));
        if tally.new > 0 {
            text.push_str("New findings (the base has not these; fix them):\n");
        }
        for finding in &tally.new_findings {
            text.push_str(&format!("{}\n", finding.line()));
        }
        if tally.fixed > 0 {
            text.push_str("Fixed (the base had these):\n");
        }
        for finding in &tally.fixed_findings {
            text.push_str(&format!("{}\n", finding.line()));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_told_a_ratchet_may_keep_the_bases_findings() {
        let mut check = CheckOptions::new("pytest -q");
        assert_eq!(prompt_note(&check), "", "no ratchet, nothing said");
        check.ratchets = vec![RatchetOptions {
            command: "mypy src".to_owned(),
            parse: RatchetParse::CargoJson,
        }];
        assert_eq!(
            prompt_note(&check),
            " Beside it, `mypy src` may report what the base already reports: a tree's check \
             is red only with a finding the base does not have (lines moved do not count), \
             and those new findings are shown."
        );
    }

    #[test]
    fn a_red_ratchet_is_named_in_how_the_check_ended_and_its_account_lists_only_the_new() {
        let finding = |message: &str| RatchetFinding {
            file: "src/a.py".into(),
            code: "arg-type".into(),
            message: message.into(),
            at: Some("7".into()),
        };
        let base = [finding("old one"), finding("fixed one")];
        let tallies = [
            RatchetTally::compare("mypy src", &base, &[finding("old one"), finding("new one")]),
            RatchetTally::failed("pytest", "it wrote no JUnit file at `r.xml`".into()),
        ];

        assert_eq!(
            ended("exited with status 0", &tallies),
            "exited with status 0; `mypy src` has 1 new finding the base has not; `pytest` \
             gave nothing to compare"
        );
        assert_eq!(
            account(&tallies),
            "== [[check.ratchet]] mypy src: 1 new, 1 fixed, 1 unchanged\n\
             New findings (the base has not these; fix them):\n\
             src/a.py:7: [arg-type] new one\n\
             Fixed (the base had these):\n\
             src/a.py:7: [arg-type] fixed one\n\
             == [[check.ratchet]] pytest: not compared: it wrote no JUnit file at `r.xml`\n"
        );
    }
}
