//! A second machine for the remote-worker tests: a real OpenSSH server in a network and
//! mount namespace of its own, reached with the real `ssh` client.
//!
//! The host has no network but its own `lo`, its own home directory (a folder of the
//! harness bound onto `/root`), and does not see the directories the test hides (the
//! local repository: code must travel over the pipe). There is no listening port: each
//! connection starts `sshd -i` inside the host's namespaces as the client's
//! `ProxyCommand`, so the real server speaks the real protocol over stdio.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const SSHD: &str = "/usr/sbin/sshd";

/// One host: its namespaces' holder process and its files.
pub struct SshHost {
    name: String,
    dir: tempfile::TempDir,
    holder: Child,
    net: PathBuf,
}

impl SshHost {
    /// Starts host `name`, hiding `hide` from it. `None` (the caller skips, saying why)
    /// when sshd, unshare or nsenter is missing and `GROVE_REQUIRE_SSH` is unset; with it
    /// set, a missing one fails the test.
    pub fn start(name: &str, hide: &[&Path]) -> Option<SshHost> {
        let missing: Vec<&str> = [SSHD, "unshare", "nsenter", "ssh", "ssh-keygen"]
            .into_iter()
            .filter(|program| {
                Command::new("sh")
                    .args(["-c", &format!("command -v {program}")])
                    .stdout(Stdio::null())
                    .status()
                    .map_or(true, |status| !status.success())
            })
            .collect();
        if !missing.is_empty() {
            let why = format!("no second host: {} missing", missing.join(", "));
            assert!(
                std::env::var_os("GROVE_REQUIRE_SSH").is_none(),
                "GROVE_REQUIRE_SSH is set but {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        Some(Self::make(name, hide))
    }

    fn make(name: &str, hide: &[&Path]) -> SshHost {
        let dir = tempfile::Builder::new()
            .prefix(&format!("grove-ssh-{name}-"))
            .tempdir()
            .unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("home")).unwrap();
        for key in ["host_key", "user_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", ""])
                .arg("-f")
                .arg(root.join(key))
                .status()
                .unwrap();
            assert!(made.success(), "ssh-keygen made the {key}");
        }
        std::fs::copy(root.join("user_key.pub"), root.join("authorized_keys")).unwrap();
        std::fs::write(
            root.join("sshd_config"),
            format!(
                "HostKey {0}/host_key\nAuthorizedKeysFile {0}/authorized_keys\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n\
                 LogLevel ERROR\n",
                root.display()
            ),
        )
        .unwrap();
        // sshd's privilege separation wants it; it is a folder, not a mount.
        std::fs::create_dir_all("/run/sshd").unwrap();
        let mut mounts = format!(
            "mount --bind {} /root",
            shell(&root.join("home").display().to_string())
        );
        for path in hide {
            mounts.push_str(&format!(
                " && mount -t tmpfs tmpfs {}",
                shell(&path.display().to_string())
            ));
        }
        let mut holder = Command::new("unshare")
            .args([
                "--net",
                "--mount",
                "--propagation",
                "private",
                "--fork",
                "sh",
                "-c",
            ])
            .arg(format!("{mounts} && echo ready && exec sleep 100000"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready, "ready\n", "host {name}'s namespaces are made");
        // `unshare --fork`: the shell (then `sleep`) is the holder's child, in the new
        // namespaces; the holder itself stays in ours.
        let inside = children(holder.id() as i32)
            .into_iter()
            .next()
            .expect("the holder's child");
        let net = std::fs::read_link(format!("/proc/{inside}/ns/net")).unwrap();
        let host_key = std::fs::read_to_string(root.join("host_key.pub")).unwrap();
        let key: Vec<&str> = host_key.split_whitespace().take(2).collect();
        std::fs::write(
            root.join("known_hosts"),
            format!("{name} {}\n", key.join(" ")),
        )
        .unwrap();
        std::fs::write(
            root.join("ssh_config"),
            format!(
                "Host {name}\n  User root\n  IdentityFile {0}/user_key\n  IdentitiesOnly yes\n  \
                 UserKnownHostsFile {0}/known_hosts\n  StrictHostKeyChecking yes\n  \
                 BatchMode yes\n  LogLevel ERROR\n  \
                 ProxyCommand nsenter -t {inside} -n -m {SSHD} -i -f {0}/sshd_config\n",
                root.display()
            ),
        )
        .unwrap();
        SshHost {
            name: name.to_owned(),
            dir,
            holder,
            net,
        }
    }

    /// The launcher: `ssh -F CONFIG NAME`, followed by a command line.
    pub fn launcher(&self) -> String {
        format!(
            "ssh -F {} {}",
            self.dir.path().join("ssh_config").display(),
            self.name
        )
    }

    /// The host's home directory as the test sees it.
    pub fn home_outside(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Runs `command` on the host through ssh.
    pub fn run(&self, command: &str) -> Output {
        Command::new("sh")
            .arg("-c")
            .arg(format!("{} {}", self.launcher(), shell(command)))
            .output()
            .unwrap()
    }

    /// The processes living in the host's namespaces whose command line holds
    /// `pattern`, but for those whose parent matches too (a server's forked children).
    pub fn pids(&self, pattern: &str) -> Vec<i32> {
        let matches = |pid: i32| {
            std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|net| net == self.net)
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                    String::from_utf8_lossy(&line)
                        .replace('\0', " ")
                        .contains(pattern)
                })
        };
        all_pids()
            .into_iter()
            .filter(|pid| matches(*pid) && !parent(*pid).is_some_and(matches))
            .collect()
    }

    /// Sends `signal` to [`SshHost::pids`]`(pattern)`; how many got it.
    pub fn signal(&self, pattern: &str, signal: nix::sys::signal::Signal) -> usize {
        let pids = self.pids(pattern);
        for pid in &pids {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), signal);
        }
        pids.len()
    }
}

impl Drop for SshHost {
    fn drop(&mut self) {
        let inside: Vec<i32> = all_pids()
            .into_iter()
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|net| net == self.net)
            })
            .collect();
        for pid in inside {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

fn shell(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

fn children(pid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|child| parent(*child) == Some(pid))
        .collect()
}
