//! Saved conversations, so that an interrupted run continues where each agent was.
//!
//! This file owns `<run dir>/transcripts/<label>-<role>.json`: an agent's messages and
//! ledger, replaced atomically around every turn that calls tools (in two slots, see
//! [`SlotFile`]). It must never be the source of truth for work (git refs are): it only
//! lets an agent pick up its thread.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ledger::Ledger;
use crate::model::{ContentBlock, Message, Role};
use crate::store::durable::{self, Durability, DurableError};
use crate::store::slots::SlotFile;

/// One agent's saved conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub messages: Vec<Message>,
    pub ledger: Ledger,
    /// When the agent started and answered, for `grove report`'s timeline. Absent in
    /// transcripts written before it was recorded.
    #[serde(default)]
    pub timing: AgentTiming,
}

/// When an agent ran, kept beside its conversation because the journal holds no
/// record per turn (each journal record is fsynced; a turn's time is not worth that).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTiming {
    /// When the agent's loop first started (kept across resumes), in ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// When each saved turn's model answer arrived, oldest first. Only turns that call
    /// tools are saved, so an agent's last answer (the one without tool calls) has no
    /// entry here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turn_ms: Vec<u64>,
    /// The model name the agent's requests carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Why a transcript could not be saved or read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error(transparent)]
    Durable(#[from] DurableError),
    /// Reading or writing a transcript (or its end file) failed.
    #[error("transcript {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("transcript {path} is not valid: {source}")]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The file of agent `role` working on `label` in the run directory `run_dir`.
pub fn transcript_path(run_dir: &Path, label: &str, role: &str) -> PathBuf {
    run_dir
        .join("transcripts")
        .join(format!("{label}-{role}.json"))
}

/// How an agent's loop ended, saved beside its transcript for `grove report`: the
/// transcript itself is saved only around turns that call tools, so it lacks the last
/// turn's tokens and time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEnd {
    /// When the loop returned, in ms since the epoch.
    pub ended_ms: u64,
    /// What the agent cost in all, earlier runs before a resume included.
    pub ledger: Ledger,
}

/// The end file of the agent whose transcript is at `transcript`
/// (`<label>-<role>.end.json`).
pub fn end_path(transcript: &Path) -> PathBuf {
    transcript.with_extension("end.json")
}

/// Writes an agent's end file (renamed into place, not fsynced), creating its directory:
/// an agent that never saved a transcript (a lead that ends without a tool call) has
/// none yet. Only reports read it, and a machine crash at worst costs the report this
/// agent's last turn; the two fsyncs it took were on the way from each reviewer's
/// verdict to its merge.
pub fn save_end(path: &Path, end: &AgentEnd) -> Result<(), TranscriptError> {
    create_parent(path)?;
    let bytes = serde_json::to_vec(end).map_err(|source| TranscriptError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    durable::replace_file_unsynced(path, &bytes)?;
    Ok(())
}

/// Creates the directory `path` lies in, if it is missing.
fn create_parent(path: &Path) -> Result<(), TranscriptError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| TranscriptError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// The end file at `path`, or `None` when the agent has not ended (or never saved one).
pub fn load_end(path: &Path) -> Result<Option<AgentEnd>, TranscriptError> {
    read_json(path)
}

/// Replaces the transcript at `path` atomically, fsynced.
pub fn save(path: &Path, transcript: &Transcript) -> Result<(), TranscriptError> {
    save_with(&SlotFile::new(path), transcript, Durability::Synced)
}

/// Replaces the transcript kept in `file` (see [`SlotFile`]: a save creates no file once
/// both slots exist), fsynced or not as `durability` says.
pub fn save_with(
    file: &SlotFile,
    transcript: &Transcript,
    durability: Durability,
) -> Result<(), TranscriptError> {
    create_parent(file.path())?;
    let bytes = serde_json::to_vec(transcript).map_err(|source| TranscriptError::Invalid {
        path: file.path().to_path_buf(),
        source,
    })?;
    file.write(&bytes, durability)?;
    Ok(())
}

/// The transcript at `path`, or `None` when the agent never saved one.
pub fn load(path: &Path) -> Result<Option<Transcript>, TranscriptError> {
    let Some(bytes) = SlotFile::read(path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| TranscriptError::Invalid {
            path: path.to_path_buf(),
            source,
        })
}

/// The JSON file at `path`, or `None` when there is none.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, TranscriptError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(TranscriptError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| TranscriptError::Invalid {
            path: path.to_path_buf(),
            source,
        })
}

/// The text every tool call gets that was pending when the process stopped: it may
/// have run in part, so it is never run again; the model decides what to do.
pub const INTERRUPTED_CALL: &str = "grove was interrupted while this tool call was pending; \
     it was not run again. It may have run in part: check the files before you go on.";

/// The tool calls of the trailing assistant message that have no results yet, as
/// `(id, name, input)`.
pub fn pending_calls(messages: &[Message]) -> Vec<(String, String, serde_json::Value)> {
    match messages.last() {
        Some(last) if last.role == Role::Assistant => last
            .tool_uses()
            .map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

/// The conversation as it was when `tool` was last called with an input `wanted`
/// accepts: the messages up to the assistant turn holding that call, included.
pub fn through_call<'a>(
    messages: &'a [Message],
    tool: &str,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> Option<&'a [Message]> {
    let turn = messages.iter().rposition(|message| {
        message.role == Role::Assistant
            && message
                .tool_uses()
                .any(|(_, name, input)| name == tool && wanted(input))
    })?;
    Some(&messages[..=turn])
}

/// How a call that was pending when the process stopped is answered when its agent
/// goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingAnswer {
    /// What the call came to after all (a delegated subtask's result).
    Result(String),
    /// An error result saying why the call came to nothing.
    Error(String),
    /// [`INTERRUPTED_CALL`], as an error.
    Interrupted,
}

/// Appends one user message answering every pending call with `answer(id, name,
/// input)`.
pub fn answer_pending(
    messages: &mut Vec<Message>,
    mut answer: impl FnMut(&str, &str, &serde_json::Value) -> PendingAnswer,
) {
    let pending = pending_calls(messages);
    if pending.is_empty() {
        return;
    }
    let content = pending
        .into_iter()
        .map(|(id, name, input)| {
            let (content, is_error) = match answer(&id, &name, &input) {
                PendingAnswer::Result(text) => (text, false),
                PendingAnswer::Error(text) => (text, true),
                PendingAnswer::Interrupted => (INTERRUPTED_CALL.to_owned(), true),
            };
            ContentBlock::ToolResult {
                tool_use_id: id,
                content,
                is_error,
            }
        })
        .collect();
    messages.push(Message {
        role: Role::User,
        content,
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pending_calls_are_answered_once_and_never_rerun() {
        let mut messages = vec![
            Message::user_text("brief"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text { text: "go".into() },
                    ContentBlock::ToolUse {
                        id: "a".into(),
                        name: "delegate".into(),
                        input: json!({"task": "x"}),
                    },
                    ContentBlock::ToolUse {
                        id: "b".into(),
                        name: "bash".into(),
                        input: json!({"command": "make"}),
                    },
                ],
            },
        ];
        answer_pending(&mut messages, |_, name, _| match name {
            "delegate" => PendingAnswer::Result("S1 merged".to_owned()),
            _ => PendingAnswer::Interrupted,
        });
        assert_eq!(
            messages.last().unwrap(),
            &Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "a".into(),
                        content: "S1 merged".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "b".into(),
                        content: INTERRUPTED_CALL.into(),
                        is_error: true,
                    },
                ],
            }
        );
        assert!(
            pending_calls(&messages).is_empty(),
            "answered calls are not pending"
        );
    }

    #[test]
    fn transcripts_round_trip_and_missing_ones_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = transcript_path(dir.path(), "S1", "worker");
        assert_eq!(load(&path).unwrap(), None);
        let transcript = Transcript {
            messages: vec![Message::user_text("hi")],
            ledger: Ledger {
                steps: 2,
                ..Ledger::default()
            },
            timing: AgentTiming {
                started_ms: Some(5),
                turn_ms: vec![7, 9],
                model: Some("m".into()),
            },
        };
        save(&path, &transcript).unwrap();
        assert_eq!(load(&path).unwrap(), Some(transcript));

        let end_file = end_path(&path);
        assert_eq!(end_file, dir.path().join("transcripts/S1-worker.end.json"));
        assert_eq!(load_end(&end_file).unwrap(), None);
        let end = AgentEnd {
            ended_ms: 11,
            ledger: Ledger {
                steps: 3,
                ..Ledger::default()
            },
        };
        save_end(&end_file, &end).unwrap();
        assert_eq!(load_end(&end_file).unwrap(), Some(end));
    }
}
