//! The slice of the repository's git data one worktree's commands may read, the private
//! directories of the commands, and the well-known stores of secrets (which no command
//! is granted; named so that a user's `allow_read` of one is said out loud).
//!
//! This file reads directories and small git files in grove's process, never in a
//! command's, and must never widen what a command reads to make git work: where git
//! needs something it may not read, it gets a sanitized copy instead.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use super::SandboxError;
use super::cgroup::{owner_alive, owner_mark};

/// Well-known stores of secrets beneath a home: the user's identity and credentials.
/// Commands see none of a home but the toolchain stores granted (see `grants`), so this
/// list draws no line; it names what a user's `[sandbox] allow_read` opens loudly, and
/// what a failed check's diagnosis says it could not read.
///
/// The list follows where tools keep credentials: SSH and GnuPG keys, cloud and cluster
/// logins, registry tokens (`.npmrc`, `.pypirc`, cargo's credentials), git's credential
/// stores and global config (its `url.*.insteadOf` tokens), keyrings, browser and
/// password-manager profiles, shell histories, the agent CLIs' logins, and grove's own
/// data (the trust records).
pub const DENIED_IN_HOME: &[&str] = &[
    // Keys and logins.
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".dockercfg",
    ".netrc",
    ".vault-token",
    ".terraform.d",
    ".config/doctl",
    ".s3cfg",
    ".boto",
    ".pki",
    // Git and code hosts.
    ".git-credentials",
    ".gitconfig",
    ".config/git",
    ".config/gh",
    ".config/hub",
    // Package registries' tokens.
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".cargo/credentials*",
    ".gem/credentials",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".config/pip",
    // Keyrings and password managers.
    ".local/share/keyrings",
    ".local/share/kwalletd",
    ".password-store",
    ".config/1Password",
    ".config/Bitwarden",
    ".config/keepassxc",
    ".config/KeePassXC",
    ".config/op",
    "snap/bitwarden",
    "snap/keepassxc",
    ".var/app/com.bitwarden.desktop",
    ".var/app/org.keepassxc.KeePassXC",
    ".var/app/com.onepassword.OnePassword",
    // Browser and mail profiles (cookies, saved passwords).
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    ".config/microsoft-edge",
    ".config/vivaldi",
    ".config/opera",
    ".librewolf",
    // The same, installed as snaps and as flatpaks (each keeps its own home there).
    "snap/firefox",
    "snap/chromium",
    "snap/brave",
    "snap/opera",
    "snap/vivaldi",
    "snap/thunderbird",
    ".var/app/org.mozilla.firefox",
    ".var/app/org.mozilla.Thunderbird",
    ".var/app/org.chromium.Chromium",
    ".var/app/com.google.Chrome",
    ".var/app/com.brave.Browser",
    ".var/app/com.microsoft.Edge",
    ".var/app/com.vivaldi.Vivaldi",
    ".var/app/com.opera.Opera",
    ".var/app/io.gitlab.librewolf-community",
    // Shell and REPL histories (commands typed with tokens in them).
    ".bash_history",
    ".zsh_history",
    ".histfile",
    ".python_history",
    ".node_repl_history",
    ".psql_history",
    ".mysql_history",
    ".sqlite_history",
    ".local/share/fish",
    // The agent CLIs' logins and a home `.env`.
    ".claude*",
    ".codex",
    ".gemini",
    ".config/anthropic",
    ".config/openai",
    ".cache/huggingface/token",
    ".env",
    // grove's own data: the trust records.
    ".local/share/grove",
];

/// The secret store of `home` (an entry of [`DENIED_IN_HOME`]) that `path` is or lies
/// in, if any.
pub fn denied_store(home: &Path, path: &Path) -> Option<PathBuf> {
    DENIED_IN_HOME.iter().find_map(|denied| {
        let Some(stem) = denied.strip_suffix('*') else {
            let store = home.join(denied);
            return path.starts_with(&store).then_some(store);
        };
        let (dir, prefix) = match stem.rsplit_once('/') {
            Some((dir, prefix)) => (home.join(dir), prefix),
            None => (home.to_path_buf(), stem),
        };
        let first = path.strip_prefix(&dir).ok()?.components().next()?;
        first
            .as_os_str()
            .as_bytes()
            .starts_with(prefix.as_bytes())
            .then(|| dir.join(first))
    })
}

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

/// The parent of one executor's private temporary directories beneath `env`'s `TMPDIR`
/// (else the system's): hidden from every command, so no worktree lists or reads
/// another's; each worktree is granted its own directory inside.
///
/// Its name carries this process's owner mark, and the roots of groves that are gone
/// (killed with `kill -9`, where nothing is dropped) are removed first: each one left
/// there is one more entry every command's confinement must list to hide the roots.
pub(super) fn private_temp_root(
    env: &[(OsString, OsString)],
) -> Result<tempfile::TempDir, SandboxError> {
    let parent = env
        .iter()
        .find(|(name, _)| name == "TMPDIR")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| path.is_absolute())
        .unwrap_or_else(std::env::temp_dir);
    remove_stale_temp_roots(&parent);
    tempfile::Builder::new()
        .prefix(&format!("{TEMP_ROOT_PREFIX}{}-", owner_mark()))
        .tempdir_in(&parent)
        .map_err(|source| SandboxError::TempDir { parent, source })
}

/// How every private temporary root's name begins; the owner mark and `-` follow.
const TEMP_ROOT_PREFIX: &str = "grove-cmds-";

/// Removes the private temporary roots in `parent` whose grove is gone: only this
/// user's directories named with an owner mark that [`owner_alive`] judges dead (a root
/// of another pid namespace's grove, or of an older grove without a mark, stays).
fn remove_stale_temp_roots(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(mark) = name
            .to_str()
            .and_then(|name| name.strip_prefix(TEMP_ROOT_PREFIX))
            .and_then(|rest| rest.rsplit_once('-'))
            .map(|(mark, _)| mark)
        else {
            continue;
        };
        let path = entry.path();
        // Not followed: a link planted under this name is not a directory of ours.
        let ours = std::fs::symlink_metadata(&path).is_ok_and(|meta| {
            use std::os::unix::fs::MetadataExt as _;
            meta.is_dir() && meta.uid() == me
        });
        if ours && mark.contains(':') && !owner_alive(mark) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
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

/// An empty, read-only file in `root`, made once: what covers a host socket.
pub(super) fn empty_file(root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = root.join("cover");
    if std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_file() && meta.len() == 0) {
        return Some(path);
    }
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&path);
    // Another tree's first command may have made it meanwhile.
    let empty = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file() && meta.len() == 0)
    };
    (made.is_ok() || empty(&path)).then_some(path)
}

/// What one worktree's commands may read of its repository's git data, found from
/// grove's own record: the admin dir under `<common>/worktrees/` that registered the
/// worktree. Never from the worktree's `.git` pointer, which its commands can rewrite
/// (a planted pointer to a "git dir" whose `commondir` is `$HOME` would make its `HEAD`
/// ref, any file, readable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GitView {
    /// The worktree's admin dir, as git registered it; `None`: no linked worktree of the
    /// repository (nothing of its git data is granted, the pointer is left alone).
    pub admin: Option<PathBuf>,
    /// Hidden: the common dir's `config` (credentials), every grove ref, reflog and
    /// worktree admin dir, and `packed-refs` when it names a grove ref.
    pub hide: Vec<PathBuf>,
    /// Readable beneath those: this worktree's admin dir and its own branch's ref file.
    pub read: Vec<PathBuf>,
    /// The common dir's `config`, where the sanitized copy is mounted over it.
    pub config: Option<PathBuf>,
    /// The common dir, canonical.
    pub common: Option<PathBuf>,
    /// This tree's own branch ref file.
    pub own_ref: Option<PathBuf>,
    /// The own ref file's inode: git replaces the file on every commit, and the read rule
    /// holds the old one, so a changed inode means the rules must be built again.
    pub ref_identity: Option<(u64, u64)>,
}

impl GitView {
    /// The view of the worktree registered at `registered` (the worktree's path as
    /// grove's own namespace shows it) in the repository whose common dir is `common`;
    /// empty when none of its registrations names that directory.
    pub(super) fn of(common: &Path, registered: &Path) -> Self {
        let Ok(common) = common.canonicalize() else {
            return Self::default();
        };
        let Some(admin) = registered_admin_dir(&common, registered) else {
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
        let own_ref = own_ref_file(&common, &admin);
        let ref_identity = own_ref.as_deref().and_then(identity_of);
        read.extend(own_ref.clone());
        let config = Some(common.join("config")).filter(|path| path.is_file());
        hide.retain(|path| path.exists());
        Self {
            admin: Some(admin),
            hide,
            read,
            config,
            common: Some(common),
            own_ref,
            ref_identity,
        }
    }

    /// The own ref file's current inode (see [`Self::ref_identity`]).
    pub(super) fn current_ref_identity(&self) -> Option<(u64, u64)> {
        let admin = self.admin.as_deref()?;
        let common = common_dir(admin)?;
        identity_of(&own_ref_file(&common, admin)?)
    }
}

/// The admin dir under `<common>/worktrees/` whose `gitdir` file names
/// `registered/.git`, compared by file identity (any spelling of the path).
fn registered_admin_dir(common: &Path, registered: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let wanted = identity_of(registered)?;
    let entries = std::fs::read_dir(common.join("worktrees")).ok()?;
    entries.flatten().map(|entry| entry.path()).find(|admin| {
        std::fs::read(admin.join("gitdir")).is_ok_and(|gitdir| {
            let line = gitdir.trim_ascii_end();
            let dot_git = Path::new(std::ffi::OsStr::from_bytes(line));
            dot_git.parent().and_then(identity_of) == Some(wanted)
        })
    })
}

/// The ref file the admin dir's `HEAD` names, when it is a file in `common`.
fn own_ref_file(common: &Path, admin: &Path) -> Option<PathBuf> {
    let head = std::fs::read_to_string(admin.join("HEAD")).ok()?;
    let name = head.trim().strip_prefix("ref: ")?;
    let path = common.join(name);
    // A ref name never climbs out of the common dir; the admin dir is grove's and git's
    // alone (commands cannot write it), so this guards only against a corrupt file.
    (!name.split('/').any(|part| part == "..") && path.is_file()).then_some(path)
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

/// The lines of a `packed-refs` a command's git may see: every ref but grove's, and of
/// grove's only `own` (the tree's branch, e.g. `refs/heads/grove/<run>/1`).
pub(super) fn sanitized_packed_refs(text: &str, own: Option<&str>) -> String {
    let mut out = String::new();
    let mut dropped = false;
    for line in text.lines() {
        // A peeled line (`^…`) belongs to the ref above it.
        if line.starts_with('^') {
            if !dropped {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        let name = line.split_once(' ').map(|(_, name)| name.trim());
        dropped = name.is_some_and(|name| {
            (name.starts_with("refs/heads/grove/") || name.starts_with("refs/grove/"))
                && Some(name) != own
        });
        if !dropped {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
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
    fn only_the_temp_roots_of_groves_that_are_gone_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("kept"), "x").unwrap();
        let mine = owner_mark();
        let namespace = mine.find('.').map_or("", |at| &mine[at..]);
        // No process has a pid above the kernel's largest pid_max (2^22).
        let gone = format!("4194999:1{namespace}");
        let names = [
            format!("grove-cmds-{gone}-dead01"),
            format!("grove-cmds-{mine}-alive1"),
            "grove-cmds-Oldxyz".to_owned(),
            "grove-cmds-4194999:1.1-otherns".to_owned(),
            "unrelated".to_owned(),
        ];
        for name in &names {
            std::fs::create_dir(parent.path().join(name)).unwrap();
            std::fs::write(parent.path().join(name).join("f"), "x").unwrap();
        }
        let planted = format!("grove-cmds-{gone}-link01");
        std::os::unix::fs::symlink(outside.path(), parent.path().join(&planted)).unwrap();

        remove_stale_temp_roots(parent.path());

        let mut left: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![
            names[1].clone(),
            names[2].clone(),
            names[3].clone(),
            names[4].clone(),
            planted,
        ];
        expected.sort();
        assert_eq!(
            (left, outside.path().join("kept").exists()),
            (expected, true),
            "only a dead grove's own root goes; a live one's, an unmarked one, another pid \
             namespace's, other names and a planted link stay, and nothing is followed"
        );
        let root = private_temp_root(&[("TMPDIR".into(), parent.path().into())]).unwrap();
        let name = root
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            name.starts_with(&format!("grove-cmds-{mine}-")),
            "a new root carries this grove's owner mark: {name}"
        );
    }

    #[test]
    fn the_sanitized_packed_refs_keep_the_users_refs_and_the_trees_own_branch_alone() {
        let text = "# pack-refs with: peeled fully-peeled sorted\n\
                    1111 refs/heads/grove/r1/1\n\
                    2222 refs/heads/grove/r1/2\n\
                    3333 refs/heads/main\n\
                    4444 refs/grove/archive/r1/2\n\
                    5555 refs/tags/v1\n\
                    ^6666\n";
        assert_eq!(
            sanitized_packed_refs(text, Some("refs/heads/grove/r1/1")),
            "# pack-refs with: peeled fully-peeled sorted\n1111 refs/heads/grove/r1/1\n\
             3333 refs/heads/main\n5555 refs/tags/v1\n^6666\n",
            "another subtask's branch and grove's archive are dropped; the tree's own \
             branch, the user's refs and a tag's peeled line stay"
        );
    }

    #[test]
    fn a_path_in_a_store_names_the_store_a_glob_entry_the_one_it_matched() {
        let home = Path::new("/home/u");
        let store = |path: &str| denied_store(home, &home.join(path));
        assert_eq!(
            [
                store(".cargo/credentials.toml"),
                store(".ssh/id_ed25519"),
                store("snap/firefox/common/.mozilla/firefox/x/logins.json"),
                store(".claude.json"),
                store(".cargo/config.toml"),
                store("snap/code/common"),
            ],
            [
                Some(home.join(".cargo/credentials.toml")),
                Some(home.join(".ssh")),
                Some(home.join("snap/firefox")),
                Some(home.join(".claude.json")),
                None,
                None,
            ],
            "the diagnosis names the store a denied path lies in, a `*` entry's match \
             included, and no store for a path outside them"
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
