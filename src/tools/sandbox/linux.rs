//! The Linux confinement of one command: prepared in grove's process, applied in the
//! command's own process between `fork` and `exec`.
//!
//! This file owns the kernel calls of the sandbox. Everything that allocates, reads
//! directories or can fail in an interesting way (the Landlock ruleset with its path
//! rules, the seccomp program, the user-namespace id maps) is built beforehand, in grove,
//! once per worktree ([`Confinement::prepare`]). The forked child, a copy of a
//! multi-threaded process, then only makes system calls on that data ([`ChildSteps`]):
//! it joins the pids cgroup, enters a user namespace, lowers its rlimits, restricts
//! itself with the ready rulesets, installs the ready filter, and the shell is `exec`ed.
//!
//! Every step either succeeds or the child writes why on its stderr and exits with
//! [`REFUSED_EXIT_CODE`]: it must never `exec` the command after a step failed. The
//! filesystem ruleset is created with Landlock ABI 3 as a hard requirement, so the kernel
//! enforces it in full or grove refuses before any command.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::sys::stat::Mode;
use nix::unistd::{getegid, geteuid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{REFUSED_EXIT_CODE, REFUSED_PREFIX, SandboxError, SandboxPolicy};
use crate::tools::tree::namespace::Entry;

/// The Landlock ABI whose filesystem rights must be enforced in full: 3 adds truncation to
/// 2's cross-directory link and rename (`REFER`), so neither a hard link, an `mv`, nor a
/// truncation reaches outside the writable roots.
const FS_ABI: ABI = ABI::V3;

/// Devices every command may read and write (`> /dev/null` truncates, hence the right).
const OPEN_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];
/// Devices every command may read.
const READ_DEVICES: &[&str] = &["/dev/random", "/dev/urandom"];

/// How deep the read grant follows symlinks at the levels it splits; a loop ends here.
const MAX_SPLIT_DEPTH: usize = 16;

fn confine(step: &'static str) -> impl Fn(String) -> SandboxError {
    move |detail| SandboxError::Confine { step, detail }
}

/// Which paths a command may write, read and not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathRules {
    /// Directories (or files) the command may write and read beneath.
    pub write: Vec<PathBuf>,
    /// Paths the command may read beneath, except where hidden (e.g. `CARGO_HOME`).
    pub read: Vec<PathBuf>,
    /// Paths nothing may read: the broad read grant of `/` skips them.
    pub hide: Vec<PathBuf>,
    /// Files mounted over others in the command's own mount namespace (`(source,
    /// target)`): a sanitized copy seen in place of a file it may not read. Best effort:
    /// where the command gets no user namespace the target simply stays hidden.
    pub mounts: Vec<(PathBuf, PathBuf)>,
}

/// Everything one worktree's commands are confined with, built once in grove's process.
#[derive(Debug)]
pub(super) struct Confinement {
    filesystem: RulesetCreated,
    /// `None` where the kernel has no Landlock scopes (ABI 6).
    scopes: Option<RulesetCreated>,
    filter: Arc<BpfProgram>,
    policy: SandboxPolicy,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    mounts: Arc<Vec<(CString, CString)>>,
}

impl Confinement {
    /// Builds the rulesets and the filter for `rules` under `policy`.
    ///
    /// The paths are resolved now: a path made later under a granted directory is covered,
    /// a new entry of a directory split around a hidden path is not (it stays unreadable).
    pub(super) fn prepare(rules: &PathRules, policy: SandboxPolicy) -> Result<Self, SandboxError> {
        let uid = geteuid();
        let gid = getegid();
        Ok(Self {
            filesystem: filesystem_ruleset(rules)?,
            scopes: scopes_ruleset(),
            filter: Arc::new(syscall_filter(policy.allow_network)?),
            policy,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            mounts: Arc::new(
                rules
                    .mounts
                    .iter()
                    .filter_map(|(source, target)| Some((c_path(source)?, c_path(target)?)))
                    .collect(),
            ),
        })
    }

    /// The steps one command's process takes before `exec`, joining `cgroup_procs` (the
    /// open `cgroup.procs` of its cgroups) first.
    pub(super) fn steps(&self, cgroup_procs: Vec<OwnedFd>) -> Result<ChildSteps, SandboxError> {
        let duplicate = |ruleset: &RulesetCreated| {
            ruleset
                .try_clone()
                .map_err(|error| confine("duplicating the Landlock ruleset")(error.to_string()))
        };
        Ok(ChildSteps {
            cgroup_procs,
            filesystem: Some(duplicate(&self.filesystem)?),
            scopes: self.scopes.as_ref().map(duplicate).transpose()?,
            filter: Arc::clone(&self.filter),
            policy: self.policy,
            uid_map: self.uid_map.clone(),
            gid_map: self.gid_map.clone(),
            mounts: Arc::clone(&self.mounts),
            join: None,
        })
    }
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).ok()
}

/// What one command's process does between `fork` and `exec`, on data prepared before the
/// fork: system calls only, no allocation, no lock (another thread of grove may have held
/// one at the fork, and the child is a copy of that moment).
pub(super) struct ChildSteps {
    cgroup_procs: Vec<OwnedFd>,
    filesystem: Option<RulesetCreated>,
    scopes: Option<RulesetCreated>,
    filter: Arc<BpfProgram>,
    policy: SandboxPolicy,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    mounts: Arc<Vec<(CString, CString)>>,
    /// The copy-on-write tree's namespaces to join instead of a user namespace of its own.
    join: Option<Entry>,
}

impl ChildSteps {
    /// The same steps, joining a copy-on-write tree's user and mount namespaces (see
    /// `tree::namespace`) where they would have entered a user namespace of their own.
    pub(super) fn joining(mut self, entry: Entry) -> Self {
        self.join = Some(entry);
        self
    }
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

impl ChildSteps {
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
        let own_namespace = match &self.join {
            Some(entry) => match entry.join() {
                Ok(()) => true,
                Err((step, errno)) => refuse(step, errno),
            },
            None => self.enter_user_namespace(),
        };
        if own_namespace {
            self.mount_sanitized_copies();
        }
        self.lower_limits(own_namespace);
        match self.filesystem.take().map(RulesetCreated::restrict_self) {
            Some(Ok(status)) if status.ruleset == RulesetStatus::FullyEnforced => {}
            Some(Ok(_)) => refuse("enforcing the Landlock ruleset in full", Errno::ENOTSUP),
            Some(Err(error)) => refuse("enforcing the Landlock ruleset", errno_of(&error)),
            None => refuse("enforcing the Landlock ruleset", Errno::EBADF),
        }
        if let Some(Err(error)) = self.scopes.take().map(RulesetCreated::restrict_self) {
            refuse("enforcing the Landlock scopes", errno_of(&error));
        }
        if let Err(error) = seccompiler::apply_filter(&self.filter) {
            refuse("installing the seccomp filter", errno_of(&error));
        }
    }

    /// Moves this process into a new user namespace that maps only its own user and group.
    ///
    /// It keeps the same files and owners, but drops every capability over the rest of
    /// the system (raw devices, `/proc/kcore`, other users' files), and makes the kernel
    /// count `RLIMIT_NPROC` for this namespace alone, even for root. Best effort: where
    /// user namespaces are not allowed the other layers still hold, and the process limit
    /// then applies only to non-root users.
    fn enter_user_namespace(&self) -> bool {
        unshare(CloneFlags::CLONE_NEWUSER).is_ok()
            && write_proc_file(c"/proc/self/setgroups", b"deny")
            && write_proc_file(c"/proc/self/uid_map", &self.uid_map)
            && write_proc_file(c"/proc/self/gid_map", &self.gid_map)
    }

    /// Mounts each sanitized copy over the file it stands for, in a mount namespace of
    /// this process's own (so nothing outside sees it). Best effort: a target that stays
    /// as it is stays hidden by the Landlock rules, so nothing is read that must not be.
    #[allow(unsafe_code)]
    fn mount_sanitized_copies(&self) {
        if self.mounts.is_empty() || unshare(CloneFlags::CLONE_NEWNS).is_err() {
            return;
        }
        // SAFETY: mount(2) on C strings built before the fork; no allocation.
        unsafe {
            let none = std::ptr::null();
            // Private: the mounts must not propagate back to grove's namespace.
            libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            for (source, target) in self.mounts.iter() {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                );
            }
        }
    }

    fn lower_limits(&self, own_namespace: bool) {
        lower_limit(Resource::RLIMIT_FSIZE, self.policy.max_file_bytes);
        lower_limit(Resource::RLIMIT_CORE, 0);
        // Outside its own namespace RLIMIT_NPROC counts all of the user's processes, so a
        // low value would break a busy desktop; it is then left as it is.
        if own_namespace {
            lower_limit(Resource::RLIMIT_NPROC, self.policy.max_processes);
        }
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

fn filesystem_ruleset(rules: &PathRules) -> Result<RulesetCreated, SandboxError> {
    let read = AccessFs::from_read(FS_ABI);
    let all = AccessFs::from_all(FS_ABI);
    // Creating device nodes would reopen what the read grant hides (a raw disk).
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);

    let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    let mut readable = Vec::new();
    grant_read_except(Path::new("/"), &rules.hide, &mut readable, 0);
    for path in &rules.read {
        // An explicit grant beats a hidden ancestor; what is hidden beneath it stays so.
        let beneath: Vec<PathBuf> = rules
            .hide
            .iter()
            .filter(|secret| secret.starts_with(path) && *secret != path)
            .cloned()
            .collect();
        grant_read_except(path, &beneath, &mut readable, 0);
    }
    grants.extend(readable.into_iter().map(|path| (path, read)));
    grants.extend(rules.write.iter().map(|path| (path.clone(), write)));
    grants.extend(OPEN_DEVICES.iter().map(|dev| {
        (
            PathBuf::from(dev),
            read | AccessFs::WriteFile | AccessFs::Truncate,
        )
    }));
    grants.extend(READ_DEVICES.iter().map(|dev| (PathBuf::from(dev), read)));

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .and_then(|ruleset| ruleset.create())
        .map_err(|error| unsupported_landlock(&error))?;
    for (path, access) in grants {
        let Ok(meta) = std::fs::metadata(&path) else {
            // A path that vanished meanwhile grants nothing; skipping it only denies more.
            continue;
        };
        let access = if meta.is_dir() {
            access
        } else {
            access & AccessFs::from_file(FS_ABI)
        };
        let Ok(fd) = PathFd::new(&path) else {
            continue;
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|error| {
                confine("adding a Landlock rule")(format!("{}: {error}", path.display()))
            })?;
    }
    Ok(ruleset)
}

fn unsupported_landlock(error: &dyn std::fmt::Display) -> SandboxError {
    SandboxError::Unsupported {
        what: "Landlock filesystem confinement",
        reason: format!(
            "{error} (grove needs Landlock ABI {} or later: Linux 6.2+, with `landlock` in \
             the kernel's `lsm=` list)",
            FS_ABI as i32
        ),
    }
}

/// Collects the paths to grant read on so that everything beneath `path` is readable
/// except the `hidden` paths: a directory with nothing hidden beneath it is granted
/// whole; one with a hidden path beneath it is split into its entries.
///
/// Landlock rules are inherited by everything beneath them and can only add rights, so
/// a hidden path's parent directories are never granted as a whole (listing them fails;
/// opening their other entries works).
fn grant_read_except(path: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>, depth: usize) {
    if depth > MAX_SPLIT_DEPTH || hidden.iter().any(|secret| path.starts_with(secret)) {
        return;
    }
    if !hidden.iter().any(|secret| secret.starts_with(path)) {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        let child = entry.path();
        let is_link = entry.file_type().is_ok_and(|kind| kind.is_symlink());
        if is_link {
            // A link at a split level is granted as its target, which is checked too:
            // `~/keys -> ~/.ssh` must not reopen what is hidden.
            if let Ok(target) = child.canonicalize() {
                grant_read_except(&target, hidden, out, depth + 1);
            }
        } else {
            grant_read_except(&child, hidden, out, depth + 1);
        }
    }
}

/// Landlock scopes (ABI 6): no signals to processes outside the sandbox (grove itself),
/// no connecting to abstract UNIX sockets made outside it. `None` on older kernels: the
/// filesystem and seccomp layers do not depend on them.
fn scopes_ruleset() -> Option<RulesetCreated> {
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::from_all(ABI::V6))
        .and_then(|ruleset| ruleset.create())
        .ok()
}

/// Bit set on x32 system call numbers on x86_64; the same calls are denied under it.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// The seccomp filter: every call allowed except those listed, which fail with EPERM.
fn syscall_filter(allow_network: bool) -> Result<BpfProgram, SandboxError> {
    let step = "building the seccomp filter";
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|error| {
        SandboxError::Unsupported {
            what: "the seccomp filter",
            reason: error.to_string(),
        }
    })?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always_denied = [
        // Leaving the process group would escape the kill at the end.
        libc::SYS_setsid,
        libc::SYS_setpgid,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        // The kernel keyring may hold the user's credentials.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_unshare,
        libc::SYS_setns,
        // io_uring can open sockets and files without the calls filtered here.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    for call in always_denied {
        rules.insert(call, Vec::new());
    }
    if !allow_network {
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(|error| confine(step)(error.to_string()))?;
        let rule =
            SeccompRule::new(vec![not_unix]).map_err(|error| confine(step)(error.to_string()))?;
        rules.insert(libc::SYS_socket, vec![rule]);
    }
    if arch == TargetArch::x86_64 {
        // x32 calls carry their own numbers; grove's commands never need them.
        let mut x32: Vec<i64> = rules.keys().map(|call| call | X32_SYSCALL_BIT).collect();
        x32.push(libc::SYS_socket | X32_SYSCALL_BIT);
        for call in x32 {
            rules.insert(call, Vec::new());
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|error| confine(step)(error.to_string()))?;
    filter
        .try_into()
        .map_err(|error: seccompiler::BackendError| confine(step)(error.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_fails_in_the_child_refuses_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let rules = PathRules {
            write: vec![root.clone()],
            read: Vec::new(),
            hide: Vec::new(),
            mounts: Vec::new(),
        };
        let confinement = match Confinement::prepare(&rules, SandboxPolicy::default()) {
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

    #[test]
    fn the_read_grant_splits_only_the_directories_above_a_hidden_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for path in ["home/.ssh", "home/projects/app", "usr/lib"] {
            std::fs::create_dir_all(root.join(path)).unwrap();
        }
        std::fs::write(root.join("home/notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("home/.ssh"), root.join("home/keys")).unwrap();
        std::os::unix::fs::symlink(root.join("usr"), root.join("home/usr-link")).unwrap();

        let mut granted = Vec::new();
        grant_read_except(&root, &[root.join("home/.ssh")], &mut granted, 0);
        granted.sort();
        assert_eq!(
            granted,
            vec![
                root.join("home/notes.txt"),
                root.join("home/projects"),
                root.join("usr"),
                root.join("usr"),
            ],
            "siblings are granted whole, the hidden path and a link to it never, a link \
             elsewhere as its target"
        );
    }
}
