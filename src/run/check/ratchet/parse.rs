//! A ratchet's findings read from what its tool left: output lines a pattern matches,
//! cargo's JSON messages, or a JUnit XML file's failing test cases.
//!
//! This file is pure: text in, findings out. It owns a finding's identity as each format
//! gives it — the file (relative to the tree), the code and the message, never the line
//! or column, which move when unrelated code does. It must never run anything.

use regex::Regex;

use crate::store::findings::RatchetFinding;
use crate::text::strip_escapes;

/// The findings of `output` that `pattern` matches, one per matching line. The named
/// groups `file`, `code` and `message` make a finding's identity; without a `message`
/// group the matched text is the message, the `line` and `column` groups cut out of it.
/// `tree` (the directory it ran in) is taken off absolute paths.
pub(crate) fn lines(output: &str, pattern: &Regex, tree: &str) -> Vec<RatchetFinding> {
    let output = strip_escapes(output);
    let mut found = Vec::new();
    for line in output.lines() {
        let line = line.trim_end_matches('\r');
        let Some(caps) = pattern.captures(line) else {
            continue;
        };
        let group = |name: &str| caps.name(name).map(|m| m.as_str().trim().to_owned());
        let message = group("message").unwrap_or_else(|| {
            let whole = caps.get(0).map_or("", |m| m.as_str());
            let start = caps.get(0).map_or(0, |m| m.start());
            let mut kept = whole.to_owned();
            // Cut from the end first so earlier offsets stay right.
            let mut cuts: Vec<_> = ["column", "line"]
                .iter()
                .filter_map(|name| caps.name(name))
                .map(|m| (m.start() - start, m.end() - start))
                .collect();
            cuts.sort_unstable();
            for (from, to) in cuts.into_iter().rev() {
                kept.replace_range(from..to, "");
            }
            kept
        });
        let at = match (group("line"), group("column")) {
            (Some(line), Some(column)) => Some(format!("{line}:{column}")),
            (Some(line), None) => Some(line),
            _ => None,
        };
        found.push(RatchetFinding {
            file: relative(&group("file").unwrap_or_default(), tree),
            code: group("code").unwrap_or_default(),
            message: message.replace(&format!("{tree}/"), ""),
            at,
        });
    }
    found
}

/// The compiler's and clippy's errors and warnings among cargo's JSON messages
/// (`--message-format=json`), one per message with a primary span; other lines (a
/// build script's output, cargo's own) are not findings.
pub(crate) fn cargo_json(output: &str, tree: &str) -> Vec<RatchetFinding> {
    let mut found = Vec::new();
    for line in output.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
            continue;
        };
        if value["reason"] != "compiler-message" {
            continue;
        }
        let message = &value["message"];
        if !matches!(message["level"].as_str(), Some("error" | "warning")) {
            continue;
        }
        let spans = message["spans"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let Some(span) = spans.iter().find(|span| span["is_primary"] == true) else {
            continue;
        };
        found.push(RatchetFinding {
            file: relative(span["file_name"].as_str().unwrap_or_default(), tree),
            code: message["code"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            message: message["message"].as_str().unwrap_or_default().to_owned(),
            at: Some(format!("{}:{}", span["line_start"], span["column_start"])),
        });
    }
    found
}

/// Why a text is not a JUnit report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotJunit {
    #[error("not XML at byte {at}: {source}")]
    Xml {
        at: u64,
        #[source]
        source: quick_xml::Error,
    },
    #[error("not XML: {0}")]
    Attribute(String),
    #[error("not a JUnit report: no <testsuite> element")]
    NoSuite,
}

/// The failing test cases of a JUnit XML report: each `<testcase>` holding a
/// `<failure>` or an `<error>` (a skipped one is not failing), as `classname` (or
/// `file`) and `name`. An error says why the text is not such a report.
pub(crate) fn junit(xml: &str) -> Result<Vec<RatchetFinding>, NotJunit> {
    use quick_xml::events::{BytesStart, Event};

    struct Case {
        class: String,
        name: String,
        failed: bool,
    }
    fn case(start: &BytesStart<'_>) -> Result<Case, NotJunit> {
        let mut case = Case {
            class: String::new(),
            name: String::new(),
            failed: false,
        };
        for attribute in start.attributes() {
            let attribute = attribute.map_err(|error| NotJunit::Attribute(error.to_string()))?;
            let value = attribute
                .unescape_value()
                .map_err(|error| NotJunit::Attribute(error.to_string()))?
                .into_owned();
            match attribute.key.as_ref() {
                b"classname" => case.class = value,
                b"file" if case.class.is_empty() => case.class = value,
                b"name" => case.name = value,
                _ => {}
            }
        }
        Ok(case)
    }

    let mut reader = quick_xml::Reader::from_str(xml);
    let mut suites = 0usize;
    let mut open: Option<Case> = None;
    let mut found = Vec::new();
    let mut finish = |case: Case| {
        if case.failed {
            found.push(RatchetFinding {
                file: case.class,
                code: String::new(),
                message: case.name,
                at: None,
            });
        }
    };
    loop {
        let event = reader.read_event().map_err(|source| NotJunit::Xml {
            at: reader.error_position(),
            source,
        })?;
        match event {
            Event::Start(start) | Event::Empty(start)
                if matches!(start.name().as_ref(), b"testsuite" | b"testsuites") =>
            {
                suites += 1;
            }
            Event::Start(start) if start.name().as_ref() == b"testcase" => {
                open = Some(case(&start)?);
            }
            Event::Empty(start) if start.name().as_ref() == b"testcase" => finish(case(&start)?),
            Event::Start(start) | Event::Empty(start)
                if matches!(start.name().as_ref(), b"failure" | b"error") =>
            {
                if let Some(case) = open.as_mut() {
                    case.failed = true;
                }
            }
            Event::End(end) if end.name().as_ref() == b"testcase" => {
                if let Some(case) = open.take() {
                    finish(case);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if suites == 0 {
        return Err(NotJunit::NoSuite);
    }
    Ok(found)
}

/// `file` relative to the tree it was found in: `./` and the tree's own path taken off.
fn relative(file: &str, tree: &str) -> String {
    let file = file.strip_prefix(&format!("{tree}/")).unwrap_or(file);
    file.trim_start_matches("./").to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::settings::ratchet::{RatchetParse, Tool};

    fn pattern(tool: Tool) -> Regex {
        match tool.parse() {
            RatchetParse::Lines { pattern } => Regex::new(&pattern).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn finding(file: &str, code: &str, message: &str, at: Option<&str>) -> RatchetFinding {
        RatchetFinding {
            file: file.into(),
            code: code.into(),
            message: message.into(),
            at: at.map(str::to_owned),
        }
    }

    /// Samples written by mypy 1.13.0, ruff 0.8.4 and pytest 8.3.4 on this machine.
    #[test]
    fn mypy_and_ruff_output_as_the_tools_write_it() {
        let mypy = lines(include_str!("samples/mypy.txt"), &pattern(Tool::Mypy), "/t");
        let columns = lines(
            include_str!("samples/mypy-columns.txt"),
            &pattern(Tool::Mypy),
            "/t",
        );
        let full = lines(
            include_str!("samples/ruff-full.txt"),
            &pattern(Tool::Ruff),
            "/t",
        );
        let concise = lines(
            include_str!("samples/ruff-concise.txt"),
            &pattern(Tool::Ruff),
            "/t",
        );

        let returned = |at| {
            finding(
                "src/a.py",
                "return-value",
                "Incompatible return value type (got \"str\", expected \"int\")",
                Some(at),
            )
        };
        assert_eq!(mypy.len(), 2, "two errors, the summary is none: {mypy:?}");
        assert_eq!(mypy[0], returned("5"));
        assert_eq!(columns[0], returned("5:12"));
        let unused = finding("src/a.py", "F401", "`os` imported but unused", Some("1:8"));
        assert_eq!(full, vec![unused.clone()], "ruff's context lines are none");
        assert_eq!(concise, vec![unused]);
    }

    #[test]
    fn other_tools_lines_a_users_pattern_and_absolute_paths() {
        let eslint = lines(
            "/t/src/x.js:1:7: 'x' is assigned a value but never used. [Error/no-unused-vars]\n\
             \n1 problem\n",
            &pattern(Tool::Eslint),
            "/t",
        );
        let tsc = lines(
            "src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'.\n",
            &pattern(Tool::Tsc),
            "/t",
        );
        let pyright = lines(
            "/t/src/a.py\n  /t/src/a.py:5:12 - error: Type \"str\" is not assignable \
             (reportReturnType)\n1 error, 0 warnings, 0 informations \n",
            &pattern(Tool::Pyright),
            "/t",
        );
        let own = lines(
            "WARN lib/a.c line 12: unused x\nok\n",
            &Regex::new(r"^WARN (?P<file>\S+) line (?P<line>\d+): .*$").unwrap(),
            "/t",
        );
        assert_eq!(
            (eslint, tsc, pyright, own),
            (
                vec![finding(
                    "src/x.js",
                    "no-unused-vars",
                    "'x' is assigned a value but never used.",
                    Some("1:7")
                )],
                vec![finding(
                    "src/a.ts",
                    "TS2322",
                    "Type 'string' is not assignable to type 'number'.",
                    Some("3:5")
                )],
                vec![finding(
                    "src/a.py",
                    "reportReturnType",
                    "Type \"str\" is not assignable",
                    Some("5:12")
                )],
                vec![finding(
                    "lib/a.c",
                    "",
                    "WARN lib/a.c line : unused x",
                    Some("12")
                )],
            )
        );
    }

    #[test]
    fn cargo_json_messages_are_findings_and_summaries_are_not() {
        let output = r#"{"reason":"compiler-artifact","target":{"name":"x"}}
{"reason":"compiler-message","message":{"level":"warning","message":"unused variable: `y`","code":{"code":"unused_variables"},"spans":[{"file_name":"src/lib.rs","line_start":3,"column_start":9,"is_primary":true}]}}
{"reason":"compiler-message","message":{"level":"warning","message":"1 warning emitted","code":null,"spans":[]}}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            cargo_json(output, "/t"),
            vec![finding(
                "src/lib.rs",
                "unused_variables",
                "unused variable: `y`",
                Some("3:9")
            )]
        );
    }

    #[test]
    fn a_junit_report_gives_its_failing_cases_and_anything_else_is_an_error() {
        let pytest = junit(include_str!("samples/pytest-junit.xml")).unwrap();
        let nextest = junit(
            "<testsuites><testsuite name=\"c\"><testcase name=\"t::a\" classname=\"c\">\
             <error message=\"panicked\"/></testcase><testcase name=\"t::b\" classname=\"c\">\
             <skipped/></testcase></testsuite></testsuites>",
        )
        .unwrap();

        assert_eq!(
            pytest,
            vec![finding("tests.test_a", "", "test_bad", None)],
            "test_ok passed"
        );
        assert_eq!(nextest, vec![finding("c", "", "t::a", None)]);
        assert_eq!(
            junit("collected 3 items\n").unwrap_err().to_string(),
            "not a JUnit report: no <testsuite> element"
        );
        assert!(
            junit("<testsuite><testcase name=\"a\"></testsuite>")
                .unwrap_err()
                .to_string()
                .starts_with("not XML at byte "),
        );
    }
}
