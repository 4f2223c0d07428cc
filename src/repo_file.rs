//! Reading a file that arrives with a repository (`.grove/config.toml`, `AGENTS.md`,
//! `CLAUDE.md`, `.grove/agents/*.md`): anyone who can commit to the repository chose
//! what is at that path.
//!
//! This file owns the one rule for such reads: the path must lead (through symbolic
//! links, as a dotfile setup may have it) to a regular file of at most [`MAX_BYTES`];
//! anything else — a FIFO that would block the read forever, `/dev/zero` that would
//! fill the memory, a directory, a socket, a file too large — is an error saying what
//! it is, for the caller to name the file. It must never block on opening or reading,
//! and never read more than the bound. Like `text`, any module may use it.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Read as _};
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use nix::fcntl::OFlag;

/// The largest file read: far more than any config or rules file needs, and little
/// enough to hold (and, for rules, to send to a model) without harm.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// The bytes of the regular file at `path`; [`io::ErrorKind::NotFound`] when there is
/// none, as [`std::fs::read`] says it.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    // Opening a FIFO for reading waits for a writer, unless non-blocking; and a
    // terminal opened without O_NOCTTY could become grove's controlling terminal.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits())
        .open(path)?;
    // The type of what was opened, not of what the path named a moment before.
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        let linked = std::fs::symlink_metadata(path).is_ok_and(|link| link.is_symlink());
        let through_link = if linked {
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
    read_bounded(file, metadata.len())
}

/// At most [`MAX_BYTES`] of `file`, refusing a file over it (even one that grows while
/// it is read).
fn read_bounded(file: File, length: u64) -> io::Result<Vec<u8>> {
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it is larger than {MAX_BYTES} bytes, the most grove reads of such a file"),
        )
    };
    if length > MAX_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(length).unwrap_or_default());
    file.take(MAX_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_BYTES {
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

    fn refusal(path: &Path) -> (io::ErrorKind, String) {
        let error = read(path).map(drop).unwrap_err();
        (error.kind(), error.to_string())
    }

    #[test]
    fn only_a_bounded_regular_file_is_read_and_anything_else_says_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let regular = dir.path().join("regular");
        std::fs::write(&regular, "text").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&regular, &link).unwrap();
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let large = dir.path().join("large");
        std::fs::write(&large, vec![b'x'; MAX_BYTES as usize + 1]).unwrap();

        assert_eq!(
            (read(&regular).unwrap(), read(&link).unwrap()),
            (b"text".to_vec(), b"text".to_vec()),
            "a regular file is read, through a link too"
        );
        assert_eq!(
            [&zero, &fifo, &dir.path().to_path_buf(), &large].map(|path| refusal(path)),
            [
                (
                    io::ErrorKind::InvalidInput,
                    "it is a character device (through a symbolic link), not a regular file"
                        .to_owned()
                ),
                (
                    io::ErrorKind::InvalidInput,
                    "it is a FIFO (named pipe), not a regular file".to_owned()
                ),
                (
                    io::ErrorKind::InvalidInput,
                    "it is a directory, not a regular file".to_owned()
                ),
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
            read(&dir.path().join("missing")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
