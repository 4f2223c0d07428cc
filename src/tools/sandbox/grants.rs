//! What a sandboxed command is granted to see besides its tree: the allow-list its file
//! system is built from.
//!
//! This file owns deciding, from the machine and the commands' environment, which host
//! paths a command reads: the system (read-only, `/etc` without what only its owner may
//! read), the interpreters and environments its `PATH` and grove's configured commands
//! name, the language toolchains' stores that hold no credentials, and what the user
//! granted. Nothing here names a secret: a path no rule grants does not exist for the
//! command. It reads directories in grove's process only, and must never grant a home,
//! a directory above one, or anything because of a name a model wrote.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The system, bound read-only at the same place: programs, libraries and their data.
/// `/etc` comes without the entries only their owner may read (see [`private_etc`]).
pub const SYSTEM_ROOTS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/sys",
    "/nix/store",
];

/// The stores of the language toolchains a build reads, beneath a home, and the
/// toolchain each is for. None holds a credential: cargo's `credentials*` and `config`,
/// npm's `.npmrc`, pip's `pip.conf`, gem's `credentials`, `.m2/settings.xml` and the like
/// sit beside these, not in them.
pub const TOOLCHAIN_STORES: &[(&str, &[&str])] = &[
    (
        "Rust: rustup's toolchains, cargo's binaries and package caches",
        &[".rustup", ".cargo/bin", ".cargo/registry", ".cargo/git"],
    ),
    ("pyenv's interpreters", &[".pyenv"]),
    (
        "uv's interpreters, tools and cache",
        &[".local/share/uv", ".cache/uv"],
    ),
    ("pip's cache", &[".cache/pip"]),
    (
        "Python's user site (`pip install --user`)",
        &[".local/lib", ".local/bin"],
    ),
    (
        "virtualenvwrapper's, pipenv's and poetry's environments",
        &[
            ".virtualenvs",
            ".local/share/virtualenvs",
            ".cache/pypoetry/virtualenvs",
        ],
    ),
    (
        "conda's environments and packages",
        &[
            "miniconda3",
            "anaconda3",
            "miniforge3",
            "mambaforge",
            ".conda/envs",
            ".conda/pkgs",
        ],
    ),
    ("nvm's Node.js versions", &[".nvm"]),
    ("npm's package cache", &[".npm/_cacache"]),
    (
        "yarn's and pnpm's caches",
        &[".cache/yarn", ".yarn/berry/cache", ".local/share/pnpm"],
    ),
    (
        "bun and deno",
        &[".bun/bin", ".bun/install/cache", ".deno/bin", ".cache/deno"],
    ),
    (
        "Go's module and build caches",
        &["go/pkg/mod", "go/bin", ".cache/go-build", "sdk"],
    ),
    (
        "Maven's and Gradle's caches",
        &[".m2/repository", ".gradle/caches", ".gradle/wrapper"],
    ),
    ("SDKMAN!'s JDKs", &[".sdkman/candidates"]),
    (
        "rbenv's rubies and installed gems",
        &[".rbenv", ".gem/ruby", ".local/share/gem"],
    ),
];

/// The most entries of one `PATH` directory looked at for links to environments
/// elsewhere (`/usr/local/bin/aider -> /opt/aider-venv/bin/aider`).
const MAX_PATH_ENTRIES: usize = 4096;

/// One path a command may read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Canonical.
    pub path: PathBuf,
    pub why: &'static str,
}

/// The read-only part of the allow-list that depends only on the machine and the
/// commands' environment: the same for every tree of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    pub read: Vec<Grant>,
}

impl Grants {
    /// The allow-list for commands whose environment is `env` and which grove runs as
    /// `commands` (the check, the setup), with `extra` granted by the user.
    pub fn for_commands(
        env: &[(OsString, OsString)],
        commands: &[String],
        extra: &[PathBuf],
    ) -> Self {
        let var = |name: &str| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| PathBuf::from(value))
                .filter(|path| path.is_absolute())
        };
        let mut grants = Self::default();
        for root in SYSTEM_ROOTS {
            grants.add(Path::new(root), "the system");
        }
        let home = var("HOME");
        if let Some(home) = &home {
            grants.toolchains_in(home);
        }
        if let Some(cargo) = var("CARGO_HOME") {
            for store in ["bin", "registry", "git"] {
                grants.add(&cargo.join(store), TOOLCHAIN_STORES[0].0);
            }
        }
        if let Some(rustup) = var("RUSTUP_HOME") {
            grants.add(&rustup, TOOLCHAIN_STORES[0].0);
        }
        if let Some(path) = env.iter().find(|(key, _)| key == "PATH") {
            for dir in std::env::split_paths(&path.1).filter(|dir| dir.is_absolute()) {
                grants.path_dir(&dir, home.as_deref());
            }
        }
        for program in commands
            .iter()
            .flat_map(|command| programs(command, home.as_deref()))
        {
            if let Some(parent) = program.parent() {
                grants.environment_of(parent, "an environment grove's configured commands run");
            }
        }
        for path in extra {
            grants.add(path, "granted by the user (`[sandbox] allow_read`)");
        }
        grants
    }

    /// Grants `path` (canonical) unless it does not exist or is granted already, with
    /// everything beneath it.
    pub fn add(&mut self, path: &Path, why: &'static str) {
        let Ok(path) = path.canonicalize() else {
            return;
        };
        if path == Path::new("/") || self.covers(&path) {
            return;
        }
        self.read.retain(|grant| !grant.path.starts_with(&path));
        self.read.push(Grant { path, why });
    }

    /// Whether `path` lies beneath a grant.
    pub fn covers(&self, path: &Path) -> bool {
        self.read.iter().any(|grant| path.starts_with(&grant.path))
    }

    fn toolchains_in(&mut self, home: &Path) {
        for (why, stores) in TOOLCHAIN_STORES {
            for store in *stores {
                self.add(&home.join(store), why);
            }
        }
    }

    /// Grants what a `PATH` directory runs: its environment, the toolchain it belongs
    /// to in a home other than `home`, and the environments its links lead to.
    fn path_dir(&mut self, dir: &Path, home: Option<&Path>) {
        // `~/.cargo/bin` of another home on PATH: that home's Rust stores, not its home.
        for (why, stores) in TOOLCHAIN_STORES {
            let owner = stores.iter().find_map(|store| {
                let store = Path::new(store);
                dir.ancestors()
                    .find(|at| at.ends_with(store))
                    .and_then(|at| at.ancestors().nth(store.components().count()))
            });
            if let Some(owner) = owner.filter(|owner| Some(*owner) != home) {
                for store in *stores {
                    self.add(&owner.join(store), why);
                }
            }
        }
        self.environment_of(dir, "an interpreter or environment on the commands' PATH");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten().take(MAX_PATH_ENTRIES) {
            if !entry.file_type().is_ok_and(|kind| kind.is_symlink()) {
                continue;
            }
            let Ok(target) = entry.path().canonicalize() else {
                continue;
            };
            if !self.covers(&target)
                && let Some(parent) = target.parent()
            {
                self.environment_of(
                    parent,
                    "an environment a program on the commands' PATH links to",
                );
            }
        }
    }

    /// Grants the environment a program directory `bin` belongs to: a virtualenv's or
    /// conda environment's prefix, an interpreter's installation prefix (and the
    /// interpreter a virtualenv was made from), or the directory alone.
    pub fn environment_of(&mut self, bin: &Path, why: &'static str) {
        let Ok(bin) = bin.canonicalize() else {
            return;
        };
        if self.covers(&bin) {
            return;
        }
        let prefix = bin
            .parent()
            .filter(|_| bin.file_name().is_some_and(|name| name == "bin"))
            .filter(|prefix| is_prefix(prefix));
        let Some(prefix) = prefix else {
            self.add(&bin, why);
            return;
        };
        self.add(prefix, why);
        if let Some(home) = venv_home(prefix) {
            self.environment_of(&home, "the interpreter a virtualenv was made from");
        }
    }
}

/// Whether `dir` is an installation prefix: a virtualenv, a conda environment, or an
/// interpreter's installation (`lib/python3.x`). A home's `.local` is not one (it holds
/// `share`, where keyrings live); its `bin` and `lib` are toolchain stores.
fn is_prefix(dir: &Path) -> bool {
    if dir.ends_with(".local") {
        return false;
    }
    if dir.join("pyvenv.cfg").is_file() || dir.join("conda-meta").is_dir() {
        return true;
    }
    std::fs::read_dir(dir.join("lib")).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.file_name().to_string_lossy().starts_with("python"))
    })
}

/// The `home` a virtualenv's `pyvenv.cfg` names: the directory of the interpreter it was
/// made from.
pub fn venv_home(prefix: &Path) -> Option<PathBuf> {
    let path = prefix.join("pyvenv.cfg");
    // A few lines, written by `venv`; anything else there is not one.
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 64 * 1024 {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home")
            .then(|| PathBuf::from(value.trim()))
            .filter(|path| path.is_absolute())
    })
}

/// The programs a configured command names by path (`/opt/venvs/x/bin/python -m
/// pytest`, `~/.venvs/app/bin/pytest`), where each is an executable file: only those
/// lead to an environment to grant, never a path a word merely mentions.
fn programs(command: &str, home: Option<&Path>) -> Vec<PathBuf> {
    command
        .split([';', '&', '|', '\n', '(', ')'])
        .filter_map(|simple| {
            simple
                .split_whitespace()
                .find(|word| !word.contains('=') || word.starts_with(['/', '~']))
        })
        .filter_map(|word| match word.strip_prefix("~/") {
            Some(rest) => home.map(|home| home.join(rest)),
            None => Some(PathBuf::from(word)),
        })
        .filter(|path| path.is_absolute())
        .filter(|path| {
            std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.mode() & 0o111 != 0)
        })
        .collect()
}

/// The entries of `/etc` only their owner (or group) may read — `shadow`, `ssh`'s host
/// keys, `ssl/private`, `sudoers`, a keytab, saved network passwords — each the
/// topmost such entry, canonical. A command sees `/etc` as any user of the machine
/// does, whoever grove runs as.
pub fn private_etc() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(PathBuf::from("/etc"), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let others = meta.mode() & 0o007;
            let readable = if meta.is_dir() {
                others & 0o5 == 0o5
            } else {
                others & 0o4 != 0
            };
            if !readable {
                found.push(entry.path());
            } else if meta.is_dir() && depth < 6 {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// The files `/etc`'s links lead to outside the granted system (`resolv.conf ->
/// /run/systemd/resolve/stub-resolv.conf`): each readable by anyone, bound at its own
/// path so the link resolves.
pub fn etc_link_targets(grants: &Grants) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return Vec::new();
    };
    let mut targets: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_symlink()))
        .filter_map(|entry| entry.path().canonicalize().ok())
        .filter(|target| !grants.covers(target) && !target.starts_with("/proc"))
        .filter(|target| {
            std::fs::metadata(target).is_ok_and(|meta| meta.is_file() && meta.mode() & 0o004 != 0)
        })
        .collect();
    targets.sort();
    targets.dedup();
    targets
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn venv(at: &Path, home: &Path) {
        std::fs::create_dir_all(at.join("bin")).unwrap();
        std::fs::create_dir_all(at.join("lib/python3.11/site-packages")).unwrap();
        std::fs::write(
            at.join("pyvenv.cfg"),
            format!("home = {}\nversion = 3.11.7\n", home.join("bin").display()),
        )
        .unwrap();
        let python = at.join("bin/python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&python, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }

    #[test]
    fn toolchains_environments_and_links_are_granted_and_nothing_of_a_home_besides() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let other = root.join("root");
        let interpreter = other.join(".pyenv/versions/3.11.7");
        std::fs::create_dir_all(interpreter.join("bin")).unwrap();
        std::fs::create_dir_all(interpreter.join("lib/python3.11")).unwrap();
        for path in [
            ".ssh",
            ".cargo/registry",
            ".cargo/bin",
            ".local/bin",
            ".local/share/keyrings",
            ".config/gcloud",
            ".pgpass-dir",
        ] {
            std::fs::create_dir_all(home.join(path)).unwrap();
        }
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap();
        std::fs::create_dir_all(other.join(".cargo/bin")).unwrap();
        std::fs::create_dir_all(other.join(".rustup")).unwrap();
        venv(&home.join(".virtualenvs/app"), &interpreter);
        venv(&root.join("opt/venvs/x"), &interpreter);
        let links = root.join("links");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(root.join("opt/venvs/x/bin/python"), links.join("x-python"))
            .unwrap();
        let env = vec![
            ("HOME".into(), home.clone().into_os_string()),
            (
                "PATH".into(),
                format!(
                    "{}:{}:{}:/usr/bin",
                    other.join(".cargo/bin").display(),
                    home.join(".local/bin").display(),
                    links.display()
                )
                .into(),
            ),
        ];
        let grants = Grants::for_commands(&env, &[], &[]);
        let mut outside_system: Vec<PathBuf> = grants
            .read
            .iter()
            .map(|grant| grant.path.clone())
            .filter(|path| path.starts_with(&root))
            .map(|path| path.strip_prefix(&root).unwrap().to_path_buf())
            .collect();
        outside_system.sort();
        let expected: Vec<PathBuf> = [
            "home/.cargo/bin",
            "home/.cargo/registry",
            "home/.local/bin",
            "home/.virtualenvs",
            "links",
            "opt/venvs/x",
            "root/.cargo/bin",
            "root/.pyenv/versions/3.11.7",
            "root/.rustup",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(
            outside_system, expected,
            "the home's toolchain stores, another home's Rust on PATH, a venv a PATH link \
             leads to and the interpreter its pyvenv.cfg names are granted; keys, \
             credentials, keyrings, cloud logins and unknown directories are not"
        );
    }

    #[test]
    fn a_configured_command_grants_the_environment_of_the_program_it_runs_and_no_word_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let interpreter = root.join("python");
        std::fs::create_dir_all(interpreter.join("bin")).unwrap();
        std::fs::create_dir_all(interpreter.join("lib/python3.11")).unwrap();
        venv(&root.join("venvs/x"), &interpreter);
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/key"), "k").unwrap();
        let command = format!(
            "cd src && {}/venvs/x/bin/python -m pytest; cat {}/secret/key",
            root.display(),
            root.display()
        );
        let grants = Grants::for_commands(&[], &[command], &[]);
        let granted: Vec<&Path> = grants
            .read
            .iter()
            .map(|grant| grant.path.as_path())
            .filter(|path| path.starts_with(&root))
            .collect();
        assert_eq!(
            granted,
            vec![root.join("venvs/x").as_path(), interpreter.as_path()],
            "the venv the check runs and its interpreter are granted; a file the command \
             merely reads is not"
        );
    }
}
