//! A subtask's diff as side-by-side rows: old | new per hunk, removed and added lines
//! paired up so a changed line sits next to what it replaced.
//!
//! This file owns turning git's unified patch into rows and the per-file cap. It must
//! never run git itself (the gatherer hands it a [`Patch`]) and never drop a change
//! silently: whatever a cap leaves out is counted and said.

use serde::Serialize;
use similar::{Algorithm, ChangeTag};

use crate::git::{DiffStat, Patch};

/// The note `cap_patch` appends to a patch it cut; its text is not a change.
const PATCH_CUT_NOTE: &str = "\n[grove: patch cut at ";

/// One file of a side-by-side diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    /// The path in the newer commit.
    pub path: String,
    /// The path in the older commit, when the file was renamed.
    pub old_path: Option<String>,
    pub added: u64,
    pub removed: u64,
    /// Binary files are named, never shown.
    pub binary: bool,
    pub hunks: Vec<Hunk>,
    /// Rows not shown because the file is over the per-file cap.
    pub rows_left_out: usize,
    /// True when the patch ended before this file's changes did (the patch's own size
    /// cap), so the rows shown, if any, are not all of them.
    pub cut: bool,
}

/// One hunk: its `@@` header and its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hunk {
    pub header: String,
    pub rows: Vec<Row>,
}

/// One row of the side-by-side view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The line on the old side, if the row has one.
    pub old: Option<Line>,
    /// The line on the new side, if the row has one.
    pub new: Option<Line>,
    /// False for a context line (the same on both sides).
    pub changed: bool,
}

/// One numbered line of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// 1-based line number in its side's file.
    pub number: u32,
    pub text: String,
}

/// A piece of a changed line, for word-level highlights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    pub text: &'a str,
    /// True when this piece differs from the other side.
    pub changed: bool,
}

/// The side-by-side rows of `patch`, one [`FileDiff`] per file of `stat`, each showing
/// at most `max_rows_per_file` rows. The patch's per-file sections come in `stat`'s
/// order (both come from `git diff` with the same flags); files the patch does not
/// reach are marked `cut`.
pub fn side_by_side(stat: &DiffStat, patch: &Patch, max_rows_per_file: usize) -> Vec<FileDiff> {
    let text = match (patch.is_truncated(), patch.text.rfind(PATCH_CUT_NOTE)) {
        (true, Some(note)) => &patch.text[..note],
        _ => patch.text.as_str(),
    };
    let sections = split_sections(text);
    stat.files
        .iter()
        .enumerate()
        .map(|(index, file)| {
            let section = sections.get(index).copied();
            let mut hunks = section.map(parse_hunks).unwrap_or_default();
            let rows_left_out = cap_rows(&mut hunks, max_rows_per_file);
            FileDiff {
                path: file.path.clone(),
                old_path: file.old_path.clone(),
                added: file.added,
                removed: file.removed,
                binary: file.binary,
                hunks,
                rows_left_out,
                cut: section.is_none() || patch.omitted.contains(&file.path),
            }
        })
        .collect()
}

/// The per-file sections of a unified patch, each starting at its `diff --git` line.
fn split_sections(text: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = text
        .match_indices("\ndiff --git ")
        .map(|(offset, _)| offset + 1)
        .collect();
    if text.starts_with("diff --git ") {
        starts.insert(0, 0);
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| &text[start..starts.get(i + 1).copied().unwrap_or(text.len())])
        .collect()
}

/// The hunks of one file's section; header lines before the first `@@` are skipped.
fn parse_hunks(section: &str) -> Vec<Hunk> {
    let mut hunks: Vec<Hunk> = Vec::new();
    let mut block = ChangeBlock::default();
    let (mut old_number, mut new_number) = (0u32, 0u32);
    for line in section.lines() {
        if let Some((old_start, new_start)) = hunk_start(line) {
            if let Some(hunk) = hunks.last_mut() {
                block.flush_into(&mut hunk.rows);
            }
            hunks.push(Hunk {
                header: line.to_owned(),
                rows: Vec::new(),
            });
            (old_number, new_number) = (old_start, new_start);
            continue;
        }
        let Some(hunk) = hunks.last_mut() else {
            continue; // `diff --git`, `index`, `---`, `+++`, mode lines
        };
        let (marker, text) = line.split_at(line.len().min(1));
        match marker {
            "-" => {
                block.removed.push(Line {
                    number: old_number,
                    text: text.to_owned(),
                });
                old_number += 1;
            }
            "+" => {
                block.added.push(Line {
                    number: new_number,
                    text: text.to_owned(),
                });
                new_number += 1;
            }
            // A context line; an empty line is a context line whose space was lost.
            " " | "" => {
                block.flush_into(&mut hunk.rows);
                hunk.rows.push(Row {
                    old: Some(Line {
                        number: old_number,
                        text: text.to_owned(),
                    }),
                    new: Some(Line {
                        number: new_number,
                        text: text.to_owned(),
                    }),
                    changed: false,
                });
                old_number += 1;
                new_number += 1;
            }
            // `\ No newline at end of file` and anything unknown carry no line.
            _ => {}
        }
    }
    if let Some(hunk) = hunks.last_mut() {
        block.flush_into(&mut hunk.rows);
    }
    hunks
}

/// Consecutive removed and added lines, paired up into rows when the block ends.
#[derive(Default)]
struct ChangeBlock {
    removed: Vec<Line>,
    added: Vec<Line>,
}

impl ChangeBlock {
    fn flush_into(&mut self, rows: &mut Vec<Row>) {
        let mut removed = std::mem::take(&mut self.removed).into_iter();
        let mut added = std::mem::take(&mut self.added).into_iter();
        loop {
            let (old, new) = (removed.next(), added.next());
            if old.is_none() && new.is_none() {
                break;
            }
            rows.push(Row {
                old,
                new,
                changed: true,
            });
        }
    }
}

/// The old and new start lines of a `@@ -a,b +c,d @@` header.
fn hunk_start(line: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let start = |range: &str| range.split(',').next()?.parse::<u32>().ok();
    Some((start(old)?, start(new)?))
}

/// Keeps at most `max_rows` rows over all hunks; returns how many were dropped.
fn cap_rows(hunks: &mut Vec<Hunk>, max_rows: usize) -> usize {
    let mut room = max_rows;
    let mut dropped = 0;
    hunks.retain_mut(|hunk| {
        let keep = hunk.rows.len().min(room);
        dropped += hunk.rows.len() - keep;
        hunk.rows.truncate(keep);
        room -= keep;
        keep > 0
    });
    dropped
}

/// Lines longer than this are compared whole rather than word by word.
const MAX_WORD_DIFF_CHARS: usize = 2_000;

/// The pieces of `old` and `new` with what differs between them marked, word by word.
pub fn word_segments<'a>(old: &'a str, new: &'a str) -> (Vec<Segment<'a>>, Vec<Segment<'a>>) {
    if old.len() > MAX_WORD_DIFF_CHARS || new.len() > MAX_WORD_DIFF_CHARS {
        return (
            vec![Segment {
                text: old,
                changed: true,
            }],
            vec![Segment {
                text: new,
                changed: true,
            }],
        );
    }
    let (mut old_segments, mut new_segments) = (Vec::new(), Vec::new());
    for (tag, text) in similar::utils::diff_words(Algorithm::Myers, old, new) {
        let (side, changed) = match tag {
            ChangeTag::Equal => {
                old_segments.push(Segment {
                    text,
                    changed: false,
                });
                (&mut new_segments, false)
            }
            ChangeTag::Delete => (&mut old_segments, true),
            ChangeTag::Insert => (&mut new_segments, true),
        };
        side.push(Segment { text, changed });
    }
    (old_segments, new_segments)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::git::FileStat;
    use pretty_assertions::assert_eq;

    fn stat(paths: &[&str]) -> DiffStat {
        DiffStat {
            files: paths
                .iter()
                .map(|path| FileStat {
                    path: (*path).to_owned(),
                    old_path: None,
                    added: 1,
                    removed: 1,
                    binary: false,
                })
                .collect(),
        }
    }

    fn line(number: u32, text: &str) -> Option<Line> {
        Some(Line {
            number,
            text: text.to_owned(),
        })
    }

    const PATCH: &str = "diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n\
        @@ -1,4 +1,4 @@ fn main\n keep\n-old one\n-old two\n+new one\n same\n\\ No newline at end of file\n\
        diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -10 +10,2 @@\n+added\n+more\n";

    #[test]
    fn removed_and_added_lines_pair_up_beside_each_other() {
        let patch = Patch {
            text: PATCH.to_owned(),
            omitted: Vec::new(),
        };
        let files = side_by_side(&stat(&["a.txt", "b.txt"]), &patch, 100);
        assert_eq!(
            files[0].hunks,
            vec![Hunk {
                header: "@@ -1,4 +1,4 @@ fn main".into(),
                rows: vec![
                    Row {
                        old: line(1, "keep"),
                        new: line(1, "keep"),
                        changed: false
                    },
                    Row {
                        old: line(2, "old one"),
                        new: line(2, "new one"),
                        changed: true
                    },
                    Row {
                        old: line(3, "old two"),
                        new: None,
                        changed: true
                    },
                    Row {
                        old: line(4, "same"),
                        new: line(3, "same"),
                        changed: false
                    },
                ],
            }],
            "a removed line sits next to the added line that replaced it"
        );
        assert_eq!(
            files[1].hunks[0].rows,
            vec![
                Row {
                    old: None,
                    new: line(10, "added"),
                    changed: true
                },
                Row {
                    old: None,
                    new: line(11, "more"),
                    changed: true
                },
            ]
        );
        assert!(!files[0].cut && !files[1].cut);
    }

    #[test]
    fn the_per_file_cap_counts_what_it_leaves_out_and_a_cut_patch_marks_its_files() {
        let text = format!("{PATCH}\n[grove: patch cut at 10 of 20 bytes; changes missing]\n");
        let patch = Patch {
            text,
            omitted: vec!["b.txt".into(), "c.txt".into()],
        };
        let files = side_by_side(&stat(&["a.txt", "b.txt", "c.txt"]), &patch, 3);
        assert_eq!(files[0].rows_left_out, 1, "four rows, three shown");
        assert_eq!(files[0].hunks[0].rows.len(), 3);
        assert_eq!(
            files.iter().map(|f| f.cut).collect::<Vec<_>>(),
            vec![false, true, true],
            "files the cut patch did not hold whole are marked"
        );
        assert_eq!(
            files[1].hunks[0].rows.len(),
            2,
            "the note appended to a cut patch is not a line of the last file"
        );
        assert!(files[2].hunks.is_empty());
    }

    #[test]
    fn word_segments_mark_only_the_changed_words() {
        let (old, new) = word_segments("let x = old_name(1);", "let x = new_name(1);");
        let changed = |segments: &[Segment<'_>]| {
            segments
                .iter()
                .filter(|s| s.changed)
                .map(|s| s.text)
                .collect::<String>()
        };
        assert_eq!(changed(&old), "old_name(1);");
        assert_eq!(changed(&new), "new_name(1);");
        assert_eq!(
            old.iter().map(|s| s.text).collect::<String>(),
            "let x = old_name(1);",
            "the segments put together are the line"
        );
    }
}
