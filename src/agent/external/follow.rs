//! Reading what a CLI writes while it runs: its output file line by line and the tail of
//! its stderr (`crate::text::strip_escapes` makes it safe to show).
//!
//! It never trusts the bytes: over-long lines are cut and counted, invalid UTF-8 is
//! replaced, and no escape sequence from a CLI reaches a terminal, a JSON reason or the
//! lead.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use super::BackendError;
use super::parse::{OutputParser, Progress};

/// Output lines longer than this are cut (and counted as unreadable): a runaway line costs
/// the cap, not the memory.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Reads the lines appended to a file since the last call, each cut at
/// [`MAX_LINE_BYTES`].
pub(super) struct LineFollower {
    file: std::fs::File,
    path: PathBuf,
    pending: Vec<u8>,
    /// The current line was cut: the rest of it is skipped up to its newline.
    skipping: bool,
}

/// How much of what was read a [`LineFollower::feed`] hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Feed {
    /// Complete lines only, while the process runs: a partial last line waits for the
    /// rest of it.
    AsItComes,
    /// Everything, once the process has ended: a last line without its newline too.
    Final,
}

impl LineFollower {
    pub(super) fn open(path: &Path) -> Result<Self, BackendError> {
        let file = std::fs::File::open(path).map_err(|source| BackendError::Io {
            action: "open the output of",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
            pending: Vec::new(),
            skipping: false,
        })
    }

    /// Feeds every complete new line to `parser`; at [`Feed::Final`], the last partial
    /// one too.
    pub(super) fn feed(
        &mut self,
        parser: &mut OutputParser,
        feed: Feed,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), BackendError> {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let read = self
                .file
                .read(&mut chunk)
                .map_err(|source| BackendError::Io {
                    action: "read the output of",
                    path: self.path.clone(),
                    source,
                })?;
            if read == 0 {
                break;
            }
            for piece in chunk[..read].split_inclusive(|byte| *byte == b'\n') {
                let ends_line = piece.last() == Some(&b'\n');
                let body = if ends_line {
                    &piece[..piece.len() - 1]
                } else {
                    piece
                };
                if !self.skipping {
                    self.pending.extend_from_slice(body);
                    if self.pending.len() > MAX_LINE_BYTES {
                        self.pending.clear();
                        self.skipping = true;
                        parser.cut_line();
                    }
                }
                if ends_line {
                    if !self.skipping {
                        let line = std::mem::take(&mut self.pending);
                        for event in parser.line(&String::from_utf8_lossy(&line)) {
                            progress(event);
                        }
                    }
                    self.skipping = false;
                }
            }
        }
        if feed == Feed::Final && !self.pending.is_empty() && !self.skipping {
            let line = std::mem::take(&mut self.pending);
            for event in parser.line(&String::from_utf8_lossy(&line)) {
                progress(event);
            }
        }
        Ok(())
    }
}

/// The last bytes of a file as text (empty when it cannot be read).
pub(super) fn file_tail(path: &Path, max: u64) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    if file
        .seek(SeekFrom::Start(length.saturating_sub(max)))
        .is_err()
    {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}
