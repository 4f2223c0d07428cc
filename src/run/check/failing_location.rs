//! Where a red check says it failed, and which merged subtask changed that place: the
//! first evidence the culprit search weighs, before it spends a check on any rebuilt
//! result.
//!
//! This file owns reading tracebacks out of a check's output — Python's (`File "…", line
//! N`, as unittest and a plain script print them), pytest's (`path:N: in f` under a
//! `____ test ____` header), a Rust panic's (`panicked at src/x.rs:L:C`) and a JavaScript
//! stack's (`at f (file:///…/a.js:L:C)`, as node's test runner prints it) — each turned
//! innermost frame first, then `path:line` as compilers print it; and their attribution:
//! the innermost frame that lies in a file some merged subtask changed decides — the
//! subtask whose merge last changed that line of the result, else the subtasks that
//! changed that file — or nothing does (the caller then bisects). It never names a
//! subtask because it changed a frame further out (the test that called the code that
//! failed, issue 43), nor because one of its files appears somewhere in the output, and
//! reads no path outside the run's trees and the user's checkout.

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

/// A path with a file extension, as test runners and compilers print it.
const PATH: &str = r"(?:\.{0,2}/)?(?:[\w.@+-]+/)*[\w.@+-]+\.[A-Za-z]\w*";

fn regex(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

/// `Traceback (most recent call last):` — a Python traceback starts.
static PYTHON_START: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"^\s*Traceback \(most recent call last\):"));

/// Python's traceback frame: `  File "pkg/b.py", line 9, in hello_carol`.
static PYTHON_FRAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r#"^\s*File "([^"]+)", line (\d+)"#));

/// pytest's failure header: `________ test_wrap ________` (its frames follow).
static PYTEST_START: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"^_{3,} .+ _{3,}$"));

/// pytest's frame, at a line's start: `tests/test_a.py:12: in test_a`, the innermost
/// `src/a.py:3: NameError`, or a bare `tests/test_a.py:12: `.
static PYTEST_FRAME: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(&format!(r"^({PATH}):(\d+):(?:\s|$)")));

/// A Rust panic's place: `panicked at src/x.rs:3:5:`, or (before Rust 1.73)
/// `panicked at 'message', src/x.rs:3:5`.
static RUST_PANIC: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(&format!(r"panicked at (?:'.*', )?({PATH}):(\d+):\d+")));

/// A JavaScript stack frame, innermost first: `    at f (file:///w/src/a.js:10:3)`,
/// `    at /w/src/a.js:10:3`, or without the `at` as node's TAP reporter prints a stack.
static JS_FRAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    regex(&format!(
        r"^\s*(?:at\s+)?(?:[^()]*\()?(?:file://)?({PATH}):(\d+):\d+\)?\s*$"
    ))
});

/// `path:line` anywhere (`--> src/lib.rs:3:5`, `src/a.c:3:5: error`).
static PATH_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(&format!(r"(?:^|[\s(\[])({PATH}):(\d+)")));

/// How a traceback orders its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Python and pytest: the innermost frame printed last.
    OutermostFirst,
    /// JavaScript stacks and a panic's one place: the innermost printed first.
    InnermostFirst,
}

/// One traceback being read: its frames as printed.
struct Trace {
    order: Order,
    frames: Vec<Location>,
}

impl Trace {
    fn new(order: Order) -> Self {
        Self {
            order,
            frames: Vec::new(),
        }
    }

    /// Its frames, innermost first.
    fn innermost_first(mut self) -> Vec<Location> {
        if self.order == Order::OutermostFirst {
            self.frames.reverse();
        }
        self.frames
    }
}

fn location(found: &regex::Captures<'_>) -> Location {
    Location {
        path: found[1].to_owned(),
        line: found[2].parse().ok(),
    }
}

/// The places `output` says it failed, the most telling first: each traceback in the
/// order printed, its frames innermost first, then every other `path:line` in the order
/// printed (a compiler's first error is its cause).
pub(crate) fn failure_locations(output: &str) -> Vec<Location> {
    let patterns = (
        PYTHON_START.as_ref(),
        PYTHON_FRAME.as_ref(),
        PYTEST_START.as_ref(),
        PYTEST_FRAME.as_ref(),
        RUST_PANIC.as_ref(),
        JS_FRAME.as_ref(),
        PATH_LINE.as_ref(),
    );
    let (
        Some(python_start),
        Some(python_frame),
        Some(pytest_start),
        Some(pytest_frame),
        Some(rust_panic),
        Some(js_frame),
        Some(path_line),
    ) = patterns
    else {
        return Vec::new();
    };
    let mut traced = Vec::new();
    let mut others = Vec::new();
    let mut open: Option<Trace> = None;
    for line in output.lines() {
        if python_start.is_match(line) || pytest_start.is_match(line) {
            close(open.take(), &mut traced);
            open = Some(Trace::new(Order::OutermostFirst));
            continue;
        }
        if let Some(found) = js_frame.captures(line) {
            match &mut open {
                Some(trace) if trace.order == Order::InnermostFirst => {
                    trace.frames.push(location(&found));
                }
                _ => {
                    close(open.take(), &mut traced);
                    let mut trace = Trace::new(Order::InnermostFirst);
                    trace.frames.push(location(&found));
                    open = Some(trace);
                }
            }
            continue;
        }
        // A JavaScript stack ends at its first line that is not a frame.
        if open
            .as_ref()
            .is_some_and(|trace| trace.order == Order::InnermostFirst)
        {
            close(open.take(), &mut traced);
        }
        if let Some(found) = rust_panic.captures(line) {
            traced.push(location(&found));
            continue;
        }
        let frame = python_frame.captures(line).or_else(|| {
            // pytest's frames only under its header: elsewhere `path:N: ` is a warning.
            open.as_ref().and(pytest_frame.captures(line))
        });
        if let Some(found) = frame {
            open.get_or_insert_with(|| Trace::new(Order::OutermostFirst))
                .frames
                .push(location(&found));
            continue;
        }
        others.extend(path_line.captures_iter(line).map(|found| location(&found)));
    }
    close(open.take(), &mut traced);
    traced.extend(others);
    traced
}

/// Adds a traceback's frames, innermost first, to `traced`.
fn close(trace: Option<Trace>, traced: &mut Vec<Location>) {
    if let Some(trace) = trace {
        traced.extend(trace.innermost_first());
    }
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

/// Who changed the first place `output` names that lies in the result (`result`, the
/// commit that failed) in a file one of `candidates` changed: the subtask whose merge
/// changed its line, else those that changed its file when not all did. `None` when no
/// such place is named, or when it tells no candidate from another.
pub(crate) fn at_failing_location(
    facts: &RunFacts,
    result: CommitId,
    output: &str,
    candidates: &[Changed<'_>],
) -> Option<Attribution> {
    let (location, path, changed) = failure_locations(output).into_iter().find_map(|location| {
        let path = repository_path(facts, result, &location.path)?;
        let changed: Vec<String> = candidates
            .iter()
            .filter(|candidate| candidate.paths.contains(&path))
            .map(|candidate| candidate.label.to_owned())
            .collect();
        (!changed.is_empty()).then_some((location, path, changed))
    })?;
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
    // A file every candidate changed tells none apart: the frames further out would
    // only name the callers, so the search bisects instead.
    (changed.len() < candidates.len()).then_some(Attribution::File {
        subtasks: changed,
        at,
    })
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
            ],
            "the innermost frame first, then the traceback outwards, then other places"
        );
    }

    /// pytest's default (`--tb=auto`): long entries for the first and the last frame,
    /// short ones between, each failure under its own header.
    const PYTEST: &str = "\
=================================== FAILURES ===================================
__________________________________ test_wrap ___________________________________

    def test_wrap():
>       assert formatting.wrap_text(\"a b\") == \"a b\"

tests/test_formatting.py:7: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
src/click/formatting.py:3: in wrap_text
    return _textwrap.wrap(text)
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

text = 'a b'

    def wrap(text):
>       return _fill(text)
E       NameError: name '_fill' is not defined

src/click/_textwrap.py:120: NameError
__________________________________ test_indent _________________________________

    def test_indent():
>       assert formatting.indent(\"a\") == \"  a\"
E       AssertionError: assert ' a' == '  a'

tests/test_formatting.py:11: AssertionError
=========================== short test summary info ============================
FAILED tests/test_formatting.py::test_wrap - NameError: name '_fill' is not defined
FAILED tests/test_formatting.py::test_indent - AssertionError: assert ' a' == '  a'
";

    #[test]
    fn pytest_tracebacks_come_each_innermost_first_in_the_order_printed() {
        let warning = "/w/pkg/old.py:4: DeprecationWarning: old\n";
        assert_eq!(
            failure_locations(&format!("{warning}{PYTEST}")),
            vec![
                at("src/click/_textwrap.py", 120),
                at("src/click/formatting.py", 3),
                at("tests/test_formatting.py", 7),
                at("tests/test_formatting.py", 11),
                at("/w/pkg/old.py", 4),
            ],
            "the first failure's innermost frame is where it was raised, not the test \
             that called it; a warning's place outside any failure comes last"
        );
    }

    #[test]
    fn a_rust_panic_names_its_place_and_a_node_stack_is_read_innermost_first() {
        let cargo = "running 2 tests\n\
                     thread 'tests::wraps' panicked at src/wrap.rs:42:9:\n\
                     assertion `left == right` failed\n\
                     thread 'old' panicked at 'boom', src/old.rs:7:5\n\
                     test result: FAILED. 0 passed; 2 failed\n";
        assert_eq!(
            failure_locations(cargo),
            vec![at("src/wrap.rs", 42), at("src/old.rs", 7)],
            "each panic's place, as printed, by either Rust's format"
        );
        let tap = "not ok 1 - wraps\n  ---\n  error: 'wrap is not defined'\n  stack: |-\n    \
                   wrapText (file:///w/check-result/src/format.js:12:10)\n    \
                   TestContext.<anonymous> (file:///w/check-result/test/format.test.js:5:3)\n    \
                   Test.runInAsyncScope (node:async_hooks:206:9)\n  ...\n";
        let spec = "\u{2716} indents (0.4ms)\n  ReferenceError: pad is not defined\n      \
                    at indent (/w/check-result/src/indent.js:3:7)\n      \
                    at async TestContext.<anonymous> (/w/check-result/test/indent.test.js:9:1)\n\
                    \u{2139} fail 2\n";
        assert_eq!(
            failure_locations(&format!("{tap}{spec}")),
            vec![
                at("/w/check-result/src/format.js", 12),
                at("/w/check-result/test/format.test.js", 5),
                at("/w/check-result/src/indent.js", 3),
                at("/w/check-result/test/indent.test.js", 9),
            ],
            "node prints each stack innermost first, with or without `at`; its internals \
             name no file"
        );
    }
}
