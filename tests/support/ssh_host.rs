//! A second machine for the remote-worker tests: a real OpenSSH server in its own
//! network, mount and UTS namespaces, reached with the real `ssh` client.
//!
//! grove starts remote workers through a launcher command such as `ssh HOST grove
//! exec-server` and talks to them over its stdio. To test that honestly the "host" must
//! be a place grove's code cannot reach except through that pipe: no network of its own
//! (only its own `lo`), its own `/tmp`, `/run` and home, and the directories the test
//! names (the local repository, say) covered, so whatever the remote side needs must
//! travel over the pipe. It must also speak the real protocol, so the test uses the
//! distribution's `sshd` and `ssh` rather than a stand-in.
//!
//! Each host is one long-lived holder process that made the namespaces and mounts, then
//! waits on its stdin. Nothing listens on a port: the client's `ProxyCommand` enters the
//! holder's namespaces with `nsenter` and runs `sshd -i` (inetd mode, one server per
//! connection over stdio). The server's files (config, host key, authorized keys, the
//! home's backing directory) are bind-mounted at [`INSIDE`] before anything is hidden, so
//! the server finds them whatever the test hides; the client's (its key, known hosts,
//! `ssh_config`) stay outside.
//!
//! The host also has its own pid namespace, whose init is the holder: the remote's `ps`
//! and `/proc` show only the host's processes, an orphan there goes to the holder rather
//! than to the machine's init, and when the holder dies (the host dropped, or the test
//! process gone and the holder's stdin closed) the kernel kills every process of the
//! host.
//!
//! Needs root (the namespaces and mounts), `sshd`, `ssh`, `ssh-keygen`, `unshare` and
//! `nsenter`; without them [`SshHost::start`] returns `None` (the test skips) unless
//! `GROVE_REQUIRE_SSH` is set (`.ci/run` sets it), where it panics with the reason.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::processes;

/// The server program; `sshd -i` refuses to re-exec itself unless started by absolute
/// path.
const SSHD: &str = "/usr/sbin/sshd";

/// Where the server's files (`server/` of the host's directory) appear inside the host's
/// mount namespace: on its private `/run`, which no `hide` path covers.
const INSIDE: &str = "/run/grove-ssh-host";

/// The host's namespaces: its own network (only `lo`), mounts (private: nothing
/// mounted inside is seen outside), hostname, and pids, whose init is the holder, with a
/// `/proc` of its own.
const UNSHARE: [&str; 8] = [
    "--net",
    "--mount",
    "--propagation=private",
    "--uts",
    "--pid",
    "--fork",
    "--mount-proc",
    "--",
];

/// The holder: `$1` is the server's directory outside, `$2` the hostname, the rest the
/// paths to hide. Everything is mounted in the holder's private mount namespace, so none
/// of it is seen outside or outlives the host. The order matters: the server's directory
/// is bound at INSIDE before the hidden paths (which may hold it) are covered, and the
/// home bound last, from INSIDE, so hiding `/root` or `/tmp` cannot undo it.
const HOLDER: &str = r#"set -e
dir=$1 name=$2
shift 2
mount -t tmpfs -o mode=755 grove-ssh-run /run
mkdir /run/sshd /run/grove-ssh-host
mount --bind "$dir" /run/grove-ssh-host
for hidden in "$@"; do mount -t tmpfs -o mode=755 grove-ssh-hidden "$hidden"; done
mount -t tmpfs -o mode=1777 grove-ssh-tmp /tmp
mount --bind /run/grove-ssh-host/home /root
echo "$name" > /proc/sys/kernel/hostname
if command -v ip >/dev/null; then ip link set lo up; fi
echo ready
read -r _ || true
"#;

/// One simulated machine. Dropping it kills every process in its namespaces, which ends
/// every ssh session to it, and removes its files.
pub struct SshHost {
    alias: String,
    /// `server/` (seen at INSIDE by the host) and `client/`, as the test sees them.
    dir: tempfile::TempDir,
    home: PathBuf,
    /// `unshare`, parent of the holder (in the host's namespaces except the pid
    /// namespace).
    unshare: Child,
    /// Closing it ends the holder (also when the test process dies without dropping us).
    _stdin: ChildStdin,
    /// The shell that made the mounts and keeps the namespaces alive: the init of the
    /// host's pid namespace, by its pid outside.
    holder: i32,
    /// The `/proc/PID/ns/pid` link of the holder: a process with the same link lives on
    /// this host.
    pid_ns: PathBuf,
}

impl SshHost {
    /// Starts host `name` (hostname and ssh alias `grove-host-NAME`), with an empty tmpfs
    /// over each directory of `hide` (the local repository, say: what the remote side
    /// needs of it must come over the pipe). `None` (the caller skips; why is printed to
    /// stderr) when a tool is missing or the namespaces cannot be made, and
    /// `GROVE_REQUIRE_SSH` is unset; with it set, a panic with the reason.
    pub fn start(name: &str, hide: &[&Path]) -> Option<SshHost> {
        for path in hide {
            assert!(
                path.is_absolute() && path.is_dir(),
                "a path to hide must be an existing directory, by absolute path: {}",
                path.display()
            );
        }
        if let Err(why) = tools_present() {
            return unavailable(&why);
        }
        let alias = format!("grove-host-{name}");
        let dir = tempfile::Builder::new()
            .prefix("grove-ssh-host-")
            .tempdir()
            .unwrap();
        let (server, client) = (dir.path().join("server"), dir.path().join("client"));
        keys_and_server_config(&server, &client, &alias);
        let mut unshare = Command::new("unshare")
            .args(UNSHARE)
            .args(["sh", "-c", HOLDER, "grove-ssh-holder"])
            .arg(&server)
            .arg(&alias)
            .args(hide)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(unshare.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let holder = child_of(unshare.id() as i32);
        let (true, Some(holder)) = (ready == "ready\n", holder) else {
            let _ = unshare.kill();
            let failed = unshare.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&failed.stderr);
            return unavailable(&format!(
                "the host's namespaces could not be made ({}): {}",
                failed.status,
                stderr.trim()
            ));
        };
        let pid_ns = std::fs::read_link(format!("/proc/{holder}/ns/pid")).unwrap();
        write_client_config(&client, &alias, holder);
        let _stdin = unshare.stdin.take().unwrap();
        Some(SshHost {
            alias,
            home: server.join("home"),
            dir,
            unshare,
            _stdin,
            holder,
            pid_ns,
        })
    }

    /// The launcher: shell words that, followed by a remote command line, run it on this
    /// host with stdin and stdout piped (no terminal), e.g. `ssh -F
    /// /tmp/grove-ssh-host-X/ssh_config grove-host-a`. Made to be used in `sh -c`, as
    /// grove will use a configured launcher: `format!("{} cmd args", host.launcher())`.
    pub fn launcher(&self) -> String {
        format!("ssh -F {} {}", shell_quote(self.ssh_config()), self.alias)
    }

    /// The client's configuration for this host: an argument of every ssh client that
    /// connects to it, and of nothing else (its folder is this host's alone).
    pub fn ssh_config(&self) -> std::path::PathBuf {
        self.dir.path().join("client/ssh_config")
    }

    /// The ssh alias, which is also the host's hostname (`grove-host-NAME`).
    pub fn hostname(&self) -> &str {
        &self.alias
    }

    /// The host's home directory (`/root` there) as the test sees it, to inspect what
    /// the remote side wrote. Each host has its own, empty at start.
    pub fn home_outside(&self) -> &Path {
        &self.home
    }

    /// Runs the shell command line `command` on the host through ssh, stdin empty.
    pub fn run(&self, command: &str) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(format!("{} {}", self.launcher(), shell_quote(command)))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The live processes of this host (in its pid namespace) whose command line,
    /// arguments joined by spaces, contains `pattern`; "" matches all. The holder is not
    /// listed: it is the harness, not one of the host's processes. Pids are as the test
    /// sees them, not as the host does.
    pub fn pids(&self, pattern: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .filter(|pid| *pid != self.holder)
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|ns| ns == self.pid_ns)
            })
            .filter(|pid| command_line(*pid).is_some_and(|line| line.contains(pattern)))
            .filter(|pid| !processes::is_gone(*pid))
            .collect();
        pids.sort_unstable();
        pids
    }

    /// Sends `signal` to every process [`pids`](Self::pids) finds for `pattern`; how
    /// many were signalled.
    pub fn signal(&self, pattern: &str, signal: Signal) -> usize {
        self.pids(pattern)
            .into_iter()
            .filter(|pid| nix::sys::signal::kill(Pid::from_raw(*pid), signal).is_ok())
            .count()
    }
}

impl Drop for SshHost {
    /// Kills the holder, the init of the host's pid namespace: the kernel then kills
    /// every process of the host, which ends every ssh session to it, and `unshare`
    /// exits once they are all gone.
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(Pid::from_raw(self.holder), Signal::SIGKILL);
        let _ = self.unshare.wait();
    }
}

/// The one child of `parent` (found by its parent pid: the kernel here may not list
/// `/proc/PID/task/TID/children`).
fn child_of(parent: i32) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(1))
                    == Some(parent.to_string().as_str())
            })
        })
}

/// The arguments of process `pid` joined by spaces.
fn command_line(pid: i32) -> Option<String> {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<_> = line
        .split(|byte| *byte == 0)
        .filter(|word| !word.is_empty())
        .map(String::from_utf8_lossy)
        .collect();
    Some(words.join(" "))
}

/// Every program the host needs, or which one is missing.
fn tools_present() -> Result<(), String> {
    if !Path::new(SSHD).is_file() {
        return Err(format!("{SSHD} is not installed (Debian: openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen", "unshare", "nsenter"] {
        if Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            return Err(format!("{tool} is not installed"));
        }
    }
    Ok(())
}

/// `None`, saying why the test skips, or a panic where `GROVE_REQUIRE_SSH` is set.
fn unavailable(why: &str) -> Option<SshHost> {
    assert!(
        std::env::var_os("GROVE_REQUIRE_SSH").is_none(),
        "GROVE_REQUIRE_SSH is set but no ssh host can be started: {why}"
    );
    eprintln!("skipped: no ssh host can be started: {why}");
    None
}

/// The server's host key, `sshd_config`, empty home and `authorized_keys` (the client's
/// key, for root) in `server` (seen at [`INSIDE`] by the host), and the client's key and
/// `known_hosts` (the host key, for `alias`) in `client`.
fn keys_and_server_config(server: &Path, client: &Path, alias: &str) {
    std::fs::create_dir_all(server.join("home")).unwrap();
    std::fs::create_dir(client).unwrap();
    for key in [server.join("host_key"), client.join("user_key")] {
        let made = Command::new("ssh-keygen")
            .args(["-t", "ed25519", "-N", "", "-q", "-C", alias, "-f"])
            .arg(key)
            .output()
            .unwrap();
        assert!(made.status.success(), "ssh-keygen failed: {made:?}");
    }
    std::fs::copy(client.join("user_key.pub"), server.join("authorized_keys")).unwrap();
    let host_key = std::fs::read_to_string(server.join("host_key.pub")).unwrap();
    std::fs::write(client.join("known_hosts"), format!("{alias} {host_key}")).unwrap();
    // StrictModes no: the files are the test's, in a temp dir, not a real user's home.
    // UsePAM no: PAM would want a login session this host has no daemons for. Logs go to
    // stderr (`sshd -e`), that is the ssh client's, hence to the test's output.
    let config = format!(
        "HostKey {INSIDE}/host_key
AuthorizedKeysFile {INSIDE}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
PrintMotd no
PrintLastLog no
LogLevel ERROR
"
    );
    std::fs::write(server.join("sshd_config"), config).unwrap();
}

/// The client's `ssh_config` (used alone, with `ssh -F`): only this host's key is
/// trusted and only the test's key offered, never a question asked, nothing written.
///
/// The proxy ignores SIGHUP (its `sshd` resets it for the session): at the end of a
/// session the client sends SIGHUP to its proxy, and `nsenter --pid`, which forks, would
/// die before its `sshd`, whose exit would then be left to the machine's init (it
/// inherits the reaper of its dead parent's pid namespace), which may take seconds to
/// reap it; until it does, the host's pid namespace cannot end, and dropping the host
/// waits.
fn write_client_config(dir: &Path, alias: &str, holder: i32) {
    let path = |name: &str| format!("\"{}\"", dir.join(name).display());
    let client = format!(
        "Host {alias}
  ProxyCommand sh -c 'trap \"\" HUP; exec nsenter --target {holder} --net --mount --uts --pid {SSHD} -i -e -f {INSIDE}/sshd_config'
  User root
  HostKeyAlias {alias}
  BatchMode yes
  IdentitiesOnly yes
  IdentityFile {identity}
  UserKnownHostsFile {known_hosts}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  UpdateHostKeys no
  ControlMaster no
  ControlPath none
  LogLevel ERROR
",
        identity = path("user_key"),
        known_hosts = path("known_hosts"),
    );
    std::fs::write(dir.join("ssh_config"), client).unwrap();
}

/// `text` as one `sh` word.
pub fn shell_quote(text: impl AsRef<std::ffi::OsStr>) -> String {
    let text = text.as_ref().to_string_lossy();
    format!("'{}'", text.replace('\'', r"'\''"))
}
