//! The agent loop every role runs, its token ledger, and role definitions.
//!
//! This module owns the conversation: send a turn, run the tools it asked for, append
//! the results, repeat. A role is data ([`AgentSpec`]); the loop is the same for all.
//! It knows no git: whatever must happen between turns (checkpoint commits) is the
//! caller's [`TurnObserver`].

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::event::{AgentId, EventSink};
use crate::model::{Message, Model, Usage};
use crate::tools::{Registry, ToolContext};

/// What one subagent cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Model turns taken.
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl Ledger {
    /// Adds one turn's usage.
    pub fn record(&mut self, usage: &Usage) {
        self.steps += 1;
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.cache_read_tokens += usage.cache_read_input_tokens;
        self.cache_write_tokens += usage.cache_creation_input_tokens;
    }

    /// Adds another ledger (run totals).
    pub fn add(&mut self, other: &Ledger) {
        self.steps += other.steps;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    /// Every token the provider counted, for budgets.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }
}

/// A role as data: everything that makes a lead, a worker or a reviewer different.
#[derive(Clone)]
pub struct AgentSpec {
    pub id: AgentId,
    pub system: String,
    pub model: Arc<dyn Model>,
    /// The model name sent in requests.
    pub model_name: String,
    pub max_tokens: u32,
    /// The loop stops itself after this many model turns.
    pub max_turns: u32,
    /// The loop stops itself once its ledger's total tokens reach this.
    pub budget_tokens: Option<u64>,
    /// Consecutive tool errors after which the loop gives up.
    pub max_consecutive_tool_errors: u32,
    pub tools: Registry,
}

/// Called by the loop between turns.
#[async_trait]
pub trait TurnObserver: Send + Sync {
    /// After the tool results of turn `turn` (1-based) were appended. `mutated` is true
    /// when a mutating tool ran in that turn. An error stops the loop as fatal.
    async fn after_turn(&self, turn: u32, mutated: bool) -> Result<(), String>;
}

/// Why a loop ended without an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopKind {
    /// The model ended its turn without calling a tool.
    Finished,
    /// `max_turns` was reached; the loop stopped itself.
    TurnCap,
    /// The token budget was spent.
    Budget,
    /// Too many tool errors in a row.
    ToolErrors,
    /// The model hit `max_tokens` without a usable answer, or refused.
    ModelStopped(String),
}

/// The end of one loop.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    pub stop: StopKind,
    /// The final assistant text (possibly empty).
    pub final_text: String,
    /// The whole conversation, initial messages included.
    pub messages: Vec<Message>,
    pub ledger: Ledger,
}

/// Why a loop could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{agent}: {source}")]
    Model {
        agent: AgentId,
        #[source]
        source: crate::model::ModelError,
    },
    #[error("{agent}: tool `{tool}` failed fatally: {message}")]
    Tool {
        agent: AgentId,
        tool: String,
        message: String,
    },
    #[error("{agent}: {message}")]
    Observer { agent: AgentId, message: String },
    #[error("{agent}: cancelled")]
    Cancelled { agent: AgentId },
}

/// The inputs of one loop run besides the role.
pub struct LoopInput {
    /// The conversation so far (the brief alone when isolated; a fork otherwise).
    pub messages: Vec<Message>,
    pub tool_context: ToolContext,
    pub events: EventSink,
    pub observer: Option<Arc<dyn TurnObserver>>,
}
