//! Issue 28: real projects' environments, with real toolchains — a `.venv` made by `python
//! -m venv` in the repository, a virtualenv under `$HOME/.virtualenvs` holding an
//! editable install (`pip install -e .`) of the checkout, a `node_modules` from a real
//! `npm install` — each run's check passing on the base, in every worktree and on the
//! result, workers' `bash` using the same environment, and a test suite that serves HTTP
//! on 127.0.0.1 passing in both; in copy-on-write trees and in git worktrees. A worker's
//! or a check's write into the shared `.venv` or `node_modules` fails, and the user's copy
//! stays byte for byte as it was; a check may name the `.venv` by its absolute path.
//!
//! The installs fetch from the package registries (PyPI, npm), with caches under
//! `target/`; where they cannot be reached the tests skip, unless
//! `GROVE_REQUIRE_TOOLCHAINS` (set by `.ci/run`) says they must run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::model::Provider;
use grove::run::{RunOptions, RunReport};
use grove::settings::options::CheckOptions;
use grove::store::journal::{CheckStatus, SubtaskOutcome};
use grove::tools::sandbox::CommandHost;
use grove::worktree::WorktreeMode;

use crate::suite::escapes::mode_or_skip;
use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{answered, lead_reply, models, usage};

/// Where the toolchains' downloads are cached between test runs.
pub(crate) fn cache_dir(tool: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("toolchain-cache")
        .join(tool);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `program args` in `dir` with `env` added; `None` (the test skipped, with why)
/// when it fails, unless `GROVE_REQUIRE_TOOLCHAINS` is set, where it fails the test.
pub(crate) fn install(
    dir: &Path,
    program: &str,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Option<()> {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().map(|(name, value)| (*name, *value)))
        .output();
    let failure = match output {
        Ok(output) if output.status.success() => return Some(()),
        Ok(output) => String::from_utf8_lossy(&output.stderr).into_owned(),
        Err(error) => error.to_string(),
    };
    assert!(
        std::env::var_os("GROVE_REQUIRE_TOOLCHAINS").is_none(),
        "GROVE_REQUIRE_TOOLCHAINS is set but `{program} {args:?}` failed: {failure}"
    );
    eprintln!("skipped: `{program} {args:?}` failed (no registry here?): {failure}");
    None
}

/// The steps a scripted worker takes in its first turn: files it writes and commands it
/// runs, read from the `STEPS:` line of its brief.
pub(crate) fn brief(task: &str, files: &[(&str, &str)], commands: &[&str]) -> String {
    let steps = json!({
        "files": files.iter().map(|(path, content)| json!([path, content])).collect::<Vec<_>>(),
        "commands": commands,
    });
    format!("{task}\nSTEPS: {steps}")
}

fn worker(request: &RecordedRequest) -> Reply {
    if answered(request) {
        return usage(Turn::text("Done as asked.")).into();
    }
    let brief = request.last_user_text();
    let line = brief
        .lines()
        .find_map(|line| line.strip_prefix("STEPS: "))
        .unwrap();
    let steps: Value = serde_json::from_str(line).unwrap();
    let mut turn = Turn::text("Working.");
    for (n, file) in steps["files"].as_array().unwrap().iter().enumerate() {
        turn = turn.tool_use(
            &format!("write_{n}"),
            "write_file",
            json!({ "path": file[0], "content": file[1] }),
        );
    }
    for (n, command) in steps["commands"].as_array().unwrap().iter().enumerate() {
        turn = turn.tool_use(
            &format!("bash_{n}"),
            "bash",
            json!({ "command": command, "timeout_s": 120 }),
        );
    }
    usage(turn).into()
}

fn reviewer(request: &RecordedRequest) -> Reply {
    if answered(request) {
        return usage(Turn::text("Verdict given.")).into();
    }
    let input = json!({ "verdict": "approve", "summary": "Does what the brief asks." });
    usage(Turn::new().tool_use("review_1", "submit_verdict", input)).into()
}

/// A fake server playing a lead that delegates `briefs` at once, scripted workers and
/// approving reviewers.
pub(crate) async fn server(briefs: Vec<String>) -> FakeServer {
    let briefs: &'static [(&'static str, Option<&'static str>)] = Box::leak(
        briefs
            .into_iter()
            .map(|brief| (&*Box::leak(brief.into_boxed_str()), None))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    FakeServer::with_responder(move |request| match who(request) {
        Who::Lead => lead_reply(request, briefs),
        Who::Worker => worker(request),
        Who::Reviewer => reviewer(request),
    })
    .await
}

/// Runs the scripted run with `check` and the commands' `path` and `home`, its worktrees
/// made as `mode` says.
async fn run(
    fixture: &GitFixture,
    server: &FakeServer,
    check: &str,
    path: OsString,
    home: &Path,
    mode: WorktreeMode,
) -> RunReport {
    let env = vec![
        ("PATH".into(), path),
        ("HOME".into(), home.as_os_str().to_owned()),
    ];
    run_with_env(fixture, server, check, env, mode).await
}

/// [`run`] with the commands' whole environment given.
pub(crate) async fn run_with_env(
    fixture: &GitFixture,
    server: &FakeServer,
    check: &str,
    env: Vec<(OsString, OsString)>,
    mode: WorktreeMode,
) -> RunReport {
    let options = RunOptions {
        jobs: 2,
        worktree_mode: mode,
        git: fixture.options(),
        commands: CommandHost { env: Some(env) },
        check: Some(CheckOptions {
            fix_attempts: 0,
            ..CheckOptions::new(check)
        }),
        ..RunOptions::new("Extend the project.")
    };
    let report = tokio::time::timeout(
        Duration::from_secs(300),
        grove::run::run(
            &fixture.repo,
            options,
            models(server, Provider::Anthropic, true),
            EventSink::discard(),
            CancellationToken::new(),
        ),
    )
    .await
    .expect("the run ends")
    .unwrap();
    server.assert_no_violations();
    report
}

/// Every check of the run: (on, status), the subtasks' sorted, with the end of the
/// output of any red one.
pub(crate) fn checks(report: &RunReport) -> Vec<(String, CheckStatus)> {
    let mut runs: Vec<(String, CheckStatus)> = report
        .check
        .runs
        .iter()
        .map(|run| {
            assert_eq!(
                run.status,
                CheckStatus::Passed,
                "the check passes on {}: {}",
                run.on,
                run.output_tail
            );
            (run.on.clone(), run.status)
        })
        .collect();
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    runs
}

/// What each worker's commands printed: the tool results of its second request.
pub(crate) fn worker_outputs(server: &FakeServer) -> Vec<String> {
    let mut outputs: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Worker && answered(request))
        .map(|request| {
            request
                .tool_results()
                .into_iter()
                .filter(|(id, _)| id.starts_with("bash_"))
                .map(|(_, text)| text)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    outputs.sort();
    outputs
}

pub(crate) fn statuses(report: &RunReport) -> Vec<SubtaskOutcome> {
    report
        .subtasks
        .iter()
        .map(|subtask| subtask.status)
        .collect()
}

/// A unittest module that serves HTTP on 127.0.0.1 in the test, as web projects do.
const TEST_SERVER: &str = r#"import http.server, threading, unittest, urllib.request


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"served")

    def log_message(self, *args):
        pass


class ServerTest(unittest.TestCase):
    def test_a_local_server_answers(self):
        server = http.server.HTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/"
        self.assertEqual(urllib.request.urlopen(url, timeout=5).read(), b"served")
        server.shutdown()
"#;

/// Every file, directory and link beneath `dir`: its kind, mode and content (a link's
/// target), by path.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let meta = std::fs::symlink_metadata(&at).unwrap();
        let content = if meta.is_symlink() {
            std::fs::read_link(&at)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if meta.is_dir() {
            pending.extend(std::fs::read_dir(&at).unwrap().map(|e| e.unwrap().path()));
            Vec::new()
        } else {
            std::fs::read(&at).unwrap()
        };
        files.insert(at, (meta.permissions().mode(), content));
    }
    files
}

/// How a check names the repository's `.venv`.
#[derive(Clone, Copy)]
enum Named {
    /// `.venv/bin/python`, relative to the tree it runs in.
    Relative,
    /// The user's checkout's `/…/repo/.venv/bin/python`, as the issue's user wrote it.
    Absolute,
}

async fn a_venv_in_the_repository(test: &str, mode: WorktreeMode, named: Named) {
    let fixture = GitFixture::with_files(&[
        (".gitignore", ".venv/\n"),
        ("calc.py", "def add(a, b):\n    return a + b\n"),
        (
            "test_calc.py",
            "import unittest\n\nimport localdep\nfrom calc import add\n\n\n\
             class AddTest(unittest.TestCase):\n    def test_add(self):\n        \
             self.assertEqual(add(2, localdep.TWO), 4)\n",
        ),
        ("test_server.py", TEST_SERVER),
    ]);
    if !mode_or_skip(test, &fixture, mode).await {
        return;
    }
    // `python -m venv .venv` in the checkout, and a dependency installed into it alone.
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(&fixture.repo)
        .status()
        .unwrap();
    assert!(made.success(), "python3 -m venv .venv");
    let site = std::fs::read_dir(fixture.repo.join(".venv/lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    std::fs::write(site.join("localdep.py"), "TWO = 2\n").unwrap();
    let before = snapshot(&fixture.repo.join(".venv"));
    let venv = match named {
        Named::Relative => ".venv".to_owned(),
        Named::Absolute => fixture.repo.join(".venv").display().to_string(),
    };
    // No `-B`: Python writes its bytecode caches, which must stay out of the commits. The
    // check passes only where it cannot write into the shared `.venv`.
    let check =
        format!("! touch {venv}/check-wrote 2>/dev/null && {venv}/bin/python -m unittest -q");
    // Each worker runs the suite, then tries to change the shared `.venv`.
    let commands = format!(
        "{venv}/bin/python -m unittest -q 2>&1 | tail -1; \
         echo tampered 2>/dev/null >> {venv}/pyvenv.cfg; echo append=$?; \
         rm -f {venv}/bin/python 2>/dev/null; echo rm=$?; \
         {venv}/bin/python -c 'import localdep' 2>/dev/null; echo import=$?"
    );
    let server = server(vec![
        brief(
            "Add mul.",
            &[("calc_mul.py", "def mul(a, b):\n    return a * b\n")],
            &[&commands],
        ),
        brief(
            "Add sub, with its test.",
            &[
                ("calc_sub.py", "def sub(a, b):\n    return a - b\n"),
                (
                    "test_sub.py",
                    "import unittest\n\nfrom calc_sub import sub\n\n\n\
                     class SubTest(unittest.TestCase):\n    def test_sub(self):\n        \
                     self.assertEqual(sub(5, 3), 2)\n",
                ),
            ],
            &[&commands],
        ),
    ])
    .await;

    let report = run(
        &fixture,
        &server,
        &check,
        "/usr/bin:/bin".into(),
        &fixture.home(),
        mode,
    )
    .await;

    assert_eq!(
        statuses(&report),
        vec![SubtaskOutcome::Merged, SubtaskOutcome::Merged],
        "{report:#?}"
    );
    assert_eq!(
        checks(&report),
        [
            ("S1", CheckStatus::Passed),
            ("S2", CheckStatus::Passed),
            ("base", CheckStatus::Passed),
            ("result", CheckStatus::Passed)
        ]
        .map(|(on, status)| (on.to_owned(), status))
        .to_vec(),
        "the checkout's .venv ({venv}) runs the check on the base, in each worktree and on \
         the result, and the check cannot write into it ({mode})"
    );
    let worker_saw = "OK\nappend=1\nrm=1\nimport=0\n[exit code: 0]\n".to_owned();
    assert_eq!(
        worker_outputs(&server),
        vec![worker_saw.clone(), worker_saw],
        "each worker's bash runs the suite (its local server included) with the same .venv, \
         and its writes there fail ({mode})"
    );
    let after = snapshot(&fixture.repo.join(".venv"));
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys().filter(|path| !before.contains_key(*path)))
        .filter(|path| before.get(*path) != after.get(*path))
        .collect();
    assert_eq!(
        changed,
        Vec::<&PathBuf>::new(),
        "the user's .venv is byte for byte as it was: no file added, removed or changed by \
         the workers' writes, the checks or their bytecode ({mode})"
    );
    assert_eq!(
        fixture
            .git(&["ls-tree", "-r", "--name-only", "HEAD"])
            .lines()
            .filter(|path| path.contains("__pycache__") || path.ends_with(".pyc"))
            .collect::<Vec<_>>(),
        Vec::<&str>::new(),
        "the checks and the workers' runs wrote bytecode, and none of it reached a commit \
         (no .gitignore names it) ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_venv_in_the_repository_serves_every_worktree_and_the_result() {
    a_venv_in_the_repository(
        "a_venv_in_the_repository_serves_every_worktree_and_the_result",
        WorktreeMode::Overlay,
        Named::Relative,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_venv_in_the_repository_serves_every_git_worktree_and_the_result() {
    a_venv_in_the_repository(
        "a_venv_in_the_repository_serves_every_git_worktree_and_the_result",
        WorktreeMode::Git,
        Named::Relative,
    )
    .await;
}

/// The issue's first failing case: `/…/repo/.venv/bin/python -m unittest` as the check
/// (every check ended `PermissionError: … '/…/.venv/pyvenv.cfg'`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_check_naming_the_repositorys_venv_by_its_absolute_path_passes_everywhere() {
    a_venv_in_the_repository(
        "a_check_naming_the_repositorys_venv_by_its_absolute_path_passes_everywhere",
        WorktreeMode::Overlay,
        Named::Absolute,
    )
    .await;
}

/// Where the virtualenv with the project installed editable lies, and how the commands
/// reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VenvAt {
    /// `~/.virtualenvs/shop`, activated: its `bin` first on PATH.
    HomeActivated,
    /// Outside the home and the repository (`/opt/venvs/shop`, a conda env, under
    /// `/tmp`), named by its path in the check and the worker's command.
    ElsewhereByPath,
}

async fn an_editable_install_in_a_home_virtualenv(test: &str, mode: WorktreeMode) {
    an_editable_install(test, mode, VenvAt::HomeActivated).await;
}

async fn an_editable_install(test: &str, mode: WorktreeMode, at: VenvAt) {
    let fixture = GitFixture::with_files(&[
        (".gitignore", "*.egg-info/\n"),
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"setuptools>=61\"]\n\
             build-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"shop\"\n\
             version = \"0.1\"\n\n[tool.setuptools.packages.find]\nwhere = [\"src\"]\n",
        ),
        (
            "src/shop/__init__.py",
            "def price(cents):\n    return cents\n",
        ),
        (
            "tests/test_price.py",
            "import unittest\n\nfrom shop import price\n\n\n\
             class PriceTest(unittest.TestCase):\n    def test_price(self):\n        \
             self.assertEqual(price(100), 100)\n",
        ),
    ]);
    if !mode_or_skip(test, &fixture, mode).await {
        return;
    }
    // virtualenvwrapper's place, in a home of the test's own; the project installed
    // editable from the user's checkout, as `pip install -e .` does.
    let home = fixture.home();
    let venv = match at {
        VenvAt::HomeActivated => home.join(".virtualenvs/shop"),
        VenvAt::ElsewhereByPath => fixture.dir.path().join("opt/venvs/shop"),
    };
    let made = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success(), "python3 -m venv ~/.virtualenvs/shop");
    let pip = venv.join("bin/pip");
    if install(
        &fixture.repo,
        pip.to_str().unwrap(),
        &[
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            "-e",
            ".",
        ],
        &[("PIP_CACHE_DIR", &cache_dir("pip"))],
    )
    .is_none()
    {
        return;
    }
    // Activated: its bin first on PATH, as in the user's shell; or named by its path.
    let (path, python) = match at {
        VenvAt::HomeActivated => (
            OsString::from(format!("{}:/usr/bin:/bin", venv.join("bin").display())),
            "python".to_owned(),
        ),
        VenvAt::ElsewhereByPath => (
            OsString::from("/usr/bin:/bin"),
            venv.join("bin/python").display().to_string(),
        ),
    };
    let suite = format!("{python} -B -m unittest discover -s tests -q");
    let discount = "def discount(cents, percent):\n    return cents * (100 - percent) // 100\n";
    let server = server(vec![brief(
        "Add discount, with its test.",
        &[
            (
                "src/shop/__init__.py",
                &format!("def price(cents):\n    return cents\n\n\n{discount}"),
            ),
            (
                "tests/test_discount.py",
                "import unittest\n\nfrom shop import discount\n\n\n\
                 class DiscountTest(unittest.TestCase):\n    def test_discount(self):\n        \
                 self.assertEqual(discount(200, 25), 150)\n",
            ),
        ],
        &[&format!("{suite} 2>&1 | tail -1")],
    )])
    .await;

    let report = run(&fixture, &server, &suite, path, &home, mode).await;

    assert_eq!(
        statuses(&report),
        vec![SubtaskOutcome::Merged],
        "{report:#?}"
    );
    assert_eq!(
        checks(&report),
        [
            ("S1", CheckStatus::Passed),
            ("base", CheckStatus::Passed),
            ("result", CheckStatus::Passed)
        ]
        .map(|(on, status)| (on.to_owned(), status))
        .to_vec(),
        "the editable install imports the tree's own `shop` (the user's has no discount) \
         ({mode})"
    );
    assert_eq!(
        worker_outputs(&server),
        vec!["OK\n[exit code: 0]\n".to_owned()],
        "the worker's bash imports its own code through the same editable install ({mode})"
    );
    // The user's checkout had no `discount` while S1's check ran; it has it now that
    // the result is applied.
    assert!(
        std::fs::read_to_string(fixture.repo.join("src/shop/__init__.py"))
            .unwrap()
            .contains("discount"),
        "the result was applied to the user's branch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_editable_install_in_a_home_virtualenv_tests_each_worktrees_code() {
    an_editable_install_in_a_home_virtualenv(
        "an_editable_install_in_a_home_virtualenv_tests_each_worktrees_code",
        WorktreeMode::Overlay,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_editable_install_in_a_home_virtualenv_tests_each_git_worktrees_code() {
    an_editable_install_in_a_home_virtualenv(
        "an_editable_install_in_a_home_virtualenv_tests_each_git_worktrees_code",
        WorktreeMode::Git,
    )
    .await;
}

/// The issue's other failing case: a venv outside the home and the repository with the
/// project installed editable failed every check with `ModuleNotFoundError` (the finder
/// points at the user's checkout, which commands could not see).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_editable_install_in_a_venv_outside_home_and_repository_tests_each_trees_code() {
    an_editable_install(
        "an_editable_install_in_a_venv_outside_home_and_repository_tests_each_trees_code",
        WorktreeMode::Overlay,
        VenvAt::ElsewhereByPath,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_editable_install_in_a_venv_outside_home_and_repository_tests_each_git_trees_code() {
    an_editable_install(
        "an_editable_install_in_a_venv_outside_home_and_repository_tests_each_git_trees_code",
        WorktreeMode::Git,
        VenvAt::ElsewhereByPath,
    )
    .await;
}

async fn node_modules_from_a_real_npm_install(test: &str, mode: WorktreeMode) {
    let fixture = GitFixture::with_files(&[
        (".gitignore", "node_modules/\n"),
        (
            "package.json",
            r#"{"name": "app", "version": "1.0.0", "private": true,
 "scripts": {"test": "node --test"},
 "dependencies": {"is-number": "7.0.0"}}
"#,
        ),
        (
            "index.js",
            "const isNumber = require('is-number');\nexports.half = (n) => (isNumber(n) ? n / 2 : NaN);\n",
        ),
        (
            "test/half.test.js",
            "const test = require('node:test');\nconst assert = require('node:assert');\n\
             const { half } = require('../index.js');\ntest('half', () => assert.strictEqual(half(4), 2));\n",
        ),
    ]);
    if !mode_or_skip(test, &fixture, mode).await {
        return;
    }
    let npm_cache = cache_dir("npm");
    if install(
        &fixture.repo,
        "npm",
        &[
            "install",
            "--no-audit",
            "--no-fund",
            "--prefer-offline",
            "--silent",
        ],
        &[("npm_config_cache", &npm_cache)],
    )
    .is_none()
    {
        return;
    }
    fixture.commit_all("lock the dependencies");
    let before = snapshot(&fixture.repo.join("node_modules"));
    let node_dir = which("node").parent().unwrap().to_path_buf();
    let path = OsString::from(format!("{}:/usr/bin:/bin", node_dir.display()));
    let server = server(vec![brief(
        "Add double, with its test.",
        &[
            (
                "double.js",
                "const isNumber = require('is-number');\nexports.double = (n) => (isNumber(n) ? n * 2 : NaN);\n",
            ),
            (
                "test/double.test.js",
                "const test = require('node:test');\nconst assert = require('node:assert');\n\
                 const { double } = require('../double.js');\n\
                 test('double', () => assert.strictEqual(double(4), 8));\n",
            ),
        ],
        &["node --test 2>&1 | grep -E '^# (pass|fail)'; \
           echo tampered 2>/dev/null >> node_modules/is-number/index.js; echo append=$?"],
    )])
    .await;

    let report = run(
        &fixture,
        &server,
        "node --test",
        path,
        &fixture.home(),
        mode,
    )
    .await;

    assert_eq!(
        statuses(&report),
        vec![SubtaskOutcome::Merged],
        "{report:#?}"
    );
    assert_eq!(
        checks(&report),
        [
            ("S1", CheckStatus::Passed),
            ("base", CheckStatus::Passed),
            ("result", CheckStatus::Passed)
        ]
        .map(|(on, status)| (on.to_owned(), status))
        .to_vec(),
        "the checkout's node_modules (a real npm install) serve the check everywhere ({mode})"
    );
    assert_eq!(
        worker_outputs(&server),
        vec!["# pass 2\n# fail 0\nappend=1\n[exit code: 0]\n".to_owned()],
        "the worker's bash requires is-number from the same node_modules, and cannot \
         write there ({mode})"
    );
    assert!(
        snapshot(&fixture.repo.join("node_modules")) == before,
        "the user's node_modules is byte for byte as it was ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_modules_from_a_real_npm_install_serve_every_worktree() {
    node_modules_from_a_real_npm_install(
        "node_modules_from_a_real_npm_install_serve_every_worktree",
        WorktreeMode::Overlay,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_modules_from_a_real_npm_install_serve_every_git_worktree() {
    node_modules_from_a_real_npm_install(
        "node_modules_from_a_real_npm_install_serve_every_git_worktree",
        WorktreeMode::Git,
    )
    .await;
}

/// The program `name` on this process's PATH.
fn which(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}
