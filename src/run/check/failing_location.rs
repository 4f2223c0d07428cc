//! Where a red check says it failed, and which merged subtask changed that place: the
//! first evidence the culprit search weighs, before it spends a check on any rebuilt
//! result.
//!
//! This file owns reading locations out of a check's output — Python's innermost frames
//! (`File "…", line N`), and `path:line` as compilers, test runners and stack traces
//! print it — and their attribution: the subtask whose merge last changed that line of
//! the result, else the subtasks that changed that file. It never names a subtask only
//! because one of its files appears somewhere in the output, and reads no path outside
//! the run's trees and the user's checkout.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::git::{CommitId, trailers};
use crate::run::context::RunFacts;

/// A place a failing check names: a path as it printed it, and a line when it gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) path: String,
    pub(crate) line: Option<usize>,
}

/// Python's traceback frame: `  File "pkg/b.py", line 9, in hello_carol`.
static PYTHON_FRAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r#"^\s*File "([^"]+)", line (\d+)"#).ok());

/// `path:line` (`src/lib.rs:3:5`, `--> src/lib.rs:3:5`, `at f (src/a.js:10:3)`,
/// `tests/test_a.py:12: AssertionError`): a path with a file extension, then a line.
static PATH_LINE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?:^|[\s(\[])((?:\.{0,2}/)?(?:[\w.@+-]+/)*[\w.@+-]+\.[A-Za-z]\w*):(\d+)").ok()
});

/// The places `output` says it failed, the most telling first: Python's frames from the
/// innermost out (the last printed is nearest the error), then every `path:line` in the
/// order printed (a compiler's first error is its cause).
pub(crate) fn failure_locations(output: &str) -> Vec<Location> {
    let (Some(frame), Some(path_line)) = (PYTHON_FRAME.as_ref(), PATH_LINE.as_ref()) else {
        return Vec::new();
    };
    let mut frames = Vec::new();
    let mut others = Vec::new();
    for line in output.lines() {
        if let Some(found) = frame.captures(line) {
            frames.push(Location {
                path: found[1].to_owned(),
                line: found[2].parse().ok(),
            });
            continue;
        }
        for found in path_line.captures_iter(line) {
            others.push(Location {
                path: found[1].to_owned(),
                line: found[2].parse().ok(),
            });
        }
    }
    frames.reverse();
    frames.extend(others);
    frames
}

/// How a culprit was found at the failing location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attribution {
    /// Its merge last changed the failing line.
    Line { subtask: String, at: String },
    /// They changed the failing file (its failing line is as the base has it).
    File { subtasks: Vec<String>, at: String },
}

/// A merged subtask as the attribution sees it: its label and the paths it changed.
pub(crate) struct Changed<'a> {
    pub(crate) label: &'a str,
    pub(crate) paths: &'a [String],
}

/// The subtasks that changed the first place `output` names that lies in the result
/// (`result`, the commit that failed) and that some but not all of `candidates` changed;
/// `None` when no such place is named.
pub(crate) fn at_failing_location(
    facts: &RunFacts,
    result: CommitId,
    output: &str,
    candidates: &[Changed<'_>],
) -> Option<Attribution> {
    for location in failure_locations(output) {
        let Some(path) = repository_path(facts, result, &location.path) else {
            continue;
        };
        let at = match location.line {
            Some(line) => format!("{path}:{line}"),
            None => path.clone(),
        };
        if let Some(line) = location.line
            && let Some(subtask) = line_changed_by(facts, result, &path, line)
            && candidates
                .iter()
                .any(|candidate| candidate.label == subtask)
        {
            return Some(Attribution::Line { subtask, at });
        }
        let changed: Vec<String> = candidates
            .iter()
            .filter(|candidate| candidate.paths.contains(&path))
            .map(|candidate| candidate.label.to_owned())
            .collect();
        if !changed.is_empty() && changed.len() < candidates.len() {
            return Some(Attribution::File {
                subtasks: changed,
                at,
            });
        }
    }
    None
}

/// The subtask whose merge onto the result last changed `line` of `path`.
fn line_changed_by(facts: &RunFacts, result: CommitId, path: &str, line: usize) -> Option<String> {
    let merge = facts
        .repo
        .last_changed_line(result, facts.base, path, line)
        .ok()??;
    let message = facts.repo.commit_message(merge).ok()?;
    trailers::merged_subtask(&message)
}

/// `printed` as a path of the result's tree: a relative path as it is, an absolute one
/// only inside one of the run's trees (the check's worktree, a subtask's) or the user's
/// checkout — never a file elsewhere whose name the repository happens to share.
fn repository_path(facts: &RunFacts, result: CommitId, printed: &str) -> Option<String> {
    let printed = Path::new(printed);
    let relative = if printed.is_absolute() {
        if let Ok(inside) = printed.strip_prefix(&facts.worktrees_dir) {
            // The first component is the tree's own directory (`check-result`, `3`).
            inside.components().skip(1).collect()
        } else {
            printed.strip_prefix(&facts.user_root).ok()?.to_path_buf()
        }
    } else {
        printed
            .components()
            .filter(|part| part.as_os_str() != ".")
            .collect()
    };
    let relative = relative.to_str()?.to_owned();
    (!relative.is_empty() && facts.repo.has_file(result, &relative).ok()?).then_some(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str, line: usize) -> Location {
        Location {
            path: path.to_owned(),
            line: Some(line),
        }
    }

    #[test]
    fn python_frames_come_innermost_first_then_paths_as_printed() {
        let output = "ERROR: test_carol (tests.test_pkg.Greetings.test_carol)\n\
                      Traceback (most recent call last):\n  \
                      File \"/w/check-result/tests/test_pkg.py\", line 14, in test_carol\n    \
                      self.assertEqual(b.hello_carol(), \"Hello, Carol!\")\n  \
                      File \"/w/check-result/pkg/b.py\", line 9, in hello_carol\n    \
                      return core.gret(\"Carol\")\n\
                      NameError: name 'gret' is not defined\n\
                      error[E0425]: cannot find value\n --> src/lib.rs:3:5\n";
        assert_eq!(
            failure_locations(output),
            vec![
                at("/w/check-result/pkg/b.py", 9),
                at("/w/check-result/tests/test_pkg.py", 14),
                at("src/lib.rs", 3),
            ]
        );
    }
}
