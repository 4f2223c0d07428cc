//! `grove report RUN`: one self-contained HTML page per run — a timeline picture of
//! every subagent, each subtask's diff side by side, the verdicts, and the token ledger
//! with an estimated cost.
//!
//! This module owns the report's data ([`ReportData`]), gathering it from a run
//! ([`gather`]: the journal for what happened and when, the transcripts' timing for
//! turns, git for the diffs) and rendering it ([`render_html`], pure). It must never
//! write to a run or the repository, and the page it renders must never load anything:
//! no external URL, every string from the model or the repository escaped.

mod attempts;
mod cost_chart;
mod diff;
mod gather;
mod html;
mod render;
mod timeline;

use serde::Serialize;

use crate::ledger::Ledger;
use crate::store::attempt_status::AttemptOf;
use crate::store::attempts::AttemptGroup;
use crate::store::journal::{CheckRun, SubtaskKind};
use crate::store::state::{RunStatus, SubtaskStatus, VerdictState};

pub use crate::prices::{Cost, ModelPrice, PriceError, PriceTable};
pub use diff::{FileDiff, Hunk, Line, Row, Segment, side_by_side, word_segments};
pub use gather::{ReportError, gather};
pub use render::render_html;

/// The report's file name in the run directory when no `--output` is given.
pub const DEFAULT_FILE_NAME: &str = "report.html";

/// Everything a report shows, gathered from one run.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportData {
    pub run_id: String,
    /// The user's task, verbatim.
    pub task: String,
    /// Where the run stands (`interrupted` when no live process holds it).
    pub status: RunStatus,
    /// The commit the run started from.
    pub base: String,
    /// The user's branch.
    pub branch: String,
    pub provider: String,
    pub result_commit: Option<String>,
    pub applied: bool,
    /// What the user's branch got when that is not `result_commit`: the squashed
    /// history's tip (`history = "squash"`), and how many commits it holds.
    pub applied_history: Option<(String, usize)>,
    pub pause_reason: Option<String>,
    pub error: Option<String>,
    pub timeline: Timeline,
    pub subtasks: Vec<SubtaskSection>,
    /// Every run of the project's check, in order: on the base, each subtask's tree, the
    /// merged result, and the results rebuilt without some subtasks (the culprit search).
    pub checks: Vec<CheckRun>,
    /// The culprit of a red result, as journaled: its subtasks, how it was found, where.
    pub culprit: Option<(Vec<String>, String, Option<String>)>,
    /// One row per agent: the lead, then each subtask's worker and reviewer.
    pub agents: Vec<AgentCost>,
    pub prices: PriceTable,
    /// The groups of attempts at one brief (best of N), with the judge's pick.
    pub attempt_groups: Vec<AttemptGroup>,
    /// What could not be read (a transcript, a commit); the report shows the rest.
    pub notes: Vec<String>,
}

/// The run over time: one lane per agent and the run's own events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// The run's first record, in ms since the epoch.
    pub start_ms: u64,
    /// The latest time anything was recorded.
    pub end_ms: u64,
    pub lanes: Vec<Lane>,
    /// Pauses, resumes and the end, drawn across every lane.
    pub events: Vec<RunEvent>,
}

/// One agent's time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lane {
    /// `lead`, `worker` (or the custom agent's name), `reviewer`.
    pub role: String,
    /// `lead` or the subtask label, e.g. `S2`.
    pub label: String,
    /// The subtask the lane belongs to, if any.
    pub subtask: Option<String>,
    /// When the lead delegated the work (before the agent got a slot).
    pub queued_ms: Option<u64>,
    /// What it waited for from `queued_ms` to its start: `a slot`, `the check on the
    /// base`, `S1, S2` (its `after` or overlapping `paths`).
    pub waited_for: String,
    pub started_ms: u64,
    /// `None` while the agent runs (or ran when the process died).
    pub ended_ms: Option<u64>,
    /// When each timed turn's answer arrived.
    pub turn_ms: Vec<u64>,
    /// Model turns in all (the last one has no time of its own; it ends the lane).
    pub turns: u32,
    pub markers: Vec<Marker>,
    /// The project's check runs drawn on this lane: a subtask's on its worker's (the
    /// gap between the worker and its reviewer), the base's and the result's on the
    /// lead's.
    pub checks: Vec<CheckSpan>,
}

/// One run of the project's check over time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckSpan {
    /// What it checked: `S2`, `base`, `result`, `result without S2`.
    pub on: String,
    pub started_ms: u64,
    pub ended_ms: u64,
    pub passed: bool,
}

/// Something that happened to a subtask at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Marker {
    pub ts_ms: u64,
    pub kind: MarkerKind,
}

/// What a [`Marker`] marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    Approved,
    Rejected,
    Merged,
    Conflict,
    Failed,
}

impl MarkerKind {
    /// The word shown for it.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Approved => "approved",
            MarkerKind::Rejected => "rejected",
            MarkerKind::Merged => "merged",
            MarkerKind::Conflict => "merge conflict",
            MarkerKind::Failed => "failed",
        }
    }
}

/// A run-wide moment: paused, resumed, finished, failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunEvent {
    pub ts_ms: u64,
    /// E.g. `paused: the model API failed`.
    pub label: String,
}

/// Where a subtask stands in a chain of follow-ups (`replaces`, `start_from`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// The subtask it replaces.
    pub replaces: Option<String>,
    /// Whether its tree started from that subtask's kept work.
    pub started_from_it: bool,
    /// The later subtask that superseded it (merged, or superseded in turn).
    pub superseded_by: Option<String>,
}
/// One subtask: its brief, outcome, verdict and diff.
#[derive(Debug, Clone, PartialEq)]
pub struct SubtaskSection {
    /// The label, e.g. `S2`.
    pub id: String,
    /// A task the lead delegated, or grove's own fixer or resolver.
    pub kind: SubtaskKind,
    pub task: String,
    pub branch: String,
    /// The agent that did the work (`worker` or a custom agent).
    pub agent: String,
    pub status: SubtaskStatus,
    pub verdict: Option<VerdictState>,
    pub conflict_paths: Vec<String>,
    /// The globs it was allowed to change (`delegate`'s `paths`); empty: any file.
    pub paths: Vec<String>,
    /// The earlier subtasks it waited for before it started (`after`, overlapping
    /// `paths`).
    pub waits_for: Vec<String>,
    /// The follow-up chain: the subtask it replaces (and whether it started from that
    /// one's work), and the one that superseded it.
    pub chain: Chain,
    /// True while it is still waiting for them (the run is not over).
    pub waiting: bool,
    /// Where rejected, failed or conflicting work is kept.
    pub archive_ref: Option<String>,
    /// The project's check on its worktree, when one ran.
    pub check: Option<CheckRun>,
    /// Its place among the attempts at one brief, when it is one.
    pub attempt: Option<AttemptOf>,
    pub diff: DiffView,
}

/// A subtask's diff against the run's base, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffView {
    Shown {
        /// The run's base commit.
        base: String,
        /// The commit the diff shows.
        head: String,
        /// Which commit that is, e.g. `merged commit` or `archive refs/grove/archive/…/2`.
        source: String,
        /// The diffstat's one-line summary.
        summary: String,
        files: Vec<FileDiff>,
    },
    Unavailable {
        reason: String,
    },
}

/// What one agent cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCost {
    pub role: String,
    pub label: String,
    /// The model its requests named.
    pub model: String,
    pub ledger: Ledger,
    /// False when the ledger comes from the last saved turn, so the agent's final turn
    /// may be missing from it (it ran when grove stopped, or predates end files).
    pub complete: bool,
}

impl AgentCost {
    /// The agent as the terminal names it: `lead`, `worker S2`.
    pub fn name(&self) -> String {
        if self.role == self.label {
            self.role.clone()
        } else {
            format!("{} {}", self.role, self.label)
        }
    }
}
