//! Reading text for the model with bounded memory: binary sniffing, lines with a byte cap,
//! and turning bytes into display strings without splitting a character.
//!
//! This module owns the "never hold more than a cap" rule for file contents: it must never
//! read a whole file or a whole line into memory.

use std::borrow::Cow;
use std::io::{self, BufRead, Read};

use crate::text::escaped_bytes;

/// How much of a file's start is checked for NUL bytes to call it binary (like git).
pub(crate) const SNIFF_BYTES: usize = 8 * 1024;

/// Reads up to [`SNIFF_BYTES`] from `reader`; the returned bytes must be put back in front
/// of the rest (`Cursor::new(prefix).chain(reader)`).
pub(crate) fn read_prefix(reader: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut prefix = Vec::with_capacity(SNIFF_BYTES);
    reader.take(SNIFF_BYTES as u64).read_to_end(&mut prefix)?;
    Ok(prefix)
}

/// True when `prefix` (a file's start) holds a NUL byte: text files do not.
pub(crate) fn looks_binary(prefix: &[u8]) -> bool {
    prefix.contains(&0)
}

/// One line, cut to the reader's byte cap, without its line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) bytes: Vec<u8>,
    /// Bytes of the line that were dropped because it was longer than the cap.
    pub(crate) cut_bytes: u64,
}

/// Lines from a reader, each holding at most `max_line_bytes`: a 2 GB line costs the cap,
/// not 2 GB.
#[derive(Debug)]
pub(crate) struct BoundedLines<R> {
    reader: R,
    max_line_bytes: usize,
}

impl<R: BufRead> BoundedLines<R> {
    pub(crate) fn new(reader: R, max_line_bytes: usize) -> Self {
        Self {
            reader,
            max_line_bytes,
        }
    }

    /// The next line, or `None` at the end of the input.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut bytes = Vec::new();
        let mut cut_bytes = 0u64;
        let mut saw_any = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if available.is_empty() {
                return Ok(saw_any.then(|| finish_line(bytes, cut_bytes)));
            }
            saw_any = true;
            let (chunk, consumed, ended) = match available.iter().position(|&byte| byte == b'\n') {
                Some(newline) => (&available[..newline], newline + 1, true),
                None => (available, available.len(), false),
            };
            let room = self.max_line_bytes.saturating_sub(bytes.len());
            let kept = room.min(chunk.len());
            bytes.extend_from_slice(&chunk[..kept]);
            cut_bytes += (chunk.len() - kept) as u64;
            self.reader.consume(consumed);
            if ended {
                return Ok(Some(finish_line(bytes, cut_bytes)));
            }
        }
    }

    /// True when no byte is left to read.
    pub(crate) fn at_end(&mut self) -> io::Result<bool> {
        loop {
            match self.reader.fill_buf() {
                Ok(available) => return Ok(available.is_empty()),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

fn finish_line(mut bytes: Vec<u8>, cut_bytes: u64) -> Line {
    if cut_bytes == 0 && bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    Line { bytes, cut_bytes }
}

/// `bytes` as text, and whether any invalid UTF-8 had to be replaced.
///
/// When `cut` is true the bytes are the start of something longer, so an incomplete
/// character at the very end is dropped (it was split by the cap, not invalid), and the
/// number of bytes dropped is returned too.
pub(crate) fn display(bytes: &[u8], cut: bool) -> (Cow<'_, str>, bool, usize) {
    let mut usable = bytes;
    let mut dropped = 0;
    if cut
        && let Err(err) = std::str::from_utf8(bytes)
        && err.error_len().is_none()
    {
        usable = &bytes[..err.valid_up_to()];
        dropped = bytes.len() - usable.len();
    }
    let text = String::from_utf8_lossy(usable);
    let lossy = matches!(text, Cow::Owned(_));
    (text, lossy, dropped)
}

/// `bytes` (one line of a file) as shown to a model that must see every byte: the text
/// itself, or, when it holds a NUL or bytes that are not UTF-8, every byte written out
/// ([`escaped_bytes`]); and whether it was written out. `cut` as for [`display`]; the
/// number of bytes dropped is returned too.
pub(crate) fn shown_line(bytes: &[u8], cut: bool) -> (Cow<'_, str>, bool, usize) {
    let mut usable = bytes;
    if cut
        && let Err(err) = std::str::from_utf8(bytes)
        && err.error_len().is_none()
    {
        usable = &bytes[..err.valid_up_to()];
    }
    let dropped = bytes.len() - usable.len();
    match std::str::from_utf8(usable) {
        Ok(text) if !usable.contains(&0) => (Cow::Borrowed(text), false, dropped),
        _ => (Cow::Owned(escaped_bytes(usable)), true, dropped),
    }
}

/// Like [`display`] for the end of something longer: drops an incomplete character at the
/// very start of `bytes` (the cap split it). Returns the text, whether it was lossy, and
/// how many bytes were dropped.
pub(crate) fn display_tail(bytes: &[u8]) -> (Cow<'_, str>, bool, usize) {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|&&byte| byte & 0b1100_0000 == 0b1000_0000)
        .count();
    let (text, lossy, _) = display(&bytes[skip..], false);
    (text, lossy, skip)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::{BufReader, Cursor};

    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<Line> {
        // A tiny buffer makes lines span many fill_buf calls.
        let mut reader = BoundedLines::new(BufReader::with_capacity(3, Cursor::new(input)), cap);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line);
        }
        out
    }

    fn line(text: &str, cut_bytes: u64) -> Line {
        Line {
            bytes: text.as_bytes().to_vec(),
            cut_bytes,
        }
    }

    #[test]
    fn bounded_lines_split_and_cap() {
        assert_eq!(
            lines(b"one\r\ntwo\n\nthree-is-long\nlast", 5),
            vec![
                line("one", 0),
                line("two", 0),
                line("", 0),
                line("three", 8),
                line("last", 0)
            ]
        );
        assert_eq!(
            lines(b"", 5),
            Vec::<Line>::new(),
            "an empty input has no lines"
        );
        assert_eq!(
            lines(b"a\n", 5),
            vec![line("a", 0)],
            "a final newline does not start a new line"
        );
    }

    #[test]
    fn display_drops_only_a_character_split_by_the_cap() {
        let word = "héllo".as_bytes();
        assert_eq!(display(&word[..2], true), (Cow::Borrowed("h"), false, 1));
        assert!(
            display(&word[..2], false).1,
            "uncut, a lone lead byte is invalid"
        );
        assert_eq!(
            display(b"a\xffb", true),
            (Cow::Owned("a\u{fffd}b".to_owned()), true, 0)
        );
        assert_eq!(display_tail(&word[2..]), (Cow::Borrowed("llo"), false, 1));
    }

    #[test]
    fn binary_is_a_nul_in_the_prefix() {
        let mut reader = Cursor::new([b"text".as_slice(), &[0], b"more"].concat());
        let prefix = read_prefix(&mut reader).unwrap();
        assert!(looks_binary(&prefix));
        assert!(!looks_binary(b"plain text\n"));
    }
}
