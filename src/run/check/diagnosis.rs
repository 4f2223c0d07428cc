//! Why a check that fails before any change most likely fails: the sandbox denied a
//! path, a module or a command is not found, or the network is not there.
//!
//! This file owns reading a red check's output for those causes, and naming the key
//! that changes each (`[worktree] share`, `[sandbox] allow_read`, `[check] network`). It
//! guesses from text and says so ("likely"); it must never present a guess as the
//! check's verdict, which is the exit status alone.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use crate::tools::sandbox::denied_store;

/// What the diagnosis knows of the run's sandbox, to name the key that changes a cause.
#[derive(Debug, Clone, Default)]
pub(crate) struct SandboxFacts {
    /// The user's checkout, hidden but for its shared directories.
    pub(crate) checkout: Option<PathBuf>,
    /// Where the run's worktrees are (`<dir>/<tree>/…`).
    pub(crate) worktrees: Option<PathBuf>,
    /// The home whose secret stores are hidden.
    pub(crate) home: Option<PathBuf>,
    /// The shared directories (relative to the checkout).
    pub(crate) shares: Vec<String>,
    /// `[sandbox] deny_read`, expanded.
    pub(crate) denied: Vec<PathBuf>,
    /// Whether the check has the network.
    pub(crate) network: bool,
}

/// A likely cause of a red check, found in its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A path the sandbox hides or keeps read-only, with the advice for it.
    Denied { path: String, advice: String },
    /// A path that exists on this machine but not in the command's view.
    Absent { path: String, advice: String },
    /// A module (Python, Node) or crate the check's program could not find.
    ModuleNotFound { module: String },
    /// A program the shell could not find.
    CommandNotFound { command: String },
    /// A connection, a name lookup or a download the sandbox's network refused.
    Network { evidence: String },
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Denied { path, advice } => {
                write!(f, "a path the sandbox denied: `{path}`; {advice}")
            }
            Self::Absent { path, advice } => write!(
                f,
                "a path that exists here but not in the sandbox's view: `{path}`; {advice}"
            ),
            Self::ModuleNotFound { module } => write!(
                f,
                "a module not found: `{module}`. Commands see your checkout's ignored files \
                 only through `[worktree] share` (`.venv`, `venv` and `node_modules` are \
                 shared when they exist and no setup command is set), and installs under a \
                 hidden path (see `[sandbox] allow_read`) are not there; a project installed \
                 elsewhere needs its environment shared, or a `[worktree] setup` that makes it"
            ),
            Self::CommandNotFound { command } => write!(
                f,
                "a command not found: `{command}`. Commands get your PATH, but not a \
                 program under a hidden path, nor one in an unshared ignored directory of \
                 your checkout"
            ),
            Self::Network { evidence } => write!(
                f,
                "a network refusal (`{evidence}`): commands have no network, only a \
                 loopback of their own; if the check needs the network, set `[check] \
                 network = true` and trust it with `grove trust`"
            ),
        }
    }
}

static PERMISSION_DENIED: LazyLock<Regex> = LazyLock::new(|| {
    // `PermissionError: [Errno 13] Permission denied: '/x'`, `cat: /x: Permission
    // denied`, `OSError: [Errno 30] Read-only file system: '/x'`, `EACCES: permission
    // denied, open '/x'`.
    Regex::new(
        r#"(?:\[Errno (?:13|30)\] [A-Za-z -]+: '([^']+)'|(/[^\s:'"]+): (?:Permission denied|Read-only file system)|(?:EACCES|EROFS): [a-z -]+, \w+ '([^']+)')"#,
    )
    .unwrap_or_else(|_| unreachable!("a fixed pattern"))
});

static NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    // `bash: line 1: /x: No such file or directory`, `FileNotFoundError: [Errno 2] No
    // such file or directory: '/x'`, `ENOENT: no such file or directory, open '/x'`.
    Regex::new(
        r#"(?:\[Errno 2\] No such file or directory: '(/[^']+)'|(/[^\s:'"]+): No such file or directory|ENOENT: no such file or directory, \w+ '(/[^']+)')"#,
    )
    .unwrap_or_else(|_| unreachable!("a fixed pattern"))
});

static MODULE_NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?:No module named '?([\w.]+)'?|Cannot find module '([^']+)'|can't find crate for `(\w+)`)"#,
    )
    .unwrap_or_else(|_| unreachable!("a fixed pattern"))
});

static COMMAND_NOT_FOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:(?:^|\s)([\w./+-]+): (?:command )?not found|exec: ([\w./+-]+): not found)")
        .unwrap_or_else(|_| unreachable!("a fixed pattern"))
});

/// Words a refused network leaves in a program's output.
const NETWORK_EVIDENCE: &[&str] = &[
    "Temporary failure in name resolution",
    "Name or service not known",
    "Could not resolve host",
    "getaddrinfo ENOTFOUND",
    "getaddrinfo EAI_AGAIN",
    "Network is unreachable",
    "ENETUNREACH",
    "nodename nor servname",
    "Failed to establish a new connection",
    "Connection refused",
];

/// The likely cause of a red check whose output ends with `tail`, if one is recognised.
pub(crate) fn diagnose(tail: &str, facts: &SandboxFacts) -> Option<Cause> {
    if let Some(path) = PERMISSION_DENIED
        .captures_iter(tail)
        .filter_map(|found| found.iter().skip(1).flatten().next())
        .map(|path| path.as_str().to_owned())
        .next()
    {
        let advice = denied_advice(Path::new(&path), facts);
        return Some(Cause::Denied { path, advice });
    }
    // Missing for the command, there for grove: the view does not show it.
    if let Some(path) = NOT_FOUND
        .captures_iter(tail)
        .filter_map(|found| found.iter().skip(1).flatten().next())
        .map(|path| path.as_str().to_owned())
        .find(|path| std::fs::symlink_metadata(path).is_ok())
    {
        let advice = absent_advice(Path::new(&path), facts);
        return Some(Cause::Absent { path, advice });
    }
    if let Some(module) = MODULE_NOT_FOUND
        .captures_iter(tail)
        .filter_map(|found| found.iter().skip(1).flatten().next())
        .map(|module| module.as_str().to_owned())
        .next()
    {
        return Some(Cause::ModuleNotFound { module });
    }
    if let Some(command) = tail.lines().find_map(|line| {
        let found = COMMAND_NOT_FOUND.captures(line)?;
        found
            .iter()
            .skip(1)
            .flatten()
            .next()
            .map(|c| c.as_str().to_owned())
    }) {
        return Some(Cause::CommandNotFound { command });
    }
    if !facts.network
        && let Some(evidence) = NETWORK_EVIDENCE.iter().find(|words| tail.contains(**words))
    {
        return Some(Cause::Network {
            evidence: (*evidence).to_owned(),
        });
    }
    None
}

/// What to change for a denied `path`: the key that opens it, or why it stays shut.
fn denied_advice(path: &Path, facts: &SandboxFacts) -> String {
    let in_tree = facts
        .worktrees
        .as_ref()
        .and_then(|dir| path.strip_prefix(dir).ok())
        .and_then(|inside| inside.components().nth(1))
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .filter(|top| facts.shares.contains(top));
    if let Some(top) = in_tree {
        return shared_advice(&top);
    }
    if let Some((checkout, top)) = in_checkout(path, facts) {
        if facts.shares.contains(&top) {
            return shared_advice(&top);
        }
        return format!(
            "it is in your checkout ({}), which commands do not see (its `.env` files hold \
             keys): if `{top}` holds the project's environment, list it in `[worktree] \
             share = [\"{top}\"]`; if the check names your checkout by its path, name the \
             file relative to the repository instead",
            checkout.display()
        );
    }
    if let Some(denied) = facts.denied.iter().find(|denied| path.starts_with(denied)) {
        return format!("`{}` is in `[sandbox] deny_read`", denied.display());
    }
    if let Some(home) = &facts.home
        && let Some(store) = denied_store(home, path)
    {
        return format!(
            "`{}` is a store of secrets the sandbox hides; `[sandbox] allow_read = [\"{}\"]` \
             opens it (said loudly, and journaled)",
            store.display(),
            store.display()
        );
    }
    "commands write only in their worktree and its TMPDIR; point the tool's cache or \
     output there (for example `XDG_CACHE_HOME=$TMPDIR`)"
        .to_owned()
}

/// What to change for a `path` the command's view does not show.
fn absent_advice(path: &Path, facts: &SandboxFacts) -> String {
    if let Some((checkout, top)) = in_checkout(path, facts) {
        return format!(
            "it is in your checkout ({}), whose path shows commands their worktree, \
             without your checkout's ignored files (its `.env` files hold keys): if `{top}` \
             holds the project's environment, list it in `[worktree] share = [\"{top}\"]`",
            checkout.display()
        );
    }
    if let Some(denied) = facts.denied.iter().find(|denied| path.starts_with(denied)) {
        return format!("`{}` is in `[sandbox] deny_read`", denied.display());
    }
    format!(
        "commands see only what they are granted (the system, their worktree, the \
         toolchains and environments grove finds: docs/sandbox.md); `[sandbox] allow_read \
         = [\"{}\"]` in your own ~/.config/grove/config.toml grants it",
        path.display()
    )
}

/// The user's checkout and the top-level entry of it that `path` lies in, if it does.
fn in_checkout<'a>(path: &Path, facts: &'a SandboxFacts) -> Option<(&'a Path, String)> {
    let checkout = facts.checkout.as_deref()?;
    let inside = path.strip_prefix(checkout).ok()?;
    let top = inside
        .components()
        .next()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    Some((checkout, top))
}

fn shared_advice(share: &str) -> String {
    format!(
        "`{share}` is shared read-only into every worktree; a command that writes there \
         (an install, a cache) must write in the worktree or its TMPDIR"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn facts() -> SandboxFacts {
        SandboxFacts {
            checkout: Some(PathBuf::from("/src/click")),
            worktrees: Some(PathBuf::from("/cache/grove/click-1/run")),
            home: Some(PathBuf::from("/home/u")),
            shares: vec!["node_modules".into()],
            denied: vec![PathBuf::from("/srv/private")],
            network: false,
        }
    }

    #[test]
    fn each_cause_is_found_in_the_output_and_names_the_key_that_changes_it() {
        let cases = [
            (
                "PermissionError: [Errno 13] Permission denied: '/src/click/.venv/pyvenv.cfg'",
                "a path the sandbox denied: `/src/click/.venv/pyvenv.cfg`; it is in your \
                 checkout (/src/click), which commands do not see (its `.env` files hold \
                 keys): if `.venv` holds the project's environment, list it in `[worktree] \
                 share = [\".venv\"]`; if the check names your checkout by its path, name \
                 the file relative to the repository instead",
            ),
            (
                "cat: /home/u/.aws/config: Permission denied",
                "a path the sandbox denied: `/home/u/.aws/config`; `/home/u/.aws` is a store \
                 of secrets the sandbox hides; `[sandbox] allow_read = [\"/home/u/.aws\"]` \
                 opens it (said loudly, and journaled)",
            ),
            (
                "OSError: [Errno 30] Read-only file system: \
                 '/cache/grove/click-1/run/3/node_modules/.cache'",
                "a path the sandbox denied: `/cache/grove/click-1/run/3/node_modules/.cache`; \
                 `node_modules` \
                 is shared read-only into every worktree; a command that writes there (an \
                 install, a cache) must write in the worktree or its TMPDIR",
            ),
        ];
        for (output, said) in cases {
            assert_eq!(
                diagnose(output, &facts()).map(|cause| cause.to_string()),
                Some(said.to_owned()),
                "the denied path and its key are named for {output:?}"
            );
        }
        assert_eq!(
            diagnose("E   ModuleNotFoundError: No module named 'click'", &facts()),
            Some(Cause::ModuleNotFound {
                module: "click".into()
            })
        );
        assert_eq!(
            diagnose(
                "Error: Cannot find module 'is-number'\nRequire stack:",
                &facts()
            ),
            Some(Cause::ModuleNotFound {
                module: "is-number".into()
            })
        );
        assert_eq!(
            diagnose("bash: line 1: pytest: command not found", &facts()),
            Some(Cause::CommandNotFound {
                command: "pytest".into()
            })
        );
        assert_eq!(
            diagnose(
                "urllib3 ... Failed to establish a new connection: [Errno -3] Temporary \
                 failure in name resolution",
                &facts()
            ),
            Some(Cause::Network {
                evidence: "Temporary failure in name resolution".into()
            })
        );
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("venv/bin/python");
        std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
        std::fs::write(&elsewhere, "").unwrap();
        assert_eq!(
            diagnose(
                &format!(
                    "/bin/bash: line 1: {0}: No such file or directory\n\
                     /bin/bash: line 1: /no/such/thing: No such file or directory",
                    elsewhere.display()
                ),
                &facts()
            )
            .map(|cause| cause.to_string()),
            Some(format!(
                "a path that exists here but not in the sandbox's view: `{0}`; commands \
                 see only what they are granted (the system, their worktree, the \
                 toolchains and environments grove finds: docs/sandbox.md); `[sandbox] \
                 allow_read = [\"{0}\"]` in your own ~/.config/grove/config.toml grants it",
                elsewhere.display()
            )),
            "a missing path that exists for grove is the view's doing, and the key is named"
        );
        assert_eq!(
            diagnose("FAILED test_a.py::test_x - assert 1 == 2", &facts()),
            None,
            "a plain test failure has no environment cause"
        );
    }
}
