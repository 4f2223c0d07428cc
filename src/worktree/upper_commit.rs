//! Checkpoints of an overlay tree: the commit of what a worker's upper directory holds,
//! laid onto the tree of the commit its lower directory shows, in process.
//!
//! This module owns the reading of an overlay upper directory as a change to a git tree:
//! new and changed files (with their executable bit), symlinks, whiteouts (a character
//! device 0:0) as deletions and opaque directories (`user.overlay.opaque="y"`) as "replace
//! the whole subtree". It keeps today's exclusions of [`Repo::checkpoint`]: files git
//! ignores (`.gitignore` of the merged view, `info/exclude`, `core.excludesFile`), `.git`
//! data and the worktree's `.git` pointer, links into git data, nested repositories, the
//! worktree's local-only files. It never refreshes an index and never reads the lower
//! directory's 30,000 files: only the upper directory's entries and the base tree's
//! objects along their paths.
//!
//! It refuses (rather than guesses) an upper directory written with overlay features
//! that move data elsewhere: redirected directories and metadata-only copies.
//!
//! Blobs get libgit2's filters for their path, as `git add` applies them: `text`/`eol`
//! end-of-line conversion (and `ident`) from `.gitattributes` and `core.autocrlf`, never
//! a repository-local filter driver (grove's git neutralises those too). The attributes
//! are read from the user's work tree and index, not from the tree: a worker that edits
//! a `.gitattributes` has it applied from the next run on.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::checkpoint::checkpoint_message;
use super::error::CheckpointError;
use super::handle::UpperSource;
use super::local_files;
use crate::git::CommitId;
use crate::git::Repo;
use crate::git::subtask_ref;
use crate::git::tree_diff;
use crate::git::{AdvanceError, GitError};
use crate::tools::git_pointer::{is_git_dir_name, is_git_repository};

/// Git's tree entry modes.
const MODE_FILE: i32 = 0o100_644;
const MODE_EXECUTABLE: i32 = 0o100_755;
const MODE_LINK: i32 = 0o120_000;
const MODE_TREE: i32 = 0o040_000;

/// Attributes that select a filter on `git add` (end-of-line conversion, `ident`).
const CONVERTING_ATTRIBUTES: [&str; 4] = ["text", "eol", "crlf", "ident"];

/// The overlay xattr that marks a directory whose lower contents are hidden.
const OPAQUE_XATTR: &str = "user.overlay.opaque";
/// Xattrs of overlay features this reader does not follow (see the module doc).
const UNSUPPORTED_XATTRS: [&str; 2] = ["user.overlay.redirect", "user.overlay.metacopy"];

/// What to lay onto which tree.
#[derive(Debug, Clone)]
pub(super) struct UpperInput<'a> {
    /// The worker's upper directory.
    pub upper: &'a Path,
    /// The lower directory (the base tree on disk), for resolving symlinks only.
    pub lower: Option<&'a Path>,
    /// The tree the lower directory shows (the base commit's).
    pub base_tree: git2::Oid,
    /// Local-only files (`/`-separated, from the root), never committed.
    pub local: &'a [String],
    /// Exclude files of lower precedence than any `.gitignore`, lowest first
    /// (`core.excludesFile`, then `info/exclude`); missing ones are skipped.
    pub exclude_files: &'a [PathBuf],
}

/// The tree an upper directory gives, and what it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UpperTree {
    pub tree: git2::Oid,
    /// Paths that are, lead into or lie in git data (left out, as today's checkpoint).
    pub left_out: Vec<String>,
    /// Paths git refuses to record (`.GIT`, `git~1` components): they stay only in the
    /// upper directory.
    pub refused: Vec<String>,
}

/// Builds the tree of `input.base_tree` with `input.upper`'s changes laid on it, writing
/// the new blobs and trees to `repo`.
pub(super) fn upper_tree(
    repo: &git2::Repository,
    input: &UpperInput<'_>,
) -> Result<UpperTree, CheckpointError> {
    let mut outer = Vec::new();
    for file in input.exclude_files {
        if file.is_file() {
            let mut builder = GitignoreBuilder::new("/");
            if builder.add(file).is_none()
                && let Ok(built) = builder.build()
            {
                outer.push(built);
            }
        }
    }
    let autocrlf = repo
        .config()
        .and_then(|config| config.get_string("core.autocrlf"))
        .is_ok_and(|value| !value.eq_ignore_ascii_case("false"));
    let mut walk = Walk {
        repo,
        input,
        autocrlf,
        outer,
        ignores: Vec::new(),
        left_out: Vec::new(),
        refused: Vec::new(),
    };
    let base = repo
        .find_tree(input.base_tree)
        .map_err(write_error("the base tree"))?;
    let tree = match walk.dir(input.upper, Path::new(""), Some(&base), false)? {
        Some(tree) => tree,
        None => repo
            .treebuilder(None)
            .and_then(|empty| empty.write())
            .map_err(write_error("an empty tree"))?,
    };
    Ok(UpperTree {
        tree,
        left_out: walk.left_out,
        refused: walk.refused,
    })
}

impl Repo {
    /// Commits what `tree`'s upper directory holds — laid onto the base commit's tree,
    /// which its lower directory shows — on its branch, with the message `grove
    /// <run>/<n>: <label>`; `None` when the result equals the branch tip (no empty
    /// commits). In process, reading only the upper directory: no index is refreshed.
    /// The tree's own index is then brought to the new commit for the paths it changed,
    /// so the worker's `git status` shows only what is not yet checkpointed.
    ///
    /// Paths git refuses to record are left in the upper directory and reported as
    /// [`CheckpointError::PathsRefused`] after everything else is committed, as
    /// [`Repo::checkpoint`] does.
    pub async fn checkpoint_upper(
        &self,
        tree: &UpperSource,
        label: &str,
    ) -> Result<Option<CommitId>, CheckpointError> {
        let exclude_files = self.exclude_files().await?;
        let message = checkpoint_message(&tree.run, tree.subtask, label);
        let (repo, source, label) = (self.clone(), tree.clone(), label.to_owned());
        let made = Self::blocking("checkpoint", PathBuf::from(label), move || {
            repo.checkpoint_upper_blocking(&source, &exclude_files, &message)
        })
        .await?;
        if let Some(changes) = &made.index_changes {
            self.follow_in_index(tree, changes).await?;
        }
        if made.refused.is_empty() {
            return Ok(made.commit);
        }
        Err(CheckpointError::PathsRefused {
            worktree: tree.upper.clone(),
            paths: made.refused,
        })
    }

    /// The paths of `tree`'s upper directory that a checkpoint leaves out as git data
    /// (see [`Repo::git_dir_paths`]); tell the reviewer about them.
    pub async fn upper_git_dir_paths(
        &self,
        tree: &UpperSource,
    ) -> Result<Vec<String>, CheckpointError> {
        let exclude_files = self.exclude_files().await?;
        let local = local_files::recorded(&tree.admin_dir)?;
        let upper = tree.upper.clone();
        let lower = tree.lower.clone();
        let input = UpperInput {
            upper: &upper,
            lower: Some(&lower),
            base_tree: self.tree_of(tree.base)?,
            local: &local,
            exclude_files: &exclude_files,
        };
        let built = {
            let repo = self.libgit();
            upper_tree(&repo, &input)?
        };
        Ok(built.left_out)
    }

    fn checkpoint_upper_blocking(
        &self,
        tree: &UpperSource,
        exclude_files: &[PathBuf],
        message: &str,
    ) -> Result<UpperCheckpoint, CheckpointError> {
        let local = local_files::recorded(&tree.admin_dir)?;
        let upper = tree.upper.clone();
        let lower = tree.lower.clone();
        let branch = subtask_ref(&tree.run, tree.subtask);
        let input = UpperInput {
            upper: &upper,
            lower: Some(&lower),
            base_tree: self.tree_of(tree.base)?,
            local: &local,
            exclude_files,
        };
        let (built, tip) = {
            let repo = self.libgit();
            let built = upper_tree(&repo, &input)?;
            let tip = repo
                .find_reference(&branch)
                .and_then(|r| r.peel_to_commit())
                .map_err(|source| GitError::Read {
                    what: branch.clone(),
                    source,
                })?;
            (built, (CommitId::from_oid(tip.id()), tip.tree_id()))
        };
        let (commit, index_changes) = if built.tree == tip.1 {
            (None, None)
        } else {
            let commit = self
                .commit_onto(&branch, built.tree, tip.0, &[], message)?
                .ok_or_else(|| AdvanceError::RefContended {
                    reference: branch.clone(),
                    actual: self
                        .ref_target(&branch)
                        .ok()
                        .flatten()
                        .map_or_else(|| "nothing".to_owned(), |c| c.to_string()),
                })?;
            let changes = self.index_changes(tree, tip.1, built.tree)?;
            (Some(commit), Some(changes))
        };
        Ok(UpperCheckpoint {
            commit,
            index_changes,
            refused: built.refused,
        })
    }

    /// The lines of `git update-index -z --index-info` that bring the entries of
    /// `tree`'s index that differ between `from` and `to` to `to`: the new mode and blob,
    /// or mode 0 for a path `to` removes.
    fn index_changes(
        &self,
        tree: &UpperSource,
        from: git2::Oid,
        to: git2::Oid,
    ) -> Result<Vec<u8>, GitError> {
        let index_path = tree.admin_dir.join("index");
        let write_error = |source| GitError::write(index_path.display().to_string(), source);
        let repo = self.libgit();
        let (from, to) = (
            repo.find_tree(from).map_err(write_error)?,
            repo.find_tree(to).map_err(write_error)?,
        );
        let changes = tree_diff::changed_files(&repo, &from, &to).map_err(write_error)?;
        let mut lines = Vec::new();
        for change in changes {
            let (mode, id) = change
                .new
                .map_or((0, git2::Oid::ZERO_SHA1), |new| (new.mode, new.id));
            lines.extend_from_slice(format!("{mode:o} {id}\t").as_bytes());
            lines.extend_from_slice(change.path.as_os_str().as_bytes());
            lines.push(0);
        }
        Ok(lines)
    }

    /// Applies `changes` (see [`Repo::index_changes`]) to `tree`'s index with git itself,
    /// leaving every other entry's stat data as it is; the changed entries get none, so
    /// git re-reads just those files once.
    ///
    /// By git, not libgit2: a tree's index is a split index over its base's (see
    /// [`super::BaseTree::copy_index_to`]), which libgit2 cannot read, and git writes
    /// back only the tree's own part (kilobytes), never the 30,000 entries of the base.
    async fn follow_in_index(&self, tree: &UpperSource, changes: &[u8]) -> Result<(), GitError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.runner()
            .call(&tree.admin_dir, &tree.admin_dir)
            .args(["update-index", "-z", "--index-info"])
            .stdin(changes.to_vec())
            .run()
            .await
            .map(drop)
    }
}

/// What a checkpoint of an upper directory did.
#[derive(Debug)]
struct UpperCheckpoint {
    /// The commit made; `None` when the tree equals the branch tip.
    commit: Option<CommitId>,
    /// The tree's index's lines to change, when a commit was made.
    index_changes: Option<Vec<u8>>,
    /// Paths git refuses to record, left in the upper directory.
    refused: Vec<String>,
}

/// One walk over an upper directory.
struct Walk<'r> {
    repo: &'r git2::Repository,
    input: &'r UpperInput<'r>,
    /// `core.autocrlf` is set (`true` or `input`): every text file may be converted.
    autocrlf: bool,
    /// `core.excludesFile` and `info/exclude`, lowest precedence first.
    outer: Vec<Gitignore>,
    /// The `.gitignore` of each directory from the root to the current one.
    ignores: Vec<Gitignore>,
    left_out: Vec<String>,
    refused: Vec<String>,
}

impl Walk<'_> {
    /// Writes the file at `path` as the blob `git add` makes of it at `rel`: its bytes,
    /// or through the filters its attributes or `core.autocrlf` select.
    fn blob(&self, path: &Path, rel: &Path) -> Result<git2::Oid, git2::Error> {
        let filtered = self.autocrlf
            || CONVERTING_ATTRIBUTES.iter().any(|name| {
                self.repo
                    .get_attr(rel, name, git2::AttrCheckFlags::FILE_THEN_INDEX)
                    .is_ok_and(|value| value.is_some())
            });
        if !filtered {
            return self.repo.blob_path(path);
        }
        let io = |error: std::io::Error| git2::Error::from_str(&error.to_string());
        let written = std::fs::File::open(path).map_err(io).and_then(|mut file| {
            let mut writer = self.repo.blob_writer(Some(rel))?;
            std::io::copy(&mut file, &mut writer).map_err(io)?;
            writer.commit()
        });
        // libgit2's stream drops the errno (a full disk reads "no error"): the plain
        // write says what failed.
        written.or_else(|error| self.repo.blob_path(path).and(Err(error)))
    }

    /// The tree of the directory `rel` (upper copy at `upper_dir`, lower tree `base`, or
    /// `None` when it hides the lower one or is new); `None` when it ends up empty.
    /// `ignored`: `rel` itself is ignored, so nothing untracked under it is recorded.
    fn dir(
        &mut self,
        upper_dir: &Path,
        rel: &Path,
        base: Option<&git2::Tree<'_>>,
        ignored: bool,
    ) -> Result<Option<git2::Oid>, CheckpointError> {
        let what = || format!("the tree of {}", display(rel));
        let mut builder = self
            .repo
            .treebuilder(base)
            .map_err(|source| GitError::write(what(), source))?;
        let mut names: Vec<_> = std::fs::read_dir(upper_dir)
            .map_err(GitError::io("list", upper_dir))?
            .map(|entry| entry.map(|entry| entry.file_name()))
            .collect::<Result<_, _>>()
            .map_err(GitError::io("list", upper_dir))?;
        names.sort();
        self.ignores
            .push(self.dir_gitignore(upper_dir, rel, base, &names)?);
        for name in &names {
            self.entry(&mut builder, upper_dir, rel, name, ignored)?;
        }
        self.ignores.pop();
        if builder.is_empty() {
            return Ok(None);
        }
        builder
            .write()
            .map(Some)
            .map_err(|source| GitError::write(what(), source).into())
    }

    /// Lays one upper entry `name` of directory `rel` onto `builder`.
    fn entry(
        &mut self,
        builder: &mut git2::TreeBuilder<'_>,
        upper_dir: &Path,
        rel: &Path,
        name: &OsStr,
        ignored: bool,
    ) -> Result<(), CheckpointError> {
        let path = upper_dir.join(name);
        let child = rel.join(name);
        if name == ".git" {
            // The worktree's own `.git` pointer at the root; git data anywhere else.
            if !rel.as_os_str().is_empty() {
                self.left_out.push(display(&child));
            }
            return Ok(());
        }
        if is_git_dir_name(name) {
            self.refused.push(display(&child));
            return Ok(());
        }
        if self.input.local.iter().any(|l| Path::new(l) == child) {
            return Ok(());
        }
        let meta = std::fs::symlink_metadata(&path).map_err(GitError::io("read", &path))?;
        let kind = meta.file_type();
        let tracked = builder.get(name.as_bytes()).ok().flatten().map(|e| {
            (
                e.filemode(),
                e.id(),
                e.kind() == Some(git2::ObjectType::Tree),
            )
        });
        if kind.is_char_device() && meta.rdev() == 0 {
            remove(builder, name);
            return Ok(());
        }
        if kind.is_dir() {
            return self.subdir(builder, &path, &child, name, tracked, ignored);
        }
        if !kind.is_file() && !kind.is_symlink() {
            // Sockets, fifos, devices: git records none of them.
            return Ok(());
        }
        let tracked_blob = tracked.is_some_and(|(mode, _, is_tree)| !is_tree && mode != 0o160_000);
        if !tracked_blob && (ignored || self.is_ignored(&child, false)) {
            if tracked.is_some() {
                // A tracked directory replaced by an ignored file is gone from git's view.
                remove(builder, name);
            }
            return Ok(());
        }
        let (oid, mode) = if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(GitError::io("read the link", &path))?;
            if self.links_into_git_data(rel, &target) {
                self.left_out.push(display(&child));
                remove(builder, name);
                return Ok(());
            }
            let oid = self
                .repo
                .blob(target.as_os_str().as_bytes())
                .map_err(write_error(&display(&child)))?;
            (oid, MODE_LINK)
        } else {
            let oid = self
                .blob(&path, &child)
                .map_err(write_error(&display(&child)))?;
            let executable = meta.permissions().mode() & 0o100 != 0;
            (
                oid,
                if executable {
                    MODE_EXECUTABLE
                } else {
                    MODE_FILE
                },
            )
        };
        builder
            .insert(name.as_bytes(), oid, mode)
            .map_err(write_error(&display(&child)))?;
        Ok(())
    }

    /// Lays the upper directory `path` (entry `name`, at `child`) onto `builder`.
    fn subdir(
        &mut self,
        builder: &mut git2::TreeBuilder<'_>,
        path: &Path,
        child: &Path,
        name: &OsStr,
        tracked: Option<(i32, git2::Oid, bool)>,
        ignored: bool,
    ) -> Result<(), CheckpointError> {
        for xattr in UNSUPPORTED_XATTRS {
            if read_xattr(path, xattr).is_some() {
                return Err(CheckpointError::UpperUnsupported {
                    path: path.to_path_buf(),
                    xattr,
                });
            }
        }
        if tracked.is_some_and(|(mode, _, _)| mode == 0o160_000) {
            // A submodule's directory: its files belong to the submodule.
            self.left_out.push(display(child));
            return Ok(());
        }
        if std::fs::symlink_metadata(path.join(".git")).is_ok() || is_git_repository(path) {
            // A nested repository (or a bare one a model made) is git data.
            self.left_out.push(display(child));
            return Ok(());
        }
        let opaque = read_xattr(path, OPAQUE_XATTR).as_deref() == Some(b"y");
        let base = match tracked {
            Some((_, oid, true)) if !opaque => Some(
                self.repo
                    .find_tree(oid)
                    .map_err(write_error(&display(child)))?,
            ),
            _ => None,
        };
        let ignored = ignored || self.is_ignored(child, true);
        let tree = if ignored && base.is_none() {
            None
        } else {
            self.dir(path, child, base.as_ref(), ignored)?
        };
        match tree {
            Some(oid) => {
                builder
                    .insert(name.as_bytes(), oid, MODE_TREE)
                    .map_err(write_error(&display(child)))?;
            }
            None => remove(builder, name),
        }
        Ok(())
    }

    /// The `.gitignore` of directory `rel` as the merged view shows it: the upper copy
    /// if there is one (none if it is a whiteout), else the lower tree's.
    fn dir_gitignore(
        &self,
        upper_dir: &Path,
        rel: &Path,
        base: Option<&git2::Tree<'_>>,
        names: &[std::ffi::OsString],
    ) -> Result<Gitignore, GitError> {
        let text = if names.iter().any(|n| n == ".gitignore") {
            let path = upper_dir.join(".gitignore");
            let meta = std::fs::symlink_metadata(&path).map_err(GitError::io("read", &path))?;
            if meta.is_file() {
                std::fs::read(&path).map_err(GitError::io("read", &path))?
            } else {
                Vec::new()
            }
        } else {
            base.and_then(|tree| tree.get_name(".gitignore"))
                .filter(|entry| entry.kind() == Some(git2::ObjectType::Blob))
                .and_then(|entry| self.repo.find_blob(entry.id()).ok())
                .map(|blob| blob.content().to_vec())
                .unwrap_or_default()
        };
        let mut builder = GitignoreBuilder::new(Path::new("/").join(rel));
        for line in String::from_utf8_lossy(&text).lines() {
            // A malformed pattern matches nothing, as in git.
            let _ = builder.add_line(None, line);
        }
        Ok(builder.build().unwrap_or_else(|_| Gitignore::empty()))
    }

    /// Git's verdict on `rel`: the deepest `.gitignore` that matches decides, then
    /// `info/exclude`, then `core.excludesFile`.
    fn is_ignored(&self, rel: &Path, is_dir: bool) -> bool {
        let absolute = Path::new("/").join(rel);
        for matcher in self.ignores.iter().rev().chain(self.outer.iter().rev()) {
            match matcher.matched(&absolute, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }

    /// True when a symlink in directory `rel` with `target` is, or goes through, git
    /// data: a `.git` component, or a target that is a git repository in the upper or
    /// lower directory (a relative target) or on the host (an absolute one).
    fn links_into_git_data(&self, rel: &Path, target: &Path) -> bool {
        if target.components().any(|c| is_git_dir_name(c.as_os_str())) {
            return true;
        }
        let is_git = |path: PathBuf| {
            path.canonicalize()
                .is_ok_and(|real| is_git_repository(&real) || real.ends_with(".git"))
        };
        if target.is_absolute() {
            return is_git(target.to_path_buf());
        }
        [Some(self.input.upper), self.input.lower]
            .into_iter()
            .flatten()
            .any(|root| is_git(root.join(rel).join(target)))
    }
}

/// Removes `name` from `builder`; an entry that is not there is already removed.
fn remove(builder: &mut git2::TreeBuilder<'_>, name: &OsStr) {
    let _ = builder.remove(name.as_bytes());
}

/// The value of xattr `name` on `path` (never following a symlink); `None` if unset.
#[cfg(target_os = "linux")]
fn read_xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buffer = [0_u8; 256];
    let length = rustix::fs::lgetxattr(path, name, &mut buffer[..]).ok()?;
    buffer.get(..length).map(<[u8]>::to_vec)
}

/// Overlay upper directories exist only on Linux.
#[cfg(not(target_os = "linux"))]
fn read_xattr(_path: &Path, _name: &str) -> Option<Vec<u8>> {
    None
}

fn display(rel: &Path) -> String {
    rel.to_string_lossy().into_owned()
}

fn write_error(what: &str) -> impl FnOnce(git2::Error) -> GitError {
    let what = what.to_owned();
    move |source| GitError::write(what, source)
}
