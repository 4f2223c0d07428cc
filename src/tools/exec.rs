//! The command executor seam: how a shell command of the model's actually runs.
//!
//! This module owns process lifetime and the command environment. [`LocalExecutor`] runs
//! `bash -c` (or `sh -c`) on this machine in a process group of its own, with stdin from
//! /dev/null, stdout and stderr merged into one pipe read incrementally into a capped
//! head + tail, and an environment rebuilt from an allow-list that never lets through
//! anything named like a secret. When the command ends, times out, is cancelled, or its
//! future is dropped, the whole process group is killed, so no background child outlives
//! it. A kernel sandbox or a remote pod is another [`CommandExecutor`]. This module must
//! never interpret the command text: it hands it to the shell unchanged.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt as _;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::text::{display, display_tail};
use super::tree::namespace::TreeNamespace;

/// Variables passed through to commands, by exact name (plus every `LC_*`).
pub const ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// Fragments of variable names that mark a secret; such a variable is never passed, even
/// when allow-listed.
const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
];

/// Variables every command gets, so nothing waits for a terminal that is not there.
const FIXED_ENV: &[(&str, &str)] = &[
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_PAGER", "cat"),
    ("PAGER", "cat"),
];

/// How long to keep reading output after the command and its process group are gone; only
/// a process that escaped the group (e.g. with `setsid`) can hold the pipe open this long.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// Shell command text, run as `bash -c COMMAND`.
    pub command: String,
    /// Working directory (the worktree).
    pub cwd: PathBuf,
    /// Wall-clock limit; the process group is killed when it passes.
    pub timeout: Duration,
    /// Cancelled when the caller stops; the process group is killed.
    pub cancel: CancellationToken,
    /// Bytes kept from the start and from the end of the output; the middle is cut.
    pub output_cap: OutputCap,
}

/// How much output is kept: the first `head` bytes and the last `tail` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCap {
    pub head: usize,
    pub tail: usize,
}

impl Default for OutputCap {
    fn default() -> Self {
        Self {
            head: 16 * 1024,
            tail: 16 * 1024,
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecOutcome {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal (not by us).
    Signalled(i32),
    /// The timeout passed; the process group was killed.
    TimedOut,
    /// The request was cancelled; the process group was killed.
    Cancelled,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub outcome: ExecOutcome,
    /// The start of the merged stdout + stderr (at most `output_cap.head` bytes).
    pub head: Vec<u8>,
    /// The end of the output when it was longer than the head (at most `output_cap.tail`).
    pub tail: Vec<u8>,
    /// Every byte the command wrote, including the cut ones.
    pub total_bytes: u64,
    /// True when reading stopped because a process outside the group held the pipe open.
    pub output_abandoned: bool,
    /// What the executor itself has to tell the model about this run (e.g. that it undid
    /// a change the command made to something it must not change), one line each.
    pub notes: Vec<String>,
    /// Set when the command left its worktree over the disk budget: the command counts as
    /// failed whatever its exit code.
    pub disk_over_budget: Option<DiskOverBudget>,
}

/// A worktree over its disk budget after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskOverBudget {
    /// Bytes the worktree takes on disk.
    pub used: u64,
    /// Bytes it may take.
    pub budget: u64,
}

impl fmt::Display for DiskOverBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
        write!(
            f,
            "the worktree takes {:.1} MiB on disk, {:.1} MiB over its budget of {:.1} MiB; \
             delete what the command made (build output, downloads) before going on",
            mib(self.used),
            mib(self.used.saturating_sub(self.budget)),
            mib(self.budget)
        )
    }
}

impl ExecResult {
    /// Bytes cut from the middle of the output.
    pub fn cut_bytes(&self) -> u64 {
        self.total_bytes
            .saturating_sub((self.head.len() + self.tail.len()) as u64)
    }

    /// The output as text: head, a note of the cut, tail. Invalid UTF-8 is replaced.
    pub fn output_text(&self) -> String {
        let cut = self.cut_bytes();
        if cut == 0 {
            // Head and tail are contiguous: a character may straddle them.
            let whole = [self.head.as_slice(), &self.tail].concat();
            return display(&whole, false).0.into_owned();
        }
        let (head, _, head_dropped) = display(&self.head, true);
        let (tail, _, tail_dropped) = display_tail(&self.tail);
        let cut = cut + head_dropped as u64 + tail_dropped as u64;
        let mut text = head.into_owned();
        if cut > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[... {cut} bytes of output cut here; {} bytes in total ...]\n",
                self.total_bytes
            ));
        }
        text.push_str(&tail);
        text
    }
}

/// A failure to run a command at all (not a command that failed).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The output pipe could not be created. Not retried.
    #[error("cannot create the output pipe for a command: {0}")]
    Pipe(#[source] std::io::Error),
    /// The shell could not be started (missing shell, missing working directory). Not retried.
    #[error("cannot start `{shell}` in {cwd}: {source}")]
    Spawn {
        shell: PathBuf,
        cwd: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the shell failed. Not retried.
    #[error("waiting for the command failed: {0}")]
    Wait(#[source] std::io::Error),
    /// Reading the command's output failed. Not retried.
    #[error("reading the command's output failed: {0}")]
    Read(#[source] std::io::Error),
    /// The sandbox refused to run the command because it could not confine it (see the
    /// `sandbox` module); nothing of the command ran. Not retried: the system will not
    /// change its mind.
    #[error("the sandbox refused to run the command: {reason}")]
    Sandbox { reason: String },
    /// The machine the command runs on could not run it (a remote host lost or
    /// refusing). Not retried here: the run moves the subtask to another host.
    #[error("the remote host could not run the command: {reason}")]
    Elsewhere { reason: String },
}

/// Runs commands somewhere: this machine today, a sandbox or a remote pod later.
#[async_trait]
pub trait CommandExecutor: Send + Sync + fmt::Debug {
    /// Runs `request` to completion (or timeout, or cancellation) and reports what it did.
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError>;

    /// The executor a worktree's `setup` command runs through: this one's confinement
    /// (none when this one has none), with `policy`'s network and writable caches.
    fn for_setup(&self, policy: &SetupPolicy) -> std::sync::Arc<dyn CommandExecutor>;

    /// This executor's commands, run inside a copy-on-write tree's namespaces (the
    /// `tree` module): joined in each command's process before its confinement.
    /// `None` when this executor cannot (the tree then cannot be used with it).
    fn inside(
        &self,
        _namespace: &std::sync::Arc<TreeNamespace>,
    ) -> Option<std::sync::Arc<dyn CommandExecutor>> {
        None
    }

    /// This executor's commands, each in a disposable copy-on-write view of its tree
    /// (its writes thrown away when it ends) and without the network: what a reviewer
    /// runs to try the work it judges. `None` when this executor cannot make one.
    fn disposable(&self) -> Option<std::sync::Arc<dyn CommandExecutor>> {
        None
    }
}

/// What a worktree's `setup` command may do beyond a worker's command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupPolicy {
    /// Internet sockets (`npm ci` downloads); on by default.
    pub allow_network: bool,
    /// Directories it may write besides the worktree and its `TMPDIR` (package caches).
    pub writable: Vec<PathBuf>,
}

impl Default for SetupPolicy {
    fn default() -> Self {
        Self {
            allow_network: true,
            writable: Vec::new(),
        }
    }
}

/// Runs commands on this machine, each in its own process group.
#[derive(Clone)]
pub struct LocalExecutor {
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// The copy-on-write tree its commands join, if any.
    tree: Option<std::sync::Arc<TreeNamespace>>,
}

impl fmt::Debug for LocalExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("LocalExecutor")
            .field("shell", &self.shell)
            .field("env_names", &names)
            .field("tree", &self.tree.as_ref().map(|tree| tree.path()))
            .finish()
    }
}

impl LocalExecutor {
    /// Commands get the allow-listed part of this process's environment.
    pub fn from_process_env() -> Self {
        Self::with_env(std::env::vars_os())
    }

    /// Commands get the allow-listed part of `env` (the rest is dropped, secrets always).
    pub fn with_env(env: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        Self {
            shell: default_shell(),
            env: scrub_env(env),
            tree: None,
        }
    }

    /// Adds (or replaces) one variable after scrubbing: the caller vouches for it, e.g. a
    /// shared `CARGO_TARGET_DIR` for every worktree.
    pub fn with_var(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        let name = name.into();
        self.env.retain(|(kept, _)| *kept != name);
        self.env.push((name, value.into()));
        self.env.sort();
        self
    }

    /// The shell commands run with (`bash` when installed, else `sh`).
    pub fn shell(&self) -> &Path {
        &self.shell
    }

    /// The environment commands run with.
    pub fn env(&self) -> &[(OsString, OsString)] {
        &self.env
    }
}

pub(crate) fn default_shell() -> PathBuf {
    ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
        .iter()
        .map(PathBuf::from)
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

/// The allow-listed, secret-free part of `env`, plus the fixed variables, sorted by name.
pub fn scrub_env(env: impl IntoIterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let mut kept: Vec<(OsString, OsString)> = env
        .into_iter()
        .filter(|(name, _)| is_allowed(name))
        .collect();
    for (name, value) in FIXED_ENV {
        kept.retain(|(kept_name, _)| kept_name != name);
        kept.push(((*name).into(), (*value).into()));
    }
    kept.sort();
    kept.dedup_by(|a, b| a.0 == b.0);
    kept
}

fn is_allowed(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    let upper = name.to_ascii_uppercase();
    if SECRET_MARKERS.iter().any(|marker| upper.contains(marker)) {
        return false;
    }
    ENV_ALLOW_LIST.contains(&name) || name.starts_with("LC_")
}

/// Kills a process group once: explicitly, or when dropped, because a dropped `execute`
/// future (the agent loop aborted) must not leave the command running.
struct GroupKiller {
    group: Option<Pid>,
}

impl GroupKiller {
    /// Sends SIGKILL to the group; true when it still had members (ESRCH, nothing left,
    /// is the normal case after a clean exit).
    fn kill(&mut self) -> bool {
        match self.group.take() {
            Some(group) => killpg(group, Signal::SIGKILL).is_ok(),
            None => false,
        }
    }
}

/// How long [`wait_until_group_is_dead`] waits for killed processes to finish dying.
const DEATH_WAIT: Duration = Duration::from_secs(2);

/// Waits until no member of the killed process group `group` is still running (zombies
/// waiting for a reaper count as dead), killing again meanwhile, so that a command is
/// reported finished only once nothing of it runs. SIGKILL reaches every member at once,
/// a process being forked included, but a loaded machine may take a moment to run each
/// one's exit.
async fn wait_until_group_is_dead(group: Pid) {
    let deadline = tokio::time::Instant::now() + DEATH_WAIT;
    while group_has_running_member(group) && tokio::time::Instant::now() < deadline {
        let _ = killpg(group, Signal::SIGKILL);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// True when a process of group `group` is alive and not a zombie (Linux: from /proc).
#[cfg(target_os = "linux")]
fn group_has_running_member(group: Pid) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let group = group.as_raw().to_string();
    entries.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // After the `(comm)` field: state, ppid, pgrp.
        let mut fields = stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1);
        state != Some("Z") && pgrp == Some(group.as_str())
    })
}

/// Without /proc, a killed group is taken at its word.
#[cfg(not(target_os = "linux"))]
fn group_has_running_member(_group: Pid) -> bool {
    false
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The capped output: the first bytes kept whole, then a sliding window of the last.
struct Collector {
    cap: OutputCap,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Collector {
    fn new(cap: OutputCap) -> Self {
        Self {
            cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.cap.head.saturating_sub(self.head.len());
        let to_head = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..to_head]);
        bytes = &bytes[to_head..];
        if self.cap.tail == 0 || bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.cap.tail {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.cap.tail..]);
        } else {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(self.cap.tail);
            self.tail.drain(..excess);
        }
    }
}

#[async_trait]
impl CommandExecutor for LocalExecutor {
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        let args = [OsString::from("-c"), OsString::from(&request.command)];
        let entry = match &self.tree {
            Some(tree) => Some(tree.entry(&request.cwd).ok_or_else(|| ExecError::Spawn {
                shell: self.shell.clone(),
                cwd: request.cwd.clone(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            })?),
            None => None,
        };
        run_in_process_group(&self.shell, &args, &self.env, &request, |command| {
            if let Some(entry) = entry {
                // The directory exists inside the tree; the join enters it there.
                command.current_dir("/");
                entry.command_at_exec(command.as_std_mut());
            }
        })
        .await
    }

    fn for_setup(&self, _policy: &SetupPolicy) -> std::sync::Arc<dyn CommandExecutor> {
        std::sync::Arc::new(self.clone())
    }

    fn inside(
        &self,
        namespace: &std::sync::Arc<TreeNamespace>,
    ) -> Option<std::sync::Arc<dyn CommandExecutor>> {
        let mut inside = self.clone();
        inside.tree = Some(std::sync::Arc::clone(namespace));
        Some(std::sync::Arc::new(inside))
    }
}

/// Runs `program args…` for `request` in a process group of its own, with `env` only,
/// stdin from /dev/null and stdout + stderr merged into one capped capture; the group is
/// killed when the command ends, times out, is cancelled, or this future is dropped.
/// `customize` adds to the command before it is spawned (e.g. its confinement).
pub(crate) async fn run_in_process_group(
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    request: &ExecRequest,
    customize: impl FnOnce(&mut tokio::process::Command),
) -> Result<ExecResult, ExecError> {
    let (reader, writer) = std::io::pipe().map_err(ExecError::Pipe)?;
    let writer_for_stderr = writer.try_clone().map_err(ExecError::Pipe)?;
    let mut reader =
        pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(ExecError::Pipe)?;

    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(&request.cwd)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_for_stderr)
        .process_group(0)
        .kill_on_drop(true);
    // First: the parent-death signal is the process grove forked, which `customize` may
    // turn into the keeper of a pid namespace that never returns from its hooks.
    hygiene_at_exec(&mut command);
    customize(&mut command);
    // The thread that spawns owns the parent-death signal; it must outlive the command.
    // `spawn_lasting` drops the command, and with it our copies of the pipe's write end,
    // so the pipe reaches EOF once the command's processes are gone.
    let spawned = spawn_lasting(command).await;
    let mut child = spawned.map_err(|source| ExecError::Spawn {
        shell: program.to_path_buf(),
        cwd: request.cwd.clone(),
        source,
    })?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let mut killer = GroupKiller { group };

    let mut collector = Collector::new(request.output_cap);
    let mut buffer = vec![0u8; 64 * 1024];
    let deadline = tokio::time::sleep(request.timeout);
    tokio::pin!(deadline);
    let mut eof = false;
    let outcome = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(ExecError::Wait)?;
                break match (status.code(), status.signal()) {
                    (Some(code), _) => ExecOutcome::Exited(code),
                    (None, Some(signal)) => ExecOutcome::Signalled(signal),
                    (None, None) => ExecOutcome::Signalled(0),
                };
            }
            read = reader.read(&mut buffer), if !eof => {
                match read.map_err(ExecError::Read)? {
                    0 => eof = true,
                    n => collector.push(&buffer[..n]),
                }
            }
            () = &mut deadline => {
                let _ = killer.kill();
                child.wait().await.map_err(ExecError::Wait)?;
                break ExecOutcome::TimedOut;
            }
            () = request.cancel.cancelled() => {
                let _ = killer.kill();
                child.wait().await.map_err(ExecError::Wait)?;
                break ExecOutcome::Cancelled;
            }
        }
    };
    // Background children of a finished command would hold the pipe open forever.
    // The leader is reaped by now, but while any member lives the group id cannot be
    // reused, and with no member left the kill finds nothing (ESRCH).
    // After a timeout or cancel the group was killed above; a finished command's group
    // may still hold background processes.
    let had_members = killer.kill();
    if let Some(group) = group
        && (had_members || matches!(outcome, ExecOutcome::TimedOut | ExecOutcome::Cancelled))
    {
        wait_until_group_is_dead(group).await;
    }

    let mut output_abandoned = false;
    if !eof {
        let drain = async {
            loop {
                match reader.read(&mut buffer).await {
                    Ok(0) => return Ok(()),
                    Ok(n) => collector.push(&buffer[..n]),
                    Err(err) => return Err(err),
                }
            }
        };
        match tokio::time::timeout(DRAIN_GRACE, drain).await {
            Ok(read) => read.map_err(ExecError::Read)?,
            Err(_) => output_abandoned = true,
        }
    }

    Ok(ExecResult {
        outcome,
        head: collector.head,
        tail: collector.tail.into_iter().collect(),
        total_bytes: collector.total,
        output_abandoned,
        notes: Vec::new(),
        disk_over_budget: None,
    })
}

/// Makes `command`'s process take [`child_hygiene`] before `exec`.
pub(crate) fn hygiene_at_exec(command: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the hook runs in the forked child and makes async-signal-safe system calls
    // only (prctl, getppid, close_range or fcntl, _exit); it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            child_hygiene(parent);
            Ok(())
        });
    }
}

/// What every command's process does before `exec`, whoever runs it (a sandboxed
/// command, the setup command, an external worker CLI, the check):
///
/// - it is killed when grove dies (`PR_SET_PDEATHSIG`), and gives up at once if grove is
///   already gone, so a `kill -9` of grove leaves no shell running (in the sandbox or a
///   copy-on-write tree the process is then the keeper of a pid namespace, whose
///   processes die with it: see `pid_namespace`; elsewhere its background children, still
///   in the process group and the cgroup, are killed by the next grove: see
///   `sandbox::kill_orphaned_commands`);
/// - no descriptor above stderr survives the `exec`: grove may have inherited some from
///   whoever started it (`7>>file 8<~/.ssh/id_rsa 9<>/dev/tcp/…`), and a command must not
///   read, write or send through them.
#[allow(unsafe_code)]
fn child_hygiene(parent: Pid) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments and _exit are async-signal-safe.
    unsafe {
        nix::libc::prctl(
            nix::libc::PR_SET_PDEATHSIG,
            nix::libc::SIGKILL as nix::libc::c_ulong,
            0,
            0,
            0,
        );
        if nix::libc::getppid() != parent.as_raw() {
            nix::libc::_exit(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    close_inherited_descriptors();
}

/// Marks every descriptor above 2 close-on-exec (the kernel's `close_range`, else one
/// `fcntl` per possible descriptor). Marking rather than closing keeps the descriptor the
/// standard library reports an `exec` failure through.
#[allow(unsafe_code)]
fn close_inherited_descriptors() {
    use nix::libc;
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a plain system call on integers.
        let swept = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
            )
        };
        if swept == 0 {
            return;
        }
    }
    // SAFETY: getrlimit fills a struct on the stack; fcntl on integers.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let highest = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            1 << 16
        };
        for fd in 3..highest {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// Gives the heap memory freed so far back to the kernel (glibc's `malloc_trim`; nothing
/// elsewhere), for a process that goes on after a run: `grove mcp`, the benchmarks.
///
/// Every process grove starts is forked from it, and a fork copies the page table of
/// each page the allocator holds, freed or not. Measured on 2 cores: over ten 32-subtask
/// runs in one process, freed memory kept in glibc's arenas grew the process from 20 to
/// 72 MB, and the forks' page-table copy from 12 % to 21 % of its CPU time. Trimming
/// once per run takes about 5 ms.
#[allow(unsafe_code)]
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's own locks and only releases free pages.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// A spawn request for the spawning thread.
type SpawnJob = (
    tokio::process::Command,
    tokio::runtime::Handle,
    tokio::sync::oneshot::Sender<std::io::Result<Unclaimed>>,
);

/// A child just spawned (in its own process group) on its way to the caller. If the
/// caller's future is dropped while the spawn is in flight, nobody claims it, and its
/// whole group is killed here: `kill_on_drop` alone would kill only the shell and leave
/// what it started running.
struct Unclaimed(Option<tokio::process::Child>);

impl Unclaimed {
    fn claim(mut self) -> Option<tokio::process::Child> {
        self.0.take()
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        let group = self.0.as_ref().and_then(tokio::process::Child::id);
        if let Some(group) = group.and_then(|id| i32::try_from(id).ok()) {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
    }
}

/// Spawns `command` from one thread that lives as long as grove: the kernel sends the
/// parent-death signal when the spawning *thread* exits, and a runtime's threads come and
/// go (a blocking section hands its worker's place to a new thread).
pub(crate) async fn spawn_lasting(
    command: tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    static SPAWNER: std::sync::OnceLock<
        Option<std::sync::Mutex<std::sync::mpsc::Sender<SpawnJob>>>,
    > = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, jobs) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("grove-spawner".into())
            .spawn(move || {
                for (mut command, runtime, reply) in jobs {
                    let _entered = runtime.enter();
                    let spawned = command.spawn().map(|child| Unclaimed(Some(child)));
                    drop(command);
                    // A caller gone meanwhile drops the reply, and with it kills the group.
                    let _ = reply.send(spawned);
                }
            })
            .ok()
            .map(|_| std::sync::Mutex::new(sender))
    });
    let gone = || std::io::Error::other("grove's process-spawning thread is gone");
    let Some(spawner) = spawner else {
        return Err(gone());
    };
    let (reply, spawned) = tokio::sync::oneshot::channel();
    spawner
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send((command, tokio::runtime::Handle::current(), reply))
        .map_err(|_| gone())?;
    spawned.await.map_err(|_| gone())??.claim().ok_or_else(gone)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value)))
            .collect()
    }

    #[test]
    fn scrub_env_keeps_the_allow_list_and_never_a_secret() {
        let scrubbed = scrub_env(env(&[
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/me"),
            ("LC_ALL", "C.UTF-8"),
            ("ANTHROPIC_API_KEY", "sk-ant-fake"),
            ("OPENAI_API_KEY", "sk-fake"),
            ("GITHUB_TOKEN", "ghp_fake"),
            ("AWS_SECRET_ACCESS_KEY", "fake"),
            ("LC_SECRET_TOKEN", "allow-listed prefix, secret name"),
            ("DATABASE_PASSWORD", "fake"),
            ("RANDOM_SETTING", "not allow-listed"),
            ("PAGER", "less"),
        ]));
        assert_eq!(
            scrubbed,
            env(&[
                ("GIT_PAGER", "cat"),
                ("GIT_TERMINAL_PROMPT", "0"),
                ("HOME", "/home/me"),
                ("LC_ALL", "C.UTF-8"),
                ("PAGER", "cat"),
                ("PATH", "/usr/bin:/bin"),
            ]),
            "only allow-listed, secret-free variables and the fixed ones survive"
        );
    }

    #[test]
    fn with_var_adds_a_vouched_variable_after_scrubbing() {
        let executor = LocalExecutor::with_env(env(&[("PATH", "/bin"), ("PAGER", "less")]))
            .with_var("CARGO_TARGET_DIR", "/shared/target")
            .with_var("PATH", "/usr/bin");
        assert_eq!(
            executor.env(),
            env(&[
                ("CARGO_TARGET_DIR", "/shared/target"),
                ("GIT_PAGER", "cat"),
                ("GIT_TERMINAL_PROMPT", "0"),
                ("PAGER", "cat"),
                ("PATH", "/usr/bin"),
            ])
            .as_slice()
        );
    }

    #[test]
    fn collector_keeps_head_and_tail_of_any_chunking() {
        let cap = OutputCap { head: 4, tail: 3 };
        let data: Vec<u8> = (0u8..20).collect();
        for chunk in [1, 2, 3, 5, 20] {
            let mut collector = Collector::new(cap);
            for piece in data.chunks(chunk) {
                collector.push(piece);
            }
            assert_eq!(
                (
                    collector.head.clone(),
                    Vec::from(collector.tail.clone()),
                    collector.total
                ),
                (vec![0, 1, 2, 3], vec![17, 18, 19], 20),
                "chunk size {chunk} must not change what is kept"
            );
        }
    }

    #[test]
    fn output_text_joins_an_uncut_head_and_tail() {
        let word = "añb".as_bytes();
        let result = ExecResult {
            outcome: ExecOutcome::Exited(0),
            head: word[..2].to_vec(),
            tail: word[2..].to_vec(),
            total_bytes: word.len() as u64,
            output_abandoned: false,
            notes: Vec::new(),
            disk_over_budget: None,
        };
        assert_eq!(
            result.output_text(),
            "añb",
            "a character split between head and tail is whole again"
        );
    }

    #[test]
    fn output_text_notes_the_cut() {
        let result = ExecResult {
            outcome: ExecOutcome::Exited(0),
            head: b"start\n".to_vec(),
            tail: b"end\n".to_vec(),
            total_bytes: 100,
            output_abandoned: false,
            notes: Vec::new(),
            disk_over_budget: None,
        };
        assert_eq!(
            result.output_text(),
            "start\n[... 90 bytes of output cut here; 100 bytes in total ...]\nend\n"
        );
    }

    #[tokio::test]
    async fn a_spawned_child_nobody_claims_takes_its_whole_group_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("sleeper");
        let mut command = tokio::process::Command::new("bash");
        command
            .arg("-c")
            .arg(format!(
                "sleep 1000 & echo $! > {}; wait",
                pid_file.display()
            ))
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().unwrap();
        let sleeper = loop {
            match std::fs::read_to_string(&pid_file) {
                Ok(text) if text.ends_with('\n') => break text.trim().parse::<i32>().unwrap(),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };

        // What the spawning thread's reply holds when the caller's future was dropped.
        drop(Unclaimed(Some(child)));

        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        let running = || {
            std::fs::read_to_string(format!("/proc/{sleeper}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        while running() && std::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let survived = running();
        if survived {
            let _ = nix::sys::signal::kill(Pid::from_raw(sleeper), Signal::SIGKILL);
        }
        assert!(
            !survived,
            "a child dropped before its caller claimed it leaves nothing of its group running"
        );
    }
}
