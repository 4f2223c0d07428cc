//! `grove run --dry-run`: the lead plans, and its delegations are recorded, not run.
//!
//! This module owns the dry run. The lead gets the same prompt, rules, read-only tools
//! and `delegate` contract as in a real run, reading the user's work tree as it is; each
//! delegation is checked like a real one and then only written down. It must never
//! create a worktree, a branch, a journal or take the repository lock: a dry run leaves
//! no trace in the repository.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, Ledger, LoopInput, StopKind, isolated_messages, run_agent};
use crate::event::EventSink;
use crate::git::Repo;
use crate::run::agents::{agent_catalogue, delegate_role, read_rules};
use crate::run::context::lock;
use crate::run::delegate::{self, DelegateError, DelegateInput, DelegateRequest};
use crate::run::estimate::{self, Estimate, EstimateInput};
use crate::run::id::SubtaskId;
use crate::run::lead::{first_prompt, lead_spec};
use crate::run::schedule::check_after;
use crate::run::start::RunError;
use crate::settings::options::{ModelNames, Models, RunOptions};
use crate::store::journal::ContextMode;
use crate::tools::result_tree::{self, LiveTree};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, parse_input};

/// One delegation the lead would make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedSubtask {
    /// `S1`, `S2`, … in the order the lead asked.
    pub id: String,
    pub task: String,
    pub mode: ContextMode,
    /// `worker` or the project agent's name.
    pub agent: String,
    /// How many workers would try it at once (`delegate`'s `attempts`, or the run's);
    /// absent for one.
    #[serde(skip_serializing_if = "is_one")]
    pub attempts: u32,
}

fn is_one(attempts: &u32) -> bool {
    *attempts == 1
}

/// What the lead would do with the task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub task: String,
    pub subtasks: Vec<PlannedSubtask>,
    /// The lead's closing text.
    pub summary: String,
    /// Why the lead stopped early, when it did (turn cap, budget, API error, Ctrl-C).
    pub stopped: Option<String>,
    pub lead_ledger: Ledger,
    /// What this plan cost (the lead's planning), in US dollars; `None` when its model
    /// has no price.
    pub plan_usd: Option<f64>,
    /// What running the plan would cost.
    pub estimate: Estimate,
}

/// Runs the lead of `options.task` against the work tree at `repo_path`, recording its
/// delegations instead of running them.
pub async fn plan(
    repo_path: &Path,
    options: RunOptions,
    models: Models,
    events: EventSink,
    cancel: CancellationToken,
) -> Result<Plan, RunError> {
    let repo = Repo::open(repo_path, options.git.clone()).await?;
    let root = repo.work_tree().ok_or(RunError::NoWorkTree)?.to_path_buf();
    let recorder = Arc::new(PlanDelegate {
        root: root.clone(),
        description: delegate::description(&agent_catalogue(&root)),
        max_subtasks: options.max_subtasks,
        attempts: (options.attempts, options.max_attempts),
        planned: Mutex::new(Vec::new()),
    });
    // What a run would read: the commit it would start from, never the work tree's
    // uncommitted or ignored files.
    let head = repo.resolve("HEAD")?;
    let tools = result_tree::read_only(&LiveTree::base(repo.clone(), head))
        .with(recorder.clone())
        .with(Arc::new(PlanWait))
        .with(Arc::new(PlanShow));
    let mut spec = lead_spec(&options, read_rules(&root)?.as_ref(), &models.lead, tools);
    // A plan's `delegate` only records: this lead never waits on subtasks.
    spec.cache.long_wait = false;
    let outcome = run_agent(
        &spec,
        LoopInput {
            messages: isolated_messages(&first_prompt(&options.task)),
            tool_context: ToolContext::plain(root, cancel.child_token()),
            events,
            observer: None,
        },
    )
    .await;
    let (summary, stopped) = match outcome.result {
        Ok(result) if result.stop == StopKind::Finished => (result.final_text, None),
        Ok(result) => (
            result.final_text,
            Some(format!(
                "the lead stopped: {}: {}",
                result.stop, result.detail
            )),
        ),
        Err(AgentError::Cancelled { .. }) => (String::new(), Some("interrupted".into())),
        Err(error) => (String::new(), Some(error.to_string())),
    };
    let subtasks = lock(&recorder.planned).clone();
    let planned = u32::try_from(subtasks.len()).unwrap_or(u32::MAX);
    let names = ModelNames {
        lead: models.lead.name.clone(),
        worker: models.worker.name.clone(),
        reviewer: models.reviewer.name.clone(),
    };
    let estimate = estimate::estimate(&EstimateInput {
        subtasks: (planned, planned),
        planned: true,
        repository: estimate::repository_size(&repo).await,
        models: &names,
        prices: &options.prices,
        max_turns: options.max_turns,
        worker_backend: &options.worker_backend,
    });
    Ok(Plan {
        plan_usd: options
            .prices
            .cost(&models.lead.name, &outcome.ledger)
            .usd(),
        task: options.task,
        subtasks,
        summary,
        stopped,
        lead_ledger: outcome.ledger,
        estimate,
    })
}

/// `delegate` for a dry run: checks the call as a real run would, then records it.
struct PlanDelegate {
    root: std::path::PathBuf,
    description: String,
    max_subtasks: u32,
    /// The run's `--attempts` and `max_attempts`.
    attempts: (u32, u32),
    planned: Mutex<Vec<PlannedSubtask>>,
}

#[async_trait]
impl Tool for PlanDelegate {
    fn name(&self) -> &'static str {
        "delegate"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        delegate::input_schema()
    }

    fn mutates(&self) -> bool {
        false
    }

    fn repeatable(&self) -> bool {
        // It starts a subtask: run again, it would start a second one.
        false
    }

    async fn run(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let request: DelegateRequest = parse_input::<DelegateInput>(self, input)?.into_request()?;
        let role = delegate_role(&self.root, request.agent.as_deref())
            .map_err(|refused| ToolError::RespondToModel(refused.to_string()))?;
        let (default, max) = self.attempts;
        let attempts = request.attempts.unwrap_or(default).max(1);
        if attempts > max {
            let refused = DelegateError::TooManyAttempts {
                asked: attempts,
                max,
            };
            return Err(ToolError::RespondToModel(refused.to_string()));
        }
        let mut planned = lock(&self.planned);
        if planned.len() >= self.max_subtasks as usize {
            return Err(ToolError::RespondToModel(format!(
                "the run allows {} subtasks; plan within them",
                self.max_subtasks
            )));
        }
        let this = SubtaskId(u32::try_from(planned.len() + 1).unwrap_or(u32::MAX));
        let delegated: Vec<SubtaskId> = (1..this.number()).map(SubtaskId).collect();
        check_after(&request.after, this, &delegated)
            .map_err(|refused| ToolError::RespondToModel(refused.to_string()))?;
        let id = this.to_string();
        planned.push(PlannedSubtask {
            id: id.clone(),
            task: request.task,
            mode: request.mode,
            agent: role.name,
            attempts,
        });
        Ok(ToolOutput::ok(format!(
            "{id}: planned (dry run: nothing runs). Go on as if it will be done and merged; \
             end with a summary of the plan."
        )))
    }
}

/// `wait` for a dry run: nothing runs, so there is nothing to wait for.
struct PlanWait;

#[async_trait]
impl Tool for PlanWait {
    fn name(&self) -> &'static str {
        "wait"
    }

    fn description(&self) -> &str {
        delegate::WAIT_DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        delegate::wait_schema()
    }

    fn mutates(&self) -> bool {
        // As the run's: after the calls written before it.
        true
    }

    async fn run(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(
            "dry run: nothing runs, so no result comes. Go on as if every planned subtask \
             will be done and merged; end with a summary of the plan.",
        ))
    }
}

/// `show_subtask` for a dry run: the lead has the run's tool set, and no subtask has a
/// record to show.
struct PlanShow;

#[async_trait]
impl Tool for PlanShow {
    fn name(&self) -> &'static str {
        "show_subtask"
    }

    fn description(&self) -> &str {
        crate::run::show_subtask::DESCRIPTION
    }

    fn input_schema(&self) -> Value {
        crate::run::show_subtask::input_schema()
    }

    fn mutates(&self) -> bool {
        false
    }

    async fn run(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::ok(
            "dry run: no subtask ran, so none has a record and the result is the base. Go \
             on planning; end with a summary of the plan.",
        ))
    }
}
