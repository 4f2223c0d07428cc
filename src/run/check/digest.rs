//! What a reviewer reads of a check's output in its first message: the failures and the
//! final lines, not the middle of a long log.
//!
//! This file owns picking those lines: pytest's `FAILED`/`ERROR` summary lines, its
//! `____ test ____` headers and `E ` lines with the `file:line:` that ends each
//! traceback; cargo test's `---- name stdout ----` sections and its `failures:` list;
//! TAP's (node's) `not ok` lines with their YAML block; unittest's `FAIL:`/`ERROR:`
//! lines and Python tracebacks; go test's `--- FAIL:`; compiler errors and their `-->`
//! locations; then the last lines. pytest's warnings summary is dropped wherever it
//! stands. It never decides anything: the whole output stays one tool call away
//! (`check_output`), and the digest says how much it left out.

/// How many final lines the digest always keeps.
pub(crate) const LAST_LINES: usize = 20;
/// How many characters the failures may take; the final lines come on top.
const FAILURES_CHARS: usize = 6_000;
/// How many lines of one cargo `---- … ----` section or TAP block are kept.
const SECTION_LINES: usize = 30;

/// The lines of `output` a reviewer needs first, in their order, with a `[… N lines …]`
/// note where lines were left out; `output` itself when nothing was.
pub(crate) fn digest(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let dropped = warnings_summary(&lines);
    let mut keep = vec![false; lines.len()];
    let mut spent = 0;
    let mut index = 0;
    while index < lines.len() {
        let span = if dropped[index] {
            0
        } else {
            failure_span(&lines, index)
        };
        if span == 0 {
            index += 1;
            continue;
        }
        for line in index..index + span {
            if spent < FAILURES_CHARS && !dropped[line] {
                keep[line] = true;
                spent += lines[line].len() + 1;
            }
        }
        index += span;
    }
    let tail: Vec<usize> = (0..lines.len())
        .rev()
        .filter(|&line| !dropped[line])
        .take(LAST_LINES)
        .collect();
    for line in tail {
        keep[line] = true;
    }
    if keep.iter().all(|&kept| kept) {
        return output.to_owned();
    }
    render(&lines, &keep)
}

/// How many final lines a passed check shows.
const PASSED_LINES: usize = 5;

/// The last lines of a passed check's `output`, without test runners' progress lines
/// (`....s.. [ 40%]`): what a reviewer needs of a green check is its summary (a bridge
/// run's reviewers were shown fifteen lines of dots and two of substance).
pub(crate) fn passed_tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let start = (0..lines.len())
        .rev()
        .filter(|&line| !lines[line].trim().is_empty() && !is_progress(lines[line]))
        .take(PASSED_LINES)
        .last()
        .unwrap_or(lines.len());
    let keep: Vec<bool> = (0..lines.len())
        .map(|line| line >= start && !is_progress(lines[line]))
        .collect();
    if keep.iter().all(|&kept| kept) {
        return output.to_owned();
    }
    render(&lines, &keep)
}

/// A runner's progress line: one result character per test, perhaps a percentage.
fn is_progress(line: &str) -> bool {
    let line = line.trim();
    let marks = match line.rfind('[') {
        Some(at) if line.ends_with("%]") => line[..at].trim_end(),
        _ => line,
    };
    !marks.is_empty() && marks.chars().all(|c| ".sxXFE".contains(c))
}

/// The kept lines, each run of left-out lines as one note.
fn render(lines: &[&str], keep: &[bool]) -> String {
    let mut text = String::new();
    let mut skipped = 0;
    for (line, &kept) in lines.iter().zip(keep) {
        if !kept {
            skipped += 1;
            continue;
        }
        if skipped > 0 {
            text.push_str(&skipped_note(skipped));
            skipped = 0;
        }
        text.push_str(line);
        text.push('\n');
    }
    if skipped > 0 {
        text.push_str(&skipped_note(skipped));
    }
    text
}

fn skipped_note(count: usize) -> String {
    if count == 1 {
        "[… 1 line left out …]\n".to_owned()
    } else {
        format!("[… {count} lines left out …]\n")
    }
}

/// Which lines belong to pytest's warnings summary: from its `=== warnings summary ===`
/// rule to the next `===` rule (not included).
fn warnings_summary(lines: &[&str]) -> Vec<bool> {
    let mut inside = false;
    lines
        .iter()
        .map(|line| {
            if is_rule(line) {
                inside = line.contains("warnings summary");
            }
            inside
        })
        .collect()
}

/// A pytest section rule: `==== title ====`.
fn is_rule(line: &str) -> bool {
    line.starts_with("===") && line.trim_end().ends_with("===")
}

/// How many lines from `index` on make one failure worth showing; 0 when the line
/// starts none.
fn failure_span(lines: &[&str], index: usize) -> usize {
    let line = lines[index];
    let trimmed = line.trim_start();
    // A cargo test section, up to the next section, the `failures:` list or a blank
    // line followed by one.
    if line.starts_with("---- ") && line.trim_end().ends_with(" ----") {
        return section(lines, index, |next| {
            next.starts_with("---- ") || next.starts_with("failures:")
        });
    }
    // cargo's list of failing tests, up to `test result:`.
    if line == "failures:" {
        return section(lines, index, |next| next.starts_with("test result:"));
    }
    // A Python traceback (unittest's, an import's), up to the blank line or the rule
    // after it: its last line names the error.
    if trimmed.starts_with("Traceback (most recent call last):") {
        return section(lines, index, |next| {
            next.trim().is_empty() || next.starts_with("---") || next.starts_with("===")
        });
    }
    // A TAP failure and its indented YAML diagnostics.
    if trimmed.starts_with("not ok ") {
        let indent = line.len() - trimmed.len();
        return section(lines, index, |next| {
            let depth = next.len() - next.trim_start().len();
            !next.trim().is_empty() && depth <= indent
        });
    }
    let one = line.starts_with("FAILED ")
        || line.starts_with("ERROR ")
        // unittest's `FAIL: test_x (module.Case)`, go test's `--- FAIL: TestX`
        || line.starts_with("FAIL: ")
        || line.starts_with("ERROR: ")
        || trimmed.starts_with("--- FAIL: ")
        || line.starts_with("E ")
        || (line.starts_with("___") && line.trim_end().ends_with("___"))
        || trimmed.starts_with("error[")
        || trimmed.starts_with("error:")
        || trimmed.starts_with("--> ")
        || trimmed.starts_with("thread '") && trimmed.contains("panicked at")
        || trimmed.starts_with("test result: FAILED")
        || pytest_location(line);
    usize::from(one)
}

/// The `path.py:12: AssertionError` line that ends a pytest traceback.
fn pytest_location(line: &str) -> bool {
    let mut parts = line.splitn(3, ':');
    let (Some(path), Some(number), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    path.ends_with(".py") && !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
}

/// The lines from `index` until one `ends` it (not included), at most [`SECTION_LINES`].
fn section(lines: &[&str], index: usize, ends: impl Fn(&str) -> bool) -> usize {
    let more = lines[index + 1..]
        .iter()
        .take_while(|next| !ends(next))
        .count();
    (1 + more).min(SECTION_LINES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(prefix: &str, count: usize) -> String {
        (1..=count).map(|n| format!("{prefix} {n}\n")).collect()
    }

    #[test]
    fn pytest_keeps_its_failures_and_last_lines_and_drops_the_warnings_summary() {
        let failed: Vec<String> = (1..=25)
            .map(|n| format!("FAILED tests/test_core.py::test_{n} - assert 3 == 4"))
            .collect();
        let output = format!(
            "============================= test session starts ==============================\n\
             {}\
             =================================== FAILURES ===================================\n\
             ___________________________ test_total ___________________________\n\
             \n\
             >       assert total([1, 2]) == 4\n\
             E       assert 3 == 4\n\
             \n\
             tests/test_core.py:7: AssertionError\n\
             =============================== warnings summary ===============================\n\
             {}\
             =========================== short test summary info ============================\n\
             {}\n\
             ========================= 25 failed, 40 passed in 0.31s ========================\n",
            numbered("tests/test_x.py::test_ok PASSED", 40),
            numbered("  DeprecationWarning: old api", 30),
            failed.join("\n"),
        );

        let digest = digest(&output);

        let mut expected = vec![
            "[… 42 lines left out …]",
            "___________________________ test_total ___________________________",
            "[… 2 lines left out …]",
            "E       assert 3 == 4",
            "[… 1 line left out …]",
            "tests/test_core.py:7: AssertionError",
            "[… 32 lines left out …]",
        ];
        expected.extend(failed.iter().map(String::as_str));
        expected.push(
            "========================= 25 failed, 40 passed in 0.31s ========================",
        );
        assert_eq!(
            digest.lines().collect::<Vec<_>>(),
            expected,
            "the failing test's header, assertion and location, every FAILED line and the \
             end; never the passing tests or the warnings summary"
        );
    }

    #[test]
    fn cargo_test_keeps_each_failing_tests_section_and_the_failures_list() {
        let output = format!(
            "running 30 tests\n\
             {}\
             \n\
             failures:\n\
             \n\
             ---- tests::adds stdout ----\n\
             thread 'tests::adds' panicked at src/lib.rs:9:9:\n\
             assertion `left == right` failed\n\
             \n\
             \n\
             failures:\n\
             \x20   tests::adds\n\
             \n\
             test result: FAILED. 29 passed; 1 failed; 0 ignored\n\
             \n\
             {}",
            numbered("test tests::ok ... ok", 30),
            numbered("test other::ok ... ok", 30),
        );

        let digest = digest(&output);

        assert!(
            digest.starts_with(
                "[… 32 lines left out …]\nfailures:\n\n---- tests::adds stdout ----\n\
                 thread 'tests::adds' panicked at src/lib.rs:9:9:\n\
                 assertion `left == right` failed\n\n\nfailures:\n    tests::adds\n\n\
                 test result: FAILED. 29 passed; 1 failed; 0 ignored\n[… 11 lines left out …]\n"
            ),
            "the failing test's own output and the failures list, whole: {digest}"
        );
        assert!(
            digest.ends_with("test other::ok ... ok 30\n"),
            "then the last lines: {digest}"
        );
    }

    #[test]
    fn a_tap_failure_keeps_its_diagnostics_and_a_short_output_stays_whole() {
        let output = format!(
            "TAP version 13\n{}not ok 41 - parses dates\n  ---\n  expected: 1\n  actual: 2\n  ...\n{}",
            numbered("ok", 40),
            numbered("# note", 30)
        );

        let digest = digest(&output);

        assert!(
            digest.contains("not ok 41 - parses dates\n  ---\n  expected: 1\n  actual: 2\n  ...\n"),
            "{digest}"
        );
        assert_eq!(digest.lines().filter(|l| l.starts_with("ok ")).count(), 0);
        assert_eq!(
            super::digest("one\ntwo\n"),
            "one\ntwo\n",
            "an output shorter than the last lines is shown as it is"
        );
    }

    #[test]
    fn unittest_keeps_each_failing_tests_name_and_traceback() {
        let output = format!(
            "{}======================================================================\n\
             ERROR: test_mul (unittest.loader._FailedTest.test_mul)\n\
             ----------------------------------------------------------------------\n\
             ImportError: Failed to import test module: test_mul\n\
             Traceback (most recent call last):\n\
             \x20 File \"/w/test_mul.py\", line 1, in <module>\n\
             ModuleNotFoundError: No module named 'calc_mul'\n\
             \n\
             \n\
             {}",
            numbered("test_add ... ok", 30),
            numbered("noise", 25),
        );

        let digest = digest(&output);

        assert!(
            digest.starts_with(
                "[… 31 lines left out …]\nERROR: test_mul (unittest.loader._FailedTest.test_mul)\n\
                 [… 2 lines left out …]\nTraceback (most recent call last):\n  File \
                 \"/w/test_mul.py\", line 1, in <module>\nModuleNotFoundError: No module named \
                 'calc_mul'\n[… 7 lines left out …]\n"
            ),
            "the failing test's name and its traceback, to the error it ends with: {digest}"
        );
    }

    #[test]
    fn a_passed_check_shows_its_summary_not_its_progress_dots() {
        let output = format!(
            "{}\n........s....... [100%]\n\n1234 passed, 1 skipped in 43.10s\n",
            "................................................ [ 50%]\n".repeat(14)
        );
        assert_eq!(
            passed_tail(&output),
            "[… 17 lines left out …]\n1234 passed, 1 skipped in 43.10s\n",
            "dots and blank lines are left out, the summary kept"
        );
        let cargo = "running 3 tests\ntest a ... ok\ntest b ... ok\ntest c ... ok\n\ntest \
                     result: ok. 3 passed; 0 failed\n";
        assert_eq!(
            passed_tail(cargo),
            cargo,
            "a short output with nothing to leave out is shown whole"
        );
    }
}
