//! The mount operations of a command's view, made by its own process between `fork` and
//! `exec`, and the pivot into the new root.
//!
//! This file owns the system calls that turn a [`ViewPlan`] into the command's file
//! system. It runs in a forked copy of a multi-threaded process: system calls on data
//! prepared before the fork, no allocation, no lock. A step that fails either refuses
//! the command (its step and errno returned) or, where the plan says it is not required,
//! leaves that part out; it must never pivot into a view that lacks a required part,
//! and never leave a bind writable that the plan made read-only.

use std::ffi::CStr;

use nix::errno::Errno;
use nix::libc;

use super::view::{FsKind, MountOp, ViewPlan};

/// The step that failed, and how.
pub(super) type Failure = (&'static str, Errno);

/// `MOUNT_ATTR_RDONLY` of `mount_setattr(2)`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// `AT_RECURSIVE`: the attributes apply to every mount beneath too.
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `struct mount_attr` of the kernel's uapi (its first version).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Makes the view's mounts beneath its staging directory.
pub(super) fn build(view: &ViewPlan) -> Result<(), Failure> {
    for op in &view.ops {
        match op {
            MountOp::Dir(at) => {
                // One already there is what was wanted; one that cannot be made shows
                // as the failure of the mount onto it.
                let _ = nix::unistd::mkdir(
                    at.as_c_str(),
                    nix::sys::stat::Mode::from_bits_truncate(0o755),
                );
            }
            MountOp::File(at) => make_file(at),
            MountOp::Symlink { link, at } => symlink(link, at),
            MountOp::Fs {
                kind,
                at,
                data,
                required,
            } => {
                let fstype: &CStr = match kind {
                    FsKind::Tmpfs => c"tmpfs",
                    FsKind::Devpts => c"devpts",
                    FsKind::Overlay => c"overlay",
                };
                let flags = libc::MS_NOSUID | libc::MS_NODEV;
                if let Err(errno) = mount(Some(fstype), at, Some(fstype), flags, Some(data))
                    && *required
                {
                    return Err(("mounting a file system of the command's view", errno));
                }
            }
            MountOp::Bind {
                source,
                at,
                writable,
                required,
            } => match mount(Some(source), at, None, libc::MS_BIND | libc::MS_REC, None) {
                Ok(()) if !writable => read_only(at, AT_RECURSIVE)
                    .map_err(|errno| ("making a bind of the command's view read-only", errno))?,
                Ok(()) => {}
                Err(errno) if *required => {
                    return Err(("binding a granted path into the command's view", errno));
                }
                Err(_) => {}
            },
            MountOp::ReadOnly(at) => {
                read_only(at, 0).map_err(|errno| ("making the command's view read-only", errno))?
            }
        }
    }
    Ok(())
}

/// Makes the view the process's root, the old root unreachable, and `cwd` its working
/// directory.
#[allow(unsafe_code)]
pub(super) fn pivot(view: &ViewPlan, cwd: &CStr) -> Result<(), Failure> {
    nix::unistd::chdir(view.staging.as_c_str())
        .map_err(|errno| ("entering the command's view", errno))?;
    // `pivot_root(".", ".")` stacks the old root on the new one, where one detaching
    // unmount removes it: no directory for it needed in the view.
    // SAFETY: pivot_root on two static C strings.
    let pivoted = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
    Errno::result(pivoted).map_err(|errno| ("pivoting into the command's view", errno))?;
    // SAFETY: umount2 on a static C string.
    let detached = unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) };
    Errno::result(detached)
        .map_err(|errno| ("detaching the host's root from the command's view", errno))?;
    nix::unistd::chdir(c"/").map_err(|errno| ("entering the command's view", errno))?;
    nix::unistd::chdir(cwd).map_err(|errno| {
        (
            "entering the working directory in the command's view",
            errno,
        )
    })
}

#[allow(unsafe_code)]
fn symlink(link: &CStr, at: &CStr) {
    // SAFETY: symlink(2) on C strings built before the fork. One already there is fine.
    unsafe { libc::symlink(link.as_ptr(), at.as_ptr()) };
}

fn make_file(at: &CStr) {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    // Dropped at once: only the mount point was wanted. One already there is fine.
    let _ = nix::fcntl::open(at, flags, nix::sys::stat::Mode::from_bits_truncate(0o444));
}

/// mount(2), without allocating.
#[allow(unsafe_code)]
pub(super) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), Errno> {
    let pointer = |text: Option<&CStr>| text.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: mount(2) on C strings built before the fork (or null).
    let done = unsafe {
        libc::mount(
            pointer(source),
            target.as_ptr(),
            pointer(fstype),
            flags,
            pointer(data).cast(),
        )
    };
    Errno::result(done).map(drop)
}

/// Sets the mount at `at` (and with [`AT_RECURSIVE`] every one beneath) read-only.
#[allow(unsafe_code)]
fn read_only(at: &CStr, flags: libc::c_uint) -> Result<(), Errno> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads the struct on the stack, of the size passed.
    let done = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            at.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(done).map(drop)
}
