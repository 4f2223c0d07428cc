//! The end of a run as data: what `grove run --json` prints and the CLI renders.
//!
//! The field names of [`RunReport`] and [`SubtaskReport`] are a contract (DESIGN.md):
//! `run_id`, `status`, `base`, `result_commit`, `applied`, and per subtask `id`, `task`,
//! `branch`, `status`, `kind`, `resolution`, `verdict`, `steps`, `input_tokens`,
//! `output_tokens`, and `check: {command, status, runs}`. Add fields, never rename them.

use serde::Serialize;

use crate::agent::Ledger;
use crate::agent::external::WorkerBackend;
use crate::git::DiffStat;
use crate::prices::Usd;
use crate::run::estimate::Estimate;
use crate::run::id::SubtaskId;
use crate::settings::options::{Models, RunOptions};
use crate::store::attempt_status::{AttemptOf, AttemptStatus};
use crate::store::journal::{
    CheckRun, CheckStatus, Finding, ON_RESULT, RunOutcome, SubtaskKind, SubtaskOutcome, VerdictKind,
};
use crate::store::spend::Spent;
use crate::store::state::RunStatus;

/// How this process's run ended (the `status` of `grove run --json`).
///
/// It differs from its neighbours on purpose: [`RunStatus`] is where a run stands as the
/// store sees it (also `running`, or `unreadable`, in a listing), and [`RunOutcome`] is
/// what a `run_finished` record says (only the two ends that are not resumable; a
/// resumable end is journaled as `paused`). [`RunEnd::recorded`] and the `From` below
/// are the one mapping between them.
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

impl RunEnd {
    /// What the journal's `run_finished` record says of this end; `None` for the
    /// resumable ends, which are journaled as `paused`.
    pub fn recorded(self) -> Option<RunOutcome> {
        match self {
            Self::Finished => Some(RunOutcome::Finished),
            Self::Failed => Some(RunOutcome::Failed),
            Self::Interrupted | Self::Paused => None,
        }
    }
}

impl From<RunEnd> for RunStatus {
    /// Where a run that ended so stands.
    fn from(end: RunEnd) -> Self {
        match end {
            RunEnd::Finished => Self::Finished,
            RunEnd::Interrupted => Self::Interrupted,
            RunEnd::Paused => Self::Paused,
            RunEnd::Failed => Self::Failed,
        }
    }
}

/// One subtask as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubtaskReport {
    /// The label, e.g. `S2`.
    pub id: SubtaskId,
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
    /// Paths the commit left out because they are, lead to or lie in git data (a link
    /// into `.git`, a nested or bare repository: `Repo::git_dir_paths`), flagged to the
    /// reviewer. Absent from the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Changed paths outside the subtask's `paths` (`delegate`'s write scope), made
    /// through `bash` or an agent CLI, flagged to the reviewer. Absent from the JSON when
    /// there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_paths: Vec<String>,
    pub worker_ledger: Ledger,
    pub reviewer_ledger: Ledger,
    /// What its worker and reviewer cost in US dollars at the run's price table; `null`
    /// when a model of theirs has no price (or the worker is an agent CLI).
    pub cost_usd: Option<f64>,
    /// Who started it: the lead (`task`), a fixer for a red result check (`fix`), or a
    /// resolver for a conflict (`resolve`).
    pub kind: SubtaskKind,
    /// How an approved subtask that conflicted got merged anyway: `resolver`. Absent
    /// from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
    /// The project's check on its worktree, when one ran.
    pub check: Option<CheckRun>,
    /// The worker's (or resolver's) whole final message, bounded, for the lead's
    /// `show_subtask` (journaled, so a resumed run has it too); `None` when it wrote none,
    /// or for a subtask journaled before the field was (the reason keeps its start). Not in the JSON: `reason` is the one sentence a person reads there.
    #[serde(skip)]
    pub worker_summary: Option<String>,
    /// The earlier subtask this one replaces (`delegate`'s `replaces` or `start_from`).
    /// Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<SubtaskId>,
    /// The later subtask that replaced this unmerged one and merged (or was itself
    /// superseded by one that did): the work got done, so the run is not short of it.
    /// Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<SubtaskId>,
    /// Its place among the attempts at one brief (`delegate`'s `attempts`): the group,
    /// its label, `picked` / `not_picked` / `undecided`, why it lost, and which attempt
    /// of the group merged. Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AttemptOf>,
    /// On a group's first attempt: every attempt of the group, with its status and cost.
    /// Absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptEntry>,
}

/// One attempt in its group's list (`attempts` of the group's first subtask in
/// `grove run --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptEntry {
    pub subtask: SubtaskId,
    /// `A`, `B`, …
    pub label: char,
    pub status: AttemptStatus,
    /// What its worker and reviewer (the judge, for the attempt that carries it) cost;
    /// `null` when a model of theirs has no price.
    pub cost_usd: Option<f64>,
    /// Why it was not picked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Copies each attempt's priced `cost_usd` into its group's list.
pub(crate) fn price_attempts(reports: &mut [SubtaskReport]) {
    let costs: Vec<(SubtaskId, Option<f64>)> = reports.iter().map(|r| (r.id, r.cost_usd)).collect();
    for report in reports.iter_mut() {
        for entry in &mut report.attempts {
            entry.cost_usd = costs
                .iter()
                .find(|(id, _)| *id == entry.subtask)
                .and_then(|(_, cost)| *cost);
        }
    }
}

/// How a conflicting subtask came to be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// A resolver subtask merged it with the result, and its review passed.
    Resolver,
}

/// The project's check in the report (`check` of `grove run --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// `[check] command`; `None` when the project has no check.
    pub command: Option<String>,
    /// The last result check's status; `skipped` when none ran.
    pub status: CheckOutcome,
    /// Every run, in order: the subtasks' (`on: "S2"`), the result's (`on: "result"`) and
    /// the culprit search's (`on: "result without S2"`).
    pub runs: Vec<CheckRun>,
    /// Which merged subtasks broke the result's check, when it was red and they were
    /// found.
    pub culprit: Option<Culprit>,
}

/// The merged subtasks that broke the result's check, and how grove knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Culprit {
    /// Their labels (`S3`), in subtask order.
    pub subtasks: Vec<String>,
    pub found_by: CulpritEvidence,
    /// Where the failure is, as the output named it in the repository (`pkg/b.py:9`),
    /// when that is how they were found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// How the culprit of a red result check was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CulpritEvidence {
    /// The result rebuilt without them passes the check.
    PassesWithout,
    /// Its merge last changed the line of the repository where the check failed (the
    /// innermost frame, or the `file:line` the failure names).
    FailingLine,
    /// They changed the file where the check failed, and the others did not (the failing
    /// line itself is as the base has it).
    FailingFile,
    /// It is the only subtask merged.
    OnlyMerged,
    /// Its own tree was the first to have the result's new ratchet findings.
    FirstHad,
}

impl CulpritEvidence {
    /// Its name in `--json` and the journal: `failing_line`, `passes_without`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PassesWithout => "passes_without",
            Self::FailingLine => "failing_line",
            Self::FailingFile => "failing_file",
            Self::OnlyMerged => "only_merged",
            Self::FirstHad => "first_had",
        }
    }
}

/// Where the check on the merged result left the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    Passed,
    Failed,
    /// No check is configured, or nothing was merged to check.
    Skipped,
}

impl CheckReport {
    /// The report of `runs` of `command`: its status is the last result check's.
    pub fn new(command: Option<String>, runs: Vec<CheckRun>) -> Self {
        let status = runs.iter().rev().find(|run| run.on == ON_RESULT).map_or(
            CheckOutcome::Skipped,
            |run| match run.status {
                CheckStatus::Passed => CheckOutcome::Passed,
                CheckStatus::Failed => CheckOutcome::Failed,
            },
        );
        Self {
            command,
            status,
            runs,
            culprit: None,
        }
    }
}

impl SubtaskReport {
    /// A subtask that has not got anywhere yet: failed, nothing spent.
    pub fn new(id: SubtaskId, task: String, branch: String) -> Self {
        Self {
            id,
            task,
            branch,
            status: SubtaskOutcome::Failed,
            verdict: None,
            steps: 0,
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            reason: None,
            review_summary: None,
            findings: Vec::new(),
            diffstat: None,
            conflict_paths: Vec::new(),
            archive_ref: None,
            executes_later: Vec::new(),
            left_out: Vec::new(),
            outside_paths: Vec::new(),
            worker_ledger: Ledger::default(),
            reviewer_ledger: Ledger::default(),
            cost_usd: None,
            kind: SubtaskKind::Task,
            resolution: None,
            check: None,
            worker_summary: None,
            replaces: None,
            superseded_by: None,
            attempt: None,
            attempts: Vec::new(),
        }
    }

    /// Copies the summed ledger into the flat token fields.
    pub fn sum_ledgers(&mut self) {
        let ledger = self.ledger();
        self.steps = ledger.steps;
        self.input_tokens = ledger.input_tokens;
        self.output_tokens = ledger.output_tokens;
        self.cache_read_tokens = ledger.cache_read_tokens;
        self.cache_write_tokens = ledger.cache_write_tokens;
    }

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
    /// The project's check: every run of it, and whether the result passed it.
    pub check: CheckReport,
    pub lead_ledger: Ledger,
    /// Every subagent's tokens summed.
    pub totals: Totals,
    /// What the run cost in US dollars.
    pub cost: CostReport,
    /// What `grove run` estimated before the run started, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
}

/// What a run cost in US dollars, at its price table (`cost` of `grove run --json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostReport {
    /// What every request of the run cost, as counted turn by turn (earlier processes'
    /// turns, and those of agents interrupted and run again, included); the turns of
    /// `unpriced` models are not in it.
    pub total_usd: f64,
    /// The lead's; `null` when its model has no price.
    pub lead_usd: Option<f64>,
    /// The run's money budget (`--budget-usd`), when it has one.
    pub budget_usd: Option<f64>,
    /// Models whose tokens have no price (not counted in `total_usd`).
    pub unpriced: Vec<String>,
}

impl CostReport {
    /// Prices the lead's `lead` ledger and each subtask's (setting its `cost_usd`) at the
    /// run's table: each role at its model (the run's own; an agent file naming another
    /// model is priced at its role's), an agent CLI's worker as unknown.
    /// `metered` is what the run's turns were counted at as they came (a run that
    /// predates the count has none: the ledgers' sum stands).
    pub fn price(
        options: &RunOptions,
        (models, metered): (&Models, &Spent),
        lead: &Ledger,
        subtasks: &mut [SubtaskReport],
    ) -> CostReport {
        let mut report = CostReport {
            budget_usd: options.budget_usd.map(Usd::dollars),
            ..CostReport::default()
        };
        let mut price = |model: &str, ledger: &Ledger| -> Option<f64> {
            if *ledger == Ledger::default() {
                return Some(0.0);
            }
            let usd = options.prices.cost(model, ledger).usd();
            match usd {
                Some(usd) => report.total_usd += usd,
                None if !report.unpriced.iter().any(|m| m == model) => {
                    report.unpriced.push(model.to_owned());
                }
                None => {}
            }
            usd
        };
        let lead_usd = price(&models.lead.name, lead);
        let worker_model = match &options.worker_backend {
            WorkerBackend::Builtin => models.worker.name.clone(),
            other => other.name().to_owned(),
        };
        for subtask in subtasks.iter_mut() {
            let worker = price(&worker_model, &subtask.worker_ledger);
            let reviewer = price(&models.reviewer.name, &subtask.reviewer_ledger);
            subtask.cost_usd = worker.zip(reviewer).map(|(w, r)| w + r);
        }
        price_attempts(subtasks);
        report.lead_usd = lead_usd;
        report.total_usd = report.total_usd.max(metered.usd);
        for model in &metered.unpriced {
            if !report.unpriced.contains(model) {
                report.unpriced.push(model.clone());
            }
        }
        report
    }
}

impl RunReport {
    /// True when every subtask the lead delegated was merged or superseded by one that
    /// merged (vacuously, when there were none). Fixers and resolvers are grove's own: a
    /// resolver's outcome is its conflicting subtask's, and a fixer's is the result
    /// check's.
    pub fn all_merged(&self) -> bool {
        self.subtasks
            .iter()
            .filter(|subtask| subtask.kind == SubtaskKind::Task)
            .all(SubtaskReport::done)
    }
}

impl SubtaskReport {
    /// Merged, superseded by a replacement that merged, or an attempt whose group's pick
    /// merged.
    pub fn done(&self) -> bool {
        self.status == SubtaskOutcome::Merged
            || self.superseded_by.is_some()
            || self.attempt.as_ref().is_some_and(|of| of.merged.is_some())
    }
}

/// Paths whose contents run on the host or in CI later, or steer what grove or an agent
/// does next, so a human should look at them whatever the reviewer decided: every
/// dotfile and every file in a dot-directory (tool, CI, editor and agent configuration
/// lives there: `.cargo/config.toml`, `.npmrc`, `.mcp.json`, `.github/actions/…`), and
/// the known build and CI entry points and agent rules files by name. Only what runs
/// outside the check's ordinary run: a library's sources and tests, and the test
/// runner's own hooks (`conftest.py`, `pytest.ini`), run inside it, sandboxed, and are
/// judged in the diff; listing them drowned the few files that run unconfined later.
pub fn executes_later(stat: &DiffStat) -> Vec<String> {
    stat.files
        .iter()
        .map(|file| file.path.as_str())
        .filter(|path| runs_later(path))
        .map(str::to_owned)
        .collect()
}

/// File names (in any directory) of build, test and CI entry points and of the rules
/// files agents read.
const ENTRY_POINTS: &[&str] = &[
    // builds
    "build.rs",
    "Cargo.toml",
    "package.json",
    "Makefile",
    "GNUmakefile",
    "makefile",
    "CMakeLists.txt",
    "meson.build",
    "BUILD",
    "BUILD.bazel",
    "WORKSPACE",
    "MODULE.bazel",
    "build.gradle",
    "build.gradle.kts",
    "settings.gradle",
    "settings.gradle.kts",
    "gradlew",
    "pom.xml",
    "mvnw",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "Rakefile",
    "Gemfile",
    "Justfile",
    "justfile",
    "Taskfile.yml",
    "flake.nix",
    "default.nix",
    "shell.nix",
    "Dockerfile",
    "Containerfile",
    "docker-compose.yml",
    "compose.yaml",
    // test runners' environments, built before and around the check's own run
    "tox.ini",
    "noxfile.py",
    // CI and hooks
    "Jenkinsfile",
    "lefthook.yml",
    // project rules: not run, but obeyed by every later agent as if grove said them
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    "CONVENTIONS.md",
];

/// Name endings of JavaScript tool configurations, which are programs the tool runs
/// (`vite.config.ts`, `jest.config.js`, `eslint.config.mjs`).
const CONFIG_PROGRAMS: &[&str] = &[
    ".config.js",
    ".config.cjs",
    ".config.mjs",
    ".config.ts",
    ".config.mts",
    ".config.cts",
];

fn runs_later(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.split('/').any(|part| part.starts_with('.'))
        || ENTRY_POINTS.contains(&name)
        || CONFIG_PROGRAMS.iter().any(|ending| name.ends_with(ending))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::FileStat;

    fn file(path: &str) -> FileStat {
        FileStat {
            path: path.into(),
            old_path: None,
            added: 1,
            removed: 0,
            binary: false,
        }
    }

    #[test]
    fn files_that_run_later_are_flagged() {
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

    #[test]
    fn files_that_make_grove_or_an_agent_act_are_flagged() {
        let stat = DiffStat {
            files: [
                ".grove/config.toml",
                ".grove/agents/docs.md",
                "AGENTS.md",
                "crates/x/AGENTS.md",
                "CLAUDE.md",
                ".claude/settings.json",
                ".gitattributes",
                ".gitmodules",
                ".envrc",
                ".vscode/tasks.json",
                ".vscode/launch.json",
                ".husky/pre-commit",
                ".githooks/pre-push",
                ".devcontainer/devcontainer.json",
                "lefthook.yml",
                // what a red team found unflagged
                ".cargo/config.toml",
                ".npmrc",
                ".yarnrc.yml",
                ".mcp.json",
                ".gemini/settings.json",
                "GEMINI.md",
                ".aider.conf.yml",
                ".github/actions/setup/action.yml",
                ".vscode/settings.json",
                ".mise.toml",
                "settings.gradle",
                "tox.ini",
                "web/vite.config.ts",
                // not acting: look-alikes
                "docs/AGENTS.md.bak",
                "src/grove/mod.rs",
                "my.grove/notes.txt",
                "src/config.ts",
                // run by the check's own run, sandboxed like it: the reviewer reads
                // them in the diff
                "tests/conftest.py",
                "pytest.ini",
            ]
            .into_iter()
            .map(file)
            .collect(),
        };
        assert_eq!(
            executes_later(&stat),
            vec![
                ".grove/config.toml",
                ".grove/agents/docs.md",
                "AGENTS.md",
                "crates/x/AGENTS.md",
                "CLAUDE.md",
                ".claude/settings.json",
                ".gitattributes",
                ".gitmodules",
                ".envrc",
                ".vscode/tasks.json",
                ".vscode/launch.json",
                ".husky/pre-commit",
                ".githooks/pre-push",
                ".devcontainer/devcontainer.json",
                "lefthook.yml",
                ".cargo/config.toml",
                ".npmrc",
                ".yarnrc.yml",
                ".mcp.json",
                ".gemini/settings.json",
                "GEMINI.md",
                ".aider.conf.yml",
                ".github/actions/setup/action.yml",
                ".vscode/settings.json",
                ".mise.toml",
                "settings.gradle",
                "tox.ini",
                "web/vite.config.ts",
            ],
            "every dotfile, dot-directory and entry point is flagged for a person, and only those"
        );
    }

    #[test]
    fn only_what_runs_outside_the_checks_own_run_is_flagged() {
        let stat = DiffStat {
            files: [
                "src/pkg/core.py",
                "src/pkg/__init__.py",
                "tests/test_core.py",
                "tests/conftest.py",
                "pytest.ini",
                "src/lib.rs",
                "tests/it.rs",
                "lib/index.test.js",
                ".github/workflows/ci.yml",
                ".gitlab-ci.yml",
                ".pre-commit-config.yaml",
                ".husky/pre-commit",
                "build.rs",
                "setup.py",
                "Makefile",
                "CMakeLists.txt",
                "package.json",
                "pyproject.toml",
                "tox.ini",
                "noxfile.py",
                ".cargo/config.toml",
                ".npmrc",
                "Dockerfile",
            ]
            .into_iter()
            .map(file)
            .collect(),
        };
        assert_eq!(
            executes_later(&stat),
            vec![
                ".github/workflows/ci.yml",
                ".gitlab-ci.yml",
                ".pre-commit-config.yaml",
                ".husky/pre-commit",
                "build.rs",
                "setup.py",
                "Makefile",
                "CMakeLists.txt",
                "package.json",
                "pyproject.toml",
                "tox.ini",
                "noxfile.py",
                ".cargo/config.toml",
                ".npmrc",
                "Dockerfile",
            ],
            "CI, hooks, build scripts, manifests and tool configs run later; a library's \
             sources, tests and test-runner hooks run in the check's own run and are not \
             listed"
        );
    }
}
