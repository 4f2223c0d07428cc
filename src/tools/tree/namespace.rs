//! The namespaces of one copy-on-write tree, as a process about to `exec` joins them.
//!
//! This file owns the descriptors of a tree host's user and mount namespaces (opened in
//! grove, once, from `/proc/<host>/ns/{user,mnt}`) and the few system calls a forked
//! child makes with them: `setns` into the user namespace, then into the mount
//! namespace, then `chdir` to its working directory again (joining a mount namespace
//! resets it). It must never allocate or lock in the child, and never let a child `exec`
//! after a join failed: the command would run against the empty mount point outside.

use std::ffi::CString;
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};

/// The namespaces of a tree host, and the tree's paths on both sides of its mount.
#[derive(Debug)]
pub struct TreeNamespace {
    user: OwnedFd,
    mnt: OwnedFd,
    /// The tree's path inside the namespace: the worktree's path, where the overlay is
    /// mounted (what the model, its commands and git inside see).
    path: PathBuf,
    /// The same tree as grove's own process reaches it: `/proc/<host>/root/<path>`.
    grove_root: PathBuf,
    /// The overlay's upper directory: exactly what the tree's commands changed.
    upper: PathBuf,
}

/// Why a tree's namespaces cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// `/proc/<pid>/ns/<kind>` cannot be opened (the host died, or `/proc` is not
    /// mounted). Not retried: the tree is gone with its host.
    #[error("cannot open the tree host's {kind} namespace at {path}: {source}")]
    Open {
        kind: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TreeNamespace {
    /// Opens the user and mount namespaces of process `pid`, whose overlay is mounted at
    /// `path` with upper directory `upper`.
    pub fn of_process(pid: u32, path: &Path, upper: &Path) -> Result<Self, NamespaceError> {
        let open = |kind: &'static str| {
            let ns = PathBuf::from(format!("/proc/{pid}/ns/{kind}"));
            std::fs::File::open(&ns)
                .map(OwnedFd::from)
                .map_err(|source| NamespaceError::Open {
                    kind,
                    path: ns,
                    source,
                })
        };
        let relative = path.strip_prefix("/").unwrap_or(path);
        Ok(Self {
            user: open("user")?,
            mnt: open("mnt")?,
            path: path.to_path_buf(),
            grove_root: PathBuf::from(format!("/proc/{pid}/root")).join(relative),
            upper: upper.to_path_buf(),
        })
    }

    /// The tree's path as commands inside see it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tree's path as grove's own process reaches it.
    pub fn grove_root(&self) -> &Path {
        &self.grove_root
    }

    /// The overlay's upper directory.
    pub fn upper(&self) -> &Path {
        &self.upper
    }

    /// What a child about to `exec` in `cwd` (a path inside the tree's namespace) runs:
    /// prepared now, applied by [`Entry::join`] after the fork.
    pub fn entry(self: &std::sync::Arc<Self>, cwd: &Path) -> Option<Entry> {
        let cwd = CString::new(cwd.as_os_str().as_encoded_bytes()).ok()?;
        Some(Entry {
            namespace: std::sync::Arc::clone(self),
            cwd,
        })
    }
}

/// grove's own git in the tree: the process joins the tree's namespaces and starts in
/// `cwd` there.
impl crate::git::Enter for std::sync::Arc<TreeNamespace> {
    fn enter(&self, cwd: &Path, command: &mut std::process::Command) -> bool {
        let Some(entry) = self.entry(cwd) else {
            return false;
        };
        // The directory exists inside the tree; the join enters it there.
        command.current_dir("/");
        entry.at_exec(command);
        true
    }
}

/// One child's join of a tree's namespaces, prepared before the fork.
#[derive(Debug)]
pub struct Entry {
    namespace: std::sync::Arc<TreeNamespace>,
    cwd: CString,
}

impl Entry {
    /// Joins the tree host's user, then mount namespace (in a private copy), then enters
    /// the working directory again. Async-signal-safe: system calls on data made before the fork.
    ///
    /// The user namespace comes first: its owner (grove's user) holds every capability
    /// in it, which joining the mount namespace it owns requires.
    pub fn join(&self) -> Result<(), (&'static str, Errno)> {
        setns(self.namespace.user.as_fd(), CloneFlags::CLONE_NEWUSER)
            .map_err(|errno| ("joining the tree's user namespace", errno))?;
        setns(self.namespace.mnt.as_fd(), CloneFlags::CLONE_NEWNS)
            .map_err(|errno| ("joining the tree's mount namespace", errno))?;
        // A copy of its own: the process holds every capability over the tree's mount
        // namespace, and an unmount there would leave later commands (and grove's git)
        // the empty mount point.
        nix::sched::unshare(CloneFlags::CLONE_NEWNS)
            .map_err(|errno| ("copying the tree's mount namespace", errno))?;
        nix::unistd::chdir(self.cwd.as_c_str())
            .map_err(|errno| ("entering the working directory in the tree", errno))?;
        Ok(())
    }

    /// Makes grove's own `command` (git) join the tree before `exec` (and fail to
    /// spawn, with the join's error, when it cannot).
    pub fn at_exec(self, command: &mut std::process::Command) {
        self.hook(command, Pids::Grove);
    }

    /// Makes a command grove runs for a model or a check join the tree before `exec`,
    /// in a pid namespace of its own so that nothing it starts outlives grove in the
    /// tree's mounts. The command must already die with grove (`hygiene_at_exec`).
    pub fn command_at_exec(self, command: &mut std::process::Command) {
        self.hook(command, Pids::Own);
    }

    #[allow(unsafe_code)]
    fn hook(self, command: &mut std::process::Command, pids: Pids) {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: the hook runs in the forked child; `join` and `pid_namespace::enter`
        // make system calls on data built before the fork and allocate nothing; the error
        // is a plain errno.
        unsafe {
            command.pre_exec(move || {
                self.join()
                    .and_then(|()| match pids {
                        Pids::Own => crate::tools::pid_namespace::enter(c"/proc"),
                        Pids::Grove => Ok(()),
                    })
                    .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno as i32))
            });
        }
    }
}

/// The pid namespace a command joining a tree runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pids {
    /// grove's: for grove's own git, which ends before grove does.
    Grove,
    /// One of its own, entered after the join: whatever the command starts dies with it,
    /// and nothing outlives grove in the tree's mounts.
    Own,
}
