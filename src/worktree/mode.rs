//! How a run's worktrees are made: the `[worktree] mode` setting.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a run's worktrees are made (`[worktree] mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorktreeMode {
    /// Copy-on-write where this system allows it, else git worktrees (said in one line).
    #[default]
    Auto,
    /// Copy-on-write trees, or the run does not start.
    Overlay,
    /// `git worktree add`, one full checkout per worker.
    Git,
}

impl WorktreeMode {
    /// `auto`, `overlay` or `git`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Overlay => "overlay",
            Self::Git => "git",
        }
    }
}

impl fmt::Display for WorktreeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorktreeMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(Self::Auto),
            "overlay" => Ok(Self::Overlay),
            "git" => Ok(Self::Git),
            other => Err(format!(
                "`{other}` is not a worktree mode; use `overlay`, `git` or `auto`"
            )),
        }
    }
}
