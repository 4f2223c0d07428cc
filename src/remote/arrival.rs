//! A tree a host sends back, checked as it arrives: before grove commits a checkpoint's
//! tree onto a subtask's branch here, every entry the host added or changed must be one a
//! checkpoint made here could hold.
//!
//! This file owns that no host puts git data, or a path that leaves its folder, into a
//! branch grove reviews and merges: an entry named as `.git` in any spelling grove knows
//! ([`is_git_dir_name`]), `.`, `..`, an empty name or one holding a `/` (a path, an
//! absolute one included), a submodule link, a symbolic link through `.git`, or a mode
//! git never writes. It must never accept a tree it could not read to its end.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use git2::{Oid, Repository, Tree};

use crate::tools::git_pointer::is_git_dir_name;

/// The longest symbolic link target a file system here holds (Linux's `PATH_MAX`).
const MAX_LINK_TARGET: usize = 4096;

/// An entry of a host's tree that grove refuses: its path in the tree, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub path: String,
    pub why: &'static str,
}

/// The first entry of `tree` grove refuses, or `None` when all may be committed. Entries
/// that `known` (a tree already accepted: the subtask's start, or its last checkpoint)
/// holds at the same path with the same mode and object were accepted before and are
/// not looked at again: a submodule of the base stays, and an unchanged folder costs
/// nothing. The walk keeps its own stack: a host's tree may be deeper than a thread's.
pub(crate) fn refused_entry(
    repo: &Repository,
    tree: Oid,
    known: Option<Oid>,
) -> Result<Option<Refused>, git2::Error> {
    let mut stack = vec![(String::new(), tree, known)];
    while let Some((prefix, tree, known)) = stack.pop() {
        let tree = repo.find_tree(tree)?;
        let known = known.map(|known| repo.find_tree(known)).transpose()?;
        for entry in &tree {
            let name = entry.name_bytes();
            let path = if prefix.is_empty() {
                String::from_utf8_lossy(name).into_owned()
            } else {
                format!("{prefix}/{}", String::from_utf8_lossy(name))
            };
            let before = known
                .as_ref()
                .and_then(|known| same_name(known, name))
                .filter(|(_, mode)| *mode == entry.filemode_raw());
            if before.is_some_and(|(id, _)| id == entry.id()) {
                continue;
            }
            if let Some(why) = refused_name(name) {
                return Ok(Some(Refused { path, why }));
            }
            let why = match entry.filemode_raw() {
                0o040000 => {
                    stack.push((path, entry.id(), before.map(|(id, _)| id)));
                    continue;
                }
                0o100644 | 0o100755 | 0o100664 => continue,
                0o120000 => match link_refused(repo, entry.id())? {
                    Some(why) => why,
                    None => continue,
                },
                0o160000 => "a submodule link (git data, which grove never commits)",
                _ => "an entry of a mode git never writes",
            };
            return Ok(Some(Refused { path, why }));
        }
    }
    Ok(None)
}

/// The object and mode of `tree`'s entry called `name`.
fn same_name(tree: &Tree<'_>, name: &[u8]) -> Option<(Oid, i32)> {
    tree.get_name_bytes(name)
        .map(|entry| (entry.id(), entry.filemode_raw()))
}

/// Why an entry called `name` cannot be in a tree, if it cannot.
fn refused_name(name: &[u8]) -> Option<&'static str> {
    match name {
        [] => Some("an empty name"),
        b"." | b".." => Some("a name that leaves its folder"),
        _ if name.contains(&b'/') => Some("a name holding `/` (a path, not a name)"),
        _ if is_git_dir_name(OsStr::from_bytes(name)) => {
            Some("a spelling of `.git` (git data, which grove never commits)")
        }
        _ => None,
    }
}

/// Why the symbolic link whose target is blob `target` is refused, if it is: a target
/// through `.git` (as a checkpoint here leaves out), or longer than a link here can be.
fn link_refused(repo: &Repository, target: Oid) -> Result<Option<&'static str>, git2::Error> {
    let blob = repo.find_blob(target)?;
    let target = blob.content();
    if target.len() > MAX_LINK_TARGET {
        return Ok(Some("a symbolic link longer than a file system holds"));
    }
    let through_git = Path::new(OsStr::from_bytes(target))
        .components()
        .any(|part| is_git_dir_name(part.as_os_str()));
    Ok(through_git.then_some("a symbolic link into `.git` (git data)"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A tree object of `entries` (mode, name, object) written as a host could write it:
    /// raw bytes, checked by nothing.
    fn raw_tree(repo: &Repository, entries: &[(&str, &[u8], Oid)]) -> Oid {
        let mut bytes = Vec::new();
        for (mode, name, id) in entries {
            bytes.extend_from_slice(mode.as_bytes());
            bytes.push(b' ');
            bytes.extend_from_slice(name);
            bytes.push(0);
            bytes.extend_from_slice(id.as_bytes());
        }
        repo.odb()
            .unwrap()
            .write(git2::ObjectType::Tree, &bytes)
            .unwrap()
    }

    #[test]
    fn every_spelling_of_git_data_and_every_escape_is_refused_naming_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(b"x\n").unwrap();
        let link_into_git = repo.blob(b"../.git/config").unwrap();
        let link_out = repo.blob(b"../../elsewhere").unwrap();
        let commit = Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap();
        let walked = |entry: (&str, &[u8], Oid)| {
            let inner = raw_tree(&repo, &[entry]);
            let root = raw_tree(&repo, &[("40000", b"src", inner)]);
            refused_entry(&repo, root, None)
        };
        let refused = |entry| walked(entry).unwrap();
        let cases: [(&str, &[u8], Oid, Option<&str>); 11] = [
            ("100644", b".git", blob, Some("src/.git")),
            ("40000", b".GIT", raw_tree(&repo, &[]), Some("src/.GIT")),
            ("100644", b".Git. ", blob, Some("src/.Git. ")),
            ("100644", b"git~1", blob, Some("src/git~1")),
            ("40000", b"..", raw_tree(&repo, &[]), Some("src/..")),
            ("100644", b".", blob, Some("src/.")),
            ("100644", b"/etc/passwd", blob, Some("src//etc/passwd")),
            ("160000", b"vendor", commit, Some("src/vendor")),
            ("120000", b"config", link_into_git, Some("src/config")),
            ("120000", b"out", link_out, None),
            ("100755", b".gitignore", blob, None),
        ];
        let found: Vec<Option<String>> = cases
            .iter()
            .map(|(mode, name, id, _)| refused((mode, name, *id)).map(|refused| refused.path))
            .collect();
        let expected: Vec<Option<String>> = cases
            .iter()
            .map(|(.., path)| path.map(str::to_owned))
            .collect();
        assert_eq!(
            found, expected,
            "git data in any spelling, names that leave their folder or are paths, \
             submodule links and links into `.git` are refused, at their path; a link \
             out of the tree is not (a local checkpoint keeps one too)"
        );
        assert_eq!(
            refused(("100600", b"x", blob)),
            Some(Refused {
                path: "src/x".into(),
                why: "an entry of a mode git never writes",
            })
        );
        assert!(
            walked(("100644", b"", blob)).is_err(),
            "a tree git cannot read (an empty name) is an error, never accepted"
        );
    }

    #[test]
    fn what_the_accepted_tree_already_holds_is_not_refused_again() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(b"x\n").unwrap();
        let submodule = Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap();
        let base = raw_tree(
            &repo,
            &[("100644", b"a.txt", blob), ("160000", b"vendor", submodule)],
        );
        let changed = raw_tree(
            &repo,
            &[
                ("100644", b"a.txt", repo.blob(b"y\n").unwrap()),
                ("160000", b"vendor", submodule),
            ],
        );
        assert_eq!(
            refused_entry(&repo, changed, Some(base)).unwrap(),
            None,
            "the base's own submodule link is kept as it was"
        );
        let moved = raw_tree(
            &repo,
            &[("100644", b"a.txt", blob), ("160000", b"vendor", blob)],
        );
        assert_eq!(
            refused_entry(&repo, moved, Some(base)).unwrap(),
            Some(Refused {
                path: "vendor".into(),
                why: "a submodule link (git data, which grove never commits)",
            }),
            "a submodule link the host changed is refused"
        );
    }
}
