//! The cgroups of sandboxed commands: a process cap and a memory cap the kernel enforces
//! even for root, and the kill of whatever a dead grove left running.
//!
//! This file owns creating, reusing, emptying and removing grove's cgroups beneath this
//! process's own cgroup of each writable hierarchy (cgroup v1's `pids` and `memory`
//! controllers, or v2 where the parent enables them for its children). It must never
//! touch a cgroup grove did not make (names `grove-<pid>-<n>`), nor kill a process that
//! is not charged to one of those, or marked as one of grove's commands.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// The variable every sandboxed command carries: `<grove pid>:<its start time>`, so the
/// processes of a grove that died (`kill -9`) can be found and killed by the next one.
pub const OWNER_VAR: &str = "GROVE_SANDBOX_OWNER";

/// The controllers grove limits, each in the hierarchy where it is usable.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hierarchy {
    /// This process's cgroup directory in it.
    dir: PathBuf,
    version: CgroupVersion,
    pids: bool,
    memory: bool,
}

/// Which cgroup interface a hierarchy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CgroupVersion {
    /// cgroup v2: one tree for every controller, `memory.max`, and `cgroup.kill` to
    /// kill every process at once.
    V2,
    /// cgroup v1: one tree per controller, `memory.limit_in_bytes`, and processes
    /// killed one by one.
    V1,
}

/// The limits written into each new cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub max_processes: u64,
    pub max_memory_bytes: u64,
}

/// One cgroup of one hierarchy.
#[derive(Debug)]
struct Cgroup {
    dir: PathBuf,
    version: CgroupVersion,
    pids: bool,
}

impl Cgroup {
    fn create(hierarchy: &Hierarchy, limits: Limits) -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = hierarchy.dir.join(format!(
            "grove-{}-{n}{}",
            std::process::id(),
            pid_namespace_suffix()
        ));
        std::fs::create_dir(&dir).ok()?;
        let cgroup = Self {
            dir,
            version: hierarchy.version,
            pids: hierarchy.pids,
        };
        let write =
            |file: &str, value: u64| std::fs::write(cgroup.dir.join(file), value.to_string());
        if hierarchy.pids {
            write("pids.max", limits.max_processes).ok()?;
        }
        if hierarchy.memory {
            if hierarchy.version == CgroupVersion::V2 {
                write("memory.max", limits.max_memory_bytes).ok()?;
                // Swap would let a command go on far past the cap, slowly; best effort.
                let _ = write("memory.swap.max", 0);
            } else {
                write("memory.limit_in_bytes", limits.max_memory_bytes).ok()?;
                let _ = write("memory.memsw.limit_in_bytes", limits.max_memory_bytes);
            }
        }
        Some(cgroup)
    }

    /// True when no process is charged to it (a zombie nobody reaped still is).
    fn is_empty(&self) -> bool {
        if self.pids {
            return std::fs::read_to_string(self.dir.join("pids.current"))
                .is_ok_and(|text| text.trim() == "0");
        }
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .is_ok_and(|text| text.trim().is_empty())
    }

    /// Kills every process charged to it.
    fn kill_all(&self) {
        kill_cgroup(&self.dir, self.version);
    }
}

impl Drop for Cgroup {
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

/// Kills every process of the cgroup at `dir`: at once with `cgroup.kill` (v2), else one
/// by one from `cgroup.procs`, again until none is left (a process may fork meanwhile).
fn kill_cgroup(dir: &Path, version: CgroupVersion) {
    if version == CgroupVersion::V2 && std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    for _ in 0..50 {
        let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// The cgroups of one command: one per hierarchy in use.
#[derive(Debug, Default)]
pub(super) struct CommandCgroups {
    groups: Vec<Cgroup>,
}

impl CommandCgroups {
    /// The `cgroup.procs` of each, open for the command's process to join with.
    pub(super) fn open_procs(&self) -> Result<Vec<OwnedFd>, (PathBuf, std::io::Error)> {
        self.groups
            .iter()
            .map(|cgroup| {
                let path = cgroup.dir.join("cgroup.procs");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map(OwnedFd::from)
                    .map_err(|error| (path, error))
            })
            .collect()
    }

    /// Kills whatever is still charged to them (background processes of a finished
    /// command that left its process group behind in no other way).
    pub(super) fn kill_all(&self) {
        for cgroup in &self.groups {
            cgroup.kill_all();
        }
    }

    fn is_empty(&self) -> bool {
        self.groups.iter().all(Cgroup::is_empty)
    }
}

/// The cgroups of one executor, reused: making and removing a cgroup costs milliseconds
/// each, more than the rest of the sandbox. Each set is used by one command at a time, and
/// reused only when nothing is charged to it any more.
#[derive(Debug, Default)]
pub(super) struct CgroupPool {
    hierarchies: Vec<Hierarchy>,
    limits: Option<Limits>,
    free: Mutex<Vec<CommandCgroups>>,
}

impl CgroupPool {
    /// A pool beneath this process's cgroups; first kills and removes what groves that
    /// are gone left behind.
    pub(super) fn new(limits: Limits) -> Self {
        let hierarchies = own_hierarchies();
        for hierarchy in &hierarchies {
            remove_stale_cgroups(&hierarchy.dir, hierarchy.version);
        }
        Self {
            hierarchies,
            limits: Some(limits),
            free: Mutex::default(),
        }
    }

    /// Whether commands get a memory cap (a memory controller grove may use is there).
    pub(super) fn caps_memory(&self) -> bool {
        self.hierarchies.iter().any(|hierarchy| hierarchy.memory)
    }

    pub(super) fn take(&self) -> CommandCgroups {
        let reused = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            // Another grove sweeping the same parent may have removed an idle one.
            .filter(|set| set.groups.iter().all(|cgroup| cgroup.dir.exists()));
        if let Some(set) = reused {
            return set;
        }
        let Some(limits) = self.limits else {
            return CommandCgroups::default();
        };
        CommandCgroups {
            groups: self
                .hierarchies
                .iter()
                .filter_map(|hierarchy| Cgroup::create(hierarchy, limits))
                .collect(),
        }
    }

    pub(super) fn give_back(&self, set: CommandCgroups) {
        if set.is_empty() {
            self.free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(set);
            return;
        }
        // Killed processes still charged to it (zombies not yet reaped): never reused,
        // removed in the background once the kernel lets go of it.
        tokio::spawn(async move {
            set.kill_all();
            for cgroup in &set.groups {
                for _ in 0..200 {
                    match std::fs::remove_dir(&cgroup.dir) {
                        Err(error) if error.raw_os_error() == Some(nix::libc::EBUSY) => {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                        _ => break,
                    }
                }
            }
        });
    }
}

/// The owner of a cgroup named `grove-<pid>-<n>`.
///
/// A name made in another pid namespace (`grove-<pid>-<n>.<namespace>`: a grove in a
/// container, or a remote host's exec-server on the same machine) has no owner this
/// process can see: its pid means nothing here, and its cgroups are never judged stale.
fn cgroup_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("grove-")?;
    let (pid, rest) = rest.split_once('-')?;
    let theirs = rest.split_once('.').map(|(_, namespace)| namespace);
    let ours = pid_namespace_suffix();
    if theirs.is_some_and(|theirs| Some(theirs) != ours.strip_prefix('.')) {
        return None;
    }
    pid.parse::<u32>().ok()
}

/// `.<inode>` of this process's pid namespace, which a cgroup's name carries so that a
/// grove in another one leaves it alone; empty when it cannot be read.
/// Read once: a process never changes its pid namespace, and every cgroup name and every
/// process a sweep looks at asks.
fn pid_namespace_suffix() -> &'static str {
    static SUFFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SUFFIX.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|link| {
                let link = link.to_string_lossy().into_owned();
                let inode = link.strip_prefix("pid:[")?.strip_suffix(']')?;
                Some(format!(".{inode}"))
            })
            .unwrap_or_default()
    })
}

/// Kills the processes of, then removes, the cgroups of grove processes that are gone: a
/// grove killed with `kill -9` leaves its commands' background processes in them.
pub(super) fn remove_stale_cgroups(parent: &Path, version: CgroupVersion) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(pid) = name.to_str().and_then(cgroup_owner)
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            if entry.path().join("cgroup.procs").exists() {
                kill_cgroup(&entry.path(), version);
            }
            // Fails, harmlessly, while a process is still charged to it.
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

/// This process's cgroup directories where grove may create children limiting processes
/// or memory.
fn own_hierarchies() -> Vec<Hierarchy> {
    let Ok(membership) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let mut found: Vec<Hierarchy> = Vec::new();
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        let listed: Vec<&str> = controllers.split(',').collect();
        let hierarchy = if controllers.is_empty() {
            // cgroup v2: only what the parent enables for its children.
            let dir = Path::new("/sys/fs/cgroup").join(relative);
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let has = |name: &str| enabled.split_whitespace().any(|c| c == name);
            Hierarchy {
                pids: has("pids"),
                memory: has("memory"),
                dir,
                version: CgroupVersion::V2,
            }
        } else if listed.contains(&"pids") {
            Hierarchy {
                dir: Path::new("/sys/fs/cgroup/pids").join(relative),
                version: CgroupVersion::V1,
                pids: true,
                memory: false,
            }
        } else if listed.contains(&"memory") {
            Hierarchy {
                dir: Path::new("/sys/fs/cgroup/memory").join(relative),
                version: CgroupVersion::V1,
                pids: false,
                memory: true,
            }
        } else {
            continue;
        };
        if (hierarchy.pids || hierarchy.memory)
            && hierarchy.dir.join("cgroup.procs").exists()
            && writable_dir(&hierarchy.dir)
        {
            found.push(hierarchy);
        }
    }
    // A v2 tree beside v1 controllers: each controller is limited once.
    let v1 = |h: &&Hierarchy| h.version == CgroupVersion::V1;
    let v1_pids = found.iter().filter(v1).any(|h| h.pids);
    let v1_memory = found.iter().filter(v1).any(|h| h.memory);
    for hierarchy in found.iter_mut().filter(|h| h.version == CgroupVersion::V2) {
        hierarchy.pids &= !v1_pids;
        hierarchy.memory &= !v1_memory;
    }
    found.retain(|h| h.pids || h.memory);
    found
}

fn writable_dir(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// This process's `<pid>:<start time>` and its pid namespace (`.<inode>`), the value of
/// [`OWNER_VAR`] in its commands.
pub(super) fn owner_mark() -> String {
    let pid = std::process::id();
    format!(
        "{pid}:{}{}",
        start_time(pid).unwrap_or_default(),
        pid_namespace_suffix()
    )
}

/// A process's start time in clock ticks since boot (field 22 of its `stat`).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// True when the grove of an owner mark is still running (same pid, same start time),
/// or when it is a grove of another pid namespace, which this one cannot judge.
pub(super) fn owner_alive(mark: &str) -> bool {
    let (mark, namespace) = match mark.split_once('.') {
        Some((mark, namespace)) => (mark, Some(namespace)),
        None => (mark, None),
    };
    if namespace.is_some_and(|theirs| Some(theirs) != pid_namespace_suffix().strip_prefix('.')) {
        return true;
    }
    let Some((pid, started)) = mark.split_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    start_time(pid).is_some_and(|now| now.to_string() == started)
}

/// Kills the process groups of commands whose grove is gone (found by their
/// [`OWNER_VAR`]); where cgroups are available [`CgroupPool::new`] has already killed
/// them, this finds them everywhere else. Returns how many processes it killed.
pub fn kill_orphaned_commands() -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let marker = format!("{OWNER_VAR}=");
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let mark = environ
            .split(|byte| *byte == 0)
            .filter_map(|var| std::str::from_utf8(var).ok())
            .find_map(|var| var.strip_prefix(marker.as_str()));
        let Some(mark) = mark else {
            continue;
        };
        if owner_alive(mark) {
            continue;
        }
        let pid = Pid::from_raw(pid);
        if let Ok(group) = nix::unistd::getpgid(Some(pid))
            && group.as_raw() > 1
        {
            let _ = killpg(group, Signal::SIGKILL);
        }
        let _ = kill(pid, Signal::SIGKILL);
        killed += 1;
    }
    killed
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_empty_cgroups_of_gone_grove_processes_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let own = format!("grove-{}-1", std::process::id());
        // Beyond the kernel's largest pid: no such process.
        let gone = "grove-4294967295-3";
        // The same gone pid, in this pid namespace (removed) and in another (kept: its
        // pid means nothing here).
        let gone_here = format!("grove-4294967295-4{}", pid_namespace_suffix());
        let elsewhere = "grove-4294967295-5.1";
        for name in [
            own.as_str(),
            gone,
            &gone_here,
            elsewhere,
            "grove-4294967294-1",
            "other-1",
        ] {
            std::fs::create_dir(parent.path().join(name)).unwrap();
        }
        std::fs::write(parent.path().join("grove-4294967294-1/busy"), "").unwrap();
        remove_stale_cgroups(parent.path(), CgroupVersion::V1);
        let mut left: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut expected = vec![
            own,
            elsewhere.to_owned(),
            "grove-4294967294-1".to_owned(),
            "other-1".to_owned(),
        ];
        expected.sort();
        assert_eq!(
            left, expected,
            "a gone process's empty cgroup is removed; this process's, a busy one, another \
             pid namespace's and others' stay"
        );
    }

    #[test]
    fn an_owner_mark_is_alive_only_for_the_same_process_started_at_the_same_time() {
        let mark = owner_mark();
        let here = pid_namespace_suffix();
        let (pid, started) = mark.split_once(':').unwrap();
        let started: u64 = started.trim_end_matches(here).parse().unwrap();
        assert_eq!(
            (
                owner_alive(&mark),
                owner_alive(&format!("{pid}:{}{here}", started + 1)),
                owner_alive("4294967295:1"),
                owner_alive(&format!("4294967295:1{here}")),
                owner_alive("4294967295:1.1"),
                owner_alive("junk"),
            ),
            (true, false, false, false, true, false),
            "a reused pid (other start time), a gone pid and junk are dead owners; a grove \
             of another pid namespace cannot be judged from here"
        );
    }
}
