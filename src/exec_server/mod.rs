//! `grove exec-server`: the far side of a remote tree. It serves one connection on its
//! standard input and output: it keeps a mirror per repository under its home, opens
//! one tree there for the connection, runs grove's own tools and commands in it under
//! grove's own sandbox, and sends each checkpoint's objects back.
//!
//! This module owns the server's loop: calls run concurrently (a ping is answered while
//! a test runs), a cancellation stops its call, and the end of the input stops
//! everything the connection started and removes its tree. It must never serve a call
//! outside its one tree, nor outlive its connection.

mod session;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::remote::protocol::{self, Call, PROTOCOL, Reply, Request, Response, VERSION, WireError};
use session::{Mirrors, Session};

/// Why the server stopped before its input ended.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The input was not this protocol, or the output failed. Not retried.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Where the server keeps its mirrors and trees: `GROVE_REMOTE_HOME`, else `remote/` in
/// grove's cache (`$XDG_CACHE_HOME/grove`, `~/.cache/grove`).
pub fn default_home(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> PathBuf {
    env.iter()
        .find(|(key, _)| key == "GROVE_REMOTE_HOME")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| path.is_absolute())
        .unwrap_or_else(|| crate::git::cache_home(env).join("remote"))
}

struct Server<W> {
    out: tokio::sync::Mutex<W>,
    mirrors: Mirrors,
    session: tokio::sync::OnceCell<Arc<Session>>,
    running: Mutex<HashMap<u64, CancellationToken>>,
    stop: CancellationToken,
}

/// Serves one connection until `input` ends; then stops what it started and removes its
/// tree.
pub async fn serve<R, W>(input: R, output: W, home: PathBuf) -> Result<(), ServeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let server = Arc::new(Server {
        out: tokio::sync::Mutex::new(output),
        mirrors: Mirrors::new(home),
        session: tokio::sync::OnceCell::new(),
        running: Mutex::default(),
        stop: CancellationToken::new(),
    });
    let tracker = TaskTracker::new();
    let mut input = BufReader::new(input);
    let ended = loop {
        let (request, payload) =
            match protocol::read::<_, Request>(&mut input, protocol::Limits::REQUESTS).await {
                Ok(Some(message)) => message,
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            };
        if let Call::Cancel { id } = request.call {
            if let Some(token) = server.running_token(id) {
                token.cancel();
            }
            continue;
        }
        let token = server.stop.child_token();
        server.lock_running().insert(request.id, token.clone());
        let server = Arc::clone(&server);
        tracker.spawn(async move {
            let id = request.id;
            let answer = server.answer(request.call, payload, token).await;
            server.lock_running().remove(&id);
            server.reply(id, answer).await;
        });
    };
    server.stop.cancel();
    tracker.close();
    // What was cancelled ends at once (its process group killed); a call stuck in git
    // is given a moment, then left to the process's exit.
    let _ = tokio::time::timeout(Duration::from_secs(10), tracker.wait()).await;
    if let Some(session) = server.session.get() {
        session.remove().await;
    }
    Ok(ended?)
}

impl<W: AsyncWrite + Unpin + Send> Server<W> {
    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CancellationToken>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn running_token(&self, id: u64) -> Option<CancellationToken> {
        self.lock_running().get(&id).cloned()
    }

    async fn reply(&self, id: u64, answer: Result<(Reply, Vec<u8>), String>) {
        let (ok, error, payload) = match answer {
            Ok((reply, payload)) => (Some(reply), None, payload),
            Err(message) => (None, Some(message), Vec::new()),
        };
        let response = Response {
            id,
            ok,
            error,
            bytes: (!payload.is_empty()).then_some(payload.len() as u64),
        };
        let mut out = self.out.lock().await;
        if protocol::write(&mut *out, &response, &payload)
            .await
            .is_err()
        {
            // The client is gone; the end of the input stops the rest.
            self.stop.cancel();
        }
    }

    async fn answer(
        &self,
        call: Call,
        payload: Vec<u8>,
        cancel: CancellationToken,
    ) -> Result<(Reply, Vec<u8>), String> {
        let done = |reply| Ok((reply, Vec::new()));
        match call {
            Call::Hello { .. } => done(Reply::Hello {
                version: VERSION.to_owned(),
                protocol: PROTOCOL,
            }),
            Call::Ping => done(Reply::Done),
            Call::Cancel { .. } => done(Reply::Done),
            Call::Haves { repo, want } => {
                let (has, tips) = self.mirrors.haves(&repo, &want).await?;
                done(Reply::Haves { has, tips })
            }
            Call::Receive { repo, commit } => {
                self.mirrors.receive(&repo, &commit, payload).await?;
                done(Reply::Done)
            }
            Call::Open(tree) => {
                let opened = Session::open(&self.mirrors, tree, self.stop.clone());
                let session = self.session.get_or_try_init(|| opened).await?;
                done(Reply::Opened {
                    path: session.path().to_path_buf(),
                })
            }
            call => {
                let Some(session) = self.session.get() else {
                    return Err("no tree is open on this connection (call `open` first)".into());
                };
                session.answer(call, cancel).await
            }
        }
    }
}
