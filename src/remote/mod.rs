//! Workers on other machines: a tree whose files, tools and commands live on a remote
//! host, reached through `grove exec-server` behind any launcher that gives a stdio pipe
//! (`ssh HOST`, `kubectl exec -i POD --`, `podman exec -i BOX`).
//!
//! Code travels as git objects: the base goes to the host's mirror as a bundle against
//! what the mirror holds, and each checkpoint comes back as the objects of its tree,
//! which grove commits here. Keys, the lead, the journal and the merge queue never leave
//! this machine; the host only ever sees the tree of the subtask it works on.
//!
//! This module owns the local side: the protocol, the connection, the hosts and the
//! tree. The server is `exec_server`'s. It must never let a lost host hang a caller: every
//! call ends, answered or failed with why.

pub mod arrival;
pub mod client;
pub mod hosts;
pub mod protocol;
pub mod ship;
pub mod tree;

pub use client::Connection;
pub use hosts::{HostPool, Placement, RemoteHost};
pub use tree::{OpenSpec, RemoteTree};

/// Why a remote host could not do what grove asked.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The launcher could not be started here. Not retried.
    #[error("cannot start the launcher of remote host `{host}` (`{command}`): {source}")]
    Launch {
        host: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The connection ended or the host stopped answering. Its subtask is retried once on
    /// another host.
    #[error("lost remote host `{host}`: {reason}{}", stderr_note(stderr))]
    Lost {
        host: String,
        reason: String,
        stderr: String,
    },
    /// The host's grove is another version: both must be the same. Not retried.
    #[error(
        "remote host `{host}` runs grove {remote}, this is grove {local}: install grove \
         {local} there (or point `[remote.{host}] program` at it)"
    )]
    Version {
        host: String,
        local: String,
        remote: String,
    },
    /// The host's grove refused or failed the call (its message). Not retried.
    #[error("remote host `{host}`: {message}")]
    Refused { host: String, message: String },
    /// The host sent a line, or announced a payload, over what grove takes from a host
    /// ([`protocol::Limits::REPLIES`]): refused as announced, before any of it was read,
    /// and the connection ended there (it is out of step). Not retried on this host; its
    /// tree moves as from a lost one.
    #[error(
        "remote host `{host}` sent {what} of {size} bytes, over grove's limit of {limit}; \
         its connection was ended"
    )]
    TooLarge {
        host: String,
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// A tree the host sent back holds an entry grove never commits (see
    /// [`arrival`]): refused as it arrived, nothing of it committed. Not retried: the
    /// host's grove would never send it.
    #[error(
        "remote host `{host}` sent back a tree holding {}, {why}: refused, nothing of it \
         is committed",
        crate::text::quoted_path(path)
    )]
    RefusedTree {
        host: String,
        path: String,
        why: &'static str,
    },
    /// The host answered with something else than the call's reply. Not retried.
    #[error("remote host `{host}` gave a wrong answer to {call}")]
    Unexpected { host: String, call: &'static str },
    /// Making or taking a bundle here failed (see [`crate::git::GitError`]).
    #[error("remote host `{host}`: {source}")]
    Git {
        host: String,
        #[source]
        source: crate::git::GitError,
    },
}

impl RemoteError {
    /// True when the host is gone (its subtask may go to another host).
    pub fn is_lost(&self) -> bool {
        matches!(self, Self::Lost { .. })
    }
}

fn stderr_note(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (the launcher said: {stderr})")
    }
}
