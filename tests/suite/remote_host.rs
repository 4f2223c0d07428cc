//! The stand-in second machine of the remote-worker tests (`support::ssh_host`): a real
//! sshd in its own namespaces, reached through its launcher. These tests check what the
//! remote tests will rely on: the host sees its own home and not what the test hides,
//! has no network, carries bytes unchanged both ways, and its processes can be found,
//! signalled, and are all gone once the host is dropped.
//!
//! Skipped (with the reason) where sshd or the namespaces are unavailable, unless
//! `GROVE_REQUIRE_SSH` is set (`.ci/run` sets it), where that fails them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;

use crate::support::processes;
use crate::support::ssh_host::{SshHost, shell_quote};

/// What a command printed and how it ended, in one comparable value.
#[derive(Debug, PartialEq)]
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

fn ran(output: Output) -> Ran {
    Ran {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(host_visible(Path::new(env!("CARGO_TARGET_TMPDIR"))))
        .unwrap()
}

/// `preferred`, unless it lies under /tmp: every host has a private /tmp, which would
/// hide it whether or not the test asks — and a checkout under /tmp (a clone made
/// there, CI's) puts the target directory there too. Then /var/tmp, which the hosts see.
fn host_visible(preferred: &Path) -> &Path {
    if preferred.starts_with("/tmp") {
        Path::new("/var/tmp")
    } else {
        preferred
    }
}

/// Starts `sh -c "<launcher> <command>"` with its stdio piped, as grove will start a
/// remote worker.
fn launch(host: &SshHost, command: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{} {}", host.launcher(), shell_quote(command)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Polls `probe` until it returns `Some`, for up to 10 s.
fn within_10s<T>(mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(found) = probe() {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_host_has_its_own_home_tmp_and_hostname_and_cannot_see_hidden_paths() {
    let hidden = scratch("hidden-");
    let marker = hidden.path().join("marker");
    std::fs::write(&marker, "local only\n").unwrap();
    let shared = scratch("shared-");
    let visible = shared.path().join("visible");
    std::fs::write(&visible, "seen everywhere\n").unwrap();
    let in_tmp = tempfile::NamedTempFile::new().unwrap();
    let Some(a) = SshHost::start("a", &[hidden.path()]) else {
        return;
    };
    let b = SshHost::start("b", &[hidden.path()]).unwrap();

    let probe = format!(
        "echo $HOME; hostname; cat {}; test -e {} || echo no-hidden; test -e {} || echo \
         no-tmp; test -e /proc/{} || echo no-local-processes",
        shell_quote(&visible),
        shell_quote(&marker),
        shell_quote(in_tmp.path()),
        std::process::id(),
    );
    let expected = |name: &str| Ran {
        success: true,
        stdout: format!("/root\n{name}\nseen everywhere\nno-hidden\nno-tmp\nno-local-processes\n"),
        stderr: String::new(),
    };
    assert_eq!(
        ran(a.run(&probe)),
        expected("grove-host-a"),
        "host a: home /root, its own hostname, the unhidden files, but not the hidden \
         directory, the test's /tmp nor the test's processes"
    );
    assert_eq!(
        ran(b.run(&probe)),
        expected("grove-host-b"),
        "host b: the same"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "local only\n",
        "hiding a directory from the hosts leaves it as it was for the test"
    );

    assert_eq!(
        std::fs::read_dir(a.home_outside()).unwrap().count(),
        0,
        "ssh sessions leave nothing in the host's home"
    );
    assert_eq!(
        ran(a.run("echo written on a > ~/note")),
        Ran {
            success: true,
            stdout: String::new(),
            stderr: String::new()
        }
    );
    assert_eq!(
        std::fs::read_to_string(a.home_outside().join("note")).ok(),
        Some("written on a\n".to_owned()),
        "what host a writes in its home, the test reads in home_outside()"
    );
    assert!(
        !b.home_outside().join("note").exists() && !b.run("test -e ~/note").status.success(),
        "host b has a home of its own: host a's file is not in it"
    );
}

#[test]
fn a_host_has_no_network_but_its_own_loopback() {
    let Some(host) = SshHost::start("net", &[]) else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'");

    let local = Command::new("sh").args(["-c", &connect]).output().unwrap();
    assert!(
        local.status.success(),
        "the test reaches its own listener: {local:?}"
    );
    let remote = host.run(&connect);
    assert!(
        !remote.status.success(),
        "the host's 127.0.0.1 is its own, where the test's port is not open: {remote:?}"
    );

    let devices = host.run("cat /proc/net/dev");
    assert!(devices.status.success(), "{devices:?}");
    let names: Vec<String> = String::from_utf8(devices.stdout)
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|line| Some(line.split(':').next()?.trim().to_owned()))
        .collect();
    assert_eq!(
        names,
        ["lo"],
        "the host's only network device is its loopback"
    );
}

/// 1 MiB holding every byte value, line ends of both kinds and ssh's escape sequence
/// (`~.` after a newline), the rest pseudo-random.
fn binary_payload() -> Vec<u8> {
    let mut data: Vec<u8> = (0..=255).collect();
    data.extend_from_slice(b"\n~.\n~?\r\n\0\n~C\n");
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < 1 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        data.push(state.to_le_bytes()[3]);
    }
    data
}

#[test]
fn the_launcher_is_a_clean_binary_pipe() {
    let Some(host) = SshHost::start("pipe", &[]) else {
        return;
    };
    let sent = binary_payload();
    let started = Instant::now();
    let mut cat = launch(&host, "cat");
    let mut stdin = cat.stdin.take().unwrap();
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || stdin.write_all(&sent))
    };
    let mut received = Vec::new();
    cat.stdout
        .take()
        .unwrap()
        .read_to_end(&mut received)
        .unwrap();
    writer.join().unwrap().unwrap();
    let output = cat.wait_with_output().unwrap();
    assert!(output.status.success(), "remote cat failed: {output:?}");
    assert!(
        output.stderr.is_empty(),
        "nothing but the command's own output is printed: {:?}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        received == sent,
        "1 MiB through `<launcher> cat` comes back byte for byte ({} bytes sent, {} \
         received, first difference at {:?})",
        sent.len(),
        received.len(),
        sent.iter().zip(&received).position(|(a, b)| a != b)
    );
    eprintln!("1 MiB round trip over ssh: {:?}", started.elapsed());
}

/// Waits up to 10 s for `child` to exit; its exit status, or None if it still runs.
fn exited(child: &mut Child) -> Option<std::process::ExitStatus> {
    within_10s(|| child.try_wait().unwrap())
}

#[test]
fn remote_processes_are_found_signalled_and_gone_with_the_host() {
    let Some(host) = SshHost::start("procs", &[]) else {
        return;
    };
    let Some(other) = SshHost::start("other", &[]) else {
        return;
    };
    let mut sleeper = launch(&host, "sleep 300");
    let found = within_10s(|| Some(host.pids("sleep 300")).filter(|pids| !pids.is_empty()));
    let pids = found.expect("the remote `sleep 300` shows up in host.pids");
    assert_eq!(pids.len(), 1, "one remote sleep: {pids:?}");
    assert_eq!(
        other.pids("sleep 300"),
        Vec::<i32>::new(),
        "another host's processes are not this one's"
    );

    assert_eq!(host.signal("sleep 300", Signal::SIGKILL), 1);
    let status = exited(&mut sleeper).expect("the ssh client exits once its command is killed");
    assert!(
        !status.success(),
        "a command killed by a signal is a failure for the launcher: {status:?}"
    );
    assert_eq!(host.pids("sleep 300"), Vec::<i32>::new());

    // A session still running when the host goes: dropping the host ends it, and every
    // process that lived on the host.
    let mut left_running = launch(&host, "sleep 301");
    within_10s(|| Some(()).filter(|()| !host.pids("sleep 301").is_empty()))
        .expect("the second remote sleep starts");
    let lived = host.pids("");
    assert!(
        lived.len() >= 2,
        "the sleep and its sshd live on the host: {lived:?}"
    );
    drop(host);
    assert!(
        exited(&mut left_running).is_some(),
        "dropping the host ends the ssh sessions to it"
    );
    assert_eq!(
        processes::settled(|| lived
            .iter()
            .copied()
            .filter(|pid| !processes::is_gone(*pid))
            .collect()),
        Vec::<i32>::new(),
        "no process of a dropped host outlives it"
    );
}
