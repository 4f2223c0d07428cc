//! The check on the base, proven before tokens are spent: run once while the lead plans
//! (its verdict kept per base commit, command and environment), a gate every worker
//! waits at, and the same run on the base when the merged result is red and nobody had
//! checked the base.
//!
//! This file owns the gate and the verdict's cache. A red base pauses the run before any
//! worker or fixer makes a model call, with the check's own output and the likely cause
//! ([`check_diagnosis`](crate::run::check::diagnosis)); `grove resume` checks the base
//! again. It must never open the gate on a red base, nor cache a red verdict (the user
//! fixes the environment and runs again).

use std::path::PathBuf;
use std::sync::Arc;

use crate::run::check::diagnosis::{SandboxFacts, diagnose};
use crate::run::check::gate::BaseVerdict;
use crate::run::check::ratchet::base::{BaseFindingsError, Cached, prove};
use crate::run::check::tree::{TreeCheckError, check_commit};
use crate::run::context::{RunContext, RunFacts, RunRecord, TreeStage};
use crate::run::sandbox_view;
use crate::settings::options::{BaseCheck, CheckOptions};
use crate::store::StoreError;
use crate::store::journal::{CheckRun, CheckStatus, ON_BASE};

/// How a pause for a red base starts: its reason is whole (what failed, what to do).
pub(crate) const BASE_RED: &str = "the check fails on the base commit";

/// The lines of a red base's output its pause message shows.
const SHOWN_LINES: usize = 30;

/// Checks the base as `[check] base` asks, then opens the gate, or pauses the run with
/// the check's output and the likely cause. On a resume a passing check journaled by
/// the run (or cached for this base and environment) is enough.
/// `findings_known`: what [`base_findings`] said before the lead started.
pub(crate) async fn check_base(
    ctx: Arc<RunContext>,
    findings_known: bool,
) -> Result<(), StoreError> {
    if !findings_known {
        ctx.trees.base_gate.decide(BaseVerdict::Closed);
        return Ok(());
    }
    let Some(check) = ctx
        .facts
        .options
        .check
        .as_ref()
        .filter(|c| c.base == BaseCheck::Require)
    else {
        ctx.trees.base_gate.decide(BaseVerdict::NotChecked);
        return Ok(());
    };
    let journaled = ctx
        .record
        .journal
        .checks()
        .iter()
        .any(|run| run.on == ON_BASE && run.status == CheckStatus::Passed);
    let key = cache_key(&ctx.facts, check);
    if journaled || cached(&ctx.facts, &key) {
        ctx.trees.base_gate.decide(BaseVerdict::Passed);
        return Ok(());
    }
    let run = match check_commit(ctx.tree_stage(), check, ctx.facts.base, ON_BASE).await {
        Ok(run) => run,
        Err(error) => match error.into_journal() {
            Ok(journal) => {
                ctx.trees.base_gate.decide(BaseVerdict::Closed);
                return Err(journal);
            }
            Err(error) if error.interrupted() || ctx.stopping() => {
                ctx.trees.base_gate.decide(BaseVerdict::Closed);
                return Ok(());
            }
            Err(error) => {
                ctx.pause(format!(
                    "{BASE_RED}: it could not run there: {error}. No worker was started. Fix \
                     the cause, then `grove resume {}` checks the base again and goes on",
                    ctx.facts.run
                ));
                ctx.trees.base_gate.decide(BaseVerdict::Closed);
                return Ok(());
            }
        },
    };
    if run.status == CheckStatus::Passed {
        remember(&ctx.facts, &ctx.record, &key);
        ctx.trees.base_gate.decide(BaseVerdict::Passed);
        return Ok(());
    }
    ctx.pause(red_base_reason(&ctx.facts, check, &run));
    ctx.trees.base_gate.decide(BaseVerdict::Closed);
    Ok(())
}

/// Finds the base's findings of every `[[check.ratchet]]` (cached per base commit and
/// environment, beside the verdict), whatever `[check] base` says: every tree is
/// compared with them. False when the run pauses (a ratchet gave nothing to compare on
/// the base, its tree could not be made) or stops.
pub(crate) async fn base_findings(ctx: &RunContext) -> Result<bool, StoreError> {
    let Some(check) = ctx.facts.options.check.as_ref() else {
        return Ok(true);
    };
    if check.ratchets.is_empty() {
        return Ok(true);
    }
    let environment = cache_key(&ctx.facts, check);
    let cache: Vec<Cached> = check
        .ratchets
        .iter()
        .map(|ratchet| {
            let key = format!(
                "{environment}\n{}",
                serde_json::to_string(ratchet).unwrap_or_default()
            );
            Cached {
                file: cache_file(&ctx.facts, &key).with_extension("findings"),
                key,
            }
        })
        .collect();
    let error = match prove(ctx.tree_stage(), check, &cache).await {
        Ok(()) => return Ok(true),
        Err(BaseFindingsError::Interrupted) => return Ok(false),
        Err(BaseFindingsError::Tree(error)) => match error.into_journal() {
            Ok(journal) => return Err(journal),
            Err(error) if error.interrupted() || ctx.stopping() => return Ok(false),
            Err(error) => BaseFindingsError::Tree(error),
        },
        Err(error) => error,
    };
    ctx.pause(format!(
        "{error}. No worker was started: each tree's findings are compared with the \
         base's. Fix the `[[check.ratchet]]` in .grove/config.toml (or its tool), then \
         `grove resume {}` finds the base's findings again and goes on",
        ctx.facts.run
    ));
    Ok(false)
}

/// The pause message of a red base: the check, its end, its output, the likely cause,
/// and what to do.
fn red_base_reason(facts: &RunFacts, check: &CheckOptions, run: &CheckRun) -> String {
    let lines: Vec<&str> = run.output_tail.lines().collect();
    let shown = lines[lines.len().saturating_sub(SHOWN_LINES)..].join("\n");
    let cause = diagnose(&run.output_tail, &sandbox_facts(facts, check)).map_or_else(
        || {
            "no environment cause recognised in its output: if the suite is known to be \
             red, set `[check] base = \"skip\"` in .grove/config.toml"
                .to_owned()
        },
        |cause| cause.to_string(),
    );
    format!(
        "{BASE_RED} ({}), before any change: `{}` {}. No worker was started: a check that \
         cannot pass on the base would send every worker and fixer after the environment. \
         Its output ends with:\n{shown}\nLikely cause: {cause}.\nFix it, then `grove resume \
         {}` checks the base again and goes on",
        facts.base.to_string().get(..10).unwrap_or_default(),
        check.command,
        run.ended,
        facts.run
    )
}

/// What the diagnosis needs to know of this run's sandbox.
pub(crate) fn sandbox_facts(facts: &RunFacts, check: &CheckOptions) -> SandboxFacts {
    let home = facts
        .options
        .commands
        .env()
        .into_iter()
        .find(|(name, _)| name == "HOME")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|home| home.is_absolute());
    let denied = sandbox_view::read_rule_paths(&facts.options.sandbox_paths, home.as_deref())
        .map(|(denied, _)| denied)
        .unwrap_or_default();
    SandboxFacts {
        checkout: facts.repo.work_tree().map(std::path::Path::to_path_buf),
        worktrees: Some(facts.worktrees_dir.clone()),
        home,
        shares: facts
            .options
            .worktree_setup
            .share
            .clone()
            .unwrap_or_default(),
        denied,
        network: check.network,
    }
}

/// The environment a check's verdict on the base holds for: the check, the setup, the
/// sandbox's settings and the commands' environment.
fn cache_key(facts: &RunFacts, check: &CheckOptions) -> String {
    let options = &facts.options;
    let mut env: Vec<String> = crate::tools::exec::scrub_env(options.commands.env())
        .into_iter()
        .map(|(name, value)| format!("{}={}", name.to_string_lossy(), value.to_string_lossy()))
        .collect();
    env.sort();
    serde_json::json!({
        "command": check.command,
        "timeout_s": check.timeout_s,
        "network": check.network,
        "setup": options.worktree_setup.setup,
        "copy": options.worktree_setup.copy,
        "share": options.worktree_setup.share,
        "sandbox": options.sandbox,
        "allow_network": options.allow_network,
        "sandbox_paths": options.sandbox_paths,
        "env": env,
    })
    .to_string()
}

/// The file that says the check passed on the base for `key`.
fn cache_file(facts: &RunFacts, key: &str) -> PathBuf {
    facts
        .repo
        .common_dir()
        .join("grove")
        .join("base-checks")
        .join(format!("{}-{:016x}", facts.base, fnv1a(key.as_bytes())))
}

fn cached(facts: &RunFacts, key: &str) -> bool {
    std::fs::read_to_string(cache_file(facts, key)).is_ok_and(|text| text == key)
}

/// Records a passing verdict; a cache that cannot be written only costs a check later.
fn remember(facts: &RunFacts, record: &RunRecord, key: &str) {
    let file = cache_file(facts, key);
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            let staged = file.with_extension("new");
            std::fs::write(&staged, key)?;
            std::fs::rename(&staged, &file)
        });
    if let Err(error) = written {
        record.note(format!(
            "could not remember that the check passed on the base ({}): {error}",
            file.display()
        ));
    }
}

/// FNV-1a, 64 bits: a name for a cache file that is the same in every grove build (std's
/// hasher promises no such thing).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// When the merged result is red: whether the check fails the same way on the base,
/// without any subtask (checked now when nobody checked the base before), which makes it
/// the environment's failure, not the work's; the message for the person then.
pub(crate) async fn red_without_any_subtask(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    red: &CheckRun,
) -> Result<Option<String>, TreeCheckError> {
    if stage.trees.base_gate.verdict().await != BaseVerdict::NotChecked {
        return Ok(None);
    }
    let base = check_commit(stage, check, stage.facts.base, ON_BASE).await?;
    if base.status == CheckStatus::Passed || !fails_the_same_way(stage.facts, check, red, &base) {
        return Ok(None);
    }
    let cause = diagnose(&red.output_tail, &sandbox_facts(stage.facts, check))
        .map_or_else(String::new, |cause| format!(" Likely cause: {cause}."));
    Ok(Some(format!(
        "it fails the same way on the base commit, without any subtask: the environment \
         fails, not the work, so no fixer was started.{cause}"
    )))
}

/// Whether two red runs of the check failed the same way: the same likely cause, or the
/// same output once each tree's path and every duration are taken out.
fn fails_the_same_way(
    facts: &RunFacts,
    check: &CheckOptions,
    one: &CheckRun,
    other: &CheckRun,
) -> bool {
    let sandbox = sandbox_facts(facts, check);
    if let (Some(a), Some(b)) = (
        diagnose(&one.output_tail, &sandbox),
        diagnose(&other.output_tail, &sandbox),
    ) {
        return a == b;
    }
    let normal = |run: &CheckRun| normalized(&run.output_tail, &facts.worktrees_dir);
    one.ended == other.ended && normal(one) == normal(other)
}

/// `tail` with the check trees' paths (`<worktrees>/check-…`) and durations taken out.
fn normalized(tail: &str, worktrees: &std::path::Path) -> String {
    static DURATION: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b")
            .unwrap_or_else(|_| unreachable!("a fixed pattern"))
    });
    let trees = regex::Regex::new(&format!(
        "{}/check-[A-Za-z0-9-]+",
        regex::escape(&worktrees.to_string_lossy())
    ));
    let tail = match trees {
        Ok(trees) => trees.replace_all(tail, "<tree>").into_owned(),
        Err(_) => tail.to_owned(),
    };
    DURATION.replace_all(&tail, "<time>").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_name_is_fnv1a_as_published() {
        // The published test vectors of FNV-1a 64.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
