//! Issue 45: `[[check.ratchet]]`, a check that may not get worse. Real mypy, ruff and
//! pytest (a venv the test makes once, cached under `target/toolchain-cache`), the grove
//! binary, and the fake model server playing the lead, workers, reviewers and fixer:
//! the base's findings stay silent, a subtask's one new finding makes it red alone,
//! moved code adds none, a fixed one is reported fixed, a merge that adds findings names
//! its culprit and briefs a fixer with them alone, the base's findings are found once
//! per base commit, and a ratchet that gives nothing stops the run before any worker.
//!
//! Without PyPI the tests skip, unless `GROVE_REQUIRE_TOOLCHAINS` says they must run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::suite::environment::{cache_dir, install};
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, first_user_text, lead_reply, usage};

/// The tools at the versions the parsers' samples came from.
const TOOLS: &[&str] = &["mypy==1.13.0", "ruff==0.8.4", "pytest==8.3.4"];

const FIXER_HEADING: &str = "# Fix the project's check on the merged result";

/// The venv holding mypy, ruff and pytest, made once and kept between test runs; `None`
/// (skipped, with why) where PyPI cannot be reached.
fn tools_venv() -> Option<PathBuf> {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = MAKING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let venv = cache_dir("ratchet-venv");
    let python = venv.join("bin/python3");
    let pinned = TOOLS
        .iter()
        .map(|pin| {
            let (name, version) = pin.split_once("==").unwrap();
            format!("m.version('{name}') == '{version}'")
        })
        .collect::<Vec<_>>()
        .join(" and ");
    let ready = Command::new(&python)
        .args([
            "-c",
            &format!("import importlib.metadata as m, sys; sys.exit(not ({pinned}))"),
        ])
        .status()
        .is_ok_and(|status| status.success());
    if !ready {
        install(&venv, "python3", &["-m", "venv", "--clear", "."], &[])?;
        let mut args = vec!["-m", "pip", "install", "-q", "--disable-pip-version-check"];
        args.extend(TOOLS);
        install(
            &venv,
            python.to_str().unwrap(),
            &args,
            &[("PIP_CACHE_DIR", &cache_dir("pip"))],
        )?;
    }
    Some(venv.join("bin"))
}

/// grove in `fixture`'s checkout, the model APIs at `server`, `bin` first on PATH.
async fn grove(fixture: &GitFixture, server: &FakeServer, bin: &Path, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Grove::in_repo(fixture)
        .with_server(server)
        .env("PATH", path)
        .grove_async(args)
        .await
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "stdout is one JSON object ({error}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(output)
        )
    })
}

/// `n` functions that each return the wrong type: one mypy error apiece.
fn wrong_returns(from: usize, to: usize) -> String {
    (from..to)
        .map(|n| format!("\n\ndef bad_{n}() -> int:\n    return \"{n}\"\n"))
        .collect()
}

const MYPY: &str = "mypy --cache-dir=/dev/null src";
const RUFF: &str = "ruff check --no-cache src";
const PYTEST: &str = "PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=src pytest -q -p no:cacheprovider \
                      --junitxml=report.xml tests";

/// A package whose base has 15 mypy errors (10 in core.py, 5 in more.py), one unused
/// import and one failing test, and `config`.
fn package(config: &str) -> GitFixture {
    let core = format!(
        "\"\"\"Core.\"\"\"\nimport os\n\n\ndef scale(x: int) -> int:\n    return x * 2\n{}",
        wrong_returns(0, 10)
    );
    let more = format!("\"\"\"More.\"\"\"\n{}", wrong_returns(10, 15));
    GitFixture::with_files(&[
        ("src/pkg/__init__.py", ""),
        ("src/pkg/core.py", &core),
        ("src/pkg/more.py", &more),
        (
            "tests/test_core.py",
            "from pkg.core import scale\n\n\ndef test_scale():\n    assert scale(2) == 4\n\n\n\
             def test_known_bad():\n    assert scale(1) == 3\n",
        ),
        (".gitignore", "report.xml\n"),
        (".grove/config.toml", config),
    ])
}

/// A worker that writes the files its brief's table row names; every reviewer approves.
fn responder(
    briefs: &'static [(&'static str, Option<&'static str>)],
    writes: fn(&str) -> Vec<(String, String)>,
) -> impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static {
    move |request| match who(request) {
        Who::Lead => lead_reply(request, briefs),
        Who::Worker if answered(request) => usage(Turn::text("WORKER-FINAL: done.")).into(),
        Who::Worker => {
            let mut turn = Turn::text("Writing.");
            for (n, (path, content)) in writes(&first_user_text(request)).iter().enumerate() {
                turn = turn.tool_use(
                    &format!("write_{n}"),
                    "write_file",
                    json!({ "path": path, "content": content }),
                );
            }
            usage(turn).into()
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

/// Each ratchet's (command, new, fixed, unchanged) on the check `run`.
fn counts(run: &Value) -> Vec<(String, u64, u64, u64)> {
    run["ratchets"]
        .as_array()
        .unwrap_or_else(|| panic!("a check with ratchets lists them: {run:#}"))
        .iter()
        .map(|tally| {
            (
                tally["command"].as_str().unwrap().to_owned(),
                tally["new"].as_u64().unwrap(),
                tally["fixed"].as_u64().unwrap(),
                tally["unchanged"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn tally(command: &str, new: u64, fixed: u64, unchanged: u64) -> (String, u64, u64, u64) {
    (command.to_owned(), new, fixed, unchanged)
}

/// The check run on `on` in the report's list.
fn run_on<'a>(report: &'a Value, on: &str) -> &'a Value {
    report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|run| run["on"] == on)
        .unwrap_or_else(|| panic!("a check ran on {on}: {report:#}"))
}

const ADD: &str = "ADD: a module with an unchecked return, an unused import and a failing test";
const MOVE: &str = "MOVE: a helper at the top of core.py (every line below moves)";
const FIX: &str = "FIX: fix bad_12 in more.py";
const THREE: &[(&str, Option<&str>)] = &[(ADD, None), (MOVE, None), (FIX, None)];

fn three_writes(brief: &str) -> Vec<(String, String)> {
    let file = |path: &str, content: String| vec![(path.to_owned(), content)];
    if brief.starts_with("ADD") {
        let mut files = file(
            "src/pkg/extra.py",
            "import sys\n\n\ndef extra() -> int:\n    return \"extra\"\n".to_owned(),
        );
        files.extend(file(
            "tests/test_extra.py",
            "def test_extra_bad():\n    assert 1 == 2\n".to_owned(),
        ));
        files
    } else if brief.starts_with("MOVE") {
        let helper = "\n\n# A helper, well typed, above everything else:\n# each line of the \
                      file moves down.\ndef helper(values: list[int]) -> int:\n    total = 0\n    \
                      for value in values:\n        total += value\n    return total\n";
        file(
            "src/pkg/core.py",
            format!(
                "\"\"\"Core.\"\"\"\nimport os\n{helper}\n\ndef scale(x: int) -> int:\n    \
                 return x * 2\n{}",
                wrong_returns(0, 10)
            ),
        )
    } else {
        let fixed = wrong_returns(10, 15).replace("return \"12\"", "return 12");
        file("src/pkg/more.py", format!("\"\"\"More.\"\"\"\n{fixed}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subtask_with_one_new_finding_is_red_with_it_alone_moved_code_adds_none_and_a_fix_is_counted()
 {
    one_new_finding("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_git_worktrees_too_a_subtask_with_one_new_finding_is_red_with_it_alone() {
    one_new_finding("[worktree]\nmode = 'git'\n").await;
}

/// Three subtasks — one adding a finding to each ratchet, one moving every line of a
/// file, one fixing a base error — with `worktree` as the `[worktree]` table.
async fn one_new_finding(worktree: &str) {
    let Some(bin) = tools_venv() else { return };
    let config = format!(
        "{worktree}[check]\ncommand = 'true'\nsubtask = 'require'\n\n[[check.ratchet]]\n\
         command = '{MYPY}'\n\n[[check.ratchet]]\ncommand = '{RUFF}'\n\n[[check.ratchet]]\n\
         command = '{PYTEST}'\nparse = 'junit'\njunit = 'report.xml'\n"
    );
    let fixture = package(&config);
    let server = FakeServer::with_responder(responder(THREE, three_writes)).await;

    let output = grove(&fixture, &server, &bin, &["run", "--json", "three changes"]).await;

    let report = report(&output);
    let said = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(3),
        "ADD is rejected by its red check, so not everything was done: {said}"
    );
    let subtask = |id: &str| {
        report["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    let (add, moved, fix) = (subtask("S1"), subtask("S2"), subtask("S3"));
    assert_eq!(
        (
            add["status"].clone(),
            counts(&add["check"]),
            add["check"]["ratchets"][0]["new_findings"].clone(),
            add["check"]["ratchets"][2]["new_findings"].clone(),
        ),
        (
            json!("rejected"),
            vec![
                tally(MYPY, 1, 0, 15),
                tally(RUFF, 1, 0, 1),
                tally(PYTEST, 1, 0, 1)
            ],
            json!([{
                "file": "src/pkg/extra.py",
                "code": "return-value",
                "message": "Incompatible return value type (got \"str\", expected \"int\")",
                "at": "5",
            }]),
            json!([{ "file": "tests.test_extra", "code": "", "message": "test_extra_bad" }]),
        ),
        "one new finding per ratchet, the base's 15 mypy errors, its unused import and its \
         failing test unchanged: {said}"
    );
    let shown = add["check"]["output_tail"].as_str().unwrap();
    assert!(
        shown.contains("src/pkg/extra.py:5: [return-value] Incompatible return value")
            && !shown.contains("core.py")
            && !shown.contains("more.py")
            && !shown.contains("test_known_bad"),
        "its check shows its new findings, never the base's: {shown}"
    );
    assert_eq!(
        (
            counts(&moved["check"]),
            counts(&fix["check"]),
            counts(run_on(&report, "result")),
            moved["status"].clone(),
            fix["status"].clone(),
        ),
        (
            vec![
                tally(MYPY, 0, 0, 15),
                tally(RUFF, 0, 0, 1),
                tally(PYTEST, 0, 0, 1)
            ],
            vec![
                tally(MYPY, 0, 1, 14),
                tally(RUFF, 0, 0, 1),
                tally(PYTEST, 0, 0, 1)
            ],
            vec![
                tally(MYPY, 0, 1, 14),
                tally(RUFF, 0, 0, 1),
                tally(PYTEST, 0, 0, 1)
            ],
            json!("merged"),
            json!("merged"),
        ),
        "moving every line adds no finding; the fixed error is counted fixed, on S3's tree \
         and on the result"
    );
    assert_eq!(
        fix["check"]["ratchets"][0]["fixed_findings"][0]["message"],
        "Incompatible return value type (got \"str\", expected \"int\")"
    );
    assert_eq!(run_on(&report, "result")["status"], "passed");
}

const RETYPE: &str = "RETYPE: scale takes and returns text; update its caller in a.py";
const DOUBLE: &str = "DOUBLE: add b.py with double() built on scale";
const TWO: &[(&str, Option<&str>)] = &[(RETYPE, None), (DOUBLE, None)];

fn two_writes(brief: &str) -> Vec<(String, String)> {
    let file = |path: &str, content: &str| vec![(path.to_owned(), content.to_owned())];
    if brief.starts_with(FIXER_HEADING) {
        file(
            "src/pkg/b.py",
            "from pkg.core import scale\n\n\ndef double() -> int:\n    return len(scale(\"3\"))\n",
        )
    } else if brief.starts_with("RETYPE") {
        let mut files = file(
            "src/pkg/core.py",
            "\"\"\"Core.\"\"\"\n\n\ndef scale(x: str) -> str:\n    return x * 2\n",
        );
        files.extend(file(
            "src/pkg/a.py",
            "from pkg.core import scale\n\n\ndef twice() -> str:\n    return scale(\"ab\")\n",
        ));
        files
    } else {
        file(
            "src/pkg/b.py",
            "from pkg.core import scale\n\n\ndef double() -> int:\n    return scale(3)\n",
        )
    }
}

/// A package whose `scale` takes a number, with 2 mypy errors of its own in more.py.
fn scaled(config: &str) -> GitFixture {
    let more = format!("\"\"\"More.\"\"\"\n{}", wrong_returns(0, 2));
    GitFixture::with_files(&[
        ("src/pkg/__init__.py", ""),
        (
            "src/pkg/core.py",
            "\"\"\"Core.\"\"\"\n\n\ndef scale(x: int) -> int:\n    return x * 2\n",
        ),
        (
            "src/pkg/a.py",
            "from pkg.core import scale\n\n\ndef twice() -> int:\n    return scale(2)\n",
        ),
        ("src/pkg/more.py", &more),
        (".grove/config.toml", config),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_subtasks_clean_alone_whose_merge_adds_errors_make_the_result_red_name_the_culprit_and_brief_the_fixer_with_those_alone()
 {
    let Some(bin) = tools_venv() else { return };
    let config = format!(
        "[check]\ncommand = 'true'\nfix_attempts = 1\n\n[[check.ratchet]]\ncommand = '{MYPY}'\n"
    );
    let fixture = scaled(&config);
    let server = FakeServer::with_responder(responder(TWO, two_writes)).await;

    let output = grove(&fixture, &server, &bin, &["run", "--json", "retype scale"]).await;

    let report = report(&output);
    let said = stderr(&output);
    let own: Vec<_> = ["S1", "S2"]
        .iter()
        .map(|id| counts(run_on(&report, id)))
        .collect();
    assert_eq!(
        own,
        vec![vec![tally(MYPY, 0, 0, 2)], vec![tally(MYPY, 0, 0, 2)]],
        "each subtask is clean alone: {said}"
    );
    let first_result = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["on"] == "result")
        .unwrap();
    assert_eq!(
        (first_result["status"].clone(), counts(first_result)),
        (json!("failed"), vec![tally(MYPY, 2, 0, 2)]),
        "merged, b.py's call and return no longer type: two new errors"
    );
    assert_eq!(
        report["check"]["culprit"],
        json!({ "subtasks": ["S2"], "found_by": "failing_line", "at": "src/pkg/b.py:5" }),
        "the new errors lie on the line S2 wrote: {said}"
    );
    let briefs: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Worker && !answered(request))
        .map(first_user_text)
        .filter(|brief| brief.starts_with(FIXER_HEADING))
        .collect();
    assert_eq!(briefs.len(), 1, "one fixer: {said}");
    assert!(
        briefs[0]
            .contains("src/pkg/b.py:5: [arg-type] Argument 1 to \"scale\" has incompatible type")
            && briefs[0].contains("src/pkg/b.py:5: [return-value] Incompatible return value")
            && !briefs[0].contains("more.py"),
        "the fixer is told the two new errors, never the base's: {}",
        briefs[0]
    );
    assert_eq!(
        (
            output.status.code(),
            run_on(&report, "result")["status"].clone(),
            counts(run_on(&report, "result")),
        ),
        (Some(0), json!("passed"), vec![tally(MYPY, 0, 0, 2)]),
        "the fixer's merge makes the result no worse than the base: {said}"
    );
}

const SLOPPY: &str = "SLOPPY: add c.py with an untyped return";
const TIDY: &str = "TIDY: add d.py";
const APPROVED: &[(&str, Option<&str>)] = &[(SLOPPY, None), (TIDY, None)];

fn approved_writes(brief: &str) -> Vec<(String, String)> {
    let file = |content: &str| vec![("src/pkg/c.py".to_owned(), content.to_owned())];
    if brief.starts_with(FIXER_HEADING) {
        file("def c() -> int:\n    return 3\n")
    } else if brief.starts_with("SLOPPY") {
        file("def c() -> int:\n    return \"3\"\n")
    } else {
        vec![("src/pkg/d.py".to_owned(), "D: int = 4\n".to_owned())]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_finding_a_reviewer_let_through_is_blamed_on_the_subtask_whose_tree_first_had_it() {
    let Some(bin) = tools_venv() else { return };
    let config = format!(
        "[check]\ncommand = 'true'\nfix_attempts = 1\n\n[[check.ratchet]]\ncommand = '{MYPY}'\n"
    );
    let fixture = scaled(&config);
    let server = FakeServer::with_responder(responder(APPROVED, approved_writes)).await;

    let output = grove(&fixture, &server, &bin, &["run", "--json", "two modules"]).await;

    let report = report(&output);
    let said = stderr(&output);
    assert_eq!(
        (
            report["check"]["culprit"].clone(),
            counts(run_on(&report, "S1")),
        ),
        (
            json!({
                "subtasks": ["S1"],
                "found_by": "first_had",
                "at": "src/pkg/c.py:2: [return-value] Incompatible return value type (got \"str\", expected \"int\")",
            }),
            vec![tally(MYPY, 1, 0, 2)],
        ),
        "S1's own check had the finding (its reviewer approved anyway): {said}"
    );
    let searched = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["on"].as_str().unwrap().starts_with("result without"))
        .count();
    assert_eq!(searched, 0, "no rebuilt result is checked to find it");
    assert_eq!(
        (output.status.code(), counts(run_on(&report, "result"))),
        (Some(0), vec![tally(MYPY, 0, 0, 2)]),
        "the fixer's merge leaves the result no worse than the base: {said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bases_findings_are_found_once_per_base_commit_and_a_ratchet_giving_nothing_stops_the_run()
 {
    let Some(venv_bin) = tools_venv() else { return };
    // A mypy that refuses to run on the base once `refuse` exists (the base alone lacks
    // src/pkg/mark.py): a second run that ran it on the base again would stop.
    let fixture = scaled("");
    let bin = fixture.home().join(".local/bin");
    let refuse = fixture.home().join(".cache/pip/refuse-base");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(refuse.parent().unwrap()).unwrap();
    let wrapper = bin.join("counted-mypy");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ -e {} ] && [ ! -e src/pkg/mark.py ]; then\n  echo 'ran on the \
             base' >&2; exit 2\nfi\nexec {}/mypy \"$@\"\n",
            refuse.display(),
            venv_bin.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = \
         'counted-mypy --cache-dir=/dev/null src'\ntool = 'mypy'\n",
    );
    fixture.commit_all("a counted mypy");
    const MARK: &[(&str, Option<&str>)] = &[("MARK: add mark.py", None)];
    fn mark(_: &str) -> Vec<(String, String)> {
        vec![("src/pkg/mark.py".to_owned(), "MARK = 1\n".to_owned())]
    }
    let server = FakeServer::with_responder(responder(MARK, mark)).await;
    let path = format!("{}:{}", bin.display(), venv_bin.display());
    let run = || async {
        let output = Grove::in_repo(&fixture)
            .with_server(&server)
            .env(
                "PATH",
                format!("{path}:{}", std::env::var("PATH").unwrap_or_default()),
            )
            .grove_async(["run", "--json", "--no-apply", "mark it"])
            .await;
        (output.status.code(), report(&output), stderr(&output))
    };

    let (first, first_report, said) = run().await;
    std::fs::write(&refuse, "").unwrap();
    let (second, second_report, said_second) = run().await;

    assert_eq!(
        (first, counts(run_on(&first_report, "S1"))),
        (
            Some(0),
            vec![tally("counted-mypy --cache-dir=/dev/null src", 0, 0, 2)]
        ),
        "{said}"
    );
    assert_eq!(
        (
            second,
            second_report["base"].clone(),
            counts(run_on(&second_report, "S1"))
        ),
        (
            Some(0),
            first_report["base"].clone(),
            vec![tally("counted-mypy --cache-dir=/dev/null src", 0, 0, 2)]
        ),
        "the second run from the same base compares with the findings the first found, \
         without running the ratchet on the base again: {said_second}"
    );

    // A JUnit file the command never writes: the run stops before any worker.
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'echo no tests here'\n\
         parse = 'junit'\njunit = 'out/junit.xml'\n",
    );
    fixture.commit_all("a ratchet that writes nothing");
    let asked_before = server.requests().len();
    let (code, _, said) = run().await;
    assert_eq!(
        (code, server.requests().len() - asked_before),
        (Some(1), 0),
        "the run stops before any model call, the lead's included: {said}"
    );
    for words in [
        "the ratchet `echo no tests here` gave nothing to compare on the base: it wrote no \
         JUnit file at `out/junit.xml`",
        "No worker was started",
        "no tests here",
    ] {
        assert!(said.contains(words), "it says {words:?}: {said}");
    }

    // One that writes something that is not JUnit XML.
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'echo 3 passed > \
         out.xml'\nparse = 'junit'\njunit = 'out.xml'\n",
    );
    fixture.commit_all("a ratchet that writes no XML");
    let asked_before = server.requests().len();
    let (code, _, said) = run().await;
    assert_eq!(
        (code, server.requests().len() - asked_before),
        (Some(1), 0),
        "no token spent: {said}"
    );
    assert!(
        said.contains(
            "the ratchet `echo 3 passed > out.xml` gave nothing to compare on the base: its \
             JUnit file `out.xml` is not a JUnit report: no <testsuite> element"
        ),
        "{said}"
    );

    // One whose "report" is a link out of the tree: refused, never read.
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'ln -s /etc/passwd \
         out.xml'\nparse = 'junit'\njunit = 'out.xml'\n",
    );
    fixture.commit_all("a ratchet whose report leads out");
    let (code, _, said) = run().await;
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("its JUnit file `out.xml` cannot be read: ")
            && said.contains("/etc/passwd")
            && !said.contains("root:"),
        "the link is named, what it leads to never read: {said}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ratchet_without_a_command_or_with_a_pattern_that_does_not_compile_is_refused_naming_the_key()
 {
    let cases = [
        (
            "[check]\ncommand = 'true'\n\n[[check.ratchet]]\nparse = 'lines'\n",
            "4:1: check.ratchet[1]: the table needs `command`",
        ),
        (
            "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'make lint'\n\
             pattern = '(?P<file>['\n",
            "6:11: check.ratchet[1].pattern: not a regular expression: ",
        ),
        (
            "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'make lint'\n",
            "4:1: check.ratchet[1]: no `pattern` and no tool grove knows in the command",
        ),
        (
            "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'pytest'\n\
             parse = 'junit'\n",
            "4:1: check.ratchet[1]: the table needs `junit`",
        ),
        (
            "[check]\ncommand = 'true'\n\n[[check.ratchet]]\ncommand = 'mypy .'\n\
             junit = 'r.xml'\n",
            "6:9: check.ratchet[1].junit: this key is read only with parse = \"junit\"",
        ),
    ];
    let server = FakeServer::start().await;
    for (config, says) in cases {
        let fixture = GitFixture::with_files(&[("a.txt", "a\n"), (".grove/config.toml", config)]);
        let output = Grove::in_repo(&fixture)
            .with_server(&server)
            .grove_async(["run", "do something"])
            .await;
        let said = stderr(&output);
        assert_eq!(
            output.status.code(),
            Some(1),
            "an invalid config is an error: {said}"
        );
        assert!(
            said.contains(&format!(".grove/config.toml:{says}")),
            "the error names the file, the place and the key ({says:?}): {said}"
        );
    }
    assert!(
        server.requests().is_empty(),
        "no model was asked anything: {:?}",
        server.requests().len()
    );
}
