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

mod cgroup;
#[cfg(target_os = "linux")]
mod linux;
mod paths;
#[cfg(target_os = "linux")]
mod prepared;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::exec::{
    CommandExecutor, DiskOverBudget, ExecError, ExecOutcome, ExecRequest, ExecResult, SetupPolicy,
    default_shell, run_in_process_group, scrub_env,
};
use super::git_pointer::GitPointer;
use super::tree::namespace::TreeNamespace;
use cgroup::CgroupPool;
use paths::{GitView, hidden_paths};
#[cfg(target_os = "linux")]
use prepared::{DiskMeter, Identity, PreparedWorktree};

pub use cgroup::{OWNER_VAR, kill_orphaned_commands};
pub use paths::HOME_TOOLCHAIN_DIRS;
#[cfg(target_os = "linux")]
pub use prepared::disk_usage;

/// The exit code of a command's process that refused to run the command (it could not
/// confine itself).
pub const REFUSED_EXIT_CODE: u8 = 121;

/// How the refusal message starts (on the command's stderr, before it exits with
/// [`REFUSED_EXIT_CODE`]).
pub const REFUSED_PREFIX: &str = "grove sandbox: ";

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
    let temp_dir = paths::private_temp_root(&host.env())?;
    // The kernel's side is what is probed; the secrets a worktree's rules hide are not
    // (splitting directories around them would only make every run start slower).
    let rules = linux::PathRules {
        write: vec![temp_dir.path().to_path_buf()],
        read: Vec::new(),
        hide: Vec::new(),
        mounts: Vec::new(),
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
    linux::confine_at_exec(&mut command, confinement.steps(Vec::new())?);
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
    /// Writable besides the worktree and its `TMPDIR`, e.g. the caches a setup command
    /// fills.
    extra_writable: Vec<PathBuf>,
    cgroups: Arc<CgroupPool>,
    /// The parent of every worktree's private directories, made on the first command.
    temp_root: Arc<Mutex<Option<Arc<tempfile::TempDir>>>>,
    /// The prepared confinement of each worktree commands ran in, by canonical path.
    worktrees: Arc<Mutex<HashMap<PathBuf, Arc<PreparedWorktree>>>>,
    #[cfg(target_os = "linux")]
    disk: Arc<DiskMeter>,
    /// The copy-on-write tree every command of this executor runs in, if any.
    tree: Option<Arc<TreeNamespace>>,
}

impl fmt::Debug for SandboxedExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("SandboxedExecutor")
            .field("policy", &self.policy)
            .field("shell", &self.shell)
            .field("env_names", &names)
            .field("tree", &self.tree.as_ref().map(|tree| tree.path()))
            .finish()
    }
}

impl SandboxedExecutor {
    /// Commands run confined under `policy`, with the allow-listed part of `env`.
    ///
    /// Kills first what commands of a grove that died left running (see
    /// [`kill_orphaned_commands`]).
    pub fn new(policy: SandboxPolicy, env: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let mut env = scrub_env(env);
        // `~/.gitconfig` is hidden: git then fails to read its configuration and refuses
        // to work ("unknown error occurred while reading the configuration files").
        env.retain(|(name, _)| name != "GIT_CONFIG_GLOBAL" && name != cgroup::OWNER_VAR);
        env.push(("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()));
        env.push((cgroup::OWNER_VAR.into(), cgroup::owner_mark().into()));
        env.sort();
        let cgroups = CgroupPool::new(cgroup::Limits {
            max_processes: policy.max_processes,
            max_memory_bytes: policy.max_memory_bytes,
        });
        kill_orphaned_commands();
        Self {
            policy,
            shell: default_shell(),
            env,
            extra_hidden: Vec::new(),
            extra_readable: Vec::new(),
            extra_writable: Vec::new(),
            cgroups: Arc::new(cgroups),
            temp_root: Arc::default(),
            worktrees: Arc::default(),
            #[cfg(target_os = "linux")]
            disk: Arc::default(),
            tree: None,
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

    /// Also lets commands write beneath `writable` (e.g. the caches a setup command fills);
    /// one that does not exist when a worktree runs its first command is skipped.
    pub fn writing(mut self, writable: &[PathBuf]) -> Self {
        self.extra_writable = writable.to_vec();
        self
    }

    /// Whether commands get a memory cap here (a memory cgroup grove may make).
    pub fn caps_memory(&self) -> bool {
        self.cgroups.caps_memory()
    }

    #[cfg(target_os = "linux")]
    fn path_rules(
        &self,
        worktree: &Path,
        temp_dir: &Path,
        temp_root: &Path,
        git: &GitView,
        config_copy: Option<&Path>,
    ) -> linux::PathRules {
        let home = self.var("HOME").map(PathBuf::from);
        let mut homes: Vec<PathBuf> = home.into_iter().collect();
        homes.extend(std::env::var_os("HOME").map(PathBuf::from));
        if let Ok(entries) = std::fs::read_dir("/home") {
            homes.extend(entries.flatten().map(|entry| entry.path()));
        }
        let canonical = |paths: &[PathBuf]| -> Vec<PathBuf> {
            paths
                .iter()
                .filter_map(|path| path.canonicalize().ok())
                .collect()
        };
        let mut read: Vec<PathBuf> = ["CARGO_HOME", "RUSTUP_HOME"]
            .iter()
            .filter_map(|name| self.var(name))
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
            .filter_map(|path| path.canonicalize().ok())
            .collect();
        read.extend(canonical(&self.extra_readable));
        read.extend(git.read.iter().cloned());
        read.extend(config_copy.map(Path::to_path_buf));
        let mut hide = hidden_paths(&homes);
        hide.extend(canonical(&self.extra_hidden));
        // Other worktrees' private directories (and their listing) are hidden.
        hide.push(temp_root.to_path_buf());
        hide.extend(git.hide.iter().cloned());
        let mut write = vec![worktree.to_path_buf(), temp_dir.to_path_buf()];
        write.extend(canonical(&self.extra_writable));
        let mounts = match (config_copy, &git.config) {
            (Some(copy), Some(config)) => vec![(copy.to_path_buf(), config.clone())],
            _ => Vec::new(),
        };
        linux::PathRules {
            write,
            read,
            hide,
            mounts,
        }
    }

    fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }

    fn temp_root(&self) -> Result<Arc<tempfile::TempDir>, SandboxError> {
        let mut root = self
            .temp_root
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(root) = root.as_ref().filter(|root| root.path().is_dir()) {
            return Ok(Arc::clone(root));
        }
        let made = Arc::new(paths::private_temp_root(&self.env)?);
        *root = Some(Arc::clone(&made));
        Ok(made)
    }

    /// Builds `worktree`'s confinement (reads directories: call off the runtime).
    #[cfg(target_os = "linux")]
    fn prepare(
        &self,
        worktree: &Path,
        identity: Identity,
    ) -> Result<PreparedWorktree, SandboxError> {
        let root = self.temp_root()?;
        let temp_dir = paths::private_dir(root.path(), "tmp-")?;
        let git = GitView::of(worktree);
        let (git_dir, config_copy) = match &git.config {
            Some(config) => {
                let dir = paths::private_dir(root.path(), "git-")?;
                let copy = dir.path().join("config");
                let text = std::fs::read_to_string(config).unwrap_or_default();
                std::fs::write(&copy, paths::sanitized_config(&text)).map_err(|source| {
                    SandboxError::TempDir {
                        parent: dir.path().to_path_buf(),
                        source,
                    }
                })?;
                (Some(dir), Some(copy))
            }
            None => (None, None),
        };
        let rules = self.path_rules(
            worktree,
            temp_dir.path(),
            root.path(),
            &git,
            config_copy.as_deref(),
        );
        Ok(PreparedWorktree {
            identity,
            confinement: linux::Confinement::prepare(&rules, self.policy)?,
            temp_dir,
            _git_dir: git_dir,
            running: Mutex::new(0),
        })
    }

    /// The worktree's prepared confinement, built on its first command (or again when the
    /// directory at that path, or its own ref file, is no longer the one it was built
    /// for).
    #[cfg(target_os = "linux")]
    async fn prepared(&self, worktree: &Path) -> Result<Arc<PreparedWorktree>, ExecError> {
        let identity = (
            paths::identity_of(worktree),
            GitView::current_ref_identity(worktree),
        );
        let known = self
            .worktrees
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(worktree)
            .filter(|prepared| identity.0.is_some() && prepared.identity == identity)
            .cloned();
        if let Some(prepared) = known {
            return Ok(prepared);
        }
        let executor = self.clone();
        let path = worktree.to_path_buf();
        // Building the rules reads directories (home, `/etc` as root): off the runtime.
        let prepared = tokio::task::spawn_blocking(move || executor.prepare(&path, identity))
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

    /// Runs `request` confined, then checks the worktree's disk budget.
    #[cfg(target_os = "linux")]
    async fn run_confined(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        // A tree's rules are built on the merged tree as grove reaches it (the overlay's
        // own inodes), not on the empty mount point grove's namespace shows.
        let worktree = match &self.tree {
            Some(tree) => tree.grove_root().to_path_buf(),
            None => request
                .cwd
                .canonicalize()
                .map_err(|source| ExecError::Spawn {
                    shell: self.shell.clone(),
                    cwd: request.cwd.clone(),
                    source,
                })?,
        };
        let entry = match &self.tree {
            Some(tree) => Some(tree.entry(&request.cwd).ok_or_else(|| ExecError::Sandbox {
                reason: format!("{} cannot be passed to the kernel", request.cwd.display()),
            })?),
            None => None,
        };
        let prepared = self.prepared(&worktree).await?;
        let cgroups = self.cgroups.take();
        let procs = cgroups
            .open_procs()
            .map_err(|(path, source)| ExecError::Sandbox {
                reason: format!("cannot open {}: {source}", path.display()),
            })?;
        let mut steps = prepared
            .confinement
            .steps(procs)
            .map_err(|error| ExecError::Sandbox {
                reason: error.to_string(),
            })?;
        let joins = entry.is_some();
        if let Some(entry) = entry {
            steps = steps.joining(entry);
        }
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
            if joins {
                // The directory exists inside the tree; the join enters it there.
                command.current_dir("/");
            }
            linux::confine_at_exec(command.as_std_mut(), steps);
        })
        .await;
        let last_out = running.leave();
        self.cgroups.give_back(cgroups);
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
        if let Some(budget) = self.policy.max_worktree_bytes {
            // A tree takes on disk what its upper directory holds; the base is shared.
            let root = self
                .tree
                .as_ref()
                .map_or_else(|| worktree.clone(), |tree| tree.upper().to_path_buf());
            let meter = Arc::clone(&self.disk);
            let over = tokio::task::spawn_blocking(move || meter.over_budget(&root, budget))
                .await
                .ok()
                .flatten();
            result.disk_over_budget = over.map(|(used, budget)| DiskOverBudget { used, budget });
        }
        Ok(result)
    }
}

#[async_trait]
impl CommandExecutor for SandboxedExecutor {
    #[cfg(target_os = "linux")]
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        self.run_confined(request).await
    }

    #[cfg(not(target_os = "linux"))]
    async fn execute(&self, _request: ExecRequest) -> Result<ExecResult, ExecError> {
        Err(ExecError::Sandbox {
            reason: not_linux().to_string(),
        })
    }

    /// The same confinement with the setup's network and caches, prepared apart from
    /// the workers' (their rules do not grant the caches).
    fn for_setup(&self, policy: &SetupPolicy) -> Arc<dyn CommandExecutor> {
        let mut setup = self.clone();
        setup.policy.allow_network = policy.allow_network;
        setup.extra_writable.extend(policy.writable.iter().cloned());
        setup.worktrees = Arc::default();
        Arc::new(setup)
    }

    /// The same confinement, every command joining the tree's namespaces first, its
    /// rules built on the merged tree (prepared apart from other trees').
    fn inside(&self, namespace: &Arc<TreeNamespace>) -> Option<Arc<dyn CommandExecutor>> {
        let mut inside = self.clone();
        inside.tree = Some(Arc::clone(namespace));
        inside.worktrees = Arc::default();
        #[cfg(target_os = "linux")]
        {
            inside.disk = Arc::default();
        }
        Some(Arc::new(inside))
    }
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
}
