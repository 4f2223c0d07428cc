//! What a repository's `.grove/config.toml` may ask for that widens what workers'
//! commands see: `[sandbox] allow_read` (paths of the machine, such as `~/.ssh`),
//! `[worktree] copy` (untracked files of the checkout, such as `.env.local`), an
//! explicit `[worktree] share` list (ignored directories of the checkout) and `[workers]
//! pass_env` (the user's variables handed to external worker CLIs). Each takes
//! effect only once `grove trust` recorded its exact value in that repository
//! (`trust.rs`): a worker may have written the file, and a reviewer approved it.
//!
//! This file owns which keys widen and how a value is shown and recorded. It must never
//! decide trust itself, nor count as a widening what narrows (`deny_read`, an empty
//! list), what the user set themselves (a flag), or what grove finds on its own (the
//! environments shared when `share` is unset).

use std::fmt;

use crate::settings::config::RunSettings;
use crate::settings::options::RunOptions;

/// A key of `.grove/config.toml` whose value widens what workers' commands see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideningKey {
    /// `[sandbox] allow_read`.
    AllowRead,
    /// `[worktree] copy`.
    Copy,
    /// `[worktree] share`.
    Share,
    /// `[workers] pass_env`.
    PassEnv,
}

impl WideningKey {
    /// The key as errors and records name it: `sandbox.allow_read`.
    pub fn name(self) -> &'static str {
        match self {
            WideningKey::AllowRead => "sandbox.allow_read",
            WideningKey::Copy => "worktree.copy",
            WideningKey::Share => "worktree.share",
            WideningKey::PassEnv => "workers.pass_env",
        }
    }

    /// What the value lets workers do, for the refusal and `grove trust`.
    pub fn consequence(self) -> &'static str {
        match self {
            WideningKey::AllowRead => {
                "lets every worker's commands read these paths of your machine"
            }
            WideningKey::Copy => {
                "copies these untracked files of your checkout into every worktree, where \
                 workers and the model read them"
            }
            WideningKey::Share => {
                "shows these ignored directories of your checkout to every worker's commands"
            }
            WideningKey::PassEnv => {
                "hands these variables of your environment (an API key, a token) to every \
                 external worker CLI, which runs with your rights"
            }
        }
    }
}

/// One widening a repository's config asks for: a key and its whole value, trusted (or
/// not) as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widening {
    pub key: WideningKey,
    /// The paths as the config lists them, normalised as the run uses them.
    pub paths: Vec<String>,
}

impl Widening {
    /// The value as TOML writes it (`["~/.ssh"]`): what the trust record keeps and the
    /// messages show.
    pub fn value(&self) -> String {
        toml::Value::Array(
            self.paths
                .iter()
                .map(|path| toml::Value::String(path.clone()))
                .collect(),
        )
        .to_string()
    }
}

impl fmt::Display for Widening {
    /// `sandbox.allow_read = ["~/.ssh"]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}", self.key.name(), self.value())
    }
}

/// The widenings `file` (a repository's config) asks for that take effect under `flags`:
/// a key the flags set is the user's own and beats the file's.
pub fn file_widenings(file: &RunSettings, flags: &RunSettings) -> Vec<Widening> {
    [
        (WideningKey::AllowRead, &file.allow_read, &flags.allow_read),
        (WideningKey::Copy, &file.copy, &flags.copy),
        (WideningKey::Share, &file.share, &flags.share),
        (WideningKey::PassEnv, &file.pass_env, &flags.pass_env),
    ]
    .into_iter()
    .filter(|(_, _, flag)| flag.is_none())
    .filter_map(|(key, paths, _)| widening(key, paths.as_deref()?))
    .collect()
}

/// The widenings the options of a journaled run hold, for its resume: everything they
/// list but the shares grove finds on its own (`found_by_grove`), which a run journals
/// as decided.
pub fn journaled_widenings(
    options: &RunOptions,
    found_by_grove: impl Fn(&str) -> bool,
) -> Vec<Widening> {
    let share = options
        .worktree_setup
        .share
        .as_deref()
        .filter(|shares| !shares.iter().all(|share| found_by_grove(share)));
    [
        (
            WideningKey::AllowRead,
            Some(options.sandbox_paths.allow_read.as_slice()),
        ),
        (
            WideningKey::Copy,
            Some(options.worktree_setup.copy.as_slice()),
        ),
        (WideningKey::Share, share),
        (
            WideningKey::PassEnv,
            Some(options.worker_pass_env.as_slice()),
        ),
    ]
    .into_iter()
    .filter_map(|(key, paths)| widening(key, paths?))
    .collect()
}

/// `key` with `paths`, unless the list is empty (it opens nothing).
fn widening(key: WideningKey, paths: &[String]) -> Option<Widening> {
    (!paths.is_empty()).then(|| Widening {
        key,
        paths: paths.to_vec(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::settings::options::{SandboxPaths, WorktreeSetup};
    use pretty_assertions::assert_eq;

    fn paths(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|path| (*path).to_owned()).collect())
    }

    #[test]
    fn only_a_non_empty_list_the_flags_leave_to_the_file_is_a_widening() {
        let file = RunSettings {
            allow_read: paths(&["~/.ssh", "/etc/ssl/private"]),
            deny_read: paths(&["~/private"]),
            copy: paths(&[".env.local"]),
            share: paths(&[]),
            pass_env: paths(&["AWS_SECRET_ACCESS_KEY"]),
            ..RunSettings::default()
        };
        assert_eq!(
            file_widenings(&file, &RunSettings::default())
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            [
                r#"sandbox.allow_read = ["~/.ssh", "/etc/ssl/private"]"#,
                r#"worktree.copy = [".env.local"]"#,
                r#"workers.pass_env = ["AWS_SECRET_ACCESS_KEY"]"#,
            ],
            "allow_read, copy and pass_env widen; deny_read and an empty share do not"
        );
        let flags = RunSettings {
            copy: paths(&[]),
            ..RunSettings::default()
        };
        assert_eq!(
            file_widenings(&file, &flags)
                .iter()
                .map(|widening| widening.key)
                .collect::<Vec<_>>(),
            [WideningKey::AllowRead, WideningKey::PassEnv],
            "a key the user's flags set is not the repository's to widen"
        );
    }

    #[test]
    fn a_journaled_share_grove_found_itself_needs_no_trust_and_a_listed_one_does() {
        let mut options = RunOptions::new("t");
        options.worktree_setup = WorktreeSetup {
            share: paths(&[".venv", "node_modules"]),
            copy: vec![".env".into()],
            ..WorktreeSetup::default()
        };
        options.sandbox_paths = SandboxPaths {
            deny_read: vec!["~/private".into()],
            allow_read: Vec::new(),
        };
        let found = |share: &str| [".venv", "node_modules"].contains(&share);
        assert_eq!(
            journaled_widenings(&options, found),
            [Widening {
                key: WideningKey::Copy,
                paths: vec![".env".into()],
            }],
            "shares grove would find itself are not the repository's widening"
        );
        options.worktree_setup.share = paths(&[".venv", "secrets"]);
        assert_eq!(
            journaled_widenings(&options, found)
                .into_iter()
                .map(|widening| widening.to_string())
                .collect::<Vec<_>>(),
            [
                r#"worktree.copy = [".env"]"#,
                r#"worktree.share = [".venv", "secrets"]"#
            ],
            "a share list holding a directory grove would not find is the repository's, \
             trusted as a whole"
        );
    }
}
