//! Preparing a subtask's worktree before its worker's first turn: the user's local-only
//! files copied in (`worktree.copy`), then the user's setup command (`worktree.setup`).
//!
//! This file owns both steps, the check at a run's start that every listed file can be
//! copied, and the check before a review that none of them reached the branch's history.
//! It must never let a copied file be committed — the git layer learns the paths before
//! the files exist in the worktree — and never follow a symlink out of the repository or
//! out of the worktree.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::git::{CommitId, GitError, Repo, Worktree};
use crate::run::orchestrator::Orchestrator;
use crate::settings::config::check_copy_path;
use crate::tools::{ExecOutcome, ExecRequest, OutputCap, SetupPolicy};

/// How much of a failed setup command's output the subtask's reason shows: its end,
/// where the error usually is.
const SETUP_OUTPUT_TAIL_CHARS: usize = 2_000;

/// How many of the files a setup command changed a note names.
const LISTED_SETUP_CHANGES: usize = 5;

/// Why a listed local-only file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LocalFileError {
    /// The entry or the file is unusable. Not retried: the user fixes the file or the
    /// `worktree.copy` list.
    #[error("worktree.copy: {path}: {problem}")]
    Unusable { path: String, problem: String },
    /// The repository has no work tree to copy from. Not retried.
    #[error("worktree.copy: {repo} is a bare repository; there is no work tree to copy files from")]
    Bare { repo: PathBuf },
    /// Git could not tell whether the file is tracked. Not retried.
    #[error("worktree.copy: {path}: {source}")]
    Git {
        path: String,
        #[source]
        source: GitError,
    },
}

/// Why a worktree could not be prepared.
pub(crate) enum PrepareFailure {
    /// The subtask fails for this reason; its worker never starts.
    Failed(String),
    /// The run was interrupted during the setup command.
    Interrupted,
}

/// Checks, at a run's start, that every `worktree.copy` entry names a regular file in
/// the user's work tree, inside the repository (symlinks included), that git does not
/// track at `base` nor in the index. Returns the entries normalised.
pub fn check_local_files(
    repo: &Repo,
    base: CommitId,
    paths: &[String],
) -> Result<Vec<String>, LocalFileError> {
    let mut checked = Vec::with_capacity(paths.len());
    for path in paths {
        let path = check_copy_path(path).map_err(|problem| LocalFileError::Unusable {
            path: path.clone(),
            problem: problem.to_string(),
        })?;
        let root = repo.work_tree().ok_or_else(|| LocalFileError::Bare {
            repo: repo.common_dir().to_path_buf(),
        })?;
        source_file(root, &path).map_err(|problem| LocalFileError::Unusable {
            path: path.clone(),
            problem,
        })?;
        let tracked = repo
            .is_tracked(base, &path)
            .map_err(|source| LocalFileError::Git {
                path: path.clone(),
                source,
            })?;
        if tracked {
            return Err(LocalFileError::Unusable {
                path,
                problem: "git tracks it, so every worktree has it already; `copy` is for \
                          files git does not track"
                    .into(),
            });
        }
        checked.push(path);
    }
    Ok(checked)
}

/// The file to copy for `path`: the real path of `<root>/<path>`, which must be a
/// regular file inside `root` (and not in its `.git`).
fn source_file(root: &Path, path: &str) -> Result<PathBuf, String> {
    let real = match std::fs::canonicalize(root.join(path)) {
        Ok(real) => real,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "there is no such file in {} (create it, or remove it from worktree.copy)",
                root.display()
            ));
        }
        Err(error) => return Err(format!("cannot resolve it: {error}")),
    };
    if !real.starts_with(root) || real.starts_with(root.join(".git")) {
        return Err(format!(
            "it leads to {}, outside the repository's work tree",
            real.display()
        ));
    }
    if !real.is_file() {
        return Err("it is not a regular file; list the files to copy one by one".into());
    }
    Ok(real)
}

/// Copies the user's `path` into the worktree at `worktree_root`, replacing whatever is
/// there (a symlink included, never followed).
fn copy_into(user_root: &Path, worktree_root: &Path, path: &str) -> Result<(), String> {
    let source = source_file(user_root, path)?;
    let relative = Path::new(path);
    let name = relative
        .file_name()
        .ok_or_else(|| format!("{path} names no file"))?;
    let real_parent = make_dirs_inside(worktree_root, relative.parent().unwrap_or(Path::new("")))?;
    let target = real_parent.join(name);
    let staged = tempfile::NamedTempFile::new_in(&real_parent)
        .map_err(|error| format!("cannot create a file in {}: {error}", real_parent.display()))?;
    std::fs::copy(&source, staged.path())
        .map_err(|error| format!("cannot copy {}: {error}", source.display()))?;
    // A rename replaces a symlink at the target instead of writing through it.
    staged
        .persist(&target)
        .map_err(|error| format!("cannot write {}: {}", target.display(), error.error))?;
    Ok(())
}

/// Creates the directories of `relative` under `root` one at a time, never through a
/// symlink that leads out of `root` (nothing is created outside), and returns the real
/// path of the last one.
fn make_dirs_inside(root: &Path, relative: &Path) -> Result<PathBuf, String> {
    let mut dir = root.to_path_buf();
    for part in relative.components() {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(meta) if meta.file_type().is_symlink() => {
                let real = std::fs::canonicalize(&dir)
                    .map_err(|error| format!("cannot resolve {}: {error}", dir.display()))?;
                if !real.starts_with(root) || !real.is_dir() {
                    return Err(format!(
                        "{} in the worktree leads to {}, outside the worktree",
                        dir.display(),
                        real.display()
                    ));
                }
                dir = real;
            }
            Ok(_) => return Err(format!("{} is not a directory", dir.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir)
                    .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
            }
            Err(error) => return Err(format!("cannot read {}: {error}", dir.display())),
        }
    }
    Ok(dir)
}

/// The last `max` characters of `text`, starting at a line when one starts near there.
fn output_tail(text: &str, max: usize) -> String {
    let text = text.trim_end();
    let tail = crate::text::last_chars(text, max);
    if tail.len() == text.len() {
        return text.to_owned();
    }
    let start = text.len() - tail.len();
    let tail = if text[..start].ends_with('\n') {
        tail
    } else {
        tail.find('\n').map_or(tail, |newline| &tail[newline + 1..])
    };
    format!("[… earlier output cut]\n{tail}")
}

impl Orchestrator {
    /// The run's `worktree.copy` entries, normalised as the git layer records them.
    fn local_paths(&self) -> Vec<String> {
        self.options
            .worktree_setup
            .copy
            .iter()
            .map(|path| check_copy_path(path).unwrap_or_else(|_| path.clone()))
            .collect()
    }

    /// Copies the local-only files into subtask `label`'s worktree and runs the setup
    /// command there, once the worktree is filled and before the worker's first turn.
    pub(crate) async fn prepare_worktree(
        &self,
        label: &str,
        worktree: &Worktree,
    ) -> Result<(), PrepareFailure> {
        let setup = &self.options.worktree_setup;
        let local = self.local_paths();
        if local.is_empty() && setup.setup.is_none() {
            return Ok(());
        }
        worktree.ready().await.map_err(|error| {
            PrepareFailure::Failed(format!("the worktree was not checked out: {error}"))
        })?;
        if !local.is_empty() {
            // Recorded first: no commit can include a file that is not yet recorded.
            self.repo
                .set_local_files(worktree, &local)
                .map_err(|error| {
                    PrepareFailure::Failed(format!(
                        "could not record the local-only files: {error}"
                    ))
                })?;
            for path in &local {
                copy_into(&self.user_root, worktree.path(), path).map_err(|problem| {
                    PrepareFailure::Failed(format!(
                        "could not copy {path} into the worktree (worktree.copy): {problem}"
                    ))
                })?;
            }
        }
        let Some(command) = &setup.setup else {
            return Ok(());
        };
        // It may take minutes (`npm ci`): say why the worker has not started yet.
        self.note(format!("{label}: running the setup command `{command}`"));
        let request = ExecRequest {
            command: command.clone(),
            cwd: worktree.path().to_path_buf(),
            timeout: Duration::from_secs(setup.setup_timeout_s),
            cancel: self.cancel.child_token(),
            output_cap: OutputCap {
                head: 4 * 1024,
                tail: 16 * 1024,
            },
        };
        let result = self
            .executor
            .for_setup(&SetupPolicy::default())
            .execute(request)
            .await
            .map_err(|error| {
                PrepareFailure::Failed(format!(
                    "the setup command `{command}` could not run: {error}"
                ))
            })?;
        let how = match result.outcome {
            ExecOutcome::Exited(0) => {
                self.note_setup_changes(label, worktree).await;
                return Ok(());
            }
            ExecOutcome::Cancelled => return Err(PrepareFailure::Interrupted),
            ExecOutcome::Exited(code) => format!("exited with status {code}"),
            ExecOutcome::Signalled(signal) => format!("was killed by signal {signal}"),
            ExecOutcome::TimedOut => format!(
                "did not finish within {} s (worktree.setup_timeout_s)",
                setup.setup_timeout_s
            ),
        };
        let output = output_tail(&result.output_text(), SETUP_OUTPUT_TAIL_CHARS);
        let output = if output.is_empty() {
            "(no output)".to_owned()
        } else {
            output
        };
        Err(PrepareFailure::Failed(format!(
            "the setup command `{command}` {how} in {label}'s worktree; the worker did not \
             start. Its output ends with:\n{output}"
        )))
    }

    /// Tells the user when the setup command left files that grove would commit with the
    /// worker's work (they would show up in the diff the reviewer judges).
    async fn note_setup_changes(&self, label: &str, worktree: &Worktree) {
        let paths = match self.repo.uncommitted_paths(worktree).await {
            Ok(paths) if paths.is_empty() => return,
            Ok(paths) => paths,
            Err(error) => {
                self.note(format!(
                    "{label}: could not list what the setup command changed: {error}"
                ));
                return;
            }
        };
        let mut listed = paths
            .iter()
            .take(LISTED_SETUP_CHANGES)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if paths.len() > LISTED_SETUP_CHANGES {
            listed.push_str(&format!(" and {} more", paths.len() - LISTED_SETUP_CHANGES));
        }
        self.note(format!(
            "{label}: the setup command changed files that will be committed with the \
             worker's work and reviewed as part of it: {listed}; have .gitignore ignore them \
             to keep them out"
        ));
    }

    /// Why the history `base..tip` of a subtask must not be reviewed or merged: a commit
    /// in it records a local-only file (something other than grove committed it, e.g. a
    /// `git commit` in the worker's shell). `None` when the history is clean.
    pub(crate) async fn local_files_in_history(&self, tip: CommitId) -> Option<String> {
        let local = self.local_paths();
        match self.repo.commits_touching(self.base, tip, &local).await {
            Ok(commits) if commits.is_empty() => None,
            Ok(commits) => Some(format!(
                "{} commit(s) on the branch record a local-only file ({}), first {}; the \
                 branch is archived, never reviewed or merged",
                commits.len(),
                local.join(", "),
                commits.last().map(ToString::to_string).unwrap_or_default()
            )),
            Err(error) => Some(format!(
                "could not check the branch for local-only files: {error}"
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn output_tail_keeps_the_end_from_a_line_start() {
        assert_eq!(output_tail("short\n", 100), "short");
        let long = (1..=50)
            .map(|n| format!("line {n}"))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            output_tail(&long, 20),
            "[… earlier output cut]\nline 49\nline 50",
            "a line cut in the middle is left out"
        );
        assert_eq!(
            output_tail(&long, 23),
            "[… earlier output cut]\nline 48\nline 49\nline 50",
            "a cut at a line start keeps that line"
        );
    }

    #[test]
    fn a_copy_never_writes_through_a_symlink_in_the_worktree() {
        let user = tempfile::tempdir().unwrap();
        let worktree = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        let worktree_root = std::fs::canonicalize(worktree.path()).unwrap();
        std::fs::write(user_root.join(".env"), "SECRET=1\n").unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        std::os::unix::fs::symlink(&victim, worktree_root.join(".env")).unwrap();

        copy_into(&user_root, &worktree_root, ".env").unwrap();

        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let copied = worktree_root.join(".env");
        assert!(
            !copied.symlink_metadata().unwrap().is_symlink(),
            "the link is replaced"
        );
        assert_eq!(std::fs::read_to_string(copied).unwrap(), "SECRET=1\n");
    }

    #[test]
    fn a_copy_never_creates_directories_through_a_symlink_out_of_the_worktree() {
        let user = tempfile::tempdir().unwrap();
        let worktree = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        let worktree_root = std::fs::canonicalize(worktree.path()).unwrap();
        std::fs::create_dir_all(user_root.join("config/deep")).unwrap();
        std::fs::write(user_root.join("config/deep/local.yml"), "k: v\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), worktree_root.join("config")).unwrap();

        let problem = copy_into(&user_root, &worktree_root, "config/deep/local.yml").unwrap_err();

        assert!(problem.contains("outside the worktree"), "{problem}");
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "nothing is created outside the worktree"
        );
    }

    #[test]
    fn a_source_symlink_out_of_the_repository_is_refused() {
        let user = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let user_root = std::fs::canonicalize(user.path()).unwrap();
        std::fs::write(outside.path().join("id_rsa"), "KEY").unwrap();
        std::os::unix::fs::symlink(outside.path().join("id_rsa"), user_root.join(".env")).unwrap();
        let problem = source_file(&user_root, ".env").unwrap_err();
        assert!(problem.contains("outside the repository"), "{problem}");
        std::fs::create_dir(user_root.join("dir")).unwrap();
        let problem = source_file(&user_root, "dir").unwrap_err();
        assert!(problem.contains("not a regular file"), "{problem}");
    }
}
