//! A tree on a remote host: opened there from the base's objects, its tools and commands
//! run there, its checkpoints' objects brought back here.
//!
//! This file owns what a remote tree is to the rest of grove: one more [`TreeAccess`],
//! whose built-in tools and commands go over its connection. It must never send the
//! host more than the subtask's own history: the base, and nothing of other branches.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::RemoteError;
use super::client::Connection;
use super::hosts::Placement;
use super::protocol::{Call, Ended, OpenTree, Reply, SandboxSpec};
use crate::git::{CommitId, Repo, RunId};
use crate::tools::exec::{
    CommandExecutor, DiskOverBudget, ExecError, ExecOutcome, ExecRequest, ExecResult, OutputCap,
    SetupPolicy,
};
use crate::tools::result_cap::held_to_cap;
use crate::tools::tree::{RemoteTools, TreeAccess, TreeNamespace};
use crate::tools::{ToolError, ToolOutput};

/// What a remote tree is opened with.
#[derive(Debug, Clone)]
pub struct OpenSpec {
    pub run: RunId,
    pub subtask: u32,
    /// The commit the tree starts at (the base, or the subtask's last checkpoint).
    pub start: CommitId,
    pub sandbox: SandboxSpec,
    /// The write scope's globs, when the subtask has one.
    pub scope: Option<Vec<String>>,
    /// The worktree's path here, which the model and the run know it by.
    pub local: PathBuf,
}

/// A tree on a remote host. Its clones share one connection, which a move to another
/// host (after the first was lost) replaces for all of them.
#[derive(Clone)]
pub struct RemoteTree {
    inner: Arc<Inner>,
}

struct Inner {
    spec: OpenSpec,
    live: Mutex<Live>,
    /// The last tree that came back and was accepted: what the next one is checked
    /// against (the start's tree until then).
    accepted: Mutex<Option<git2::Oid>>,
}

/// The tree's connection as it is now.
struct Live {
    connection: Arc<Connection>,
    remote: PathBuf,
    slot: Option<OwnedSemaphorePermit>,
    base_bytes: u64,
}

impl std::fmt::Debug for RemoteTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTree")
            .field("host", &self.host())
            .field("remote", &self.remote_path())
            .finish_non_exhaustive()
    }
}

impl RemoteTree {
    /// Connects to `placement`'s host, sends it what it lacks of `spec.start` (a bundle
    /// against the commits its mirror holds), and opens the tree there.
    pub async fn open(
        repo: &Repo,
        placement: Placement,
        spec: OpenSpec,
    ) -> Result<Self, RemoteError> {
        let live = connect(repo, placement, &spec).await?;
        Ok(Self {
            inner: Arc::new(Inner {
                spec,
                live: Mutex::new(live),
                accepted: Mutex::new(None),
            }),
        })
    }

    /// Opens the tree again on `placement`'s host at `start` (its branch's last
    /// checkpoint), for every clone of this handle; the old connection is closed.
    pub async fn move_to(
        &self,
        repo: &Repo,
        placement: Placement,
        start: CommitId,
    ) -> Result<(), RemoteError> {
        let spec = OpenSpec {
            start,
            ..self.inner.spec.clone()
        };
        let live = connect(repo, placement, &spec).await?;
        let old = std::mem::replace(&mut *self.live(), live);
        old.connection.close().await;
        Ok(())
    }

    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        lock(&self.inner.live)
    }

    fn connection(&self) -> Arc<Connection> {
        Arc::clone(&self.live().connection)
    }

    /// The host's name.
    pub fn host(&self) -> String {
        self.connection().host().to_owned()
    }

    /// Where the tree is on its host.
    pub fn remote_path(&self) -> PathBuf {
        self.live().remote.clone()
    }

    /// Bytes of the bundle the base went over in (0 when the host's mirror held it).
    pub fn base_bytes(&self) -> u64 {
        self.live().base_bytes
    }

    /// True once the connection is gone.
    pub fn is_lost(&self) -> bool {
        self.connection().is_lost()
    }

    /// Commits what changed in the tree there and brings its objects here; the tree
    /// object of its state, `None` when nothing changed since the last checkpoint. A tree
    /// holding what grove never commits is refused here ([`arrival`](super::arrival)).
    pub async fn checkpoint(
        &self,
        repo: &Repo,
        label: &str,
    ) -> Result<Option<String>, RemoteError> {
        let call = Call::Checkpoint {
            label: label.to_owned(),
        };
        let (reply, bundle) = self.connection().call(call, Vec::new(), None).await?;
        let Reply::Checkpoint { tree, .. } = reply else {
            return Err(unexpected(&self.host(), "checkpoint"));
        };
        let Some(tree) = tree else {
            return Ok(None);
        };
        let git = |source| RemoteError::Git {
            host: self.host(),
            source,
        };
        if !bundle.is_empty() {
            // Its objects come in unreferenced: a refused tree leaves nothing a ref
            // reaches.
            repo.unbundle(bundle).await.map_err(git)?;
        }
        let id = git2::Oid::from_str(&tree).map_err(|_| unexpected(&self.host(), "checkpoint"))?;
        let known = *lock(&self.inner.accepted);
        let start = self.inner.spec.start;
        let refused = repo
            .read("a tree a remote host sent", |git| {
                let known = match known {
                    Some(known) => known,
                    None => git.find_commit(start.oid())?.tree_id(),
                };
                super::arrival::refused_entry(git, id, Some(known))
            })
            .map_err(git)?;
        if let Some(refused) = refused {
            return Err(RemoteError::RefusedTree {
                host: self.host(),
                path: refused.path,
                why: refused.why,
            });
        }
        *lock(&self.inner.accepted) = Some(id);
        Ok(Some(tree))
    }

    async fn exec(
        &self,
        request: ExecRequest,
        setup: Option<bool>,
    ) -> Result<ExecResult, ExecError> {
        let cwd = request
            .cwd
            .strip_prefix(&self.inner.spec.local)
            .map_or_else(|_| PathBuf::from("."), Path::to_path_buf);
        let cap = request.output_cap;
        let call = Call::Exec {
            command: request.command,
            cwd,
            timeout_ms: u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX),
            head: cap.head,
            tail: cap.tail,
            setup: setup.is_some(),
            setup_network: setup.unwrap_or(false),
        };
        let answer = self
            .connection()
            .call(call, Vec::new(), Some(&request.cancel))
            .await;
        match answer {
            Ok((
                Reply::Exec {
                    ended,
                    head,
                    tail,
                    total_bytes,
                    output_abandoned,
                    notes,
                    disk_over,
                },
                _,
            )) => Ok(held_to(
                ExecResult {
                    outcome: match ended {
                        Ended::Exited(code) => ExecOutcome::Exited(code),
                        Ended::Signalled(signal) => ExecOutcome::Signalled(signal),
                        Ended::TimedOut => ExecOutcome::TimedOut,
                        Ended::Cancelled => ExecOutcome::Cancelled,
                    },
                    head,
                    tail,
                    total_bytes,
                    output_abandoned,
                    notes,
                    disk_over_budget: disk_over
                        .map(|(used, budget)| DiskOverBudget { used, budget }),
                },
                cap,
            )),
            Ok(_) => Err(ExecError::Elsewhere {
                reason: unexpected(&self.host(), "exec").to_string(),
            }),
            Err(error) => Err(ExecError::Elsewhere {
                reason: error.to_string(),
            }),
        }
    }

    /// Gives the tree's slot on its host back at once, for the next subtask placed
    /// there; the connection stays until [`RemoteTree::close`].
    pub fn free_slot(&self) {
        drop(self.live().slot.take());
    }

    /// Frees the host's slot, then ends the connection: the host stops what runs there
    /// and removes the tree, which may take a while that no other subtask waits for.
    pub async fn close(&self) {
        self.free_slot();
        self.connection().close().await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Notes a host may add to a command's result, and characters of each: the executor's
/// notes are a line or two.
const MAX_NOTES: usize = 8;
const MAX_NOTE_CHARS: usize = 1_000;

/// A command's `result` as its host sent it, held to `cap` as a command run here is:
/// the first `cap.head` bytes, the last `cap.tail`, what was cut counted as output.
fn held_to(mut result: ExecResult, cap: OutputCap) -> ExecResult {
    let sent = (result.head.len() + result.tail.len()) as u64;
    result.total_bytes = result.total_bytes.max(sent);
    result.head.truncate(cap.head);
    let over = result.tail.len().saturating_sub(cap.tail);
    result.tail.drain(..over);
    result.notes.truncate(MAX_NOTES);
    for note in &mut result.notes {
        *note = crate::text::truncate(note, MAX_NOTE_CHARS);
    }
    result
}

/// Connects to `placement`'s host, sends what its mirror lacks of `spec.start`, and
/// opens the tree there.
async fn connect(repo: &Repo, placement: Placement, spec: &OpenSpec) -> Result<Live, RemoteError> {
    let host = placement.host.name.clone();
    let connection = Connection::open(&placement.host).await?;
    let mirror = mirror_key(repo);
    let git = |source| RemoteError::Git {
        host: host.clone(),
        source,
    };
    let haves = Call::Haves {
        repo: mirror.clone(),
        want: spec.start.to_string(),
    };
    let base_bytes = match connection.call(haves, Vec::new(), None).await?.0 {
        Reply::Haves { has: true, .. } => 0,
        Reply::Haves { has: false, tips } => {
            let tips: Vec<CommitId> = tips
                .iter()
                .filter_map(|tip| CommitId::parse(tip).ok())
                .collect();
            let bundle = repo.bundle(spec.start, &tips).await.map_err(git)?;
            let bytes = bundle.len() as u64;
            let receive = Call::Receive {
                repo: mirror.clone(),
                commit: spec.start.to_string(),
            };
            expect_done(connection.call(receive, bundle, None).await?, &host)?;
            bytes
        }
        _ => return Err(unexpected(&host, "haves")),
    };
    let open = Call::Open(OpenTree {
        repo: mirror,
        run: spec.run.to_string(),
        subtask: spec.subtask,
        start: spec.start.to_string(),
        sandbox: spec.sandbox.clone(),
        scope: spec.scope.clone(),
    });
    let Reply::Opened { path } = connection.call(open, Vec::new(), None).await?.0 else {
        return Err(unexpected(&host, "open"));
    };
    Ok(Live {
        connection,
        remote: path,
        slot: Some(placement.slot),
        base_bytes,
    })
}

/// The name of this repository's mirror on a host: the folder grove's own cache gives it
/// here, so two clones of one project keep two mirrors and neither sees the other's refs.
fn mirror_key(repo: &Repo) -> String {
    repo.worktrees_home().file_name().map_or_else(
        || "repository".to_owned(),
        |name| name.to_string_lossy().into_owned(),
    )
}

fn expect_done((reply, _): (Reply, Vec<u8>), host: &str) -> Result<(), RemoteError> {
    match reply {
        Reply::Done => Ok(()),
        _ => Err(unexpected(host, "receive")),
    }
}

fn unexpected(host: &str, call: &'static str) -> RemoteError {
    RemoteError::Unexpected {
        host: host.to_owned(),
        call,
    }
}

#[async_trait]
impl TreeAccess for RemoteTree {
    fn path(&self) -> &Path {
        &self.inner.spec.local
    }

    fn root_for_grove(&self) -> PathBuf {
        self.inner.spec.local.clone()
    }

    fn executor(
        &self,
        _base: &Arc<dyn CommandExecutor>,
    ) -> Result<Arc<dyn CommandExecutor>, crate::tools::tree::TreeError> {
        Ok(Arc::new(RemoteExecutor {
            tree: self.clone(),
            setup: None,
        }))
    }

    fn namespace(&self) -> Option<Arc<TreeNamespace>> {
        None
    }

    async fn release(&self) {
        self.close().await;
    }

    fn remote_tools(&self) -> Option<&dyn RemoteTools> {
        Some(self)
    }
}

#[async_trait]
impl RemoteTools for RemoteTree {
    async fn call(
        &self,
        name: &str,
        input: Value,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let call = Call::Tool {
            name: name.to_owned(),
            input,
        };
        match self.connection().call(call, Vec::new(), Some(cancel)).await {
            Ok((
                Reply::Tool {
                    content,
                    is_error,
                    ends_loop,
                },
                _,
            )) => Ok(ToolOutput {
                // The host's grove caps as this one does; a host that does not is held
                // to the cap here.
                content: held_to_cap(name, content),
                is_error,
                ends_loop,
            }),
            Ok(_) => Err(ToolError::Fatal(
                unexpected(&self.host(), "a tool call").to_string(),
            )),
            Err(error) => Err(ToolError::Fatal(error.to_string())),
        }
    }
}

/// Commands of a remote tree, run by its host's grove under its sandbox.
#[derive(Debug)]
struct RemoteExecutor {
    tree: RemoteTree,
    /// `Some(network)` for a setup command.
    setup: Option<bool>,
}

#[async_trait]
impl CommandExecutor for RemoteExecutor {
    async fn execute(&self, request: ExecRequest) -> Result<ExecResult, ExecError> {
        self.tree.exec(request, self.setup).await
    }

    fn for_setup(&self, policy: &SetupPolicy) -> Arc<dyn CommandExecutor> {
        Arc::new(Self {
            tree: self.tree.clone(),
            setup: Some(policy.allow_network),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_commands_output_from_a_host_is_held_to_the_cap_it_was_asked_for() {
        let sent = ExecResult {
            outcome: ExecOutcome::Exited(1),
            head: b"start and more".to_vec(),
            tail: b"more and the end".to_vec(),
            total_bytes: 7,
            output_abandoned: false,
            notes: vec!["n".repeat(5_000); 100],
            disk_over_budget: None,
        };
        let held = held_to(sent, OutputCap { head: 5, tail: 7 });
        assert_eq!(
            held,
            ExecResult {
                outcome: ExecOutcome::Exited(1),
                head: b"start".to_vec(),
                tail: b"the end".to_vec(),
                total_bytes: 30,
                output_abandoned: false,
                notes: vec![format!("{}…", "n".repeat(MAX_NOTE_CHARS)); MAX_NOTES],
                disk_over_budget: None,
            },
            "the head keeps its start, the tail its end, and what was cut here still \
             counts as output"
        );
        let within = ExecResult {
            outcome: ExecOutcome::Exited(0),
            head: b"ok".to_vec(),
            tail: Vec::new(),
            total_bytes: 2,
            output_abandoned: false,
            notes: Vec::new(),
            disk_over_budget: None,
        };
        assert_eq!(
            held_to(within.clone(), OutputCap::default()),
            within,
            "a result within the cap is kept as sent"
        );
    }
}
