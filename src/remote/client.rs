//! One connection to a `grove exec-server`, started through a host's launcher.
//!
//! This file owns the connection's life: the launcher process, the one reader that
//! hands each answer to its caller, and the heartbeat that finds a host that hangs. It
//! must never leave a caller waiting on a connection that is gone: when the pipe closes,
//! the server stops answering pings, or the launcher dies, every waiting call fails at
//! once with why, and the launcher is killed.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::RemoteError;
use super::hosts::RemoteHost;
use super::protocol::{self, Call, Limits, PROTOCOL, Reply, Request, Response, VERSION, WireError};
use super::ship;

/// What the reader hands a caller: the reply and the bytes after it, or why none came.
type Answer = Result<(Reply, Vec<u8>), RemoteError>;

/// The last bytes of the launcher's stderr kept for messages (ssh's "connection
/// refused", a shell's "grove: not found").
const STDERR_TAIL: usize = 2048;

/// What a host sent over [`Limits::REPLIES`]: what, its size, the limit.
type Oversize = (&'static str, u64, u64);

/// A live connection to one host's exec-server.
pub struct Connection {
    host: String,
    /// The server's input; taken (closed) when grove ends the connection.
    writer: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Answer>>>>,
    next: AtomicU64,
    /// Why the connection ended, once it has.
    lost: Arc<Mutex<Option<String>>>,
    /// What the host sent over the limits, when that ended the connection.
    oversize: Mutex<Option<Oversize>>,
    closed: CancellationToken,
    child: Arc<tokio::sync::Mutex<Child>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Connection {
    /// Starts `host`'s launcher with the exec-server after it, and greets the server:
    /// its grove must be this one's version. A host without grove (and `ship` on) gets
    /// this one, shipped over the launcher, unless an earlier run shipped it already.
    pub async fn open(host: &RemoteHost) -> Result<Arc<Self>, RemoteError> {
        let error = match Self::open_with(host).await {
            Err(error) if host.ship && ship::program_missing(&error) => error,
            other => return other,
        };
        let shipped = RemoteHost {
            program: ship::shipped_program(),
            ..host.clone()
        };
        match Self::open_with(&shipped).await {
            Err(again) if ship::program_missing(&again) => {}
            other => return other,
        }
        ship::ship(host)
            .await
            .map_err(|shipping| RemoteError::Refused {
                host: host.name.clone(),
                message: format!("{error}; {shipping}"),
            })?;
        Self::open_with(&shipped).await
    }

    async fn open_with(host: &RemoteHost) -> Result<Arc<Self>, RemoteError> {
        let command_line = host.command_line();
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command_line)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|source| RemoteError::Launch {
                host: host.name.clone(),
                command: command_line.clone(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(RemoteError::Launch {
                host: host.name.clone(),
                command: command_line,
                source: std::io::Error::other("the launcher's pipes were not made"),
            });
        };
        let connection = Arc::new(Self {
            host: host.name.clone(),
            writer: tokio::sync::Mutex::new(Some(stdin)),
            pending: Arc::default(),
            next: AtomicU64::new(1),
            lost: Arc::default(),
            oversize: Mutex::default(),
            closed: CancellationToken::new(),
            child: Arc::new(tokio::sync::Mutex::new(child)),
            stderr: Arc::default(),
        });
        let tail = Arc::clone(&connection.stderr);
        tokio::spawn(async move {
            let mut chunk = [0u8; 4096];
            while let Ok(read @ 1..) = stderr.read(&mut chunk).await {
                let mut kept = locked(&tail);
                kept.extend_from_slice(&chunk[..read]);
                let excess = kept.len().saturating_sub(STDERR_TAIL);
                kept.drain(..excess);
            }
        });
        tokio::spawn(Arc::clone(&connection).read_answers(BufReader::new(stdout)));
        tokio::spawn(Arc::clone(&connection).heartbeat(host.silence()));
        connection.greet(host.silence()).await?;
        Ok(connection)
    }

    async fn greet(&self, limit: Duration) -> Result<(), RemoteError> {
        let hello = Call::Hello {
            version: VERSION.to_owned(),
            protocol: PROTOCOL,
        };
        let answer = tokio::time::timeout(limit, self.call(hello, Vec::new(), None)).await;
        let reply = match answer {
            Ok(reply) => reply?.0,
            Err(_) => {
                let reason = format!(
                    "the exec-server did not answer its greeting within {} s",
                    limit.as_secs()
                );
                self.lose(reason.clone()).await;
                return Err(self.lost_error());
            }
        };
        match reply {
            Reply::Hello { version, protocol } if version == VERSION && protocol == PROTOCOL => {
                Ok(())
            }
            Reply::Hello { version, .. } => {
                self.close().await;
                Err(RemoteError::Version {
                    host: self.host.clone(),
                    local: VERSION.to_owned(),
                    remote: version,
                })
            }
            _ => Err(self.unexpected("hello")),
        }
    }

    /// The host's name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Sends `call` with `payload` after it and waits for its answer; a `cancel`lation
    /// asks the server to stop it and gives up waiting after a grace period.
    pub async fn call(
        &self,
        call: Call,
        payload: Vec<u8>,
        cancel: Option<&CancellationToken>,
    ) -> Result<(Reply, Vec<u8>), RemoteError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        locked(&self.pending).insert(id, tx);
        if locked(&self.lost).is_some() {
            locked(&self.pending).remove(&id);
            return Err(self.lost_error());
        }
        let request = Request {
            id,
            call,
            bytes: (!payload.is_empty()).then_some(payload.len() as u64),
        };
        if let Err(error) = self.send(&request, &payload).await {
            self.lose(format!("sending to the exec-server failed: {error}"))
                .await;
        }
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        let mut rx = rx;
        tokio::select! {
            answer = &mut rx => answer.unwrap_or_else(|_| Err(self.lost_error())),
            () = cancel.cancelled() => {
                let _ = self.send(&Request { id: 0, call: Call::Cancel { id }, bytes: None }, &[]).await;
                // The server answers a cancelled call at once; a host that does not is
                // found by the heartbeat.
                rx.await.unwrap_or_else(|_| Err(self.lost_error()))
            }
        }
    }

    async fn send(&self, request: &Request, payload: &[u8]) -> Result<(), protocol::WireError> {
        let mut writer = self.writer.lock().await;
        let Some(writer) = writer.as_mut() else {
            return Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into());
        };
        protocol::write(writer, request, payload).await?;
        Ok(())
    }

    async fn read_answers(self: Arc<Self>, mut reader: BufReader<tokio::process::ChildStdout>) {
        let reason = loop {
            match protocol::read::<_, Response>(&mut reader, Limits::REPLIES).await {
                Ok(Some((response, payload))) => {
                    let Some(waiting) = locked(&self.pending).remove(&response.id) else {
                        continue;
                    };
                    let answer = match (response.ok, response.error) {
                        (Some(reply), None) => Ok((reply, payload)),
                        (_, Some(message)) => Err(RemoteError::Refused {
                            host: self.host.clone(),
                            message,
                        }),
                        (None, None) => Err(self.unexpected("an answer")),
                    };
                    let _ = waiting.send(answer);
                }
                Ok(None) => break "the connection closed".to_owned(),
                Err(WireError::TooLarge { what, size, limit }) => {
                    *locked(&self.oversize) = Some((what, size, limit));
                    break format!("it sent {what} of {size} bytes, over the limit of {limit}");
                }
                Err(error) => break error.to_string(),
            }
        };
        self.lose(reason).await;
    }

    /// Pings the server whenever it has been asked something and said nothing for a
    /// third of `silence`; no answer within `silence` loses the connection.
    async fn heartbeat(self: Arc<Self>, silence: Duration) {
        let every = (silence / 3).max(Duration::from_millis(50));
        loop {
            tokio::select! {
                () = self.closed.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            if locked(&self.pending).is_empty() {
                continue;
            }
            let ping = self.call(Call::Ping, Vec::new(), None);
            match tokio::time::timeout(silence, ping).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    self.lose(format!(
                        "the exec-server answered no ping for {} s (the host or the \
                         connection hangs)",
                        silence.as_secs_f32()
                    ))
                    .await;
                    return;
                }
            }
        }
    }

    /// Marks the connection lost with `reason` (the first reason wins), kills the
    /// launcher, and fails every waiting call.
    async fn lose(&self, reason: String) {
        // The first loss kills the launcher and names how it ended; later ones (its
        // reader seeing the pipe close, say) only fail what still waits.
        let first = {
            let mut lost = locked(&self.lost);
            let first = lost.is_none();
            lost.get_or_insert(reason);
            first
        };
        self.closed.cancel();
        if first {
            let status = {
                let mut child = self.child.lock().await;
                let _ = child.start_kill();
                tokio::time::timeout(Duration::from_secs(5), child.wait()).await
            };
            if let Ok(Ok(status)) = status
                && !status.success()
                && let Some(reason) = locked(&self.lost).as_mut()
            {
                reason.push_str(&format!("; the launcher ended with {status}"));
            }
        }
        let waiting: Vec<_> = locked(&self.pending).drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(self.lost_error()));
        }
    }

    fn lost_error(&self) -> RemoteError {
        if let Some((what, size, limit)) = *locked(&self.oversize) {
            return RemoteError::TooLarge {
                host: self.host.clone(),
                what,
                size,
                limit,
            };
        }
        let reason = locked(&self.lost)
            .clone()
            .unwrap_or_else(|| "the connection closed".to_owned());
        let stderr = String::from_utf8_lossy(&locked(&self.stderr))
            .trim()
            .to_owned();
        RemoteError::Lost {
            host: self.host.clone(),
            reason,
            stderr: crate::text::truncate(&stderr, STDERR_TAIL),
        }
    }

    fn unexpected(&self, call: &'static str) -> RemoteError {
        RemoteError::Unexpected {
            host: self.host.clone(),
            call,
        }
    }

    /// True once the connection is gone.
    pub fn is_lost(&self) -> bool {
        locked(&self.lost).is_some()
    }

    /// Ends the connection: the server sees its input close, stops what it runs and
    /// removes its tree; the launcher is waited for a moment, then killed.
    pub async fn close(&self) {
        // Dropped, the pipe closes: the server reads the end of its input.
        drop(self.writer.lock().await.take());
        let exited = {
            let mut child = self.child.lock().await;
            tokio::time::timeout(Duration::from_secs(10), child.wait()).await
        };
        if exited.is_err() {
            self.lose("closed by grove".to_owned()).await;
        } else {
            let mut lost = locked(&self.lost);
            lost.get_or_insert_with(|| "closed by grove".to_owned());
            drop(lost);
            self.closed.cancel();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_payload_a_host_announces_over_the_limit_is_an_error_naming_the_host_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("host.sh");
        let size = Limits::REPLIES.payload * 2;
        // A host that greets, then announces a payload over the limit and sends none of
        // it: a reader that waited for the bytes would wait until the host hung up.
        std::fs::write(
            &script,
            format!(
                "read -r hello\n\
                 printf '%s\\n' '{{\"id\":1,\"ok\":{{\"hello\":{{\"version\":\"{VERSION}\",\"protocol\":{PROTOCOL}}}}}}}'\n\
                 read -r call\n\
                 printf '%s\\n' '{{\"id\":2,\"ok\":\"done\",\"bytes\":{size}}}'\n\
                 sleep 20\n"
            ),
        )
        .unwrap();
        let host = RemoteHost {
            name: "big".into(),
            launch: format!("sh {}", script.display()),
            program: "grove".into(),
            slots: 1,
            timeout: Duration::from_secs(60),
            ship: false,
        };
        let connection = Connection::open(&host).await.unwrap();
        let started = std::time::Instant::now();
        let error = connection
            .call(Call::Ping, Vec::new(), None)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "remote host `big` sent a payload of {size} bytes, over grove's limit of {}; \
                 its connection was ended",
                Limits::REPLIES.payload
            ),
            "the call fails with the host and the size it announced"
        );
        assert!(
            connection.is_lost() && started.elapsed() < Duration::from_secs(15),
            "the connection ends at the announcement, not when the host hangs up"
        );
    }
}
