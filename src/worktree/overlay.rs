//! The tree host: one long-lived process per copy-on-write worktree, in a user and mount
//! namespace of its own, where the kernel's overlay filesystem shows the run's base tree
//! (lower, never written) with the worker's changes (upper) at the worktree's own path.
//!
//! This file owns the host's life: its start (namespaces, the mount, a ready line), the
//! probe that tells at a run's start whether this system allows such a mount, and its
//! end, which is grove's: the host reads its stdin until grove closes it (or dies), and
//! is killed with grove (`PR_SET_PDEATHSIG`), so no mount outlives grove. It must never
//! mount anything in grove's own namespace, and never write to the lower directory.

use std::ffi::CString;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::libc;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};

use crate::tools::exec::{hygiene_at_exec, spawn_lasting};
use crate::tools::tree::namespace::{NamespaceError, TreeNamespace};

/// How long a host may take to mount and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the host prints on stdout once its overlay is mounted.
const READY_LINE: &str = "grove-tree-ready\n";

/// Where the kernel says which start of the machine this is.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The file beside a tree's layers naming the machine start of its last mount.
const BOOT_MARK: &str = "boot_id";

/// How the host's refusal message starts (on its stderr).
const REFUSED_PREFIX: &str = "grove tree host: ";

/// The directories of one overlay mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    /// The base tree, read-only to the tree (shared by every worker of a base).
    pub lower: PathBuf,
    /// The worker's changes: new and changed files, whiteouts for deletions.
    pub upper: PathBuf,
    /// The overlay's scratch directory, on the upper's filesystem.
    pub work: PathBuf,
    /// Where the merged tree is seen inside the host's namespace: the worktree's path.
    pub mount_point: PathBuf,
}

impl Layers {
    /// The layers of the worktree at `mount_point` over `lower`, with the worker's own
    /// directories beside the worktree: `<mount point>.cow/{upper,work}`.
    pub fn beside(lower: &Path, mount_point: &Path) -> Self {
        let mut own = mount_point.as_os_str().to_owned();
        own.push(".cow");
        let own = PathBuf::from(own);
        Self {
            lower: lower.to_path_buf(),
            upper: own.join("upper"),
            work: own.join("work"),
            mount_point: mount_point.to_path_buf(),
        }
    }

    /// The directory that holds the worker's upper and work directories.
    pub fn own_dir(&self) -> Option<&Path> {
        self.upper.parent()
    }

    /// Whether this tree was last mounted before the machine last started (its mount
    /// skips the disk's syncs, so a crash since may have torn what the worker wrote in
    /// its last seconds); false for a tree never mounted, or where that cannot be told.
    pub fn mounted_before_restart(&self) -> bool {
        let Some(mark) = self.own_dir().map(|own| own.join(BOOT_MARK)) else {
            return false;
        };
        match (std::fs::read(mark), std::fs::read(BOOT_ID)) {
            (Ok(then), Ok(now)) => then != now,
            _ => false,
        }
    }
}

/// Why a tree host cannot be started or stopped cleanly.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// Not Linux: there is no overlay filesystem. Not retried; grove uses git worktrees.
    #[error("copy-on-write worktrees need Linux's overlay filesystem; this is {os}")]
    NotLinux { os: &'static str },
    /// A directory of the mount cannot be made. Not retried.
    #[error("cannot create {path} for the worktree's overlay: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A path cannot be passed to the kernel (a NUL byte in it). Not retried.
    #[error("the path {path} cannot be used for an overlay mount")]
    Path { path: PathBuf },
    /// The host process could not be started at all. Not retried.
    #[error("cannot start the tree host for {mount_point}: {source}")]
    Spawn {
        mount_point: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused a step (user namespace, mount namespace, the overlay mount):
    /// an older kernel, a container without user namespaces, a filesystem overlay does
    /// not take as upper. Not retried; grove uses git worktrees unless told otherwise.
    #[error("the kernel refused the overlay for {mount_point}: {detail}")]
    Refused {
        mount_point: PathBuf,
        detail: String,
    },
    /// The host did not say it was ready in time. Not retried.
    #[error("the tree host for {mount_point} did not get ready within {timeout_s} s")]
    NotReady {
        mount_point: PathBuf,
        timeout_s: u64,
    },
    /// The host's namespaces cannot be opened. Not retried.
    #[error(transparent)]
    Namespace(#[from] NamespaceError),
    /// The mount worked but the tree is not what it must be (the probe). Not retried.
    #[error("the overlay for {mount_point} does not behave as copy-on-write: {detail}")]
    Misbehaves {
        mount_point: PathBuf,
        detail: String,
    },
    /// The worker's directories cannot be removed, or its tree copied out. Not retried:
    /// the caller keeps the worktree and says where.
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A running tree host. Dropping it ends the host (its stdin closes and it is killed).
#[derive(Debug)]
pub struct TreeHost {
    layers: Layers,
    namespace: Arc<TreeNamespace>,
    /// Held open: the host exits when it closes.
    _stdin: tokio::process::ChildStdin,
    child: tokio::process::Child,
}

impl TreeHost {
    /// Starts a host for `layers`: makes the upper directory (and the mount point) if
    /// missing and the work directory afresh, then a process that enters a new user and
    /// mount namespace, mounts the overlay at the mount point and waits.
    ///
    /// The mount is `volatile` where the kernel knows it: the overlay then never syncs
    /// the disk, which its unmount otherwise does for the whole upper filesystem (the
    /// user's unwritten files too). A volatile mount leaves a mark in the work directory
    /// that makes the kernel refuse the next mount; the work directory is scratch, so it
    /// is emptied before each one, and the machine's start is noted beside the layers
    /// for [`Layers::mounted_before_restart`].
    pub async fn start(layers: Layers) -> Result<Self, OverlayError> {
        if !cfg!(target_os = "linux") {
            return Err(OverlayError::NotLinux {
                os: std::env::consts::OS,
            });
        }
        let dir_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OverlayError::Dir { path, source }
        };
        if layers.work.exists() {
            open_scratch(&layers.work);
            std::fs::remove_dir_all(&layers.work).map_err(dir_error(&layers.work))?;
        }
        for dir in [&layers.upper, &layers.work, &layers.mount_point] {
            std::fs::create_dir_all(dir).map_err(dir_error(dir))?;
        }
        if let (Some(own), Ok(boot)) = (layers.own_dir(), std::fs::read(BOOT_ID)) {
            let mark = own.join(BOOT_MARK);
            std::fs::write(&mark, boot).map_err(dir_error(&mark))?;
        }
        let steps = HostSteps::prepare(&layers)?;
        // `cat` holds the namespace until grove closes its stdin; the child itself says
        // it is ready, once mounted.
        let mut command = tokio::process::Command::new("cat");
        command
            .current_dir("/")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        hygiene_at_exec(&mut command);
        steps.at_exec(command.as_std_mut());
        let spawn_error = |source| OverlayError::Spawn {
            mount_point: layers.mount_point.clone(),
            source,
        };
        let mut child = spawn_lasting(command).await.map_err(spawn_error)?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(spawn_error(std::io::Error::other("no pipes to the host")));
        };
        let mut line = String::new();
        let mut stdout = tokio::io::BufReader::new(stdout);
        let read = tokio::time::timeout(READY_TIMEOUT, stdout.read_line(&mut line)).await;
        if line != READY_LINE {
            let mut said = String::new();
            let _ = tokio::time::timeout(READY_TIMEOUT, stderr.read_to_string(&mut said)).await;
            let _ = child.start_kill();
            return Err(match read {
                Err(_) => OverlayError::NotReady {
                    mount_point: layers.mount_point.clone(),
                    timeout_s: READY_TIMEOUT.as_secs(),
                },
                Ok(_) => OverlayError::Refused {
                    mount_point: layers.mount_point.clone(),
                    detail: said.trim().trim_start_matches(REFUSED_PREFIX).to_owned(),
                },
            });
        }
        let Some(pid) = child.id() else {
            return Err(OverlayError::NotReady {
                mount_point: layers.mount_point.clone(),
                timeout_s: READY_TIMEOUT.as_secs(),
            });
        };
        let namespace = TreeNamespace::of_process(pid, &layers.mount_point, &layers.upper)?;
        Ok(Self {
            layers,
            namespace: Arc::new(namespace),
            _stdin: stdin,
            child,
        })
    }

    /// The host's namespaces, for the processes that join them.
    pub fn namespace(&self) -> &Arc<TreeNamespace> {
        &self.namespace
    }

    /// The layers this host mounted.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// The host's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Ends the host and waits until it is gone (its mount goes with the last process
    /// and descriptor of its namespace).
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Gives the directories under an overlay's work directory their permissions back (the
/// kernel leaves them `d---------`), so that an unprivileged grove can empty or delete
/// them. Follows no link; what cannot be changed is left for the removal to report.
pub fn open_scratch(work: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mut stack = vec![work.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
}

/// Removes a worker's upper and work directories (never the lower one, never the
/// repository); the work directory's permissions are given back first.
pub fn remove_own_dirs(layers: &Layers) -> Result<(), OverlayError> {
    open_scratch(&layers.work);
    let Some(own) = layers.own_dir() else {
        return Ok(());
    };
    match std::fs::remove_dir_all(own) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(OverlayError::Io {
            action: "remove",
            path: own.to_path_buf(),
            source,
        }),
    }
}

/// Copies the merged tree `from` (as grove reaches it) into the directory `to`, so that
/// the user can open it with their own tools once the host is gone: files with their
/// modes, directories, symlinks as links; the tree's `.git` file is left to the one git
/// keeps at `to`.
pub fn materialize(from: &Path, to: &Path) -> Result<(), OverlayError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| OverlayError::Io {
            action,
            path,
            source,
        }
    };
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let source = from.join(&relative);
        for entry in std::fs::read_dir(&source).map_err(io("list", &source))? {
            let entry = entry.map_err(io("list", &source))?;
            let name = relative.join(entry.file_name());
            if name.as_os_str() == ".git" {
                continue;
            }
            let (here, there) = (from.join(&name), to.join(&name));
            let kind = entry.file_type().map_err(io("read", &here))?;
            if kind.is_dir() {
                std::fs::create_dir_all(&there).map_err(io("create", &there))?;
                stack.push(name);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&here).map_err(io("read", &here))?;
                std::os::unix::fs::symlink(&target, &there).map_err(io("link", &there))?;
            } else if kind.is_file() {
                std::fs::copy(&here, &there).map_err(io("copy", &there))?;
            }
        }
    }
    Ok(())
}

/// Checks that this system gives grove copy-on-write trees under `parent` (where the
/// worktrees go, so the upper directories' filesystem is the one tried): a host mounts
/// an overlay in a throwaway directory, a file of the lower one is read through grove's
/// view of it, a write lands in the upper directory only. Leaves nothing behind.
pub async fn probe(parent: &Path) -> Result<(), OverlayError> {
    let dir_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OverlayError::Dir { path, source }
    };
    std::fs::create_dir_all(parent).map_err(dir_error(parent))?;
    let scratch = tempfile::Builder::new()
        .prefix(".grove-overlay-probe-")
        .tempdir_in(parent)
        .map_err(dir_error(parent))?;
    let root = scratch.path();
    let lower = root.join("lower");
    std::fs::create_dir_all(&lower).map_err(dir_error(&lower))?;
    std::fs::write(lower.join("base"), b"base").map_err(dir_error(&lower))?;
    let layers = Layers::beside(&lower, &root.join("tree"));
    let host = TreeHost::start(layers.clone()).await?;
    let misbehaves = |detail: String| OverlayError::Misbehaves {
        mount_point: layers.mount_point.clone(),
        detail,
    };
    let seen = host.namespace().grove_root().to_path_buf();
    let checked = (|| {
        let base = std::fs::read(seen.join("base"))
            .map_err(|error| misbehaves(format!("the base file is not seen: {error}")))?;
        if base != b"base" {
            return Err(misbehaves("the base file reads differently".to_owned()));
        }
        std::fs::write(seen.join("made"), b"made")
            .map_err(|error| misbehaves(format!("a write through the tree failed: {error}")))?;
        if !layers.upper.join("made").is_file() || lower.join("made").exists() {
            return Err(misbehaves(
                "a write through the tree did not land in the upper directory alone".to_owned(),
            ));
        }
        Ok(())
    })();
    host.stop().await;
    remove_own_dirs(&layers)?;
    checked
}

/// What the host's process does between `fork` and `exec`, on data made before the fork.
struct HostSteps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    mount_point: CString,
    /// The options with `volatile`, tried first.
    volatile: CString,
    /// The options without it, for kernels that do not know it.
    options: CString,
}

impl HostSteps {
    fn prepare(layers: &Layers) -> Result<Self, OverlayError> {
        let c = |path: &Path| {
            CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| OverlayError::Path {
                path: path.to_path_buf(),
            })
        };
        let mut options = Vec::new();
        for (key, path) in [
            ("lowerdir=", &layers.lower),
            (",upperdir=", &layers.upper),
            (",workdir=", &layers.work),
        ] {
            options.extend_from_slice(key.as_bytes());
            options.extend(escape_option(path.as_os_str().as_encoded_bytes()));
        }
        // In a user namespace the overlay keeps its own attributes under `user.overlay.*`.
        options.extend_from_slice(b",userxattr");
        let uid = nix::unistd::geteuid();
        let gid = nix::unistd::getegid();
        let options = |extra: &[u8]| {
            CString::new([options.as_slice(), extra].concat()).map_err(|_| OverlayError::Path {
                path: layers.lower.clone(),
            })
        };
        Ok(Self {
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
            mount_point: c(&layers.mount_point)?,
            volatile: options(b",volatile")?,
            options: options(b"")?,
        })
    }

    #[allow(unsafe_code)]
    fn at_exec(self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt as _;
        // SAFETY: the hook runs in the forked child; `apply` makes system calls on data
        // built before the fork, allocates nothing, and ends the child with `_exit` when
        // a step fails.
        unsafe {
            command.pre_exec(move || {
                self.apply();
                Ok(())
            });
        }
    }

    /// Enters the namespaces, mounts the overlay and says so on stdout, or ends the child
    /// saying why on stderr.
    #[allow(unsafe_code)]
    fn apply(&self) {
        use nix::sched::{CloneFlags, unshare};
        if let Err(errno) = unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS) {
            refuse("entering a new user and mount namespace", errno);
        }
        for (path, text) in [
            (c"/proc/self/setgroups", b"deny".as_slice()),
            (c"/proc/self/uid_map", &self.uid_map),
            (c"/proc/self/gid_map", &self.gid_map),
        ] {
            if let Err(errno) = write_proc_file(path, text) {
                refuse("mapping grove's user into the namespace", errno);
            }
        }
        let none = std::ptr::null();
        // SAFETY: mount(2) on C strings built before the fork.
        let private = unsafe {
            libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if private != 0 {
            refuse(
                "making the namespace's mounts private",
                nix::errno::Errno::last(),
            );
        }
        let mount = |options: &CString| {
            // SAFETY: as above.
            let mounted = unsafe {
                libc::mount(
                    c"overlay".as_ptr(),
                    self.mount_point.as_ptr(),
                    c"overlay".as_ptr(),
                    0,
                    options.as_ptr().cast(),
                )
            };
            if mounted == 0 {
                Ok(())
            } else {
                Err(nix::errno::Errno::last())
            }
        };
        if let Err(errno) = volatile_or_plain(&self.volatile, &self.options, mount) {
            refuse("mounting the overlay", errno);
        }
        // SAFETY: the child's stdout is open (a pipe to grove) until it exits; no handle
        // is made through `std::io::stdout`, which would allocate.
        let stdout = unsafe { std::os::fd::BorrowedFd::borrow_raw(libc::STDOUT_FILENO) };
        if let Err(errno) = nix::unistd::write(stdout, READY_LINE.as_bytes()) {
            refuse("saying the tree is ready", errno);
        }
    }
}

/// Mounts with the `volatile` options, or with the plain ones where the kernel refuses
/// those as unknown: kernels that allow unprivileged overlays without knowing `volatile`
/// (Ubuntu's before 5.10) answer EINVAL. Any other refusal is the mount's answer. Runs
/// between `fork` and `exec`, so it allocates nothing.
fn volatile_or_plain<'a>(
    volatile: &'a CString,
    plain: &'a CString,
    mount: impl Fn(&'a CString) -> Result<(), nix::errno::Errno>,
) -> Result<(), nix::errno::Errno> {
    match mount(volatile) {
        Err(nix::errno::Errno::EINVAL) => mount(plain),
        other => other,
    }
}

fn write_proc_file(path: &std::ffi::CStr, text: &[u8]) -> Result<(), nix::errno::Errno> {
    use nix::fcntl::OFlag;
    let file = nix::fcntl::open(
        path,
        OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    match nix::unistd::write(&file, text)? {
        written if written == text.len() => Ok(()),
        _ => Err(nix::errno::Errno::EIO),
    }
}

/// Tells why on stderr and ends the child before it runs anything.
#[allow(unsafe_code)]
fn refuse(step: &str, errno: nix::errno::Errno) -> ! {
    let stderr = std::io::stderr();
    for part in [REFUSED_PREFIX, step, " failed: ", errno.desc(), "\n"] {
        let _ = nix::unistd::write(stderr.as_fd(), part.as_bytes());
    }
    // SAFETY: `_exit` runs no exit handler, as a forked copy of grove must not.
    unsafe { libc::_exit(1) }
}

/// A path for the overlay's option string: `\`, `,` and `:` escaped with a backslash.
fn escape_option(bytes: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(bytes.len());
    for &byte in bytes {
        if matches!(byte, b'\\' | b',' | b':') {
            escaped.push(b'\\');
        }
        escaped.push(byte);
    }
    escaped
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn option_paths_escape_the_separators() {
        assert_eq!(
            escape_option(b"/a,b:c\\d"),
            b"/a\\,b\\:c\\\\d".to_vec(),
            "a comma, colon or backslash in a path must not split the overlay's options"
        );
    }

    #[test]
    fn a_kernel_without_volatile_gets_the_plain_mount_and_other_refusals_stand() {
        use nix::errno::Errno;
        let (volatile, plain) = (c"lowerdir=l,volatile".to_owned(), c"lowerdir=l".to_owned());
        // What each kernel answers to the volatile options; the plain ones always mount.
        let tried = |answer: Result<(), Errno>| {
            let calls = std::cell::RefCell::new(Vec::new());
            let outcome = volatile_or_plain(&volatile, &plain, |options| {
                calls.borrow_mut().push(options.to_owned());
                if *options == volatile { answer } else { Ok(()) }
            });
            (outcome, calls.into_inner())
        };
        assert_eq!(
            [
                tried(Ok(())),
                tried(Err(Errno::EINVAL)),
                tried(Err(Errno::EPERM))
            ],
            [
                (Ok(()), vec![volatile.clone()]),
                (Ok(()), vec![volatile.clone(), plain.clone()]),
                (Err(Errno::EPERM), vec![volatile.clone()]),
            ],
            "volatile is tried first; only its refusal as unknown (EINVAL) falls back to the \
             plain options, and a refused mount is never retried as another"
        );
    }

    #[test]
    fn open_scratch_gives_every_directory_beneath_its_permissions_back() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let deep = work.join("work/incompat/volatile");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("dirty"), "").unwrap();
        for path in [
            &deep,
            &deep.parent().unwrap().to_path_buf(),
            &work.join("work"),
        ] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000)).unwrap();
        }
        open_scratch(&work);
        let modes: Vec<u32> = [
            &work.join("work"),
            &deep.parent().unwrap().to_path_buf(),
            &deep,
        ]
        .iter()
        .map(|path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777)
        .collect();
        assert_eq!(
            modes,
            vec![0o700; 3],
            "each directory the kernel left without permissions can be read and emptied"
        );
    }

    #[test]
    fn layers_sit_beside_the_worktree() {
        assert_eq!(
            Layers::beside(Path::new("/base"), Path::new("/cache/run/3")),
            Layers {
                lower: PathBuf::from("/base"),
                upper: PathBuf::from("/cache/run/3.cow/upper"),
                work: PathBuf::from("/cache/run/3.cow/work"),
                mount_point: PathBuf::from("/cache/run/3"),
            }
        );
    }
}
