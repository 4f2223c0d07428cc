//! The kernel sandbox for the model's shell commands.
//!
//! This module owns what a worker's `bash` command may touch on this machine, and the
//! refusal to run one when that cannot be enforced. It must never run a model's command
//! unconfined while the sandbox is on, and never weaken a policy to make a command work.
//!
//! A command runs as `<grove> __sandbox <policy> -- bash -c COMMAND`: the hidden launcher
//! subcommand (see [`launch`]), still single-threaded, confines itself and then `exec`s
//! the shell, so the confinement is inherited by everything the command starts:
//!
//! - writes: only beneath the worktree and a private temporary directory (`TMPDIR`, made
//!   for the command and removed after it), plus `/dev/null`, `/dev/zero` and `/dev/full`
//!   (Landlock, filesystem ABI 3: link and rename across directories and truncation are
//!   covered too, so a hard link or `mv` cannot carry a file out);
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
//! - limits: a process count (`RLIMIT_NPROC`, which the kernel enforces even for root
//!   inside the user namespace the launcher enters when it can), a file-size cap
//!   (`RLIMIT_FSIZE`) and no core dumps; the executor adds the wall-clock timeout and the
//!   output cap;
//! - environment: rebuilt from the allow-list of [`super::exec`], never an API key.
//!
//! The worktree's `.git` pointer file lies inside the writable worktree, so the kernel
//! cannot protect it: grove's own git never follows it (the git layer names the admin dir
//! explicitly), and the executor restores it after every command that changed it, so a
//! user running git there later is not sent to a planted git dir with hooks.

#[cfg(target_os = "linux")]
mod linux;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::exec::{
    CommandExecutor, ExecError, ExecOutcome, ExecRequest, ExecResult, default_shell,
    run_in_process_group, scrub_env,
};

/// The first argument that turns the grove binary into the sandbox launcher.
pub const LAUNCHER_ARG: &str = "__sandbox";

/// The launcher's exit code when it refused to run the command (it could not confine it).
pub const REFUSED_EXIT_CODE: u8 = 121;

/// How the launcher's refusal message starts (on stderr, before exiting with
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

/// System paths hidden from every command: `/dev` as a whole (the launcher grants the
/// harmless devices one by one; a raw disk would bypass every file rule).
const HIDDEN_SYSTEM_PATHS: &[&str] = &["/dev"];

/// System secrets only root can read, hidden when grove runs as root. Hiding them splits
/// `/etc` into one rule per entry (about 2 ms per command), which other users need not pay:
/// the kernel keeps these from them anyway.
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

/// How workers' commands start on this machine: which grove binary is the launcher and
/// which environment commands get. Not journaled: it describes this process, not the run.
#[derive(Debug, Clone, Default)]
pub struct CommandHost {
    /// The grove binary that confines commands; `None`: this process's own executable.
    pub launcher: Option<PathBuf>,
    /// The environment commands start from (scrubbed by the allow-list); `None`: this
    /// process's environment.
    pub env: Option<Vec<(OsString, OsString)>>,
}

impl CommandHost {
    /// The launcher to use: the configured one, else this process's executable.
    pub fn launcher_path(&self) -> Result<PathBuf, SandboxError> {
        match &self.launcher {
            Some(path) => Ok(path.clone()),
            None => std::env::current_exe().map_err(|source| SandboxError::Launcher {
                path: PathBuf::from("/proc/self/exe"),
                source,
            }),
        }
    }

    /// The environment commands start from, before scrubbing.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        self.env
            .clone()
            .unwrap_or_else(|| std::env::vars_os().collect())
    }
}

/// Why the sandbox cannot confine commands, or why the launcher refused one.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// This system cannot enforce the sandbox (no Landlock, non-Linux). Not retried: the
    /// user must run on a capable kernel or choose `--sandbox off`.
    #[error("{what} cannot be enforced on this system: {reason}")]
    Unsupported { what: &'static str, reason: String },
    /// A kernel call of the confinement failed. Not retried.
    #[error("{step} failed: {detail}")]
    Confine { step: &'static str, detail: String },
    /// The launcher binary cannot be used. Not retried.
    #[error("the sandbox launcher {path} cannot be used: {source}")]
    Launcher {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The launcher was started with arguments it does not understand (a grove bug or a
    /// mismatched binary). Not retried.
    #[error("invalid launcher arguments: {0}")]
    Usage(String),
    /// The confined program could not be started. Not retried.
    #[error("cannot start {program} in the sandbox: {source}")]
    Exec {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What [`launch`] does: the rules, then the program to `exec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Directories (or files) the command may write and read beneath.
    pub write: Vec<PathBuf>,
    /// Paths the command may read beneath, except where hidden (e.g. `CARGO_HOME`).
    pub read: Vec<PathBuf>,
    /// Paths nothing may read: the broad read grant of `/` skips them.
    pub hide: Vec<PathBuf>,
    pub policy: SandboxPolicy,
    /// A pids cgroup (its directory) the launcher joins before anything else.
    pub cgroup: Option<PathBuf>,
    /// The program and its arguments.
    pub command: Vec<OsString>,
}

impl LaunchSpec {
    /// The launcher's arguments (after [`LAUNCHER_ARG`]) that parse back into `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        for (flag, paths) in [
            ("--write", &self.write),
            ("--read", &self.read),
            ("--hide", &self.hide),
        ] {
            for path in paths {
                args.push(OsString::from(flag));
                args.push(path.clone().into_os_string());
            }
        }
        if self.policy.allow_network {
            args.push("--allow-network".into());
        }
        if let Some(cgroup) = &self.cgroup {
            args.push("--cgroup".into());
            args.push(cgroup.clone().into_os_string());
        }
        args.push("--max-processes".into());
        args.push(self.policy.max_processes.to_string().into());
        args.push("--max-file-bytes".into());
        args.push(self.policy.max_file_bytes.to_string().into());
        args.push("--".into());
        args.extend(self.command.iter().cloned());
        args
    }

    /// Parses the launcher's arguments (after [`LAUNCHER_ARG`]).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, SandboxError> {
        let mut spec = Self {
            write: Vec::new(),
            read: Vec::new(),
            hide: Vec::new(),
            policy: SandboxPolicy::default(),
            cgroup: None,
            command: Vec::new(),
        };
        let mut args = args.into_iter();
        let usage = |message: String| SandboxError::Usage(message);
        while let Some(arg) = args.next() {
            let flag = arg.to_str().unwrap_or_default();
            if flag == "--" {
                spec.command = args.collect();
                break;
            }
            if flag == "--allow-network" {
                spec.policy.allow_network = true;
                continue;
            }
            let value = args
                .next()
                .ok_or_else(|| usage(format!("`{}` needs a value", arg.to_string_lossy())))?;
            let number = || {
                value
                    .to_str()
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| usage(format!("`{flag}` needs a number")))
            };
            match flag {
                "--write" => spec.write.push(absolute(value)?),
                "--read" => spec.read.push(absolute(value)?),
                "--hide" => spec.hide.push(absolute(value)?),
                "--cgroup" => spec.cgroup = Some(absolute(value)?),
                "--max-processes" => spec.policy.max_processes = number()?,
                "--max-file-bytes" => spec.policy.max_file_bytes = number()?,
                _ => return Err(usage(format!("unknown flag `{}`", arg.to_string_lossy()))),
            }
        }
        if spec.command.is_empty() {
            return Err(usage("no command after `--`".into()));
        }
        Ok(spec)
    }
}

fn absolute(value: OsString) -> Result<PathBuf, SandboxError> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(SandboxError::Usage(format!(
            "{} is not an absolute path",
            path.display()
        )))
    }
}

/// The launcher: confines this process as `args` say, then `exec`s the command.
///
/// Called by the binary's `main` before anything else (no async runtime, one thread):
/// Landlock and seccomp apply to the calling thread and are inherited across `exec`.
/// Returns only when it refused; the caller prints [`REFUSED_PREFIX`] and the error and
/// exits with [`REFUSED_EXIT_CODE`].
pub fn launch(args: impl IntoIterator<Item = OsString>) -> SandboxError {
    match LaunchSpec::parse(args) {
        Ok(spec) => confine_and_exec(&spec),
        Err(error) => error,
    }
}

#[cfg(target_os = "linux")]
fn confine_and_exec(spec: &LaunchSpec) -> SandboxError {
    linux::confine_and_exec(spec)
}

#[cfg(not(target_os = "linux"))]
fn confine_and_exec(_spec: &LaunchSpec) -> SandboxError {
    not_linux()
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

/// Checks, before a run starts, that this system can confine commands: the kernel's
/// Landlock (filesystem ABI 3) and seccomp, and a usable launcher binary.
///
/// Creates no restriction on this process.
pub fn probe(launcher: &Path) -> Result<(), SandboxError> {
    std::fs::metadata(launcher)
        .and_then(|meta| {
            if meta.is_file() {
                Ok(())
            } else {
                Err(std::io::Error::other("not a file"))
            }
        })
        .map_err(|source| SandboxError::Launcher {
            path: launcher.to_path_buf(),
            source,
        })?;
    probe_kernel()
}

#[cfg(target_os = "linux")]
fn probe_kernel() -> Result<(), SandboxError> {
    linux::probe()
}

#[cfg(not(target_os = "linux"))]
fn probe_kernel() -> Result<(), SandboxError> {
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

/// Runs commands through the sandbox launcher, one private temporary directory each.
#[derive(Clone)]
pub struct SandboxedExecutor {
    launcher: PathBuf,
    policy: SandboxPolicy,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// Hidden on top of the secrets, e.g. the user's work tree and the run store.
    extra_hidden: Vec<PathBuf>,
    /// Readable even beneath a hidden path, e.g. the repository's git dir.
    extra_readable: Vec<PathBuf>,
    cgroups: std::sync::Arc<CgroupPool>,
    /// Whether the launcher proved, once, that it is grove's and confines a command.
    handshake: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

impl fmt::Debug for SandboxedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("SandboxedExecutor")
            .field("launcher", &self.launcher)
            .field("policy", &self.policy)
            .field("shell", &self.shell)
            .field("env_names", &names)
            .finish()
    }
}

impl SandboxedExecutor {
    /// Commands start through `launcher` (a grove binary) under `policy`, with the
    /// allow-listed part of `env`.
    pub fn new(
        launcher: PathBuf,
        policy: SandboxPolicy,
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Self {
        // Commands start in the worktree: a relative launcher path would resolve there.
        let launcher = std::path::absolute(&launcher).unwrap_or(launcher);
        Self {
            launcher,
            policy,
            shell: default_shell(),
            env: scrub_env(env),
            extra_hidden: Vec::new(),
            extra_readable: Vec::new(),
            cgroups: std::sync::Arc::new(CgroupPool::new(policy.max_processes)),
            handshake: std::sync::Arc::default(),
        }
    }

    /// Also hides `hidden` from commands (the worktree itself stays writable and readable
    /// even beneath one), and grants reading `readable` even where it lies beneath a
    /// hidden path (paths hidden beneath it stay hidden). Paths are resolved at each
    /// command, so one made after this call is covered; one that does not exist then is
    /// skipped (there is nothing to hide or to read).
    pub fn hiding(mut self, hidden: &[PathBuf], readable: &[PathBuf]) -> Self {
        self.extra_hidden = hidden.to_vec();
        self.extra_readable = readable.to_vec();
        self
    }

    /// The launcher's full argument list for one command.
    pub fn launch_spec(&self, cwd: &Path, temp_dir: &Path, command: &str) -> LaunchSpec {
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
        LaunchSpec {
            write: vec![cwd.to_path_buf(), temp_dir.to_path_buf()],
            read,
            hide,
            policy: self.policy,
            cgroup: None,
            command: vec![
                self.shell.clone().into_os_string(),
                "-c".into(),
                command.into(),
            ],
        }
    }

    fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }
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
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        let temp_dir = tempfile::Builder::new()
            .prefix("grove-cmd-")
            .tempdir()
            .map_err(|source| ExecError::Sandbox {
                reason: format!(
                    "cannot create the command's private temporary directory: {source}"
                ),
            })?;
        let cwd = request
            .cwd
            .canonicalize()
            .map_err(|source| ExecError::Spawn {
                shell: self.launcher.clone(),
                cwd: request.cwd.clone(),
                source,
            })?;
        let temp_path = temp_dir
            .path()
            .canonicalize()
            .unwrap_or_else(|_| temp_dir.path().to_path_buf());
        // Only success is kept: a failed (or cancelled) handshake is tried again.
        self.handshake
            .get_or_try_init(|| self.handshake(&cwd, &temp_path, &request))
            .await
            .map_err(|reason| ExecError::Sandbox { reason })?;
        let mut spec = self.launch_spec(&cwd, &temp_path, &request.command);
        let cgroup = self.cgroups.take();
        spec.cgroup = cgroup.as_ref().map(|cgroup| cgroup.dir.clone());
        let mut args = vec![OsString::from(LAUNCHER_ARG)];
        args.extend(spec.to_args());
        let mut env = self.env.clone();
        env.retain(|(name, _)| name != "TMPDIR");
        env.push(("TMPDIR".into(), temp_path.into_os_string()));

        let pointer = GitPointer::snapshot(&cwd);
        let mut result = run_in_process_group(&self.launcher, &args, &env, &request).await?;
        if let Some(reason) = refusal(&result) {
            return Err(ExecError::Sandbox { reason });
        }
        if let Some(note) = pointer.restore() {
            result.notes.push(note);
        }
        // Removing a big temp dir blocks; it must not stall the runtime's thread.
        let _ = tokio::task::spawn_blocking(move || drop(temp_dir)).await;
        if let Some(cgroup) = cgroup {
            self.cgroups.give_back(cgroup);
        }
        Ok(result)
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
        Self {
            parent: own_pids_cgroup(),
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
            .pop();
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

/// What the handshake command prints when the launcher ran it confined.
const HANDSHAKE_REPLY: &str = "grove-sandbox-ok";

impl SandboxedExecutor {
    /// Runs one harmless command through the launcher and checks its exact reply, so that
    /// a launcher that is not grove's (a test harness, a stale path) is caught with a clear
    /// message before any command of the model's is handed to it.
    async fn handshake(
        &self,
        cwd: &Path,
        temp_dir: &Path,
        request: &ExecRequest,
    ) -> Result<(), String> {
        let mut spec = self.launch_spec(cwd, temp_dir, "");
        spec.command = vec![
            self.shell.clone().into_os_string(),
            "-c".into(),
            format!("echo {HANDSHAKE_REPLY}").into(),
        ];
        let mut args = vec![OsString::from(LAUNCHER_ARG)];
        args.extend(spec.to_args());
        let probe = ExecRequest {
            command: String::new(),
            cwd: cwd.to_path_buf(),
            timeout: std::time::Duration::from_secs(30),
            cancel: request.cancel.clone(),
            output_cap: super::exec::OutputCap::default(),
        };
        let result = run_in_process_group(&self.launcher, &args, &self.env, &probe)
            .await
            .map_err(|error| error.to_string())?;
        if let Some(reason) = refusal(&result) {
            return Err(reason);
        }
        let reply = result.output_text();
        if result.outcome == ExecOutcome::Exited(0) && reply.trim() == HANDSHAKE_REPLY {
            return Ok(());
        }
        Err(format!(
            "{} is not a working grove sandbox launcher (it answered {:?}, {}); set the \
             launcher to the grove binary",
            self.launcher.display(),
            result.outcome,
            super::truncate_chars(reply.trim(), 200)
        ))
    }
}

/// The launcher's refusal message, when the result is one.
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
    fn launch_spec_round_trips_through_its_arguments() {
        let spec = LaunchSpec {
            write: vec!["/work/tree".into(), "/tmp/grove-cmd-1".into()],
            read: vec!["/opt/cargo".into()],
            hide: vec!["/root/.ssh".into(), "/dev".into()],
            policy: SandboxPolicy {
                allow_network: true,
                max_processes: 64,
                max_file_bytes: 1 << 20,
            },
            cgroup: Some("/sys/fs/cgroup/pids/grove-1-2".into()),
            command: vec!["/bin/bash".into(), "-c".into(), "echo -- --write x".into()],
        };
        assert_eq!(
            LaunchSpec::parse(spec.to_args()).unwrap(),
            spec,
            "the launcher reads back exactly the policy the executor wrote"
        );
    }

    #[test]
    fn launch_spec_refuses_what_it_does_not_understand() {
        let parse = |args: &[&str]| {
            LaunchSpec::parse(args.iter().map(OsString::from))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            parse(&["--write", "relative", "--", "sh"]),
            "invalid launcher arguments: relative is not an absolute path"
        );
        assert_eq!(
            parse(&["--bogus", "x", "--", "sh"]),
            "invalid launcher arguments: unknown flag `--bogus`"
        );
        assert_eq!(
            parse(&["--max-processes", "many", "--", "sh"]),
            "invalid launcher arguments: `--max-processes` needs a number"
        );
        assert_eq!(
            parse(&["--write", "/x"]),
            "invalid launcher arguments: no command after `--`"
        );
    }

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
