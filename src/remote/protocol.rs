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

/// What one side reads from the other at most: the longest line, and the most bytes a
/// line may announce after it. A size over them is refused as announced, before any of
/// it is read or a buffer is made for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub line: usize,
    pub payload: u64,
}

impl Limits {
    /// What the exec-server takes from grove, which it trusts: a tool call's input may
    /// carry a whole file a model wrote, and a base's bundle a repository's history.
    pub const REQUESTS: Self = Self {
        line: 16 << 20,
        payload: 4 << 30,
    };

    /// What grove takes from a host, which it does not trust: a reply is a tool's capped
    /// output (a few hundred KB as JSON at worst), and a checkpoint's bundle only the
    /// objects made since the last one came back. A worker that writes more than this
    /// in one turn is refused with the size, not held in memory.
    pub const REPLIES: Self = Self {
        line: 4 << 20,
        payload: 1 << 30,
    };
}

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
    /// A line over the limits, or a payload announced over them (refused before it is
    /// read). Not retried: the connection is out of step from there on.
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

/// Reads one message and the bytes it says follow, within `limits`; `None` at a clean
/// end of the pipe.
pub async fn read<R, T>(reader: &mut R, limits: Limits) -> Result<Option<(T, Vec<u8>)>, WireError>
where
    R: AsyncBufRead + Unpin,
    T: for<'de> Deserialize<'de> + HasPayload,
{
    let mut line = Vec::new();
    // The newline counts: a line of `limits.line` bytes and its newline are taken whole.
    let read = (&mut *reader)
        .take(limits.line as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        if line.len() > limits.line {
            return Err(WireError::TooLarge {
                what: "a line",
                size: line.len() as u64,
                limit: limits.line as u64,
            });
        }
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let message: T = serde_json::from_slice(&line).map_err(|error| WireError::Malformed {
        reason: error.to_string(),
        line: crate::text::truncate(&String::from_utf8_lossy(&line), 200),
    })?;
    let size = message.payload_len();
    if size > limits.payload {
        return Err(WireError::TooLarge {
            what: "a payload",
            size,
            limit: limits.payload,
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
        let read: Option<(Request, Vec<u8>)> = read(&mut reader, Limits::REQUESTS).await.unwrap();
        assert_eq!(
            read,
            Some((request, b"a\nb".to_vec())),
            "a request and the bytes after it are read back whole"
        );
        let error = super::read::<_, Request>(&mut reader, Limits::REQUESTS)
            .await
            .unwrap_err();
        assert!(
            matches!(error, WireError::Malformed { .. }),
            "a line that is not a request is malformed: {error}"
        );
        let end: Option<(Request, Vec<u8>)> =
            super::read(&mut reader, Limits::REQUESTS).await.unwrap();
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
        let error = super::read::<_, Response>(&mut reader, Limits::REPLIES)
            .await
            .unwrap_err();
        assert!(matches!(error, WireError::Io(_)), "{error}");
    }

    #[tokio::test]
    async fn an_announced_payload_over_the_limit_is_refused_before_a_byte_of_it_is_read() {
        let over = Limits::REPLIES.payload + 1;
        let response = Response {
            id: 4,
            ok: Some(Reply::Done),
            error: None,
            bytes: Some(over),
        };
        // Only the line is on the wire: reading any of the payload would end in an
        // unexpected end of input, not in the refusal.
        let mut wire = serde_json::to_vec(&response).unwrap();
        wire.push(b'\n');
        let mut reader = tokio::io::BufReader::new(wire.as_slice());
        let error = super::read::<_, Response>(&mut reader, Limits::REPLIES)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                WireError::TooLarge { what: "a payload", size, limit }
                    if size == over && limit == Limits::REPLIES.payload
            ),
            "a payload announced over the limit is refused as announced: {error}"
        );
        let limits = Limits {
            line: 8,
            payload: 0,
        };
        let mut reader = tokio::io::BufReader::new(&b"\"123456789\"\n"[..]);
        let error = super::read::<_, Response>(&mut reader, limits)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                WireError::TooLarge {
                    what: "a line",
                    size: 9,
                    limit: 8
                }
            ),
            "a line is read no further than its limit: {error}"
        );
    }
}
