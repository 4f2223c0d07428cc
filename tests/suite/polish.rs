//! What users touch around a run: `--dry-run`, help with examples on every command,
//! shell completions, and `NO_COLOR`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::fake_server::{FakeServer, Turn};
use crate::support::grove::{Grove, grove_in as grove, stderr};
use crate::support::requests::{Who, who};
use crate::support::scripted_run::{repo_with_rules, usage};

/// `--dry-run` shows the lead's plan and leaves no trace: no worker or reviewer is
/// called, no worktree, branch or run is created, the user's files are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dry_run_prints_the_plan_and_leaves_no_trace() {
    let fixture = repo_with_rules();
    let before = fixture.user_state();
    let server = FakeServer::with_responder(|request| {
        assert_eq!(who(request), Who::Lead, "only the lead runs in a dry run");
        let turn = match request.tool_results().len() {
            0 => Turn::text("Two steps.")
                .tool_use(
                    "d1",
                    "delegate",
                    json!({"task": "Rename alpha in src/a.txt."}),
                )
                .tool_use(
                    "d2",
                    "delegate",
                    json!({"task": "Update the docs.", "agent": "no-such-agent"}),
                ),
            // The second call was refused: the lead retries it with a worker.
            2 => Turn::text("Retrying.").tool_use(
                "d3",
                "delegate",
                json!({"task": "Update the docs.", "mode": "fork"}),
            ),
            _ => Turn::text("Plan: rename, then docs."),
        };
        usage(turn).into()
    })
    .await;

    let output = grove(
        &fixture,
        Some(&server),
        &["run", "--dry-run", "--json", "rename alpha"],
    )
    .await;
    server.assert_no_violations();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (&plan["subtasks"], &plan["summary"], &plan["stopped"]),
        (
            &json!([
                {"id": "S1", "task": "Rename alpha in src/a.txt.", "mode": "isolated", "agent": "worker"},
                {"id": "S2", "task": "Update the docs.", "mode": "fork", "agent": "worker"},
            ]),
            &json!("Plan: rename, then docs."),
            &Value::Null
        )
    );
    let mut tools = server.requests()[0].tool_names();
    tools.sort();
    assert_eq!(
        tools,
        [
            "delegate",
            "grep",
            "list_files",
            "read_file",
            "show_subtask",
            "wait"
        ],
        "the dry run's lead has the tools a run's lead has, so a plan meets no unknown tool"
    );
    let refused = &server.requests()[1].tool_results();
    assert!(
        refused[1].1.contains("there is no agent `no-such-agent`"),
        "a delegation is checked as in a real run: {refused:?}"
    );
    let text = stderr(&output);
    assert!(
        text.contains("Dry run: the lead would delegate 2 subtasks")
            && text.contains("S2 [fork, worker]\n    Update the docs."),
        "{text}"
    );
    // The price of running the plan: the plan's two subtasks, the default model's rates.
    let estimate = &plan["estimate"];
    let (low, high) = (
        estimate["low_usd"].as_f64().unwrap(),
        estimate["high_usd"].as_f64().unwrap(),
    );
    assert_eq!(
        (
            &estimate["subtasks"],
            &estimate["planned"],
            estimate["roles"].as_array().map(Vec::len),
            &estimate["unpriced"],
        ),
        (&json!([2, 2]), &json!(true), Some(3), &json!([])),
        "an estimate per role from the plan's subtasks: {estimate}"
    );
    assert!(0.0 < low && low < high, "a range: {estimate}");
    assert!(
        plan["plan_usd"].as_f64().unwrap() > 0.0,
        "the plan's own cost"
    );
    let block: String = text
        .lines()
        .skip_while(|line| !line.starts_with("Estimated cost"))
        .take_while(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("dry_run_estimate", block);
    assert_eq!(
        fixture.user_state(),
        before,
        "the user's files are untouched"
    );
    assert_eq!(
        fixture.git(&["for-each-ref", "--format=%(refname)"]),
        "refs/heads/main",
        "no branch is created"
    );
    assert!(
        !fixture.repo.join(".git/grove").exists(),
        "no run, lock or worktree is created"
    );
}

/// `grove ARGS` outside any repository, through the one sealed runner.
fn grove_sync(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    Grove::new(dir.path(), dir.path()).grove(args)
}

/// The subcommands `grove --help` lists, so a new command is checked without a list here.
fn subcommands() -> Vec<String> {
    let help = String::from_utf8(grove_sync(&["--help"]).stdout).unwrap();
    let commands: Vec<String> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect();
    assert!(
        commands.len() >= 7,
        "grove --help lists its commands: {help}"
    );
    commands
}

#[test]
fn every_command_has_help_with_examples() {
    // The top level (no command) first: `grove --help` is what a newcomer reads first.
    let commands = std::iter::once(None).chain(subcommands().into_iter().map(Some));
    for command in commands {
        let args: Vec<&str> = command
            .iter()
            .map(String::as_str)
            .chain(["--help"])
            .collect();
        let command = command.as_deref().unwrap_or("(no command)");
        let output = grove_sync(&args);
        let help = String::from_utf8(output.stdout).unwrap();
        assert_eq!(output.status.code(), Some(0), "grove {command} --help");
        let examples: Vec<&str> = help
            .lines()
            .skip_while(|line| *line != "Examples:")
            .skip(1)
            .filter(|line| line.trim_start().starts_with("grove "))
            .collect();
        assert!(
            !examples.is_empty(),
            "`grove {command} --help` shows at least one example:\n{help}"
        );
    }
}

#[test]
fn completions_cover_every_command_and_the_bash_script_parses() {
    let commands = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = grove_sync(&["completions", shell]);
        assert_eq!(output.status.code(), Some(0), "grove completions {shell}");
        let script = String::from_utf8(output.stdout).unwrap();
        for command in &commands {
            assert!(
                script.contains(command.as_str()),
                "the {shell} completions know `{command}`"
            );
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("grove.bash");
    std::fs::write(&script, grove_sync(&["completions", "bash"]).stdout).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "the bash completion script is valid bash: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let usage = grove_sync(&["completions", "tcsh"]);
    assert_eq!(
        usage.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// The output of `grove demo` run on a pseudo-terminal (util-linux `script`).
fn demo_on_a_terminal(no_color: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let command = format!(
        "{} demo --keep-dir {}",
        crate::support::grove::GROVE,
        dir.path().join("demo").display()
    );
    let mut grove = Grove::new(dir.path(), dir.path())
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR");
    if no_color {
        grove = grove.env("NO_COLOR", "1");
    }
    let mut script = std::process::Command::new("script");
    grove.seal(&mut script);
    script.args(["--quiet", "--return", "--command", &command, "/dev/null"]);
    let output = script.output().unwrap();
    assert_eq!(output.status.code(), Some(0), "the demo runs on a terminal");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn colour_on_a_terminal_and_none_with_no_color() {
    let colour = regex::Regex::new("\x1b\\[[0-9;]*m").unwrap();
    let coloured = demo_on_a_terminal(false);
    assert!(
        coloured.contains("\x1b[32mmerged\x1b[0m"),
        "statuses are coloured on a terminal:\n{coloured}"
    );
    let plain = demo_on_a_terminal(true);
    assert!(
        plain.contains("merged") && !colour.is_match(&plain),
        "NO_COLOR turns every colour off:\n{plain:?}"
    );
}
