//! The user's project as a sandboxed command sees it: its environment shared into every
//! tree.
//!
//! This file owns the facts about the user's checkout that the view needs: where it is
//! (its path shows the tree, so an editable install's `.pth` file or finder reaches the
//! tree's code), where its git data is, and which of its ignored directories hold the
//! project's environment (`.venv`, `node_modules`), bound read-only at the same place in
//! every tree. It must never make anything of the user's checkout writable.

use std::path::{Path, PathBuf};

/// The user's project, as the sandbox needs to know it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectView {
    /// The user's checkout (work tree): its path shows the tree; nothing of it is seen
    /// but for `share`.
    pub checkout: Option<PathBuf>,
    /// The repository's common dir: grove's record of which admin dir is whose.
    pub common_dir: Option<PathBuf>,
    /// Directories of the checkout (relative paths) every tree sees read-only.
    pub share: Vec<PathBuf>,
}

impl ProjectView {
    /// Each shared directory as `(the user's copy, the same path in the tree at
    /// `tree`)`, for those that exist in the checkout.
    pub(super) fn shared_binds(&self, tree: &Path) -> Vec<(PathBuf, PathBuf)> {
        let Some(checkout) = &self.checkout else {
            return Vec::new();
        };
        self.share
            .iter()
            .filter_map(|relative| {
                let source = checkout.join(relative).canonicalize().ok()?;
                source.is_dir().then(|| (source, tree.join(relative)))
            })
            .collect()
    }
}
