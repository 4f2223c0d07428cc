//! The kernel sandbox for the model's shell commands.
//!
//! This module owns what a worker's `bash` command may touch on this machine, and the
//! refusal to run one when that cannot be enforced. It must never run a model's command
//! unconfined while the sandbox is on, and never weaken a policy to make a command work.
//!
//! A command's process confines itself between `fork` and `exec` (the `child` module):
//! the rules and the view are planned once per worktree in grove's process (`grants`,
//! `view`, `linux`, `executor`), and the child only hands them to the kernel, so the
//! confinement is inherited by everything the command starts. The line it draws: **a
//! command's file system is built from what it needs, and nothing else exists for it**
//! (the table of what and why is docs/sandbox.md).
//!
//! - the view: the command pivots into an empty root of its own into which the system,
//!   its tree (also at the user's checkout path), a private `/tmp`, a minimal `/dev`, its
//!   own `/proc`, an empty `$HOME` with the toolchain stores, the environments it runs
//!   ([`grants`]) and the repository's git data (everything not its tree's covered) are
//!   bound; writes go only to the tree, `/tmp` and the harmless devices;
//! - Landlock, a second wall from the same allow-list (filesystem ABI 3: link, rename
//!   and truncation covered too, so a hard link or `mv` cannot carry a file out; the
//!   scopes in the same layer), and the only one without namespaces;
//! - network: a network namespace of the command's own with `lo` up (its servers on
//!   127.0.0.1 work; the host's and other commands' loopback services and the internet
//!   are unreachable), the host's network only with `--allow-network`; never io_uring
//!   (it could open sockets behind seccomp's back);
//! - IPC: a namespace of its own, so no SysV object of the host's or another tree's;
//! - host services: no host socket is in the view; one bound inside a granted directory
//!   is covered by an empty file; abstract ones are in the host's network namespace
//!   only, and mounts are refused after the view is built;
//! - processes: `setsid` and `setpgid` are refused, so everything stays in the process
//!   group the executor kills at the end; `ptrace`, `process_vm_*`, the kernel keyring,
//!   `bpf`, `perf_event_open`, mounts and new namespaces are refused too;
//! - limits: a process count (a pids cgroup where one is writable, and `RLIMIT_NPROC`,
//!   which the kernel enforces even for root inside the user namespace the command
//!   enters), a file-size cap (`RLIMIT_FSIZE`) and no core dumps; the executor adds the
//!   wall-clock timeout and the output cap;
//! - environment: rebuilt from the allow-list of [`super::exec`], never an API key.
//!
//! The worktree's `.git` pointer file lies inside the writable worktree, so the kernel
//! cannot protect it: the commands' git view is built from grove's own record of the
//! worktree's registration, never from the pointer, and the executor writes the
//! registered pointer back before and after every command, so neither a resumed command
//! nor a user running git there later is sent to a planted git dir.

mod cgroup;
#[cfg(target_os = "linux")]
mod child;
mod executor;
#[cfg(target_os = "linux")]
mod git_view;
pub mod grants;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod mount_ops;
mod paths;
#[cfg(target_os = "linux")]
mod prepared;
mod project;
#[cfg(target_os = "linux")]
mod sockets;
#[cfg(target_os = "linux")]
mod view;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::exec::{ExecOutcome, ExecResult, default_shell};

pub use cgroup::{OWNER_VAR, kill_orphaned_commands};
pub use executor::SandboxedExecutor;
pub use paths::{DENIED_IN_HOME, denied_store};
#[cfg(target_os = "linux")]
pub use prepared::disk_usage;
pub use project::ProjectView;

/// The exit code of a command's process that refused to run the command (it could not
/// confine itself).
pub const REFUSED_EXIT_CODE: u8 = 121;

/// How the refusal message starts (on the command's stderr, before it exits with
/// [`REFUSED_EXIT_CODE`]).
pub const REFUSED_PREFIX: &str = "grove sandbox: ";

/// Whether workers' commands run in the kernel sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Confined (the default); grove refuses to run commands when it cannot confine them.
    #[default]
    On,
    /// Confined without namespaces, for systems that allow none (`--sandbox
    /// no-loopback`): commands get no loopback of their own, so every socket is refused
    /// (`socketpair` stays), the host's Unix sockets included.
    NoLoopback,
    /// Unconfined: commands run with the user's full rights (`--sandbox off`).
    Off,
}

impl SandboxMode {
    /// `on`, `no-loopback` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::NoLoopback => "no-loopback",
            Self::Off => "off",
        }
    }

    /// Whether commands are confined at all.
    pub fn confines(self) -> bool {
        self != Self::Off
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
            "no-loopback" => Ok(Self::NoLoopback),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "`{other}` is not a sandbox mode; use `on`, `no-loopback` or `off`"
            )),
        }
    }
}

/// What the sandbox allows beyond its fixed rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Let commands use the host's network (`--allow-network`).
    pub allow_network: bool,
    /// Give each command a network namespace of its own with `lo` up (and a mount
    /// namespace covering the host's sockets); false under `--sandbox no-loopback`.
    pub own_loopback: bool,
    /// Processes (and threads) a command may have at once.
    pub max_processes: u64,
    /// The largest file a command may write, in bytes.
    pub max_file_bytes: u64,
    /// The memory a command (all its processes) may use, in bytes, where a memory cgroup
    /// is available ([`SandboxedExecutor::caps_memory`]); past it the kernel kills it.
    pub max_memory_bytes: u64,
    /// The disk a worktree may take, in bytes, checked after each command; `None`: no
    /// budget. A command that leaves the worktree over it fails with the excess named.
    pub max_worktree_bytes: Option<u64>,
}

/// The default [`SandboxPolicy::max_memory_bytes`]: 4 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 4 << 30;

/// The default [`SandboxPolicy::max_worktree_bytes`]: 10 GiB.
pub const DEFAULT_MAX_WORKTREE_BYTES: u64 = 10 << 30;

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            allow_network: false,
            own_loopback: true,
            max_processes: 1024,
            max_file_bytes: 4 << 30,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_worktree_bytes: Some(DEFAULT_MAX_WORKTREE_BYTES),
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
            "grove's sandbox uses Linux's Landlock, seccomp and namespaces, and this is {}: nothing \
             would confine the model's commands (writes outside the worktree, network, reads \
             of ~/.ssh and other secrets, processes leaving the group are all possible)",
            std::env::consts::OS
        ),
    }
}

/// Checks, before a run starts, that this system can confine the commands of `host` in
/// `mode`: a private temporary directory, the kernel's Landlock (filesystem ABI 3) and
/// seccomp (in preparing the rules), then one harmless command run confined from start
/// to `exec` (its user, mount and network namespaces and its loopback included, unless
/// `mode` is [`SandboxMode::NoLoopback`]).
///
/// Creates no restriction on this process.
#[cfg(target_os = "linux")]
pub fn probe(host: &CommandHost, mode: SandboxMode) -> Result<(), SandboxError> {
    let temp_dir = paths::private_temp_root(&host.env())?;
    let made = |source| SandboxError::TempDir {
        parent: temp_dir.path().to_path_buf(),
        source,
    };
    let [work, tmp, staging] = ["work", "tmp", "view"].map(|name| temp_dir.path().join(name));
    for dir in [&work, &tmp, &staging] {
        std::fs::create_dir(dir).map_err(made)?;
    }
    let empty_file = paths::empty_file(temp_dir.path())
        .ok_or_else(|| made(std::io::Error::other("the empty cover file cannot be made")))?;
    // The kernel's side is what is probed: the system's view, no toolchain, no project.
    let grants = grants::Grants::for_commands(&[], &[], &[]);
    let rules = linux::PathRules {
        write: vec![work.clone(), tmp.clone()],
        read: grants.read.iter().map(|grant| grant.path.clone()).collect(),
        hide: Vec::new(),
    };
    let view = view::plan(&view::ViewSpec {
        staging: &staging,
        grants: &grants,
        private_etc: &[],
        etc_links: &[],
        writable: &[],
        tree: &work,
        temp_dir: &tmp,
        shared: &[],
        checkout: None,
        home: None,
        git: None,
        hidden: &[],
        empty_file: &empty_file,
        tree_scratch: None,
    });
    let policy = SandboxPolicy {
        own_loopback: mode != SandboxMode::NoLoopback,
        ..SandboxPolicy::default()
    };
    let confinement = linux::Confinement::prepare(&rules, Some(view), policy)?;
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
        .current_dir(&work)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let steps = confinement
        .steps(Vec::new())?
        .covering(child::SocketCovers::default(), linux::c_path(&work));
    child::confine_at_exec(&mut command, steps);
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
pub fn probe(_host: &CommandHost, _mode: SandboxMode) -> Result<(), SandboxError> {
    Err(not_linux())
}

/// What the run tells the user when the sandbox is unavailable: the reason and the ways
/// on. A system that confines commands but gives them no namespaces is offered
/// `--sandbox no-loopback`, with what it loses.
pub fn refusal_advice(error: &SandboxError) -> String {
    let namespaces = matches!(error, SandboxError::Confine { detail, .. }
        if ["namespace", "loopback", "mounts private", "host socket", "view"]
            .iter()
            .any(|step| detail.contains(step)));
    if namespaces {
        return format!(
            "grove will not run the model's shell commands without namespaces of their own: \
             {error}. This system lets commands be confined but gives them no user, mount \
             or network namespace, or no file system view of their own (e.g. \
             `kernel.unprivileged_userns_clone=0`, or AppArmor's \
             `kernel.apparmor_restrict_unprivileged_userns=1`). Allow unprivileged user \
             namespaces, or pass `--sandbox no-loopback`: commands are then confined by \
             Landlock alone, to the same allow-list, but get no view, no private /tmp and no \
             loopback of their own, so every socket is refused (a test server on 127.0.0.1 \
             cannot run; the host's Unix sockets stay out of reach), or `--sandbox off` to \
             run them with your full rights"
        );
    }
    format!(
        "grove will not run the model's shell commands unconfined: {error}. Run grove on \
         Linux 6.2 or later with Landlock enabled (it is in the kernel's `lsm=` list), or \
         pass `--sandbox off` to run them with your full rights (they can then read your \
         secrets, write anywhere you can and use the network; the choice is recorded in \
         the run's journal)"
    )
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_mode_parses_and_serializes_as_on_no_loopback_and_off() {
        assert_eq!("off".parse::<SandboxMode>(), Ok(SandboxMode::Off));
        assert_eq!(
            "no-loopback".parse::<SandboxMode>(),
            Ok(SandboxMode::NoLoopback)
        );
        assert_eq!(
            serde_json::to_value(SandboxMode::NoLoopback).unwrap(),
            serde_json::json!("no-loopback")
        );
        assert_eq!(
            "maybe".parse::<SandboxMode>(),
            Err("`maybe` is not a sandbox mode; use `on`, `no-loopback` or `off`".to_owned())
        );
        assert_eq!(
            serde_json::to_value(SandboxMode::Off).unwrap(),
            serde_json::json!("off")
        );
    }

    #[test]
    fn a_system_without_namespaces_is_offered_no_loopback_with_what_it_loses() {
        let without = SandboxError::Confine {
            step: "running a probe command confined",
            detail: "entering a network namespace of its own failed: Operation not permitted"
                .into(),
        };
        let advice = refusal_advice(&without);
        assert!(
            advice.contains("--sandbox no-loopback")
                && advice.contains("a test server on 127.0.0.1 cannot run")
                && advice.contains("--sandbox off"),
            "the refusal names both ways on and what the first loses: {advice}"
        );
        let no_landlock = SandboxError::Unsupported {
            what: "Landlock filesystem confinement",
            reason: "not in the kernel".into(),
        };
        assert!(
            !refusal_advice(&no_landlock).contains("no-loopback"),
            "a kernel without Landlock is not offered a mode that needs it"
        );
    }
}
