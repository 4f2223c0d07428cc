//! What one command's process does between `fork` and `exec`, on data grove prepared
//! before the fork.
//!
//! This file owns the system calls of a confined command's own process: it joins the
//! pids cgroup, enters a user namespace (or a copy-on-write tree's), builds its mount
//! view (the sanitized git config, the project's shared directories read-only, every
//! host socket covered), enters a network namespace of its own with `lo` up, lowers its
//! rlimits, becomes the command of a pid namespace of its own (see `pid_namespace`), restricts itself with the ready Landlock rulesets and installs the ready
//! seccomp filter. The child is a copy of a multi-threaded process, so it never
//! allocates or locks; every step either succeeds or the child writes why on its stderr
//! and exits with [`REFUSED_EXIT_CODE`]. It must never `exec` the command after a step
//! that protects the user failed.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::Arc;

use landlock::{RulesetCreated, RulesetStatus};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::stat::Mode;
use seccompiler::BpfProgram;

use super::view::ViewPlan;
use super::{REFUSED_EXIT_CODE, REFUSED_PREFIX, SandboxPolicy};
use crate::tools::tree::namespace::Entry;

/// How a command reaches the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NetworkPlan {
    /// A network namespace of its own with `lo` up: servers on 127.0.0.1 work, and only
    /// the command's own loopback is there (no host service, no other command's, no
    /// internet).
    OwnLoopback,
    /// The host's network (`--allow-network`).
    Host,
    /// No namespace (`--sandbox no-loopback`): the filter refuses the sockets instead.
    Refused,
}

/// Host sockets one command must not reach, each covered by an empty file: those its
/// view shows (by their paths there), or all of them without a view.
#[derive(Debug, Default)]
pub(super) struct SocketCovers {
    /// The empty, read-only file bound over each socket.
    pub empty_file: Option<CString>,
    pub sockets: Vec<CString>,
}

/// The Landlock grants of what the command's own process mounts (its `/proc`, its
/// view's root, `/dev/shm` and `/dev/pts`), added in the child: those exist only there,
/// after the ruleset was built, and Landlock grants by inode.
pub(super) struct ChildGrants {
    /// The command's filesystem ruleset. The kernel object is shared with every command
    /// of the worktree: each one's rules name its own mounts, which no other can reach.
    pub ruleset: OwnedFd,
    /// Reading files and directories.
    pub read: u64,
    /// Listing directories alone.
    pub list: u64,
    /// Everything a writable directory allows.
    pub write: u64,
}

/// What one command's process does between `fork` and `exec`.
pub(super) struct ChildSteps {
    pub cgroup_procs: Vec<OwnedFd>,
    pub filesystem: Option<RulesetCreated>,
    pub own_mounts: Option<ChildGrants>,
    pub filter: Arc<BpfProgram>,
    pub policy: SandboxPolicy,
    pub network: NetworkPlan,
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// Whether grove runs as root: namespaces then need no user namespace.
    pub root: bool,
    /// The file system the command sees; `None` without namespaces (`--sandbox
    /// no-loopback`), where Landlock alone draws the line.
    pub view: Option<Arc<ViewPlan>>,
    /// The command's working directory, entered again in its view.
    pub cwd: Option<CString>,
    /// Whether this process built its view (set in the child).
    pub view_built: bool,
    pub covers: SocketCovers,
    /// The copy-on-write tree's namespaces to join instead of a user namespace of its own.
    pub join: Option<Entry>,
}

/// The user namespace the command's steps run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UserNamespace {
    /// One of the command's own (or its tree's): `RLIMIT_NPROC` counts only its
    /// processes, and it may mount.
    Own,
    /// grove's, when none could be entered: `RLIMIT_NPROC` counts all of the user's
    /// processes.
    Grove,
}

/// The mount namespace the command's mount view is built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MountNamespace {
    /// The copy-on-write tree's, joined already: the view goes on top of its overlay.
    Own,
    /// Still grove's: the view is built in a new one, entered first.
    Grove,
}

/// What a failed confinement step (the mount view, the pid namespace) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requirement {
    /// Refuses the command: the step keeps it from sockets the filter lets through.
    Required,
    /// Leaves the command to run without it: without namespaces (`--sandbox
    /// no-loopback` on a system that has none) the filter refuses those sockets itself.
    BestEffort,
}

impl ChildSteps {
    /// The same steps, joining a copy-on-write tree's user and mount namespaces (see
    /// `tree::namespace`) where they would have entered a user namespace of their own.
    pub(super) fn joining(mut self, entry: Entry) -> Self {
        self.join = Some(entry);
        self
    }

    /// The same steps, covering `covers` too, starting in `cwd`.
    pub(super) fn covering(mut self, covers: SocketCovers, cwd: Option<CString>) -> Self {
        self.covers = covers;
        self.cwd = cwd;
        self
    }

    /// Confines the calling (child) process, or ends it with [`REFUSED_EXIT_CODE`].
    fn apply(&mut self) {
        for procs in &self.cgroup_procs {
            // "0" moves the writer itself; the shell and its children are born inside.
            if let Err(errno) = nix::unistd::write(procs, b"0") {
                refuse("joining the command's cgroup", errno);
            }
        }
        // Before Landlock: writing the id maps is a file write the ruleset would refuse,
        // and a sandboxed process may not mount.
        // A tree's commands must see its overlay: they join its host's namespaces (the
        // user namespace is then the tree's, shared by its commands), or refuse.
        let (user_namespace, mounts) = match &self.join {
            Some(entry) => match entry.join() {
                Ok(()) => (UserNamespace::Own, MountNamespace::Own),
                Err((step, errno)) => refuse(step, errno),
            },
            None if self.enter_user_namespace() => (UserNamespace::Own, MountNamespace::Grove),
            None => (UserNamespace::Grove, MountNamespace::Grove),
        };
        let can_mount = user_namespace == UserNamespace::Own || self.root;
        // Without namespaces (`--sandbox no-loopback` on a system that has none) the
        // filter refuses the sockets these steps would otherwise confine.
        let requirement = if self.network == NetworkPlan::Refused {
            Requirement::BestEffort
        } else {
            Requirement::Required
        };
        let required = requirement == Requirement::Required;
        if can_mount {
            self.build_mount_view(mounts, requirement);
        } else if required {
            refuse("entering a user namespace", Errno::EPERM);
        }
        if self.network == NetworkPlan::OwnLoopback
            && let Err((step, errno)) = enter_own_loopback()
        {
            refuse(step, errno);
        }
        self.lower_limits(user_namespace);
        // Last before the restrictions: the keeper and the init stay outside them, and
        // run nothing but their waits.
        if can_mount {
            let view = self.view.as_deref().filter(|_| self.view_built);
            let proc_at = view.map_or(c"/proc", |view| view.proc_at.as_c_str());
            match crate::tools::pid_namespace::enter(proc_at) {
                Ok(()) => self.enter_view(view),
                Err((step, errno)) if required => refuse(step, errno),
                Err(_) => {}
            }
        }
        match self.filesystem.take().map(RulesetCreated::restrict_self) {
            Some(Ok(status)) if status.ruleset == RulesetStatus::FullyEnforced => {}
            Some(Ok(_)) => refuse("enforcing the Landlock ruleset in full", Errno::ENOTSUP),
            Some(Err(error)) => refuse("enforcing the Landlock ruleset", errno_of(&error)),
            None => refuse("enforcing the Landlock ruleset", Errno::EBADF),
        }
        if let Err(error) = seccompiler::apply_filter(&self.filter) {
            refuse("installing the seccomp filter", errno_of(&error));
        }
    }

    /// Moves this process into a new user namespace that maps only its own user and group.
    ///
    /// It keeps the same files and owners, but drops every capability over the rest of
    /// the system (raw devices, `/proc/kcore`, other users' files), and makes the kernel
    /// count `RLIMIT_NPROC` for this namespace alone, even for root. It also owns the
    /// mount and network namespaces the command gets next.
    fn enter_user_namespace(&self) -> bool {
        unshare(CloneFlags::CLONE_NEWUSER).is_ok()
            && write_proc_file(c"/proc/self/setgroups", b"deny")
            && write_proc_file(c"/proc/self/uid_map", &self.uid_map)
            && write_proc_file(c"/proc/self/gid_map", &self.gid_map)
    }

    /// In the command's process (pid 2 of its namespace): pivots into the view built and
    /// grants what it mounted itself.
    fn enter_view(&self, view: Option<&ViewPlan>) {
        if let (Some(view), Some(cwd)) = (view, self.cwd.as_deref())
            && let Err((step, errno)) = super::mount_ops::pivot(view, cwd)
        {
            refuse(step, errno);
        }
        let Some(grants) = &self.own_mounts else {
            return;
        };
        if let Err(errno) = grants.add(c"/proc", grants.read) {
            refuse("granting the command's own /proc", errno);
        }
        if view.is_some() {
            if let Err(errno) = grants.add(c"/", grants.list) {
                refuse("granting the command's view", errno);
            }
            // Left out where the kernel refused to mount them.
            let _ = grants.add(c"/dev/shm", grants.write);
            let _ = grants.add(c"/dev/pts", grants.read | grants.write);
            // A disposable view's tree is an overlay made here: granted by its own inode.
            if let Some(tree) = view.and_then(|view| view.tree_overlay.as_deref())
                && let Err(errno) = grants.add(tree, grants.write)
            {
                refuse("granting the command's disposable tree", errno);
            }
            // The command's git writes its copy-on-write view of the repository alone.
            if view.is_some_and(|view| view.git_writable)
                && let Err(errno) = grants.add(super::view::GIT_VIEW_C, grants.write)
            {
                refuse("granting the command's git its own copy", errno);
            }
        }
    }

    /// Binds the empty file over every host socket listed (where the view is built, when
    /// there is one); a socket gone meanwhile needs no cover.
    fn cover_sockets(&self) {
        let Some(empty) = &self.covers.empty_file else {
            return;
        };
        let required = self.network != NetworkPlan::Refused;
        for socket in &self.covers.sockets {
            match super::mount_ops::mount(Some(empty), socket, None, libc::MS_BIND, None) {
                // Gone since grove listed it, or not reachable by that path (in the view,
                // beneath a path it does not show): nothing to cover.
                Ok(_) | Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => {}
                Err(errno) if required => refuse("covering a host socket", errno),
                Err(_) => {}
            }
        }
    }

    /// Enters a mount and an IPC namespace of this process's own (the mount namespace
    /// unless joining a tree made one), and builds its view beneath the staging
    /// directory, so nothing outside sees it. [`Requirement::Required`]: a failure
    /// refuses the command.
    fn build_mount_view(&mut self, mounts: MountNamespace, requirement: Requirement) {
        let required = requirement == Requirement::Required;
        if mounts == MountNamespace::Grove
            && let Err(errno) = unshare(CloneFlags::CLONE_NEWNS)
        {
            if required {
                refuse("entering a mount namespace", errno);
            }
            return;
        }
        // Shared memory and message queues of its own: none of the host's, none of
        // another tree's, and none that outlives it.
        if let Err(errno) = unshare(CloneFlags::CLONE_NEWIPC)
            && required
        {
            refuse("entering an IPC namespace", errno);
        }
        // Private: the mounts must not propagate back to grove's namespace.
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if let Err(errno) = super::mount_ops::mount(None, c"/", None, private, None)
            && required
        {
            refuse("making the command's mounts private", errno);
        }
        if let Some(view) = self.view.as_deref() {
            match super::mount_ops::build(view) {
                Ok(()) => self.view_built = true,
                Err((step, errno)) if required => refuse(step, errno),
                Err(_) => {}
            }
        }
        self.cover_sockets();
    }

    fn lower_limits(&self, user_namespace: UserNamespace) {
        lower_limit(Resource::RLIMIT_FSIZE, self.policy.max_file_bytes);
        lower_limit(Resource::RLIMIT_CORE, 0);
        // Outside its own namespace RLIMIT_NPROC counts all of the user's processes, so a
        // low value would break a busy desktop; it is then left as it is.
        if user_namespace == UserNamespace::Own {
            lower_limit(Resource::RLIMIT_NPROC, self.policy.max_processes);
        }
    }
}

impl ChildGrants {
    /// Grants `access` beneath the directory `path` is now (a mount of this process's).
    #[allow(unsafe_code)]
    fn add(&self, path: &CStr, access: u64) -> Result<(), Errno> {
        /// `struct landlock_path_beneath_attr` of the kernel's uapi, packed as it is.
        #[repr(C, packed)]
        struct PathBeneath {
            allowed_access: u64,
            parent_fd: i32,
        }
        /// `LANDLOCK_RULE_PATH_BENEATH`.
        const RULE_PATH_BENEATH: libc::c_int = 1;
        let dir = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let rule = PathBeneath {
            allowed_access: access,
            parent_fd: std::os::fd::AsRawFd::as_raw_fd(&dir),
        };
        // SAFETY: landlock_add_rule reads the packed struct on the stack; both
        // descriptors are open.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                std::os::fd::AsRawFd::as_raw_fd(&self.ruleset),
                RULE_PATH_BENEATH,
                &rule as *const PathBeneath,
                0,
            )
        };
        Errno::result(added).map(drop)
    }
}

/// Enters a network namespace of this process's own and brings its loopback up: it
/// then has `lo` (127.0.0.1 and ::1) and nothing else.
#[allow(unsafe_code)]
fn enter_own_loopback() -> Result<(), (&'static str, Errno)> {
    unshare(CloneFlags::CLONE_NEWNET)
        .map_err(|errno| ("entering a network namespace of its own", errno))?;
    // SAFETY: plain system calls on a zeroed `ifreq` on the stack; the descriptor is
    // closed on every path.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            return Err(("opening a socket to bring the loopback up", Errno::last()));
        }
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
            *slot = *byte as libc::c_char;
        }
        request.ifr_ifru.ifru_flags =
            (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
        let done = libc::ioctl(socket, libc::SIOCSIFFLAGS as _, &request);
        let errno = Errno::last();
        libc::close(socket);
        if done < 0 {
            return Err(("bringing the loopback up", errno));
        }
    }
    Ok(())
}

/// Makes `command`'s process take `steps` between `fork` and `exec`.
#[allow(unsafe_code)]
pub(super) fn confine_at_exec(command: &mut std::process::Command, mut steps: ChildSteps) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook runs in the forked child, where only async-signal-safe work is
    // sound. `ChildSteps::apply` makes system calls on data built before the fork; it
    // neither allocates nor takes a lock, and on failure it writes a fixed message and
    // leaves with `_exit`, running no exit handler.
    unsafe {
        command.pre_exec(move || {
            steps.apply();
            Ok(())
        });
    }
}

fn write_proc_file(path: &CStr, text: &[u8]) -> bool {
    let Ok(file) = nix::fcntl::open(path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty()) else {
        return false;
    };
    nix::unistd::write(&file, text).is_ok_and(|written| written == text.len())
}

fn lower_limit(resource: Resource, wanted: u64) {
    let (soft, hard) = match getrlimit(resource) {
        Ok(limits) => limits,
        Err(errno) => refuse("reading a resource limit", errno),
    };
    let hard = hard.min(wanted);
    if let Err(errno) = setrlimit(resource, soft.min(hard), hard) {
        refuse("setting a resource limit", errno);
    }
}

/// The system error beneath `error`, found without allocating.
fn errno_of(error: &(dyn std::error::Error + 'static)) -> Errno {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(code) = current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
        {
            return Errno::from_raw(code);
        }
        cause = current.source();
    }
    Errno::UnknownErrno
}

/// Tells why on stderr and ends the child before it runs the command.
#[allow(unsafe_code)]
fn refuse(step: &str, errno: Errno) -> ! {
    let stderr = std::io::stderr();
    for part in [REFUSED_PREFIX, step, " failed: ", errno.desc(), "\n"] {
        let _ = nix::unistd::write(stderr.as_fd(), part.as_bytes());
    }
    // SAFETY: `_exit` ends the process at once, without the exit handlers a forked copy of
    // a multi-threaded process must not run.
    unsafe { libc::_exit(i32::from(REFUSED_EXIT_CODE)) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tools::sandbox::linux::{Confinement, PathRules};

    #[test]
    fn a_step_that_fails_in_the_child_refuses_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let system = crate::tools::sandbox::grants::Grants::for_commands(&[], &[], &[]);
        let rules = PathRules {
            write: vec![root.clone()],
            read: system.read.iter().map(|grant| grant.path.clone()).collect(),
            hide: Vec::new(),
        };
        let confinement = match Confinement::prepare(&rules, None, SandboxPolicy::default()) {
            Ok(confinement) => confinement,
            Err(error) => {
                assert!(
                    std::env::var_os("GROVE_REQUIRE_SANDBOX").is_none(),
                    "GROVE_REQUIRE_SANDBOX is set but the sandbox is unavailable: {error}"
                );
                return;
            }
        };
        let run = |cgroup_procs: Vec<OwnedFd>| {
            let mut command = std::process::Command::new("/bin/sh");
            command
                .args(["-c", "echo ran > ran"])
                .current_dir(&root)
                .stderr(std::process::Stdio::piped());
            confine_at_exec(&mut command, confinement.steps(cgroup_procs).unwrap());
            let output = command.output().unwrap();
            (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
                root.join("ran").exists(),
            )
        };
        // A `cgroup.procs` that cannot be written: the first step fails.
        let read_only = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        assert_eq!(
            run(vec![read_only]),
            (
                Some(i32::from(REFUSED_EXIT_CODE)),
                "grove sandbox: joining the command's cgroup failed: Bad file number\n".to_owned(),
                false
            ),
            "a failed step ends the child with the refusal code and its reason, before the \
             command runs"
        );
        assert_eq!(
            run(Vec::new()),
            (Some(0), String::new(), true),
            "the same confinement without the failing step runs the command"
        );
    }
}
