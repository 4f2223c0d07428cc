//! The Linux confinement: user namespace, rlimits, Landlock, seccomp, then `exec`.
//!
//! This file owns the kernel calls of the launcher. Every step either succeeds or the
//! launcher refuses: it must never `exec` the command after a step failed, and never
//! accept a Landlock filesystem ruleset the kernel enforces only in part.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::libc;
use nix::sched::{CloneFlags, unshare};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use nix::unistd::{getegid, geteuid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::{LaunchSpec, SandboxError};

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

/// Confines this (single-threaded) process as `spec` says and `exec`s its command;
/// returns only the reason it did not.
pub(super) fn confine_and_exec(spec: &LaunchSpec) -> SandboxError {
    if let Err(error) = confine_self(spec) {
        return error;
    }
    let (program, args) = match spec.command.split_first() {
        Some(split) => split,
        None => return SandboxError::Usage("no command after `--`".into()),
    };
    let source = std::process::Command::new(program).args(args).exec();
    SandboxError::Exec {
        program: PathBuf::from(program),
        source,
    }
}

fn confine_self(spec: &LaunchSpec) -> Result<(), SandboxError> {
    if let Some(cgroup) = &spec.cgroup {
        // "0" moves the writer itself; its children are born inside.
        std::fs::write(cgroup.join("cgroup.procs"), "0").map_err(|error| {
            SandboxError::Confine {
                step: "joining the command's pids cgroup",
                detail: format!("{}: {error}", cgroup.display()),
            }
        })?;
    }
    // Before Landlock: writing the id maps is a file write the ruleset would refuse.
    let own_namespace = enter_user_namespace().is_ok();
    set_limits(spec, own_namespace)?;
    restrict_filesystem(spec)?;
    restrict_scopes()?;
    let filter = syscall_filter(spec.policy.allow_network)?;
    seccompiler::apply_filter(&filter).map_err(|error| SandboxError::Confine {
        step: "installing the seccomp filter",
        detail: error.to_string(),
    })
}

/// Moves this process into a new user namespace that maps only its own user and group.
///
/// It keeps the same files and owners, but drops every capability over the rest of the
/// system (raw devices, `/proc/kcore`, other users' files), and makes the kernel count
/// `RLIMIT_NPROC` for this namespace alone, even for root. Best effort: where user
/// namespaces are not allowed the other layers still hold, and the process limit then
/// applies only to non-root users.
fn enter_user_namespace() -> Result<(), SandboxError> {
    let uid = geteuid();
    let gid = getegid();
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|errno| SandboxError::Confine {
        step: "entering a user namespace",
        detail: errno.to_string(),
    })?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|error| SandboxError::Confine {
            step: "mapping the user namespace",
            detail: format!("{file}: {error}"),
        })
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

fn set_limits(spec: &LaunchSpec, own_namespace: bool) -> Result<(), SandboxError> {
    let lower = |resource: Resource, name: &'static str, wanted: u64| {
        let (soft, hard) = getrlimit(resource).map_err(|errno| SandboxError::Confine {
            step: "reading a resource limit",
            detail: format!("{name}: {errno}"),
        })?;
        let hard = hard.min(wanted);
        setrlimit(resource, soft.min(hard), hard).map_err(|errno| SandboxError::Confine {
            step: "setting a resource limit",
            detail: format!("{name}: {errno}"),
        })
    };
    lower(
        Resource::RLIMIT_FSIZE,
        "RLIMIT_FSIZE",
        spec.policy.max_file_bytes,
    )?;
    lower(Resource::RLIMIT_CORE, "RLIMIT_CORE", 0)?;
    // Outside its own namespace RLIMIT_NPROC counts all of the user's processes, so a
    // low value would break a busy desktop; it is then left as it is.
    if own_namespace {
        lower(
            Resource::RLIMIT_NPROC,
            "RLIMIT_NPROC",
            spec.policy.max_processes,
        )?;
    }
    Ok(())
}

fn restrict_filesystem(spec: &LaunchSpec) -> Result<(), SandboxError> {
    let read = AccessFs::from_read(FS_ABI);
    let all = AccessFs::from_all(FS_ABI);
    // Creating device nodes would reopen what the read grant hides (a raw disk).
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);

    let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    let mut readable = Vec::new();
    grant_read_except(Path::new("/"), &spec.hide, &mut readable, 0);
    for path in &spec.read {
        // An explicit grant beats a hidden ancestor; what is hidden beneath it stays so.
        let beneath: Vec<PathBuf> = spec
            .hide
            .iter()
            .filter(|secret| secret.starts_with(path) && *secret != path)
            .cloned()
            .collect();
        grant_read_except(path, &beneath, &mut readable, 0);
    }
    rules.extend(readable.into_iter().map(|path| (path, read)));
    rules.extend(spec.write.iter().map(|path| (path.clone(), write)));
    rules.extend(OPEN_DEVICES.iter().map(|dev| {
        (
            PathBuf::from(dev),
            read | AccessFs::WriteFile | AccessFs::Truncate,
        )
    }));
    rules.extend(READ_DEVICES.iter().map(|dev| (PathBuf::from(dev), read)));

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|error| confine("preparing the Landlock ruleset")(error.to_string()))?
        .create()
        .map_err(|error| confine("creating the Landlock ruleset")(error.to_string()))?;
    for (path, access) in rules {
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
    let status = ruleset
        .restrict_self()
        .map_err(|error| confine("enforcing the Landlock ruleset")(error.to_string()))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        RulesetStatus::PartiallyEnforced | RulesetStatus::NotEnforced => {
            Err(SandboxError::Unsupported {
                what: "Landlock filesystem confinement",
                reason: format!(
                    "the kernel enforces it {} (grove needs Landlock ABI {} or later; the \
                     kernel reports {:?})",
                    if status.ruleset == RulesetStatus::NotEnforced {
                        "not at all"
                    } else {
                        "only in part"
                    },
                    FS_ABI as i32,
                    status.landlock
                ),
            })
        }
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
/// no connecting to abstract UNIX sockets made outside it. Best effort: older kernels
/// lack them, and the filesystem and seccomp layers do not depend on them.
fn restrict_scopes() -> Result<(), SandboxError> {
    let scopes = Scope::from_all(ABI::V6);
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .scope(scopes)
        .and_then(|ruleset| ruleset.create());
    match created {
        Ok(ruleset) => ruleset
            .restrict_self()
            .map(|_| ())
            .map_err(|error| confine("enforcing the Landlock scopes")(error.to_string())),
        // Nothing to enforce on this kernel.
        Err(_) => Ok(()),
    }
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

/// Checks that the kernel can enforce Landlock filesystem ABI 3 and that the seccomp
/// filter compiles for this architecture, without restricting this process.
pub(super) fn probe() -> Result<(), SandboxError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(FS_ABI))
        .and_then(|ruleset| ruleset.create())
        .map_err(|error| SandboxError::Unsupported {
            what: "Landlock filesystem confinement",
            reason: format!(
                "{error} (grove needs Landlock ABI {} or later: Linux 6.2+, with `landlock` \
                 in the kernel's `lsm=` list)",
                FS_ABI as i32
            ),
        })?;
    syscall_filter(false).map(|_| ())
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
