//! Conflicts handed to a resolver: a subtask's branch merged onto the run's result with
//! `git merge`-style conflict markers left in the files, and the check that none are left.
//!
//! This module owns the commit a resolver starts from (never a ref move: the caller
//! makes a branch of it) and the reading of conflict markers. It must never move the
//! result or any branch, and never write a work tree: the merge is computed by `git
//! merge-tree --write-tree` (merge-ort, the same merge `merge_onto` refused), whose tree
//! holds the markers.

use serde::Serialize;

use super::Repo;
use super::error::{AdvanceError, GitError};
use super::names::CommitId;

/// A line a conflict marker starts (`<<<<<<< ours`, `>>>>>>> theirs`); the `=======`
/// between them is left out, being a common underline in prose.
const MARKER_STARTS: [&str; 2] = ["<<<<<<< ", ">>>>>>> "];

/// One side of a conflicted merge: the name its markers carry and its commit.
#[derive(Debug, Clone, Copy)]
pub struct MergeSide<'a> {
    /// A branch name that resolves to `commit`, e.g. `grove/<run>/result`; the markers
    /// name it (`<<<<<<< grove/<run>/result`).
    pub label: &'a str,
    pub commit: CommitId,
}

/// The merge commit a resolver starts from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConflictedMerge {
    /// Parents: ours, then theirs; its tree holds the conflict markers.
    pub commit: CommitId,
    /// The conflicting paths (empty when the two sides now merge cleanly).
    pub paths: Vec<String>,
}

/// A conflict marker left in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftMarker {
    pub path: String,
    /// 1-based line number in the newer commit.
    pub line: u32,
}

impl Repo {
    /// Writes the merge commit of `theirs` onto `ours` (two parents, in that order) whose
    /// tree is merge-ort's, conflict markers in the conflicting files labelled with each
    /// side's name. Moves no ref.
    pub async fn conflicted_merge(
        &self,
        ours: MergeSide<'_>,
        theirs: MergeSide<'_>,
        message: &str,
    ) -> Result<ConflictedMerge, AdvanceError> {
        // merge-tree labels the markers with the revisions as given: each name must be
        // the very commit the caller means.
        for side in [ours, theirs] {
            let resolved = self.resolve(side.label)?;
            if resolved != side.commit {
                return Err(AdvanceError::RefContended {
                    reference: side.label.to_owned(),
                    actual: resolved.to_string(),
                });
            }
        }
        let (tree, paths) = self.merge_tree(ours.label, theirs.label).await?;
        let paths = paths.unwrap_or_default();
        let commit = self
            .commit_tree(&tree, &[ours.commit, theirs.commit], message)
            .await?;
        Ok(ConflictedMerge { commit, paths })
    }

    /// The conflict markers that `newer` adds over `older`: lines it adds that start
    /// like `<<<<<<< ` or `>>>>>>> `. Lines already in `older` are not counted (a file
    /// may quote markers on purpose), nor are binary files.
    pub fn added_conflict_markers(
        &self,
        older: CommitId,
        newer: CommitId,
    ) -> Result<Vec<LeftMarker>, GitError> {
        self.read("conflict markers", |repo| {
            let old_tree = repo.find_commit(older.oid())?.tree()?;
            let new_tree = repo.find_commit(newer.oid())?.tree()?;
            let mut options = git2::DiffOptions::new();
            options.context_lines(0);
            super::tree_diff::narrow(repo, Some(&old_tree), &new_tree, &mut options)?;
            let diff =
                repo.diff_tree_to_tree(Some(&old_tree), Some(&new_tree), Some(&mut options))?;
            let mut found = Vec::new();
            diff.foreach(
                &mut |_, _| true,
                None,
                None,
                Some(&mut |delta, _hunk, line| {
                    let added = line.origin() == '+';
                    let marker = MARKER_STARTS
                        .iter()
                        .any(|start| line.content().starts_with(start.as_bytes()));
                    if added && marker {
                        let path = delta
                            .new_file()
                            .path()
                            .map(|path| path.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        found.push(LeftMarker {
                            path,
                            line: line.new_lineno().unwrap_or(0),
                        });
                    }
                    true
                }),
            )?;
            Ok(found)
        })
    }

    /// The paths `commit` changed against its first parent (all of them for a root).
    pub fn paths_changed_by(&self, commit: CommitId) -> Result<Vec<String>, GitError> {
        self.read("changed paths", |repo| {
            let commit = repo.find_commit(commit.oid())?;
            let parent = match commit.parent(0) {
                Ok(parent) => Some(parent.tree()?),
                Err(_) => None,
            };
            let tree = commit.tree()?;
            let mut options = git2::DiffOptions::new();
            super::tree_diff::narrow(repo, parent.as_ref(), &tree, &mut options)?;
            let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), Some(&mut options))?;
            let mut paths = Vec::new();
            for delta in diff.deltas() {
                for file in [delta.old_file(), delta.new_file()] {
                    if let Some(path) = file.path() {
                        let path = path.to_string_lossy().into_owned();
                        if !paths.contains(&path) {
                            paths.push(path);
                        }
                    }
                }
            }
            Ok(paths)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::git::GitOptions;

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// A repository where `left` and `right` changed the same line of `a.txt` from `base`.
    async fn diverged() -> (tempfile::TempDir, Repo, CommitId, CommitId) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(root.join("b.txt"), "keep\n").unwrap();
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "base"]);
        git(root, &["checkout", "-qb", "right"]);
        std::fs::write(root.join("a.txt"), "one\nTWO right\nthree\n").unwrap();
        git(root, &["commit", "-qam", "right"]);
        git(root, &["checkout", "-qb", "left", "main"]);
        std::fs::write(root.join("a.txt"), "one\nTWO left\nthree\n").unwrap();
        git(root, &["commit", "-qam", "left"]);
        let options = GitOptions {
            env: vec![
                ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
                ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
            ],
            ..GitOptions::default()
        };
        let repo = Repo::open(root, options).await.unwrap();
        let left = repo.resolve("left").unwrap();
        let right = repo.resolve("right").unwrap();
        (dir, repo, left, right)
    }

    #[tokio::test]
    async fn a_conflicted_merge_holds_markers_labelled_with_both_sides_and_both_parents() {
        let (dir, repo, left, right) = diverged().await;

        let merged = repo
            .conflicted_merge(
                MergeSide {
                    label: "left",
                    commit: left,
                },
                MergeSide {
                    label: "right",
                    commit: right,
                },
                "conflicted\n",
            )
            .await
            .unwrap();

        assert_eq!(merged.paths, vec!["a.txt".to_owned()]);
        let root = dir.path();
        let hex = merged.commit.to_string();
        assert_eq!(
            git(root, &["show", &format!("{hex}:a.txt")]),
            "one\n<<<<<<< left\nTWO left\n=======\nTWO right\n>>>>>>> right\nthree",
            "git merge-style markers naming both sides"
        );
        assert_eq!(
            git(root, &["log", "-1", "--format=%P", &hex]),
            format!("{left} {right}"),
            "ours, then theirs"
        );
        assert_eq!(
            git(root, &["rev-parse", "left"]),
            left.to_string(),
            "no ref moved"
        );
        assert_eq!(
            repo.added_conflict_markers(left, merged.commit).unwrap(),
            vec![
                LeftMarker {
                    path: "a.txt".into(),
                    line: 2
                },
                LeftMarker {
                    path: "a.txt".into(),
                    line: 6
                }
            ]
        );
    }

    #[tokio::test]
    async fn a_label_that_names_another_commit_is_refused() {
        let (_dir, repo, left, right) = diverged().await;

        let error = repo
            .conflicted_merge(
                MergeSide {
                    label: "right",
                    commit: left,
                },
                MergeSide {
                    label: "right",
                    commit: right,
                },
                "m",
            )
            .await
            .unwrap_err();

        assert!(
            matches!(error, AdvanceError::RefContended { .. }),
            "markers never name the wrong side: {error:?}"
        );
    }

    #[tokio::test]
    async fn markers_already_in_the_older_side_are_not_counted_and_changed_paths_are_listed() {
        let (dir, repo, left, _) = diverged().await;
        let root = dir.path();
        std::fs::write(root.join("b.txt"), "keep\n<<<<<<< quoted\n").unwrap();
        git(root, &["commit", "-qam", "quote a marker"]);
        let quoted = repo.resolve("HEAD").unwrap();
        std::fs::write(root.join("b.txt"), "keep\n<<<<<<< quoted\nmore\n").unwrap();
        git(root, &["commit", "-qam", "more"]);
        let more = repo.resolve("HEAD").unwrap();

        assert_eq!(
            repo.added_conflict_markers(quoted, more).unwrap(),
            vec![],
            "a marker the older side had is not the resolver's"
        );
        assert_eq!(
            repo.added_conflict_markers(left, quoted).unwrap(),
            vec![LeftMarker {
                path: "b.txt".into(),
                line: 2
            }]
        );
        assert_eq!(repo.paths_changed_by(quoted).unwrap(), vec!["b.txt"]);
    }
}
