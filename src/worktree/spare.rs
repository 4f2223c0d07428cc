//! Spare registrations: the admin dir of a removed worktree, emptied and kept, and taken
//! by the next registration in place of a new one.
//!
//! On an ext4 without a journal (this project's machines) the allocator finds each new
//! inode by stepping over every inode of its block group freed in the last minutes, so
//! each run paid for the removals before it in every file it created: perf put 32 % of a
//! 32-subtask run's CPU time in `recently_deleted` and the lookups under it. A
//! registration made anew creates six inodes (its directory, `refs/`, `logs/`,
//! `commondir`, `gitdir`, `HEAD`) and a seventh as its lock, and frees them all again
//! when its worktree goes; a spare is rewritten in place.
//!
//! This file owns `<common>/grove/spares/`. An entry there holds exactly those five,
//! `refs/` and `logs/` empty, and nothing else: it gets there only emptied (from the
//! trash, once what its worktree wrote is gone) and is claimed by a rename into the trash
//! (`spare-<pid>-<n>`, which one process wins), so two registrations never share one and
//! a claimer that dies leaves it to the trash's sweep. An entry of any other shape is
//! discarded, never used. At most [`MAX_SPARES`] are kept.

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use super::trash::{Moved, delete_in_background, move_into, next_number};

/// Most spares kept: a run's `--jobs` slots, with room for a second run's.
const MAX_SPARES: usize = 64;

/// The files of a registration that a spare keeps (rewritten when it is taken).
const KEPT_FILES: [&str; 3] = ["commondir", "gitdir", "HEAD"];

/// The directories of a registration that a spare keeps, emptied.
const KEPT_DIRS: [&str; 2] = ["refs", "logs"];

/// `<common>/grove/spares/`.
fn spares_dir(common: &Path) -> PathBuf {
    common.join("grove").join("spares")
}

/// Empties `admin`, a removed registration already out of `worktrees/`, down to a spare's
/// shape and moves it among the spares; deletes it instead when there are enough or
/// anything fails. Runs on a background thread (it only unlinks and renames).
pub(super) fn recycle(admin: &Path, common: &Path) {
    let spares = spares_dir(common);
    let kept = std::fs::read_dir(&spares).map_or(0, Iterator::count);
    let recycled = kept < MAX_SPARES
        && empty_to_skeleton(admin).is_ok()
        && std::fs::create_dir_all(&spares).is_ok()
        && admin
            .file_name()
            .is_some_and(|name| std::fs::rename(admin, spares.join(name)).is_ok());
    if !recycled {
        let _ = std::fs::remove_dir_all(admin);
    }
}

/// Removes from `dir` everything a spare does not keep: entries of other names or kinds
/// (a symlink is removed, never followed), and whatever `refs/` and `logs/` hold.
fn empty_to_skeleton(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        match kept(&entry)? {
            Some(Kept::Dir) => {
                for inner in std::fs::read_dir(entry.path())? {
                    remove_entry(&inner?)?;
                }
            }
            Some(Kept::File) => {}
            None => remove_entry(&entry)?,
        }
    }
    Ok(())
}

/// What a spare keeps of an entry of a registration.
enum Kept {
    File,
    Dir,
}

/// Whether a spare keeps `entry` (by its name and kind, a symlink never), and as what.
fn kept(entry: &std::fs::DirEntry) -> std::io::Result<Option<Kept>> {
    let (kind, name) = (entry.file_type()?, entry.file_name());
    Ok(
        if kind.is_file() && KEPT_FILES.iter().any(|kept| name == *kept) {
            Some(Kept::File)
        } else if kind.is_dir() && KEPT_DIRS.iter().any(|kept| name == *kept) {
            Some(Kept::Dir)
        } else {
            None
        },
    )
}

fn remove_entry(entry: &std::fs::DirEntry) -> std::io::Result<()> {
    if entry.file_type()?.is_dir() {
        std::fs::remove_dir_all(entry.path())
    } else {
        std::fs::remove_file(entry.path())
    }
}

/// True when `dir` holds exactly a spare's files and empty directories.
fn is_skeleton(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut seen = 0;
    for entry in entries {
        let Ok(entry) = entry else {
            return false;
        };
        let fits = match kept(&entry) {
            Ok(Some(Kept::File)) => true,
            Ok(Some(Kept::Dir)) => {
                std::fs::read_dir(entry.path()).is_ok_and(|mut inner| inner.next().is_none())
            }
            Ok(None) | Err(_) => false,
        };
        if !fits {
            return false;
        }
        seen += 1;
    }
    seen == KEPT_FILES.len() + KEPT_DIRS.len()
}

/// Registers the empty directory `path` from a spare, if one is there: claims it, writes
/// `files` (the registration's, each with its text) into it, writes `path/.git`, and
/// renames it into `root` (`worktrees/`) as `name` or the first free `name<N>`. Returns
/// the admin dir, or `None` (nothing left behind) when there is no usable spare or a step
/// fails: the caller then registers anew.
pub(super) fn take(
    common: &Path,
    root: &Path,
    name: &std::ffi::OsStr,
    path: &Path,
    files: &[(&str, Vec<u8>)],
) -> Option<PathBuf> {
    let trash = common.join("grove").join("trash");
    let entries = std::fs::read_dir(spares_dir(common)).ok()?;
    // A symlink among them is never followed (and never claimed): a spare is a directory.
    let spares = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()));
    for entry in spares.take(4) {
        let claimed = trash.join(format!("spare-{}-{}", std::process::id(), next_number()));
        if !matches!(
            move_into(&trash, &entry.path(), &claimed).ok()?,
            Moved::Done
        ) {
            // Taken by another process meanwhile.
            continue;
        }
        if !is_skeleton(&claimed) {
            delete_in_background(&trash, vec![claimed]);
            continue;
        }
        let placed = place(&claimed, root, name, path, files);
        if placed.is_none() {
            let _ = std::fs::remove_file(path.join(".git"));
            let _ = std::fs::remove_dir_all(&claimed);
        }
        return placed;
    }
    None
}

/// Writes the registration into the claimed spare and renames it into `root` under the
/// first free name; `path/.git` names the admin dir before it appears there, so git never
/// sees the registration without its worktree.
fn place(
    spare: &Path,
    root: &Path,
    name: &std::ffi::OsStr,
    path: &Path,
    files: &[(&str, Vec<u8>)],
) -> Option<PathBuf> {
    for (file, text) in files {
        std::fs::write(spare.join(file), text).ok()?;
    }
    for counter in 0u32..1000 {
        let mut candidate = name.to_os_string();
        if counter > 0 {
            candidate.push(counter.to_string());
        }
        let admin = root.join(candidate);
        let mut pointer = std::fs::File::create(path.join(".git")).ok()?;
        pointer
            .write_all(&[b"gitdir: ", admin.as_os_str().as_bytes(), b"\n"].concat())
            .ok()?;
        match nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            spare,
            nix::fcntl::AT_FDCWD,
            &admin,
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => return Some(admin),
            Err(nix::errno::Errno::EEXIST | nix::errno::Errno::ENOTEMPTY) => {}
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A registration's admin dir as a worktree leaves it: its files, an index, grove's
    /// markers, a worktree ref and reflog, and a symlink out of it.
    fn used_admin(dir: &Path, outside: &Path) {
        std::fs::create_dir_all(dir.join("refs/bisect")).unwrap();
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        for (file, text) in [
            ("commondir", "../..\n"),
            ("gitdir", "/old/path/.git\n"),
            ("HEAD", "ref: refs/heads/old\n"),
            ("index", "DIRC"),
            ("grove-filled", ""),
            ("refs/bisect/bad", "0000\n"),
            ("logs/HEAD", "a reflog line\n"),
        ] {
            std::fs::write(dir.join(file), text).unwrap();
        }
        std::os::unix::fs::symlink(outside, dir.join("config.worktree")).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_removed_registration_is_emptied_to_a_spare_and_nothing_outside_it_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("common");
        let outside = dir.path().join("precious.txt");
        std::fs::write(&outside, "kept").unwrap();
        let removed = common.join("grove/trash/admin-1-1");
        used_admin(&removed, &outside);

        recycle(&removed, &common);

        let spare = spares_dir(&common).join("admin-1-1");
        assert_eq!(
            (
                names(&spare),
                names(&spare.join("refs")),
                names(&spare.join("logs")),
                std::fs::read_to_string(&outside).unwrap(),
                removed.exists(),
            ),
            (
                vec![
                    "HEAD".into(),
                    "commondir".into(),
                    "gitdir".into(),
                    "logs".into(),
                    "refs".into()
                ],
                Vec::<String>::new(),
                Vec::<String>::new(),
                "kept".to_owned(),
                false,
            ),
            "a spare keeps a registration's files and empty dirs; the symlink goes, its target stays"
        );
        assert!(is_skeleton(&spare), "what recycle keeps is a spare's shape");
    }

    #[test]
    fn spares_beyond_the_cap_are_deleted_and_a_misshapen_one_is_never_taken() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("common");
        for n in 0..=MAX_SPARES {
            let removed = common.join(format!("grove/trash/admin-1-{n}"));
            used_admin(&removed, dir.path());
            recycle(&removed, &common);
            assert!(
                !removed.exists(),
                "a removed registration never stays in the trash"
            );
        }
        assert_eq!(
            std::fs::read_dir(spares_dir(&common)).unwrap().count(),
            MAX_SPARES,
            "at most MAX_SPARES are kept"
        );

        // Every spare misshapen: a file planted in refs/ of each.
        for entry in std::fs::read_dir(spares_dir(&common)).unwrap() {
            std::fs::write(entry.unwrap().path().join("refs/planted"), "x").unwrap();
        }
        let root = common.join("worktrees");
        std::fs::create_dir_all(&root).unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        let files = [("HEAD", b"ref: refs/heads/b\n".to_vec())];
        let taken = take(&common, &root, "tree".as_ref(), &tree, &files);
        assert_eq!(
            (taken, names(&root), names(&tree)),
            (None, Vec::<String>::new(), Vec::<String>::new()),
            "a spare that is not exactly a skeleton is not used, and nothing is left behind"
        );
    }
}
