//! Which paths a sandboxed command sees: the user's secrets it must not, and the slice of
//! the repository's git data one worktree may read.
//!
//! This file owns the lists the Landlock rules are built from. It reads directories and
//! small git files in grove's process, never in a command's, and must never widen what a
//! command reads to make git work: where git needs something it may not read, it gets a
//! sanitized copy instead.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::SandboxError;

/// Dot-entries of a home directory that stay readable: toolchains a build needs. Each
/// holds programs and caches, not credentials (cargo's credential files are hidden on
/// their own, see [`HIDDEN_IN_TOOLCHAINS`]).
pub const HOME_TOOLCHAIN_DIRS: &[&str] = &[
    ".cargo", ".rustup", ".nvm", ".pyenv", ".rbenv", ".volta", ".bun", ".deno", ".sdkman",
];

/// Credential files inside [`HOME_TOOLCHAIN_DIRS`], hidden even though their folder is not.
const HIDDEN_IN_TOOLCHAINS: &[&str] = &[".cargo/credentials", ".cargo/credentials.toml"];

/// System paths hidden from every command: `/dev` as a whole (the confinement grants the
/// harmless devices one by one; a raw disk would bypass every file rule).
const HIDDEN_SYSTEM_PATHS: &[&str] = &["/dev"];

/// System secrets only root can read, hidden when grove runs as root. Hiding them splits
/// `/etc` into one rule per entry (about 2 ms, once per worktree), which other users need
/// not pay: the kernel keeps these from them anyway.
const HIDDEN_FROM_ROOT: &[&str] = &["/etc/shadow", "/etc/gshadow", "/etc/ssh"];

/// The keys of a repository's `config` a command's git gets in its sanitized copy: what
/// git needs to read the repository the same way. Everything else (`url.*.insteadOf`
/// tokens, `http.extraheader`, remotes, credentials, hooks, filters, includes) stays out.
const SAFE_CORE_KEYS: &[&str] = &[
    "repositoryformatversion",
    "filemode",
    "symlinks",
    "ignorecase",
    "precomposeunicode",
    "bare",
    "logallrefupdates",
    "autocrlf",
    "eol",
];

/// The secret paths of `homes` and of the system, canonical, each once.
pub fn hidden_paths(homes: &[PathBuf]) -> Vec<PathBuf> {
    let mut hidden: Vec<PathBuf> = Vec::new();
    let mut push = |path: PathBuf| {
        if let Ok(canonical) = path.canonicalize()
            && !hidden.contains(&canonical)
        {
            hidden.push(canonical);
        }
    };
    for home in homes {
        let Ok(entries) = std::fs::read_dir(home) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && !HOME_TOOLCHAIN_DIRS.contains(&name.as_ref()) {
                push(entry.path());
            }
        }
        for inner in HIDDEN_IN_TOOLCHAINS {
            push(home.join(inner));
        }
    }
    for system in HIDDEN_SYSTEM_PATHS {
        push(PathBuf::from(system));
    }
    if nix::unistd::geteuid().is_root() {
        for system in HIDDEN_FROM_ROOT {
            push(PathBuf::from(system));
        }
    }
    hidden.sort();
    hidden
}

/// The parent of one executor's private temporary directories beneath `env`'s `TMPDIR`
/// (else the system's): hidden from every command, so no worktree lists or reads
/// another's; each worktree is granted its own directory inside.
pub(super) fn private_temp_root(
    env: &[(OsString, OsString)],
) -> Result<tempfile::TempDir, SandboxError> {
    let parent = env
        .iter()
        .find(|(name, _)| name == "TMPDIR")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| path.is_absolute())
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("grove-cmds-")
        .tempdir_in(&parent)
        .map_err(|source| SandboxError::TempDir { parent, source })
}

/// A new private directory beneath `root` (see [`private_temp_root`]).
pub(super) fn private_dir(root: &Path, prefix: &str) -> Result<tempfile::TempDir, SandboxError> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .map_err(|source| SandboxError::TempDir {
            parent: root.to_path_buf(),
            source,
        })
}

/// What one worktree's commands may read of its repository's git data, found from the
/// worktree's `.git` pointer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GitView {
    /// Hidden: the common dir's `config` (credentials), every grove ref, reflog and
    /// worktree admin dir, and `packed-refs` when it names a grove ref.
    pub hide: Vec<PathBuf>,
    /// Readable beneath those: this worktree's admin dir and its own branch's ref file.
    pub read: Vec<PathBuf>,
    /// The common dir's `config`, where the sanitized copy is mounted over it.
    pub config: Option<PathBuf>,
    /// The own ref file's inode: git replaces the file on every commit, and the read rule
    /// holds the old one, so a changed inode means the rules must be built again.
    pub ref_identity: Option<(u64, u64)>,
}

impl GitView {
    /// The view of the worktree at `worktree`; empty when it is no linked worktree.
    pub(super) fn of(worktree: &Path) -> Self {
        let Some(admin) = pointer_target(worktree) else {
            return Self::default();
        };
        let Some(common) = common_dir(&admin) else {
            return Self::default();
        };
        let mut hide = vec![
            common.join("config"),
            common.join("refs/heads/grove"),
            common.join("refs/grove"),
            common.join("logs/refs/heads/grove"),
            common.join("logs/refs/grove"),
            common.join("worktrees"),
        ];
        let packed = common.join("packed-refs");
        if std::fs::read_to_string(&packed)
            .is_ok_and(|text| text.contains(" refs/heads/grove/") || text.contains(" refs/grove/"))
        {
            hide.push(packed);
        }
        let mut read = vec![admin.clone()];
        let own_ref = std::fs::read_to_string(admin.join("HEAD"))
            .ok()
            .and_then(|head| {
                head.trim()
                    .strip_prefix("ref: ")
                    .map(|name| common.join(name))
            })
            .filter(|path| path.is_file());
        let ref_identity = own_ref.as_deref().and_then(identity_of);
        read.extend(own_ref);
        let config = Some(common.join("config")).filter(|path| path.is_file());
        hide.retain(|path| path.exists());
        Self {
            hide,
            read,
            config,
            ref_identity,
        }
    }

    /// The own ref file's current inode (see [`Self::ref_identity`]).
    pub(super) fn current_ref_identity(worktree: &Path) -> Option<(u64, u64)> {
        let admin = pointer_target(worktree)?;
        let common = common_dir(&admin)?;
        let head = std::fs::read_to_string(admin.join("HEAD")).ok()?;
        identity_of(&common.join(head.trim().strip_prefix("ref: ")?))
    }
}

/// The admin dir the worktree's `.git` pointer names, canonical.
fn pointer_target(worktree: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(worktree.join(".git")).ok()?;
    let target = PathBuf::from(text.trim().strip_prefix("gitdir: ")?);
    let target = if target.is_absolute() {
        target
    } else {
        worktree.join(target)
    };
    target.canonicalize().ok()
}

/// The common dir an admin dir's `commondir` file names, canonical.
fn common_dir(admin: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(admin.join("commondir")).ok()?;
    let common = PathBuf::from(text.trim());
    let common = if common.is_absolute() {
        common
    } else {
        admin.join(common)
    };
    common.canonicalize().ok()
}

pub(super) fn identity_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

/// The part of a repository `config` a command's git may see: the [`SAFE_CORE_KEYS`] of
/// `[core]` and all of `[extensions]` (the object format), nothing else.
pub(super) fn sanitized_config(text: &str) -> String {
    let mut core = String::new();
    let mut extensions = String::new();
    let mut section = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(header) = trimmed.strip_prefix('[') {
            section = header
                .split(']')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            continue;
        }
        let key = trimmed
            .split(['=', ' ', '\t'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if key.is_empty() || key.starts_with(['#', ';']) {
            continue;
        }
        let kept = format!("\t{trimmed}\n");
        match section.as_str() {
            "core" if SAFE_CORE_KEYS.contains(&key.as_str()) => core.push_str(&kept),
            "extensions" => extensions.push_str(&kept),
            _ => {}
        }
    }
    let mut out = format!("[core]\n{core}");
    if !extensions.is_empty() {
        out.push_str(&format!("[extensions]\n{extensions}"));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_take_every_home_dot_entry_but_the_toolchains() {
        let home = tempfile::tempdir().unwrap();
        for dir in [".ssh", ".aws", ".config", ".cargo", ".rustup", "projects"] {
            std::fs::create_dir(home.path().join(dir)).unwrap();
        }
        for file in [
            ".bashrc",
            ".gitconfig",
            ".cargo/credentials.toml",
            "notes.txt",
        ] {
            std::fs::write(home.path().join(file), "x").unwrap();
        }
        let home = home.path().canonicalize().unwrap();
        let hidden: Vec<PathBuf> = hidden_paths(std::slice::from_ref(&home))
            .into_iter()
            .filter(|path| path.starts_with(&home))
            .collect();
        let mut expected: Vec<PathBuf> = [
            ".aws",
            ".bashrc",
            ".cargo/credentials.toml",
            ".config",
            ".gitconfig",
            ".ssh",
        ]
        .iter()
        .map(|name| home.join(name))
        .collect();
        expected.sort();
        assert_eq!(
            hidden, expected,
            "secrets are hidden; toolchains and plain files stay readable"
        );
    }

    #[test]
    fn the_sanitized_config_keeps_the_format_and_drops_every_credential() {
        let config = "[core]\n\trepositoryformatversion = 1\n\tbare = false\n\
                      \tfsmonitor = touch /tmp/pwned\n\thooksPath = /tmp/hooks\n\
                      [extensions]\n\tobjectFormat = sha256\n\
                      [url \"https://x-access-token:ghp_SECRET@github.com/\"]\n\
                      \tinsteadOf = https://github.com/\n\
                      [http]\n\textraheader = AUTHORIZATION: basic SECRET\n\
                      [include]\n\tpath = /etc/other\n";
        assert_eq!(
            sanitized_config(config),
            "[core]\n\trepositoryformatversion = 1\n\tbare = false\n\
             [extensions]\n\tobjectFormat = sha256\n",
            "the format survives; tokens, headers, hooks, fsmonitor and includes do not"
        );
    }
}
