//! The exec-server protocol: what grove and `grove exec-server` say to each other over
//! the launcher's pipe (ssh, `kubectl exec -i`, `podman exec -i`).
//!
//! One message a line of JSON; a message that carries git objects (a bundle) says how
//! many bytes follow its line, and exactly that many raw bytes come next. Requests carry
//! an id, answered once each, in any order: a long command never holds up a ping.
//!
//! This file owns the wire format and its limits. It must never trust a length or a
//! line from the other side beyond those limits: the other side may be a broken or
//! hostile program.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol's version: both sides must speak the same one.
pub const PROTOCOL: u32 = 1;

/// This grove's version, which the other side must match exactly: the two binaries
/// share tool and sandbox code, so a different one could run a tool differently.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The longest line either side accepts (a tool's output is capped well below it).
pub const MAX_LINE: usize = 16 << 20;

/// The most bytes one message may carry (a bundle of a base).
pub const MAX_PAYLOAD: u64 = 4 << 30;

/// What the sandbox of a remote tree's commands is: the local run's choice, applied by
/// the remote grove on its own machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// `on`, `no-loopback` or `off`.
    pub mode: String,
    pub allow_network: bool,
    pub max_processes: u64,
    pub max_file_bytes: u64,
    pub max_memory_bytes: u64,
    pub max_worktree_bytes: Option<u64>,
}

impl SandboxSpec {
    /// The sandbox of mode `mode`, the network open when `allow_network`, every limit at
    /// the sandbox's default.
    pub fn of(mode: crate::tools::sandbox::SandboxMode, allow_network: bool) -> Self {
        let policy = crate::tools::sandbox::SandboxPolicy::default();
        Self {
            mode: mode.as_str().to_owned(),
            allow_network,
            max_processes: policy.max_processes,
            max_file_bytes: policy.max_file_bytes,
            max_memory_bytes: policy.max_memory_bytes,
            max_worktree_bytes: policy.max_worktree_bytes,
        }
    }
}

/// What `open` makes: `start` checked out on the branch of subtask `subtask` of `run` in
/// mirror `repo`, its commands under `sandbox`, its file tools confined to `scope` when
/// there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTree {
    pub repo: String,
    pub run: String,
    pub subtask: u32,
    pub start: String,
    pub sandbox: SandboxSpec,
    pub scope: Option<Vec<String>>,
}

/// A request's call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Call {
    /// The first message: the versions must match.
    Hello { version: String, protocol: u32 },
    /// Keeps a quiet connection known to be alive.
    Ping,
    /// Stops the call with this id (a tool or command the caller no longer waits for).
    Cancel { id: u64 },
    /// Does the repository's mirror hold `want`, and which commits does it hold?
    Haves { repo: String, want: String },
    /// A bundle of objects for the mirror (its bytes follow), with the commit it brings.
    Receive { repo: String, commit: String },
    /// Makes this connection's tree.
    Open(OpenTree),
    /// Runs one of grove's own tools in the tree.
    Tool { name: String, input: Value },
    /// Runs a command in the tree (a check, a setup), `cwd` relative to the tree.
    Exec {
        command: String,
        cwd: PathBuf,
        timeout_ms: u64,
        head: usize,
        tail: usize,
        /// A worktree's setup command, with the network when `setup_network`.
        setup: bool,
        setup_network: bool,
    },
    /// Commits what changed in the tree; the answer carries the objects.
    Checkpoint { label: String },
}

/// One request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub call: Call,
    /// Bytes that follow the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// How a command ended, as [`crate::tools::ExecOutcome`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    Exited(i32),
    Signalled(i32),
    TimedOut,
    Cancelled,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Hello {
        version: String,
        protocol: u32,
    },
    Done,
    Haves {
        has: bool,
        tips: Vec<String>,
    },
    Opened {
        path: PathBuf,
    },
    Tool {
        content: String,
        is_error: bool,
        ends_loop: bool,
    },
    Exec {
        ended: Ended,
        head: Vec<u8>,
        tail: Vec<u8>,
        total_bytes: u64,
        output_abandoned: bool,
        notes: Vec<String>,
        disk_over: Option<(u64, u64)>,
    },
    /// The tree's state: `None` when nothing changed since the last one; else the tree
    /// object, in the commit the bundle that follows brings.
    Checkpoint {
        tree: Option<String>,
        commit: Option<String>,
    },
}

/// One answer: a reply or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Reply>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The pipe failed or closed mid-message. Not retried: the connection is gone.
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The other side sent what is not a message of this protocol. Not retried.
    #[error("the other side sent a malformed message ({reason}): {line}")]
    Malformed { reason: String, line: String },
    /// A line or payload over the limits. Not retried.
    #[error("the other side sent {what} of {size} bytes, over the limit of {limit}")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
}

/// Writes `message` as one line, then `payload`, and flushes.
pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    message: &T,
    payload: &[u8],
) -> Result<(), WireError> {
    let mut line = serde_json::to_vec(message).map_err(|error| WireError::Malformed {
        reason: error.to_string(),
        line: String::new(),
    })?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.write_all(payload).await?;
    writer.flush().await?;
    Ok(())
}

/// Reads one message and the bytes it says follow; `None` at a clean end of the pipe.
pub async fn read<R, T>(reader: &mut R) -> Result<Option<(T, Vec<u8>)>, WireError>
where
    R: AsyncBufRead + Unpin,
    T: for<'de> Deserialize<'de> + HasPayload,
{
    let mut line = Vec::new();
    let read = (&mut *reader)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        if line.len() > MAX_LINE {
            return Err(WireError::TooLarge {
                what: "a line",
                size: line.len() as u64,
                limit: MAX_LINE as u64,
            });
        }
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let message: T = serde_json::from_slice(&line).map_err(|error| WireError::Malformed {
        reason: error.to_string(),
        line: crate::text::truncate(&String::from_utf8_lossy(&line), 200),
    })?;
    let size = message.payload_len();
    if size > MAX_PAYLOAD {
        return Err(WireError::TooLarge {
            what: "a payload",
            size,
            limit: MAX_PAYLOAD,
        });
    }
    let mut payload = Vec::new();
    (&mut *reader).take(size).read_to_end(&mut payload).await?;
    if payload.len() as u64 != size {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(Some((message, payload)))
}

/// A message that may say bytes follow it.
pub trait HasPayload {
    fn payload_len(&self) -> u64;
}

impl HasPayload for Request {
    fn payload_len(&self) -> u64 {
        self.bytes.unwrap_or(0)
    }
}

impl HasPayload for Response {
    fn payload_len(&self) -> u64 {
        self.bytes.unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_message_and_its_bytes_come_back_as_sent_and_a_bad_line_is_named() {
        let request = Request {
            id: 7,
            call: Call::Receive {
                repo: "r".into(),
                commit: "c".into(),
            },
            bytes: Some(3),
        };
        let mut wire = Vec::new();
        write(&mut wire, &request, b"a\nb").await.unwrap();
        write(&mut wire, &Call::Ping, b"").await.unwrap();
        let mut reader = tokio::io::BufReader::new(wire.as_slice());
        let read: Option<(Request, Vec<u8>)> = read(&mut reader).await.unwrap();
        assert_eq!(
            read,
            Some((request, b"a\nb".to_vec())),
            "a request and the bytes after it are read back whole"
        );
        let error = super::read::<_, Request>(&mut reader).await.unwrap_err();
        assert!(
            matches!(error, WireError::Malformed { .. }),
            "a line that is not a request is malformed: {error}"
        );
        let end: Option<(Request, Vec<u8>)> = super::read(&mut reader).await.unwrap();
        assert_eq!(end, None, "the end of the pipe is a clean end");
    }

    #[tokio::test]
    async fn a_payload_cut_short_is_an_error_not_a_short_bundle() {
        let mut wire = Vec::new();
        let response = Response {
            id: 1,
            ok: Some(Reply::Done),
            error: None,
            bytes: Some(10),
        };
        write(&mut wire, &response, b"abc").await.unwrap();
        let mut reader = tokio::io::BufReader::new(wire.as_slice());
        let error = super::read::<_, Response>(&mut reader).await.unwrap_err();
        assert!(matches!(error, WireError::Io(_)), "{error}");
    }
}
