//! Workers on other machines (`grove run --remote`): trees opened on a host through a
//! launcher, their tools, commands and checks run there, their work merged here.
//! The launchers here are real processes: a plain one (`env`, the host a directory of its
//! own) and OpenSSH in a namespace of its own (`support::ssh_host`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{Grove, grove_in, only_run, stderr};
use crate::support::requests::role;

/// A lead that delegates one subtask per path, workers that write the file and copy it
/// with `bash` (a command that must run where the tree is), and a reviewer that approves.
pub(crate) fn scripted(paths: &'static [&'static str]) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let done = !request.tool_results().is_empty();
        let turn = match (role(request), done) {
            ("lead", false) => paths
                .iter()
                .enumerate()
                .fold(Turn::new(), |turn, (i, path)| {
                    turn.tool_use(
                        &format!("d{i}"),
                        "delegate",
                        json!({ "task": format!("WRITE {path}") }),
                    )
                }),
            ("worker", false) => {
                let brief = request.last_user_text();
                let path = brief.split(' ').nth(1).unwrap().trim();
                Turn::new()
                    .tool_use(
                        "w1",
                        "write_file",
                        json!({ "path": path, "content": format!("{path} was written\n") }),
                    )
                    .tool_use(
                        "w2",
                        "bash",
                        json!({ "command": format!("cp {path} {path}.copy && ls") }),
                    )
            }
            ("reviewer", false) => approve(),
            (_, true) => Turn::text("done"),
            _ => unreachable!(),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

/// A reviewer's turn that approves.
pub(crate) fn approve() -> Turn {
    Turn::new().tool_use(
        "r1",
        "submit_verdict",
        json!({ "verdict": "approve", "summary": "fine" }),
    )
}

/// A lead that delegates `task`, a worker that runs `command` once, and a reviewer that
/// approves.
fn one_command(task: &'static str, command: &'static str) -> impl Fn(&RecordedRequest) -> Reply {
    move |request| {
        let turn = match (role(request), request.tool_results().len()) {
            ("lead", 0) => Turn::new().tool_use("d0", "delegate", json!({ "task": task })),
            ("worker", 0) => Turn::new().tool_use("w1", "bash", json!({ "command": command })),
            ("reviewer", 0) => approve(),
            _ => Turn::text("done"),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

pub(crate) const PATHS: &[&str] = &["a.txt", "b.txt", "c.txt"];

/// Writes `text` as the user's own grove configuration of `fixture`.
pub(crate) fn user_config(fixture: &GitFixture, text: &str) {
    let dir = fixture.home().join(".config/grove");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), text).unwrap();
}

/// `[remote.NAME]` tables for `hosts` (name, launcher) in the user's configuration of
/// `fixture`, the grove on the far side being this build's.
pub(crate) fn configure_hosts(fixture: &GitFixture, hosts: &[(&str, String)]) {
    let tables: String = hosts
        .iter()
        .map(|(name, launch)| {
            format!(
                "[remote.{name}]\nlaunch = {launch:?}\nprogram = {:?}\nslots = 2\ntimeout_s = 3\n\n",
                env!("CARGO_BIN_EXE_grove")
            )
        })
        .collect();
    user_config(fixture, &tables);
}

pub(crate) fn with_check(fixture: &GitFixture) {
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = \"ls *.copy\"\nsubtask = \"require\"\nbase = \"skip\"\n",
    );
    fixture.commit_all("a check that needs a worker's command to have run in the tree");
}

/// The tree of the user's branch after a run.
pub(crate) fn result_tree(fixture: &GitFixture) -> String {
    fixture.git(&["rev-parse", "HEAD^{tree}"]).trim().to_owned()
}

pub(crate) fn statuses(report: &Value) -> Vec<String> {
    report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|subtask| subtask["status"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_subtasks_on_two_hosts_merge_here_byte_identical_to_a_local_run() {
    let local = GitFixture::with_files(&[("README", "r\n")]);
    with_check(&local);
    let server = FakeServer::with_responder(scripted(PATHS)).await;
    let output = grove_in(
        &local,
        Some(&server),
        &["run", "--json", "write three files"],
    )
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let remote = GitFixture::with_files(&[("README", "r\n")]);
    with_check(&remote);
    let hosts = tempfile::tempdir().unwrap();
    let launcher = |name: &str| {
        format!(
            "env GROVE_REMOTE_HOME={}",
            hosts.path().join(name).display()
        )
    };
    configure_hosts(&remote, &[("a", launcher("a")), ("b", launcher("b"))]);
    let server = FakeServer::with_responder(scripted(PATHS)).await;
    let output = grove_in(
        &remote,
        Some(&server),
        &["run", "--json", "--remote", "a,b", "write three files"],
    )
    .await;
    server.assert_no_violations();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&output),
        String::from_utf8_lossy(&output.stdout)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        statuses(&report),
        ["merged"; 3],
        "every remote subtask is merged: {report:#}"
    );
    assert_eq!(
        result_tree(&remote),
        result_tree(&local),
        "the result of remote workers is the result of local ones, byte for byte"
    );
    let copy = remote.git(&["show", "HEAD:b.txt.copy"]);
    assert_eq!(
        copy, "b.txt was written",
        "the worker's command ran in its tree"
    );
    for host in ["a", "b"] {
        let home = hosts.path().join(host);
        assert_eq!(
            entries(&home),
            ["mirrors", "trees"],
            "host {host} keeps a mirror and its trees' folder"
        );
        let trees: Vec<String> = entries(&home.join("trees"))
            .iter()
            .flat_map(|repo| entries(&home.join("trees").join(repo)))
            .collect();
        assert_eq!(
            trees,
            Vec::<String>::new(),
            "host {host} removed its trees at the end"
        );
    }
    let stderr = stderr(&output);
    assert!(
        stderr.contains("works on remote host `a`") && stderr.contains("works on remote host `b`"),
        "the workers went to both hosts by their free slots: {stderr}"
    );
}

#[tokio::test]
async fn a_host_the_user_did_not_define_or_a_repository_defines_is_refused() {
    let fixture = GitFixture::with_files(&[("a.txt", "a\n")]);
    configure_hosts(&fixture, &[("a", "env".to_owned())]);
    let unknown = grove_in(&fixture, None, &["run", "--remote", "b", "x"]).await;
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no remote host `b`")
            && stderr(&unknown).contains("it defines: a"),
        "{}",
        stderr(&unknown)
    );
    fixture.write(
        ".grove/config.toml",
        "[remote.evil]\nlaunch = \"sh -c 'touch /tmp/pwned'\"\n",
    );
    fixture.commit_all("a repository that defines a launcher");
    let refused = grove_in(&fixture, None, &["run", "--remote", "a", "x"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("a repository cannot set this"),
        "{}",
        stderr(&refused)
    );
}

/// A worker that writes `kept.txt` (checkpointed after its turn), then runs a long
/// command that marks its start, then, answered in any way, finishes.
pub(crate) fn long_worker(request: &RecordedRequest) -> Reply {
    let turn = match (role(request), request.tool_results().len()) {
        ("lead", 0) => Turn::new().tool_use("d0", "delegate", json!({ "task": "work long" })),
        ("worker", 0) => Turn::new().tool_use(
            "w1",
            "write_file",
            json!({ "path": "kept.txt", "content": "kept\n" }),
        ),
        ("worker", 1) => Turn::new().tool_use(
            "w2",
            "bash",
            json!({ "command": "touch started && sleep 120", "timeout_s": 300 }),
        ),
        ("reviewer", 0) => approve(),
        _ => Turn::text("done"),
    };
    turn.usage(10, 2, 0, 0).into()
}

/// The pids of the exec-servers serving host directory `home` (not the processes they
/// forked for commands, which share their command line and environment).
pub(crate) fn servers_of(home: &Path) -> Vec<i32> {
    let wanted = format!("GROVE_REMOTE_HOME={}", home.display());
    let serves = |pid: i32| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains("exec-server")
            && environ
                .split(|byte| *byte == 0)
                .any(|var| var == wanted.as_bytes())
    };
    let parent = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_name = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
        after_name
            .split(' ')
            .nth(1)
            .and_then(|ppid| ppid.parse::<i32>().ok())
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| serves(*pid) && !parent(*pid).is_some_and(serves))
        .collect()
}

/// Waits until a file called `name` exists in a tree of one of `hosts`; that host.
async fn host_with(hosts: &Path, names: &[&str], name: &str) -> String {
    for _ in 0..600 {
        for host in names {
            let trees = hosts.join(host).join("trees");
            let found = entries(&trees).iter().any(|repo| {
                entries(&trees.join(repo))
                    .iter()
                    .any(|tree| trees.join(repo).join(tree).join(name).exists())
            });
            if found {
                return (*host).to_owned();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("no host's tree got {name} within a minute");
}

/// Starts a one-subtask run on hosts `a` and `b` whose worker's command hangs, waits
/// for the command, does `fault` to the host it runs on, and returns the run's output
/// and that host.
async fn fault_mid_worker(
    fault: nix::sys::signal::Signal,
) -> (std::process::Output, String, GitFixture) {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let hosts = tempfile::tempdir().unwrap();
    let launcher = |name: &str| {
        format!(
            "env GROVE_REMOTE_HOME={}",
            hosts.path().join(name).display()
        )
    };
    configure_hosts(&fixture, &[("a", launcher("a")), ("b", launcher("b"))]);
    let server = FakeServer::with_responder(long_worker).await;
    let run = {
        let fixture = &fixture;
        let server = &server;
        async move {
            grove_in(
                fixture,
                Some(server),
                &["run", "--json", "--remote", "a,b", "work long"],
            )
            .await
        }
    };
    let hit = async {
        let host = host_with(hosts.path(), &["a", "b"], "started").await;
        let pids = servers_of(&hosts.path().join(&host));
        assert_eq!(
            pids.len(),
            1,
            "one exec-server serves the one tree on {host}"
        );
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pids[0]), fault).unwrap();
        host
    };
    let (output, host) = tokio::join!(run, hit);
    if fault == nix::sys::signal::Signal::SIGSTOP {
        for pid in servers_of(&hosts.path().join(&host)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    (output, host, fixture)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_killed_mid_worker_moves_the_tree_to_the_other_host_at_its_last_checkpoint() {
    let (output, lost, fixture) = fault_mid_worker(nix::sys::signal::Signal::SIGKILL).await;
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let other = if lost == "a" { "b" } else { "a" };
    assert!(
        stderr.contains(&format!(
            "lost remote host `{lost}`; its tree moved to `{other}`"
        )),
        "the move is named: {stderr}"
    );
    assert_eq!(
        fixture.git(&["show", "HEAD:kept.txt"]),
        "kept",
        "the work checkpointed on the lost host reached the result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_that_hangs_is_found_by_its_silence_and_its_tree_moves() {
    let started = std::time::Instant::now();
    let (output, lost, fixture) = fault_mid_worker(nix::sys::signal::Signal::SIGSTOP).await;
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("lost remote host `{lost}`"))
            && stderr.contains("answered no ping"),
        "the hang is named as such: {stderr}"
    );
    assert_eq!(fixture.git(&["show", "HEAD:kept.txt"]), "kept");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(100),
        "a hung host is given up on after its timeout, never waited for: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn another_grove_version_on_the_host_is_a_clear_error_naming_both() {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let dir = tempfile::tempdir().unwrap();
    // A grove of another version: it answers the greeting with its own version.
    let other = dir.path().join("old-grove");
    std::fs::write(
        &other,
        "#!/bin/sh\nread line\nprintf '%s\\n' '{\"id\":1,\"ok\":{\"hello\":{\"version\":\"0.0.1\",\"protocol\":1}}}'\nread rest\n",
    )
    .unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    user_config(
        &fixture,
        &format!(
            "[remote.old]\nlaunch = \"env\"\nprogram = {:?}\n",
            other.display().to_string()
        ),
    );
    let server = FakeServer::with_responder(scripted(&["a.txt"])).await;
    let output = grove_in(
        &fixture,
        Some(&server),
        &["run", "--json", "--remote", "old", "x"],
    )
    .await;
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let reason = report["subtasks"][0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!(
            "could not open the worktree on a remote host: remote host `old` runs grove \
             0.0.1, this is grove {}: install grove {} there (or point `[remote.old] \
             program` at it)",
            env!("CARGO_PKG_VERSION"),
            env!("CARGO_PKG_VERSION")
        ),
        "the subtask fails naming both versions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_interrupted_on_a_host_resumes_here_or_on_a_host_from_its_last_checkpoint() {
    for again_remote in [false, true] {
        let fixture = GitFixture::with_files(&[("README", "r\n")]);
        let hosts = tempfile::tempdir().unwrap();
        let launcher = format!("env GROVE_REMOTE_HOME={}", hosts.path().join("a").display());
        configure_hosts(&fixture, &[("a", launcher)]);
        let server = FakeServer::with_responder(long_worker).await;
        let grove = Grove::in_repo(&fixture).with_server(&server);
        let watched = grove
            .spawn_until(["run", "--remote", "a", "work long"], |line| {
                line.contains("works on remote host `a`")
            })
            .await;
        host_with(hosts.path(), &["a"], "started").await;
        watched.signal(nix::sys::signal::Signal::SIGINT);
        let stopped = watched.output().await;
        assert_eq!(stopped.status.code(), Some(130), "{}", stderr(&stopped));
        assert_eq!(
            servers_of(&hosts.path().join("a")),
            Vec::<i32>::new(),
            "the host's exec-server ended with its connection, before grove did"
        );
        let run_id = only_run(&grove).await;
        let mut args = vec!["resume", "--json", run_id.as_str()];
        if again_remote {
            args.extend(["--remote", "a"]);
        }
        let resumed = grove.grove_async(args).await;
        let said = stderr(&resumed);
        assert_eq!(resumed.status.code(), Some(0), "{said}");
        let expected = if again_remote {
            "works on remote host `a`"
        } else {
            "it continues on this machine from its last checkpoint"
        };
        assert!(
            said.contains(expected),
            "remote again: {again_remote}: {said}"
        );
        assert_eq!(
            fixture.git(&["show", "HEAD:kept.txt"]),
            "kept",
            "the work checkpointed before the interrupt reached the result"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_without_grove_gets_this_one_shipped_over_its_launcher_once() {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let host = tempfile::tempdir().unwrap();
    // The launcher starts in the host's directory, as ssh starts in a home directory;
    // the host has no `grove-not-installed`.
    user_config(
        &fixture,
        &format!(
            "[remote.bare]\nlaunch = \"env -C {0} GROVE_REMOTE_HOME={0}\"\nprogram = \"grove-not-installed\"\n",
            host.path().display()
        ),
    );
    for (attempt, paths) in [("first", &["a.txt"]), ("second", &["b.txt"])] {
        let server = FakeServer::with_responder(scripted(paths)).await;
        let output = grove_in(&fixture, Some(&server), &["run", "--remote", "bare", "x"]).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{attempt}: {}",
            stderr(&output)
        );
    }
    let shipped = host.path().join(grove::remote::ship::shipped_program());
    assert_eq!(
        std::fs::read(&shipped).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_grove")).unwrap(),
        "the host got this very grove"
    );
    assert_eq!(
        entries(shipped.parent().unwrap()),
        [shipped.file_name().unwrap().to_string_lossy().into_owned()],
        "one binary, no part left over from a shipment"
    );
    assert_eq!(
        fixture.git(&["show", "HEAD:a.txt.copy"]),
        "a.txt was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_trees_commands_see_no_other_tree_on_the_host_but_the_mirrors_git_data() {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let hosts = tempfile::tempdir().unwrap();
    let home = hosts.path().join("a");
    configure_hosts(
        &fixture,
        &[("a", format!("env GROVE_REMOTE_HOME={}", home.display()))],
    );
    let probe: &'static str = format!(
        "echo TREES=$(ls {0}/trees | wc -l); ls {0}/mirrors; echo MIRRORS=$?; \
         ls \"$(git rev-parse --git-common-dir)/objects\" > /dev/null; echo GIT=$?; \
         echo probed > p.txt",
        home.display()
    )
    .leak();
    let server = FakeServer::with_responder(one_command("probe", probe)).await;
    let output = grove_in(&fixture, Some(&server), &["run", "--remote", "a", "probe"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let seen: String = server
        .requests()
        .iter()
        .filter(|request| role(request) == "worker")
        .flat_map(|request| request.tool_results())
        .map(|(_, content)| content)
        .collect();
    assert!(
        seen.contains("TREES=1\n") && seen.contains("MIRRORS=2\n"),
        "the host's other trees and its mirrors' folder do not exist for the tree's \
         commands (its trees' folder holds its own alone): {seen}"
    );
    assert!(
        seen.contains("GIT=0\n"),
        "the mirror's git data is there, through the tree's own git, as the repository's \
         is to a local worker: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_only_host_lost_mid_worker_fails_its_subtask_naming_it_and_keeps_its_checkpoint() {
    let fixture = GitFixture::with_files(&[("README", "r\n")]);
    let hosts = tempfile::tempdir().unwrap();
    let home = hosts.path().join("a");
    configure_hosts(
        &fixture,
        &[("a", format!("env GROVE_REMOTE_HOME={}", home.display()))],
    );
    let server = FakeServer::with_responder(long_worker).await;
    let run = grove_in(
        &fixture,
        Some(&server),
        &["run", "--json", "--remote", "a", "work long"],
    );
    let hit = async {
        host_with(hosts.path(), &["a"], "started").await;
        for pid in servers_of(&home) {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        }
    };
    let (output, ()) = tokio::join!(run, hit);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let subtask = &report["subtasks"][0];
    let reason = subtask["reason"].as_str().unwrap();
    assert!(
        subtask["status"] == "failed" && reason.contains("lost remote host `a`"),
        "the subtask fails naming the host it lost: {subtask:#}"
    );
    let archived = fixture.git(&["for-each-ref", "--format=%(refname)", "refs/grove/archive"]);
    assert!(!archived.is_empty(), "its work is archived, never dropped");
    assert_eq!(
        fixture.git(&[
            "show",
            &format!("{}:kept.txt", archived.lines().next().unwrap())
        ]),
        "kept",
        "the checkpoint made before the host was lost is kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_remote_tree_gets_its_setup_there_and_never_the_users_local_files() {
    let fixture = GitFixture::with_files(&[("README", "r\n"), (".gitignore", "made-by-setup\n")]);
    fixture.write(
        ".grove/config.toml",
        "[worktree]\nsetup = \"echo set up > made-by-setup\"\ncopy = [\".env\"]\n",
    );
    fixture.commit_all("a setup command and a local-only file");
    fixture.write(".env", "SECRET=1\n");
    let trusted = grove_in(&fixture, None, &["trust"]).await;
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    let hosts = tempfile::tempdir().unwrap();
    let home = hosts.path().join("a");
    configure_hosts(
        &fixture,
        &[("a", format!("env GROVE_REMOTE_HOME={}", home.display()))],
    );
    let server = FakeServer::with_responder(one_command(
        "look",
        "cat made-by-setup > seen.txt; ls -a >> seen.txt",
    ))
    .await;
    let output = grove_in(&fixture, Some(&server), &["run", "--remote", "a", "look"]).await;
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let seen = fixture.git(&["show", "HEAD:seen.txt"]);
    assert!(
        seen.starts_with("set up\n"),
        "the setup ran in the remote tree before the worker: {seen}"
    );
    assert!(
        !seen.contains(".env"),
        "the local-only file stayed here: {seen}"
    );
    assert!(
        said.contains("the local-only files (.env) are not sent there"),
        "{said}"
    );
}
