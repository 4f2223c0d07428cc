//! The sealed git CLI runner: the only place grove starts a `git` process.
//!
//! It owns the rule that host-side git never trusts a repository or a worktree: every
//! command gets an explicit git dir (and work tree when it needs one), hooks and
//! fsmonitor off, no pager, editor, ssh, external diff or signing program, no inherited
//! `GIT_*` variable, and the repository-local filter and merge drivers neutralised. It
//! must never run a program named by repository config, and never print.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::sync::Arc;

use tokio::io::AsyncWriteExt;

use super::error::GitError;

/// Config overrides passed as `-c` to every git command. Command-line config beats
/// every config file, so nothing the repository (or the worktree) says can re-enable a
/// program: hooks, fsmonitor, ssh, pagers, editors, external diff, signing, auto-gc.
const SEALED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=",
    "sequence.editor=false",
    "credential.helper=",
    "diff.external=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "merge.verifySignatures=false",
    "log.showSignature=false",
    "color.ui=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
    "advice.detachedHead=false",
];

/// Who grove's commits are attributed to when the caller does not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Author and committer name.
    pub name: String,
    /// Author and committer email.
    pub email: String,
}

impl Default for Identity {
    fn default() -> Self {
        Self {
            name: "grove".to_owned(),
            email: "grove@localhost".to_owned(),
        }
    }
}

/// How to run git for one repository; see [`Repo::open`](crate::git::Repo::open).
#[derive(Debug, Clone)]
pub struct GitOptions {
    /// The git executable; `git` from `PATH` by default.
    pub program: PathBuf,
    /// Identity for every commit grove writes.
    pub identity: Identity,
    /// Extra environment applied last, after grove's sealed values (tests pass
    /// `GIT_CONFIG_GLOBAL`, `HOME` and fixed dates here). Never set process-wide.
    pub env: Vec<(OsString, OsString)>,
}

impl Default for GitOptions {
    fn default() -> Self {
        Self {
            program: PathBuf::from("git"),
            identity: Identity::default(),
            env: Vec::new(),
        }
    }
}

/// A finished git command.
#[derive(Debug)]
pub(crate) struct GitOutput {
    /// Exit code; only codes the caller allowed reach it.
    pub code: i32,
    pub stdout: Vec<u8>,
}

impl GitOutput {
    /// Stdout as text with the trailing newline removed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim_end().to_owned()
    }
}

/// Runs git commands with the sealed environment of one repository.
#[derive(Debug, Clone)]
pub(crate) struct GitRunner {
    options: GitOptions,
    /// `-c` overrides for drivers that the repository's own config defines.
    neutralized: Vec<String>,
}

/// One git invocation being built.
pub(crate) struct GitCall<'a> {
    runner: &'a GitRunner,
    git_dir: PathBuf,
    work_tree: Option<PathBuf>,
    cwd: PathBuf,
    args: Vec<OsString>,
    stdin: Option<Vec<u8>>,
    allowed_codes: Vec<i32>,
    env: Vec<(OsString, OsString)>,
    /// Run with the user's own identity and config lookup instead of grove's.
    user_identity: bool,
    /// Where the command starts instead of this process's own view (a copy-on-write
    /// tree's namespaces: its work tree is only there).
    place: Option<Arc<dyn Enter>>,
}

/// Somewhere a git process starts that is not this process's own view of the files: the
/// namespaces of a copy-on-write tree. The place owns how it is entered.
pub trait Enter: Send + Sync + std::fmt::Debug {
    /// Makes `command` start inside this place with `cwd` (a path there) as its working
    /// directory; false when it cannot be entered that way (the command then runs here).
    fn enter(&self, cwd: &Path, command: &mut std::process::Command) -> bool;
}

/// The variables of this process that a call made [`GitCall::with_user_identity`]
/// keeps: what `git commit` reads to pick the user's identity, and where the user's own
/// git finds its config.
const USER_IDENTITY_VARS: &[&str] = &[
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_AUTHOR_DATE",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "GIT_COMMITTER_DATE",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
];

/// How many times a command that hit another process's lock file is retried.
pub(super) const LOCK_RETRIES: u32 = 8;

impl GitRunner {
    pub fn new(options: GitOptions) -> Self {
        Self {
            options,
            neutralized: Vec::new(),
        }
    }

    /// The author or committer (`role`: `AUTHOR`, `COMMITTER`) of in-process commits, as a
    /// git command of this runner would write it: the identity unless the extra
    /// environment names another, and `GIT_<role>_DATE` when it sets one (sealed tests do,
    /// so that the same inputs give the same commit), else the current time.
    pub fn signature(&self, role: &str) -> Result<git2::Signature<'static>, git2::Error> {
        let from_env = |name: String| {
            self.options
                .env
                .iter()
                .rev()
                .find(|(key, _)| *key == *name)
                .map(|(_, value)| value.to_string_lossy().into_owned())
        };
        let name = from_env(format!("GIT_{role}_NAME"))
            .unwrap_or_else(|| self.options.identity.name.clone());
        let email = from_env(format!("GIT_{role}_EMAIL"))
            .unwrap_or_else(|| self.options.identity.email.clone());
        match from_env(format!("GIT_{role}_DATE")) {
            None => git2::Signature::now(&name, &email),
            Some(date) => {
                let (seconds, offset_minutes) = parse_git_date(&date).ok_or_else(|| {
                    git2::Error::from_str(&format!("GIT_{role}_DATE {date:?} is not a date"))
                })?;
                git2::Signature::new(&name, &email, &git2::Time::new(seconds, offset_minutes))
            }
        }
    }

    /// Who grove's own commits are attributed to.
    pub fn identity(&self) -> &Identity {
        &self.options.identity
    }

    /// The value git's processes see for environment variable `name`: the extra
    /// environment first, then grove's own.
    pub fn env_var(&self, name: &str) -> Option<OsString> {
        super::location::env_var(&self.options.env, name)
    }

    /// Records the repository-local driver config to neutralise on every call.
    pub fn set_neutralized(&mut self, overrides: Vec<String>) {
        self.neutralized = overrides;
    }

    /// A call against `git_dir`, run from `cwd`, with no work tree.
    pub fn call(&self, git_dir: &Path, cwd: &Path) -> GitCall<'_> {
        GitCall {
            runner: self,
            git_dir: git_dir.to_path_buf(),
            work_tree: None,
            cwd: cwd.to_path_buf(),
            args: Vec::new(),
            stdin: None,
            allowed_codes: vec![0],
            env: Vec::new(),
            user_identity: false,
            place: None,
        }
    }
}

impl GitCall<'_> {
    /// Starts the command inside `place` (see [`Enter`]) instead of here.
    pub fn inside(mut self, place: Option<Arc<dyn Enter>>) -> Self {
        self.place = place;
        self
    }

    /// Sets the work tree explicitly (never discovered from a `.git` file).
    pub fn work_tree(mut self, path: &Path) -> Self {
        self.work_tree = Some(path.to_path_buf());
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn stdin(mut self, input: Vec<u8>) -> Self {
        self.stdin = Some(input);
        self
    }

    /// Also accepts these exit codes as answers rather than failures.
    pub fn allow_codes(mut self, codes: &[i32]) -> Self {
        self.allowed_codes.extend_from_slice(codes);
        self
    }

    /// Uses `index` as the index file instead of the git dir's.
    pub fn index_file(mut self, index: &Path) -> Self {
        self.env
            .push(("GIT_INDEX_FILE".into(), index.as_os_str().to_owned()));
        self
    }

    /// Lets a read-only command skip optional locks (e.g. `status` refreshing the index),
    /// so it never collides with the user's own git.
    pub fn no_optional_locks(mut self) -> Self {
        self.env
            .push(("GIT_OPTIONAL_LOCKS".into(), OsString::from("0")));
        self
    }

    /// Sets one variable for this call (after grove's own, before the extra environment
    /// of [`GitOptions::env`]).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs with the identity the user's own `git commit` would pick (this process's
    /// `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, then the repository's, the user's and the
    /// system's config) rather than grove's; for reading that identity only.
    pub fn with_user_identity(mut self) -> Self {
        self.user_identity = true;
        self
    }

    fn op_name(&self) -> String {
        self.args
            .iter()
            .take(3)
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn command(&self) -> tokio::process::Command {
        let options = &self.runner.options;
        let mut cmd = tokio::process::Command::new(&options.program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_PAGER", "cat")
            .env("LC_ALL", "C");
        if self.user_identity {
            for name in USER_IDENTITY_VARS {
                if let Some(value) = std::env::var_os(name) {
                    cmd.env(name, value);
                }
            }
        } else {
            cmd.env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_AUTHOR_NAME", &options.identity.name)
                .env("GIT_AUTHOR_EMAIL", &options.identity.email)
                .env("GIT_COMMITTER_NAME", &options.identity.name)
                .env("GIT_COMMITTER_EMAIL", &options.identity.email);
        }
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        for (key, value) in &options.env {
            cmd.env(key, value);
        }
        cmd.arg("--no-pager");
        for setting in SEALED_CONFIG
            .iter()
            .map(|s| (*s).to_owned())
            .chain(self.runner.neutralized.iter().cloned())
        {
            cmd.arg("-c").arg(setting);
        }
        let mut git_dir = OsString::from("--git-dir=");
        git_dir.push(&self.git_dir);
        cmd.arg(git_dir);
        if let Some(work_tree) = &self.work_tree {
            let mut flag = OsString::from("--work-tree=");
            flag.push(work_tree);
            cmd.arg(flag);
        }
        cmd.args(&self.args)
            .current_dir(&self.cwd)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(place) = &self.place {
            place.enter(&self.cwd, cmd.as_std_mut());
        }
        cmd
    }

    /// Starts git; again, after a moment, while its program is busy (ETXTBSY). That is a
    /// script just written (a wrapper named by `GitOptions::program`) whose writing fd a
    /// child forked meanwhile by another thread still holds until it execs; it passes
    /// within milliseconds. Retried 5 times, 10 to 50 ms apart.
    async fn spawn(&self) -> std::io::Result<tokio::process::Child> {
        let mut attempt = 0;
        loop {
            match self.command().spawn() {
                Err(error) if error.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    attempt += 1;
                    if attempt > 5 {
                        return Err(error);
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10 * attempt)).await;
                }
                spawned => return spawned,
            }
        }
    }

    async fn run_once(&self) -> Result<GitOutput, GitError> {
        let op = self.op_name();
        let mut child = self.spawn().await.map_err(|source| GitError::Spawn {
            op: op.clone(),
            dir: self.cwd.clone(),
            source,
        })?;
        if let (Some(input), Some(mut pipe)) = (&self.stdin, child.stdin.take()) {
            // A write error means git exited early; its status and stderr tell why.
            let _ = pipe.write_all(input).await;
            drop(pipe);
        }
        let output = child
            .wait_with_output()
            .await
            .map_err(|source| GitError::Spawn {
                op: op.clone(),
                dir: self.cwd.clone(),
                source,
            })?;
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        match output.status.code() {
            Some(code) if self.allowed_codes.contains(&code) => Ok(GitOutput {
                code,
                stdout: output.stdout,
            }),
            _ => Err(GitError::Command {
                op,
                dir: self.cwd.clone(),
                status: output.status.to_string(),
                stderr,
            }),
        }
    }

    /// Runs the command, retrying with backoff while another process holds a lock.
    pub async fn run(self) -> Result<GitOutput, GitError> {
        let mut attempt = 0;
        loop {
            match self.run_once().await {
                Err(error) if error.is_lock_contention() && attempt < LOCK_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(lock_backoff(attempt)).await;
                }
                result => return result,
            }
        }
    }

    /// Runs the command and returns its trimmed stdout.
    pub async fn text(self) -> Result<String, GitError> {
        Ok(self.run().await?.text())
    }
}

/// Exponential backoff with jitter: 10, 20, 40 ... ms, capped at 400 ms, plus up to 10 ms.
pub(super) fn lock_backoff(attempt: u32) -> Duration {
    let base = 10u64.saturating_mul(1 << attempt.min(6)).min(400);
    Duration::from_millis(base + fastrand::u64(0..10))
}

/// Turns `git config --null --list --show-scope` output into `-c` overrides that disable
/// every filter, merge and diff driver defined in repository-local config.
///
/// Choice: drivers from the repository's own config (local/worktree scope, which a cloned
/// or tampered repository controls) never run; drivers from the user's global config
/// (e.g. git-lfs installed by the user) are the user's own trust decision and are kept.
/// A neutralised filter stores file bytes as they are; a neutralised merge driver turns
/// that file's merge into a conflict rather than silently picking a side.
pub(crate) fn neutralizing_overrides(config_listing: &[u8]) -> Vec<String> {
    let mut overrides = Vec::new();
    let mut fields = config_listing.split(|b| *b == 0);
    while let (Some(scope), Some(entry)) = (fields.next(), fields.next()) {
        if scope != b"local" && scope != b"worktree" {
            continue;
        }
        let entry = String::from_utf8_lossy(entry);
        // git prints section and variable lowercased and the subsection as written.
        let key = entry.split('\n').next().unwrap_or_default();
        let Some((section_and_name, variable)) = key.rsplit_once('.') else {
            continue;
        };
        let Some((section, name)) = section_and_name.split_once('.') else {
            continue;
        };
        let replacements: &[(&str, &str)] = match (section, variable) {
            ("filter", "clean" | "smudge" | "process" | "required") => &[
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ],
            ("merge", "driver") => &[("driver", "false")],
            ("diff", "textconv" | "command") => &[("textconv", ""), ("command", "")],
            _ => &[],
        };
        for (var, value) in replacements {
            let setting = format!("{section}.{name}.{var}={value}");
            if !overrides.contains(&setting) {
                overrides.push(setting);
            }
        }
    }
    overrides
}

/// Seconds since the epoch and the UTC offset in minutes of a date in the forms git's
/// `GIT_*_DATE` takes that grove's callers use: `@SECONDS [+HHMM]`, `SECONDS +HHMM`, and
/// ISO 8601 `YYYY-MM-DDTHH:MM:SS` with `Z` or `±HH:MM`.
pub(super) fn parse_git_date(text: &str) -> Option<(i64, i32)> {
    let text = text.trim();
    let offset = |zone: &str| -> Option<i32> {
        let (sign, digits) = match zone.as_bytes().first()? {
            b'+' => (1, &zone[1..]),
            b'-' => (-1, &zone[1..]),
            _ => return None,
        };
        let digits = digits.replace(':', "");
        if digits.len() != 4 {
            return None;
        }
        let hours: i32 = digits[..2].parse().ok()?;
        let minutes: i32 = digits[2..].parse().ok()?;
        Some(sign * (hours * 60 + minutes))
    };
    let raw = text.strip_prefix('@').unwrap_or(text);
    let mut parts = raw.split_whitespace();
    if let Some(Ok(seconds)) = parts.next().map(str::parse::<i64>) {
        let zone = match parts.next() {
            Some(zone) => offset(zone)?,
            None => 0,
        };
        return Some((seconds, zone));
    }
    let (date, time) = text.split_once('T')?;
    let (clock, zone) = match time.strip_suffix('Z') {
        Some(clock) => (clock, 0),
        None => {
            let at = time.rfind(['+', '-'])?;
            (&time[..at], offset(&time[at..])?)
        }
    };
    let mut ymd = date.split('-').map(str::parse::<i64>);
    let (year, month, day) = (ymd.next()?.ok()?, ymd.next()?.ok()?, ymd.next()?.ok()?);
    let mut hms = clock.split(':').map(str::parse::<i64>);
    let (hour, minute, second) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let local = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some((local - i64::from(zone) * 60, zone))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::error::stderr_shows_lock_contention;
    use super::*;

    #[test]
    fn git_dates_parse_as_git_reads_them() {
        // The expected values are what `git var GIT_COMMITTER_IDENT` prints for each.
        for (date, expected) in [
            ("2026-01-01T00:00:00Z", Some((1_767_225_600, 0))),
            ("2026-01-01T01:30:00+02:00", Some((1_767_223_800, 120))),
            ("2000-02-29T12:00:00Z", Some((951_825_600, 0))),
            ("@1767225600 +0000", Some((1_767_225_600, 0))),
            ("1767225600 -0130", Some((1_767_225_600, -90))),
            ("@1767225600", Some((1_767_225_600, 0))),
            ("yesterday", None),
            ("2026-13-01T00:00:00Z", None),
        ] {
            assert_eq!(parse_git_date(date), expected, "{date}");
        }
    }

    #[test]
    fn local_drivers_are_neutralized_and_global_ones_kept() {
        let listing = b"local\0core.bare\nfalse\0local\0filter.evil.clean\nrm -rf ~\0\
global\0filter.lfs.smudge\ngit-lfs smudge\0worktree\0merge.ours.driver\ntrue\0";
        assert_eq!(
            neutralizing_overrides(listing),
            vec![
                "filter.evil.clean=",
                "filter.evil.smudge=",
                "filter.evil.process=",
                "filter.evil.required=false",
                "merge.ours.driver=false",
            ],
            "only repository-local drivers are overridden"
        );
    }

    #[test]
    fn lock_contention_is_told_apart_from_a_cas_mismatch() {
        assert!(stderr_shows_lock_contention(
            "fatal: Unable to create '/r/.git/index.lock': File exists."
        ));
        assert!(!stderr_shows_lock_contention(
            "fatal: cannot lock ref 'refs/heads/x': is at 1 but expected 2"
        ));
    }
}
