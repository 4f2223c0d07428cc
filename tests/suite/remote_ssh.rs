//! Remote workers over a real OpenSSH server (`support::ssh_host`): each host a network
//! and mount namespace of its own that cannot see the local repository, so whatever its
//! workers and checks find there came over the pipe as git objects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::Value;

use crate::suite::remote::{
    PATHS, configure_hosts, entries, long_worker, result_tree, scripted, statuses, with_check,
};
use crate::support::fake_server::FakeServer;
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::processes;
use crate::support::ssh_host::SshHost;

/// Where the hosts' grove keeps its trees, as the test sees it.
fn trees(host: &SshHost) -> std::path::PathBuf {
    host.home_outside().join(".cache/grove/remote/trees")
}

fn has_file(trees: &Path, name: &str) -> bool {
    entries(trees).iter().any(|repo| {
        entries(&trees.join(repo))
            .iter()
            .any(|tree| trees.join(repo).join(tree).join(name).exists())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_subtasks_on_two_ssh_hosts_run_and_check_there_and_merge_here_as_a_local_run() {
    let local = GitFixture::with_files(&[("README", "r\n")]);
    with_check(&local);
    let server = FakeServer::with_responder(scripted(PATHS)).await;
    let output = grove_in(&local, Some(&server), &["run", "write three files"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let remote = GitFixture::with_files(&[("README", "r\n")]);
    with_check(&remote);
    let mine = remote.repo.parent().unwrap();
    let (Some(a), Some(b)) = (
        SshHost::start("grove-a", &[mine]),
        SshHost::start("grove-b", &[mine]),
    ) else {
        return;
    };
    configure_hosts(&remote, &[("a", a.launcher()), ("b", b.launcher())]);
    let server = FakeServer::with_responder(scripted(PATHS)).await;
    let output = grove_in(
        &remote,
        Some(&server),
        &["run", "--json", "--remote", "a,b", "write three files"],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(statuses(&report), ["merged"; 3]);
    assert_eq!(
        result_tree(&remote),
        result_tree(&local),
        "hosts that cannot see the repository give the local run's result, byte for byte"
    );
    for host in [&a, &b] {
        let mirrors = host.home_outside().join(".cache/grove/remote/mirrors");
        assert_eq!(entries(&mirrors).len(), 1, "each host keeps one mirror");
        assert!(
            entries(&trees(host))
                .iter()
                .all(|repo| entries(&trees(host).join(repo)).is_empty()),
            "each host removed its trees"
        );
    }
}

/// What a test does to the host a worker runs on.
#[derive(Clone, Copy)]
enum Fault {
    /// Kills its exec-server there.
    KillServer,
    /// Kills the ssh client here: the connection drops, the server lives on a moment.
    DropConnection,
}

/// A one-subtask run on two ssh hosts whose worker's command hangs; `fault` is done to the
/// host it runs on. The tree must move to the other host with its checkpoint.
async fn fault_over_ssh(fault: Fault) {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let mine = fixture.repo.parent().unwrap().to_path_buf();
    let (Some(a), Some(b)) = (
        SshHost::start("grove-a", &[&mine]),
        SshHost::start("grove-b", &[&mine]),
    ) else {
        return;
    };
    configure_hosts(&fixture, &[("a", a.launcher()), ("b", b.launcher())]);
    let server = FakeServer::with_responder(long_worker).await;
    let run = grove_in(
        &fixture,
        Some(&server),
        &["run", "--remote", "a,b", "work long"],
    );
    let hit = async {
        for _ in 0..600 {
            for (name, host) in [("a", &a), ("b", &b)] {
                if !has_file(&trees(host), "started") {
                    continue;
                }
                let hit = match fault {
                    Fault::KillServer => host.signal("exec-server", Signal::SIGKILL),
                    Fault::DropConnection => {
                        let config = host.ssh_config().display().to_string();
                        let clients = processes::running_with_arg(&config);
                        for pid in &clients {
                            nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL).unwrap();
                        }
                        clients.len()
                    }
                };
                assert!(hit >= 1, "the fault reached host {name}");
                return Some(name);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        None
    };
    let (output, lost) = tokio::join!(run, hit);
    let Some(lost) = lost else {
        panic!(
            "the worker's command never started on a host within a minute:\n{}",
            stderr(&output)
        );
    };
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("lost remote host `{lost}`; its tree moved")),
        "{said}"
    );
    assert_eq!(
        fixture.git(&["show", "HEAD:kept.txt"]),
        "kept",
        "the checkpoint made on the lost host reached the result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ssh_host_whose_server_is_killed_mid_worker_gives_its_tree_to_the_other() {
    fault_over_ssh(Fault::KillServer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ssh_connection_dropped_mid_worker_gives_the_tree_to_the_other_host() {
    fault_over_ssh(Fault::DropConnection).await;
}
