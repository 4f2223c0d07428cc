//! The end of a run as data: what `grove run --json` prints and the CLI renders.
//!
//! The field names of [`RunReport`] and [`SubtaskReport`] are a contract (DESIGN.md):
//! `run_id`, `status`, `base`, `result_commit`, `applied`, and per subtask `id`, `task`,
//! `branch`, `status`, `verdict`, `steps`, `input_tokens`, `output_tokens`. Add fields,
//! never rename them.

use serde::Serialize;

use crate::agent::Ledger;
use crate::git::DiffStat;
use crate::store::journal::{Finding, SubtaskOutcome, VerdictKind};

/// How a whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunEnd {
    /// The lead finished; see the subtasks for what was merged.
    Finished,
    /// Stopped by the user (Ctrl-C); resumable.
    Interrupted,
    /// Paused by grove because the model API failed past its retries; resumable.
    Paused,
    /// Stopped on an error.
    Failed,
}

/// One subtask as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubtaskReport {
    /// The label, e.g. `S2`.
    pub id: String,
    /// The brief the lead wrote.
    pub task: String,
    /// The subtask's branch, `grove/<run>/<n>` (deleted once merged or archived).
    pub branch: String,
    pub status: SubtaskOutcome,
    /// The reviewer's verdict; `None` when no review happened.
    pub verdict: Option<VerdictKind>,
    /// Model turns of the worker and the reviewer together.
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Why the subtask is not merged (or a note about it), in one sentence.
    pub reason: Option<String>,
    pub review_summary: Option<String>,
    pub findings: Vec<Finding>,
    pub diffstat: Option<DiffStat>,
    /// Paths that conflicted with the result, when `status` is `conflict`.
    pub conflict_paths: Vec<String>,
    /// Where rejected, failed or conflicting work was kept.
    pub archive_ref: Option<String>,
    /// Changed paths that run on the host or in CI later (build scripts, workflows...),
    /// flagged for a human whatever the reviewer decided.
    pub executes_later: Vec<String>,
    pub worker_ledger: Ledger,
    pub reviewer_ledger: Ledger,
}

impl SubtaskReport {
    /// The worker's and reviewer's ledgers summed.
    pub fn ledger(&self) -> Ledger {
        let mut total = self.worker_ledger;
        total.add(&self.reviewer_ledger);
        total
    }
}

/// What happened to the result at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyReport {
    /// One sentence for the user.
    pub message: String,
    /// The command that applies the result by hand, when grove did not.
    pub command: Option<String>,
}

/// Token totals of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl From<Ledger> for Totals {
    fn from(ledger: Ledger) -> Self {
        Self {
            steps: ledger.steps,
            input_tokens: ledger.input_tokens,
            output_tokens: ledger.output_tokens,
            cache_read_tokens: ledger.cache_read_tokens,
            cache_write_tokens: ledger.cache_write_tokens,
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub status: RunEnd,
    /// The commit the run started from.
    pub base: String,
    /// The user's branch (full ref).
    pub branch: String,
    /// The run's result: the base with every merged subtask.
    pub result_commit: Option<String>,
    /// The result's branch, `grove/<run>/result`.
    pub result_branch: String,
    /// Whether the user's branch was moved to the result.
    pub applied: bool,
    pub apply: Option<ApplyReport>,
    /// The lead's closing summary.
    pub summary: String,
    /// Why the run did not finish, when it did not.
    pub error: Option<String>,
    pub subtasks: Vec<SubtaskReport>,
    pub lead_ledger: Ledger,
    /// Every subagent's tokens summed.
    pub totals: Totals,
}

impl RunReport {
    /// True when every subtask was merged (vacuously, when there were none).
    pub fn all_merged(&self) -> bool {
        self.subtasks
            .iter()
            .all(|subtask| subtask.status == SubtaskOutcome::Merged)
    }
}

/// Paths whose contents run on the host or in CI later, so a human should look at
/// them whatever the reviewer decided.
pub fn executes_later(stat: &DiffStat) -> Vec<String> {
    stat.files
        .iter()
        .map(|file| file.path.as_str())
        .filter(|path| runs_later(path))
        .map(str::to_owned)
        .collect()
}

fn runs_later(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_dir = |dir: &str| path.starts_with(dir) || path.contains(&format!("/{dir}"));
    in_dir(".github/workflows/")
        || in_dir(".gitlab-ci")
        || in_dir(".circleci/")
        || in_dir(".husky/")
        || in_dir(".githooks/")
        || in_dir(".ci/")
        || matches!(
            name,
            "build.rs"
                | "package.json"
                | "Makefile"
                | "GNUmakefile"
                | "makefile"
                | ".envrc"
                | ".gitmodules"
                | ".gitattributes"
                | "setup.py"
                | "pyproject.toml"
                | "Rakefile"
                | "Justfile"
                | "justfile"
                | ".pre-commit-config.yaml"
                | "Dockerfile"
                | ".gitlab-ci.yml"
                | "Jenkinsfile"
                | "CMakeLists.txt"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::FileStat;

    #[test]
    fn files_that_run_later_are_flagged() {
        let file = |path: &str| FileStat {
            path: path.into(),
            old_path: None,
            added: 1,
            removed: 0,
            binary: false,
        };
        let stat = DiffStat {
            files: vec![
                file("src/lib.rs"),
                file(".github/workflows/ci.yml"),
                file("crates/x/build.rs"),
                file("web/package.json"),
                file(".envrc"),
                file("docs/Makefile.md"),
            ],
        };
        assert_eq!(
            executes_later(&stat),
            vec![
                ".github/workflows/ci.yml",
                "crates/x/build.rs",
                "web/package.json",
                ".envrc"
            ]
        );
    }
}
