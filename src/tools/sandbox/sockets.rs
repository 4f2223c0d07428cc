//! The host's Unix sockets a command must not reach.
//!
//! This file owns the list of pathname sockets bound on this machine (the kernel's
//! `/proc/net/unix`, read in grove's process before each command): the ssh-agent's, the
//! docker daemon's, the session bus's, `systemd --user`'s, X11's and Wayland's, and every
//! other one. Landlock does not govern `connect()` to a pathname socket (Linux 6.18), so
//! each is covered by an empty file in the command's own mount namespace instead. It
//! must never leave out a socket for being hard to parse: a path it cannot read whole is
//! covered as far as it can be named, and abstract sockets need no cover (a network
//! namespace of the command's own, or Landlock's scope, keeps them out). A socket bound
//! by a relative path is listed by that path alone: it is covered where each process
//! holding it works (`/proc/<pid>/cwd`), the directory it was bound in unless its
//! holders all moved away since.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// The pathname sockets `/proc/net/unix` lists, except those beneath `own` (the
/// command's worktree and its temporary directory: its own sockets keep working), each
/// once, in the order listed; those bound by a relative path after them, where found.
pub(super) fn host_sockets(own: &[&Path]) -> Vec<PathBuf> {
    let Ok(table) = std::fs::read("/proc/net/unix") else {
        return Vec::new();
    };
    let listed = pathname_sockets(&table);
    let resolved = if listed.relative.is_empty() {
        Vec::new()
    } else {
        resolve_relative(&listed.relative, Path::new("/proc"))
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for path in listed.absolute.into_iter().chain(resolved) {
        if !own.iter().any(|dir| path.starts_with(dir)) && !found.contains(&path) {
            found.push(path);
        }
    }
    found
}

/// The pathname sockets of a `/proc/net/unix` table, by the path they were bound with.
#[derive(Debug, Default, PartialEq)]
struct Listed {
    /// Bound by an absolute path.
    absolute: Vec<PathBuf>,
    /// Bound by a relative path: the socket's inode and that path.
    relative: Vec<(u64, PathBuf)>,
}

/// The pathname sockets of a `/proc/net/unix` table (see [`host_sockets`]); abstract
/// (`@…`) and unnamed ones left out.
fn pathname_sockets(table: &[u8]) -> Listed {
    let mut listed = Listed::default();
    // The header names the columns; a socket's path is everything after the seventh
    // field, spaces included.
    for line in table.split(|byte| *byte == b'\n').skip(1) {
        let Some((inode, path)) = inode_and_path(line) else {
            continue;
        };
        if path.starts_with(b"@") {
            continue;
        }
        let path = PathBuf::from(OsStr::from_bytes(path));
        if path.is_absolute() {
            listed.absolute.push(path);
        } else if let Some(inode) = inode {
            listed.relative.push((inode, path));
        }
    }
    listed
}

/// Where the sockets bound by a relative path are: each joined to the working directory
/// of every process (under `proc`, a `/proc`) holding it, where a socket file is found
/// there.
fn resolve_relative(relative: &[(u64, PathBuf)], proc: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt as _;
    let mut found = Vec::new();
    let Ok(processes) = std::fs::read_dir(proc) else {
        return found;
    };
    for process in processes.flatten() {
        let dir = process.path();
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        let held: Vec<&PathBuf> = fds
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|link| socket_inode(&link))
            .filter_map(|inode| {
                relative
                    .iter()
                    .find(|(known, _)| *known == inode)
                    .map(|(_, path)| path)
            })
            .collect();
        if held.is_empty() {
            continue;
        }
        let Ok(cwd) = std::fs::read_link(dir.join("cwd")) else {
            continue;
        };
        for path in held {
            let candidate = cwd.join(path);
            let is_socket = std::fs::symlink_metadata(&candidate)
                .is_ok_and(|meta| meta.file_type().is_socket());
            if is_socket && !found.contains(&candidate) {
                found.push(candidate);
            }
        }
    }
    found
}

/// The inode of a descriptor's link target `socket:[N]`.
fn socket_inode(link: &Path) -> Option<u64> {
    let text = link.to_str()?;
    text.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inode (seventh field, decimal) and the path column (what follows it) of one line
/// of the table.
fn inode_and_path(line: &[u8]) -> Option<(Option<u64>, &[u8])> {
    let mut rest = line;
    let mut inode = None;
    for field in 0..7 {
        rest = rest.trim_ascii_start();
        let end = rest.iter().position(u8::is_ascii_whitespace)?;
        if field == 6 {
            inode = std::str::from_utf8(&rest[..end])
                .ok()
                .and_then(|text| text.parse().ok());
        }
        rest = &rest[end..];
    }
    let path = rest.trim_ascii_start();
    (!path.is_empty()).then_some((inode, path))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_pathname_socket_is_listed_a_relative_one_with_its_inode_no_abstract_one() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20001 /tmp/ssh-XXXXabcd/agent.812\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 20002 /tmp/ssh-XXXXabcd/agent.812\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20003 @/tmp/.X11-unix/X0\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20004 /run/user/1000/my socket\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 20006\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20007 /var/run/docker.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20008 run/rel sock\n";
        assert_eq!(
            pathname_sockets(table),
            Listed {
                absolute: vec![
                    PathBuf::from("/tmp/ssh-XXXXabcd/agent.812"),
                    PathBuf::from("/tmp/ssh-XXXXabcd/agent.812"),
                    PathBuf::from("/run/user/1000/my socket"),
                    PathBuf::from("/var/run/docker.sock"),
                ],
                relative: vec![(20008, PathBuf::from("run/rel sock"))],
            },
            "every bound path (spaces kept), a relative one with its inode; abstract and \
             unnamed sockets left out"
        );
    }

    #[test]
    fn a_socket_bound_by_a_relative_path_is_found_where_its_holder_works() {
        let dir = tempfile::tempdir().unwrap();
        let own = tempfile::tempdir().unwrap();
        let bound = dir.path().join("rel.sock");
        // Another process binds `rel.sock` in its working directory and keeps it open.
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.bind('rel.sock')\n\
                 s.listen(1)\nprint('bound', flush=True)\nsys.stdin.read()",
            ])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "bound\n", "the holder bound its socket");

        let found = host_sockets(&[own.path()]);
        let own_only = host_sockets(&[dir.path()]);
        drop(holder.stdin.take());
        holder.wait().unwrap();

        assert_eq!(
            (found.contains(&bound), own_only.contains(&bound)),
            (true, false),
            "a socket bound by the relative path `rel.sock` is covered at its full path \
             {} (and left out when it is the command's own): {found:?}",
            bound.display()
        );
    }
}
