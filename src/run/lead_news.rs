//! What the lead is told of the merged result once a turn of its calls is answered: how
//! the result, as it is now, fares on the project's check — so that the turn it writes
//! its summary in (or delegates a fix) knows what grove will find.
//!
//! This file owns that word. The check runs as the result's check (journaled; the
//! run's own check of the same tree at its end takes its verdict rather than running
//! again), once per tree the lead was not yet told of, and only when something merged.
//! It never starts a fixer: that is the run's end's, should the lead finish on a red
//! result.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::run::check::tree::check_commit;
use crate::run::context::{RunContext, lock};
use crate::run::observer::News;
use crate::store::journal::{CheckStatus, ON_RESULT};
use crate::text::{fenced, output_tail};
use crate::tools::result_tree::what_it_holds;

/// How much of a red result's output the lead is shown.
const TAIL_CHARS: usize = 1_500;

/// The lead's news of the result.
pub(crate) struct ResultNews {
    ctx: Arc<RunContext>,
    /// The tree the lead was last told of.
    told: Mutex<Option<String>>,
}

impl ResultNews {
    pub(crate) fn new(ctx: &Arc<RunContext>) -> Arc<Self> {
        Arc::new(Self {
            ctx: Arc::clone(ctx),
            told: Mutex::new(None),
        })
    }
}

#[async_trait]
impl News for ResultNews {
    async fn news(&self) -> Option<String> {
        let ctx = &self.ctx;
        let check = ctx.facts.options.check.as_ref()?;
        if ctx.stopping() {
            return None;
        }
        let tip = ctx
            .facts
            .repo
            .ref_target(&ctx.facts.run.result_ref())
            .ok()??;
        if tip == ctx.facts.base {
            return None;
        }
        let tree = ctx.facts.repo.tree_id(tip).ok()?;
        if lock(&self.told).replace(tree.clone()).as_deref() == Some(tree.as_str()) {
            return None;
        }
        let run = match check_commit(ctx.tree_stage(), check, tip, ON_RESULT).await {
            Ok(run) => run,
            Err(error) => {
                ctx.note(format!(
                    "the merged result could not be checked yet: {error}"
                ));
                return None;
            }
        };
        let holds = what_it_holds(&ctx.facts.repo, tip, ctx.facts.base).unwrap_or_default();
        let short: String = tip.to_string().chars().take(10).collect();
        let command = &check.command;
        Some(match run.status {
            CheckStatus::Passed => format!(
                "grove: the merged result as it is now (commit {short}: {holds}) passes the \
                 project's check `{command}`."
            ),
            CheckStatus::Failed => format!(
                "grove: the merged result as it is now (commit {short}: {holds}) fails the \
                 project's check `{command}` ({}). The end of its output:\n\n{}\nIf you finish \
                 with it red, grove sends a fixer after it (at most {} rounds) before anything \
                 is applied; a fix you delegate yourself is reviewed and checked the same way.",
                run.ended,
                fenced("text", &output_tail(&run.output_tail, TAIL_CHARS)),
                check.fix_attempts
            ),
        })
    }
}
