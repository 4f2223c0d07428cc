//! Remote hosts (`[remote.NAME]`), read from the user's own grove configuration,
//! `$XDG_CONFIG_HOME/grove/config.toml` (default `~/.config/grove/config.toml`).
//!
//! This file owns where hosts come from and which of them a run uses. A launcher runs a
//! command on this machine with the user's rights and credentials (their ssh keys, their
//! kubeconfig), so a repository can never define one: `[remote]` in `.grove/config.toml`
//! is refused, and only hosts the user wrote are ever launched.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::remote::RemoteHost;
use crate::settings::config::{ConfigError, parse_error};
use crate::settings::values::ValueProblem;

/// The most workers one host may take at once.
pub const MAX_SLOTS: u64 = 256;

/// Why the hosts a run asked for cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RemoteChoiceError {
    /// The user's configuration could not be read. Not retried.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Neither `XDG_CONFIG_HOME` nor `HOME` is set (absolute): there is no user
    /// configuration to read hosts from. Not retried.
    #[error(
        "--remote needs your grove configuration, but neither XDG_CONFIG_HOME nor HOME \
         names a directory"
    )]
    NoConfigHome,
    /// A name no `[remote.NAME]` table defines. Not retried.
    #[error(
        "no remote host `{name}` in {}; {}",
        path.display(),
        if known.is_empty() {
            "it defines none: add a `[remote.NAME]` table with `launch = \"ssh HOST\"`".to_owned()
        } else {
            format!("it defines: {}", known.join(", "))
        }
    )]
    Unknown {
        name: String,
        path: PathBuf,
        known: Vec<String>,
    },
}

#[derive(Debug, Default, Deserialize)]
struct RawUserFile {
    #[serde(default)]
    remote: BTreeMap<String, RawHost>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    launch: String,
    #[serde(default)]
    program: Option<String>,
    #[serde(default)]
    slots: Option<u64>,
    #[serde(default)]
    timeout_s: Option<u64>,
    #[serde(default)]
    ship: Option<bool>,
}

/// The user's grove configuration file, as `env` places it.
pub fn user_config_path(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let var = |name: &str| {
        env.iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| PathBuf::from(value))
            .filter(|path| path.is_absolute())
    };
    var("XDG_CONFIG_HOME")
        .or_else(|| var("HOME").map(|home| home.join(".config")))
        .map(|config| config.join("grove").join("config.toml"))
}

/// The hosts `path` defines, by name; none when there is no such file.
pub fn load_hosts(path: &Path) -> Result<BTreeMap<String, RemoteHost>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let raw: RawUserFile =
        toml::from_str(&text).map_err(|error| parse_error(path, &text, &error))?;
    let mut hosts = BTreeMap::new();
    for (name, host) in raw.remote {
        let invalid = |key: &str, problem| parse_error_at(path, &text, &name, key, problem);
        if host.launch.trim().is_empty() {
            return Err(invalid(
                "launch",
                ValueProblem::MissingKey { key: "launch" },
            ));
        }
        let slots = host.slots.unwrap_or(1);
        if !(1..=MAX_SLOTS).contains(&slots) {
            return Err(invalid(
                "slots",
                ValueProblem::OutOfRange {
                    min: 1,
                    max: MAX_SLOTS,
                    got: slots.to_string(),
                },
            ));
        }
        let timeout = host
            .timeout_s
            .unwrap_or(RemoteHost::DEFAULT_TIMEOUT.as_secs());
        if !(1..=3600).contains(&timeout) {
            return Err(invalid(
                "timeout_s",
                ValueProblem::OutOfRange {
                    min: 1,
                    max: 3600,
                    got: timeout.to_string(),
                },
            ));
        }
        hosts.insert(
            name.clone(),
            RemoteHost {
                name,
                launch: host.launch,
                program: host.program.unwrap_or_else(|| "grove".to_owned()),
                slots: slots as usize,
                timeout: Duration::from_secs(timeout),
                ship: host.ship.unwrap_or(true),
            },
        );
    }
    Ok(hosts)
}

/// The hosts named in `names` (each may list several, comma-separated), from the user's
/// configuration at `path`.
pub fn choose(path: &Path, names: &[String]) -> Result<Vec<RemoteHost>, RemoteChoiceError> {
    let names: Vec<&str> = names
        .iter()
        .flat_map(|names| names.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let hosts = load_hosts(path)?;
    let mut chosen: Vec<RemoteHost> = Vec::new();
    for name in names {
        let host = hosts.get(name).ok_or_else(|| RemoteChoiceError::Unknown {
            name: name.to_owned(),
            path: path.to_path_buf(),
            known: hosts.keys().cloned().collect(),
        })?;
        if !chosen.iter().any(|chosen| chosen.name == name) {
            chosen.push(host.clone());
        }
    }
    Ok(chosen)
}

fn parse_error_at(
    path: &Path,
    text: &str,
    host: &str,
    key: &str,
    problem: ValueProblem,
) -> ConfigError {
    let table = format!("[remote.{host}]");
    let line = text
        .lines()
        .position(|line| line.trim() == table)
        .map_or(1, |index| index + 1);
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        column: 1,
        key: Some(format!("remote.{host}.{key}")),
        problem,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_with_their_defaults_and_an_unknown_name_lists_the_known_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            "[remote.a]\nlaunch = \"ssh a\"\nslots = 4\n\n[remote.b]\nlaunch = \"kubectl exec -i b --\"\nprogram = \"/opt/grove\"\ntimeout_s = 5\n",
        )
        .unwrap();
        let chosen = choose(&path, &["a,b".to_owned(), "a".to_owned()]).unwrap();
        assert_eq!(
            chosen,
            vec![
                RemoteHost {
                    name: "a".into(),
                    launch: "ssh a".into(),
                    program: "grove".into(),
                    slots: 4,
                    timeout: RemoteHost::DEFAULT_TIMEOUT,
                    ship: true,
                },
                RemoteHost {
                    name: "b".into(),
                    launch: "kubectl exec -i b --".into(),
                    program: "/opt/grove".into(),
                    slots: 1,
                    timeout: Duration::from_secs(5),
                    ship: true,
                },
            ],
            "each named host once, in the order named, defaults filled"
        );
        let error = choose(&path, &["c".to_owned()]).unwrap_err().to_string();
        assert!(
            error.contains("no remote host `c`") && error.contains("it defines: a, b"),
            "{error}"
        );
        std::fs::write(&path, "[remote.a]\nlaunch = \"ssh a\"\nslots = 0\n").unwrap();
        let error = choose(&path, &["a".to_owned()]).unwrap_err().to_string();
        assert!(
            error.contains("remote.a.slots") && error.contains("from 1 to 256"),
            "{error}"
        );
    }
}
