//! A command as the second process of a pid namespace of its own, so that everything it
//! starts dies with grove, even with a `kill -9` that gives grove no chance to clean up.
//!
//! The parent-death signal reaches only the process grove forked, not what that process
//! starts: a check's test runner, a server a test left running, a worker's `sleep &`
//! would live on inside a copy-on-write tree's mount namespace, and keep its overlay
//! mounted, until the next grove kills them. The kernel gives a stronger guarantee: when
//! the first process of a pid namespace dies, every process in it is killed.
//!
//! So the process grove forked (the *keeper*, outside) enters a new pid namespace and
//! forks its first process (the *init*), which forks the command (the *command*, pid 2,
//! which goes on to `exec`). The keeper dies with grove (its parent-death signal), the
//! init with the keeper (its own), and the namespace with the init. The command is not
//! pid 1 itself so that it keeps the signals a program expects (pid 1 ignores every
//! signal it has no handler for). Each end passes the command's wait status up: the init
//! through a pipe (pid 1 cannot die by a signal of its own), the keeper by exiting the
//! same way, so grove sees the command's own exit code or signal.
//!
//! The init mounts the namespace's own `/proc`, so the command's view of processes
//! agrees with its pids and holds nothing else.
//!
//! Everything here runs in a forked copy of a multi-threaded process before `exec`: only
//! system calls, no allocation, no lock (raw `clone`, not glibc's `fork`, so no handler
//! registered with `pthread_atfork` runs).

use nix::errno::Errno;
use nix::libc;
use nix::sched::{CloneFlags, unshare};

/// The step that failed, and how.
type Failure = (&'static str, Errno);

/// Puts the rest of this process's life in a pid namespace of its own; returns in the
/// command's process (pid 2 there), never in the keeper's or the init's, which wait and
/// pass its end on.
///
/// The caller must already have the parent-death signal set (it is the keeper's), and
/// must hold `CAP_SYS_ADMIN` in its user namespace.
#[allow(unsafe_code)]
pub(crate) fn enter(proc_at: &std::ffi::CStr) -> Result<(), Failure> {
    unshare(CloneFlags::CLONE_NEWPID).map_err(|errno| ("entering a pid namespace", errno))?;
    let mut status_pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the array on the stack.
    if unsafe { libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(("opening the pid namespace's status pipe", Errno::last()));
    }
    let [read_end, write_end] = status_pipe;
    let keeper = watch_self().inspect_err(|_| close_both(read_end, write_end))?;
    match fork() {
        Err(errno) => {
            close_both(read_end, write_end);
            // SAFETY: a descriptor this function opened.
            unsafe { libc::close(keeper) };
            Err(("starting the pid namespace's first process", errno))
        }
        Ok(0) => {
            // SAFETY: descriptors this function opened.
            unsafe { libc::close(read_end) };
            die_with(keeper);
            mount_own_proc(proc_at);
            let init = watch_self()?;
            match fork() {
                Err(errno) => Err(("starting the command in its pid namespace", errno)),
                Ok(0) => {
                    // SAFETY: as above.
                    unsafe { libc::close(write_end) };
                    die_with(init);
                    Ok(())
                }
                Ok(command) => init_until(command, write_end),
            }
        }
        Ok(init) => {
            // SAFETY: as above.
            unsafe {
                libc::close(write_end);
                libc::close(keeper);
            }
            keep_until(init, read_end)
        }
    }
}

/// The init's life: reaps every process the namespace orphans until the command ends,
/// writes the command's wait status to `report`, and exits (the kernel then kills what
/// the command left running).
#[allow(unsafe_code)]
fn init_until(command: libc::pid_t, report: libc::c_int) -> ! {
    close_all_but(report);
    let status = loop {
        let mut status = 0;
        // SAFETY: waitpid fills an integer on the stack.
        let reaped = unsafe { libc::waitpid(-1, &mut status, 0) };
        if reaped == command {
            break status;
        }
        if reaped < 0 && Errno::last() != Errno::EINTR {
            exit(EXIT_LOST);
        }
    };
    let bytes = status.to_ne_bytes();
    // SAFETY: a write of four bytes on the stack to a pipe with room for them.
    unsafe { libc::write(report, bytes.as_ptr().cast(), bytes.len()) };
    exit(0)
}

/// The keeper's life: waits for the init, then ends the way the command did (its exit
/// code, or its signal), as the init wrote it to `report`; the way the init did when it
/// wrote nothing (it refused to start the command, or was killed).
#[allow(unsafe_code)]
fn keep_until(init: libc::pid_t, report: libc::c_int) -> ! {
    close_all_but(report);
    // SAFETY: signal on integers. Grove's own handlers are still installed in this copy
    // of it; the command's group must stay killable by a person's SIGTERM.
    unsafe {
        for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    let mut init_status = 0;
    loop {
        // SAFETY: waitpid fills an integer on the stack.
        let reaped = unsafe { libc::waitpid(init, &mut init_status, 0) };
        if reaped == init {
            break;
        }
        if reaped < 0 && Errno::last() != Errno::EINTR {
            exit(EXIT_LOST);
        }
    }
    let mut bytes = [0u8; 4];
    // SAFETY: a read of at most four bytes into the stack. The init has exited, so the
    // pipe holds all it wrote.
    let read = unsafe { libc::read(report, bytes.as_mut_ptr().cast(), bytes.len()) };
    let status = if read == 4 {
        libc::c_int::from_ne_bytes(bytes)
    } else {
        init_status
    };
    end_as(status)
}

/// Ends this process as a process with wait status `status` ended.
#[allow(unsafe_code)]
fn end_as(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        exit(libc::WEXITSTATUS(status));
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: plain system calls on integers and a signal set on the stack. No core:
        // this process is a copy of grove's memory.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(signal, libc::SIG_DFL);
            let mut only: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut only);
            libc::sigaddset(&mut only, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        exit(128 + signal);
    }
    exit(EXIT_LOST)
}

/// The exit code of a keeper or init that lost track of the command (never seen in
/// practice: its wait or the pipe failed).
const EXIT_LOST: libc::c_int = 125;

/// A pidfd of the calling process, for its child to check that it is still alive.
#[allow(unsafe_code)]
fn watch_self() -> Result<libc::c_int, Failure> {
    // SAFETY: pidfd_open on integers; the descriptor is close-on-exec.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    libc::c_int::try_from(fd)
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or(("watching the command's keeper", Errno::last()))
}

/// Makes this process die when its parent does, and dies now if the parent (watched by
/// `parent`, a pidfd) died before the signal was set (in a new pid namespace `getppid`
/// cannot tell).
#[allow(unsafe_code)]
fn die_with(parent: libc::c_int) {
    // SAFETY: prctl, poll and close on integers and a pollfd on the stack.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut watched = libc::pollfd {
            fd: parent,
            events: libc::POLLIN,
            revents: 0,
        };
        // A pidfd is readable once its process has exited.
        let gone = libc::poll(&mut watched, 1, 0) != 0;
        libc::close(parent);
        if gone {
            libc::_exit(EXIT_LOST);
        }
    }
}

/// Mounts a `/proc` of the new pid namespace over the host's, so that what the command
/// reads there agrees with its own pids (`$$`, `os.getpid()`, psutil, `pgrep`) and shows
/// no process outside it (another program's command line can hold a password). Best
/// effort: where the kernel refuses it (a container that masks parts of its `/proc`)
/// the command sees the host's, as without a pid namespace.
#[allow(unsafe_code)]
fn mount_own_proc(at: &std::ffi::CStr) {
    // SAFETY: mount(2) on C strings made before the fork; it must happen in a process of
    // the new pid namespace, which the mount then belongs to.
    unsafe {
        libc::mount(
            c"proc".as_ptr(),
            at.as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        );
    }
}

/// `fork` as a raw `clone`: no `pthread_atfork` handler runs in this forked copy.
#[allow(unsafe_code)]
fn fork() -> Result<libc::pid_t, Errno> {
    // SAFETY: clone with only the exit signal: a plain fork, both sides on their own
    // copy of this stack. Every other argument is null on every architecture's order.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_ulong, 0, 0, 0, 0) };
    if pid < 0 {
        return Err(Errno::last());
    }
    libc::pid_t::try_from(pid).map_err(|_| Errno::EOVERFLOW)
}

/// Closes every descriptor above stderr but `kept`: the standard library's spawn waits
/// for its exec-error pipe to close, which a process that never `exec`s would hold open
/// for the command's whole life.
#[allow(unsafe_code)]
fn close_all_but(kept: libc::c_int) {
    // SAFETY: close_range on integers.
    unsafe {
        if kept > 3 {
            libc::syscall(libc::SYS_close_range, 3, kept - 1, 0);
        }
        libc::syscall(libc::SYS_close_range, kept + 1, libc::c_uint::MAX, 0);
    }
}

#[allow(unsafe_code)]
fn close_both(a: libc::c_int, b: libc::c_int) {
    // SAFETY: descriptors the caller opened.
    unsafe {
        libc::close(a);
        libc::close(b);
    }
}

#[allow(unsafe_code)]
fn exit(code: libc::c_int) -> ! {
    // SAFETY: `_exit` runs no exit handler, as a forked copy must not.
    unsafe { libc::_exit(code) }
}
