//! One sealed runner for the grove binary, used by every suite.
//!
//! A [`Grove`] runs `target/.../grove` with nothing of the developer's machine: the
//! environment is cleared (only `PATH` is kept), `HOME` is a temp dir, git reads no user
//! or system config (`GIT_CONFIG_GLOBAL=/dev/null`, `GIT_CONFIG_NOSYSTEM=1`), author and
//! committer and their dates are fixed, `NO_COLOR=1`, and stdin is empty. A test that
//! needs more says so (`with_server`, `env`, `env_remove`). Modelled on jj's
//! `cli/tests/common/test_environment.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Output, Stdio};

use super::fake_server::{FakeServer, TEST_API_KEY};
use super::git_fixture::{GitFixture, sealed_env};

/// The grove binary under test.
pub const GROVE: &str = env!("CARGO_BIN_EXE_grove");

/// How to run the grove binary: where, with which HOME, and which extra variables.
#[derive(Debug, Clone)]
pub struct Grove {
    dir: PathBuf,
    home: PathBuf,
    env: Vec<(OsString, Option<OsString>)>,
}

impl Grove {
    /// Runs in `dir` with `home` as HOME.
    pub fn new(dir: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            home: home.into(),
            env: Vec::new(),
        }
    }

    /// Runs in `fixture`'s work tree with its home.
    pub fn in_repo(fixture: &GitFixture) -> Self {
        Self::new(&fixture.repo, fixture.home())
    }

    /// The model APIs of both providers point at `server`, with the test key.
    pub fn with_server(self, server: &FakeServer) -> Self {
        self.env("ANTHROPIC_BASE_URL", server.url())
            .env("ANTHROPIC_API_KEY", TEST_API_KEY)
            .env("OPENAI_BASE_URL", server.openai_url())
            .env("OPENAI_API_KEY", TEST_API_KEY)
            // As the fake server's own clients: a script that holds one request at a
            // gate until another is answered would hold that one's siblings too (the
            // cache suite turns the hold on where it tests it).
            .env("GROVE_MODEL_SIBLING_HOLD_S", "0")
    }

    /// Sets one more variable (set after the sealed ones, so it can replace them).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Unsets a sealed variable (e.g. `NO_COLOR` for a colour test).
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Gives `command` the sealed environment and the directory, for a program that runs
    /// grove itself (a pseudo-terminal through `script`).
    pub fn seal(&self, command: &mut std::process::Command) {
        command.env_clear();
        command.env("PATH", std::env::var_os("PATH").unwrap_or_default());
        command.envs(sealed_env(&self.home));
        command.env("NO_COLOR", "1");
        for (key, value) in &self.env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command.current_dir(&self.dir);
    }

    /// The sealed command `grove ARGS` with empty stdin and captured output.
    pub fn command<I, S>(&self, args: I) -> std::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = std::process::Command::new(GROVE);
        self.seal(&mut command);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs `grove ARGS` to the end (blocking: for tests without a fake server on their
    /// own runtime).
    #[must_use]
    pub fn grove<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args).output().unwrap()
    }

    /// Runs `grove ARGS` to the end without blocking the runtime (the fake server answers
    /// on it).
    #[must_use]
    pub async fn grove_async<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        tokio::process::Command::from(self.command(args))
            .output()
            .await
            .unwrap()
    }

    /// Runs `grove ARGS` with `stdin` as its standard input.
    #[must_use]
    pub async fn grove_with_stdin<I, S>(&self, args: I, stdin: &[u8]) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use tokio::io::AsyncWriteExt as _;
        let mut command = tokio::process::Command::from(self.command(args));
        command.stdin(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        // Written while the child reads, so a large input cannot fill the pipe and stall.
        let writing = async move {
            input.write_all(stdin).await.unwrap();
            drop(input);
        };
        let (output, ()) = tokio::join!(child.wait_with_output(), writing);
        output.unwrap()
    }

    /// Starts `grove ARGS` and hands back the child, its output discarded, for tests
    /// that signal or kill it (killed when dropped).
    pub fn spawn<I, S>(&self, args: I) -> tokio::process::Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.command(args);
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(true);
        command.spawn().unwrap()
    }

    /// Like [`Grove::spawn`], with stdout and stderr piped: the test must read them (or
    /// `wait_with_output`) so that grove never blocks on a full pipe.
    pub fn spawn_piped<I, S>(&self, args: I) -> tokio::process::Child
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = tokio::process::Command::from(self.command(args));
        command.kill_on_drop(true);
        command.spawn().unwrap()
    }
}

/// A grove started by [`Grove::spawn_until`]: stopped at a known point of its run, its
/// stderr read on (so that it never blocks on a full pipe) and kept.
pub struct Watched {
    child: tokio::process::Child,
    /// Every stderr line so far, the one waited for included.
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reading: tokio::task::JoinHandle<()>,
}

impl Grove {
    /// Starts `grove ARGS` and returns once it printed a stderr line `at` accepts (at most
    /// a minute), so that a test signals it at an exact point of its run.
    pub async fn spawn_until<I, S>(&self, args: I, at: impl Fn(&str) -> bool) -> Watched
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        use tokio::io::AsyncBufReadExt as _;
        let mut child = self.spawn_piped(args);
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let keep = |line: &str, stderr: &std::sync::Mutex<String>| {
            let mut kept = stderr.lock().unwrap();
            kept.push_str(line);
            kept.push('\n');
        };
        let deadline = std::time::Duration::from_secs(60);
        let reached = tokio::time::timeout(deadline, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                keep(&line, &stderr);
                if at(&line) {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            reached == Ok(true),
            "grove never printed the line waited for; it printed:\n{}",
            stderr.lock().unwrap()
        );
        let reading = tokio::spawn({
            let stderr = std::sync::Arc::clone(&stderr);
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    keep(&line, &stderr);
                }
            }
        });
        Watched {
            child,
            stderr,
            reading,
        }
    }
}

impl Watched {
    /// Sends `signal` to grove.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = i32::try_from(self.child.id().unwrap()).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    }

    /// Waits (at most a minute) for grove to end, and returns its whole output.
    pub async fn output(self) -> Output {
        let Watched {
            child,
            stderr,
            reading,
        } = self;
        let ended =
            tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
                .await;
        let mut output = ended
            .unwrap_or_else(|_| panic!("grove did not end: {}", stderr.lock().unwrap()))
            .unwrap();
        reading.await.unwrap();
        output.stderr = stderr.lock().unwrap().clone().into_bytes();
        output
    }
}

/// The output's stderr as text.
/// The run id `grove runs --json` lists first.
pub async fn only_run(grove: &Grove) -> String {
    let runs = grove.grove_async(["runs", "--json"]).await;
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    runs[0]["run_id"].as_str().unwrap().to_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `grove ARGS` in `fixture`'s work tree, the model APIs pointed at `server` when
/// there is one: the shape most tests need.
#[must_use]
pub async fn grove_in(fixture: &GitFixture, server: Option<&FakeServer>, args: &[&str]) -> Output {
    let mut grove = Grove::in_repo(fixture);
    if let Some(server) = server {
        grove = grove.with_server(server);
    }
    grove.grove_async(args).await
}

/// Waits until a file named `name` in worktree 1 of a run of `fixture` holds `contents`
/// (a worker's command has run that far), for at most a minute.
///
/// Contents, not existence: a shell's `>` creates the file before the command writes to
/// it, and a signal sent in between would find an empty file.
pub async fn wait_in_worktrees(fixture: &GitFixture, name: &str, contents: &[u8]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !holds_in_worktrees(fixture, name, contents) {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker's command never wrote {name}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// True when a file named `name` in worktree 1 of some run of `fixture` holds `contents`.
fn holds_in_worktrees(fixture: &GitFixture, name: &str, contents: &[u8]) -> bool {
    let Ok(runs) = std::fs::read_dir(fixture.repo.join(".git/grove/runs")) else {
        return false;
    };
    runs.flatten().any(|run| {
        let run_id = run.file_name().to_string_lossy().into_owned();
        let worktree = fixture.worktree_dir(&run_id, 1);
        // While grove runs, a copy-on-write worktree's files are seen only inside its
        // tree host's namespace; what its commands write is in its upper directory.
        let mut upper = worktree.clone().into_os_string();
        upper.push(".cow/upper");
        [worktree.join(name), PathBuf::from(upper).join(name)]
            .iter()
            .any(|candidate| std::fs::read(candidate).is_ok_and(|found| found == contents))
    })
}
