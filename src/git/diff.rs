//! Diffs of a subtask branch against its base: the structured diffstat, the capped
//! unified patch the reviewer reads, and the coloured rendering for the terminal.
//!
//! This module owns what a diff may contain when it leaves grove: binary files are
//! named, never dumped, and a patch over its cap says exactly what it left out. It must
//! never run textconv or external diff programs.

use std::fmt::Write as _;

use serde::Serialize;
use similar::{ChangeTag, TextDiff};

use super::Repo;
use super::error::GitError;
use super::names::CommitId;
use crate::text::printable;

/// One file's line counts between two commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileStat {
    /// The path in the newer commit.
    pub path: String,
    /// The path in the older commit when the file was renamed.
    pub old_path: Option<String>,
    /// Lines added.
    pub added: u64,
    /// Lines removed.
    pub removed: u64,
    /// Binary files have no line counts (`added` and `removed` are 0).
    pub binary: bool,
}

/// The structured diffstat of a branch against its base.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct DiffStat {
    /// One entry per changed file, in git's path order.
    pub files: Vec<FileStat>,
}

impl DiffStat {
    /// Lines added over all files.
    pub fn added(&self) -> u64 {
        self.files.iter().map(|f| f.added).sum()
    }

    /// Lines removed over all files.
    pub fn removed(&self) -> u64 {
        self.files.iter().map(|f| f.removed).sum()
    }

    /// One line, e.g. `3 files changed, 10 insertions(+), 2 deletions(-)`.
    pub fn summary(&self) -> String {
        let files = self.files.len();
        let plural = |n: u64, one: &str, many: &str| {
            if n == 1 {
                format!("{n} {one}")
            } else {
                format!("{n} {many}")
            }
        };
        format!(
            "{}, {}, {}",
            plural(files as u64, "file changed", "files changed"),
            plural(self.added(), "insertion(+)", "insertions(+)"),
            plural(self.removed(), "deletion(-)", "deletions(-)"),
        )
    }
}

/// A unified patch, possibly cut to a size cap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Patch {
    /// The patch text; when truncated it ends with a note naming what was left out.
    pub text: String,
    /// Files whose changes are missing from `text`, wholly or in part.
    pub omitted: Vec<String>,
}

impl Patch {
    /// True when the cap cut something out.
    pub fn is_truncated(&self) -> bool {
        !self.omitted.is_empty()
    }
}

/// Everything the reviewer and the user see of one branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BranchDiff {
    /// The older side (the run's base).
    pub base: CommitId,
    /// The newer side (the branch tip).
    pub head: CommitId,
    /// Per-file line counts, never capped.
    pub stat: DiffStat,
    /// The unified patch, capped.
    pub patch: Patch,
}

const DIFF_FLAGS: &[&str] = &[
    "diff",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--find-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

impl Repo {
    /// The diff of `head` against `base` (`git diff base..head`), its patch capped at
    /// `max_patch_bytes` (whole files are kept while they fit; the rest are named).
    pub async fn diff(
        &self,
        base: CommitId,
        head: CommitId,
        max_patch_bytes: usize,
    ) -> Result<BranchDiff, GitError> {
        let (base_hex, head_hex) = (base.to_string(), head.to_string());
        // One process for both (`-z` changes only the numstat part): a process start is
        // dear on a virtual machine, where glibc's start-up `cpuid` traps.
        let output = self
            .git()
            .args(DIFF_FLAGS)
            .args(["--numstat", "-z", "--patch", &base_hex, &head_hex])
            .run()
            .await?;
        let (numstat, patch) = split_numstat_patch(&output.stdout)?;
        let stat = parse_numstat(numstat)?;
        let patch = cap_patch(&String::from_utf8_lossy(patch), max_patch_bytes);
        Ok(BranchDiff {
            base,
            head,
            stat,
            patch,
        })
    }

    /// Renders the diff for a terminal with the `similar` crate: file headers, hunks
    /// with 3 lines of context, and word-level highlights when `colour` is on.
    /// Binary (and non-UTF-8) files are named, not shown.
    pub fn render_diff(
        &self,
        base: CommitId,
        head: CommitId,
        stat: &DiffStat,
        colour: bool,
    ) -> Result<String, GitError> {
        let style = Style { colour };
        let mut out = String::new();
        for file in &stat.files {
            let old_path = file.old_path.as_deref().unwrap_or(&file.path);
            // Paths and contents are the repository's: no escape in them reaches a terminal.
            let title = match &file.old_path {
                Some(old) => format!("{} → {}", printable(old), printable(&file.path)),
                None => printable(&file.path).into_owned(),
            };
            let _ = writeln!(
                out,
                "{}",
                style.paint(
                    BOLD,
                    &format!("{title} (+{} -{})", file.added, file.removed)
                )
            );
            let texts = if file.binary {
                (None, None)
            } else {
                (
                    self.blob_text(base, old_path)?,
                    self.blob_text(head, &file.path)?,
                )
            };
            let (Some(old), Some(new)) = texts else {
                let _ = writeln!(out, "  binary file changed");
                continue;
            };
            render_text_diff(&mut out, &printable(&old), &printable(&new), style);
        }
        let _ = writeln!(out, "{}", stat.summary());
        Ok(out)
    }

    /// The text of `path` at `commit`: `Some("")` when absent, `None` when binary.
    fn blob_text(&self, commit: CommitId, path: &str) -> Result<Option<String>, GitError> {
        self.read(path, |repo| {
            let tree = repo.find_commit(commit.oid())?.tree()?;
            let entry = match tree.get_path(std::path::Path::new(path)) {
                Ok(entry) => entry,
                Err(e) if e.code() == git2::ErrorCode::NotFound => {
                    return Ok(Some(String::new()));
                }
                Err(e) => return Err(e),
            };
            let object = entry.to_object(repo)?;
            let Some(blob) = object.as_blob() else {
                // A submodule or directory entry: show its id as its content.
                return Ok(Some(format!("{}\n", entry.id())));
            };
            if blob.is_binary() {
                return Ok(None);
            }
            Ok(String::from_utf8(blob.content().to_vec()).ok())
        })
    }
}

const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const EMPHASIS: &str = "\x1b[1;4m";
const RESET: &str = "\x1b[0m";

#[derive(Clone, Copy)]
struct Style {
    colour: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("{code}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }
}

fn render_text_diff(out: &mut String, old: &str, new: &str, style: Style) {
    let diff = TextDiff::from_lines(old, new);
    for group in diff.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let old_start = first.old_range().start;
        let new_start = first.new_range().start;
        let old_len = last.old_range().end - old_start;
        let new_len = last.new_range().end - new_start;
        let header = format!(
            "@@ -{},{old_len} +{},{new_len} @@",
            old_start + 1,
            new_start + 1
        );
        let _ = writeln!(out, "{}", style.paint(CYAN, &header));
        for op in &group {
            for change in diff.iter_inline_changes(op) {
                let (sign, colour) = match change.tag() {
                    ChangeTag::Delete => ("-", RED),
                    ChangeTag::Insert => ("+", GREEN),
                    ChangeTag::Equal => (" ", ""),
                };
                let mut line = String::new();
                for (emphasized, value) in change.iter_strings_lossy() {
                    let value = value.trim_end_matches(['\n', '\r']);
                    if style.colour && emphasized {
                        line.push_str(&format!("{EMPHASIS}{value}{RESET}{colour}"));
                    } else {
                        line.push_str(value);
                    }
                }
                let text = format!("{sign}{line}");
                if colour.is_empty() {
                    let _ = writeln!(out, "{text}");
                } else {
                    let _ = writeln!(out, "{}", style.paint(colour, &text));
                }
                if change.missing_newline() {
                    let _ = writeln!(out, "\\ No newline at end of file");
                }
            }
        }
    }
}

/// Splits `git diff --numstat -z --patch` output into its numstat records and the patch:
/// each record ends in a NUL (`added\tremoved\tpath`, or `added\tremoved\t` then the old
/// and the new path of a rename, each ending in a NUL), and one more NUL follows the last
/// record when a patch comes after them.
fn split_numstat_patch(raw: &[u8]) -> Result<(&[u8], &[u8]), GitError> {
    let field_end = |from: usize| {
        raw.get(from..)
            .and_then(|rest| rest.iter().position(|b| *b == 0))
            .map(|offset| from + offset)
            .ok_or_else(|| GitError::Parse {
                op: "diff --numstat --patch".to_owned(),
                detail: format!("a numstat field at byte {from} has no NUL after it"),
            })
    };
    let mut at = 0;
    while let Some(&first) = raw.get(at) {
        if first == 0 {
            return Ok((&raw[..at], &raw[at + 1..]));
        }
        let end = field_end(at)?;
        let mut parts = raw[at..end].splitn(3, |b| *b == b'\t');
        let renamed = matches!((parts.next(), parts.next(), parts.next()), (_, _, Some(path)) if path.is_empty());
        at = end + 1;
        if renamed {
            at = field_end(at)? + 1;
            at = field_end(at)? + 1;
        }
    }
    Ok((raw, &[]))
}

/// Parses `git diff --numstat -z`: `added\tremoved\tpath\0`, or for a rename
/// `added\tremoved\t\0old\0new\0`; binary files show `-` for both counts.
fn parse_numstat(raw: &[u8]) -> Result<DiffStat, GitError> {
    let bad = |detail: String| GitError::Parse {
        op: "diff --numstat".to_owned(),
        detail,
    };
    let mut fields = raw.split(|b| *b == 0).map(String::from_utf8_lossy);
    let mut files = Vec::new();
    while let Some(record) = fields.next() {
        if record.is_empty() {
            continue;
        }
        let mut parts = record.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(format!("malformed record {record:?}")));
        };
        let binary = added == "-" && removed == "-";
        let count = |n: &str| -> Result<u64, GitError> {
            if binary {
                Ok(0)
            } else {
                n.parse().map_err(|_| bad(format!("bad line count {n:?}")))
            }
        };
        let (path, old_path) = if path.is_empty() {
            let old = fields
                .next()
                .ok_or_else(|| bad("rename without old path".into()))?;
            let new = fields
                .next()
                .ok_or_else(|| bad("rename without new path".into()))?;
            (new.into_owned(), Some(old.into_owned()))
        } else {
            (path.to_owned(), None)
        };
        files.push(FileStat {
            path,
            old_path,
            added: count(added)?,
            removed: count(removed)?,
            binary,
        });
    }
    Ok(DiffStat { files })
}

/// Keeps whole per-file sections of `patch` while they fit in `max_bytes`, cuts the
/// first one that does not at a line boundary, and names every file left out.
fn cap_patch(patch: &str, max_bytes: usize) -> Patch {
    if patch.len() <= max_bytes {
        return Patch {
            text: patch.to_owned(),
            omitted: Vec::new(),
        };
    }
    let mut sections: Vec<&str> = Vec::new();
    let mut start = 0;
    for (offset, _) in patch.match_indices("\ndiff --git ") {
        sections.push(&patch[start..=offset]);
        start = offset + 1;
    }
    sections.push(&patch[start..]);

    let mut text = String::new();
    let mut omitted = Vec::new();
    for section in sections {
        let room = max_bytes.saturating_sub(text.len());
        if section.len() <= room && omitted.is_empty() {
            text.push_str(section);
            continue;
        }
        if omitted.is_empty() && room > 0 {
            let cut = section[..floor_char_boundary(section, room)]
                .rfind('\n')
                .map_or(0, |i| i + 1);
            text.push_str(&section[..cut]);
        }
        omitted.push(section_path(section));
    }
    let _ = write!(
        text,
        "\n[grove: patch cut at {max_bytes} of {} bytes; changes missing for {} file(s): {}]\n",
        patch.len(),
        omitted.len(),
        omitted.join(", ")
    );
    Patch { text, omitted }
}

fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// The `b/` path of a `diff --git a/x b/y` header (the `a/` path for a deletion).
fn section_path(section: &str) -> String {
    let header = section.lines().next().unwrap_or_default();
    let paths = header.strip_prefix("diff --git ").unwrap_or(header);
    match paths.rfind(" b/") {
        Some(i) => paths[i + 3..].to_owned(),
        None => paths.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn numstat_and_patch_split_after_the_last_record_renames_and_tabs_included() {
        let records: &[u8] = b"1\t2\tsrc/a\tb.rs\0-\t-\tlogo.png\x000\t0\t\0old.txt\0new.txt\0";
        let patch: &[u8] = b"diff --git a/x b/x\n\0not a record\n";
        let raw = [records, b"\0", patch].concat();
        assert_eq!(
            split_numstat_patch(&raw).unwrap(),
            (records, patch),
            "the patch starts after the NUL that follows the last record, a rename's two \
             paths being part of its record"
        );
        assert_eq!(
            split_numstat_patch(records).unwrap(),
            (records, &b""[..]),
            "no patch"
        );
        assert_eq!(split_numstat_patch(b"").unwrap(), (&b""[..], &b""[..]));
        assert!(
            split_numstat_patch(b"1\t2\tno-nul").is_err(),
            "a record cut short is an error, not a guess"
        );
    }

    #[test]
    fn numstat_parses_plain_renamed_and_binary_files() {
        let raw = b"1\t2\tsrc/a.rs\0-\t-\tlogo.png\x000\t0\t\0old.txt\0new.txt\0";
        let stat = parse_numstat(raw).unwrap();
        assert_eq!(
            stat.files,
            vec![
                FileStat {
                    path: "src/a.rs".into(),
                    old_path: None,
                    added: 1,
                    removed: 2,
                    binary: false
                },
                FileStat {
                    path: "logo.png".into(),
                    old_path: None,
                    added: 0,
                    removed: 0,
                    binary: true
                },
                FileStat {
                    path: "new.txt".into(),
                    old_path: Some("old.txt".into()),
                    added: 0,
                    removed: 0,
                    binary: false
                },
            ]
        );
        assert_eq!(
            stat.summary(),
            "3 files changed, 1 insertion(+), 2 deletions(-)"
        );
    }

    #[test]
    fn a_capped_patch_keeps_whole_files_and_names_the_rest() {
        let first = "diff --git a/a b/a\n+1\n";
        let second = "diff --git a/b b/b\n+2222222222\n+3333333333\n";
        let third = "diff --git a/c b/c\n+4\n";
        let patch = format!("{first}{second}{third}");
        let capped = cap_patch(&patch, first.len() + 25);
        assert_eq!(capped.omitted, vec!["b".to_owned(), "c".to_owned()]);
        assert!(
            capped
                .text
                .starts_with(&format!("{first}diff --git a/b b/b\n")),
            "kept text is whole lines of the original: {:?}",
            capped.text
        );
        assert!(
            capped
                .text
                .ends_with("changes missing for 2 file(s): b, c]\n"),
            "the note names what was left out: {:?}",
            capped.text
        );
        assert_eq!(
            cap_patch(&patch, patch.len()).text,
            patch,
            "under the cap: unchanged"
        );
    }

    #[test]
    fn rendering_without_colour_has_no_escape_codes_and_with_colour_highlights_words() {
        let mut plain = String::new();
        render_text_diff(
            &mut plain,
            "a\nhello world\n",
            "a\nhello there\n",
            Style { colour: false },
        );
        assert_eq!(plain, "@@ -1,2 +1,2 @@\n a\n-hello world\n+hello there\n");
        let mut coloured = String::new();
        render_text_diff(
            &mut coloured,
            "hello world\n",
            "hello there\n",
            Style { colour: true },
        );
        assert!(
            coloured.contains(&format!("{EMPHASIS}there{RESET}")),
            "the changed word is emphasised: {coloured:?}"
        );
    }
}
