//! Test support for the run's unit tests: a sealed git repository in a temp dir, a run
//! context on it, and a scripted model (the fake HTTP server is for integration tests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::AgentSpec;
use crate::agent::roles::{self, RoleKind};
use crate::event::{AgentId, Event, EventSink};
use crate::git::{CommitId, GitOptions, Repo};
use crate::model::{
    ContentBlock, Message, Model, ModelError, ModelNotice, Request, Response, Role, StopReason,
    Usage,
};
use crate::run::context::{
    AgentCaps, AgentServices, Budget, Pause, RunContext, RunFacts, RunJournal, RunRecord,
    TreeServices, agent_spec,
};
use crate::run::id::SubtaskId;
use crate::run::subtask::prepare::{AheadWorktrees, create_worktree};
use crate::settings::options::{ModelChoice, Models, RunOptions};
use crate::store::journal::{ContextMode, Entry, SubtaskKind};
use crate::store::lock::RepoLock;
use crate::store::{RunStart, RunStore};
use crate::tools::{LocalExecutor, Registry};
use crate::worktree::Worktree;

/// A model that answers each request with the next scripted response.
pub(crate) struct ScriptedModel {
    replies: Mutex<VecDeque<Response>>,
    requests: Mutex<Vec<Request>>,
}

impl ScriptedModel {
    pub(crate) fn new(replies: Vec<Response>) -> Arc<Self> {
        Arc::new(Self {
            replies: Mutex::new(replies.into()),
            requests: Mutex::new(Vec::new()),
        })
    }

    /// A response that ends the turn with `text`.
    pub(crate) fn text(text: &str) -> Response {
        response(
            vec![ContentBlock::Text { text: text.into() }],
            StopReason::EndTurn,
        )
    }

    /// A response that calls tools: (call id, tool, input).
    pub(crate) fn tool_calls(calls: &[(&str, &str, Value)]) -> Response {
        let blocks = calls
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            })
            .collect();
        response(blocks, StopReason::ToolUse)
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The tool results (call id, content) the `index`-th request carried last.
    pub(crate) fn tool_results(&self, index: usize) -> Vec<(String, String)> {
        let requests = self.requests();
        let last = requests[index].messages.last().unwrap();
        last.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => Some((tool_use_id.clone(), content.clone())),
                _ => None,
            })
            .collect()
    }
}

fn response(content: Vec<ContentBlock>, stop_reason: StopReason) -> Response {
    Response {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason,
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
        request_id: None,
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> String {
        "scripted".into()
    }

    async fn complete(
        &self,
        request: &Request,
        _cancel: &CancellationToken,
        _on_notice: &(dyn Fn(ModelNotice) + Send + Sync),
    ) -> Result<Response, ModelError> {
        self.requests.lock().unwrap().push(request.clone());
        let next = self.replies.lock().unwrap().pop_front();
        Ok(next.unwrap_or_else(|| Self::text("(script ended)")))
    }
}

/// The lead's spec on `model` with `tools`.
pub(crate) fn lead_spec_for_test(model: Arc<ScriptedModel>, tools: Registry) -> AgentSpec {
    let choice = ModelChoice {
        client: model,
        name: "scripted".into(),
    };
    agent_spec(
        &RunOptions::new("task"),
        None,
        AgentId::lead(),
        &roles::builtin(RoleKind::Lead),
        AgentCaps {
            model: &choice,
            max_turns: 10,
            budget: None,
            tools,
        },
    )
}

/// A sealed repository on `main` with one commit, and a run context on it.
pub(crate) struct TestRun {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) ctx: Arc<RunContext>,
    pub(crate) events: tokio::sync::mpsc::UnboundedReceiver<Event>,
    _lock: RepoLock,
}

impl TestRun {
    /// A run of the default options, with no model reply scripted, on a repository
    /// holding `a.txt` ("alpha").
    pub(crate) async fn alpha() -> Self {
        Self::new(
            &[("a.txt", "alpha\n")],
            RunOptions::new("t"),
            ScriptedModel::new(vec![]),
        )
        .await
    }

    /// A run of `options` whose every role talks to `model`, on a repository holding
    /// `files`.
    pub(crate) async fn new(
        files: &[(&str, &str)],
        options: RunOptions,
        model: Arc<ScriptedModel>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let home = dir.path().join("home");
        git(&home, &root, &["init", "--quiet", "--initial-branch=main"]);
        for (path, content) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        git(&home, &root, &["add", "--all"]);
        git(&home, &root, &["commit", "--quiet", "-m", "initial"]);
        let repo = Repo::open(
            &root,
            GitOptions {
                env: sealed_env(&home),
                ..GitOptions::default()
            },
        )
        .await
        .unwrap();
        let base = repo.head().unwrap().commit.unwrap();
        let store = RunStore::new(repo.common_dir());
        let run_id = store.new_run_id();
        let lock = RepoLock::acquire(repo.common_dir(), run_id.as_str()).unwrap();
        let active = store
            .create_run(
                &lock,
                RunStart {
                    task: options.task.clone(),
                    base,
                    branch: "refs/heads/main".into(),
                    provider: "anthropic".into(),
                    model: "scripted".into(),
                    options: options.clone(),
                },
            )
            .unwrap();
        let run = run_id.clone();
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let choice = ModelChoice {
            client: model,
            name: "scripted".into(),
        };
        let budget = Budget::new(options.budget_tokens);
        let (tx, events) = (EventSink::new(tx), events);
        let cancel = CancellationToken::new();
        let pause = Pause::default();
        let ctx = RunContext {
            facts: RunFacts {
                worktrees_dir: dir.path().join("worktrees"),
                run_dir: active.dir().to_path_buf(),
                repo,
                run,
                base,
                branch: "refs/heads/main".into(),
                options,
                user_root: root,
            },
            record: RunRecord {
                journal: RunJournal::new(active),
                pause,
                events: tx,
                cancel,
            },
            agents: AgentServices {
                budget,
                models: Models {
                    provider: "anthropic".into(),
                    lead: choice.clone(),
                    worker: choice.clone(),
                    reviewer: choice,
                },
                rules: None,
            },
            trees: TreeServices {
                base_gate: crate::run::check::gate::BaseGate::default(),
                base_findings: crate::run::check::gate::BaseFindings::default(),
                live: Arc::default(),
                hosts: crate::remote::HostPool::default(),
                executor: Arc::new(LocalExecutor::from_process_env()),
            },
        };
        Self {
            dir,
            ctx: Arc::new(ctx),
            events,
            _lock: lock,
        }
    }

    /// Journals the start of subtask `n` with brief `task`, as a delegation does.
    pub(crate) fn journal_started(&self, n: u32, task: &str) {
        self.ctx
            .journal(Entry::SubtaskStarted {
                subtask: SubtaskId(n),
                task: task.into(),
                branch: self.ctx.facts.run.subtask_branch(n),
                mode: ContextMode::Isolated,
                agent: "worker".into(),
                paths: Vec::new(),
                after: Vec::new(),
                waits_for: Vec::new(),
                kind: SubtaskKind::Task,
                replaces: None,
                start_from: None,
            })
            .unwrap();
    }

    /// Subtask `n`'s worktree, created and checked out, its start journaled.
    pub(crate) async fn worktree(&self, n: u32) -> Worktree {
        self.journal_started(n, &format!("task {n}"));
        let ahead = AheadWorktrees::default();
        let worktree = create_worktree(self.ctx.tree_stage(), &ahead, SubtaskId(n), None, None)
            .await
            .unwrap();
        worktree.ready().await.unwrap();
        worktree
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Runs git in `dir` with the sealed environment; its trimmed stdout.
    pub(crate) fn git(&self, dir: &Path, args: &[&str]) -> String {
        git(&self.home(), dir, args)
    }

    /// The commit `rev` names in the repository.
    pub(crate) fn rev(&self, rev: &str) -> CommitId {
        self.ctx.facts.repo.resolve(rev).unwrap()
    }

    /// The journal's record types so far, in order.
    pub(crate) fn journal_types(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.ctx.facts.run_dir.join("journal.jsonl")).unwrap();
        text.lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line).unwrap();
                value["type"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// The notes emitted so far.
    pub(crate) fn notes(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            if let Event::Note { message } = event {
                notes.push(message);
            }
        }
        notes
    }
}

fn sealed_env(home: &Path) -> Vec<(OsString, OsString)> {
    [
        ("GIT_CONFIG_GLOBAL", OsString::from("/dev/null")),
        ("GIT_CONFIG_NOSYSTEM", OsString::from("1")),
        ("HOME", home.as_os_str().to_owned()),
        ("XDG_CONFIG_HOME", home.join(".config").into_os_string()),
        ("GIT_AUTHOR_NAME", OsString::from("Test Author")),
        ("GIT_AUTHOR_EMAIL", OsString::from("author@example.com")),
        ("GIT_AUTHOR_DATE", OsString::from("2026-01-01T00:00:00Z")),
        ("GIT_COMMITTER_NAME", OsString::from("Test Committer")),
        (
            "GIT_COMMITTER_EMAIL",
            OsString::from("committer@example.com"),
        ),
        ("GIT_COMMITTER_DATE", OsString::from("2026-01-01T00:00:00Z")),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), v))
    .collect()
}

fn git(home: &Path, dir: &Path, args: &[&str]) -> String {
    let mut command = Command::new("git");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            command.env_remove(&key);
        }
    }
    let output = command
        .envs(sealed_env(home))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned()
}
