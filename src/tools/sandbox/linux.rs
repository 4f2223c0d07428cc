//! The Linux confinement of one worktree's commands, prepared in grove's process.
//!
//! This file owns what the kernel is handed. Everything that allocates, reads
//! directories or can fail in an interesting way (the Landlock ruleset with its path
//! rules, the seccomp program, the user-namespace id maps, the mounts) is built
//! beforehand, in grove, once per worktree ([`Confinement::prepare`]). The forked child,
//! a copy of a multi-threaded process, then only makes system calls on that data (the
//! `child` module's steps). The filesystem ruleset is created with Landlock ABI 3 as a
//! hard requirement, so the kernel enforces it in full or grove refuses before any
//! command.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use nix::libc;
use nix::unistd::{getegid, geteuid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::child::{ChildGrants, ChildSteps, NetworkPlan, SocketCovers};
use super::view::ViewPlan;
pub(super) use super::view::c_path;
use super::{SandboxError, SandboxPolicy};

/// The Landlock ABI whose filesystem rights must be enforced in full: 3 adds truncation to
/// 2's cross-directory link and rename (`REFER`), so neither a hard link, an `mv`, nor a
/// truncation reaches outside the writable roots.
const FS_ABI: ABI = ABI::V3;

/// Devices every command may read and write (`> /dev/null` truncates, hence the right).
const OPEN_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];
/// Devices every command may read.
const READ_DEVICES: &[&str] = &["/dev/random", "/dev/urandom"];

/// How deep the read grant follows symlinks at the levels it splits; a loop ends here.
const MAX_SPLIT_DEPTH: usize = 16;

fn confine(step: &'static str) -> impl Fn(String) -> SandboxError {
    move |detail| SandboxError::Confine { step, detail }
}

/// Which paths a command may write and read: Landlock's wall, from the same allow-list
/// as the view (a second wall behind it, the only one without namespaces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PathRules {
    /// Directories (or files) the command may write and read beneath.
    pub write: Vec<PathBuf>,
    /// Paths the command may read beneath, except where hidden.
    pub read: Vec<PathBuf>,
    /// Paths beneath a read grant that nothing may read.
    pub hide: Vec<PathBuf>,
}

/// Everything one worktree's commands are confined with, built once in grove's process.
#[derive(Debug)]
pub(super) struct Confinement {
    filesystem: RulesetCreated,
    filter: Arc<BpfProgram>,
    policy: SandboxPolicy,
    network: NetworkPlan,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    view: Option<Arc<ViewPlan>>,
}

impl Confinement {
    /// Builds the rulesets and the filter for `rules` under `policy`.
    ///
    /// The paths are resolved now: a path made later under a granted directory is covered,
    /// a new entry of a directory split around a hidden path is not (it stays unreadable).
    pub(super) fn prepare(
        rules: &PathRules,
        view: Option<ViewPlan>,
        policy: SandboxPolicy,
    ) -> Result<Self, SandboxError> {
        let uid = geteuid();
        let gid = getegid();
        let network = match (policy.allow_network, policy.own_loopback) {
            (true, true) => NetworkPlan::Host,
            (false, true) => NetworkPlan::OwnLoopback,
            (_, false) => NetworkPlan::Refused,
        };
        Ok(Self {
            filesystem: filesystem_ruleset(rules)?,
            filter: Arc::new(syscall_filter(network, NetworkAccess::of(policy))?),
            policy,
            network,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            // Without namespaces nothing can be mounted: Landlock alone draws the line.
            view: view
                .filter(|_| network != NetworkPlan::Refused)
                .map(Arc::new),
        })
    }

    /// The file system its commands see, where they get one.
    pub(super) fn view(&self) -> Option<&ViewPlan> {
        self.view.as_deref()
    }

    /// The steps one command's process takes before `exec`, joining `cgroup_procs` (the
    /// open `cgroup.procs` of its cgroups) first.
    pub(super) fn steps(&self, cgroup_procs: Vec<OwnedFd>) -> Result<ChildSteps, SandboxError> {
        let duplicate = |ruleset: &RulesetCreated| {
            ruleset
                .try_clone()
                .map_err(|error| confine("duplicating the Landlock ruleset")(error.to_string()))
        };
        // A second descriptor of the same kernel ruleset, for what the command mounts
        // itself (its `/proc` exists only once its pid namespace does) to be granted in
        // the child.
        let all = AccessFs::from_all(FS_ABI);
        let own_mounts =
            Option::<OwnedFd>::from(duplicate(&self.filesystem)?).map(|ruleset| ChildGrants {
                ruleset,
                read: AccessFs::from_read(FS_ABI).bits(),
                list: BitFlags::from(AccessFs::ReadDir).bits(),
                write: (all & !(AccessFs::MakeChar | AccessFs::MakeBlock)).bits(),
            });
        Ok(ChildSteps {
            cgroup_procs,
            filesystem: Some(duplicate(&self.filesystem)?),
            own_mounts,
            filter: Arc::clone(&self.filter),
            policy: self.policy,
            network: self.network,
            uid_map: self.uid_map.clone(),
            gid_map: self.gid_map.clone(),
            root: geteuid().is_root(),
            view: self.view.clone(),
            cwd: None,
            view_built: false,
            covers: SocketCovers::default(),
            join: None,
        })
    }
}

fn filesystem_ruleset(rules: &PathRules) -> Result<RulesetCreated, SandboxError> {
    let read = AccessFs::from_read(FS_ABI);
    let all = AccessFs::from_all(FS_ABI);
    // Creating device nodes would reopen what the read grant hides (a raw disk).
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);

    let mut grants: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    let mut readable = Vec::new();
    for path in &rules.read {
        // What is hidden beneath a grant stays so.
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

    // One layer: the scopes (ABI 6, where the kernel has them) in the same ruleset. A
    // layer of their own would handle no file access yet deny every rename and link
    // across directories (Landlock denies `REFER` in any layer that does not grant it),
    // and rustc, git and pip rename their output into place.
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map(|ruleset| ruleset.set_compatibility(CompatLevel::BestEffort))
        .and_then(|ruleset| ruleset.scope(Scope::from_all(ABI::V6)))
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

/// Bit set on x32 system call numbers on x86_64; the same calls are denied under it.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// Socket families a command with a network namespace of its own may open: there they
/// reach its own loopback and nothing else.
const OWN_NAMESPACE_FAMILIES: &[libc::c_int] = &[
    libc::AF_UNIX,
    libc::AF_INET,
    libc::AF_INET6,
    libc::AF_NETLINK,
];

/// Socket families a command without namespaces may open with the network allowed: the
/// internet, never a Unix socket (host services could not be covered).
const HOST_INTERNET_FAMILIES: &[libc::c_int] = &[libc::AF_INET, libc::AF_INET6];

/// Whether commands may reach the network beyond their own loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NetworkAccess {
    /// The host's network or, without namespaces, the internet families
    /// (`--allow-network`).
    Allowed,
    /// No network but the command's own loopback, or none at all without namespaces.
    Denied,
}

impl NetworkAccess {
    fn of(policy: SandboxPolicy) -> Self {
        if policy.allow_network {
            Self::Allowed
        } else {
            Self::Denied
        }
    }
}

/// The seccomp filter: every call allowed except those listed, which fail with EPERM.
///
/// `socket` is left alone on the host's network (`--allow-network`, with the host's
/// sockets covered by mounts), limited to [`OWN_NAMESPACE_FAMILIES`] in a network
/// namespace of the command's own, and without namespaces (`--sandbox no-loopback`)
/// refused for every family but the internet ones when the network is allowed;
/// `socketpair` is never refused.
fn syscall_filter(network: NetworkPlan, access: NetworkAccess) -> Result<BpfProgram, SandboxError> {
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
        // Mounts would undo the covers over the host's sockets and the shared
        // directories' read-only binds (the user namespace allows them).
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        // io_uring can open sockets and files without the calls filtered here.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    for call in always_denied {
        rules.insert(call, Vec::new());
    }
    let allowed_families = match (network, access) {
        (NetworkPlan::Host, _) => None,
        (NetworkPlan::OwnLoopback, _) => Some(OWN_NAMESPACE_FAMILIES),
        (NetworkPlan::Refused, NetworkAccess::Allowed) => Some(HOST_INTERNET_FAMILIES),
        (NetworkPlan::Refused, NetworkAccess::Denied) => Some(&[][..]),
    };
    if let Some(families) = allowed_families {
        // One rule whose conditions all hold (the family is none of the allowed ones)
        // refuses the call; no condition at all refuses every family.
        let conditions = families
            .iter()
            .map(|family| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, *family as u64)
                    .map_err(|error| confine(step)(error.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refused = if conditions.is_empty() {
            Vec::new()
        } else {
            vec![SeccompRule::new(conditions).map_err(|error| confine(step)(error.to_string()))?]
        };
        rules.insert(libc::SYS_socket, refused);
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
