//! How large a built-in tool's result may be: the caps grove's own tools keep as they
//! read, as one table, for a result made elsewhere (the grove of a remote tree's host) to
//! be held to before a model sees it.
//!
//! This file owns that a tool's result never reaches a model larger than the same tool
//! run here could make it, whoever made it. It must never be tighter than what a tool
//! here gives (a whole result stays whole), and never drop the end of a command's
//! output: its last lines and its exit code are what a model acts on.

use super::exec::OutputCap;
use super::{grep, list_files, read_file};

/// Room for the lines a tool adds after its capped output (where a read stopped, lines
/// cut, files not listed, a command's notes and exit code).
const NOTE_ROOM: usize = 4 * 1024;

/// Lines `list_files` adds after its paths (none found, how many more, unreadable).
const NOTE_LINES: usize = 3;

/// The longest path a listed line can hold here (Linux's `PATH_MAX`) and its ` (symlink)`.
const LISTED_LINE: usize = 4096 + 11;

/// Bytes of text a command's head or tail of `bytes` bytes can become here: an invalid
/// byte is shown as `U+FFFD`, three bytes.
const fn shown(bytes: usize) -> usize {
    3 * bytes
}

/// What of a result over its cap is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultCap {
    /// The first `bytes`: a file tool's result is cut at its end here too.
    Head { bytes: usize },
    /// The first `lines` lines, within `bytes`: a listing of paths.
    Lines { lines: usize, bytes: usize },
    /// The first `head` and the last `tail` bytes, as `bash` keeps a command's output.
    HeadAndTail { head: usize, tail: usize },
}

/// The cap of built-in tool `name`'s result; a tool not in the table has the largest
/// file tool's (no built-in tool says more than `read_file`).
pub fn result_cap(name: &str) -> ResultCap {
    let output = OutputCap::default();
    match name {
        "grep" => ResultCap::Head {
            bytes: grep::MAX_OUTPUT_BYTES + NOTE_ROOM,
        },
        "list_files" => ResultCap::Lines {
            lines: list_files::MAX_LISTED + NOTE_LINES,
            bytes: list_files::MAX_LISTED * LISTED_LINE + NOTE_ROOM,
        },
        "bash" => ResultCap::HeadAndTail {
            head: shown(output.head),
            tail: shown(output.tail) + NOTE_ROOM,
        },
        _ => ResultCap::Head {
            bytes: read_file::MAX_OUTPUT_BYTES + NOTE_ROOM,
        },
    }
}

/// `content`, the result of built-in tool `name` made elsewhere, held to that tool's cap
/// here: unchanged when within it, else cut (at character boundaries) with a line that
/// says how much was cut and why.
pub fn held_to_cap(name: &str, content: String) -> String {
    let total = content.len();
    match result_cap(name) {
        ResultCap::Lines { lines, bytes } => {
            let after_lines = content
                .match_indices('\n')
                .nth(lines.saturating_sub(1))
                .map_or(total, |(at, _)| at + 1);
            let end = after_lines.min(floor_boundary(&content, bytes));
            if end == total {
                return content;
            }
            format!(
                "{}\n[grove cut {} bytes: the result was {total} bytes, over the {lines} lines \
                 or {bytes} bytes `{name}` gives here]\n",
                &content[..end],
                total - end
            )
        }
        ResultCap::Head { bytes } if total > bytes => {
            let end = floor_boundary(&content, bytes);
            format!(
                "{}\n[grove cut {} bytes: the result was {total} bytes, over the {bytes} \
                 bytes `{name}` gives here]\n",
                &content[..end],
                total - end
            )
        }
        ResultCap::HeadAndTail { head, tail } if total > head + tail => {
            let head_end = floor_boundary(&content, head);
            let tail_start = ceil_boundary(&content, total - tail);
            format!(
                "{}\n[grove cut {} bytes from the middle: the result was {total} bytes, over \
                 the {} bytes `{name}` gives here]\n{}",
                &content[..head_end],
                tail_start - head_end,
                head + tail,
                &content[tail_start..]
            )
        }
        _ => content,
    }
}

/// The largest character boundary of `text` at or before `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    (0..=index.min(text.len()))
        .rev()
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(0)
}

/// The smallest character boundary of `text` at or after `index`.
fn ceil_boundary(text: &str, index: usize) -> usize {
    (index..text.len())
        .find(|at| text.is_char_boundary(*at))
        .unwrap_or(text.len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_result_within_its_tools_cap_is_kept_whole() {
        let local_sized = "é".repeat(read_file::MAX_OUTPUT_BYTES / 2);
        assert_eq!(
            held_to_cap("read_file", local_sized.clone()),
            local_sized,
            "a result as large as read_file makes here passes unchanged"
        );
        assert_eq!(held_to_cap("bash", "ok\n".into()), "ok\n");
    }

    #[test]
    fn a_file_tools_result_over_its_cap_keeps_its_start() {
        let ResultCap::Head { bytes } = result_cap("grep") else {
            panic!("grep keeps its head");
        };
        // A two-byte character straddles the cap: it goes whole or not at all.
        let content = format!("{}é{}", "a".repeat(bytes - 1), "b".repeat(1_000_000));
        let held = held_to_cap("grep", content);
        assert_eq!(
            held,
            format!(
                "{}\n[grove cut {} bytes: the result was {} bytes, over the {bytes} bytes \
                 `grep` gives here]\n",
                "a".repeat(bytes - 1),
                1_000_002,
                bytes + 1 + 1_000_000,
            ),
            "grep's result is cut to grep's cap, at a character boundary, saying so"
        );
    }

    #[test]
    fn a_listing_over_its_cap_keeps_its_first_paths() {
        let lines = list_files::MAX_LISTED + NOTE_LINES;
        let listing: String = (0..5_000).map(|n| format!("f{n}\n")).collect();
        let kept: String = (0..lines).map(|n| format!("f{n}\n")).collect();
        let held = held_to_cap("list_files", listing.clone());
        assert_eq!(
            held,
            format!(
                "{kept}\n[grove cut {} bytes: the result was {} bytes, over the {lines} lines \
                 or {} bytes `list_files` gives here]\n",
                listing.len() - kept.len(),
                listing.len(),
                list_files::MAX_LISTED * LISTED_LINE + NOTE_ROOM
            ),
            "a listing keeps as many paths as list_files lists here"
        );
        assert_eq!(
            held_to_cap("list_files", kept.clone()),
            kept,
            "a listing within the cap is kept whole"
        );
    }

    #[test]
    fn a_commands_result_over_its_cap_keeps_its_start_and_its_end() {
        let ResultCap::HeadAndTail { head, tail } = result_cap("bash") else {
            panic!("bash keeps its head and its tail");
        };
        let content = format!(
            "{}{}{}",
            "h".repeat(head),
            "m".repeat(5_000_000),
            "t".repeat(tail - 14) + "[exit code: 1]"
        );
        let held = held_to_cap("bash", content);
        assert_eq!(
            held,
            format!(
                "{}\n[grove cut 5000000 bytes from the middle: the result was {} bytes, over \
                 the {} bytes `bash` gives here]\n{}[exit code: 1]",
                "h".repeat(head),
                head + 5_000_000 + tail,
                head + tail,
                "t".repeat(tail - 14)
            ),
            "a command's output keeps its start and its end, exit code included"
        );
        assert_eq!(
            result_cap("bash"),
            ResultCap::HeadAndTail {
                head: 3 * OutputCap::default().head,
                tail: 3 * OutputCap::default().tail + NOTE_ROOM,
            },
            "bash's cap follows the executor's own output cap"
        );
    }
}
