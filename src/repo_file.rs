//! Reading a file that arrives with a repository (`.grove/config.toml`, `AGENTS.md`,
//! `CLAUDE.md`, `.grove/agents/*.md`, the JUnit report a ratchet's command wrote in a
//! tree): anyone who can commit to the repository chose what is at that path, symbolic
//! links included.
//!
//! This file owns the one rule for such reads: the path, resolved one component at a
//! time inside the repository's work tree, must lead to a regular file of at most
//! [`MAX_BYTES`]. A symbolic link may lead elsewhere in the work tree (`CLAUDE.md ->
//! AGENTS.md`), never out of it: a committed `AGENTS.md -> ~/.netrc` would put the
//! user's credentials into every prompt sent to the model provider. Anything else — a
//! link out of the work tree (named with where it points), a FIFO that would block the
//! read forever, `/dev/zero` that would fill the memory, a directory, a socket, a file
//! too large — is an error saying what it is, for the caller to name the file. It must
//! never open what a link out of the work tree points to, never block on opening or
//! reading, and never read more than the bound. Like `text`, any module may use it.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read as _};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// The largest file read: far more than any config or rules file needs, and little
/// enough to hold (and, for rules, to send to a model) without harm.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// The most symbolic links one read follows, as the kernel's own limit: past it the
/// links loop.
const MAX_LINKS: usize = 40;

/// The bytes of the regular file at `relative` (plain names only, such as
/// `.grove/config.toml`) in the work tree `root`; [`io::ErrorKind::NotFound`] when there
/// is none, as [`std::fs::read`] says it. A symbolic link on the way that leads out of
/// `root` is refused with [`io::ErrorKind::InvalidInput`], naming where it points.
pub fn read(root: &Path, relative: &Path) -> io::Result<Vec<u8>> {
    read_at_most(root, relative, MAX_BYTES)
}

/// [`read`] with another bound than [`MAX_BYTES`]: for a file a command in the tree
/// wrote (a test report), larger than any config, as careful about where it leads.
pub fn read_at_most(root: &Path, relative: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (file, through_link) = open_beneath(root, relative)?;
    // The type of what was opened, not of what the path named a moment before.
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        let through_link = if through_link {
            " (through a symbolic link)"
        } else {
            ""
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "it is {}{through_link}, not a regular file",
                describe(metadata.file_type())
            ),
        ));
    }
    read_bounded(file, metadata.len(), max)
}

/// Removes the file at `relative` (plain names only) in the work tree `root`, its
/// directory found as [`read`] finds a file: a link on the way that leads out of `root`
/// is refused, so that removing a file a command in the tree will write (a test report)
/// never removes one outside the tree through a directory link the tree's code made.
/// The last component itself is removed, link or not, never what it points to.
pub fn remove(root: &Path, relative: &Path) -> io::Result<()> {
    let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", relative.display()),
        ));
    };
    let dir = if parent.as_os_str().is_empty() {
        File::open(root)?
    } else {
        let (dir, _) = open_beneath(root, parent)?;
        if !dir.metadata()?.is_dir() {
            return Err(io::Error::from(io::ErrorKind::NotADirectory));
        }
        dir
    };
    nix::unistd::unlinkat(&dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
        .map_err(io::Error::from)
}

/// A symbolic link met on the way: where it is in the work tree, and its text.
#[derive(Debug)]
struct Link {
    at: PathBuf,
    target: PathBuf,
}

/// Opens `relative` in `root` without ever stepping out of `root`: each component is
/// opened relative to the directory before it with `O_NOFOLLOW`, and a symbolic link's
/// text is resolved by this walk, not by the kernel, so that a link out (an absolute
/// target elsewhere, or `..` past the root) is caught before anything beyond it is
/// opened. Also returns whether a link was followed.
fn open_beneath(root: &Path, relative: &Path) -> io::Result<(File, bool)> {
    let mut pending: VecDeque<(OsString, Option<Rc<Link>>)> = VecDeque::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => pending.push_back((name.to_owned(), None)),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is not a plain path inside the repository",
                        relative.display()
                    ),
                ));
            }
        }
    }
    // The root itself is the user's own path (they chose the directory): followed.
    let root_dir = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_CLOEXEC).bits())
        .open(root)?;
    let real_root = root.canonicalize()?;
    // The directories opened beneath the root, and their names, for `..` and messages.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut at = PathBuf::new();
    let mut links = 0;
    while let Some((name, origin)) = pending.pop_front() {
        if name == ".." {
            if dirs.pop().is_none() {
                return Err(leaves(origin.as_deref(), relative));
            }
            at.pop();
            continue;
        }
        if name.is_empty() || name == "." {
            continue;
        }
        let dir: BorrowedFd<'_> = dirs.last().map_or(root_dir.as_fd(), |fd| fd.as_fd());
        match nix::fcntl::readlinkat(dir, name.as_os_str()) {
            Ok(target) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::ELOOP.into());
                }
                let link = Rc::new(Link {
                    at: at.join(&name),
                    target: PathBuf::from(target),
                });
                let rest = if link.target.is_absolute() {
                    // An absolute link back into the work tree is read as the path it
                    // names there; anywhere else is out.
                    let inside = [root, real_root.as_path()]
                        .into_iter()
                        .find_map(|root| link.target.strip_prefix(root).ok())
                        .map(Path::to_path_buf);
                    let Some(inside) = inside else {
                        return Err(leaves(Some(&link), relative));
                    };
                    dirs.clear();
                    at = PathBuf::new();
                    inside
                } else {
                    link.target.clone()
                };
                for part in rest.iter().rev() {
                    pending.push_front((part.to_owned(), Some(link.clone())));
                }
                continue;
            }
            // Not a link: opened below, never following one put there since.
            Err(Errno::EINVAL) => {}
            Err(errno) => return Err(errno.into()),
        }
        if pending.is_empty() {
            // Opening a FIFO for reading waits for a writer, unless non-blocking; and a
            // terminal opened without O_NOCTTY could become grove's controlling terminal.
            let flags = OFlag::O_RDONLY
                | OFlag::O_NONBLOCK
                | OFlag::O_NOCTTY
                | OFlag::O_NOFOLLOW
                | OFlag::O_CLOEXEC;
            let file = nix::fcntl::openat(dir, name.as_os_str(), flags, Mode::empty())?;
            return Ok((File::from(file), links > 0));
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_DIRECTORY
            | OFlag::O_NONBLOCK
            | OFlag::O_NOFOLLOW
            | OFlag::O_CLOEXEC;
        let opened = nix::fcntl::openat(dir, name.as_os_str(), flags, Mode::empty())?;
        dirs.push(opened);
        at.push(&name);
    }
    // The path named a directory (it ended in `..` or `.` of a link): said so by the type.
    let dir = match dirs.pop() {
        Some(dir) => File::from(dir),
        None => root_dir,
    };
    Ok((dir, links > 0))
}

/// The refusal of a path that leaves the work tree, through `link` (the one whose text
/// leads out).
fn leaves(link: Option<&Link>, relative: &Path) -> io::Error {
    let message = match link {
        Some(link) => {
            let which = if link.at == relative {
                "it".to_owned()
            } else {
                format!("`{}` on its way", link.at.display())
            };
            format!(
                "{which} is a symbolic link to {}, outside the repository; grove reads no \
                 file outside the repository's work tree",
                link.target.display()
            )
        }
        None => format!("{} leaves the repository", relative.display()),
    };
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// At most [`MAX_BYTES`] of `file`, refusing a file over it (even one that grows while
/// it is read).
fn read_bounded(file: File, length: u64, max: u64) -> io::Result<Vec<u8>> {
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it is larger than {max} bytes, the most grove reads of such a file"),
        )
    };
    if length > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(length).unwrap_or_default());
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

fn describe(kind: FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn refusal(root: &Path, relative: &str) -> (io::ErrorKind, String) {
        let error = read(root, Path::new(relative)).map(drop).unwrap_err();
        (error.kind(), error.to_string())
    }

    fn text(root: &Path, relative: &str) -> String {
        String::from_utf8(read(root, Path::new(relative)).unwrap()).unwrap()
    }

    #[test]
    fn only_a_bounded_regular_file_is_read_and_anything_else_says_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("regular"), "text").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        symlink("fifo", root.join("to-fifo")).unwrap();
        std::fs::write(root.join("large"), vec![b'x'; MAX_BYTES as usize + 1]).unwrap();

        assert_eq!(
            text(root, "regular"),
            "text",
            "a regular file of the work tree is read"
        );
        let not_regular = |what: &str| {
            (
                io::ErrorKind::InvalidInput,
                format!("it is {what}, not a regular file"),
            )
        };
        assert_eq!(
            ["fifo", "to-fifo", "sub", "large"].map(|path| refusal(root, path)),
            [
                not_regular("a FIFO (named pipe)"),
                not_regular("a FIFO (named pipe) (through a symbolic link)"),
                not_regular("a directory"),
                (
                    io::ErrorKind::FileTooLarge,
                    format!(
                        "it is larger than {MAX_BYTES} bytes, the most grove reads of such a file"
                    )
                ),
            ],
            "nothing else is read, and nothing blocks"
        );
        assert_eq!(
            ["missing", "sub/missing", "missing/file"].map(|path| refusal(root, path).0),
            [io::ErrorKind::NotFound; 3],
            "a missing file reads as missing"
        );
    }

    #[test]
    fn a_link_that_stays_in_the_work_tree_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("docs/rules")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "house rules").unwrap();
        std::fs::write(root.join("docs/rules/main.md"), "deep rules").unwrap();
        symlink("AGENTS.md", root.join("CLAUDE.md")).unwrap();
        symlink("../AGENTS.md", root.join("docs/up.md")).unwrap();
        symlink("docs/rules", root.join("rules")).unwrap();
        symlink(root.join("AGENTS.md"), root.join("absolute.md")).unwrap();
        symlink("rules/./../rules/main.md", root.join("winding.md")).unwrap();
        assert_eq!(
            [
                "CLAUDE.md",
                "docs/up.md",
                "rules/main.md",
                "absolute.md",
                "winding.md"
            ]
            .map(|path| text(&root, path)),
            [
                "house rules",
                "house rules",
                "deep rules",
                "house rules",
                "deep rules"
            ],
            "a link to a file of the work tree, relative or absolute, reads that file"
        );
    }

    #[test]
    fn a_link_out_of_the_work_tree_is_refused_naming_where_it_points_and_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let home = dir.path().join("home");
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(home.join("agents")).unwrap();
        std::fs::write(home.join(".netrc"), "machine x password SECRET").unwrap();
        std::fs::write(home.join("config.toml"), "model = \"SECRET\"").unwrap();
        std::fs::write(home.join("agents/spy.md"), "SECRET").unwrap();
        let netrc = home.join(".netrc");
        symlink(&netrc, root.join("AGENTS.md")).unwrap();
        symlink("../home/.netrc", root.join("CLAUDE.md")).unwrap();
        symlink(&home, root.join(".grove")).unwrap();
        symlink("../../home", root.join("docs/home")).unwrap();
        symlink("docs/home/.netrc", root.join("chained.md")).unwrap();
        symlink("/dev/zero", root.join("zero")).unwrap();

        let out = |which: &str, target: &Path| {
            (
                io::ErrorKind::InvalidInput,
                format!(
                    "{which} is a symbolic link to {}, outside the repository; grove reads no \
                     file outside the repository's work tree",
                    target.display()
                ),
            )
        };
        assert_eq!(
            [
                "AGENTS.md",
                "CLAUDE.md",
                ".grove/config.toml",
                ".grove/agents/spy.md",
                "chained.md",
                "zero",
            ]
            .map(|path| refusal(&root, path)),
            [
                out("it", &netrc),
                out("it", Path::new("../home/.netrc")),
                out("`.grove` on its way", &home),
                out("`.grove` on its way", &home),
                out("`docs/home` on its way", Path::new("../../home")),
                out("it", Path::new("/dev/zero")),
            ],
            "a link out of the work tree, as the file or as a directory on the way, is \
             refused and named with its target"
        );
    }

    #[test]
    fn a_file_is_removed_beneath_the_tree_and_never_through_a_directory_link_out() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("report.xml"), "theirs").unwrap();
        let tree = tempfile::tempdir().unwrap();
        let root = tree.path();
        std::fs::create_dir(root.join("out")).unwrap();
        std::fs::write(root.join("out/report.xml"), "old").unwrap();
        symlink(outside.path(), root.join("away")).unwrap();
        symlink(outside.path().join("report.xml"), root.join("link.xml")).unwrap();

        remove(root, Path::new("out/report.xml")).unwrap();
        let refused = remove(root, Path::new("away/report.xml")).unwrap_err();
        remove(root, Path::new("link.xml")).unwrap();

        assert_eq!(
            (
                root.join("out/report.xml").exists(),
                refused.kind(),
                root.join("link.xml").symlink_metadata().is_ok(),
                std::fs::read_to_string(outside.path().join("report.xml")).unwrap(),
            ),
            (
                false,
                io::ErrorKind::InvalidInput,
                false,
                "theirs".to_owned()
            ),
            "a file beneath the tree goes; a directory link out is refused; a link as the \
             last name goes itself; nothing outside the tree is touched"
        );
    }

    #[test]
    fn a_loop_of_links_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        symlink("b", dir.path().join("a")).unwrap();
        symlink("a", dir.path().join("b")).unwrap();
        assert_eq!(
            read(dir.path(), Path::new("a")).unwrap_err().raw_os_error(),
            Some(Errno::ELOOP as i32)
        );
    }
}
