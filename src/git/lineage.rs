//! What grove knows of the history of the result it merges onto, so that a merge of a
//! subtask's branch finds its merge base without walking the commit graph.
//!
//! On a run's result every merge adds commits (the merge and the branch's own), so a
//! walk from its tip to a merge base goes through all the merges before it: 0.3 ms at
//! the first of 32 merges, 1.5 ms at the last, one after another while the lead waits.
//! A [`Lineage`] holds, for one commit `tip`, every commit reachable from it and not
//! from a `base` it descends from: a fact about immutable commits, so it stays true
//! whatever happens to the refs. A branch whose own commits are a line (one parent
//! each) reaching that set forks where it reaches it, and nowhere else: see
//! [`Lineage::merge_base`]. Anything else is left to libgit2's walk.

use std::collections::HashSet;

use git2::Oid;

use super::names::CommitId;

/// How many of a branch's own commits are followed back before the walk is left to
/// libgit2 (a subtask's branch holds a few checkpoints).
const CHAIN_LIMIT: usize = 256;

/// How a branch stands to the target it is merged onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MergeBase {
    /// The branch is the target or one of its ancestors: it is merged already.
    Branch,
    /// The target is an ancestor of the branch: the merge is the branch's tree.
    Target,
    /// The two forked from this one commit.
    One(CommitId),
    /// Several merge bases, or none: only `git merge-tree` knows.
    Other,
}

/// The history of one commit beyond a commit it descends from.
#[derive(Debug, Clone)]
pub(super) struct Lineage {
    tip: Oid,
    base: Oid,
    /// Every commit reachable from `tip` and not from `base`; each descends from `base`.
    beyond: HashSet<Oid>,
}

/// What [`Lineage::merge_base`] found: how the branch stands, and its own commits (the
/// ones beyond the fork, newest first) that a merge of it adds to the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fork {
    pub(super) base: MergeBase,
    chain: Vec<Oid>,
}

impl Lineage {
    /// The lineage of `base` itself: nothing beyond it.
    pub(super) fn at(base: Oid) -> Self {
        Self {
            tip: base,
            base,
            beyond: HashSet::new(),
        }
    }

    /// The commit whose history this is.
    pub(super) fn tip(&self) -> Oid {
        self.tip
    }

    /// How `theirs` stands to the tip, when that is certain from what is known: `None`
    /// when it takes a walk (a merge commit or a root among the branch's own commits, or
    /// more of them than [`CHAIN_LIMIT`]).
    ///
    /// Why the fork is the one merge base: `theirs` reaches a known commit `F` through
    /// a line of commits `C` that are neither beyond `base` in the tip's history nor
    /// `base` itself. Each `C` descends from `F`, which descends from `base`, so no `C`
    /// is an ancestor of `base` either: none is in the tip's history. The commits both
    /// reach are then exactly `F`'s history, whose one best element is `F`.
    pub(super) fn merge_base(
        &self,
        repo: &git2::Repository,
        theirs: Oid,
    ) -> Result<Option<Fork>, git2::Error> {
        if self.known(theirs) {
            return Ok(Some(Fork {
                base: MergeBase::Branch,
                chain: Vec::new(),
            }));
        }
        let mut chain = vec![theirs];
        let mut at = theirs;
        while chain.len() <= CHAIN_LIMIT {
            let commit = repo.find_commit(at)?;
            if commit.parent_count() != 1 {
                return Ok(None);
            }
            let parent = commit.parent_id(0)?;
            if self.known(parent) {
                let base = if parent == self.tip {
                    MergeBase::Target
                } else {
                    MergeBase::One(CommitId::from_oid(parent))
                };
                return Ok(Some(Fork { base, chain }));
            }
            chain.push(parent);
            at = parent;
        }
        Ok(None)
    }

    /// The lineage of `merge`, a commit whose parents are the tip and the branch that
    /// `fork` was found for.
    pub(super) fn merged(&mut self, merge: Oid, fork: Fork) {
        self.beyond.extend(fork.chain);
        self.beyond.insert(merge);
        self.tip = merge;
    }

    /// True when `commit` is in the tip's history beyond (or at) the base; false says
    /// nothing (it may be an ancestor of the base).
    pub(super) fn known(&self, commit: Oid) -> bool {
        commit == self.base || self.beyond.contains(&commit)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A repository in a temporary directory whose commits are written in process.
    struct Graph {
        _dir: tempfile::TempDir,
        repo: git2::Repository,
        n: u32,
    }

    impl Graph {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let repo = git2::Repository::init(dir.path()).unwrap();
            Self {
                _dir: dir,
                repo,
                n: 0,
            }
        }

        /// A commit with `parents` (one file of its own), all at the same second, as
        /// grove's merges within one second are.
        fn commit(&mut self, parents: &[Oid]) -> Oid {
            self.n += 1;
            let blob = self.repo.blob(format!("{}\n", self.n).as_bytes()).unwrap();
            let mut tree = self.repo.treebuilder(None).unwrap();
            tree.insert(format!("f{}", self.n), blob, 0o100_644)
                .unwrap();
            let tree = self.repo.find_tree(tree.write().unwrap()).unwrap();
            let when = git2::Signature::new("G", "g@example.org", &git2::Time::new(1, 0)).unwrap();
            let parents: Vec<git2::Commit<'_>> = parents
                .iter()
                .map(|p| self.repo.find_commit(*p).unwrap())
                .collect();
            let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
            self.repo
                .commit(None, &when, &when, "c", &tree, &parents)
                .unwrap()
        }

        /// A line of `n` commits on top of `from`; its newest.
        fn line(&mut self, from: Oid, n: usize) -> Oid {
            (0..n).fold(from, |at, _| self.commit(&[at]))
        }

        /// What libgit2's walk says, in the same terms.
        fn walked(&self, ours: Oid, theirs: Oid) -> MergeBase {
            match self.repo.merge_bases(ours, theirs) {
                Err(_) => MergeBase::Other,
                Ok(bases) => match bases.iter().as_slice() {
                    [base] if *base == theirs => MergeBase::Branch,
                    [base] if *base == ours => MergeBase::Target,
                    [base] => MergeBase::One(CommitId::from_oid(*base)),
                    _ => MergeBase::Other,
                },
            }
        }

        /// Merges `theirs` onto the lineage's tip as grove does (a two-parent commit),
        /// asserting that the lineage agrees with the walk.
        fn merge(&mut self, lineage: &mut Lineage, theirs: Oid) -> MergeBase {
            let fork = lineage
                .merge_base(&self.repo, theirs)
                .unwrap()
                .expect("a line of commits from the lineage needs no walk");
            assert_eq!(
                fork.base,
                self.walked(lineage.tip(), theirs),
                "the lineage finds the merge base libgit2's walk finds"
            );
            let base = fork.base;
            if base != MergeBase::Branch {
                let merge = self.commit(&[lineage.tip(), theirs]);
                lineage.merged(merge, fork);
            }
            base
        }
    }

    #[test]
    fn branches_forked_from_the_base_or_from_the_result_find_the_merge_base_the_walk_finds() {
        let mut graph = Graph::new();
        let root = graph.commit(&[]);
        let base = graph.line(root, 2);
        let mut lineage = Lineage::at(base);
        let s1 = graph.line(base, 3);
        let s2 = graph.line(base, 1);

        assert_eq!(graph.merge(&mut lineage, s1), MergeBase::Target);
        assert_eq!(
            graph.merge(&mut lineage, s2),
            MergeBase::One(CommitId::from_oid(base))
        );
        // One that waited starts from the result as it was after S1's merge.
        let after_s1 = graph
            .repo
            .find_commit(lineage.tip())
            .unwrap()
            .parent_id(0)
            .unwrap();
        let s3 = graph.line(after_s1, 2);
        assert_eq!(
            graph.merge(&mut lineage, s3),
            MergeBase::One(CommitId::from_oid(after_s1))
        );
        assert_eq!(
            graph.merge(&mut lineage, s2),
            MergeBase::Branch,
            "a branch merged before is merged already"
        );
        let inside_s1 = graph.repo.find_commit(s1).unwrap().parent_id(0).unwrap();
        assert_eq!(graph.merge(&mut lineage, inside_s1), MergeBase::Branch);
        assert_eq!(graph.merge(&mut lineage, base), MergeBase::Branch);
    }

    #[test]
    fn a_merge_commit_a_root_or_a_branch_below_the_base_among_its_commits_takes_the_walk() {
        let mut graph = Graph::new();
        let root = graph.commit(&[]);
        let base = graph.line(root, 2);
        let lineage = Lineage::at(base);
        let side = graph.line(base, 1);
        let other = graph.line(base, 1);
        let merged_by_the_worker = graph.commit(&[side, other]);
        let on_top = graph.line(merged_by_the_worker, 1);
        let unrelated = graph.commit(&[]);
        let below = graph.line(root, 1);
        for theirs in [on_top, unrelated, below, root] {
            assert_eq!(
                lineage.merge_base(&graph.repo, theirs).unwrap(),
                None,
                "only a line of single-parent commits reaching the lineage is read from it"
            );
        }
        let long = graph.line(base, CHAIN_LIMIT + 1);
        assert_eq!(lineage.merge_base(&graph.repo, long).unwrap(), None);
        let longest = graph.line(base, CHAIN_LIMIT);
        assert!(lineage.merge_base(&graph.repo, longest).unwrap().is_some());
    }
}
