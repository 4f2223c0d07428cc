//! The squashed history: one commit per merged subtask, for the user's branch.
//!
//! This module owns writing that history. Each commit takes the tree of one commit of a
//! run's result (a commit of its first-parent chain: the result right after one merge),
//! the message its caller wrote, and the identity the user's own `git commit` would pick
//! (grove's only when none is configured). It knows nothing of subtasks or runs beyond
//! refs and commits, never touches the user's branch, work tree or index (the apply
//! does), and never writes a second copy of commits it already wrote: a squashed history
//! kept on its ref is reused for as long as its trees are the result's, so that a resumed
//! run finds the commits the user's branch may already hold.

use super::Repo;
use super::cmd::parse_git_date;
use super::error::{AdvanceError, GitError};
use super::names::CommitId;

/// How far back a first-parent chain is followed before giving up on finding its base:
/// far more merges than a run makes.
const MAX_CHAIN: usize = 10_000;

/// One commit of a first-parent chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainCommit {
    pub commit: CommitId,
    /// The commit's full message.
    pub message: String,
}

/// One commit of a squashed history: the tree of `after` with `message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquashStep {
    /// The commit whose tree this step records (for a run: the result right after one
    /// subtask's merge).
    pub after: CommitId,
    pub message: String,
}

/// What [`Repo::squash`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Squashed {
    /// The last commit of the history, where the ref now points.
    pub tip: CommitId,
    /// Every commit of the history, oldest first.
    pub commits: Vec<CommitId>,
    /// How many of them were already on the ref (a resumed run) and kept as they were.
    pub reused: usize,
}

impl Repo {
    /// The commits on `reference`'s first-parent history after `base`, oldest first.
    pub fn first_parent_chain(
        &self,
        reference: &str,
        base: CommitId,
    ) -> Result<Vec<ChainCommit>, AdvanceError> {
        let tip = self
            .ref_target(reference)?
            .ok_or_else(|| GitError::UnknownRevision {
                rev: reference.to_owned(),
            })?;
        self.first_parent_commits(reference, tip, base)
    }

    /// The commits on `tip`'s first-parent history after `base`, oldest first; `what`
    /// names `tip` in an error.
    pub fn first_parent_commits(
        &self,
        what: &str,
        tip: CommitId,
        base: CommitId,
    ) -> Result<Vec<ChainCommit>, AdvanceError> {
        let reference = what;
        let chain = self.read(reference, |repo| {
            let mut chain = Vec::new();
            let mut at = repo.find_commit(tip.oid())?;
            while at.id() != base.oid() && chain.len() < MAX_CHAIN {
                chain.push(ChainCommit {
                    commit: CommitId::from_oid(at.id()),
                    message: String::from_utf8_lossy(at.message_bytes()).into_owned(),
                });
                match at.parent(0) {
                    Ok(parent) => at = parent,
                    Err(error) if error.code() == git2::ErrorCode::NotFound => {
                        return Ok(None);
                    }
                    Err(error) => return Err(error),
                }
            }
            Ok((at.id() == base.oid()).then_some(chain))
        })?;
        let mut chain = chain.ok_or_else(|| AdvanceError::NotOnFirstParentChain {
            reference: reference.to_owned(),
            tip: tip.to_string(),
            base: base.to_string(),
        })?;
        chain.reverse();
        Ok(chain)
    }

    /// Writes `steps` as a linear history on `base` and points `target_ref` at its last
    /// commit (compare-and-swap from where it was); the commits.
    ///
    /// Author and committer are the user's, as `git commit` in this repository would pick
    /// them (their `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, then git config), else grove's. The
    /// commits already on `target_ref` whose trees are those of the steps, from the first
    /// on, are kept rather than written again: trees, not messages, because the commits
    /// a user's branch may already hold must be found again whatever a resumed run would
    /// now write in them.
    pub async fn squash(
        &self,
        base: CommitId,
        steps: &[SquashStep],
        target_ref: &str,
    ) -> Result<Squashed, AdvanceError> {
        let (author, committer) = self.squash_idents().await?;
        // Signatures are built only now: libgit2's are not `Send`, so none lives across an
        // await.
        let author = author.signature("AUTHOR")?;
        let committer = committer.signature("COMMITTER")?;
        let existing = self.ref_target(target_ref)?;
        let kept = match existing {
            None => Vec::new(),
            Some(_) => match self.first_parent_chain(target_ref, base) {
                Ok(chain) => chain,
                // Not a history of this base: written anew, the ref moved over it.
                Err(AdvanceError::NotOnFirstParentChain { .. }) => Vec::new(),
                Err(error) => return Err(error),
            },
        };
        let write_error =
            |source| GitError::write(format!("squashed history {target_ref}"), source);
        let repo = self.libgit();
        let tree_of = |commit: CommitId| {
            repo.find_commit(commit.oid())
                .and_then(|commit| commit.tree())
                .map_err(write_error)
        };
        let mut commits = Vec::with_capacity(steps.len());
        for (old, step) in kept.iter().zip(steps) {
            if tree_of(old.commit)?.id() != tree_of(step.after)?.id() {
                break;
            }
            commits.push(old.commit);
        }
        let reused = commits.len();
        let mut parent = commits.last().copied().unwrap_or(base);
        for step in &steps[reused..] {
            let tree = tree_of(step.after)?;
            let parent_commit = repo.find_commit(parent.oid()).map_err(write_error)?;
            let mut message = step.message.clone();
            if !message.ends_with('\n') {
                message.push('\n');
            }
            let commit = repo
                .commit(
                    None,
                    &author,
                    &committer,
                    &message,
                    &tree,
                    &[&parent_commit],
                )
                .map_err(write_error)?;
            parent = CommitId::from_oid(commit);
            commits.push(parent);
        }
        let tip = parent;
        let moved = match existing {
            Some(old) if old == tip => Ok(()),
            Some(old) => repo
                .reference_matching(target_ref, tip.oid(), true, old.oid(), "grove: squash")
                .map(drop),
            None => repo
                .reference(target_ref, tip.oid(), false, "grove: squash")
                .map(drop),
        };
        match moved {
            Ok(()) => Ok(Squashed {
                tip,
                commits,
                reused,
            }),
            Err(error)
                if matches!(
                    error.code(),
                    git2::ErrorCode::Modified | git2::ErrorCode::Locked | git2::ErrorCode::Exists
                ) =>
            {
                Err(AdvanceError::RefContended {
                    reference: target_ref.to_owned(),
                    actual: existing.map_or_else(|| "nothing".to_owned(), |c| c.to_string()),
                })
            }
            Err(source) => Err(super::commit::ref_update_error(&repo, target_ref, source).into()),
        }
    }

    /// Asks git for the author and committer of squashed commits ahead of the squash, so
    /// that the two `git var` processes are not on the way to the apply; a failure is
    /// left for the squash to meet.
    pub async fn prepare_squash(&self) {
        let _ = self.squash_idents().await;
    }

    /// The author and committer of squashed commits now: who they are is asked of git
    /// once (both at once); the date is `GIT_<role>_DATE` when it is set, as `git var`
    /// printed it, else the current time, as `git var` would print it now.
    async fn squash_idents(&self) -> Result<(Ident, Ident), GitError> {
        let (author, committer) = self
            .inner
            .squash_idents
            .get_or_try_init(|| async {
                tokio::try_join!(self.commit_ident("AUTHOR"), self.commit_ident("COMMITTER"))
            })
            .await?
            .clone();
        Ok((
            self.dated(author, "AUTHOR")?,
            self.dated(committer, "COMMITTER")?,
        ))
    }

    fn dated(&self, mut ident: Ident, role: &str) -> Result<Ident, GitError> {
        if self
            .inner
            .runner
            .env_var(&format!("GIT_{role}_DATE"))
            .is_none()
        {
            let now = git2::Signature::now(&ident.name, &ident.email)
                .map_err(|source| ident_error(role, source))?
                .when();
            (ident.seconds, ident.offset) = (now.seconds(), now.offset_minutes());
        }
        Ok(ident)
    }

    /// The author or committer (`role`: `AUTHOR`, `COMMITTER`) of a squashed commit: the
    /// user's ([`Repo::user_ident`]), else grove's identity with the date the user's git
    /// would write (`GIT_<role>_DATE`, else now).
    async fn commit_ident(&self, role: &str) -> Result<Ident, GitError> {
        if let Some(ident) = self.user_ident(role).await? {
            return Ok(ident);
        }
        let identity = self.inner.runner.identity();
        let call = self
            .git()
            .with_user_identity()
            .env(format!("GIT_{role}_NAME"), &identity.name)
            .env(format!("GIT_{role}_EMAIL"), &identity.email);
        let ident = call
            .arg("var")
            .arg(format!("GIT_{role}_IDENT"))
            .text()
            .await?;
        parse_ident(&ident).ok_or_else(|| unparsed(role, &ident))
    }

    /// The author or committer (`role`: `AUTHOR`, `COMMITTER`) the user's own `git
    /// commit` would write in this repository: `GIT_<role>_NAME`/`_EMAIL`/`_DATE` of the
    /// user's environment, then `author.*`/`committer.*` and `user.*` of the repository's,
    /// the user's and the system's config. `None` when nothing names one (git would guess
    /// from the host, which is not the user's choice: grove's identity is used instead).
    async fn user_ident(&self, role: &str) -> Result<Option<Ident>, GitError> {
        let output = self
            .git()
            .with_user_identity()
            .args(["-c", "user.useConfigOnly=true", "var"])
            .arg(format!("GIT_{role}_IDENT"))
            .allow_codes(&[128])
            .run()
            .await?;
        if output.code != 0 {
            return Ok(None);
        }
        let ident = output.text();
        parse_ident(&ident)
            .map(Some)
            .ok_or_else(|| unparsed(role, &ident))
    }
}

fn unparsed(role: &str, ident: &str) -> GitError {
    GitError::Parse {
        op: format!("var GIT_{role}_IDENT"),
        detail: format!("expected `Name <email> seconds +zone`, got {ident:?}"),
    }
}

/// An author or committer as `git var` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ident {
    name: String,
    email: String,
    seconds: i64,
    /// The UTC offset in minutes.
    offset: i32,
}

impl Ident {
    fn signature(&self, role: &str) -> Result<git2::Signature<'static>, GitError> {
        let time = git2::Time::new(self.seconds, self.offset);
        git2::Signature::new(&self.name, &self.email, &time)
            .map_err(|source| ident_error(role, source))
    }
}

fn ident_error(role: &str, source: git2::Error) -> GitError {
    GitError::Write {
        what: format!("the user's {} signature", role.to_ascii_lowercase()),
        source,
    }
}

/// An ident line as `git var` prints it: `Name <email> 1767225600 +0000`.
fn parse_ident(text: &str) -> Option<Ident> {
    let (name, rest) = text.trim().split_once('<')?;
    let (email, date) = rest.rsplit_once('>')?;
    let (seconds, offset) = parse_git_date(date)?;
    Some(Ident {
        name: name.trim().to_owned(),
        email: email.trim().to_owned(),
        seconds,
        offset,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::{Ident, parse_ident};

    #[test]
    fn ident_lines_parse_as_git_var_prints_them() {
        assert_eq!(
            parse_ident("Ursula Q. User <u@example.org> 1767225600 +0130"),
            Some(Ident {
                name: "Ursula Q. User".to_owned(),
                email: "u@example.org".to_owned(),
                seconds: 1_767_225_600,
                offset: 90
            })
        );
        assert_eq!(parse_ident("no email 1767225600 +0000"), None);
        assert_eq!(parse_ident("A <a@b> yesterday"), None);
    }
}
