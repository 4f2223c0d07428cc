//! The host's Unix sockets a command must not reach.
//!
//! This file owns the list of pathname sockets bound on this machine (the kernel's
//! `/proc/net/unix`, read in grove's process before each command): the ssh-agent's, the
//! docker daemon's, the session bus's, `systemd --user`'s, X11's and Wayland's, and every
//! other one. Landlock does not govern `connect()` to a pathname socket (Linux 6.18), so
//! each is covered by an empty file in the command's own mount namespace instead. It
//! must never leave out a socket for being hard to parse: a path it cannot read whole is
//! covered as far as it can be named, and abstract sockets need no cover (a network
//! namespace of the command's own, or Landlock's scope, keeps them out).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// The pathname sockets `/proc/net/unix` lists, except those beneath `own` (the
/// command's worktree and its temporary directory: its own sockets keep working), each
/// once, in the order listed.
pub(super) fn host_sockets(own: &[&Path]) -> Vec<PathBuf> {
    std::fs::read("/proc/net/unix")
        .map(|table| pathname_sockets(&table, own))
        .unwrap_or_default()
}

/// The pathname sockets of a `/proc/net/unix` table (see [`host_sockets`]).
fn pathname_sockets(table: &[u8], own: &[&Path]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    // The header names the columns; a socket's path is everything after the seventh
    // field, spaces included.
    for line in table.split(|byte| *byte == b'\n').skip(1) {
        let Some(path) = path_field(line) else {
            continue;
        };
        let path = Path::new(OsStr::from_bytes(path));
        if !path.is_absolute() || own.iter().any(|dir| path.starts_with(dir)) {
            continue;
        }
        if !found.iter().any(|known| known == path) {
            found.push(path.to_path_buf());
        }
    }
    found
}

/// The path column of one line of the table: what follows the seventh field.
fn path_field(line: &[u8]) -> Option<&[u8]> {
    let mut rest = line;
    for _ in 0..7 {
        rest = rest.trim_ascii_start();
        let end = rest.iter().position(u8::is_ascii_whitespace)?;
        rest = &rest[end..];
    }
    let path = rest.trim_ascii_start();
    (!path.is_empty()).then_some(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_pathname_socket_is_listed_once_but_the_commands_own_and_abstract_ones() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20001 /tmp/ssh-XXXXabcd/agent.812\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 20002 /tmp/ssh-XXXXabcd/agent.812\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20003 @/tmp/.X11-unix/X0\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20004 /run/user/1000/my socket\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20005 /cache/grove/run/3/server.sock\n\
            0000000000000000: 00000002 00000000 00000000 0002 01 20006\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 20007 /var/run/docker.sock\n";
        assert_eq!(
            pathname_sockets(table, &[Path::new("/cache/grove/run/3")]),
            vec![
                PathBuf::from("/tmp/ssh-XXXXabcd/agent.812"),
                PathBuf::from("/run/user/1000/my socket"),
                PathBuf::from("/var/run/docker.sock"),
            ],
            "each bound path once (spaces kept); abstract, unnamed and the command's own \
             sockets are left out"
        );
    }
}
