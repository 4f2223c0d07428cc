//! The base's findings of each `[[check.ratchet]]`: found once per base commit (and
//! environment) in a tree of the base, kept in a file beside the base check's verdict,
//! read back by every later run from that base and by a resume.
//!
//! This file owns that proof and its cache. It must never let a tree be compared with
//! findings the base did not give: a ratchet that gives nothing to compare on the base
//! is an error the run pauses on, before any worker starts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::run::check::ratchet::{Interrupted, NoFindings, RatchetSite, findings};
use crate::run::check::tree::{TreeCheckError, open_tree, remove_tree};
use crate::run::context::TreeStage;
use crate::settings::options::CheckOptions;
use crate::store::findings::RatchetFinding;
use crate::store::journal::ON_BASE;
use crate::tools::SetupPolicy;
use crate::tools::tree::{TreeAccess, in_tree};

/// Where one ratchet's findings on the base are kept, and the key they hold for (the
/// base check's environment and the ratchet itself).
pub(crate) struct Cached {
    pub(crate) key: String,
    pub(crate) file: PathBuf,
}

/// What a cache file holds.
#[derive(Serialize, Deserialize)]
struct Kept {
    key: String,
    findings: Vec<RatchetFinding>,
}

/// Why the base's findings are not known.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BaseFindingsError {
    /// The base's tree could not be made or prepared. Not retried.
    #[error("{0}")]
    Tree(#[from] TreeCheckError),
    /// A ratchet gave nothing to compare on the base (it could not run, its JUnit file
    /// is missing or not XML). Not retried: the user fixes the ratchet.
    #[error("the ratchet `{command}` gave nothing to compare on the base: {why}")]
    Ratchet { command: String, why: NoFindings },
    /// The run stopped meanwhile; a resume finds them again.
    #[error("interrupted while a ratchet ran on the base")]
    Interrupted,
}

/// Finds the base's findings of every ratchet of `check` (`cache[n]` is the `n`th's),
/// each read from its cache file when it has one for its key, the others run in one
/// tree of the base and cached; then records them for the run's checks.
pub(crate) async fn prove(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    cache: &[Cached],
) -> Result<(), BaseFindingsError> {
    let mut known: Vec<Option<Vec<RatchetFinding>>> = cache.iter().map(load).collect();
    if known.iter().any(Option::is_none) {
        let made = open_tree(stage, stage.facts.base, ON_BASE).await?;
        let found = run_missing(stage, check, &made.worktree, &mut known).await;
        remove_tree(stage, made, ON_BASE).await;
        found?;
        for (entry, findings) in cache.iter().zip(&known) {
            if let Some(findings) = findings {
                keep(stage, entry, findings);
            }
        }
    }
    let known: Vec<Vec<RatchetFinding>> = known.into_iter().flatten().collect();
    stage.record.note(format!(
        "the base's findings: {}",
        check
            .ratchets
            .iter()
            .zip(&known)
            .map(|(ratchet, found)| format!("`{}` {}", ratchet.command, found.len()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    stage.trees.base_findings.set(known);
    Ok(())
}

/// Runs the ratchets whose findings are not `known` in `worktree` (the base's).
async fn run_missing(
    stage: TreeStage<'_>,
    check: &CheckOptions,
    worktree: &crate::worktree::Worktree,
    known: &mut [Option<Vec<RatchetFinding>>],
) -> Result<(), BaseFindingsError> {
    let access = worktree.access();
    let reach = access
        .as_deref()
        .map_or_else(|| worktree.path().to_path_buf(), TreeAccess::root_for_grove);
    let policy = SetupPolicy {
        allow_network: check.network,
        writable: Vec::new(),
    };
    let executor =
        in_tree(access.as_deref(), &stage.trees.executor.for_setup(&policy)).map_err(|error| {
            BaseFindingsError::Ratchet {
                command: check
                    .ratchets
                    .iter()
                    .map(|ratchet| ratchet.command.as_str())
                    .collect::<Vec<_>>()
                    .join("`, `"),
                why: NoFindings::NotRun(error.to_string()),
            }
        })?;
    let site = RatchetSite {
        executor: &executor,
        cwd: worktree.path(),
        reach: &reach,
    };
    for (ratchet, slot) in check.ratchets.iter().zip(known.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        match findings(stage, check, ratchet, site).await {
            Ok(Ok(found)) => *slot = Some(found),
            Ok(Err(why)) => {
                return Err(BaseFindingsError::Ratchet {
                    command: ratchet.command.clone(),
                    why,
                });
            }
            Err(Interrupted) => return Err(BaseFindingsError::Interrupted),
        }
    }
    Ok(())
}

/// The findings `entry`'s file holds for its key.
fn load(entry: &Cached) -> Option<Vec<RatchetFinding>> {
    let text = std::fs::read_to_string(&entry.file).ok()?;
    let kept: Kept = serde_json::from_str(&text).ok()?;
    (kept.key == entry.key).then_some(kept.findings)
}

/// Writes `findings` to `entry`'s file; one that cannot be written only costs a run of
/// the ratchet on the base later.
fn keep(stage: TreeStage<'_>, entry: &Cached, findings: &[RatchetFinding]) {
    let kept = Kept {
        key: entry.key.clone(),
        findings: findings.to_vec(),
    };
    let written = serde_json::to_string(&kept)
        .map_err(std::io::Error::other)
        .and_then(|text| {
            if let Some(dir) = entry.file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let staged = entry.file.with_extension("new");
            std::fs::write(&staged, text)?;
            std::fs::rename(&staged, &entry.file)
        });
    if let Err(error) = written {
        stage.record.note(format!(
            "could not keep the base's findings at {}: {error}",
            entry.file.display()
        ));
    }
}
