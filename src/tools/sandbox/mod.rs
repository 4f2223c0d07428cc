//! The kernel sandbox for the model's shell commands.
//!
//! This module owns what a worker's `bash` command may touch on this machine, and the
//! refusal to run one when that cannot be enforced. It must never run a model's command
//! unconfined while the sandbox is on, and never weaken a policy to make a command work.
//!
//! A command's process confines itself between `fork` and `exec` (the `linux` module): the
//! rules are built once per worktree in grove's process, and the child only hands them to
//! the kernel, so the confinement is inherited by everything the command starts:
//!
//! - writes: only beneath the worktree and the worktree's private temporary directory
//!   (`TMPDIR`, emptied after each command and removed with the executor), plus
//!   `/dev/null`, `/dev/zero` and `/dev/full` (Landlock, filesystem ABI 3: link and rename
//!   across directories and truncation are covered too, so a hard link or `mv` cannot
//!   carry a file out);
//! - reads: everywhere except the user's secrets: every dot-entry of the home
//!   directories (`~/.ssh`, `~/.aws`, `~/.config`, `~/.gitconfig`, shell rc files…) but
//!   the toolchains builds need ([`HOME_TOOLCHAIN_DIRS`], without cargo's registry
//!   credentials), devices other than the few above (a raw disk would bypass every file
//!   rule), and, when grove runs as root, `/etc/shadow`, `/etc/gshadow` and `/etc/ssh`;
//! - network: no `AF_INET`/`AF_INET6`/raw sockets unless the run allows the network, and
//!   never io_uring (it could open sockets behind seccomp's back); `AF_UNIX` stays;
//! - processes: `setsid` and `setpgid` are refused, so everything stays in the process
//!   group the executor kills at the end; `ptrace`, `process_vm_*`, the kernel keyring,
//!   `bpf`, `perf_event_open` and new namespaces are refused too;
//! - limits: a process count (a pids cgroup where one is writable, and `RLIMIT_NPROC`,
//!   which the kernel enforces even for root inside the user namespace the command enters
//!   when it can), a file-size cap (`RLIMIT_FSIZE`) and no core dumps; the executor adds
//!   the wall-clock timeout and the output cap;
//! - environment: rebuilt from the allow-list of [`super::exec`], never an API key.
//!
//! The worktree's `.git` pointer file lies inside the writable worktree, so the kernel
//! cannot protect it: grove's own git never follows it (the git layer names the admin dir
//! explicitly), and the executor restores it after every command that changed it, so a
//! user running git there later is not sent to a planted git dir with hooks.

#[cfg(target_os = "linux")]
mod linux;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::exec::{
    CommandExecutor, ExecError, ExecOutcome, ExecRequest, ExecResult, default_shell,
    run_in_process_group, scrub_env,
};

/// The exit code of a command's process that refused to run the command (it could not
/// confine itself).
pub const REFUSED_EXIT_CODE: u8 = 121;

/// How the refusal message starts (on the command's stderr, before it exits with
/// [`REFUSED_EXIT_CODE`]).
pub const REFUSED_PREFIX: &str = "grove sandbox: ";

/// Dot-entries of a home directory that stay readable: toolchains a build needs. Each
/// holds programs and caches, not credentials (cargo's credential files are hidden on
/// their own, see [`HIDDEN_IN_TOOLCHAINS`]).
pub const HOME_TOOLCHAIN_DIRS: &[&str] = &[
    ".cargo", ".rustup", ".nvm", ".pyenv", ".rbenv", ".volta", ".bun", ".deno", ".sdkman",
];

/// Credential files inside [`HOME_TOOLCHAIN_DIRS`], hidden even though their folder is not.
const HIDDEN_IN_TOOLCHAINS: &[&str] = &[".cargo/credentials", ".cargo/credentials.toml"];

/// System paths hidden from every command: `/dev` as a whole (the confinement grants the
/// harmless devices one by one; a raw disk would bypass every file rule).
const HIDDEN_SYSTEM_PATHS: &[&str] = &["/dev"];

/// System secrets only root can read, hidden when grove runs as root. Hiding them splits
/// `/etc` into one rule per entry (about 2 ms, once per worktree), which other users need
/// not pay: the kernel keeps these from them anyway.
const HIDDEN_FROM_ROOT: &[&str] = &["/etc/shadow", "/etc/gshadow", "/etc/ssh"];

/// Whether workers' commands run in the kernel sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Confined (the default); grove refuses to run commands when it cannot confine them.
    #[default]
    On,
    /// Unconfined: commands run with the user's full rights (`--sandbox off`).
    Off,
}

impl SandboxMode {
    /// `on` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "`{other}` is not a sandbox mode; use `on` or `off`"
            )),
        }
    }
}

/// What the sandbox allows beyond its fixed rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Let commands open internet sockets (`--allow-network`).
    pub allow_network: bool,
    /// Processes (and threads) a command may have at once.
    pub max_processes: u64,
    /// The largest file a command may write, in bytes.
    pub max_file_bytes: u64,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            allow_network: false,
            max_processes: 1024,
            max_file_bytes: 4 << 30,
        }
    }
}

/// The environment workers' commands start from on this machine. Not journaled: it
/// describes this process, not the run.
#[derive(Debug, Clone, Default)]
pub struct CommandHost {
    /// The environment commands start from (scrubbed by the allow-list); `None`: this
    /// process's environment. Its `TMPDIR` is where the commands' private temporary
    /// directories are made.
    pub env: Option<Vec<(OsString, OsString)>>,
}

impl CommandHost {
    /// The environment commands start from, before scrubbing.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        self.env
            .clone()
            .unwrap_or_else(|| std::env::vars_os().collect())
    }
}

/// Why the sandbox cannot confine commands.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// This system cannot enforce the sandbox (no Landlock, non-Linux). Not retried: the
    /// user must run on a capable kernel or choose `--sandbox off`.
    #[error("{what} cannot be enforced on this system: {reason}")]
    Unsupported { what: &'static str, reason: String },
    /// A kernel call of the confinement failed. Not retried.
    #[error("{step} failed: {detail}")]
    Confine { step: &'static str, detail: String },
    /// The commands' private temporary directory cannot be made. Not retried.
    #[error("cannot make the commands' private temporary directory in {parent}: {source}")]
    TempDir {
        parent: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(not(target_os = "linux"))]
fn not_linux() -> SandboxError {
    SandboxError::Unsupported {
        what: "the sandbox for workers' shell commands",
        reason: format!(
            "grove's sandbox uses Linux's Landlock and seccomp, and this is {}: nothing \
             would confine the model's commands (writes outside the worktree, network, reads \
             of ~/.ssh and other secrets, processes leaving the group are all possible)",
            std::env::consts::OS
        ),
    }
}

/// Checks, before a run starts, that this system can confine the commands of `host`: a
/// private temporary directory, the kernel's Landlock (filesystem ABI 3) and seccomp (in
/// preparing the rules), then one harmless command run confined from start to `exec`.
///
/// Creates no restriction on this process.
#[cfg(target_os = "linux")]
pub fn probe(host: &CommandHost) -> Result<(), SandboxError> {
    let temp_dir = private_temp_dir(&host.env())?;
    // The kernel's side is what is probed; the secrets a worktree's rules hide are not
    // (splitting directories around them would only make every run start slower).
    let rules = linux::PathRules {
        write: vec![temp_dir.path().to_path_buf()],
        read: Vec::new(),
        hide: Vec::new(),
    };
    let confinement = linux::Confinement::prepare(&rules, SandboxPolicy::default())?;
    let mut command = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|program| Path::new(program).is_file())
        .map(std::process::Command::new)
        .unwrap_or_else(|| {
            let mut shell = std::process::Command::new(default_shell());
            shell.args(["-c", "true"]);
            shell
        });
    command
        .current_dir(temp_dir.path())
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    linux::confine_at_exec(&mut command, confinement.steps(None)?);
    let step = "running a probe command confined";
    let output = command.output().map_err(|error| SandboxError::Confine {
        step,
        detail: error.to_string(),
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(SandboxError::Confine {
        step,
        detail: format!(
            "{} ({})",
            stderr.trim().trim_start_matches(REFUSED_PREFIX),
            output.status
        ),
    })
}

/// Checks, before a run starts, that this system can confine commands: it cannot.
#[cfg(not(target_os = "linux"))]
pub fn probe(_host: &CommandHost) -> Result<(), SandboxError> {
    Err(not_linux())
}

/// What the run tells the user when the sandbox is unavailable: the reason and the two
/// ways on.
pub fn refusal_advice(error: &SandboxError) -> String {
    format!(
        "grove will not run the model's shell commands unconfined: {error}. Run grove on \
         Linux 6.2 or later with Landlock enabled (it is in the kernel's `lsm=` list), or \
         pass `--sandbox off` to run them with your full rights (they can then read your \
         secrets, write anywhere you can and use the network; the choice is recorded in \
         the run's journal)"
    )
}

/// Runs commands confined, each worktree with its rules built once and a private
/// temporary directory of its own.
#[derive(Clone)]
pub struct SandboxedExecutor {
    policy: SandboxPolicy,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// Hidden on top of the secrets, e.g. the user's work tree and the run store.
    extra_hidden: Vec<PathBuf>,
    /// Readable even beneath a hidden path, e.g. the repository's git dir.
    extra_readable: Vec<PathBuf>,
    cgroups: Arc<CgroupPool>,
    /// The prepared confinement of each worktree commands ran in, by canonical path.
    worktrees: Arc<Mutex<HashMap<PathBuf, Arc<PreparedWorktree>>>>,
}

impl fmt::Debug for SandboxedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("SandboxedExecutor")
            .field("policy", &self.policy)
            .field("shell", &self.shell)
            .field("env_names", &names)
            .finish()
    }
}

impl SandboxedExecutor {
    /// Commands run confined under `policy`, with the allow-listed part of `env`.
    pub fn new(policy: SandboxPolicy, env: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        Self {
            policy,
            shell: default_shell(),
            env: scrub_env(env),
            extra_hidden: Vec::new(),
            extra_readable: Vec::new(),
            cgroups: Arc::new(CgroupPool::new(policy.max_processes)),
            worktrees: Arc::default(),
        }
    }

    /// Also hides `hidden` from commands (the worktree itself stays writable and readable
    /// even beneath one), and grants reading `readable` even where it lies beneath a
    /// hidden path (paths hidden beneath it stay hidden). Paths are resolved when a
    /// worktree runs its first command; one that does not exist then is skipped (there is
    /// nothing to hide or to read).
    pub fn hiding(mut self, hidden: &[PathBuf], readable: &[PathBuf]) -> Self {
        self.extra_hidden = hidden.to_vec();
        self.extra_readable = readable.to_vec();
        self
    }

    #[cfg(target_os = "linux")]
    fn path_rules(&self, worktree: &Path, temp_dir: &Path) -> linux::PathRules {
        let home = self.var("HOME").map(PathBuf::from);
        let mut homes: Vec<PathBuf> = home.into_iter().collect();
        homes.extend(std::env::var_os("HOME").map(PathBuf::from));
        if let Ok(entries) = std::fs::read_dir("/home") {
            homes.extend(entries.flatten().map(|entry| entry.path()));
        }
        let mut read: Vec<PathBuf> = ["CARGO_HOME", "RUSTUP_HOME"]
            .iter()
            .filter_map(|name| self.var(name))
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
            .filter_map(|path| path.canonicalize().ok())
            .collect();
        read.extend(
            self.extra_readable
                .iter()
                .filter_map(|path| path.canonicalize().ok()),
        );
        let mut hide = hidden_paths(&homes);
        hide.extend(
            self.extra_hidden
                .iter()
                .filter_map(|path| path.canonicalize().ok()),
        );
        linux::PathRules {
            write: vec![worktree.to_path_buf(), temp_dir.to_path_buf()],
            read,
            hide,
        }
    }

    fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }

    /// The worktree's prepared confinement, built on its first command (or again when the
    /// directory at that path is no longer the one it was built for).
    #[cfg(target_os = "linux")]
    async fn prepared(&self, worktree: &Path) -> Result<Arc<PreparedWorktree>, ExecError> {
        let identity = identity_of(worktree);
        let known = self
            .worktrees
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(worktree)
            .filter(|prepared| identity.is_some() && prepared.identity == identity)
            .cloned();
        if let Some(prepared) = known {
            return Ok(prepared);
        }
        let executor = self.clone();
        let path = worktree.to_path_buf();
        // Building the rules reads directories (home, `/etc` as root): off the runtime.
        let prepared = tokio::task::spawn_blocking(move || {
            let temp_dir = private_temp_dir(&executor.env)?;
            let confinement = linux::Confinement::prepare(
                &executor.path_rules(&path, temp_dir.path()),
                executor.policy,
            )?;
            Ok::<_, SandboxError>(PreparedWorktree {
                identity,
                confinement,
                temp_dir,
                running: Mutex::new(0),
            })
        })
        .await
        .map_err(|error| ExecError::Sandbox {
            reason: format!("preparing the sandbox stopped: {error}"),
        })?
        .map_err(|error| ExecError::Sandbox {
            reason: error.to_string(),
        })?;
        let prepared = Arc::new(prepared);
        let mut worktrees = self
            .worktrees
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Worktrees removed since (finished subtasks) take their temporary directories along.
        worktrees.retain(|path, _| path.exists());
        worktrees.insert(worktree.to_path_buf(), Arc::clone(&prepared));
        Ok(prepared)
    }

    /// Forgets `worktree`'s prepared confinement (its temporary directory goes with the
    /// last command still using it).
    fn forget(&self, worktree: &Path, prepared: &Arc<PreparedWorktree>) {
        let mut worktrees = self
            .worktrees
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if worktrees
            .get(worktree)
            .is_some_and(|known| Arc::ptr_eq(known, prepared))
        {
            worktrees.remove(worktree);
        }
    }
}

/// One worktree's confinement and private temporary directory.
#[cfg(target_os = "linux")]
struct PreparedWorktree {
    /// The worktree directory's device and inode when it was prepared.
    identity: Option<(u64, u64)>,
    confinement: linux::Confinement,
    temp_dir: tempfile::TempDir,
    /// Commands running with it now; the last one out empties the temporary directory.
    running: Mutex<usize>,
}

#[cfg(not(target_os = "linux"))]
struct PreparedWorktree;

#[cfg(target_os = "linux")]
impl PreparedWorktree {
    /// Counts one more command running with it, until the guard is left or dropped.
    fn enter(&self) -> Running<'_> {
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Running {
            worktree: self,
            left: false,
        }
    }

    /// Removes what commands left in the temporary directory; false when it could not.
    fn empty_temp_dir(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(self.temp_dir.path()) else {
            return false;
        };
        entries.into_iter().all(|entry| {
            let Ok(entry) = entry else {
                return false;
            };
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
                Ok(_) => std::fs::remove_file(&path).is_ok(),
                Err(_) => false,
            }
        })
    }

    fn temp_dir_is_empty(&self) -> bool {
        std::fs::read_dir(self.temp_dir.path()).is_ok_and(|mut entries| entries.next().is_none())
    }
}

/// One command running with a prepared worktree.
#[cfg(target_os = "linux")]
struct Running<'a> {
    worktree: &'a PreparedWorktree,
    left: bool,
}

#[cfg(target_os = "linux")]
impl Running<'_> {
    /// Marks the command done; true when it was the last one running.
    fn leave(mut self) -> bool {
        self.left = true;
        self.decrement() == 0
    }

    fn decrement(&self) -> usize {
        let mut running = self
            .worktree
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running = running.saturating_sub(1);
        *running
    }
}

#[cfg(target_os = "linux")]
impl Drop for Running<'_> {
    fn drop(&mut self) {
        // A command whose future was dropped midway still stops counting.
        if !self.left {
            self.decrement();
        }
    }
}

#[cfg(target_os = "linux")]
fn identity_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

/// A new private temporary directory beneath `env`'s `TMPDIR` (else the system's).
fn private_temp_dir(env: &[(OsString, OsString)]) -> Result<tempfile::TempDir, SandboxError> {
    let parent = env
        .iter()
        .find(|(name, _)| name == "TMPDIR")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| path.is_absolute())
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("grove-cmd-")
        .tempdir_in(&parent)
        .map_err(|source| SandboxError::TempDir { parent, source })
}

/// The secret paths of `homes` and of the system, canonical, each once.
pub fn hidden_paths(homes: &[PathBuf]) -> Vec<PathBuf> {
    let mut hidden: Vec<PathBuf> = Vec::new();
    let mut push = |path: PathBuf| {
        if let Ok(canonical) = path.canonicalize()
            && !hidden.contains(&canonical)
        {
            hidden.push(canonical);
        }
    };
    for home in homes {
        let Ok(entries) = std::fs::read_dir(home) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && !HOME_TOOLCHAIN_DIRS.contains(&name.as_ref()) {
                push(entry.path());
            }
        }
        for inner in HIDDEN_IN_TOOLCHAINS {
            push(home.join(inner));
        }
    }
    for system in HIDDEN_SYSTEM_PATHS {
        push(PathBuf::from(system));
    }
    if nix::unistd::geteuid().is_root() {
        for system in HIDDEN_FROM_ROOT {
            push(PathBuf::from(system));
        }
    }
    hidden.sort();
    hidden
}

#[async_trait]
impl CommandExecutor for SandboxedExecutor {
    #[cfg(target_os = "linux")]
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        let worktree = request
            .cwd
            .canonicalize()
            .map_err(|source| ExecError::Spawn {
                shell: self.shell.clone(),
                cwd: request.cwd.clone(),
                source,
            })?;
        let prepared = self.prepared(&worktree).await?;
        let cgroup = self.cgroups.take();
        let cgroup_procs = match &cgroup {
            Some(cgroup) => Some(cgroup.open_procs().map_err(|source| ExecError::Sandbox {
                reason: format!(
                    "cannot open {}: {source}",
                    cgroup.dir.join("cgroup.procs").display()
                ),
            })?),
            None => None,
        };
        let steps =
            prepared
                .confinement
                .steps(cgroup_procs)
                .map_err(|error| ExecError::Sandbox {
                    reason: error.to_string(),
                })?;
        let mut env = self.env.clone();
        env.retain(|(name, _)| name != "TMPDIR");
        env.push((
            "TMPDIR".into(),
            prepared.temp_dir.path().as_os_str().to_owned(),
        ));
        let args = [OsString::from("-c"), OsString::from(&request.command)];

        let pointer = GitPointer::snapshot(&worktree);
        let running = prepared.enter();
        let run = run_in_process_group(&self.shell, &args, &env, &request, |command| {
            linux::confine_at_exec(command.as_std_mut(), steps);
        })
        .await;
        let last_out = running.leave();
        if let Some(cgroup) = cgroup {
            self.cgroups.give_back(cgroup);
        }
        let mut result = run?;
        if let Some(reason) = refusal(&result) {
            return Err(ExecError::Sandbox { reason });
        }
        if let Some(note) = pointer.restore() {
            result.notes.push(note);
        }
        if last_out && !prepared.temp_dir_is_empty() {
            // Removing a big tree blocks; it must not stall the runtime's thread.
            let emptying = Arc::clone(&prepared);
            let emptied = tokio::task::spawn_blocking(move || emptying.empty_temp_dir())
                .await
                .unwrap_or(false);
            if !emptied {
                // A command made it unremovable (e.g. took away its permissions): the next
                // command gets a fresh worktree preparation and directory.
                self.forget(&worktree, &prepared);
            }
        }
        Ok(result)
    }

    #[cfg(not(target_os = "linux"))]
    async fn execute(&self, _request: ExecRequest) -> Result<ExecResult, ExecError> {
        Err(ExecError::Sandbox {
            reason: not_linux().to_string(),
        })
    }
}

/// A pids cgroup for one command at a time: the kernel caps its process count even for
/// root, which `RLIMIT_NPROC` does not (the kernel exempts uid 0 from it).
///
/// Made beneath this process's own cgroup of a writable pids hierarchy (cgroup v1's
/// `pids` controller, or v2 where `pids` is enabled for children); where there is none,
/// commands get no cgroup and the rlimit is the only process cap.
struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    fn create(parent: &Path, max_processes: u64) -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("grove-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let cgroup = Self { dir };
        std::fs::write(cgroup.dir.join("pids.max"), max_processes.to_string()).ok()?;
        Some(cgroup)
    }

    /// Its `cgroup.procs`, open for the command's process to join with.
    fn open_procs(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.procs"))
            .map(std::os::fd::OwnedFd::from)
    }

    /// True when no process is charged to it (a zombie nobody reaped still is).
    fn is_empty(&self) -> bool {
        std::fs::read_to_string(self.dir.join("pids.current")).is_ok_and(|text| text.trim() == "0")
    }
}

/// The cgroups of one executor, reused: making and removing a cgroup costs milliseconds
/// each, more than the rest of the sandbox. Each is used by one command at a time, and
/// reused only when nothing is charged to it any more.
#[derive(Default)]
struct CgroupPool {
    /// The parent of the pool's cgroups; `None` where there is no usable pids hierarchy.
    parent: Option<PathBuf>,
    max_processes: u64,
    free: std::sync::Mutex<Vec<PidsCgroup>>,
}

impl CgroupPool {
    fn new(max_processes: u64) -> Self {
        let parent = own_pids_cgroup();
        if let Some(parent) = &parent {
            remove_stale_cgroups(parent);
        }
        Self {
            parent,
            max_processes,
            free: std::sync::Mutex::default(),
        }
    }

    fn take(&self) -> Option<PidsCgroup> {
        let parent = self.parent.as_ref()?;
        let reused = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            // Another grove sweeping the same parent may have removed an idle one.
            .filter(|cgroup| cgroup.dir.exists());
        reused.or_else(|| PidsCgroup::create(parent, self.max_processes))
    }

    fn give_back(&self, cgroup: PidsCgroup) {
        if cgroup.is_empty() {
            self.free
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(cgroup);
            return;
        }
        // Killed processes still charged to it (zombies not yet reaped): never reused,
        // removed in the background once the kernel lets go of it.
        tokio::spawn(async move {
            for _ in 0..200 {
                match std::fs::remove_dir(&cgroup.dir) {
                    Err(error) if error.raw_os_error() == Some(nix::libc::EBUSY) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    _ => break,
                }
            }
        });
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // The kernel may still be retiring the last process; a cgroup that keeps a
        // process (a zombie nobody reaps) cannot be removed, and nothing else is lost.
        for _ in 0..20 {
            match std::fs::remove_dir(&self.dir) {
                Err(error) if error.raw_os_error() == Some(nix::libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => return,
            }
        }
    }
}

/// Removes the empty cgroups of grove processes that are gone: one whose last command's
/// processes were still being retired when its grove exited is left behind otherwise.
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|name| name.strip_prefix("grove-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok());
        if let Some(pid) = owner
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            // Fails, harmlessly, while a process is still charged to it.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// This process's cgroup directory in a pids hierarchy grove may create children in.
fn own_pids_cgroup() -> Option<PathBuf> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let relative = path.trim_start_matches('/');
        let (candidate, enabled_for_children) = if controllers.split(',').any(|c| c == "pids") {
            // cgroup v1: every cgroup of the pids hierarchy limits its children.
            (Path::new("/sys/fs/cgroup/pids").join(relative), true)
        } else if controllers.is_empty() {
            // cgroup v2: only where the parent enables `pids` for its children.
            let candidate = Path::new("/sys/fs/cgroup").join(relative);
            let enabled = std::fs::read_to_string(candidate.join("cgroup.subtree_control"))
                .is_ok_and(|text| text.split_whitespace().any(|c| c == "pids"));
            (candidate, enabled)
        } else {
            continue;
        };
        if enabled_for_children && candidate.join("cgroup.procs").exists() {
            return Some(candidate);
        }
    }
    None
}

/// The command process's refusal message, when the result is one.
fn refusal(result: &ExecResult) -> Option<String> {
    if result.outcome != ExecOutcome::Exited(i32::from(REFUSED_EXIT_CODE)) {
        return None;
    }
    let text = String::from_utf8_lossy(&result.head);
    let message = text.strip_prefix(REFUSED_PREFIX)?;
    Some(message.trim().to_owned())
}

/// The worktree's `.git` pointer file as it was before a command.
struct GitPointer {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
}

impl GitPointer {
    fn snapshot(worktree: &Path) -> Self {
        let path = worktree.join(".git");
        let bytes = std::fs::symlink_metadata(&path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .and_then(|_| std::fs::read(&path).ok());
        Self { path, bytes }
    }

    /// Puts the pointer back if the command changed it; a note for the model if it did.
    fn restore(&self) -> Option<String> {
        let original = self.bytes.as_ref()?;
        let unchanged = std::fs::symlink_metadata(&self.path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .and_then(|_| std::fs::read(&self.path).ok())
            .is_some_and(|now| now == *original);
        if unchanged {
            return None;
        }
        let restored = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&self.path),
            Ok(_) => std::fs::remove_file(&self.path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
        .and_then(|()| std::fs::write(&self.path, original));
        Some(match restored {
            Ok(()) => "[the command changed the worktree's `.git` file; grove restored it. \
                       grove manages git for this worktree: leave `.git` alone]"
                .to_owned(),
            Err(error) => format!(
                "[the command changed the worktree's `.git` file and grove could not restore \
                 it ({error}); grove's own git never follows it]"
            ),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_take_every_home_dot_entry_but_the_toolchains() {
        let home = tempfile::tempdir().unwrap();
        for dir in [".ssh", ".aws", ".config", ".cargo", ".rustup", "projects"] {
            std::fs::create_dir(home.path().join(dir)).unwrap();
        }
        for file in [
            ".bashrc",
            ".gitconfig",
            ".cargo/credentials.toml",
            "notes.txt",
        ] {
            std::fs::write(home.path().join(file), "x").unwrap();
        }
        let home = home.path().canonicalize().unwrap();
        let hidden: Vec<PathBuf> = hidden_paths(std::slice::from_ref(&home))
            .into_iter()
            .filter(|path| path.starts_with(&home))
            .collect();
        let mut expected: Vec<PathBuf> = [
            ".aws",
            ".bashrc",
            ".cargo/credentials.toml",
            ".config",
            ".gitconfig",
            ".ssh",
        ]
        .iter()
        .map(|name| home.join(name))
        .collect();
        expected.sort();
        assert_eq!(
            hidden, expected,
            "secrets are hidden; toolchains and plain files stay readable"
        );
    }

    #[test]
    fn only_the_empty_cgroups_of_gone_grove_processes_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let own = format!("grove-{}-1", std::process::id());
        // Beyond the kernel's largest pid: no such process.
        let gone = "grove-4294967295-3";
        for name in [own.as_str(), gone, "grove-4294967294-1", "other-1"] {
            std::fs::create_dir(parent.path().join(name)).unwrap();
        }
        std::fs::write(parent.path().join("grove-4294967294-1/busy"), "").unwrap();
        remove_stale_cgroups(parent.path());
        let mut left: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut expected = vec![own, "grove-4294967294-1".to_owned(), "other-1".to_owned()];
        expected.sort();
        assert_eq!(
            left, expected,
            "a gone process's empty cgroup is removed; this process's, a busy one and \
             others' stay"
        );
    }

    #[test]
    fn sandbox_mode_parses_and_serializes_as_on_and_off() {
        assert_eq!("off".parse::<SandboxMode>(), Ok(SandboxMode::Off));
        assert_eq!(
            "maybe".parse::<SandboxMode>(),
            Err("`maybe` is not a sandbox mode; use `on` or `off`".to_owned())
        );
        assert_eq!(
            serde_json::to_value(SandboxMode::Off).unwrap(),
            serde_json::json!("off")
        );
    }

    #[test]
    fn a_changed_git_pointer_is_restored_with_a_note() {
        let tree = tempfile::tempdir().unwrap();
        let pointer = tree.path().join(".git");
        std::fs::write(&pointer, "gitdir: /repo/.git/worktrees/1\n").unwrap();
        let snapshot = GitPointer::snapshot(tree.path());
        assert_eq!(
            snapshot.restore(),
            None,
            "an unchanged pointer needs nothing"
        );

        std::fs::remove_file(&pointer).unwrap();
        std::fs::create_dir_all(pointer.join("hooks")).unwrap();
        let note = snapshot.restore();
        assert_eq!(
            (
                note.is_some_and(|note| note.contains("restored")),
                std::fs::read_to_string(&pointer).unwrap()
            ),
            (true, "gitdir: /repo/.git/worktrees/1\n".to_owned()),
            "a pointer replaced by a directory is put back, and the model is told"
        );
    }
}
