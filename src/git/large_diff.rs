//! The patch of a file too large for a line diff in memory (a worker appending to a
//! 200 MiB log or data file).
//!
//! A line diff of two 200 MiB blobs held grove's memory at five times the file (both
//! blobs, then the diff engine's record of every line of each). This module owns the
//! bounded way: the smaller side is held whole and the other is read as a stream (a
//! loose object, as a worker's checkpoint writes it; a packed one is read whole), their
//! common start and end are cut off at line boundaries (the change of an append or of a
//! few lines is then small), and only what lies between is diffed, its hunks numbered as
//! in the whole file. A change whose middle is itself too large is named with its extent
//! and line counts, never shown cut without saying so. It must produce the same patch as
//! the whole-file diff whenever the changed region is small: what the reviewer reads is
//! what merges.

use std::io::Read;
use std::ops::Range;

use git2::{Delta, DiffOptions, Oid, Patch};

use crate::text::quoted_path;

/// A side larger than this is diffed by [`file_patch`], not by a line diff of the whole.
pub(super) const LARGE_FILE_BYTES: u64 = 8 << 20;

/// How much of a file's start git reads to call it binary.
pub(super) const BINARY_SNIFF_BYTES: usize = 8_000;

/// Lines of context around each change, as git's default.
const CONTEXT_LINES: usize = 3;

/// How much of a streamed side is read at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// True when a side of `delta` is over [`LARGE_FILE_BYTES`] (its size read from the
/// object's header, not its content).
pub(super) fn is_large(
    repo: &git2::Repository,
    delta: &git2::DiffDelta<'_>,
) -> Result<bool, git2::Error> {
    let odb = repo.odb()?;
    for side in [delta.old_file(), delta.new_file()] {
        let Some(id) = blob_id(&side) else { continue };
        let (size, _) = odb.read_header(id)?;
        if size as u64 > LARGE_FILE_BYTES {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The blob a side of a diff holds; none for an absent side or a submodule.
fn blob_id(side: &git2::DiffFile<'_>) -> Option<Oid> {
    (!side.id().is_zero() && side.mode() != git2::FileMode::Commit).then(|| side.id())
}

/// The lines of one file's patch: each line's origin (as libgit2 prints them, `N` for a
/// note of grove's) and bytes.
pub(super) type PatchLines = Vec<(char, Vec<u8>)>;

/// A large file's side of the diff: its line counts and the lines of its patch.
pub(super) struct LargeFile {
    pub added: u64,
    pub removed: u64,
    /// A NUL in the first bytes of a side, as git judges binary.
    pub binary: bool,
    pub lines: PatchLines,
}

/// One side's content: bytes in memory, or a loose object read as a stream (each
/// [`Source::open`] reads it from its start again).
enum Source<'a> {
    Bytes(&'a [u8]),
    Stream(&'a git2::Odb<'a>, Oid, usize),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Bytes(bytes) => bytes.len(),
            Source::Stream(_, _, len) => *len,
        }
    }

    /// Calls `each` with the chunks of `range`, in order.
    fn chunks(
        &self,
        range: Range<usize>,
        mut each: impl FnMut(usize, &[u8]),
    ) -> Result<(), git2::Error> {
        let mut reader: Box<dyn Read + '_> = match self {
            Source::Bytes(bytes) => {
                each(range.start, &bytes[range]);
                return Ok(());
            }
            Source::Stream(odb, id, _) => Box::new(odb.reader(*id)?.0),
        };
        let mut buffer = vec![0; CHUNK_BYTES];
        let mut at = 0;
        while at < range.end {
            let read = reader.read(&mut buffer).map_err(|error| {
                git2::Error::from_str(&format!("reading object {id}: {error}", id = self.id()))
            })?;
            if read == 0 {
                return Err(git2::Error::from_str(&format!(
                    "object {} ended after {at} of its {} bytes",
                    self.id(),
                    self.len()
                )));
            }
            let chunk = &buffer[..read];
            let (from, to) = (range.start.max(at), range.end.min(at + read));
            if from < to {
                each(from, &chunk[from - at..to - at]);
            }
            at += read;
        }
        Ok(())
    }

    fn id(&self) -> String {
        match self {
            Source::Bytes(_) => "in memory".to_owned(),
            Source::Stream(_, id, _) => id.to_string(),
        }
    }
}

/// The diff of a large file: the smaller side held whole, the other streamed twice (to
/// find where the sides differ, then to read that middle), so grove holds one side and
/// the change, not both sides.
pub(super) fn file_patch(
    repo: &git2::Repository,
    delta: &git2::DiffDelta<'_>,
) -> Result<LargeFile, git2::Error> {
    let odb = repo.odb()?;
    // Only loose objects stream; a packed one answers with an error and is read whole.
    let stream = |id: Option<Oid>| {
        id.and_then(|id| {
            odb.reader(id)
                .ok()
                .map(|(_, len, _)| Source::Stream(&odb, id, len))
        })
    };
    let (old_id, new_id) = (blob_id(&delta.old_file()), blob_id(&delta.new_file()));
    let (old_stream, new_stream) = (stream(old_id), stream(new_id));
    let new_is_streamed = match (&old_stream, &new_stream) {
        (Some(old), Some(new)) => new.len() >= old.len(),
        (_, new) => new.is_some(),
    };
    let (whole_id, streamed, other_id, other_side) = if new_is_streamed {
        (old_id, new_stream, new_id, OtherSide::New)
    } else {
        (new_id, old_stream, old_id, OtherSide::Old)
    };
    let read = |id: Option<Oid>| id.map(|id| repo.find_blob(id)).transpose();
    let whole_blob = read(whole_id)?;
    let other_blob = if streamed.is_some() {
        None
    } else {
        read(other_id)?
    };
    let other = streamed.unwrap_or(Source::Bytes(content(other_blob.as_ref())));
    patch_of(delta, content(whole_blob.as_ref()), &other, other_side)
}

fn content<'a>(blob: Option<&'a git2::Blob<'_>>) -> &'a [u8] {
    blob.map_or(&[][..], git2::Blob::content)
}

/// Which side of the change a patch's `other` (the side that may be streamed) is; the
/// `whole` one is the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OtherSide {
    /// `other` is the old blob and `whole` the new one.
    Old,
    /// `other` is the new blob and `whole` the old one.
    New,
}

/// `whole_side` and `other_side` as (old, new).
fn old_new<T>(other: OtherSide, whole_side: T, other_side: T) -> (T, T) {
    match other {
        OtherSide::New => (whole_side, other_side),
        OtherSide::Old => (other_side, whole_side),
    }
}

/// The patch of `whole` against `other`, on the side `other_side` says.
fn patch_of(
    delta: &git2::DiffDelta<'_>,
    whole: &[u8],
    other: &Source<'_>,
    other_side: OtherSide,
) -> Result<LargeFile, git2::Error> {
    let scan = Scan::of(whole, other)?;
    let binary = [&whole[..whole.len().min(BINARY_SNIFF_BYTES)], &scan.start]
        .iter()
        .any(|start| start.contains(&0));
    let cut = Cut::of(whole, &scan);
    let mut lines = vec![('F', header_of(delta))];
    let whole_middle = cut.middle(whole.len());
    let other_middle = cut.middle(other.len());
    let (added, removed) = if whole_middle.len().max(other_middle.len()) as u64 > LARGE_FILE_BYTES {
        let whole_changed = cut.changed(whole.len());
        let whole_text = &whole[whole_changed.clone()];
        let other_changed = cut.changed(other.len());
        let mut other_lines = 0;
        let mut other_last = None;
        other.chunks(other_changed.clone(), |_, chunk| {
            other_lines += count_lines(chunk);
            other_last = chunk.last().copied().or(other_last);
        })?;
        let other_count = other_lines + u64::from(other_last.is_some_and(|b| b != b'\n'));
        let (old_size, new_size) = old_new(other_side, whole_text.len(), other_changed.len());
        let (removed, added) = old_new(other_side, line_count(whole_text), other_count);
        let note = format!(
            "[grove: this file's change spans {} of the old file and {} of the new, from \
             its line {}: too large to diff in memory, so its lines are not shown; read them \
             with read_file or grep: {removed} lines there became {added}]\n",
            size_text(old_size),
            size_text(new_size),
            count_lines(&whole[..cut.changed_prefix]) + 1,
        );
        lines.push(('N', note.into_bytes()));
        (added, removed)
    } else {
        let mut other_text = Vec::with_capacity(other_middle.len());
        other.chunks(other_middle, |_, chunk| other_text.extend_from_slice(chunk))?;
        let (old, new) = old_new(other_side, &whole[whole_middle], &other_text[..]);
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(std::path::Path::to_path_buf);
        let mut options = DiffOptions::new();
        options
            .context_lines(CONTEXT_LINES as u32)
            .indent_heuristic(true)
            .force_text(true);
        let mut patch = Patch::from_buffers(
            old,
            path.as_deref(),
            new,
            path.as_deref(),
            Some(&mut options),
        )?;
        let (_, added, removed) = patch.line_stats()?;
        patch.print(&mut |_, _, line| {
            match line.origin() {
                // The buffers' own file header names neither the blobs nor their modes.
                'F' => {}
                'H' => {
                    let header = moved_hunk_header(line.content(), cut.lines_before);
                    lines.push((
                        'H',
                        with_heading(header, || heading_before(whole, cut.prefix)),
                    ));
                }
                origin => lines.push((origin, line.content().to_vec())),
            }
            true
        })?;
        (added as u64, removed as u64)
    };
    Ok(LargeFile {
        added,
        removed,
        binary,
        lines,
    })
}

/// What one read of the streamed side tells against the side held whole.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    len: usize,
    /// Its first bytes, for the binary test.
    start: Vec<u8>,
    /// The length of the sides' common start.
    same: usize,
    /// The length of the sides' common end (it may overlap the common start).
    same_end: usize,
    /// The streamed side's byte just before that common end.
    before_end: Option<u8>,
}

impl Scan {
    fn of(whole: &[u8], other: &Source<'_>) -> Result<Self, git2::Error> {
        let len = other.len();
        let mut scan = Scan {
            len,
            start: Vec::new(),
            same: 0,
            same_end: len,
            before_end: None,
        };
        let mut in_same = true;
        // Byte `i` of the streamed side lines up with byte `i + shift` of `whole` from
        // the end.
        let shift = whole.len() as isize - len as isize;
        other.chunks(0..len, |at, chunk| {
            if scan.start.len() < BINARY_SNIFF_BYTES {
                let wanted = (BINARY_SNIFF_BYTES - scan.start.len()).min(chunk.len());
                scan.start.extend_from_slice(&chunk[..wanted]);
            }
            if in_same {
                let held = &whole[at.min(whole.len())..(at + chunk.len()).min(whole.len())];
                let equal = chunk.iter().zip(held).take_while(|(a, b)| a == b).count();
                scan.same = at + equal;
                in_same = equal == chunk.len();
            }
            let differs = |(k, byte): &(usize, &u8)| {
                let aligned = (at + k) as isize + shift;
                aligned < 0 || whole[aligned as usize] != **byte
            };
            if let Some((k, byte)) = chunk.iter().enumerate().rev().find(differs) {
                scan.same_end = len - (at + k + 1);
                scan.before_end = Some(*byte);
            }
        })?;
        Ok(scan)
    }
}

/// Where two sides stop agreeing: the byte lengths of their common start and end, each
/// at a line boundary, without (`changed_*`) and with the context lines a diff shows.
#[derive(Debug, PartialEq, Eq)]
struct Cut {
    prefix: usize,
    suffix: usize,
    changed_prefix: usize,
    changed_suffix: usize,
    /// Lines in the common start kept out of the middle.
    lines_before: u64,
}

impl Cut {
    /// The common start and end are the same bytes on both sides, so every line
    /// boundary in them is found in `whole`; of the streamed side only the byte before
    /// the common end is needed.
    fn of(whole: &[u8], other: &Scan) -> Self {
        // Back to the start of the line the first difference is in, then the context.
        let changed_prefix = line_start_before(whole, other.same);
        let mut prefix = changed_prefix;
        for _ in 0..CONTEXT_LINES {
            if prefix == 0 {
                break;
            }
            prefix = line_start_before(whole, prefix - 1);
        }
        let rest = &whole[changed_prefix..];
        let other_rest = other.len - changed_prefix;
        let same_end = other.same_end.min(rest.len()).min(other_rest);
        let (at, other_at) = (rest.len() - same_end, other_rest - same_end);
        let before_other_end = if same_end == other.same_end {
            other.before_end
        } else {
            // Inside the streamed side's common end: the same byte as `whole`'s.
            Some(whole[whole.len() - same_end - 1])
        };
        // The common end must start a line on both sides: past the first newline in it
        // unless it already does (its bytes are the same on both sides from there).
        let starts_line = (at == 0 || rest[at - 1] == b'\n')
            && (other_at == 0 || before_other_end == Some(b'\n'));
        let changed_end = if starts_line {
            at
        } else {
            line_start_after(rest, at)
        };
        let mut end = changed_end;
        for _ in 0..CONTEXT_LINES {
            end = line_start_after(rest, end);
        }
        Self {
            prefix,
            suffix: rest.len() - end,
            changed_prefix,
            changed_suffix: rest.len() - changed_end,
            lines_before: count_lines(&whole[..prefix]),
        }
    }

    /// What lies between the common start and end of a side of `len` bytes, context
    /// lines included.
    fn middle(&self, len: usize) -> Range<usize> {
        self.prefix..len - self.suffix
    }

    /// What changed, without context.
    fn changed(&self, len: usize) -> Range<usize> {
        self.changed_prefix..len - self.changed_suffix
    }
}

/// The start of the line that holds byte `at` of `side` (`at` may be its length).
fn line_start_before(side: &[u8], at: usize) -> usize {
    side[..at]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1)
}

/// The start of the line after the one that holds byte `at`, or the end.
fn line_start_after(side: &[u8], at: usize) -> usize {
    side[at..]
        .iter()
        .position(|b| *b == b'\n')
        .map_or(side.len(), |i| at + i + 1)
}

/// The hunk header `@@ -A,B +C,D @@ …` with `A` and `C` moved down by `offset` lines.
fn moved_hunk_header(header: &[u8], offset: u64) -> Vec<u8> {
    let text = String::from_utf8_lossy(header);
    let moved = (|| {
        let rest = text.strip_prefix("@@ -")?;
        let (old, rest) = rest.split_once(" +")?;
        let (new, rest) = rest.split_once(" @@")?;
        let shift = |range: &str| -> Option<String> {
            let (start, count) = match range.split_once(',') {
                Some((start, count)) => (start, Some(count)),
                None => (range, None),
            };
            let start = start.parse::<u64>().ok()? + offset;
            Some(match count {
                Some(count) => format!("{start},{count}"),
                None => start.to_string(),
            })
        };
        Some(format!("@@ -{} +{} @@{rest}", shift(old)?, shift(new)?))
    })();
    moved.map_or_else(|| header.to_vec(), String::into_bytes)
}

/// `header` with the section heading `heading` finds, when the middle had none before
/// its hunk: the line git would name lies in the part cut off.
fn with_heading<'a>(header: Vec<u8>, heading: impl FnOnce() -> Option<&'a [u8]>) -> Vec<u8> {
    let Some(bare) = header.strip_suffix(b" @@\n") else {
        return header;
    };
    match heading() {
        Some(heading) => [bare, b" @@ ", heading, b"\n"].concat(),
        None => header,
    }
}

/// The last line of `old[..end]` that git's default section heading matches (one that
/// starts with a letter, `_` or `$`), its trailing whitespace trimmed, at most 80 bytes.
fn heading_before(old: &[u8], end: usize) -> Option<&[u8]> {
    old[..end]
        .split(|b| *b == b'\n')
        .rev()
        .find(|line| {
            line.first()
                .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_' || *b == b'$')
        })
        .map(|line| {
            let trimmed = line.trim_ascii_end();
            &trimmed[..trimmed.len().min(80)]
        })
}

/// The file header git writes for `delta` (its `diff --git`, mode, rename, index and
/// `---`/`+++` lines), written here: libgit2 prints a header only after diffing the
/// content it would follow. A rename's `similarity index` line is left out (it would
/// need the line diff this module avoids).
fn header_of(delta: &git2::DiffDelta<'_>) -> Vec<u8> {
    let path = |side: &git2::DiffFile<'_>| {
        side.path_bytes()
            .map(|path| String::from_utf8_lossy(path).into_owned())
            .unwrap_or_default()
    };
    let (old, new) = (delta.old_file(), delta.new_file());
    let (old_path, new_path) = (path(&old), path(&new));
    let named = |prefix: &str, path: &str| quoted_path(&format!("{prefix}{path}")).into_owned();
    let mode = |side: &git2::DiffFile<'_>| format!("{:o}", i32::from(side.mode()));
    let abbrev = |side: &git2::DiffFile<'_>| side.id().to_string()[..7].to_owned();
    let mut header = format!(
        "diff --git {} {}\n",
        named("a/", &old_path),
        named("b/", &new_path)
    );
    let mut same_mode = false;
    match delta.status() {
        Delta::Added => header.push_str(&format!("new file mode {}\n", mode(&new))),
        Delta::Deleted => header.push_str(&format!("deleted file mode {}\n", mode(&old))),
        status => {
            if old.mode() == new.mode() {
                same_mode = true;
            } else {
                header.push_str(&format!(
                    "old mode {}\nnew mode {}\n",
                    mode(&old),
                    mode(&new)
                ));
            }
            if status == Delta::Renamed {
                header.push_str(&format!(
                    "rename from {}\nrename to {}\n",
                    quoted_path(&old_path),
                    quoted_path(&new_path)
                ));
            }
        }
    }
    header.push_str(&format!("index {}..{}", abbrev(&old), abbrev(&new)));
    if same_mode {
        header.push_str(&format!(" {}", mode(&new)));
    }
    let side_line = |sign: &str, prefix: &str, path: &str, absent: bool| {
        if absent {
            format!("{sign} /dev/null\n")
        } else {
            format!("{sign} {}\n", named(prefix, path))
        }
    };
    header.push('\n');
    header.push_str(&side_line(
        "---",
        "a/",
        &old_path,
        delta.status() == Delta::Added,
    ));
    header.push_str(&side_line(
        "+++",
        "b/",
        &new_path,
        delta.status() == Delta::Deleted,
    ));
    header.into_bytes()
}

fn count_lines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\n').count() as u64
}

/// The lines of `bytes` as a diff counts them: a last line without a newline is one.
fn line_count(bytes: &[u8]) -> u64 {
    count_lines(bytes) + u64::from(bytes.last().is_some_and(|b| *b != b'\n'))
}

fn size_text(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The lines of the patch of `old` → `new` (a file `f.txt`), by the whole-file diff
    /// and by this module's.
    fn both_ways(old: &[u8], new: &[u8]) -> (PatchLines, PatchLines) {
        sides(Some(old), Some(new))
    }

    /// As [`both_ways`], with either side absent (an added or deleted file).
    fn sides(old: Option<&[u8]>, new: Option<&[u8]>) -> (PatchLines, PatchLines) {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let tree_of = |content: Option<&[u8]>| {
            let mut builder = repo.treebuilder(None).unwrap();
            if let Some(content) = content {
                let blob = repo.blob(content).unwrap();
                builder.insert("f.txt", blob, 0o100_644).unwrap();
            }
            repo.find_tree(builder.write().unwrap()).unwrap()
        };
        let (old_tree, new_tree) = (tree_of(old), tree_of(new));
        let mut options = DiffOptions::new();
        options
            .context_lines(3)
            .indent_heuristic(true)
            .force_text(true);
        let diff = repo
            .diff_tree_to_tree(Some(&old_tree), Some(&new_tree), Some(&mut options))
            .unwrap();
        let mut whole = Vec::new();
        let mut patch = Patch::from_diff(&diff, 0).unwrap().unwrap();
        patch
            .print(&mut |_, _, line| {
                whole.push((line.origin(), line.content().to_vec()));
                true
            })
            .unwrap();
        let delta = diff.get_delta(0).unwrap();
        let large = file_patch(&repo, &delta).unwrap();
        let (_, added, removed) = patch.line_stats().unwrap();
        assert_eq!(
            (large.added, large.removed),
            (added as u64, removed as u64),
            "the same line counts"
        );
        let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
        for (held, other, other_side) in [(old, new, OtherSide::New), (new, old, OtherSide::Old)] {
            let in_memory = patch_of(&delta, held, &Source::Bytes(other), other_side).unwrap();
            assert_eq!(
                in_memory.lines,
                large.lines,
                "held {} and the other side in memory: the streamed side's patch",
                match other_side {
                    OtherSide::New => "old",
                    OtherSide::Old => "new",
                }
            );
        }
        (whole, large.lines)
    }

    fn numbered(lines: std::ops::Range<usize>) -> String {
        lines.map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn a_small_change_in_a_large_file_is_the_patch_the_whole_file_diff_writes() {
        let base = numbered(0..200);
        let long = numbered(0..20_000);
        let mut middle = base.clone().into_bytes();
        middle.splice(700..704, b"LINE".iter().copied());
        let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            (
                "an append",
                base.clone().into(),
                format!("{base}appended\n").into(),
            ),
            ("a line changed in the middle", base.clone().into(), middle),
            (
                "the first line deleted",
                base.clone().into(),
                numbered(1..200).into(),
            ),
            (
                "the last line deleted",
                base.clone().into(),
                numbered(0..199).into(),
            ),
            (
                "an append to a file without a last newline",
                b"a\nb\nc\nd\ne".to_vec(),
                b"a\nb\nc\nd\nef\n".to_vec(),
            ),
            (
                "two changes far apart",
                base.clone().into(),
                format!("first\n{}{}last\n", numbered(1..150), numbered(150..199)).into(),
            ),
            (
                "repeated lines at the change",
                b"x\nx\nx\nx\nx\nx\n".to_vec(),
                b"x\nx\nx\nx\nx\nx\nx\n".to_vec(),
            ),
            (
                "a change across a streamed chunk's end, an append after it",
                long.clone().into(),
                {
                    let mut changed = long.clone().into_bytes();
                    changed.splice(CHUNK_BYTES - 3..CHUNK_BYTES + 3, *b"<chunk>");
                    changed.extend_from_slice(b"appended\n");
                    changed
                },
            ),
            (
                "the whole file replaced",
                base.clone().into(),
                b"other\n".to_vec(),
            ),
        ];
        for (case, old, new) in cases {
            let (whole, large) = both_ways(&old, &new);
            let hunks = |lines: &[(char, Vec<u8>)]| -> Vec<(char, String)> {
                lines
                    .iter()
                    .filter(|(origin, _)| *origin != 'F')
                    .map(|(origin, text)| (*origin, String::from_utf8_lossy(text).into_owned()))
                    .collect()
            };
            assert_eq!(
                hunks(&large),
                hunks(&whole),
                "{case}: the middle's hunks, renumbered, are the whole file's"
            );
            let header = |lines: &[(char, Vec<u8>)]| {
                lines
                    .iter()
                    .filter(|(origin, _)| *origin == 'F')
                    .map(|(_, text)| String::from_utf8_lossy(text).into_owned())
                    .collect::<String>()
            };
            assert_eq!(header(&large), header(&whole), "{case}: git's file header");
        }
    }

    #[test]
    fn an_added_or_deleted_large_file_has_gits_header_and_lines() {
        let text = numbered(0..20);
        for (case, old, new) in [
            ("added", None, Some(text.as_bytes())),
            ("deleted", Some(text.as_bytes()), None),
        ] {
            let (whole, large) = sides(old, new);
            assert_eq!(large, whole, "{case}: the same patch, header included");
        }
    }

    #[test]
    fn a_change_too_large_to_diff_is_named_with_its_extent_and_line_counts() {
        let lines = (LARGE_FILE_BYTES / 8) as usize + 1;
        let old = format!("kept\n{}", "old 1234\n".repeat(lines));
        let new = format!("kept\n{}", "new 12345\n".repeat(lines));
        let (_, large) = both_ways(old.as_bytes(), new.as_bytes());
        let shown: Vec<(char, String)> = large
            .iter()
            .filter(|(origin, _)| *origin != 'F')
            .map(|(origin, text)| (*origin, String::from_utf8_lossy(text).into_owned()))
            .collect();
        assert_eq!(
            shown,
            vec![(
                'N',
                format!(
                    "[grove: this file's change spans 9.0 MiB of the old file and 10.0 MiB of \
                     the new, from its line 2: too large to diff in memory, so its lines are \
                     not shown; read them with read_file or grep: {lines} lines there became \
                     {lines}]\n"
                )
            )],
            "the note says what is not shown and where"
        );
    }

    #[test]
    fn a_hunk_header_is_moved_down_by_the_lines_cut_off() {
        assert_eq!(
            [
                moved_hunk_header(b"@@ -4,7 +4,8 @@ fn main\n", 100),
                moved_hunk_header(b"@@ -0,0 +1 @@\n", 10),
                moved_hunk_header(b"not a header\n", 10),
            ],
            [
                b"@@ -104,7 +104,8 @@ fn main\n".to_vec(),
                b"@@ -10,0 +11 @@\n".to_vec(),
                b"not a header\n".to_vec(),
            ],
            "both starts move, counts and the section heading stay"
        );
    }
}
