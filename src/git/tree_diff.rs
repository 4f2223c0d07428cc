//! The files that differ between two trees, found by descending only into subtrees whose
//! ids differ.
//!
//! libgit2's tree-to-tree diff reads every subtree of both sides, changed or not: on the
//! 30,000-file bench repository 6 ms a call, and a run made several per subtask (its
//! checkpoint's index update, its merge, the apply). Here a run's usual change, a few
//! files, costs the trees on their paths. No rename detection; a path whose type changed
//! (a file become a directory, a symlink or a submodule) is one change with both sides,
//! where libgit2 without `INCLUDE_TYPECHANGE` reports a deletion and an addition.

use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;

/// The mask of a tree entry's mode that gives its kind, and the kind of a tree.
const KIND: i32 = 0o170000;
const TREE: i32 = 0o040000;

/// One entry of a tree, a file's side of a change: its id and its mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Side {
    pub id: git2::Oid,
    pub mode: i32,
}

/// A path that is not the same file in both trees; `None` on the side it is missing from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileChange {
    pub path: PathBuf,
    pub old: Option<Side>,
    pub new: Option<Side>,
}

impl FileChange {
    /// True when the path is a file of another kind on each side (e.g. a file become a
    /// symlink).
    pub fn changes_kind(&self) -> bool {
        matches!((self.old, self.new), (Some(old), Some(new)) if old.mode & KIND != new.mode & KIND)
    }
}

/// Every file (blob, symlink or submodule) that differs between `old` and `new`, in no
/// particular order.
pub(crate) fn changed_files(
    repo: &git2::Repository,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Vec<FileChange>, git2::Error> {
    let mut changes = Vec::new();
    walk(repo, Some(old), Some(new), &PathBuf::new(), &mut changes)?;
    Ok(changes)
}

/// The most paths [`narrow`] names to libgit2 (it matches a path list file by file); a
/// larger change is diffed over the whole trees.
const MAX_LISTED_PATHS: usize = 10_000;

/// Restricts a libgit2 diff of `old` against `new` (`None`: the empty tree) to the files
/// that differ, found here by descending only where ids differ. libgit2 reads every
/// subtree of both sides otherwise (59 ms of a one-file change on the 30,000-file bench
/// repository, its trees deltified in a fresh clone's pack). Renames stay found: a renamed
/// file is a deletion and an addition here, both listed.
pub(crate) fn narrow(
    repo: &git2::Repository,
    old: Option<&git2::Tree<'_>>,
    new: &git2::Tree<'_>,
    options: &mut git2::DiffOptions,
) -> Result<(), git2::Error> {
    let mut changes = Vec::new();
    walk(repo, old, Some(new), &PathBuf::new(), &mut changes)?;
    if !changes.is_empty() && changes.len() <= MAX_LISTED_PATHS {
        for change in changes {
            options.pathspec(change.path);
        }
        options.disable_pathspec_match(true);
    }
    Ok(())
}

fn walk(
    repo: &git2::Repository,
    old: Option<&git2::Tree<'_>>,
    new: Option<&git2::Tree<'_>>,
    prefix: &std::path::Path,
    changes: &mut Vec<FileChange>,
) -> Result<(), git2::Error> {
    let side = |entry: &git2::TreeEntry<'_>| Side {
        id: entry.id(),
        mode: entry.filemode(),
    };
    let mut visit = |name: &[u8],
                     before: Option<git2::TreeEntry<'_>>,
                     after: Option<git2::TreeEntry<'_>>|
     -> Result<(), git2::Error> {
        let (before, after) = (before.as_ref().map(side), after.as_ref().map(side));
        if before == after {
            return Ok(());
        }
        let path = prefix.join(std::ffi::OsStr::from_bytes(name));
        let tree = |side: Option<Side>| {
            side.filter(|side| side.mode & KIND == TREE)
                .map(|side| repo.find_tree(side.id))
                .transpose()
        };
        let (old_tree, new_tree) = (tree(before)?, tree(after)?);
        if old_tree.is_some() || new_tree.is_some() {
            walk(repo, old_tree.as_ref(), new_tree.as_ref(), &path, changes)?;
        }
        let file = |side: Option<Side>| side.filter(|side| side.mode & KIND != TREE);
        let (old_file, new_file) = (file(before), file(after));
        if old_file.is_some() || new_file.is_some() {
            changes.push(FileChange {
                path,
                old: old_file,
                new: new_file,
            });
        }
        Ok(())
    };
    if let Some(new) = new {
        for entry in new.iter() {
            let before = old.and_then(|old| old.get_name_bytes(entry.name_bytes()));
            visit(entry.name_bytes(), before, Some(entry.clone()))?;
        }
    }
    if let Some(old) = old {
        for entry in old.iter() {
            if new.is_none_or(|new| new.get_name_bytes(entry.name_bytes()).is_none()) {
                visit(entry.name_bytes(), Some(entry.clone()), None)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Files of a tree: path, content (`None` for a submodule entry) and mode.
    type Files = Vec<(&'static str, Option<&'static str>, i32)>;

    /// A tree of `files` (path, content, mode; content `None` for a submodule entry).
    fn tree(repo: &git2::Repository, files: &[(&str, Option<&str>, i32)]) -> git2::Oid {
        let empty = repo.treebuilder(None).unwrap().write().unwrap();
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, content, mode) in files {
            let id = match content {
                Some(text) => repo.blob(text.as_bytes()).unwrap(),
                None => git2::Oid::from_str("1111111111111111111111111111111111111111").unwrap(),
            };
            let mode = match mode {
                0o100755 => git2::FileMode::BlobExecutable,
                0o120000 => git2::FileMode::Link,
                0o160000 => git2::FileMode::Commit,
                _ => git2::FileMode::Blob,
            };
            update.upsert(*path, id, mode);
        }
        update
            .create_updated(repo, &repo.find_tree(empty).unwrap())
            .unwrap()
    }

    /// libgit2's tree diff, its type changes (a deletion and an addition) joined.
    fn by_libgit2(
        repo: &git2::Repository,
        old: &git2::Tree<'_>,
        new: &git2::Tree<'_>,
    ) -> Vec<FileChange> {
        let diff = repo.diff_tree_to_tree(Some(old), Some(new), None).unwrap();
        let mut changes: Vec<FileChange> = Vec::new();
        let side = |file: git2::DiffFile<'_>| {
            file.exists().then(|| Side {
                id: file.id(),
                mode: i32::from(file.mode()),
            })
        };
        for delta in diff.deltas() {
            let path = delta
                .new_file()
                .path()
                .or(delta.old_file().path())
                .unwrap()
                .to_path_buf();
            let (old, new) = (side(delta.old_file()), side(delta.new_file()));
            match changes.iter_mut().find(|change| change.path == path) {
                Some(change) => {
                    change.old = change.old.or(old);
                    change.new = change.new.or(new);
                }
                None => changes.push(FileChange { path, old, new }),
            }
        }
        changes
    }

    fn sorted(mut changes: Vec<FileChange>) -> Vec<FileChange> {
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        changes
    }

    #[test]
    fn the_files_that_differ_are_libgit2s_and_equal_subtrees_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let base: Files = vec![
            ("README", Some("hello\n"), 0o100644),
            ("src/lib.rs", Some("lib\n"), 0o100644),
            ("src/deep/a.rs", Some("a\n"), 0o100644),
            ("pkg/one/x.js", Some("x\n"), 0o100644),
            ("run.sh", Some("echo\n"), 0o100644),
            ("link", Some("README"), 0o120000),
        ];
        let changed = |edit: &dyn Fn(&mut Files)| {
            let mut files = base.clone();
            edit(&mut files);
            tree(&repo, &files)
        };
        let set = |files: &mut Files, file: (&'static str, Option<&'static str>, i32)| {
            files.retain(|(path, _, _)| *path != file.0);
            files.push(file);
        };
        let sides = [
            changed(&|_| {}),
            changed(&|files| set(files, ("src/deep/a.rs", Some("a2\n"), 0o100644))),
            changed(&|files| {
                set(files, ("new/dir/b.rs", Some("b\n"), 0o100644));
                set(files, ("new/c", Some("c\n"), 0o100755));
            }),
            changed(&|files| set(files, ("run.sh", Some("echo\n"), 0o100755))),
            changed(&|files| files.retain(|(path, _, _)| !path.starts_with("pkg/"))),
            changed(&|files| {
                files.retain(|(path, _, _)| *path != "README");
                set(files, ("README/inner", Some("i\n"), 0o100644));
            }),
            changed(&|files| set(files, ("run.sh", Some("README"), 0o120000))),
            changed(&|files| set(files, ("vendor/sub", None, 0o160000))),
        ];
        let old = repo.find_tree(tree(&repo, &base)).unwrap();
        for side in sides {
            let new = repo.find_tree(side).unwrap();
            for (from, to) in [(&old, &new), (&new, &old)] {
                assert_eq!(
                    sorted(changed_files(&repo, from, to).unwrap()),
                    sorted(by_libgit2(&repo, from, to)),
                    "the walk finds the files libgit2's diff finds, both ways"
                );
            }
        }

        // An equal subtree whose object is missing is never read.
        let pkg = old.get_path(std::path::Path::new("pkg")).unwrap().id();
        let loose = dir
            .path()
            .join(".git/objects")
            .join(&pkg.to_string()[..2])
            .join(&pkg.to_string()[2..]);
        std::fs::remove_file(loose).unwrap();
        // A handle of its own: the first one may hold the subtree in its object cache.
        let fresh = git2::Repository::open(dir.path()).unwrap();
        let (old, edited) = (
            fresh.find_tree(old.id()).unwrap(),
            fresh.find_tree(sides[1]).unwrap(),
        );
        assert_eq!(
            changed_files(&fresh, &old, &edited).unwrap().len(),
            1,
            "only the trees on a changed path are read"
        );
    }

    /// libgit2's diff of `old` against `new` with renames paired: status, old and new path.
    fn deltas(
        repo: &git2::Repository,
        old: Option<&git2::Tree<'_>>,
        new: &git2::Tree<'_>,
        narrowed: bool,
    ) -> Result<Vec<(git2::Delta, String, String)>, git2::Error> {
        let mut options = git2::DiffOptions::new();
        if narrowed {
            narrow(repo, old, new, &mut options)?;
        }
        let mut diff = repo.diff_tree_to_tree(old, Some(new), Some(&mut options))?;
        diff.find_similar(Some(git2::DiffFindOptions::new().renames(true)))?;
        let path = |file: git2::DiffFile<'_>| {
            file.path()
                .map(|path| path.display().to_string())
                .unwrap_or_default()
        };
        Ok(diff
            .deltas()
            .map(|delta| {
                (
                    delta.status(),
                    path(delta.old_file()),
                    path(delta.new_file()),
                )
            })
            .collect())
    }

    #[test]
    fn a_narrowed_diff_is_the_whole_diff_renames_paired_and_skips_the_equal_subtrees() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let base: Files = vec![
            ("README", Some("hello\n"), 0o100644),
            ("src/lib.rs", Some("one\ntwo\nthree\nfour\n"), 0o100644),
            ("pkg/one/x.js", Some("x\n"), 0o100644),
        ];
        let edited: Files = vec![
            ("README", Some("hello again\n"), 0o100644),
            ("lib/moved.rs", Some("one\ntwo\nthree\nfour\n"), 0o100644),
            ("pkg/one/x.js", Some("x\n"), 0o100644),
        ];
        let old = repo.find_tree(tree(&repo, &base)).unwrap();
        let new = repo.find_tree(tree(&repo, &edited)).unwrap();
        for from in [Some(&old), None] {
            assert_eq!(
                deltas(&repo, from, &new, true).unwrap(),
                deltas(&repo, from, &new, false).unwrap(),
                "the narrowed diff has the whole diff's deltas, a rename still paired"
            );
        }
        assert!(
            deltas(&repo, Some(&old), &new, true).unwrap().contains(&(
                git2::Delta::Renamed,
                "src/lib.rs".into(),
                "lib/moved.rs".into()
            )),
            "the rename is found"
        );

        let pkg = old.get_path(std::path::Path::new("pkg")).unwrap().id();
        let hex = pkg.to_string();
        std::fs::remove_file(
            dir.path()
                .join(".git/objects")
                .join(&hex[..2])
                .join(&hex[2..]),
        )
        .unwrap();
        let fresh = git2::Repository::open(dir.path()).unwrap();
        let (old, new) = (
            fresh.find_tree(old.id()).unwrap(),
            fresh.find_tree(new.id()).unwrap(),
        );
        assert!(
            deltas(&fresh, Some(&old), &new, false).is_err(),
            "libgit2 alone reads the equal subtree (this test's premise)"
        );
        assert_eq!(
            deltas(&fresh, Some(&old), &new, true).unwrap().len(),
            2,
            "narrowed, the equal subtree is never read"
        );
    }
}
