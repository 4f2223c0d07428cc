//! Workers on other machines (`grove run --remote`): trees opened on a host through a
//! launcher, their tools, commands and checks run there, their work merged here.
//! The launchers here are real processes: a plain one (`env`, the host a directory of its
//! own) and OpenSSH in a namespace of its own (`support::ssh_host`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::grove::{grove_in, stderr};
use crate::support::requests::role;

/// A lead that delegates one subtask per path, workers that write the file and copy it
/// with `bash` (a command that must run where the tree is), and a reviewer that approves.
fn scripted(paths: &'static [&'static str]) -> impl Fn(&RecordedRequest) -> Reply {
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
            ("reviewer", false) => Turn::new().tool_use(
                "r1",
                "submit_verdict",
                json!({ "verdict": "approve", "summary": "fine" }),
            ),
            (_, true) => Turn::text("done"),
            _ => unreachable!(),
        };
        turn.usage(10, 2, 0, 0).into()
    }
}

const PATHS: &[&str] = &["a.txt", "b.txt", "c.txt"];

/// `[remote.NAME]` tables for `hosts` (name, launcher) in the user's configuration of
/// `fixture`, the grove on the far side being this build's.
fn configure_hosts(fixture: &GitFixture, hosts: &[(&str, String)]) {
    let dir = fixture.home().join(".config/grove");
    std::fs::create_dir_all(&dir).unwrap();
    let tables: String = hosts
        .iter()
        .map(|(name, launch)| {
            format!(
                "[remote.{name}]\nlaunch = {launch:?}\nprogram = {:?}\nslots = 2\ntimeout_s = 10\n\n",
                env!("CARGO_BIN_EXE_grove")
            )
        })
        .collect();
    std::fs::write(dir.join("config.toml"), tables).unwrap();
}

fn with_check(fixture: &GitFixture) {
    fixture.write(
        ".grove/config.toml",
        "[check]\ncommand = \"ls *.copy\"\nsubtask = \"require\"\nbase = \"skip\"\n",
    );
    fixture.commit_all("a check that needs a worker's command to have run in the tree");
}

/// The tree of the user's branch after a run.
fn result_tree(fixture: &GitFixture) -> String {
    fixture.git(&["rev-parse", "HEAD^{tree}"]).trim().to_owned()
}

fn statuses(report: &Value) -> Vec<String> {
    report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|subtask| subtask["status"].as_str().unwrap().to_owned())
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
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
