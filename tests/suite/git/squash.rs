//! The squashed history: one commit per step with the step's tree, linear on the base,
//! written once and reused (never written again) while its trees are the result's, and
//! applied with the same safety as the merge graph.

use grove::git::{AdvanceError, ApplyOutcome, ApplyRequest, CommitId, Repo, SquashStep};
use pretty_assertions::assert_eq;

use super::{commit_in, filled_worktree, project, run_id};
use crate::support::git_fixture::GitFixture;

/// A run with subtasks 1..=n merged onto its result, each writing `file<i>`.
async fn merged_run(fixture: &GitFixture, n: u32) -> (Repo, CommitId) {
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    repo.create_result_branch(&run_id(), base).await.unwrap();
    merge_more(&repo, base, 1..=n).await;
    (repo, base)
}

async fn merge_more(repo: &Repo, base: CommitId, subtasks: std::ops::RangeInclusive<u32>) {
    for i in subtasks.clone() {
        let worktree = filled_worktree(repo, base, i).await;
        commit_in(repo, &worktree, &[(&format!("file{i}"), &format!("{i}\n"))]).await;
    }
    let subtasks: Vec<u32> = subtasks.collect();
    repo.merge_subtasks(&run_id(), &subtasks).await.unwrap();
}

/// One step per commit of the result's first-parent chain, its message `step <i>`.
fn steps(repo: &Repo, base: CommitId, words: &str) -> Vec<SquashStep> {
    repo.first_parent_chain(&run_id().result_ref(), base)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, merge)| SquashStep {
            after: merge.commit,
            message: format!("{words} {}\n", i + 1),
        })
        .collect()
}

/// Subject, author, parents and tree of each commit on `range`, oldest first.
fn described(fixture: &GitFixture, range: &str) -> String {
    fixture.git(&["log", "--reverse", "--format=%s|%an <%ae>|%P|%T", range])
}

#[tokio::test]
async fn each_step_is_one_commit_with_its_tree_and_a_second_squash_reuses_them() {
    let fixture = project();
    let (repo, base) = merged_run(&fixture, 2).await;
    let result = run_id().result_ref();
    let squashed_ref = run_id().squashed_ref();

    let first = repo
        .squash(base, &steps(&repo, base, "step"), &squashed_ref)
        .await
        .unwrap();

    let [one, two] = first.commits[..] else {
        panic!("two commits: {first:?}");
    };
    let tree = |rev: &str| fixture.git(&["rev-parse", &format!("{rev}^{{tree}}")]);
    assert_eq!(
        described(&fixture, &format!("{base}..{squashed_ref}")),
        format!(
            "step 1|Test Author <author@example.com>|{base}|{}\n\
             step 2|Test Author <author@example.com>|{one}|{}",
            tree(&format!("{result}~1")),
            tree(&result),
        ),
        "one commit per merge, each with the result's tree right after it, linear on the \
         base, authored as the user's environment says"
    );
    assert_eq!((first.tip, first.reused), (two, 0));
    assert_eq!(repo.ref_target(&squashed_ref).unwrap(), Some(two));

    let again = repo
        .squash(base, &steps(&repo, base, "reworded"), &squashed_ref)
        .await
        .unwrap();
    assert_eq!(
        (again.commits.clone(), again.reused),
        (vec![one, two], 2),
        "the commits on the ref are reused while their trees are the steps': a branch that \
         holds them is never given a second copy"
    );

    merge_more(&repo, base, 3..=3).await;
    let extended = repo
        .squash(base, &steps(&repo, base, "step"), &squashed_ref)
        .await
        .unwrap();
    assert_eq!(
        (extended.commits[..2].to_vec(), extended.reused),
        (vec![one, two], 2),
        "a result that grew keeps the commits it had and gets one more"
    );
    assert_eq!(
        (
            fixture.rev(&format!("{}~1", extended.tip)),
            tree(&extended.tip.to_string())
        ),
        (two, tree(&result))
    );
}

#[tokio::test]
async fn a_squashed_ref_moved_off_the_base_is_written_anew() {
    let fixture = project();
    let (repo, base) = merged_run(&fixture, 1).await;
    let squashed_ref = run_id().squashed_ref();
    let orphan = fixture.git(&[
        "commit-tree",
        "-m",
        "unrelated",
        &format!("{base}^{{tree}}"),
    ]);
    fixture.git(&["update-ref", &squashed_ref, &orphan]);

    let squashed = repo
        .squash(base, &steps(&repo, base, "step"), &squashed_ref)
        .await
        .unwrap();

    assert_eq!(squashed.reused, 0, "nothing of another history is reused");
    assert_eq!(
        fixture.rev(&format!("{}~1", squashed.tip)),
        base,
        "the new history starts at the base"
    );
    assert!(matches!(
        repo.first_parent_chain(&squashed_ref, fixture.rev(&orphan)),
        Err(AdvanceError::NotOnFirstParentChain { .. })
    ));
}

#[tokio::test]
async fn a_squashed_history_applies_once_and_merges_on_top_of_a_moved_branch() {
    let fixture = project();
    let (repo, base) = merged_run(&fixture, 2).await;
    let squashed = repo
        .squash(base, &steps(&repo, base, "step"), &run_id().squashed_ref())
        .await
        .unwrap();
    let request = ApplyRequest {
        run: run_id(),
        source: run_id().squashed_ref(),
        branch: "refs/heads/main".to_owned(),
        base,
    };

    assert_eq!(
        repo.apply(&request).await.unwrap(),
        ApplyOutcome::Applied {
            from: base,
            to: squashed.tip,
            merged_on_top: false
        },
        "a branch still at the base fast-forwards to the squashed history"
    );
    assert_eq!(
        (fixture.read("file1"), fixture.read("file2")),
        (b"1\n".to_vec(), b"2\n".to_vec())
    );
    assert_eq!(
        repo.apply(&request).await.unwrap(),
        ApplyOutcome::AlreadyApplied,
        "a second apply sees the branch already holds it"
    );

    // Another branch that moved on since the base gets it merged on top.
    fixture.git(&["checkout", "--quiet", "-b", "other", &base.to_string()]);
    fixture.write("mine.txt", "the user's\n");
    let user_commit = fixture.commit_all("user: during the run");
    fixture.git(&["checkout", "--quiet", "main"]);
    let outcome = repo
        .apply(&ApplyRequest {
            branch: "refs/heads/other".to_owned(),
            ..request
        })
        .await
        .unwrap();
    let ApplyOutcome::Applied {
        to,
        merged_on_top: true,
        ..
    } = outcome
    else {
        panic!("merged on top: {outcome:?}");
    };
    assert_eq!(
        (
            fixture.git(&["log", "-1", "--format=%P%n%s", &to.to_string()]),
            fixture.rev("other"),
        ),
        (
            format!(
                "{user_commit} {}\ngrove r1: merge grove/r1/squashed into other",
                squashed.tip
            ),
            to
        ),
        "the user's commit stays first parent; the squashed history is merged onto it"
    );
}

#[tokio::test]
async fn a_squashed_commit_is_dated_when_it_is_written_unless_the_environment_dates_it() {
    let fixture = project();
    let (_, base) = merged_run(&fixture, 1).await;
    // The user's environment dates their authors, not their commits.
    let mut options = fixture.options();
    options.env.retain(|(key, _)| key != "GIT_COMMITTER_DATE");
    let repo = Repo::open(&fixture.repo, options).await.unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };

    // Asked for at the lead's start, written at the run's end.
    repo.prepare_squash().await;
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let asked = now();
    repo.squash(base, &steps(&repo, base, "step"), &run_id().squashed_ref())
        .await
        .unwrap();
    let written = now();

    let dates = fixture.git(&["log", "-1", "--format=%at %ct", &run_id().squashed_ref()]);
    let (author, committer) = dates.split_once(' ').unwrap();
    assert_eq!(
        author, "1767225600",
        "GIT_AUTHOR_DATE dates the author, as with git"
    );
    let committer: u64 = committer.parse().unwrap();
    assert!(
        (asked..=written).contains(&committer),
        "the committer is dated when the commit is written ({asked}..={written}), not when \
         the identity was asked for: {committer}"
    );
}
