//! The lead's `delegate` tool: one call, one subtask, through a [`Delegator`].
//!
//! This file owns the tool's contract (DESIGN.md: `delegate {task, mode?:
//! "isolated"|"fork", agent?, paths?: [glob], after?: ["S1", …]}`), the [`Delegator`] trait the tool talks to, and the one
//! mapping of a refusal to what the lead sees. It knows nothing of how a subtask runs:
//! the run hands it an `Arc<dyn Delegator>`. It must never return more to the lead than
//! the delegator's bounded report.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::run::agents::RoleError;
use crate::run::id::SubtaskId;
use crate::run::subtask::retry::ReplaceError;
use crate::store::StoreError;
use crate::store::journal::ContextMode;
use crate::text::printable;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, WriteScope, parse_input};

/// One `delegate` call, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateRequest {
    /// The brief: everything the worker will know about its subtask.
    pub task: String,
    pub mode: ContextMode,
    /// A user agent from `.grove/agents/<name>.md`; `None` for the built-in worker.
    pub agent: Option<String>,
    /// The globs the subtask may change, normalised ([`WriteScope`]); empty: any file.
    pub paths: Vec<String>,
    /// Subtasks that must be settled before this one starts, sorted, without repeats.
    pub after: Vec<SubtaskId>,
    /// The unmerged subtask this one replaces: once this one merges, that one counts as
    /// superseded (`replaces`, or implied by `start_from`).
    pub replaces: Option<SubtaskId>,
    /// The settled subtask whose archived work this one's tree starts from.
    pub start_from: Option<SubtaskId>,
    /// How many attempts at the brief run at once, a judge picking one (`None`: the
    /// run's `--attempts`).
    pub attempts: Option<u32>,
}

/// What the lead is told about one subtask: bounded, never a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateReport {
    pub text: String,
}

/// Why a `delegate` call produced no report. Every variant but [`Journal`] is for the
/// lead to read and adapt to; none is retried by grove.
///
/// [`Journal`]: DelegateError::Journal
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    #[error("the run's token budget is spent; no more subtasks can start. Finish with a summary.")]
    BudgetSpent,
    #[error("the run's limit of {max} subtasks is reached; finish with a summary")]
    SubtaskCap { max: u32 },
    #[error(
        "`attempts` is {asked}, over this run's maximum of {max} (`max_attempts` in \
         .grove/config.toml); ask for {max} or fewer"
    )]
    TooManyAttempts { asked: u32, max: u32 },
    #[error(
        "{attempts} attempts would take subtask numbers past the run's limit of {max} \
         subtasks ({left} left); ask for fewer attempts, or none"
    )]
    AttemptsOverCap { attempts: u32, max: u32, left: u32 },
    #[error("{0}")]
    Role(#[from] RoleError),
    #[error("{0}")]
    After(#[from] AfterError),
    #[error("{0}")]
    Replace(#[from] ReplaceError),
    #[error("the run is shutting down")]
    ShuttingDown,
    #[error("the run was interrupted")]
    Interrupted,
    /// The subtask's task panicked or was aborted.
    #[error("the subtask stopped unexpectedly: {source}")]
    Stopped {
        #[source]
        source: tokio::task::JoinError,
    },
    /// The run cannot go on: what happens can no longer be recorded.
    #[error("the run journal cannot be written: {source}")]
    Journal {
        #[source]
        source: StoreError,
    },
}

/// Why a call's `after` is refused: it must name earlier subtasks of the run only. For
/// the lead to read and fix; never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AfterError {
    #[error(
        "`after` names {id}, which is this very subtask (this call is {id}); name only \
         subtasks delegated before this call"
    )]
    Itself { id: SubtaskId },
    #[error(
        "`after` names {id}, which is not delegated yet (this call is {this}): subtasks are \
         numbered S1, S2, … in call order and wait only for earlier ones, so a cycle cannot \
         be expressed; delegate the work it must wait for first, then this one with that \
         subtask's id in `after`"
    )]
    NotYet { id: SubtaskId, this: SubtaskId },
    #[error(
        "`after` names {id}, which is no subtask of this run (its delegate call was \
         refused); the subtasks so far are: {delegated}"
    )]
    Unknown {
        id: SubtaskId,
        /// The run's subtasks, comma-separated.
        delegated: String,
    },
}

/// One `wait` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitRequest {
    /// Wait for every running subtask, not only the next to settle.
    pub all: bool,
    /// The model's call id, under which what it is given is journaled (a resumed run
    /// answers the call with the same results).
    pub call_id: Option<String>,
}

/// Runs the subtasks `delegate` calls ask for, and gives their results to `wait`.
#[async_trait]
pub trait Delegator: Send + Sync {
    /// Accepts one subtask and starts it; returns once it is accepted (its id), not
    /// when it ends.
    async fn delegate(&self, request: DelegateRequest) -> Result<DelegateReport, DelegateError>;

    /// Waits until a subtask settles (or, `all`, every running one) and returns every
    /// result not given yet, in the order they settled; at once when none is to come.
    async fn wait(&self, request: WaitRequest) -> Result<DelegateReport, DelegateError>;
}

/// The `delegate` tool of one run.
pub(crate) struct Delegate {
    delegator: Arc<dyn Delegator>,
    /// Built once per run: it lists the project's agents.
    description: String,
}

impl Delegate {
    /// The tool that hands calls to `delegator`; `agents` lists the user agents
    /// (name, description) the lead may name.
    pub(crate) fn new(delegator: Arc<dyn Delegator>, agents: &[(String, String)]) -> Self {
        Self {
            delegator,
            description: description(agents),
        }
    }
}

/// What the lead sees of a refusal: a message to adapt to, or the end of the run.
fn tool_error(error: DelegateError) -> ToolError {
    match error {
        DelegateError::Journal { .. } => ToolError::Fatal(error.to_string()),
        // A refusal may quote model text (an agent file's error, say): printable only.
        refused => ToolError::RespondToModel(printable(&refused.to_string()).into_owned()),
    }
}

/// What the lead is told `delegate` does; `agents` lists the user agents (name,
/// description) it may name.
pub(crate) fn description(agents: &[(String, String)]) -> String {
    let mut description = String::from(
        "Hand one subtask to a worker that runs in its own git worktree, concurrently with \
         the other subtasks. The worker sees only `task` (and the project rules) unless \
         `mode` is \"fork\", which also gives it this conversation so far. Its diff is \
         reviewed by an independent reviewer and merged if approved. Returns at once with \
         the subtask's id; `wait` gives its outcome when it settles: merged, rejected \
         (with findings), conflict or failed, and a diffstat. Subtasks are numbered S1, \
         S2, … in call order. `start_from` starts a follow-up from a rejected or failed \
         subtask's kept work, with its reviewer's findings; `replaces` names the subtask \
         whose work a follow-up does instead (`start_from` implies it). `paths` \
         limits what the worker may change (globs such as `src/config/**`); two subtasks \
         whose `paths` overlap never run at once: the later one starts after the earlier \
         is settled, from the merged result. `after` names earlier subtasks it must wait \
         for the same way. `attempts` (2 or more) has that many workers try the same \
         brief at once, each in its own tree; a judge compares the attempts that pass the \
         check and merges the best one: worth its tokens for a subtask with more than one \
         reasonable design, or one that failed once.",
    );
    if !agents.is_empty() {
        description.push_str(" Agents you may name in `agent`:");
        for (name, about) in agents {
            description.push_str(&format!(" `{name}`: {about};"));
        }
    }
    description
}

/// The `delegate` input schema (DESIGN.md).
pub(crate) fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "The complete brief: files, the exact change wanted, how to check it."
            },
            "mode": {"type": "string", "enum": ["isolated", "fork"]},
            "agent": {"type": "string", "description": "A project agent's name; leave out for a worker."},
            "paths": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Globs relative to the repository root of the files this subtask may change, e.g. [\"src/config/**\", \"src/lib.rs\"]; the worker cannot write others. Leave out for no limit."
            },
            "after": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Ids of earlier subtasks (e.g. [\"S1\"]) that must be merged or otherwise settled before this one starts; it then starts from their merged result."
            },
            "start_from": {
                "type": "string",
                "description": "The id of a settled subtask that was not merged (e.g. \"S5\"): this one's worktree starts from its kept work, and its worker is told what that subtask's reviewer found. Implies `replaces`."
            },
            "replaces": {
                "type": "string",
                "description": "The id of an unmerged subtask whose work this one does instead (e.g. \"S5\"); once this one merges, that one counts as done."
            },
            "attempts": {
                "type": "integer",
                "minimum": 1,
                "description": "How many workers try this brief at once (default 1); a judge merges the best attempt. The result names the pick and why the others lost."
            }
        },
        "required": ["task"]
    })
}

/// The fields of a `delegate` call.
#[derive(Deserialize)]
pub(crate) struct DelegateInput {
    pub(crate) task: String,
    #[serde(default)]
    pub(crate) mode: Option<ContextMode>,
    #[serde(default)]
    pub(crate) agent: Option<String>,
    #[serde(default)]
    pub(crate) paths: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) after: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) replaces: Option<String>,
    #[serde(default)]
    pub(crate) start_from: Option<String>,
    #[serde(default)]
    pub(crate) attempts: Option<u32>,
}

impl DelegateInput {
    /// The request this call makes; an empty task is the model's mistake to fix.
    pub(crate) fn into_request(self) -> Result<DelegateRequest, ToolError> {
        if self.task.trim().is_empty() {
            return Err(ToolError::RespondToModel(
                "`task` is empty; write the complete brief for the worker".into(),
            ));
        }
        let paths = self.paths.unwrap_or_default();
        let paths = WriteScope::new(&paths)
            .map_err(|refused| {
                ToolError::RespondToModel(format!(
                    "{refused}; fix it, or leave `paths` out to let the subtask change any file"
                ))
            })?
            .map(|scope| scope.globs().to_vec())
            .unwrap_or_default();
        let mut after = Vec::new();
        for label in self.after.unwrap_or_default() {
            let id = parse_label(&label).ok_or_else(|| {
                ToolError::RespondToModel(format!(
                    "`after` entry `{label}` is not a subtask id; name earlier subtasks by the \
                     ids their results begin with, e.g. [\"S1\"]"
                ))
            })?;
            if !after.contains(&id) {
                after.push(id);
            }
        }
        after.sort();
        let start_from = one_label("start_from", self.start_from)?;
        let replaces = match (one_label("replaces", self.replaces)?, start_from) {
            (Some(replaces), Some(start_from)) if replaces != start_from => {
                let refused = ReplaceError::Two {
                    replaces,
                    start_from,
                };
                return Err(ToolError::RespondToModel(refused.to_string()));
            }
            (replaces, start_from) => replaces.or(start_from),
        };
        Ok(DelegateRequest {
            task: self.task,
            mode: self.mode.unwrap_or(ContextMode::Isolated),
            agent: self.agent.filter(|agent| !agent.trim().is_empty()),
            paths,
            after,
            replaces,
            start_from,
            attempts: self.attempts,
        })
    }
}

/// The subtask id a one-id field (`replaces`, `start_from`) names; blank is none.
fn one_label(field: &str, label: Option<String>) -> Result<Option<SubtaskId>, ToolError> {
    let Some(label) = label.filter(|label| !label.trim().is_empty()) else {
        return Ok(None);
    };
    parse_label(&label).map(Some).ok_or_else(|| {
        ToolError::RespondToModel(format!(
            "`{field}` value `{}` is not a subtask id; name a subtask by the id its result \
             begins with, e.g. \"S1\"",
            printable(&label)
        ))
    })
}

/// A subtask id as a model may write it: `S1`, `s1` or `1`.
fn parse_label(label: &str) -> Option<SubtaskId> {
    let label = label.trim();
    let digits = label
        .strip_prefix('S')
        .or_else(|| label.strip_prefix('s'))
        .unwrap_or(label);
    digits.parse().ok().filter(|n| *n > 0).map(SubtaskId)
}

#[async_trait]
impl Tool for Delegate {
    fn name(&self) -> &'static str {
        "delegate"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        input_schema()
    }

    fn mutates(&self) -> bool {
        // Every subtask works in its own worktree and merges through one queue, so
        // several delegate calls of one response run concurrently — the point of grove.
        false
    }

    fn repeatable(&self) -> bool {
        // It starts a subtask: run again, it would start a second one.
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let request = parse_input::<DelegateInput>(self, input)?.into_request()?;
        let report = self.delegator.delegate(request).await.map_err(tool_error)?;
        // The report quotes a worker's summary and a reviewer's findings: model text
        // that may carry terminal escapes (issue 12 item 17).
        Ok(ToolOutput::ok(printable(&report.text).into_owned()))
    }
}

/// The lead's `wait` tool: the results of its subtasks as they settle.
pub(crate) struct Wait {
    delegator: Arc<dyn Delegator>,
}

impl Wait {
    pub(crate) fn new(delegator: Arc<dyn Delegator>) -> Self {
        Self { delegator }
    }
}

/// The fields of a `wait` call.
#[derive(Deserialize)]
struct WaitInput {
    #[serde(default)]
    all: Option<bool>,
}

/// What the lead is told `wait` does.
pub(crate) const WAIT_DESCRIPTION: &str = "Wait for the subtasks you delegated. Returns as \
     soon as one settles, with every result not given to you yet (in the order they \
     settled) and which subtasks still run; call it again for the next. With `all: true` \
     it returns only once every running subtask has settled, with all their results. \
     Returns at once when no subtask runs.";

/// The `wait` input schema.
pub(crate) fn wait_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "all": {
                "type": "boolean",
                "description": "Wait until every running subtask has settled (default: until the next one does)."
            }
        }
    })
}

#[async_trait]
impl Tool for Wait {
    fn name(&self) -> &'static str {
        "wait"
    }

    fn description(&self) -> &str {
        WAIT_DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        wait_schema()
    }

    fn mutates(&self) -> bool {
        // Not that it writes: it runs alone, after the calls written before it, so a
        // `wait` after `delegate` calls of the same response waits for those subtasks.
        true
    }

    fn repeatable(&self) -> bool {
        // A result is given once: run again, it would wait for the next.
        false
    }

    async fn run(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input = parse_input::<WaitInput>(self, input)?;
        let request = WaitRequest {
            all: input.all.unwrap_or(false),
            call_id: ctx.call_id.clone(),
        };
        let report = self.delegator.wait(request).await.map_err(tool_error)?;
        // Each result quotes model text inside its own fences; the rest is grove's.
        Ok(ToolOutput::ok(printable(&report.text).into_owned()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::sync::Barrier;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::agent::{LoopInput, run_agent};
    use crate::event::EventSink;
    use crate::run::test_support::{ScriptedModel, lead_spec_for_test};
    use crate::tools::Registry;

    /// Answers each call as scripted by its task, and records the requests.
    struct MockDelegator {
        requests: Mutex<Vec<DelegateRequest>>,
        /// Every call waits here, so two calls pass only if both are in flight at once.
        barrier: Option<Barrier>,
    }

    #[async_trait]
    impl Delegator for MockDelegator {
        async fn delegate(
            &self,
            request: DelegateRequest,
        ) -> Result<DelegateReport, DelegateError> {
            self.requests.lock().unwrap().push(request.clone());
            if let Some(barrier) = &self.barrier {
                barrier.wait().await;
            }
            match request.task.as_str() {
                "over budget" => Err(DelegateError::BudgetSpent),
                "journal" => Err(DelegateError::Journal {
                    source: StoreError::InvalidRunId { id: "r1".into() },
                }),
                task => Ok(DelegateReport {
                    text: format!("S1 merged: {task}"),
                }),
            }
        }

        async fn wait(&self, request: WaitRequest) -> Result<DelegateReport, DelegateError> {
            Ok(DelegateReport {
                text: format!("waited (all: {}, call {:?})", request.all, request.call_id),
            })
        }
    }

    fn tool(barrier: Option<Barrier>) -> (Arc<MockDelegator>, Delegate) {
        let mock = Arc::new(MockDelegator {
            requests: Mutex::new(Vec::new()),
            barrier,
        });
        let tool = Delegate::new(mock.clone(), &[("docs".into(), "writes docs".into())]);
        (mock, tool)
    }

    fn ctx() -> ToolContext {
        ToolContext::plain(std::env::temp_dir(), CancellationToken::new())
    }

    #[test]
    fn a_turn_that_delegates_is_never_one_that_may_run_twice() {
        let (_, delegate) = tool(None);
        let registry =
            crate::tools::builtin(crate::tools::ToolSet::ReadOnly).with(Arc::new(delegate));
        assert_eq!(
            (
                registry.all_repeatable(["read_file", "grep"]),
                registry.all_repeatable(["read_file", "delegate"]),
            ),
            (true, false),
            "a delegate call run twice would start a second subtask: its turn is synced"
        );
    }

    #[tokio::test]
    async fn a_call_becomes_one_request_and_the_report_is_all_the_lead_gets() {
        let (mock, tool) = tool(None);
        let output = tool
            .run(
                json!({"task": "rename a", "mode": "fork", "agent": " "}),
                &ctx(),
            )
            .await
            .unwrap();
        assert_eq!(output, ToolOutput::ok("S1 merged: rename a"));
        assert_eq!(
            *mock.requests.lock().unwrap(),
            vec![DelegateRequest {
                task: "rename a".into(),
                mode: ContextMode::Fork,
                agent: None,
                paths: Vec::new(),
                after: Vec::new(),
                replaces: None,
                start_from: None,
                attempts: None,
            }],
            "a blank agent is the built-in worker"
        );
        assert!(tool.description().ends_with(" `docs`: writes docs;"));
    }

    #[tokio::test]
    async fn paths_are_normalised_and_after_ids_read_in_any_spelling_once() {
        let (mock, tool) = tool(None);
        tool.run(
            json!({"task": "t", "paths": ["./src/config/", "src/lib.rs"], "after": ["s2", "1", "S2"]}),
            &ctx(),
        )
        .await
        .unwrap();
        assert_eq!(
            *mock.requests.lock().unwrap(),
            vec![DelegateRequest {
                task: "t".into(),
                mode: ContextMode::Isolated,
                agent: None,
                paths: vec!["src/config/**".into(), "src/lib.rs".into()],
                after: vec![SubtaskId(1), SubtaskId(2)],
                replaces: None,
                start_from: None,
                attempts: None,
            }],
            "the delegator gets the globs normalised and each id once, in order"
        );
        let refused = tool
            .run(json!({"task": "t", "after": ["S0"]}), &ctx())
            .await;
        assert!(
            matches!(&refused, Err(ToolError::RespondToModel(m)) if m.starts_with("`after` entry `S0` is not a subtask id")),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn wait_hands_the_delegator_its_call_id_so_that_a_resume_answers_it_the_same() {
        let (mock, _) = tool(None);
        let wait = Wait::new(mock);
        let ctx = ToolContext {
            call_id: Some("w9".into()),
            ..ctx()
        };
        let all = wait.run(json!({"all": true}), &ctx).await.unwrap();
        let next = wait.run(json!({}), &ctx).await.unwrap();
        assert_eq!(
            (all, next),
            (
                ToolOutput::ok("waited (all: true, call Some(\"w9\"))"),
                ToolOutput::ok("waited (all: false, call Some(\"w9\"))")
            ),
            "`all` defaults to the next result; the call id is what its delivery is journaled under"
        );
        assert!(
            wait.mutates(),
            "a wait runs after the delegate calls written before it"
        );
    }

    #[tokio::test]
    async fn a_refusal_is_for_the_lead_and_a_journal_failure_ends_the_run() {
        let (mock, tool) = tool(None);
        let refused = tool.run(json!({"task": "over budget"}), &ctx()).await;
        assert!(
            matches!(&refused, Err(ToolError::RespondToModel(m)) if m.starts_with("the run's token budget is spent")),
            "{refused:?}"
        );
        let fatal = tool.run(json!({"task": "journal"}), &ctx()).await;
        assert!(
            matches!(&fatal, Err(ToolError::Fatal(m)) if m.starts_with("the run journal cannot be written")),
            "{fatal:?}"
        );
        let empty = tool.run(json!({"task": "  "}), &ctx()).await;
        assert!(matches!(empty, Err(ToolError::RespondToModel(_))));
        assert_eq!(
            mock.requests.lock().unwrap().len(),
            2,
            "an empty task never reaches the delegator"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delegate_calls_of_one_response_run_concurrently() {
        // Both calls wait at a barrier for two: the lead's turn completes only if the
        // agent loop has both in flight at once. Were `delegate` run one call after the
        // other, the first would wait forever and the timeout would fail the test.
        let (mock, tool) = tool(Some(Barrier::new(2)));
        let model = ScriptedModel::new(vec![
            ScriptedModel::tool_calls(&[
                ("c1", "delegate", json!({"task": "rename a"})),
                ("c2", "delegate", json!({"task": "rename b"})),
            ]),
            ScriptedModel::text("done"),
        ]);
        let spec = lead_spec_for_test(model.clone(), Registry::new().with(Arc::new(tool)));
        let run = tokio::time::timeout(
            Duration::from_secs(10),
            run_agent(
                &spec,
                LoopInput {
                    messages: crate::agent::isolated_messages("plan"),
                    tool_context: ctx(),
                    events: EventSink::discard(),
                    observer: None,
                },
            ),
        )
        .await
        .expect("both delegate calls of one response are in flight at once");
        assert_eq!(
            run.result.map(|outcome| outcome.final_text).ok(),
            Some("done".into())
        );
        assert_eq!(
            model.tool_results(1),
            vec![
                ("c1".to_owned(), "S1 merged: rename a".to_owned()),
                ("c2".to_owned(), "S1 merged: rename b".to_owned())
            ],
            "each call is answered with its own report"
        );
        assert_eq!(mock.requests.lock().unwrap().len(), 2);
    }
}
