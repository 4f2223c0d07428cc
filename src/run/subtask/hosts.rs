//! Where a subtask's remote tree goes: the host with the most free slots when it is
//! opened, another one (once) when its host is lost on the way or mid-work.
//!
//! This file owns that a tree moves only from a host that is gone, and only to one the
//! run has: a subtask is never opened twice at once.

use crate::run::context::TreeStage;
use crate::run::id::SubtaskId;
use crate::run::subtask::error::SubtaskError;
use crate::tools::WriteScope;
use crate::worktree::Worktree;

/// Opens subtask `id`'s remote worktree on the host with the most free slots; a host
/// lost on the way gives its place to another, once.
pub(crate) async fn reach(
    stage: TreeStage<'_>,
    id: SubtaskId,
    worktree: &Worktree,
    scope: Option<&WriteScope>,
) -> Result<Worktree, SubtaskError> {
    let sandbox = crate::remote::protocol::SandboxSpec::of(
        stage.facts.options.sandbox,
        stage.facts.options.allow_network,
    );
    let globs = scope.map(|scope| scope.globs().to_vec());
    let mut avoid = None;
    loop {
        let Some(placement) = stage.trees.hosts.place(avoid.as_deref()).await else {
            return Err(SubtaskError::Remote {
                source: crate::remote::RemoteError::Refused {
                    host: String::new(),
                    message: "the run has no remote host".to_owned(),
                },
            });
        };
        let host = placement.host.name.clone();
        match worktree
            .reach(&stage.facts.repo, placement, sandbox.clone(), globs.clone())
            .await
        {
            Ok(reached) => {
                if let Some(tree) = reached.remote() {
                    stage.record.note(format!(
                        "{id}: works on remote host `{host}` ({} bytes of git objects sent \
                         for its start)",
                        tree.base_bytes()
                    ));
                }
                return Ok(reached);
            }
            Err(error) if error.is_lost() && avoid.is_none() && stage.trees.hosts.len() > 1 => {
                stage
                    .record
                    .note(format!("{id}: {error}; trying another host"));
                avoid = Some(host);
            }
            Err(source) => return Err(SubtaskError::Remote { source }),
        }
    }
}

/// Moves subtask `id`'s remote `tree` off host `lost` to another host with a free slot,
/// at its branch's last checkpoint.
pub(crate) async fn move_remote(
    stage: TreeStage<'_>,
    id: SubtaskId,
    tree: &crate::remote::RemoteTree,
    lost: &str,
) -> Result<(), crate::remote::RemoteError> {
    let refused = |message: &str| crate::remote::RemoteError::Refused {
        host: lost.to_owned(),
        message: message.to_owned(),
    };
    if stage.trees.hosts.len() < 2 {
        return Err(refused("the run has no other remote host"));
    }
    let placement = stage
        .trees
        .hosts
        .place(Some(lost))
        .await
        .ok_or_else(|| refused("the run has no other remote host"))?;
    let host = placement.host.name.clone();
    let start = stage
        .facts
        .repo
        .ref_target(&crate::git::subtask_ref(&stage.facts.run, id.number()))
        .ok()
        .flatten()
        .unwrap_or(stage.facts.base);
    tree.move_to(&stage.facts.repo, placement, start).await?;
    stage.record.note(format!(
        "{id}: lost remote host `{lost}`; its tree moved to `{host}` at its last checkpoint \
         ({start}) and its worker goes on there"
    ));
    Ok(())
}
