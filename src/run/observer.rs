//! Every agent's [`TurnObserver`]: its transcript saved around each tool-calling turn,
//! the lead's history kept for forks, and a worker's checkpoint commit after each turn
//! that changed files.
//!
//! This file owns when an agent's work becomes durable. It must never let a tool call
//! run before the transcript naming it is synced (after a crash it is answered as
//! interrupted, never run twice), and never let a checkpoint commit race the files it
//! commits (it is awaited before the next tools run).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::task::JoinHandle;

use crate::agent::{Ledger, ObserverError, TurnObserver, TurnState};
use crate::event::AgentLabel;
use crate::model::Message;
use crate::run::context::{LeadHistory, RunContext, lock};
use crate::run::id::SubtaskId;
use crate::store::StoreError;
use crate::store::durable::{self, Durability};
use crate::store::journal::{self, Entry};
use crate::store::slots::SlotFile;
use crate::store::transcript::{self, AgentEnd, AgentTiming, Transcript, TranscriptError};
use crate::worktree::{CheckpointError, Worktree};

/// Why an agent's work could not be made durable. Not retried: the agent's loop stops,
/// its subtask fails, and what was saved before is intact.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("cannot save the transcript: {source}")]
    Transcript {
        #[source]
        source: TranscriptError,
    },
    #[error("checkpoint commit failed: {source}")]
    Checkpoint {
        #[source]
        source: CheckpointError,
    },
    #[error("the run journal cannot be written: {source}")]
    Journal {
        #[source]
        source: StoreError,
    },
    #[error("the checkpoint task failed: {source}")]
    Task {
        #[source]
        source: tokio::task::JoinError,
    },
}

/// The observer of one agent of the run.
pub(crate) struct AgentObserver {
    ctx: Arc<RunContext>,
    label: AgentLabel,
    transcript: SlotFile,
    /// What the agent spent before a resume, so the saved ledger stays whole.
    earlier: Ledger,
    /// A worker's subtask and worktree, committed after each turn that changed files.
    checkpoint: Option<(SubtaskId, Worktree)>,
    /// The lead's history, kept for forks; `None` for every other agent.
    lead_history: Option<Arc<LeadHistory>>,
    /// The checkpoint commit of the latest mutating turn, running while the next model
    /// call is in flight: it is off the critical path, and awaited before any further
    /// tool runs or the subtask goes on, so it never races the files it commits.
    pending_checkpoint: tokio::sync::Mutex<Option<JoinHandle<Result<(), SaveError>>>>,
    /// When the agent started and answered, saved with its transcript for reports.
    timing: Mutex<AgentTiming>,
    /// What grove tells the agent after a turn (the lead: the result's check).
    news: Option<Arc<dyn News>>,
}

/// What grove itself has to tell an agent once a turn's calls are answered.
#[async_trait]
pub(crate) trait News: Send + Sync {
    /// The news, or `None` when there is none.
    async fn news(&self) -> Option<String>;
}

impl AgentObserver {
    /// An observer for the agent `label` of the run, saving its transcript at
    /// `transcript`.
    pub(crate) fn new(
        ctx: &Arc<RunContext>,
        label: AgentLabel,
        transcript: PathBuf,
        earlier: Ledger,
    ) -> Self {
        Self {
            ctx: Arc::clone(ctx),
            label,
            transcript: SlotFile::new(&transcript),
            earlier,
            checkpoint: None,
            lead_history: None,
            pending_checkpoint: tokio::sync::Mutex::new(None),
            timing: Mutex::new(AgentTiming {
                started_ms: Some(journal::now_ms()),
                ..AgentTiming::default()
            }),
            news: None,
        }
    }

    /// Commits `worktree` of `subtask` after every turn that changed files (a worker).
    pub(crate) fn checkpointing(mut self, subtask: SubtaskId, worktree: &Worktree) -> Self {
        self.checkpoint = Some((subtask, worktree.clone()));
        self
    }

    /// Keeps the agent's history in `history` before its tools run (the lead).
    pub(crate) fn keeping_history(mut self, history: Arc<LeadHistory>) -> Self {
        self.lead_history = Some(history);
        self
    }

    /// This observer, telling the agent `news` after each turn.
    pub(crate) fn telling(mut self, news: Arc<dyn News>) -> Self {
        self.news = Some(news);
        self
    }

    /// Records `model` as the agent's model and carries on the timing of its earlier
    /// run (before a resume), keeping its first start.
    pub(crate) fn with_timing(self, model: &str, earlier: AgentTiming) -> Self {
        {
            let mut timing = lock(&self.timing);
            timing.started_ms = earlier.started_ms.or(timing.started_ms);
            timing.turn_ms = earlier.turn_ms;
            timing.model = Some(model.to_owned());
        }
        self
    }

    /// Saves the agent's whole conversation (`messages`, its last answer included) and
    /// when its loop ended and what it cost in all (`loop_ledger` is this run's; earlier
    /// runs are added). A lead that ends without calling a tool saved nothing before: this
    /// is its only transcript. A failure is noted, not fatal: only reports lose.
    pub(crate) fn finished(&self, loop_ledger: &Ledger, messages: &[Message]) {
        let mut ledger = self.earlier;
        ledger.add(loop_ledger);
        let end = AgentEnd {
            ended_ms: journal::now_ms(),
            ledger,
        };
        let saved = durable::off_the_runtime(|| {
            if !messages.is_empty() {
                let transcript = Transcript {
                    messages: messages.to_vec(),
                    ledger,
                    timing: lock(&self.timing).clone(),
                };
                transcript::save_with(&self.transcript, &transcript, Durability::Buffered)?;
            }
            transcript::save_end(&transcript::end_path(self.transcript.path()), &end)
        });
        if let Err(error) = saved {
            self.ctx.note(format!("{}: {error}", self.label));
        }
    }

    fn save(&self, state: TurnState<'_>, durability: Durability) -> Result<(), SaveError> {
        let mut ledger = self.earlier;
        ledger.add(state.ledger);
        let transcript = Transcript {
            messages: state.messages.to_vec(),
            ledger,
            timing: lock(&self.timing).clone(),
        };
        durable::off_the_runtime(|| {
            transcript::save_with(&self.transcript, &transcript, durability)
        })
        .map_err(|source| self.paused_if_disk_full(SaveError::Transcript { source }))
    }

    /// `error`, after pausing the run when it is a full disk.
    fn paused_if_disk_full(&self, error: SaveError) -> SaveError {
        let what = format!("saving {}'s work", self.label);
        self.ctx.pause_if_disk_full(&what, &error);
        error
    }

    /// Waits for the checkpoint commit in flight, if any; its failure, if it failed.
    pub(crate) async fn flush(&self) -> Result<(), SaveError> {
        let pending = self.pending_checkpoint.lock().await.take();
        match pending {
            None => Ok(()),
            Some(task) => task
                .await
                .map_err(|source| SaveError::Task { source })?
                .map_err(|error| self.paused_if_disk_full(error)),
        }
    }

    /// Starts the checkpoint commit of turn `turn` in the background.
    async fn start_checkpoint(&self, subtask: SubtaskId, worktree: &Worktree, turn: u32) {
        let (ctx, worktree) = (Arc::clone(&self.ctx), worktree.clone());
        let label = self.label;
        let task = tokio::spawn(async move {
            let commit = worktree
                .checkpoint(&ctx.facts.repo, &format!("{label}: turn {turn}"))
                .await
                .map_err(|source| SaveError::Checkpoint { source })?;
            if let Some(commit) = commit {
                ctx.journal(Entry::Checkpoint {
                    subtask,
                    commit,
                    turn,
                })
                .map_err(|source| SaveError::Journal { source })?;
            }
            Ok(())
        });
        *self.pending_checkpoint.lock().await = Some(task);
    }
}

#[async_trait]
impl TurnObserver for AgentObserver {
    async fn news(&self) -> Option<String> {
        match &self.news {
            Some(news) => news.news().await,
            None => None,
        }
    }

    async fn before_tools(
        &self,
        state: TurnState<'_>,
        repeatable: bool,
    ) -> Result<(), ObserverError> {
        // Called once per turn that calls tools, right after its answer arrived.
        lock(&self.timing).turn_ms.push(journal::now_ms());
        self.flush().await?;
        if let Some(history) = &self.lead_history {
            history.set(state.messages);
        }
        // Synced: the tool calls about to run must be on disk before they run, so that
        // after any crash they are answered as interrupted, never run a second time. Calls
        // that may run twice need not wait for the disk (32 workers reading files at once
        // waited for 32 fsyncs): a process crash keeps the save, and a machine crash that
        // loses it only asks the model that turn again.
        let durability = if repeatable {
            Durability::Buffered
        } else {
            Durability::Synced
        };
        Ok(self.save(state, durability)?)
    }

    async fn after_turn(&self, state: TurnState<'_>, mutated: bool) -> Result<(), ObserverError> {
        self.flush().await?;
        if let Some((subtask, worktree)) = &self.checkpoint
            && mutated
        {
            self.start_checkpoint(*subtask, worktree, state.turn).await;
        }
        // Not synced: were these results lost in a machine crash, the calls would read as
        // interrupted from the synced save before them — reported, never run again.
        Ok(self.save(state, Durability::Buffered)?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::run::test_support::TestRun;
    use crate::status::SubtaskId;

    /// The `seq` of the slot file at `path`'s header.
    fn slot_seq(path: &std::path::Path) -> u64 {
        let text = std::fs::read_to_string(path).unwrap();
        let seq = text.split_whitespace().nth(1).unwrap();
        seq.trim_start_matches("seq=").parse().unwrap()
    }

    #[tokio::test]
    async fn a_turn_whose_calls_may_run_twice_is_saved_without_waiting_for_the_disk() {
        let run = TestRun::alpha().await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("S1.json");
        let observer = AgentObserver::new(
            &run.ctx,
            AgentLabel::Subtask(SubtaskId(1)),
            path.clone(),
            Ledger::default(),
        );
        let ledger = Ledger::default();
        for (turn, repeatable) in [(1, false), (2, true), (3, true)] {
            let state = TurnState {
                turn,
                messages: &[],
                ledger: &ledger,
            };
            observer.before_tools(state, repeatable).await.unwrap();
        }
        // A synced save moves the next write to the other slot; an unsynced one leaves
        // the synced slot alone, so the two unsynced saves both went to the second.
        assert_eq!(
            (slot_seq(&path), slot_seq(&dir.path().join("S1.1.json"))),
            (1, 3),
            "only the turn with a call that must not run twice waited for an fsync"
        );
    }
}
