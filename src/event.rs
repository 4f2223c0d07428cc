//! Events the library emits for the CLI to render.
//!
//! This module owns the vocabulary of progress reporting. It must never print: the
//! binary decides how (live view, plain lines, JSON) and whether to show an event.

use serde::Serialize;
use tokio::sync::mpsc;

use crate::ledger::Ledger;
use crate::model::ModelNotice;
use crate::status::{SubtaskId, SubtaskOutcome, VerdictKind};

/// Identifies one running subagent: its role and whom it works for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AgentId {
    /// `lead`, `worker`, `reviewer`, or a user-defined agent name.
    pub role: String,
    /// The subtask it works on, or the lead itself.
    pub label: AgentLabel,
}

impl AgentId {
    /// The lead's id: its role and its label are both `lead`.
    pub fn lead() -> Self {
        Self {
            role: AgentLabel::LEAD.to_owned(),
            label: AgentLabel::Lead,
        }
    }
}

impl std::fmt::Display for AgentId {
    /// `worker S2`; the lead is just `lead`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.label {
            AgentLabel::Lead => f.write_str(&self.role),
            AgentLabel::Subtask(id) => write!(f, "{} {id}", self.role),
        }
    }
}

/// Whom a subagent works for. Written as text wherever it is one (events' JSON,
/// transcripts' names, the ledger): `lead`, or the subtask's label (`S2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentLabel {
    Lead,
    Subtask(SubtaskId),
}

impl AgentLabel {
    /// The lead's label in events, ledgers, transcripts and the journal.
    pub const LEAD: &'static str = "lead";
}

impl std::fmt::Display for AgentLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lead => f.pad(Self::LEAD),
            Self::Subtask(id) => id.fmt(f),
        }
    }
}

impl Serialize for AgentLabel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Something that happened that a user may want to see.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A subagent's loop started.
    AgentStarted { agent: AgentId },
    /// A model turn of a subagent completed.
    TurnCompleted {
        agent: AgentId,
        turn: u32,
        ledger: Ledger,
    },
    /// A subagent called a tool.
    ToolCalled {
        agent: AgentId,
        tool: String,
        is_error: bool,
    },
    /// A model request failed and will be retried after `delay_ms`.
    ModelRetry {
        agent: AgentId,
        attempt: u32,
        delay_ms: u64,
        reason: String,
    },
    /// A subagent's loop ended; `ledger` is what it cost in total.
    AgentFinished {
        agent: AgentId,
        ledger: Ledger,
        outcome: String,
    },
    /// The lead delegated a subtask; its worker is about to start.
    SubtaskStarted {
        label: SubtaskId,
        task: String,
        branch: String,
    },
    /// A delegated subtask waits, holding no `--jobs` slot, until the earlier subtasks
    /// `waits_for` (labels) are settled: its `after` names them, or their `paths`
    /// overlap its own. Then it starts from the run's current result. With `waits_for`
    /// empty it waits for a `--jobs` slot, and starts as it would have at once.
    SubtaskWaiting {
        label: SubtaskId,
        task: String,
        waits_for: Vec<SubtaskId>,
    },
    /// A subtask is over: merged, rejected, conflict or failed.
    SubtaskFinished {
        label: SubtaskId,
        status: SubtaskOutcome,
        verdict: Option<VerdictKind>,
        /// e.g. `3 files changed, 10 insertions(+), 2 deletions(-)`.
        diffstat: Option<String>,
    },
    /// The project's check started on `on` (a subtask label, or `result`).
    CheckStarted { on: String, command: String },
    /// The project's check on `on` ended.
    CheckFinished {
        on: String,
        command: String,
        passed: bool,
        /// How it ended: `exited with status 1`, `timed out after 900 s`.
        ended: String,
        seconds: f64,
    },
    /// A free-form status line from the orchestrator.
    Note { message: String },
    /// A run (new, or resumed) holds its lock and goes on: its id, for a caller that
    /// learns it no other way before the run ends (an MCP client).
    RunStarted {
        run_id: crate::git::RunId,
        resumed: bool,
    },
    /// What the run has spent in US dollars, after each model turn of its own agents
    /// (and once when a resumed run starts): turns of the run's earlier processes
    /// included, priced at the run's price table.
    Spent {
        usd: f64,
        /// The run's money budget (`--budget-usd`), when it has one.
        cap_usd: Option<f64>,
        /// Models whose turns have no price: their tokens are not in `usd`.
        unpriced: Vec<String>,
    },
    /// A model request has been waiting `waited_ms` for `waiting_for` (sent every few
    /// seconds while it lasts), on attempt `attempt` of `attempts`.
    ModelWaiting {
        agent: AgentId,
        attempt: u32,
        attempts: u32,
        waited_ms: u64,
        /// `the first byte of the answer` or `the next stream event`.
        waiting_for: String,
    },
}

impl Event {
    /// The event telling what a model client reported for `agent`'s turn.
    pub fn from_model(agent: &AgentId, notice: ModelNotice) -> Self {
        let millis =
            |duration: std::time::Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        match notice {
            ModelNotice::Retry(retry) => Event::ModelRetry {
                agent: agent.clone(),
                attempt: retry.attempt,
                delay_ms: millis(retry.delay),
                reason: retry.reason,
            },
            ModelNotice::Waiting(wait) => Event::ModelWaiting {
                agent: agent.clone(),
                attempt: wait.attempt,
                attempts: wait.attempts,
                waited_ms: millis(wait.waited),
                waiting_for: wait.phase.as_str().to_owned(),
            },
        }
    }
}

/// The sending half every library component gets; sending never blocks or fails loudly.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: Option<mpsc::UnboundedSender<Event>>,
}

impl EventSink {
    /// A sink that delivers to `tx`.
    pub fn new(tx: mpsc::UnboundedSender<Event>) -> Self {
        Self { tx: Some(tx) }
    }

    /// A sink that drops every event (tests, benchmarks).
    pub fn discard() -> Self {
        Self { tx: None }
    }

    /// Emits `event`; a closed receiver is not an error, the user just stopped watching.
    pub fn emit(&self, event: Event) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(event);
        }
    }
}
