//! The patch of a file too large for a line diff in memory (a worker appending to a
//! 200 MiB log or data file).
//!
//! A line diff of two 200 MiB blobs held grove's memory at five times the file (both
//! blobs, then the diff engine's record of every line of each). This module owns the
//! bounded way: both sides are read once, their common start and end are cut off at
//! line boundaries (the change of an append or of a few lines is then small), and only
//! what lies between is diffed, its hunks numbered as in the whole file. A change whose
//! middle is itself too large is named with its extent and line counts, never shown cut
//! without saying so. It must produce the same patch as the whole-file diff whenever the
//! changed region is small: what the reviewer reads is what merges.

use git2::{Delta, DiffOptions, Patch};

use crate::text::quoted_path;

/// A side larger than this is diffed by [`file_patch`], not by a line diff of the whole.
pub(super) const LARGE_FILE_BYTES: u64 = 8 << 20;

/// How much of a file's start git reads to call it binary.
pub(super) const BINARY_SNIFF_BYTES: usize = 8_000;

/// Lines of context around each change, as git's default.
const CONTEXT_LINES: usize = 3;

/// True when a side of `delta` is over [`LARGE_FILE_BYTES`] (its size read from the
/// object's header, not its content).
pub(super) fn is_large(
    repo: &git2::Repository,
    delta: &git2::DiffDelta<'_>,
) -> Result<bool, git2::Error> {
    let odb = repo.odb()?;
    for side in [delta.old_file(), delta.new_file()] {
        if side.id().is_zero() || side.mode() == git2::FileMode::Commit {
            continue;
        }
        let (size, _) = odb.read_header(side.id())?;
        if size as u64 > LARGE_FILE_BYTES {
            return Ok(true);
        }
    }
    Ok(false)
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

/// The diff of a large file: both sides read once, only the middle diffed.
pub(super) fn file_patch(
    repo: &git2::Repository,
    delta: &git2::DiffDelta<'_>,
) -> Result<LargeFile, git2::Error> {
    let content = |side: git2::DiffFile<'_>| -> Result<Option<git2::Blob<'_>>, git2::Error> {
        if side.id().is_zero() || side.mode() == git2::FileMode::Commit {
            return Ok(None);
        }
        repo.find_blob(side.id()).map(Some)
    };
    let (old_blob, new_blob) = (content(delta.old_file())?, content(delta.new_file())?);
    let old = old_blob.as_ref().map_or(&[][..], git2::Blob::content);
    let new = new_blob.as_ref().map_or(&[][..], git2::Blob::content);
    let binary = [old, new]
        .iter()
        .any(|side| side[..side.len().min(BINARY_SNIFF_BYTES)].contains(&0));
    let cut = Cut::of(old, new);
    let (middle_old, middle_new) = (cut.middle(old), cut.middle(new));
    let mut lines = vec![('F', header_of(delta))];
    let (added, removed) = if middle_old.len() as u64 > LARGE_FILE_BYTES
        || middle_new.len() as u64 > LARGE_FILE_BYTES
    {
        let (changed_old, changed_new) = (cut.changed(old), cut.changed(new));
        let (removed, added) = (line_count(changed_old), line_count(changed_new));
        let note = format!(
            "[grove: this file's change spans {} of the old file and {} of the new, from \
             its line {}: too large to diff in memory, so its lines are not shown; read them \
             with read_file or grep: {removed} lines there became {added}]\n",
            size_text(changed_old.len()),
            size_text(changed_new.len()),
            count_lines(&old[..cut.changed_prefix]) + 1,
        );
        lines.push(('N', note.into_bytes()));
        (added, removed)
    } else {
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
            middle_old,
            path.as_deref(),
            middle_new,
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
                        with_heading(header, || heading_before(old, cut.prefix)),
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
    fn of(old: &[u8], new: &[u8]) -> Self {
        let same = old.iter().zip(new).take_while(|(a, b)| a == b).count();
        // Back to the start of the line the first difference is in, then the context.
        let changed_prefix = line_start_before(old, same);
        let mut prefix = changed_prefix;
        for _ in 0..CONTEXT_LINES {
            if prefix == 0 {
                break;
            }
            prefix = line_start_before(old, prefix - 1);
        }
        let (old_rest, new_rest) = (&old[changed_prefix..], &new[changed_prefix..]);
        let same_end = old_rest
            .iter()
            .rev()
            .zip(new_rest.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let (old_at, new_at) = (old_rest.len() - same_end, new_rest.len() - same_end);
        let starts_line = |side: &[u8], at: usize| at == 0 || side[at - 1] == b'\n';
        // The common end must start a line on both sides: past the first newline in it
        // unless it already does (its bytes are the same on both sides from there).
        let changed_end = if starts_line(old_rest, old_at) && starts_line(new_rest, new_at) {
            old_at
        } else {
            line_start_after(old_rest, old_at)
        };
        let mut end = changed_end;
        for _ in 0..CONTEXT_LINES {
            end = line_start_after(old_rest, end);
        }
        Self {
            prefix,
            suffix: old_rest.len() - end,
            changed_prefix,
            changed_suffix: old_rest.len() - changed_end,
            lines_before: count_lines(&old[..prefix]),
        }
    }

    /// What lies between the common start and end, context lines included.
    fn middle<'a>(&self, side: &'a [u8]) -> &'a [u8] {
        &side[self.prefix..side.len() - self.suffix]
    }

    /// What changed, without context.
    fn changed<'a>(&self, side: &'a [u8]) -> &'a [u8] {
        &side[self.changed_prefix..side.len() - self.changed_suffix]
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
        let large = file_patch(&repo, &diff.get_delta(0).unwrap()).unwrap();
        let (_, added, removed) = patch.line_stats().unwrap();
        assert_eq!(
            (large.added, large.removed),
            (added as u64, removed as u64),
            "the same line counts"
        );
        (whole, large.lines)
    }

    fn numbered(lines: std::ops::Range<usize>) -> String {
        lines.map(|n| format!("line {n}\n")).collect()
    }

    #[test]
    fn a_small_change_in_a_large_file_is_the_patch_the_whole_file_diff_writes() {
        let base = numbered(0..200);
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
