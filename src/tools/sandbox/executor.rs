//! The sandboxed executor: one run's commands, each worktree with its confinement built
//! once and private directories of its own.
//!
//! This file owns what is decided per worktree (its rules: what it reads, writes, which
//! shared directories it sees, its git view from grove's own record) and per command
//! (the host sockets to cover, the worktree's `.git` pointer put right before and after,
//! the environment, the disk budget). It must never run a command with a confinement
//! built for another directory, or with a git view taken from the worktree's own `.git`
//! file (the command could have planted it).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;

use super::cgroup::{self, CgroupPool};
use super::child::SocketCovers;
use super::paths::{self, GitView, hidden_paths};
#[cfg(target_os = "linux")]
use super::prepared::{DiskMeter, Identity, PreparedWorktree};
use super::project::ProjectView;
use super::{SandboxError, SandboxPolicy, kill_orphaned_commands, refusal};
#[cfg(target_os = "linux")]
use super::{linux, sockets};
use crate::tools::exec::{
    CommandExecutor, DiskOverBudget, ExecError, ExecRequest, ExecResult, SetupPolicy,
    default_shell, run_in_process_group, scrub_env,
};
use crate::tools::git_pointer::{GitPointer, ensure_git_pointer};
use crate::tools::tree::namespace::TreeNamespace;

/// Runs commands confined, each worktree with its rules built once and a private
/// temporary directory of its own.
#[derive(Clone)]
pub struct SandboxedExecutor {
    policy: SandboxPolicy,
    shell: PathBuf,
    env: Vec<(OsString, OsString)>,
    /// Hidden on top of the secrets, e.g. the run store and the other worktrees.
    extra_hidden: Vec<PathBuf>,
    /// Readable even beneath a hidden path (`[sandbox] allow_read`).
    extra_readable: Vec<PathBuf>,
    /// Writable besides the worktree and its `TMPDIR`, e.g. the caches a setup command
    /// fills.
    extra_writable: Vec<PathBuf>,
    /// The user's checkout, repository and shared directories.
    project: Arc<ProjectView>,
    /// The checkout's directories its editable installs name, found on the first command.
    editable: Arc<OnceLock<Vec<PathBuf>>>,
    cgroups: Arc<CgroupPool>,
    /// The parent of every worktree's private directories, made on the first command.
    temp_root: Arc<Mutex<Option<Arc<tempfile::TempDir>>>>,
    /// The prepared confinement of each worktree commands ran in, by canonical path.
    #[cfg(target_os = "linux")]
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

/// Where one command runs: the worktree as grove reaches it, and as the command (and
/// git's registration) names it.
#[derive(Debug, Clone)]
struct Place {
    /// The tree's root as grove's own process opens it.
    for_grove: PathBuf,
    /// The tree's root as its commands see it; also the path git registered, which
    /// grove's namespace shows too (a copy-on-write tree's mount point).
    seen: PathBuf,
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
            project: Arc::default(),
            editable: Arc::default(),
            cgroups: Arc::new(cgroups),
            temp_root: Arc::default(),
            #[cfg(target_os = "linux")]
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

    /// Commands run for `project`: its checkout hidden but for its shared directories,
    /// which every tree sees read-only, its git data read through grove's record of each
    /// worktree, and its editable installs pointed at the tree's code.
    pub fn project(mut self, project: ProjectView) -> Self {
        self.project = Arc::new(project);
        self.editable = Arc::default();
        self
    }

    /// Whether commands get a memory cap here (a memory cgroup grove may make).
    pub fn caps_memory(&self) -> bool {
        self.cgroups.caps_memory()
    }

    #[cfg(target_os = "linux")]
    fn path_rules(&self, place: &Place, private: &Private, git: &GitView) -> linux::PathRules {
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
        let shared = self.project.shared_binds(&place.seen);
        let mut read: Vec<PathBuf> = ["CARGO_HOME", "RUSTUP_HOME"]
            .iter()
            .filter_map(|name| self.var(name))
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
            .filter_map(|path| path.canonicalize().ok())
            .collect();
        read.extend(canonical(&self.extra_readable));
        read.extend(git.read.iter().cloned());
        read.extend(private.config_copy.clone());
        read.extend(shared.iter().map(|(source, _)| source.clone()));
        // The repository's git data often lies in the checkout (`.git`); its secrets
        // are in `git.hide`.
        read.extend(
            git.admin
                .as_ref()
                .and(self.project.common_dir.as_deref())
                .and_then(|common| common.canonicalize().ok()),
        );
        let mut hide = hidden_paths(&homes);
        hide.extend(canonical(&self.extra_hidden));
        hide.extend(
            self.project
                .checkout
                .iter()
                .filter_map(|dir| dir.canonicalize().ok()),
        );
        // Other worktrees' private directories (and their listing) are hidden.
        hide.push(private.root.clone());
        hide.extend(git.hide.iter().cloned());
        let mut write = vec![place.for_grove.clone(), private.temp_dir.clone()];
        write.extend(canonical(&self.extra_writable));
        let mounts = match (&private.config_copy, &git.config) {
            (Some(copy), Some(config)) => vec![(copy.clone(), config.clone())],
            _ => Vec::new(),
        };
        linux::PathRules {
            write,
            read,
            hide,
            mounts,
            shared,
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

    /// Builds the confinement of the worktree at `place` (reads directories: call off
    /// the runtime).
    #[cfg(target_os = "linux")]
    fn prepare(&self, place: &Place) -> Result<PreparedWorktree, SandboxError> {
        let root = self.temp_root()?;
        let temp_dir = paths::private_dir(root.path(), "tmp-")?;
        let git = match &self.project.common_dir {
            Some(common) => GitView::of(common, &place.seen),
            None => GitView::default(),
        };
        let identity: Identity = (paths::identity_of(&place.for_grove), git.ref_identity);
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
        let private = Private {
            root: root.path().to_path_buf(),
            temp_dir: temp_dir.path().to_path_buf(),
            config_copy,
        };
        let rules = self.path_rules(place, &private, &git);
        let editable = self
            .editable
            .get_or_init(|| self.project.editable_sources(&self.env));
        Ok(PreparedWorktree {
            identity,
            confinement: linux::Confinement::prepare(&rules, self.policy)?,
            temp_dir,
            python_path: editable.iter().map(|dir| place.seen.join(dir)).collect(),
            shared: rules
                .shared
                .iter()
                .filter_map(|(_, target)| target.strip_prefix(&place.seen).ok())
                .map(Path::to_path_buf)
                .collect(),
            git,
            _git_dir: git_dir,
            running: Mutex::new(0),
        })
    }

    /// The worktree's prepared confinement, built on its first command (or again when the
    /// directory at that path, or its own ref file, is no longer the one it was built
    /// for).
    #[cfg(target_os = "linux")]
    async fn prepared(&self, place: &Place) -> Result<Arc<PreparedWorktree>, ExecError> {
        let dir = paths::identity_of(&place.for_grove);
        let known = self
            .worktrees
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&place.for_grove)
            .cloned()
            .filter(|prepared| {
                dir.is_some() && prepared.identity == (dir, prepared.git.current_ref_identity())
            });
        if let Some(prepared) = known {
            return Ok(prepared);
        }
        let executor = self.clone();
        let at = place.clone();
        // Building the rules reads directories (home, `/etc` as root): off the runtime.
        let prepared = tokio::task::spawn_blocking(move || executor.prepare(&at))
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
        worktrees.insert(place.for_grove.clone(), Arc::clone(&prepared));
        Ok(prepared)
    }

    /// Forgets `worktree`'s prepared confinement (its temporary directory goes with the
    /// last command still using it).
    #[cfg(target_os = "linux")]
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

    /// Where `request` runs.
    fn place(&self, request: &ExecRequest) -> Result<Place, ExecError> {
        // A tree's rules are built on the merged tree as grove reaches it (the overlay's
        // own inodes), not on the empty mount point grove's namespace shows.
        Ok(match &self.tree {
            Some(tree) => Place {
                for_grove: tree.grove_root().to_path_buf(),
                seen: tree.path().to_path_buf(),
            },
            None => {
                let root = request
                    .cwd
                    .canonicalize()
                    .map_err(|source| ExecError::Spawn {
                        shell: self.shell.clone(),
                        cwd: request.cwd.clone(),
                        source,
                    })?;
                Place {
                    for_grove: root.clone(),
                    seen: root,
                }
            }
        })
    }

    /// The environment of a command of `prepared`'s worktree: the scrubbed one, its
    /// private `TMPDIR`, Python writing no bytecode and the tree's copies of the editable
    /// installs' sources first on Python's path.
    ///
    /// No bytecode is written: a check leaves no `__pycache__` to commit, and Python
    /// still reads the caches its installation and the environments' packages were
    /// installed with. A private `PYTHONPYCACHEPREFIX` did the first but not the second:
    /// Python then reads caches only under the prefix, so every tree's first command
    /// compiled the standard library and every package it imports again (0.07 s → 0.35 s
    /// for `python3 -c pass`, 0.15 s → 0.85 s importing four standard modules), and each
    /// check runs in a fresh tree. A cache shared between trees would let one worker's
    /// command plant bytecode another tree's check runs.
    #[cfg(target_os = "linux")]
    fn command_env(&self, prepared: &PreparedWorktree) -> Vec<(OsString, OsString)> {
        let mut env = self.env.clone();
        let set_here = [
            "TMPDIR",
            "PYTHONPYCACHEPREFIX",
            "PYTHONDONTWRITEBYTECODE",
            "PYTHONPATH",
        ];
        env.retain(|(name, _)| !set_here.iter().any(|set| name == set));
        env.push((
            "TMPDIR".into(),
            prepared.temp_dir.path().as_os_str().to_owned(),
        ));
        env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        if let Ok(joined) = std::env::join_paths(&prepared.python_path)
            && !joined.is_empty()
        {
            env.push(("PYTHONPATH".into(), joined));
        }
        env
    }

    /// Runs `request` confined, then checks the worktree's disk budget.
    #[cfg(target_os = "linux")]
    async fn run_confined(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        let place = self.place(&request)?;
        let entry = match &self.tree {
            Some(tree) => Some(tree.entry(&request.cwd).ok_or_else(|| ExecError::Sandbox {
                reason: format!("{} cannot be passed to the kernel", request.cwd.display()),
            })?),
            None => None,
        };
        let prepared = self.prepared(&place).await?;
        let pointer = Pointer::before(&place.for_grove, &prepared.git);
        prepared.make_mount_points(&place.for_grove);
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
            })?
            .covering(self.socket_covers(&place, &prepared));
        let joins = entry.is_some();
        if let Some(entry) = entry {
            steps = steps.joining(entry);
        }
        let env = self.command_env(&prepared);
        let args = [OsString::from("-c"), OsString::from(&request.command)];

        let running = prepared.enter();
        let run = run_in_process_group(&self.shell, &args, &env, &request, |command| {
            if joins {
                // The directory exists inside the tree; the join enters it there.
                command.current_dir("/");
            }
            super::child::confine_at_exec(command.as_std_mut(), steps);
        })
        .await;
        let last_out = running.leave();
        self.cgroups.give_back(cgroups);
        let mut result = run?;
        if let Some(reason) = refusal(&result) {
            return Err(ExecError::Sandbox { reason });
        }
        result.notes.extend(pointer.after());
        if last_out && !prepared.temp_dir_is_empty() {
            // Removing a big tree blocks; it must not stall the runtime's thread.
            let emptying = Arc::clone(&prepared);
            let emptied = tokio::task::spawn_blocking(move || emptying.empty_temp_dir())
                .await
                .unwrap_or(false);
            if !emptied {
                // A command made it unremovable (e.g. took away its permissions): the next
                // command gets a fresh worktree preparation and directory.
                self.forget(&place.for_grove, &prepared);
            }
        }
        if let Some(budget) = self.policy.max_worktree_bytes {
            // A tree takes on disk what its upper directory holds; the base is shared.
            let root = self.tree.as_ref().map_or_else(
                || place.for_grove.clone(),
                |tree| tree.upper().to_path_buf(),
            );
            let meter = Arc::clone(&self.disk);
            let over = tokio::task::spawn_blocking(move || meter.over_budget(&root, budget))
                .await
                .ok()
                .flatten();
            result.disk_over_budget = over.map(|(used, budget)| DiskOverBudget { used, budget });
        }
        Ok(result)
    }

    /// The host's sockets the command must not reach: every one bound outside its tree
    /// and its private directories, covered by the empty file of the temporary root.
    #[cfg(target_os = "linux")]
    fn socket_covers(&self, place: &Place, prepared: &PreparedWorktree) -> SocketCovers {
        let own = [
            place.seen.as_path(),
            place.for_grove.as_path(),
            prepared.temp_dir.path(),
        ];
        SocketCovers {
            empty_file: self
                .temp_root()
                .ok()
                .and_then(|root| paths::empty_file(root.path()))
                .and_then(|file| linux::c_path(&file)),
            sockets: sockets::host_sockets(&own)
                .iter()
                .filter_map(|path| linux::c_path(path))
                .collect(),
        }
    }
}

/// The private directories of one worktree's commands.
struct Private {
    /// Their parent, hidden.
    root: PathBuf,
    temp_dir: PathBuf,
    config_copy: Option<PathBuf>,
}

/// The worktree's `.git` pointer around one command: put right from grove's record
/// before it runs (a pointer planted by an earlier command, across an interrupt and a
/// resume included, never reaches this one) and again after it.
enum Pointer {
    /// The pointer git registered, to be enforced at `tree`.
    Recorded { tree: PathBuf, admin: PathBuf },
    /// No registration known: the pointer as it was, put back if the command changed it.
    Snapshot(GitPointer),
}

impl Pointer {
    fn before(tree: &Path, git: &GitView) -> Self {
        match &git.admin {
            Some(admin) => {
                // A failure shows again after the command, where it is reported.
                let _ = ensure_git_pointer(tree, admin);
                Self::Recorded {
                    tree: tree.to_path_buf(),
                    admin: admin.clone(),
                }
            }
            None => Self::Snapshot(GitPointer::snapshot(tree)),
        }
    }

    /// A note for the model when the command changed the pointer.
    fn after(&self) -> Option<String> {
        match self {
            Self::Snapshot(pointer) => pointer.restore(),
            Self::Recorded { tree, admin } => match ensure_git_pointer(tree, admin) {
                Ok(false) => None,
                Ok(true) => Some(crate::tools::git_pointer::RESTORED_NOTE.to_owned()),
                Err(error) => Some(crate::tools::git_pointer::unrestored_note(&error)),
            },
        }
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
            reason: super::not_linux().to_string(),
        })
    }

    /// The same confinement with the setup's network and caches, prepared apart from
    /// the workers' (their rules do not grant the caches).
    fn for_setup(&self, policy: &SetupPolicy) -> Arc<dyn CommandExecutor> {
        let mut setup = self.clone();
        setup.policy.allow_network = policy.allow_network;
        setup.extra_writable.extend(policy.writable.iter().cloned());
        #[cfg(target_os = "linux")]
        {
            setup.worktrees = Arc::default();
        }
        Arc::new(setup)
    }

    /// The same confinement, every command joining the tree's namespaces first, its
    /// rules built on the merged tree (prepared apart from other trees').
    fn inside(&self, namespace: &Arc<TreeNamespace>) -> Option<Arc<dyn CommandExecutor>> {
        let mut inside = self.clone();
        inside.tree = Some(Arc::clone(namespace));
        #[cfg(target_os = "linux")]
        {
            inside.worktrees = Arc::default();
            inside.disk = Arc::default();
        }
        Some(Arc::new(inside))
    }
}
