//! The agent loop every role runs, and role definitions.
//!
//! This module owns the conversation: send a turn, run the tools it asked for, append
//! the results, repeat. A role is data ([`AgentSpec`]); the loop is the same for all.
//! It knows no git: whatever must happen between turns (checkpoint commits) is the
//! caller's [`TurnObserver`]. It never prints: progress travels as [`crate::event::Event`]s.
//!
//! - [`run_agent`] runs one loop and returns an [`AgentRun`] that keeps the ledger and
//!   the transcript even when the loop failed.
//! - [`fork_messages`] and [`isolated_messages`] build a child's first messages.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::event::{AgentId, EventSink};
use crate::model::{Message, Model};
use crate::prices::{Cost, ModelPrice, Usd};
use crate::tools::{Registry, ToolContext};

mod context;
mod r#loop;

pub mod external;
pub mod roles;

pub use context::{fork_messages, isolated_messages};
// The ledger lives at the top level (any module may count tokens); this keeps the
// `agent::Ledger` path of the modules that predate the move.
pub use crate::ledger::Ledger;
pub use r#loop::{AgentRun, CONTINUE_AFTER_MAX_TOKENS, TRUNCATED_TOOL_CALL, run_agent};

/// A role as data: everything that makes a lead, a worker or a reviewer different.
#[derive(Clone)]
pub struct AgentSpec {
    pub id: AgentId,
    pub system: String,
    pub model: Arc<dyn Model>,
    /// The model name sent in requests.
    pub model_name: String,
    pub max_tokens: u32,
    /// The loop stops itself after this many model turns (the tool calls of the last
    /// turn still run). Zero stops it before the first request.
    pub max_turns: u32,
    /// The loop stops itself once its ledger's total tokens reach this.
    pub budget_tokens: Option<u64>,
    /// The loop stops itself once its ledger's cost reaches this.
    pub budget_usd: Option<MoneyBudget>,
    /// Consecutive erroring tool calls, counted across turns, after which the loop gives
    /// up. Zero disables the check.
    pub max_consecutive_tool_errors: u32,
    pub tools: Registry,
    /// Its prompt-cache group and whether it waits long between turns (the lead waits
    /// on its subtasks): sent with every request.
    pub cache: crate::model::CacheHints,
}

/// A subagent's budget in dollars, and the rates its ledger is priced at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoneyBudget {
    pub usd: Usd,
    /// `None` when the price table has no rates for the model: the loop stops at its
    /// first budget check rather than spend without a count.
    pub price: Option<ModelPrice>,
}

impl MoneyBudget {
    /// Why `ledger` reached this budget, in a sentence; `None` while it has not.
    pub fn spent(&self, model: &str, ledger: &Ledger) -> Option<String> {
        let Some(price) = self.price else {
            return Some(format!(
                "the model {model} has no price, so its spending against the subagent budget \
                 of {} cannot be counted; give its rates with `--prices FILE`",
                self.usd
            ));
        };
        match price.cost(ledger) {
            Cost::Usd(usd) if usd < self.usd.dollars() => None,
            Cost::Usd(usd) => Some(format!(
                "spent {}, reaching the subagent budget of {}",
                crate::prices::format_usd(usd),
                self.usd
            )),
            _ => Some(format!(
                "the model {model} spent tokens of a kind its price has no rate for, so its \
                 spending against the subagent budget of {} cannot be counted",
                self.usd
            )),
        }
    }
}

/// Where a loop stands when it calls its observer.
#[derive(Debug, Clone, Copy)]
pub struct TurnState<'a> {
    /// The 1-based turn.
    pub turn: u32,
    /// The whole conversation so far.
    pub messages: &'a [Message],
    /// What the loop has cost so far.
    pub ledger: &'a Ledger,
}

/// Why a [`TurnObserver`] could not do its part; the observer's own typed error, boxed
/// so that the loop needs to know nothing of what observers do (commits, journals).
pub type ObserverError = Box<dyn std::error::Error + Send + Sync>;

/// Called by the loop around the tool calls of each turn that has some.
#[async_trait]
pub trait TurnObserver: Send + Sync {
    /// Before the tool calls of a turn run; `messages` ends with the assistant turn that
    /// asked for them (a `delegate` call forks from exactly this history, and a
    /// transcript saved here shows which calls may have run if the process dies).
    /// `repeatable` is true when every one of them is [`Tool::repeatable`]. An error
    /// stops the loop as fatal.
    ///
    /// [`Tool::repeatable`]: crate::tools::Tool::repeatable
    async fn before_tools(
        &self,
        _state: TurnState<'_>,
        _repeatable: bool,
    ) -> Result<(), ObserverError> {
        Ok(())
    }

    /// What grove itself has to tell the model once a turn's tool calls are answered
    /// (the lead: how the merged result fares on the project's check), added to the
    /// message of tool results before [`after_turn`](Self::after_turn) sees it; `None`
    /// when there is nothing new.
    async fn news(&self) -> Option<String> {
        None
    }

    /// After the turn's tool results were appended. `mutated` is true when a mutating
    /// tool ran in that turn. An error stops the loop as fatal.
    async fn after_turn(&self, state: TurnState<'_>, mutated: bool) -> Result<(), ObserverError>;
}

/// Why a loop ended without an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopKind {
    /// The model ended its turn without calling a tool.
    Finished,
    /// `max_turns` was reached; the loop stopped itself.
    TurnCap,
    /// The token or money budget was spent; the last turn's tool calls were not run.
    Budget,
    /// Too many tool errors in a row.
    ToolErrors,
    /// The model stopped in a way the loop cannot continue from: `refusal`, `max_tokens`
    /// twice in a row without a tool call, or a stop reason grove does not know.
    ModelStopped(String),
}

impl std::fmt::Display for StopKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Finished => f.write_str("finished"),
            Self::TurnCap => f.write_str("turn cap"),
            Self::Budget => f.write_str("budget"),
            Self::ToolErrors => f.write_str("tool errors"),
            Self::ModelStopped(reason) => write!(f, "model stopped ({reason})"),
        }
    }
}

/// How one loop ended when it did not fail. The ledger and the transcript live in
/// [`AgentRun`], because a failed loop has them too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOutcome {
    pub stop: StopKind,
    /// The final assistant text (possibly empty). When the loop asked the model to
    /// continue after `max_tokens`, the cut text and its continuation are joined.
    pub final_text: String,
    /// One sentence saying why the loop stopped, for reports and the lead.
    pub detail: String,
}

/// Why a loop could not go on. None of these is retried by the loop: the model client
/// already retried what it could, and the caller decides whether to run the agent again.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The model turn could not be had (after the client's own retries).
    #[error("{agent}: {source}")]
    Model {
        agent: AgentId,
        #[source]
        source: crate::model::ModelError,
    },
    /// A tool returned [`crate::tools::ToolError::Fatal`].
    #[error("{agent}: tool `{tool}` failed fatally: {message}")]
    Tool {
        agent: AgentId,
        tool: String,
        message: String,
    },
    /// The [`TurnObserver`] failed (e.g. the checkpoint commit).
    #[error("{agent}: after turn {turn}: {source}")]
    Observer {
        agent: AgentId,
        turn: u32,
        #[source]
        source: ObserverError,
    },
    /// The loop's cancellation token fired.
    #[error("{agent}: cancelled")]
    Cancelled { agent: AgentId },
}

/// The inputs of one loop run besides the role.
pub struct LoopInput {
    /// The conversation so far (the brief alone when isolated; a fork otherwise).
    pub messages: Vec<Message>,
    /// What the tools run with. Its `cancel` token is the loop's token too: cancelling
    /// it aborts the model call and the running tools, and the loop returns
    /// [`AgentError::Cancelled`].
    pub tool_context: ToolContext,
    pub events: EventSink,
    pub observer: Option<Arc<dyn TurnObserver>>,
}
