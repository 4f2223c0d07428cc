//! Path confinement: every path a file tool touches resolves beneath the context's root.
//!
//! This module owns the translation from a path the model wrote to a file operation that
//! cannot leave the root. It checks the path lexically first (for a clear message about
//! `..` and outside absolute paths), then opens it through a capability handle on the
//! root (cap-std's `Dir`, which resolves every component beneath the root at open time,
//! with `openat2(RESOLVE_BENEATH)` where the kernel has it). So a symlink that leads
//! outside, including one swapped in after an earlier successful access, is refused when
//! it is used, not only when it was checked. It must never open anything through an
//! ambient path except the root itself.
//!
//! cap-std refuses every symlink with an absolute target, so such a link whose target lies
//! inside the root is rewritten to its target before the open (which again resolves
//! beneath the root, so a rewrite can never widen access).
//!
//! Limit: a hard link to an outside file, made by someone else, is indistinguishable from
//! a regular file here (the sandbox is what prevents creating one).

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, OpenOptions, OpenOptionsExt as _};
use nix::fcntl::OFlag;

use super::ToolError;
use super::git_pointer::{is_git_dir_name, is_git_repository};

/// A capability handle on the root, and the root's path for messages and for turning
/// absolute paths inside it into relative ones.
#[derive(Debug)]
pub(crate) struct ConfinedRoot {
    dir: Dir,
    /// The root as the model sees it (messages, absolute paths the model writes).
    root: PathBuf,
    /// The root as grove's process reaches it: the same path for a plain worktree, the
    /// tree host's view for a copy-on-write one.
    reach: PathBuf,
    /// The root with symlinks resolved, when that differs (absolute paths may use either).
    canonical_root: Option<PathBuf>,
}

impl ConfinedRoot {
    /// Opens `root`, which grove's process reaches at `reach` (the same path for a
    /// plain directory; see [`ToolContext::reach`](super::ToolContext::reach)); failing
    /// to is fatal, since no tool can work without its root.
    pub(crate) fn open(root: &Path, reach: &Path) -> Result<Self, ToolError> {
        let reach = reach.to_path_buf();
        let dir = Dir::open_ambient_dir(&reach, ambient_authority()).map_err(|err| {
            ToolError::Fatal(format!(
                "cannot open the tool root {}: {err}",
                root.display()
            ))
        })?;
        let canonical_root = root
            .canonicalize()
            .ok()
            .filter(|canonical| canonical != root);
        Ok(Self {
            dir,
            root: root.to_owned(),
            reach,
            canonical_root,
        })
    }

    /// The capability handle; every path given to it must come from [`Self::relative`].
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The root's ambient path as grove's process reaches it (for the directory walker).
    pub(crate) fn reach(&self) -> &Path {
        &self.reach
    }

    /// The model's `path` as a clean path relative to the root (`.` for the root).
    ///
    /// Refuses, with a message for the model, an empty path, an absolute path outside the
    /// root and a path whose `..` components climb above the root. `..` is resolved
    /// lexically, as the model means it. Symlinks are left to the open, except that a
    /// symlink with an absolute target inside the root is rewritten to that target (cap-std
    /// refuses absolute targets); the rewritten path is still opened beneath the root.
    pub(crate) fn relative(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.is_empty() {
            return Err(ToolError::RespondToModel(
                "the path is empty; give a path relative to the worktree root".to_owned(),
            ));
        }
        if path.contains('\0') {
            return Err(ToolError::RespondToModel(format!(
                "the path `{}` contains a NUL byte",
                path.escape_debug()
            )));
        }
        let requested = Path::new(path);
        let inside = if requested.is_absolute() {
            self.strip_root(requested).ok_or_else(|| {
                ToolError::RespondToModel(format!(
                    "`{path}` is outside the worktree {}; paths must be relative to it \
                     (or absolute paths inside it)",
                    self.root.display()
                ))
            })?
        } else {
            requested
        };
        let clean = clean_beneath(inside).ok_or_else(|| {
            ToolError::RespondToModel(format!(
                "`{path}` leads outside the worktree (through `..`); access refused"
            ))
        })?;
        self.follow_absolute_links(clean, path)
    }

    /// `path` relative to the root, if it is an absolute path under either spelling of it.
    fn strip_root<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        path.strip_prefix(&self.root).ok().or_else(|| {
            self.canonical_root
                .as_deref()
                .and_then(|root| path.strip_prefix(root).ok())
        })
    }

    /// Rewrites every symlink on `path` whose target is absolute and inside the root to
    /// that target. Anything else (missing components, relative or outside targets) is
    /// left for the open to follow or refuse.
    fn follow_absolute_links(&self, mut path: PathBuf, shown: &str) -> Result<PathBuf, ToolError> {
        let mut hops = 0;
        'restart: loop {
            let mut prefix = PathBuf::new();
            for (index, component) in path.components().enumerate() {
                prefix.push(component);
                let is_link = self
                    .dir
                    .symlink_metadata(&prefix)
                    .is_ok_and(|metadata| metadata.file_type().is_symlink());
                if !is_link {
                    continue;
                }
                let Ok(target) = self.dir.read_link_contents(&prefix) else {
                    return Ok(path);
                };
                if !target.is_absolute() {
                    continue;
                }
                let Some(mut rewritten) = self.strip_root(&target).and_then(clean_beneath) else {
                    return Ok(path);
                };
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(ToolError::RespondToModel(format!(
                        "`{shown}` goes through more than {MAX_LINK_HOPS} symlinks"
                    )));
                }
                rewritten.extend(path.components().skip(index + 1));
                path = clean_beneath(&rewritten).unwrap_or(rewritten);
                continue 'restart;
            }
            return Ok(path);
        }
    }
}

impl ConfinedRoot {
    /// Refuses `relative` when it is, or lies inside, a git dir: a component spelled like
    /// `.git` in any case ([`is_git_dir_name`]), or a directory that is a git repository,
    /// found on the path as written and on the path its symlinks resolve to (`gp -> .git`
    /// is refused as `.git`).
    pub(crate) fn refuse_git_dir(&self, relative: &Path, shown: &str) -> Result<(), ToolError> {
        let refused = || {
            ToolError::RespondToModel(format!(
                "cannot write `{shown}`: grove manages git for this worktree and commits your \
                 changes itself; `.git` is not writable"
            ))
        };
        for path in [Some(relative.to_path_buf()), self.resolve_links(relative)]
            .into_iter()
            .flatten()
        {
            let mut prefix = PathBuf::new();
            for component in path.components() {
                if is_git_dir_name(component.as_os_str()) {
                    return Err(refused());
                }
                prefix.push(component);
                if is_git_repository(&self.reach.join(&prefix)) {
                    return Err(refused());
                }
            }
        }
        Ok(())
    }

    /// `relative` with every symlink on it resolved, as a path beneath the root; `None`
    /// when a link leads outside (the open refuses that) or there are too many.
    pub(crate) fn resolve_links(&self, relative: &Path) -> Option<PathBuf> {
        let mut pending: Vec<std::ffi::OsString> = relative
            .components()
            .rev()
            .map(|component| component.as_os_str().to_owned())
            .collect();
        let mut resolved = PathBuf::new();
        let mut hops = 0;
        while let Some(name) = pending.pop() {
            if name == "." {
                continue;
            }
            if name == ".." {
                if !resolved.pop() {
                    return None;
                }
                continue;
            }
            let candidate = resolved.join(&name);
            let is_link = self
                .dir
                .symlink_metadata(&candidate)
                .is_ok_and(|metadata| metadata.file_type().is_symlink());
            if !is_link {
                resolved = candidate;
                continue;
            }
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return None;
            }
            let target = self.dir.read_link_contents(&candidate).ok()?;
            let target = if target.is_absolute() {
                resolved = PathBuf::new();
                self.strip_root(&target)?.to_path_buf()
            } else {
                target
            };
            pending.extend(
                target
                    .components()
                    .rev()
                    .map(|component| component.as_os_str().to_owned()),
            );
        }
        Some(resolved)
    }
}

/// Symlinks followed in one path before giving up (the kernel's ELOOP limit).
const MAX_LINK_HOPS: usize = 40;

/// `path` with `.` dropped and `..` applied, or `None` when `..` climbs above its start
/// or the path is absolute. The empty path becomes `.`.
fn clean_beneath(path: &Path) -> Option<PathBuf> {
    let mut clean = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(name) => clean.push(name),
            Component::ParentDir => {
                if !clean.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    if clean.as_os_str().is_empty() {
        clean.push(".");
    }
    Some(clean)
}

/// Which kind of file [`open_file`] is opening for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    /// Create if missing, truncate if present.
    Write,
}

/// Opens the root-relative `relative` (the model wrote `shown`) as a regular file.
///
/// The open never blocks (`O_NONBLOCK`: a FIFO planted in the worktree must not hang the
/// tool) and never acquires a terminal; directories, FIFOs, sockets and devices are
/// refused with a message. `action` words the messages ("read", "edit", ...).
pub(crate) fn open_file(
    confined: &ConfinedRoot,
    relative: &Path,
    shown: &str,
    action: &str,
    access: Access,
) -> Result<File, ToolError> {
    let mut options = OpenOptions::new();
    match access {
        Access::Read => options.read(true),
        Access::Write => options.write(true).create(true).truncate(true),
    };
    options.custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY).bits());
    let file = confined
        .dir()
        .open_with(relative, &options)
        .map_err(|err| io_error(action, shown, &err))?;
    let metadata = file
        .metadata()
        .map_err(|err| io_error(action, shown, &err))?;
    if metadata.is_dir() {
        return Err(ToolError::RespondToModel(format!(
            "cannot {action} `{shown}`: it is a directory (list_files shows what it holds)"
        )));
    }
    if !metadata.is_file() {
        return Err(ToolError::RespondToModel(format!(
            "cannot {action} `{shown}`: it is not a regular file (a FIFO, socket or device)"
        )));
    }
    Ok(file)
}

/// True when cap-std refused `err` because the path resolved outside the root.
pub(crate) fn is_escape(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::PermissionDenied
        && err.to_string() == "a path led outside of the filesystem"
}

/// An I/O failure on the model's `path` as a message the model can act on.
pub(crate) fn io_error(action: &str, path: &str, err: &io::Error) -> ToolError {
    if err.kind() == io::ErrorKind::StorageFull {
        // No model can free the disk: the run pauses, resumable (see `store::disk_full`).
        return ToolError::Fatal(format!(
            "cannot {action} `{path}`: the disk is full ({err})"
        ));
    }
    let message = if is_escape(err) {
        format!(
            "cannot {action} `{path}`: it resolves outside the worktree (through a symlink or `..`); access refused"
        )
    } else {
        match err.kind() {
            io::ErrorKind::NotFound => format!("cannot {action} `{path}`: it does not exist"),
            io::ErrorKind::PermissionDenied => {
                format!("cannot {action} `{path}`: permission denied")
            }
            io::ErrorKind::NotADirectory => {
                format!("cannot {action} `{path}`: a component of the path is not a directory")
            }
            io::ErrorKind::IsADirectory => format!(
                "cannot {action} `{path}`: it is a directory (list_files shows what it holds)"
            ),
            _ => format!("cannot {action} `{path}`: {err}"),
        }
    };
    ToolError::RespondToModel(message)
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| ToolError::Fatal(format!("a file tool task failed: {err}")))?
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_fatal_and_says_so_where_other_errors_go_back_to_the_model() {
        let full = io_error("write", "a.txt", &io::Error::from_raw_os_error(28));
        let missing = io_error("read", "a.txt", &io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(
            (
                full.to_string().contains("No space left on device"),
                matches!(full, ToolError::Fatal(_))
            ),
            (true, true),
            "a full disk stops the agent with the words the run's pause recognises: {full}"
        );
        assert!(matches!(missing, ToolError::RespondToModel(_)), "{missing}");
    }

    fn confined() -> (tempfile::TempDir, ConfinedRoot) {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let confined = ConfinedRoot::open(&root, &root).unwrap();
        (temp, confined)
    }

    fn refusal(result: Result<PathBuf, ToolError>) -> String {
        match result {
            Err(ToolError::RespondToModel(message)) => message,
            other => panic!("expected a refusal for the model, got {other:?}"),
        }
    }

    #[test]
    fn relative_cleans_paths_inside_the_root() {
        let (_temp, confined) = confined();
        assert_eq!(
            confined.relative("src/lib.rs").unwrap(),
            PathBuf::from("src/lib.rs")
        );
        assert_eq!(
            confined.relative("./a/../b/./c").unwrap(),
            PathBuf::from("b/c")
        );
        assert_eq!(confined.relative(".").unwrap(), PathBuf::from("."));
        let absolute = confined.reach().join("src/main.rs");
        assert_eq!(
            confined.relative(absolute.to_str().unwrap()).unwrap(),
            PathBuf::from("src/main.rs"),
            "an absolute path inside the root is accepted"
        );
        assert_eq!(
            confined
                .relative(confined.reach().to_str().unwrap())
                .unwrap(),
            PathBuf::from(".")
        );
    }

    #[test]
    fn relative_accepts_absolute_paths_under_the_canonical_root_of_an_alias() {
        let temp = tempfile::tempdir().unwrap();
        let real = temp.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let alias = temp.path().join("alias");
        std::os::unix::fs::symlink(&real, &alias).unwrap();
        let confined = ConfinedRoot::open(&alias, &alias).unwrap();
        let through_real = real.join("src/lib.rs");
        let through_alias = alias.join("src/lib.rs");
        assert_eq!(
            (
                confined.relative(through_real.to_str().unwrap()).unwrap(),
                confined.relative(through_alias.to_str().unwrap()).unwrap()
            ),
            (PathBuf::from("src/lib.rs"), PathBuf::from("src/lib.rs")),
            "both spellings of the root are the root"
        );
    }

    #[test]
    fn relative_refuses_escapes_by_dotdot_and_absolute_paths() {
        let (_temp, confined) = confined();
        assert!(refusal(confined.relative("../x")).contains("leads outside the worktree"));
        assert!(refusal(confined.relative("a/../../x")).contains("leads outside the worktree"));
        assert!(refusal(confined.relative("/etc/passwd")).contains("is outside the worktree"));
        assert!(refusal(confined.relative("")).contains("the path is empty"));
    }

    #[test]
    fn escape_errors_are_recognised() {
        let (_temp, confined) = confined();
        std::os::unix::fs::symlink("/etc", confined.reach().join("etc")).unwrap();
        let err = confined.dir().open("etc/passwd").unwrap_err();
        assert!(
            is_escape(&err),
            "cap-std refuses a symlink out of the root: {err}"
        );
        let message = io_error("read", "etc/passwd", &err).to_string();
        assert!(
            message.contains("resolves outside the worktree"),
            "{message}"
        );
    }
}
