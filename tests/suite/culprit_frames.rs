//! The culprit of a red result is the subtask that changed the innermost frame of the
//! failure's traceback that lies in a changed file, not the one that changed the failing
//! test (issue 43: on pallets/click, a `NameError` raised in `_textwrap.py` was blamed on
//! the subtask that changed `tests/test_formatting.py`). A real Python package whose own
//! suite is the check — the real pytest in a venv the test makes (its download cached
//! under target/toolchain-cache), else `python3 -m unittest` —, the grove binary, and the
//! fake model server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::{Value, json};

use crate::suite::environment::{cache_dir, install};
use crate::suite::result_check::FIXER_HEADING;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, first_user_text, lead_reply, usage};

const TESTS_BRIEF: &str = "A-TESTS: in tests/test_formatting.py add a test for blank text.";
const RENAME_BRIEF: &str = "B-RENAME: in pkg/_textwrap.py rename _fill to _fill_text.";

const TEXTWRAP: &str = "def _fill(text):\n    return text.strip()\n\n\ndef wrap(text):\n    \
                        return _fill(text)\n";
/// What B's worker leaves: the definition renamed, its call site (line 6) forgotten.
const TEXTWRAP_FORGOT: &str = "def _fill_text(text):\n    return text.strip()\n\n\n\
                               def wrap(text):\n    return _fill(text)\n";
const TEXTWRAP_FIXED: &str = "def _fill_text(text):\n    return text.strip()\n\n\n\
                              def wrap(text):\n    return _fill_text(text)\n";
const FORMATTING: &str =
    "from pkg import _textwrap\n\n\ndef wrap_text(text):\n    return _textwrap.wrap(text)\n";
/// Runs under pytest and unittest alike.
const TESTS: &str = "import unittest\n\nfrom pkg import formatting\n\n\n\
                     class Wrap(unittest.TestCase):\n    def test_wrap(self):\n        \
                     self.assertEqual(formatting.wrap_text(\" a b \"), \"a b\")\n";
const TESTS_ADDED: &str = "\n    def test_blank(self):\n        \
                           self.assertEqual(formatting.wrap_text(\"  \"), \"\")\n";

fn write(path: &str, content: &str) -> Reply {
    usage(Turn::text("Writing.").tool_use(
        "worker_call_1",
        "write_file",
        json!({ "path": path, "content": content }),
    ))
    .into()
}

fn responder(request: &RecordedRequest) -> Reply {
    match who(request) {
        Who::Lead => lead_reply(request, &[(TESTS_BRIEF, None), (RENAME_BRIEF, None)]),
        Who::Worker if answered(request) => usage(Turn::text("WORKER-FINAL: done.")).into(),
        Who::Worker => {
            let brief = first_user_text(request);
            if brief.starts_with(FIXER_HEADING) {
                write("pkg/_textwrap.py", TEXTWRAP_FIXED)
            } else if brief.starts_with("A-") {
                write("tests/test_formatting.py", &format!("{TESTS}{TESTS_ADDED}"))
            } else {
                write("pkg/_textwrap.py", TEXTWRAP_FORGOT)
            }
        }
        Who::Reviewer if answered(request) => usage(Turn::text("Verdict given.")).into(),
        Who::Reviewer => usage(Turn::new().tool_use(
            "review_call_1",
            "submit_verdict",
            json!({ "verdict": "approve", "summary": "Does what the brief asks." }),
        ))
        .into(),
    }
}

/// The suite's command: pytest from a venv in the checkout when it installs, else
/// unittest (whose traceback prints its innermost frame last, as before issue 43).
fn suite(fixture: &GitFixture) -> String {
    let venv = fixture.repo.join(".venv");
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success(), "python3 -m venv .venv");
    let pip = venv.join("bin/pip");
    let installed = install(
        &fixture.repo,
        pip.to_str().unwrap(),
        &["install", "-q", "--disable-pip-version-check", "pytest"],
        &[("PIP_CACHE_DIR", &cache_dir("pip"))],
    );
    match installed {
        Some(()) => format!(
            "{}/bin/python -B -m pytest -q -p no:cacheprovider tests",
            venv.display()
        ),
        None => "python3 -B -m unittest discover -s tests -t .".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_culprit_is_the_subtask_that_changed_the_frame_that_raised_not_the_test() {
    let fixture = GitFixture::with_files(&[
        (".gitignore", ".venv/\n"),
        ("pkg/__init__.py", ""),
        ("pkg/_textwrap.py", TEXTWRAP),
        ("pkg/formatting.py", FORMATTING),
        ("tests/__init__.py", ""),
        ("tests/test_formatting.py", TESTS),
    ]);
    let check = suite(&fixture);
    fixture.write(
        ".grove/config.toml",
        format!("[check]\ncommand = '{check}'\nfix_attempts = 1\n"),
    );
    fixture.commit_all("the suite is the check");
    let server = FakeServer::with_responder(responder).await;

    let output = grove_in(&fixture, Some(&server), &["run", "--json", "rename _fill"]).await;

    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is one JSON object ({error}): {}", stderr(&output)));
    let red = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["on"] == "result" && run["status"] == "failed")
        .map(|run| run["output_tail"].clone());
    assert_eq!(
        report["check"]["culprit"],
        json!({ "subtasks": ["S2"], "found_by": "failing_file", "at": "pkg/_textwrap.py:6" }),
        "the NameError is raised in pkg/_textwrap.py, which only S2 changed; S1 changed \
         the test file further out in the traceback (`{check}`)\n{red:#?}\n{}",
        stderr(&output)
    );
    let searched: Vec<&str> = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|run| run["on"].as_str())
        .filter(|on| on.starts_with("result without"))
        .collect();
    assert_eq!(
        searched,
        Vec::<&str>::new(),
        "the frame decided: no rebuilt result is checked"
    );
    assert_eq!(
        output.status.code(),
        Some(0),
        "the fixer fixed the call site: {}",
        stderr(&output)
    );
}
