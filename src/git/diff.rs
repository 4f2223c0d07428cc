//! Diffs of a subtask branch against its base: the structured diffstat, the capped
//! unified patch the reviewer reads, and the coloured rendering for the terminal.
//!
//! This module owns what a diff may contain when it leaves grove: every changed byte a
//! reviewer must judge (content alone decides what is binary, and a binary file's lines
//! are written out, never only named), and a patch over its cap says exactly what it
//! left out. It must never run textconv or external diff programs, nor let a
//! repository's attributes decide what is shown.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use similar::{ChangeTag, TextDiff};

use super::Repo;
use super::error::GitError;
use super::large_diff::{self, BINARY_SNIFF_BYTES, PatchLines};
use super::names::CommitId;
use crate::text::{escaped_bytes, needs_byte_escapes, printable};

/// The line over the first hunk of a file whose bytes are written out.
const ESCAPED_NOTE: &str = "[grove: this file holds NUL bytes or bytes that are not UTF-8; \
     its lines are written out: a control character or a byte that is not UTF-8 as \\xNN, a \
     backslash as \\\\]\n";

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

impl Repo {
    /// The diff of `head` against `base` (`git diff --find-renames base..head`), its
    /// patch capped at `max_patch_bytes` (whole files are kept while they fit; the rest
    /// are named).
    ///
    /// Taken in process: every subtask's review waits on it, and 32 `git diff` processes
    /// at once were 50 ms of the burst before their reviewers could start. libgit2 writes
    /// git's patch format and never runs a textconv or external diff program.
    pub async fn diff(
        &self,
        base: CommitId,
        head: CommitId,
        max_patch_bytes: usize,
    ) -> Result<BranchDiff, GitError> {
        let repo = self.clone();
        let range = PathBuf::from(format!("{base}..{head}"));
        let (stat, patch) =
            Self::blocking("diff", range, move || repo.diff_blocking(base, head)).await?;
        Ok(BranchDiff {
            base,
            head,
            stat,
            patch: cap_patch(&patch, max_patch_bytes),
        })
    }

    /// The diffstat and the whole patch of `head` against `base`.
    fn diff_blocking(
        &self,
        base: CommitId,
        head: CommitId,
    ) -> Result<(DiffStat, String), GitError> {
        self.read("the diff of two commits", |repo| {
            let old = repo.find_commit(base.oid())?.tree()?;
            let new = repo.find_commit(head.oid())?.tree()?;
            let mut options = git2::DiffOptions::new();
            // git's defaults: a/ and b/, 3 lines of context, the indent heuristic.
            // Content alone decides what is text: a repository's `-diff` or `binary`
            // attribute (a worker can merge one) never hides a change from its reviewer.
            options
                .old_prefix("a/")
                .new_prefix("b/")
                .context_lines(3)
                .indent_heuristic(true)
                .force_text(true);
            super::tree_diff::narrow(repo, Some(&old), &new, &mut options)?;
            let mut diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))?;
            diff.find_similar(Some(git2::DiffFindOptions::new().renames(true)))?;
            let mut files = Vec::with_capacity(diff.deltas().len());
            for (index, delta) in diff.deltas().enumerate() {
                if large_diff::is_large(repo, &delta)? {
                    let large = large_diff::file_patch(repo, &delta)?;
                    let stat = stat_of(&delta, large.added, large.removed, large.binary);
                    files.push((stat, delta.status(), patch_text(&large.lines, &delta)));
                } else if let Some(mut file) = git2::Patch::from_diff(&diff, index)? {
                    let status = file.delta().status();
                    let binary = sides_hold_nul(repo, &file.delta())?;
                    let (_, added, removed) = file.line_stats()?;
                    let stat = stat_of(&file.delta(), added as u64, removed as u64, binary);
                    files.push((
                        stat,
                        status,
                        patch_text(&lines_of(&mut file)?, &file.delta()),
                    ));
                }
            }
            let (files, patch) = join_typechanges(files);
            Ok((
                DiffStat { files },
                String::from_utf8_lossy(&patch).into_owned(),
            ))
        })
    }

    /// Renders the diff for a terminal with the `similar` crate: file headers, hunks
    /// with 3 lines of context, and word-level highlights in [`Colour::Always`].
    /// Binary (and non-UTF-8) files are named, not shown.
    pub fn render_diff(
        &self,
        base: CommitId,
        head: CommitId,
        stat: &DiffStat,
        colour: Colour,
    ) -> Result<String, GitError> {
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
                colour.paint(
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
            render_text_diff(&mut out, &printable(&old), &printable(&new), colour);
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

/// Whether a rendered diff carries terminal colour codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// ANSI colours: red removals, green additions, cyan hunk headers, bold file titles
    /// and underlined changed words, for a terminal that shows them.
    Always,
    /// Plain text, for a pipe, a file or `NO_COLOR`.
    Never,
}

impl Colour {
    fn paint(self, code: &str, text: &str) -> String {
        match self {
            Self::Always => format!("{code}{text}{RESET}"),
            Self::Never => text.to_owned(),
        }
    }
}

fn render_text_diff(out: &mut String, old: &str, new: &str, style: Colour) {
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
                    if style == Colour::Always && emphasized {
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

/// The stat and the patch of every file, in git's order. A file that became a symlink
/// (or back) is an addition and then a deletion of the same path in libgit2's; git
/// writes the deletion's patch first, and one numstat record for both.
fn join_typechanges(files: Vec<(FileStat, git2::Delta, Vec<u8>)>) -> (Vec<FileStat>, Vec<u8>) {
    let mut patch = Vec::new();
    let mut stats: Vec<FileStat> = Vec::with_capacity(files.len());
    let mut files = files.into_iter().peekable();
    while let Some((mut stat, status, mut text)) = files.next() {
        let typechange = files.peek().is_some_and(|(next, next_status, _)| {
            next.path == stat.path
                && (status, *next_status) == (git2::Delta::Added, git2::Delta::Deleted)
        });
        if let Some((deleted, _, deleted_text)) = files.next_if(|_| typechange) {
            stat.removed += deleted.removed;
            if deleted.binary {
                (stat.binary, stat.added, stat.removed) = (true, 0, 0);
            }
            text = [deleted_text, text].concat();
        }
        patch.extend_from_slice(&text);
        stats.push(stat);
    }
    (stats, patch)
}

/// True when either side of `delta` is binary as git judges content (a NUL in its first
/// 8,000 bytes), whatever the repository's attributes say.
fn sides_hold_nul(
    repo: &git2::Repository,
    delta: &git2::DiffDelta<'_>,
) -> Result<bool, git2::Error> {
    for side in [delta.old_file(), delta.new_file()] {
        if side.id().is_zero() || side.mode() == git2::FileMode::Commit {
            continue;
        }
        let blob = repo.find_blob(side.id())?;
        let start = &blob.content()[..blob.size().min(BINARY_SNIFF_BYTES)];
        if start.contains(&0) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One file's line counts, as `git diff --numstat` gives them (none for a binary file).
fn stat_of(delta: &git2::DiffDelta<'_>, added: u64, removed: u64, binary: bool) -> FileStat {
    let path = |side: git2::DiffFile<'_>| {
        side.path_bytes()
            .map(|path| String::from_utf8_lossy(path).into_owned())
    };
    let (new_path, old_path) = (path(delta.new_file()), path(delta.old_file()));
    let renamed = delta.status() == git2::Delta::Renamed;
    let count = |n: u64| if binary { 0 } else { n };
    FileStat {
        path: new_path.or_else(|| old_path.clone()).unwrap_or_default(),
        old_path: if renamed { old_path } else { None },
        added: count(added),
        removed: count(removed),
        binary,
    }
}

/// The lines libgit2 prints of one file's patch: each line's origin and bytes.
fn lines_of(file: &mut git2::Patch<'_>) -> Result<PatchLines, git2::Error> {
    let mut lines = Vec::new();
    file.print(&mut |_, _, line| {
        lines.push((line.origin(), line.content().to_vec()));
        true
    })?;
    Ok(lines)
}

/// One file's section of the patch, as git writes it. libgit2's differs in one way: git
/// ends a `---`/`+++` line with a tab when its path has a space in it (so that `patch`
/// reads the name whole), unless the side is `/dev/null`.
///
/// A file whose changed or context lines hold a NUL or bytes that are not UTF-8 (a
/// script with one NUL still runs) is shown whole all the same, its lines written out
/// byte for byte ([`escaped_bytes`]) under a note saying so: never "binary, not shown".
fn patch_text(lines: &[(char, Vec<u8>)], delta: &git2::DiffDelta<'_>) -> Vec<u8> {
    let escaped = lines
        .iter()
        .any(|(origin, content)| matches!(origin, '+' | '-' | ' ') && needs_byte_escapes(content));
    let spaced = |side: git2::DiffFile<'_>| side.path_bytes().is_some_and(|p| p.contains(&b' '));
    let (old_spaced, new_spaced) = (spaced(delta.old_file()), spaced(delta.new_file()));
    let mut text = Vec::new();
    let mut noted = false;
    for (origin, content) in lines {
        match origin {
            '+' | '-' | ' ' if escaped => {
                text.push(*origin as u8);
                let (body, newline) = match content.strip_suffix(b"\n") {
                    Some(body) => (body, "\n"),
                    None => (&content[..], ""),
                };
                text.extend_from_slice(escaped_bytes(body).as_bytes());
                text.extend_from_slice(newline.as_bytes());
            }
            'H' if escaped && !noted => {
                noted = true;
                text.extend_from_slice(ESCAPED_NOTE.as_bytes());
                text.extend_from_slice(content);
            }
            '+' | '-' | ' ' => {
                text.push(*origin as u8);
                text.extend_from_slice(content);
            }
            'F' => {
                for header in content.split_inclusive(|b| *b == b'\n') {
                    let spaced = match header {
                        [b'-', b'-', b'-', b' ', ..] => old_spaced,
                        [b'+', b'+', b'+', b' ', ..] => new_spaced,
                        _ => false,
                    };
                    match header.strip_suffix(b"\n") {
                        Some(label) if spaced && !label.ends_with(b"/dev/null") => {
                            text.extend_from_slice(label);
                            text.extend_from_slice(b"\t\n");
                        }
                        _ => text.extend_from_slice(header),
                    }
                }
            }
            _ => text.extend_from_slice(content),
        }
    }
    text
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
            Colour::Never,
        );
        assert_eq!(plain, "@@ -1,2 +1,2 @@\n a\n-hello world\n+hello there\n");
        let mut coloured = String::new();
        render_text_diff(
            &mut coloured,
            "hello world\n",
            "hello there\n",
            Colour::Always,
        );
        assert!(
            coloured.contains(&format!("{EMPHASIS}there{RESET}")),
            "the changed word is emphasised: {coloured:?}"
        );
    }
}
