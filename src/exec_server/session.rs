//! The server's repositories and its one tree: a mirror per repository, fed bundles; the
//! connection's tree in it, with grove's own tools and sandbox.
//!
//! This file owns what a call may reach: a mirror's name is one plain folder name, a
//! command's directory stays inside the tree, and the tree's commands never see the
//! mirrors' grove data or the other connections' trees.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::git::{CommitId, GitOptions, Repo, RunId};
use crate::remote::protocol::{Call, Ended, OpenTree, Reply, SandboxSpec};
use crate::tools::exec::{CommandExecutor, ExecOutcome, ExecRequest, OutputCap, SetupPolicy};
use crate::tools::sandbox::{
    self, CommandHost, ProjectView, SandboxMode, SandboxPolicy, SandboxedExecutor,
};
use crate::tools::{
    LocalExecutor, Registry, ToolContext, ToolError, ToolSet, WriteScope, builtin_with_executor,
};
use crate::worktree::{Worktree, WorktreeSpec};

/// The server's mirrors, one per repository, under its home.
pub(super) struct Mirrors {
    home: PathBuf,
}

fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

impl Mirrors {
    pub(super) fn new(home: PathBuf) -> Self {
        Self { home }
    }

    fn trees(&self) -> PathBuf {
        self.home.join("trees")
    }

    /// The mirror called `name`, made when it is new.
    async fn open(&self, name: &str) -> Result<Repo, String> {
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !plain {
            return Err(format!("`{name}` is not a repository's name"));
        }
        let mirrors = self.home.join("mirrors");
        let dir = mirrors.join(name);
        if !dir.join(".git").exists() {
            // Made aside and renamed into place: two connections that start at once
            // make two, and the second rename finds the first's there.
            std::fs::create_dir_all(&mirrors).map_err(text)?;
            let made = mirrors.join(format!(".{name}.{:08x}", fastrand::u32(..)));
            let init = tokio::process::Command::new("git")
                .args(["init", "--quiet"])
                .arg(&made)
                .output()
                .await
                .map_err(|error| format!("cannot start git on this host: {error}"))?;
            if !init.status.success() {
                let _ = std::fs::remove_dir_all(&made);
                return Err(format!(
                    "git init {} failed: {}",
                    made.display(),
                    String::from_utf8_lossy(&init.stderr).trim()
                ));
            }
            if std::fs::rename(&made, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&made);
            }
        }
        Repo::open(&dir, GitOptions::default()).await.map_err(text)
    }

    /// Whether mirror `name` holds `want`, and the tips it holds (newest first).
    pub(super) async fn haves(
        &self,
        name: &str,
        want: &str,
    ) -> Result<(bool, Vec<String>), String> {
        let repo = self.open(name).await?;
        let has = CommitId::parse(want).is_ok_and(|want| repo.holds_commit(want));
        let tips = repo
            .git()
            .args([
                "for-each-ref",
                "--sort=-committerdate",
                "--count=32",
                "--format=%(objectname)",
                "refs/grove/have",
            ])
            .run()
            .await
            .map_err(text)?;
        let tips = String::from_utf8_lossy(&tips.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        Ok((has, tips))
    }

    /// Adds `bundle`'s objects to mirror `name` and keeps `commit` under a ref.
    pub(super) async fn receive(
        &self,
        name: &str,
        commit: &str,
        bundle: Vec<u8>,
    ) -> Result<(), String> {
        let repo = self.open(name).await?;
        let commit = CommitId::parse(commit).map_err(text)?;
        repo.unbundle(bundle).await.map_err(text)?;
        if !repo.holds_commit(commit) {
            return Err(format!("the bundle did not bring commit {commit}"));
        }
        repo.git()
            .args([
                "update-ref",
                &format!("refs/grove/have/{commit}"),
                &commit.to_string(),
            ])
            .run()
            .await
            .map_err(text)?;
        Ok(())
    }
}

/// The connection's tree and what runs in it.
pub(super) struct Session {
    repo: Repo,
    worktree: Worktree,
    registry: Registry,
    executor: Arc<dyn CommandExecutor>,
    tools: ToolContext,
    start: CommitId,
    /// The last checkpoint whose objects went back: the next bundle leaves it out.
    exported: Mutex<Option<CommitId>>,
}

impl Session {
    /// Opens the tree: `start` checked out on the subtask's branch in the mirror.
    pub(super) async fn open(
        mirrors: &Mirrors,
        call: OpenTree,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        let repo = mirrors.open(&call.repo).await?;
        let start = CommitId::parse(&call.start).map_err(text)?;
        if !repo.holds_commit(start) {
            return Err(format!(
                "this host's mirror lacks commit {start} (send it first)"
            ));
        }
        let run = RunId::try_from(call.run).map_err(text)?;
        let path = mirrors.trees().join(call.repo).join(format!(
            "{run}-{}-{:08x}",
            call.subtask,
            fastrand::u32(..)
        ));
        let branch = format!("refs/heads/grove/{run}/{}", call.subtask);
        let spec = WorktreeSpec {
            run,
            subtask: call.subtask,
            base: start,
            path,
        };
        let worktree = {
            let _lock = lock_refs(&repo).await?;
            // What a connection that died unannounced left of this subtask goes first.
            let _ = repo.git().args(["worktree", "prune"]).run().await;
            let _ = repo.git().args(["update-ref", "-d", &branch]).run().await;
            Worktree::create(&repo, spec).await.map_err(text)?
        };
        worktree.ready().await.map_err(text)?;
        let root = std::fs::canonicalize(worktree.path()).map_err(text)?;
        let executor = executor(
            &call.sandbox,
            &[repo.common_dir().join("grove"), mirrors.trees()],
            repo.common_dir(),
        )?;
        let mut registry = builtin_with_executor(ToolSet::Worker, Arc::clone(&executor));
        if let Some(globs) = call.scope
            && let Some(scope) = WriteScope::new(&globs).map_err(text)?
        {
            registry = registry.with_write_scope(&Arc::new(scope));
        }
        Ok(Arc::new(Self {
            repo,
            worktree,
            registry,
            executor,
            tools: ToolContext::plain(root, cancel),
            start,
            exported: Mutex::new(None),
        }))
    }

    pub(super) fn path(&self) -> &Path {
        &self.tools.root
    }

    pub(super) async fn answer(
        &self,
        call: Call,
        cancel: CancellationToken,
    ) -> Result<(Reply, Vec<u8>), String> {
        match call {
            Call::Tool { name, input } => {
                let ctx = ToolContext {
                    cancel,
                    ..self.tools.clone()
                };
                match self.registry.dispatch(&name, input, &ctx).await {
                    Ok(output) => Ok((
                        Reply::Tool {
                            content: output.content,
                            is_error: output.is_error,
                            ends_loop: output.ends_loop,
                        },
                        Vec::new(),
                    )),
                    Err(ToolError::Fatal(message) | ToolError::RespondToModel(message)) => {
                        Err(message)
                    }
                }
            }
            Call::Exec {
                command,
                cwd,
                timeout_ms,
                head,
                tail,
                setup,
                setup_network,
            } => {
                let cwd = self.inside(&cwd)?;
                let executor = if setup {
                    self.executor.for_setup(&SetupPolicy {
                        allow_network: setup_network,
                        writable: Vec::new(),
                    })
                } else {
                    Arc::clone(&self.executor)
                };
                let request = ExecRequest {
                    command,
                    cwd,
                    timeout: std::time::Duration::from_millis(timeout_ms),
                    cancel,
                    output_cap: OutputCap { head, tail },
                };
                let result = executor.execute(request).await.map_err(text)?;
                Ok((
                    Reply::Exec {
                        ended: match result.outcome {
                            ExecOutcome::Exited(code) => Ended::Exited(code),
                            ExecOutcome::Signalled(signal) => Ended::Signalled(signal),
                            ExecOutcome::TimedOut => Ended::TimedOut,
                            ExecOutcome::Cancelled => Ended::Cancelled,
                        },
                        head: result.head,
                        tail: result.tail,
                        total_bytes: result.total_bytes,
                        output_abandoned: result.output_abandoned,
                        notes: result.notes,
                        disk_over: result.disk_over_budget.map(|over| (over.used, over.budget)),
                    },
                    Vec::new(),
                ))
            }
            Call::Checkpoint { label } => self.checkpoint(&label).await,
            _ => Err("not a call on a tree".to_owned()),
        }
    }

    /// `relative` inside the tree, refused when it leaves it.
    fn inside(&self, relative: &Path) -> Result<PathBuf, String> {
        let plain = relative
            .components()
            .all(|part| matches!(part, Component::Normal(_) | Component::CurDir));
        if !plain {
            return Err(format!(
                "`{}` is not a directory inside the tree",
                relative.display()
            ));
        }
        Ok(self.tools.root.join(relative))
    }

    async fn checkpoint(&self, label: &str) -> Result<(Reply, Vec<u8>), String> {
        let Some(commit) = self
            .worktree
            .checkpoint(&self.repo, label)
            .await
            .map_err(text)?
        else {
            return Ok((
                Reply::Checkpoint {
                    tree: None,
                    commit: None,
                },
                Vec::new(),
            ));
        };
        let tree = self.repo.tree_id(commit).map_err(text)?;
        let exported = *self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let have: Vec<CommitId> = std::iter::once(self.start).chain(exported).collect();
        let bundle = self.repo.bundle(commit, &have).await.map_err(text)?;
        *self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(commit);
        Ok((
            Reply::Checkpoint {
                tree: Some(tree),
                commit: Some(commit.to_string()),
            },
            bundle,
        ))
    }

    /// Removes the tree and its branch from the mirror (its work went back with its
    /// checkpoints; what came after the last one is lost with the connection).
    pub(super) async fn remove(&self) {
        let _lock = lock_refs(&self.repo).await;
        let path = self.worktree.path().to_string_lossy().into_owned();
        let _ = self
            .repo
            .git()
            .args(["worktree", "remove", "--force", &path])
            .run()
            .await;
        let _ = self
            .repo
            .git()
            .args(["update-ref", "-d", &self.worktree.branch_ref()])
            .run()
            .await;
    }
}

/// Holds the mirror's lock on making and deleting branches, shared by every connection
/// to it on this host: git deleting a ref prunes the folders it emptied, which fails
/// another process making a ref in one of them at that moment.
async fn lock_refs(repo: &Repo) -> Result<nix::fcntl::Flock<std::fs::File>, String> {
    let path = repo.common_dir().join("grove-refs.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(text)?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| format!("cannot lock {}: {errno}", path.display()))
    })
    .await
    .map_err(text)?
}

/// The executor of the tree's commands: the client's sandbox choice, applied here, its
/// commands unable to see `hidden` (the mirrors' grove data, the other trees), their git
/// reading the mirror's data at `common_dir` as grove registered the tree there.
fn executor(
    spec: &SandboxSpec,
    hidden: &[PathBuf],
    common_dir: &Path,
) -> Result<Arc<dyn CommandExecutor>, String> {
    let mode: SandboxMode = spec.mode.parse()?;
    let env = crate::tools::exec::scrub_env(std::env::vars_os());
    if mode == SandboxMode::Off {
        return Ok(Arc::new(LocalExecutor::with_env(env)));
    }
    sandbox::probe(&CommandHost::default(), mode).map_err(|error| {
        format!(
            "this host cannot confine commands ({error}); {}",
            sandbox::refusal_advice(&error)
        )
    })?;
    let policy = SandboxPolicy {
        allow_network: spec.allow_network,
        own_loopback: mode == SandboxMode::On,
        max_processes: spec.max_processes,
        max_file_bytes: spec.max_file_bytes,
        max_memory_bytes: spec.max_memory_bytes,
        max_worktree_bytes: spec.max_worktree_bytes,
    };
    let project = ProjectView {
        checkout: None,
        common_dir: Some(common_dir.to_path_buf()),
        share: Vec::new(),
    };
    Ok(Arc::new(
        SandboxedExecutor::new(policy, env)
            .hiding(hidden, &[])
            .project(project),
    ))
}
