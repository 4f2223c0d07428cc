//! Which merged subtasks broke the result's check: first the failing output's innermost
//! frame in a changed file (`failing_location.rs`), else the check re-run on the result
//! rebuilt without them, bisected when there are many.
//!
//! "The result without S2" is built in memory, as `grove review`'s rebuild does: from
//! the base, every other merged subtask's commit merged in subtask order — except those
//! that started from a result holding S2's work (they built on it), and any that no
//! longer merge cleanly without it. Each is checked in a worktree of its own.
//!
//! This file owns that search. It never moves a ref (the rebuilt commits are reachable
//! from nothing and left to git's gc), and never decides what happens to the run.

use std::collections::BTreeSet;

use crate::git::{CommitId, RebuildPick};
use crate::run::check::failing_location::{Attribution, Changed, at_failing_location};
use crate::run::check::ratchet::{command_passed, new_findings};
use crate::run::check::tree::{TreeCheckError, check_commit};
use crate::run::context::{RunFacts, TreeStage};
use crate::run::report::{Culprit, CulpritEvidence};
use crate::settings::options::CheckOptions;
use crate::store::findings::RatchetTally;
use crate::store::journal::{CheckRun, CheckStatus, ON_RESULT_WITHOUT, on_result_without};

/// With this many candidates or fewer each is left out alone; with more, halves are left
/// out first (bisection), so that a run of 16 subtasks costs about 8 checks, not 16.
const LEAVE_ONE_OUT_MAX: usize = 4;

/// A merged subtask that may have broken the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Its label, `S2`.
    pub(crate) label: String,
    /// Its number (for the rebuilt merge commits' messages).
    pub(crate) number: u32,
    /// Its commit that was merged.
    pub(crate) commit: CommitId,
    /// The paths it changed.
    pub(crate) changed: Vec<String>,
}

/// Finds the culprit of `red` (the check that failed on `result`) among `candidates` (in
/// merge order): the subtask that changed the innermost frame of the failure that lies in
/// a changed file, when that frame tells one from the others, else the smallest group
/// without which a rebuilt result passes (bisected); `None` when neither finds one.
pub(crate) async fn find_culprit(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    red: &CheckRun,
    result: CommitId,
    candidates: &[Candidate],
) -> Result<Option<Culprit>, TreeCheckError> {
    if let [only] = candidates {
        return Ok(Some(Culprit {
            subtasks: vec![only.label.clone()],
            found_by: CulpritEvidence::OnlyMerged,
            at: None,
        }));
    }
    if let Some(culprit) = first_had(&stage.record.journal.checks(), red, candidates) {
        return Ok(Some(culprit));
    }
    // Only ratchets made it red: their new findings are where it failed, not the
    // command's output (nor the findings the tree fixed).
    let evidence = if red.ratchets.iter().any(RatchetTally::is_red) && command_passed(red) {
        new_findings(red)
    } else {
        red.output_tail.clone()
    };
    let changed: Vec<Changed<'_>> = candidates
        .iter()
        .map(|candidate| Changed {
            label: &candidate.label,
            paths: &candidate.changed,
        })
        .collect();
    match at_failing_location(stage.facts, result, &evidence, &changed) {
        Some(Attribution::Line { subtask, at }) => {
            return Ok(Some(Culprit {
                subtasks: vec![subtask],
                found_by: CulpritEvidence::FailingLine,
                at: Some(at),
            }));
        }
        Some(Attribution::File { subtasks, at }) => {
            return Ok(Some(Culprit {
                subtasks,
                found_by: CulpritEvidence::FailingFile,
                at: Some(at),
            }));
        }
        None => {}
    }
    Ok(passes_without(stage, check, candidates)
        .await?
        .map(|found| Culprit {
            subtasks: found.iter().map(|c| c.label.clone()).collect(),
            found_by: CulpritEvidence::PassesWithout,
            at: None,
        }))
}

/// When only ratchets made `red` red: the candidates whose own checks (in `runs`, in
/// the order they ran) first had each of its new findings; `None` unless every new
/// finding was some candidate's before (a finding only the merge made is searched for
/// as any red check is).
fn first_had(runs: &[CheckRun], red: &CheckRun, candidates: &[Candidate]) -> Option<Culprit> {
    if !command_passed(red) || red.ratchets.iter().any(|tally| tally.error.is_some()) {
        return None;
    }
    let mut subtasks: Vec<String> = Vec::new();
    let mut first: Option<String> = None;
    for tally in &red.ratchets {
        for finding in &tally.new_findings {
            let had = runs.iter().find(|run| {
                candidates.iter().any(|candidate| candidate.label == run.on)
                    && run.ratchets.iter().any(|own| {
                        own.command == tally.command
                            && own
                                .new_findings
                                .iter()
                                .any(|their| their.identity() == finding.identity())
                    })
            })?;
            first.get_or_insert_with(|| finding.line());
            if !subtasks.contains(&had.on) {
                subtasks.push(had.on.clone());
            }
        }
    }
    Some(Culprit {
        subtasks,
        found_by: CulpritEvidence::FirstHad,
        at: Some(first?),
    })
}

/// The culprit an earlier search of this run found by leaving subtasks out (its checks
/// are journaled): the last `result without …` that passed, if any. For a resumed run
/// whose fixer rounds are all taken, which searches no more.
pub(crate) fn culprit_from_runs(runs: &[CheckRun]) -> Option<Culprit> {
    let run = runs
        .iter()
        .rev()
        .find(|run| run.status == CheckStatus::Passed && run.on.starts_with(ON_RESULT_WITHOUT))?;
    Some(Culprit {
        subtasks: run.on[ON_RESULT_WITHOUT.len()..]
            .split(", ")
            .map(str::to_owned)
            .collect(),
        found_by: CulpritEvidence::PassesWithout,
        at: None,
    })
}

/// The smallest group of candidates found whose removal makes the check pass: each one
/// alone when there are few, else the half that passes without it, narrowed down.
async fn passes_without<'a>(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    candidates: &'a [Candidate],
) -> Result<Option<&'a [Candidate]>, TreeCheckError> {
    let mut group = candidates;
    let mut found = None;
    while group.len() > LEAVE_ONE_OUT_MAX {
        let (first, second) = group.split_at(group.len() / 2);
        if green_without(stage, check, candidates, first).await? {
            group = first;
        } else if green_without(stage, check, candidates, second).await? {
            group = second;
        } else {
            return Ok(found);
        }
        found = Some(group);
    }
    for at in 0..group.len() {
        let one = &group[at..=at];
        if green_without(stage, check, candidates, one).await? {
            return Ok(Some(one));
        }
    }
    Ok(found)
}

/// Whether the check passes on the result rebuilt from the base without `left_out`.
async fn green_without(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    all: &[Candidate],
    left_out: &[Candidate],
) -> Result<bool, TreeCheckError> {
    let labels: Vec<String> = left_out.iter().map(|c| c.label.clone()).collect();
    let on = on_result_without(&labels);
    let tree = rebuilt_without(stage.facts, all, left_out)
        .await
        .map_err(|source| TreeCheckError::Worktree {
            on: on.clone(),
            source: source.into(),
        })?;
    let run = check_commit(stage, check, tree, &on).await?;
    Ok(run.status == CheckStatus::Passed)
}

/// The commit of the result rebuilt from the base without `left_out` and without what
/// built on it (a candidate whose commit has a left-out one in its history).
async fn rebuilt_without(
    facts: &RunFacts,
    all: &[Candidate],
    left_out: &[Candidate],
) -> Result<CommitId, crate::git::GitError> {
    let out: BTreeSet<CommitId> = left_out.iter().map(|c| c.commit).collect();
    let mut picks = Vec::new();
    for candidate in all {
        if out.contains(&candidate.commit) {
            continue;
        }
        let mut built_on = false;
        for left in &out {
            built_on |= facts.repo.is_ancestor(*left, candidate.commit)?;
        }
        if !built_on {
            picks.push(RebuildPick {
                subtask: candidate.number,
                commit: candidate.commit,
                message: format!(
                    "grove {}: culprit search, merge {}",
                    facts.run, candidate.label
                ),
            });
        }
    }
    Ok(facts.repo.merge_picks(facts.base, &picks).await?.result)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::test_support::TestRun;
    use crate::store::journal::ON_RESULT;

    fn red() -> CheckRun {
        CheckRun {
            on: ON_RESULT.into(),
            status: CheckStatus::Failed,
            seconds: 0.1,
            ended: "exited with status 1".into(),
            output_tail: "FAILED".into(),
            opened: Vec::new(),
            tree: None,
            same_as: None,
            ratchets: Vec::new(),
        }
    }

    #[test]
    fn the_culprit_of_new_findings_is_the_subtask_whose_own_tree_first_had_them() {
        use crate::store::findings::{RatchetFinding, RatchetTally};
        let finding = |file: &str, at: &str| RatchetFinding {
            file: file.into(),
            code: "arg-type".into(),
            message: "bad".into(),
            at: Some(at.into()),
        };
        let checked = |on: &str, ended: &str, found: &[RatchetFinding]| CheckRun {
            on: on.into(),
            ended: ended.into(),
            ratchets: vec![RatchetTally::compare("mypy .", &[], found)],
            ..red()
        };
        let candidate = |label: &str, number| Candidate {
            label: label.into(),
            number,
            commit: CommitId::parse("1111111111111111111111111111111111111111").unwrap(),
            changed: Vec::new(),
        };
        let candidates = [candidate("S1", 1), candidate("S2", 2), candidate("S3", 3)];
        let ok = "exited with status 0; `mypy .` has 1 new finding the base has not";
        // S3 started from a result holding S2's work, so it had S2's finding too.
        let runs = [
            checked("S1", "exited with status 0", &[]),
            checked("S2", ok, &[finding("a.py", "3")]),
            checked("S3", ok, &[finding("a.py", "4"), finding("b.py", "9")]),
        ];
        let on_result = |found: &[RatchetFinding], ended: &str| checked(ON_RESULT, ended, found);

        let both = first_had(
            &runs,
            &on_result(&[finding("a.py", "7"), finding("b.py", "9")], ok),
            &candidates,
        );
        let merged_only = first_had(&runs, &on_result(&[finding("c.py", "1")], ok), &candidates);
        let command_red = first_had(
            &runs,
            &on_result(
                &[finding("a.py", "7")],
                "exited with status 1; `mypy .` has 1 new",
            ),
            &candidates,
        );

        assert_eq!(
            both,
            Some(Culprit {
                subtasks: vec!["S2".into(), "S3".into()],
                found_by: CulpritEvidence::FirstHad,
                at: Some("a.py:7: [arg-type] bad".into()),
            }),
            "a.py's finding was S2's first (wherever it lies now), b.py's S3's"
        );
        assert_eq!(
            merged_only, None,
            "a finding no subtask had alone is searched for"
        );
        assert_eq!(command_red, None, "a red command is searched for as before");
    }

    #[tokio::test]
    async fn the_only_merged_subtask_is_the_culprit_without_a_check_and_a_subtask_built_on_a_left_out_one_goes_with_it()
     {
        let run = TestRun::alpha().await;
        let repo = &run.ctx.facts.repo;
        let one = run.worktree(1).await;
        std::fs::write(one.path().join("one.txt"), "1\n").unwrap();
        let first = one.checkpoint(repo, "S1").await.unwrap().unwrap();
        let two = run.worktree(2).await;
        std::fs::write(two.path().join("two.txt"), "2\n").unwrap();
        let second = two.checkpoint(repo, "S2").await.unwrap().unwrap();
        // S3 started from a result holding S1's work.
        let on_first = repo
            .merge_picks(
                run.ctx.facts.base,
                &[RebuildPick {
                    subtask: 1,
                    commit: first,
                    message: "m".into(),
                }],
            )
            .await
            .unwrap()
            .result;
        let three = run
            .ctx
            .facts
            .repo
            .create_detached_worktree(
                &run.ctx.facts.run,
                &run.ctx.facts.worktrees_dir.join("three"),
                on_first,
            )
            .await
            .unwrap();
        three.ready().await.unwrap();
        let candidate = |label: &str, number, commit| Candidate {
            label: label.into(),
            number,
            commit,
            changed: Vec::new(),
        };
        let built_on = {
            std::fs::write(three.path().join("three.txt"), "3\n").unwrap();
            run.git(three.path(), &["add", "three.txt"]);
            run.git(three.path(), &["commit", "-q", "-m", "S3"]);
            run.rev(&run.git(three.path(), &["rev-parse", "HEAD"]))
        };
        let all = [
            candidate("S1", 1, first),
            candidate("S2", 2, second),
            candidate("S3", 3, built_on),
        ];

        let alone = find_culprit(
            run.ctx.tree_stage(),
            &CheckOptions::new("false"),
            &red(),
            first,
            &all[..1],
        )
        .await
        .unwrap();
        let without_first = rebuilt_without(&run.ctx.facts, &all, &all[..1])
            .await
            .unwrap();

        assert_eq!(
            alone,
            Some(Culprit {
                subtasks: vec!["S1".into()],
                found_by: CulpritEvidence::OnlyMerged,
                at: None,
            }),
            "one merged subtask is the culprit at once"
        );
        assert!(
            run.ctx.record.journal.checks().is_empty(),
            "and no check ran for it"
        );
        let passed_without = CheckRun {
            on: on_result_without(&["S4".into(), "S5".into()]),
            status: CheckStatus::Passed,
            ..red()
        };
        assert_eq!(
            culprit_from_runs(&[red(), passed_without]),
            Some(Culprit {
                subtasks: vec!["S4".into(), "S5".into()],
                found_by: CulpritEvidence::PassesWithout,
                at: None,
            }),
            "a journaled search is read back as its culprit"
        );
        assert_eq!(culprit_from_runs(&[red()]), None);
        let files = run.git(
            three.path(),
            &["ls-tree", "--name-only", &without_first.to_string()],
        );
        assert_eq!(
            files, "a.txt\ntwo.txt",
            "without S1: S2 stays, S3 (built on S1) goes with it"
        );
    }
}
