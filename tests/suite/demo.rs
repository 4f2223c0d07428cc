//! `grove demo` end to end: the real binary, a sealed environment with no API key, the
//! replay server on 127.0.0.1, and the sample repository inspected afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use pretty_assertions::assert_eq;
use serde_json::Value;

use grove::demo::sample::{CHECK_COMMAND, FILES, TARGETS};

use crate::support::git_fixture::git_in;
use crate::support::grove::Grove;

/// Runs `grove demo <args>` with only `PATH` and the sealed git env: no key of any kind.
async fn grove_demo(home: &Path, args: &[&str]) -> Output {
    Grove::new(home, home)
        .env("TMPDIR", home)
        .grove_async(["demo"].iter().chain(args))
        .await
}

fn original(path: &str) -> &'static str {
    FILES.iter().find(|(p, _)| *p == path).unwrap().1
}

/// Index of the first stderr line that starts with `prefix`.
fn line_index(lines: &[&str], prefix: &str) -> usize {
    lines
        .iter()
        .position(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{}", lines.join("\n")))
}

#[tokio::test]
async fn the_demo_runs_the_real_pipeline_with_no_key_and_keeps_the_sample() {
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let sample = temp.path().join("sample");

    let output = grove_demo(&home, &["--keep-dir", sample.to_str().unwrap(), "--json"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "a demo that went as scripted exits 0, its one rejection included:\n{stderr}"
    );

    // The live view: a replay label, three workers in flight before any finished a
    // turn (the replay holds their first replies until all three asked), the verdicts.
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].contains("REPLAY"),
        "the first line says it is a replay: {}",
        lines[0]
    );
    let first_worker_turn = line_index(&lines, "worker S1: turn 1 done")
        .min(line_index(&lines, "worker S2: turn 1 done"))
        .min(line_index(&lines, "worker S3: turn 1 done"));
    for label in ["S1", "S2", "S3"] {
        assert!(
            line_index(&lines, &format!("worker {label}: started")) < first_worker_turn,
            "every worker starts before any worker's first turn ends:\n{stderr}"
        );
        line_index(&lines, &format!("[worker {label} · steps=3 "));
        line_index(&lines, &format!("[reviewer {label} · steps=1 "));
    }
    // The sample's check (its unit tests) ran on each subtask, before its review.
    for label in ["S1", "S2", "S3"] {
        let passed = line_index(&lines, &format!("{label}: check passed in "));
        assert!(
            line_index(&lines, &format!("{label}: checking with `{CHECK_COMMAND}`")) < passed
                && passed < line_index(&lines, &format!("reviewer {label}: started")),
            "{label}'s check runs after its worker and before its reviewer:\n{stderr}"
        );
    }
    // And on the merged result, before main moves to it.
    let result_passed = line_index(&lines, "result: check passed in ");
    assert!(
        line_index(&lines, &format!("result: checking with `{CHECK_COMMAND}`")) < result_passed
            && result_passed
                < line_index(
                    &lines,
                    &format!("The result's check `{CHECK_COMMAND}` passed in "),
                )
            && result_passed < line_index(&lines, "main now has the result"),
        "the result's check runs, green, before the branch moves:\n{stderr}"
    );
    line_index(&lines, "S1: merged (reviewer: approve)");
    line_index(&lines, "S2: rejected (reviewer: reject)");
    line_index(&lines, "S3: merged (reviewer: approve)");
    line_index(&lines, "[lead · steps=2 ");
    line_index(&lines, "total: steps=15 ");
    // The scripted model is priced, and says so: the demo shows how costs look.
    let priced = line_index(
        &lines,
        "grove: demo: no money is spent; the scripted model's turns",
    );
    assert!(
        lines[priced].contains("(SCRIPTED MODEL, not a real bill)"),
        "the demo's prices are marked: {}",
        lines[priced]
    );
    let cost = line_index(&lines, "cost: $");
    assert!(
        lines[cost].contains("; estimated $"),
        "the end table shows the cost and the estimate: {}",
        lines[cost]
    );
    line_index(&lines, "This was a replay: no model was called.");
    line_index(&lines, "  shop/payments.py:9: adds `print(\"DEBUG charge\"");

    // The report on stdout, and the repository it describes.
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let total = report["cost"]["total_usd"].as_f64().unwrap();
    let per_subtask: f64 = report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["cost_usd"].as_f64().unwrap())
        .sum();
    assert!(
        total > 0.0
            && total >= per_subtask
            && report["cost"]["unpriced"] == Value::Array(Vec::new())
            && report["estimate"]["subtasks"] == serde_json::json!([3, 3]),
        "every agent is priced, the total holds the subtasks', the estimate is the plan's: \
         {}",
        report["cost"]
    );
    let outcomes: Vec<(&str, &str, &str)> = report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap(),
                s["status"].as_str().unwrap(),
                s["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("S1", "merged", "approve"),
            ("S2", "rejected", "reject"),
            ("S3", "merged", "approve"),
        ]
    );
    let checks: Vec<(&str, &str)> = report["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["check"]["on"].as_str().unwrap(),
                s["check"]["status"].as_str().unwrap(),
            )
        })
        .collect();
    let result_runs: Vec<&str> = report["check"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["on"] == "result")
        .map(|run| run["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        (
            report["check"]["command"].as_str(),
            report["check"]["status"].as_str(),
            result_runs,
            checks
        ),
        (
            Some(CHECK_COMMAND),
            Some("passed"),
            vec!["passed"],
            vec![("S1", "passed"), ("S2", "passed"), ("S3", "passed")]
        ),
        "--json tells each subtask's check: the stray print breaks no test, the reviewer \
         catches it"
    );
    assert!(
        report["subtasks"][0]["review_summary"]
            .as_str()
            .unwrap()
            .ends_with("Its check passed."),
        "the reviewer read the check: {}",
        report["subtasks"][0]["review_summary"]
    );
    assert_eq!(
        report["applied"],
        Value::Bool(true),
        "main moved to the result"
    );

    let sample = sample.canonicalize().unwrap();
    assert!(
        stderr.contains(&format!("  cd {}\n", sample.display())),
        "the epilogue says where the sample is:\n{stderr}"
    );
    let read = |path: &str| std::fs::read_to_string(sample.join(path)).unwrap();
    let [orders, payments, shipping] = [&TARGETS[0], &TARGETS[1], &TARGETS[2]];
    assert_eq!(read(orders.path), orders.edited(), "approved edit merged");
    assert_eq!(
        read(shipping.path),
        shipping.edited(),
        "approved edit merged"
    );
    assert_eq!(
        read(payments.path),
        original(payments.path),
        "the rejected edit is not merged"
    );
    let git = |args: &[&str]| git_in(&home, &sample, args);
    assert_eq!(
        git(&["status", "--porcelain"]),
        "",
        "the sample is left clean"
    );

    // The rejected work is archived, with its stray line, and the epilogue names it.
    let archive = report["subtasks"][1]["archive_ref"].as_str().unwrap();
    assert_eq!(
        git(&["for-each-ref", "--format=%(refname)", "refs/grove/archive"]),
        archive
    );
    assert_eq!(
        git(&["show", &format!("{archive}:{}", payments.path)]),
        payments.edited().trim_end(),
        "the archive holds the rejected edit"
    );
    assert!(
        stderr.contains(&format!("git -C {} show {archive}", sample.display())),
        "the epilogue shows how to look at the archive:\n{stderr}"
    );
}

#[tokio::test]
async fn the_demo_refuses_a_directory_that_is_not_empty_and_leaves_it_alone() {
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let busy = temp.path().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("keep.txt"), "mine\n").unwrap();

    let output = grove_demo(&home, &["--keep-dir", busy.to_str().unwrap()]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not empty"), "a clear reason: {stderr}");
    let entries: Vec<_> = std::fs::read_dir(&busy)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("keep.txt")]);
}
