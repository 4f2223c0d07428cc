//! Best of N in a scripted run: a lead that delegates one brief as several attempts,
//! workers that learn which attempt they are from their branch (`grove/<run>/<n>`), and
//! judges that pick the loud attempt or reject them all — what the attempts suites share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};

use grove::store::RunStore;
use grove::store::journal::{Entry, VerdictKind, read_journal};

use super::fake_server::{FakeServer, RecordedRequest, Reply, Turn};
use super::requests::{Who, who};
use super::scripted_run::{first_user_text, reviewer_reply, usage};

/// What every attempt writes to: `src/a.txt`.
pub const TARGET: &str = "src/a.txt";

/// A lead that delegates `task` with `attempts` (any JSON, so bad input too), waits for
/// it, and ends.
pub fn attempts_lead(request: &RecordedRequest, task: &str, attempts: &Value) -> Reply {
    let turn = match request.tool_results().len() {
        0 => Turn::text("Trying it several ways.").tool_use(
            "d1",
            "delegate",
            json!({"task": task, "attempts": attempts}),
        ),
        1 => Turn::text("Waiting.").tool_use("w1", "wait", json!({})),
        _ => Turn::text("Done."),
    };
    usage(turn).into()
}

/// The subtask number of the worker that sent `request`, once its first `bash` call (its
/// branch's name) is answered.
pub fn attempt_of(request: &RecordedRequest) -> Option<usize> {
    let (_, branch) = request.tool_results().into_iter().next()?;
    let line = branch.lines().next()?;
    line.strip_prefix("grove/")?
        .rsplit('/')
        .next()?
        .parse()
        .ok()
}

/// A worker that asks git which branch it is on, writes the `n`th of `contents` (S1
/// the first) to [`TARGET`], and ends.
pub fn labelled_worker(request: &RecordedRequest, contents: &[&str]) -> Reply {
    let turn = match request.tool_results().len() {
        0 => Turn::text("Which attempt is this?").tool_use(
            "w_branch",
            "bash",
            json!({"command": "git branch --show-current"}),
        ),
        1 => {
            let n = attempt_of(request).expect("the worker's branch names its subtask");
            Turn::text("Writing.").tool_use(
                "w_write",
                "write_file",
                json!({"path": TARGET, "content": format!("{}\n", contents[n - 1])}),
            )
        }
        _ => Turn::text("WORKER-FINAL: wrote it."),
    };
    usage(turn).into()
}

/// The judge's first message holds its `# How to judge` section; a reviewer's does not.
pub fn is_judge(request: &RecordedRequest) -> bool {
    who(request) == Who::Reviewer && first_user_text(request).contains("# How to judge")
}

/// The labels of the attempts the judge's first message shows, in order.
pub fn shown_attempts(text: &str) -> Vec<char> {
    text.split("\n# Attempt ")
        .skip(1)
        .filter_map(|section| section.chars().next())
        .collect()
}

/// A judge that reads the loud attempt's file through its tree, then picks the attempt
/// whose diff adds `RIGHT`, saying of each other one that it is not loud; an ordinary
/// reviewer approves.
pub fn picking_judge(request: &RecordedRequest) -> Reply {
    if !is_judge(request) {
        return reviewer_reply(request);
    }
    let text = first_user_text(request);
    let right = text
        .split("\n# Attempt ")
        .skip(1)
        .find(|section| section.contains("+RIGHT"))
        .and_then(|section| section.chars().next())
        .expect("one attempt adds RIGHT");
    let others: Vec<Value> = shown_attempts(&text)
        .into_iter()
        .filter(|label| *label != right)
        .map(
            |label| json!({"attempt": label.to_string(), "reason": format!("{label} is not loud")}),
        )
        .collect();
    let turn = match request.tool_results().len() {
        0 => Turn::new().tool_use(
            "j1",
            "read_file",
            json!({"path": TARGET, "attempt": right.to_string()}),
        ),
        1 => Turn::new().tool_use(
            "j2",
            "submit_verdict",
            json!({"verdict": "approve", "pick": right.to_string(),
                   "summary": "The loud one.", "not_picked": others}),
        ),
        _ => Turn::text("Verdict given."),
    };
    usage(turn).into()
}

/// A judge that rejects every attempt, saying why of each.
pub fn rejecting_judge(request: &RecordedRequest) -> Reply {
    if request.tool_results().is_empty() {
        let reasons: Vec<Value> = shown_attempts(&first_user_text(request))
            .into_iter()
            .map(|label| json!({"attempt": label.to_string(), "reason": format!("{label} whispers")}))
            .collect();
        return usage(Turn::new().tool_use(
            "j1",
            "submit_verdict",
            json!({"verdict": "reject", "summary": "None of them shouts.", "not_picked": reasons}),
        ))
        .into();
    }
    usage(Turn::text("Verdict given.")).into()
}

/// Every first message a judge got.
pub fn judge_briefs(server: &FakeServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|request| is_judge(request) && request.tool_results().is_empty())
        .map(first_user_text)
        .collect()
}

/// What the lead heard from its `wait` (its second tool result).
pub fn lead_heard(server: &FakeServer) -> String {
    server
        .requests()
        .iter()
        .filter(|request| who(request) == Who::Lead)
        .find(|request| request.tool_results().len() == 2)
        .expect("the lead waited")
        .tool_results()[1]
        .1
        .clone()
}

/// The lead's first tool results as `(is_error, text)`, in call order.
pub fn lead_results(server: &FakeServer) -> Vec<(bool, String)> {
    let requests = server.requests();
    let answered = requests
        .iter()
        .filter(|request| who(request) == Who::Lead)
        .find(|request| !request.tool_results().is_empty())
        .expect("the lead's calls were answered");
    answered
        .messages()
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|block| {
            let text = match &block["content"] {
                Value::String(text) => text.clone(),
                blocks => blocks
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
            };
            (block["is_error"] == json!(true), text)
        })
        .collect()
}

/// The records of run `run_id`'s journal in `repo`.
pub fn journal(repo: &Path, run_id: &str) -> Vec<Entry> {
    let path = RunStore::new(&repo.join(".git"))
        .run_dir(&run_id.parse().unwrap())
        .join("journal.jsonl");
    read_journal(&path)
        .unwrap()
        .records
        .into_iter()
        .map(|record| record.entry)
        .collect()
}

/// The journal's verdicts as `(subtask, verdict, summary)`, in journal order.
pub fn verdicts(entries: &[Entry]) -> Vec<(String, VerdictKind, String)> {
    entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Verdict {
                subtask,
                verdict,
                summary,
                ..
            } => Some((subtask.to_string(), *verdict, summary.clone())),
            _ => None,
        })
        .collect()
}
