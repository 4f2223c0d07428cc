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
use super::git_view::{GitCopies, git_copies, git_mounts};
use super::grants::{self, Grants};
use super::paths::{self, GitView};
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
    /// The commands grove runs itself (the check, the setup): the environments they
    /// name are granted.
    commands: Vec<String>,
    /// What every tree's commands are granted, found on the first command.
    machine: Arc<OnceLock<Arc<Machine>>>,
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
    /// Whether each command sees its tree through a disposable copy-on-write view.
    disposable: bool,
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
            commands: Vec::new(),
            machine: Arc::default(),
            cgroups: Arc::new(cgroups),
            temp_root: Arc::default(),
            #[cfg(target_os = "linux")]
            worktrees: Arc::default(),
            #[cfg(target_os = "linux")]
            disk: Arc::default(),
            tree: None,
            disposable: false,
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
        self
    }

    /// Also grants the environments of the programs `commands` (the check, the setup)
    /// run by path (`/opt/venvs/x/bin/python -m pytest`).
    pub fn commands(mut self, commands: &[String]) -> Self {
        self.commands = commands.to_vec();
        self.machine = Arc::default();
        self
    }

    /// Whether commands get a memory cap here (a memory cgroup grove may make).
    pub fn caps_memory(&self) -> bool {
        self.cgroups.caps_memory()
    }

    /// What every tree of this executor is granted (reads directories: call off the
    /// runtime).
    fn machine(&self) -> Arc<Machine> {
        let machine = self.machine.get_or_init(|| {
            let readable: Vec<PathBuf> = self.extra_readable.clone();
            let mut grants = Grants::for_commands(&self.env, &self.commands, &readable);
            // A shared virtualenv runs the interpreter it was made from.
            for home in self
                .project
                .shared_binds(Path::new("/"))
                .iter()
                .filter_map(|(source, _)| grants::venv_home(source))
            {
                grants.environment_of(&home, "the interpreter a shared virtualenv was made from");
            }
            let etc_links = grants::etc_link_targets(&grants);
            Arc::new(Machine {
                private_etc: grants::private_etc(),
                etc_links,
                grants,
            })
        });
        Arc::clone(machine)
    }

    /// The Landlock rules and the view of the worktree at `place`, whose `shared`
    /// directories (user's copy, place in the tree) are bound read-only.
    #[cfg(target_os = "linux")]
    fn confinement_of(
        &self,
        place: &Place,
        private: &Private,
        git: &GitView,
        shared: &[(PathBuf, PathBuf)],
    ) -> (linux::PathRules, super::view::ViewPlan) {
        let machine = self.machine();
        let canonical = |paths: &[PathBuf]| -> Vec<PathBuf> {
            paths
                .iter()
                .filter_map(|path| path.canonicalize().ok())
                .collect()
        };
        let checkout = self
            .project
            .checkout
            .as_deref()
            .and_then(|dir| dir.canonicalize().ok());
        let git_mounts = private
            .git
            .as_ref()
            .and_then(|copies| git_mounts(git, copies));
        let hidden = canonical(&self.extra_hidden);
        let writable = canonical(&self.extra_writable);
        let home = self
            .var("HOME")
            .map(PathBuf::from)
            .filter(|home| home.is_absolute());
        let view = super::view::plan(&super::view::ViewSpec {
            staging: &private.staging,
            grants: &machine.grants,
            private_etc: &machine.private_etc,
            etc_links: &machine.etc_links,
            writable: &writable,
            tree: &place.seen,
            temp_dir: &private.temp_dir,
            shared,
            checkout: checkout.as_deref(),
            home: home.as_deref(),
            git: git_mounts.as_ref(),
            hidden: &hidden,
            empty_file: &private.empty_file,
            tree_scratch: private.scratch.as_ref(),
        });
        let mut read: Vec<PathBuf> = machine
            .grants
            .read
            .iter()
            .map(|grant| grant.path.clone())
            .filter(|path| {
                checkout
                    .as_deref()
                    .is_none_or(|checkout| !path.starts_with(checkout))
            })
            .collect();
        read.extend(machine.etc_links.iter().cloned());
        read.extend(git.read.iter().cloned());
        read.extend(git.common.clone());
        // Each file itself: the view shows it at the path it stands for, not beneath
        // its directory, and Landlock grants along the path walked.
        if let Some(copies) = &private.git {
            read.extend(copies.copies.iter().map(|(copy, _)| copy.clone()));
            read.push(copies.pointer.clone());
            read.push(copies.hooks.clone());
        }
        read.extend(shared.iter().map(|(source, _)| source.clone()));
        let mut hide = machine.private_etc.clone();
        hide.extend(hidden);
        hide.extend(git.hide.iter().cloned());
        hide.extend(checkout);
        // A disposable view writes its overlay alone (granted in the command's process),
        // never the tree.
        let mut write = vec![private.temp_dir.clone()];
        if private.scratch.is_none() {
            write.push(place.for_grove.clone());
        } else {
            read.push(place.for_grove.clone());
        }
        write.extend(writable);
        (linux::PathRules { write, read, hide }, view)
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
        let staging = root.path().join("view");
        let made = |source| SandboxError::TempDir {
            parent: root.path().to_path_buf(),
            source,
        };
        match std::fs::create_dir(&staging) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => Err(made(error))?,
            _ => {}
        }
        let empty_file = paths::empty_file(root.path())
            .ok_or_else(|| made(std::io::Error::other("the empty cover file cannot be made")))?;
        let scratch = if self.disposable {
            Some(paths::private_dir(root.path(), "scratch-")?)
        } else {
            None
        };
        let scratch_dirs = match &scratch {
            Some(dir) => {
                let dirs = (dir.path().join("upper"), dir.path().join("work"));
                for made in [&dirs.0, &dirs.1] {
                    std::fs::create_dir(made).map_err(made_in(dir.path()))?;
                }
                Some(dirs)
            }
            None => None,
        };
        let private = Private {
            temp_dir: temp_dir.path().to_path_buf(),
            staging,
            empty_file,
            git: git_copies(root.path(), &git)?,
            scratch: scratch_dirs,
        };
        let shared = self.project.shared_binds(&place.seen);
        let (rules, view) = self.confinement_of(place, &private, &git, &shared);
        Ok(PreparedWorktree {
            identity,
            confinement: linux::Confinement::prepare(&rules, Some(view), self.policy)?,
            temp_dir,
            shared: shared
                .iter()
                .filter_map(|(_, target)| target.strip_prefix(&place.seen).ok())
                .map(Path::to_path_buf)
                .collect(),
            git,
            _git_dir: private.git.map(|copies| copies.dir),
            scratch,
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
    /// private `TMPDIR` and Python writing no bytecode.
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
        // The view shows the private directory as `/tmp`; without one it is where it is.
        let temp_dir = match prepared.confinement.view() {
            Some(_) => OsString::from("/tmp"),
            None => prepared.temp_dir.path().as_os_str().to_owned(),
        };
        env.push(("TMPDIR".into(), temp_dir));
        env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
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
            .covering(
                self.socket_covers(&place, &prepared),
                linux::c_path(&request.cwd),
            );
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
        if last_out && prepared.scratch.is_some() {
            let discarding = Arc::clone(&prepared);
            let discarded = tokio::task::spawn_blocking(move || discarding.discard_scratch())
                .await
                .unwrap_or(false);
            if !discarded {
                // The next command must not see what this one wrote: a fresh preparation.
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
        let listed = sockets::host_sockets(&own);
        // In a view only those it shows need a cover, where it shows them (beneath the
        // staging directory: the covers are made before the pivot).
        let sockets: Vec<PathBuf> = match prepared.confinement.view() {
            Some(view) => listed
                .iter()
                .flat_map(|path| view.translate(path))
                .map(|at| view.staged(&at))
                .collect(),
            None => listed,
        };
        SocketCovers {
            empty_file: self
                .temp_root()
                .ok()
                .and_then(|root| paths::empty_file(root.path()))
                .and_then(|file| linux::c_path(&file)),
            sockets: sockets
                .iter()
                .filter_map(|path| linux::c_path(path))
                .collect(),
        }
    }
}

/// The error of a private directory of `parent` that cannot be made.
fn made_in(parent: &Path) -> impl Fn(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::TempDir {
        parent: parent.to_path_buf(),
        source,
    }
}

/// The private directories and files of one worktree's commands.
struct Private {
    temp_dir: PathBuf,
    /// Where each command builds its view's root.
    staging: PathBuf,
    /// Bound over a file a command must not see.
    empty_file: PathBuf,
    git: Option<GitCopies>,
    /// A disposable view's overlay directories (upper, work), emptied after each
    /// command.
    scratch: Option<(PathBuf, PathBuf)>,
}

/// What every tree of an executor is granted.
#[derive(Debug)]
struct Machine {
    grants: Grants,
    private_etc: Vec<PathBuf>,
    etc_links: Vec<PathBuf>,
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

    /// The same confinement without the network, every tree seen through an overlay
    /// whose upper directory is emptied after each command (prepared apart).
    fn disposable(&self) -> Option<Arc<dyn CommandExecutor>> {
        let mut disposable = self.clone();
        disposable.policy.allow_network = false;
        disposable.extra_writable.clear();
        disposable.disposable = true;
        #[cfg(target_os = "linux")]
        {
            disposable.worktrees = Arc::default();
            disposable.disk = Arc::default();
        }
        Some(Arc::new(disposable))
    }
}
