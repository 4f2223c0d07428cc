//! Overlay trees: a worker's copy-on-write view of a [`BaseTree`], seen from git.
//!
//! This module owns a worker tree's git side: its branch `grove/<run>/<n>` at the base,
//! its admin dir under `<common>/worktrees/ov-<run>-<n>/` (locked, since the host never
//! sees the files at the tree's path and `git worktree prune` would otherwise drop it),
//! its own index copied from the base's (stat data already right, so the worker's `git
//! status` reads no file it did not change), the `.git` pointer in its upper directory,
//! and its removal (only its upper and work directories: the base stays). It never
//! mounts anything (the executor does, in the worker's namespaces) and never writes into
//! the base tree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::base_tree::BaseTree;
use super::error::GitError;
use super::names::{CommitId, RunId, subtask_ref};
use super::upper_commit::UpperSource;
use super::worktree::{REGISTRATION, admin_head, discard_in_background};
use super::{Repo, canonical};

/// Why the admin dir is locked (git prints it in `git worktree list`).
const LOCK_REASON: &str = "grove overlay tree: its files exist only in grove's mount namespace\n";

/// Git settings for commands run inside an overlay tree (as `GIT_CONFIG_*` variables):
/// the overlay reports its own device number and, for copied-up files, new inodes, so
/// only size and mtime are compared; the untracked cache spares re-reading unchanged
/// directories.
const WORKER_GIT_CONFIG: [(&str, &str); 3] = [
    ("core.checkStat", "minimal"),
    ("core.trustCtime", "false"),
    ("core.untrackedCache", "true"),
];

/// What [`Repo::create_overlay_tree`] needs.
#[derive(Debug, Clone)]
pub struct OverlaySpec {
    /// The run the subtask belongs to.
    pub run: RunId,
    /// The subtask number `n` of branch `grove/<run>/<n>`.
    pub subtask: u32,
    /// The base tree the worker sees through its overlay (its commit is the run's base).
    pub base: BaseTree,
    /// Absolute path the overlay is mounted at in the worker's namespace, normally
    /// `Repo::default_worktrees_dir(run).join(n)`.
    pub path: PathBuf,
}

/// A worker's overlay tree as git knows it. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OverlayTree {
    run: RunId,
    subtask: u32,
    path: PathBuf,
    layers: PathBuf,
    admin_dir: PathBuf,
    base: BaseTree,
    start: CommitId,
}

impl OverlayTree {
    /// The run this tree belongs to.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    /// The subtask number `n`.
    pub fn subtask(&self) -> u32 {
        self.subtask
    }

    /// Short branch name, `grove/<run>/<n>`.
    pub fn branch(&self) -> String {
        self.run.subtask_branch(self.subtask)
    }

    /// Full branch ref, `refs/heads/grove/<run>/<n>`.
    pub fn branch_ref(&self) -> String {
        subtask_ref(&self.run, self.subtask)
    }

    /// Where the overlay is mounted (inside the worker's namespace only).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The overlay's upper directory: exactly what the worker changed.
    pub fn upper_dir(&self) -> PathBuf {
        self.layers.join("upper")
    }

    /// The overlay's work directory (same filesystem as the upper one).
    pub fn work_dir(&self) -> PathBuf {
        self.layers.join("work")
    }

    /// The overlay's lower directory: the base tree's files.
    pub fn lower_dir(&self) -> PathBuf {
        self.base.tree_dir()
    }

    /// The base tree this overlay shows.
    pub fn base_tree(&self) -> &BaseTree {
        &self.base
    }

    /// The admin dir of the tree inside the common git dir.
    pub fn admin_dir(&self) -> &Path {
        &self.admin_dir
    }

    /// The run's base commit.
    pub fn base(&self) -> CommitId {
        self.base.commit()
    }

    /// The branch tip when the tree was created.
    pub fn start(&self) -> CommitId {
        self.start
    }

    /// The `-o` options of the overlay mount, with `\`, `,` and `:` in paths escaped as
    /// the kernel reads them. Redirects and metadata-only copies stay off (the
    /// checkpoint refuses them): `redirect_dir=nofollow` (neither made nor followed; the
    /// kernel refuses `off` with `userxattr`, measured on 6.18) and `metacopy=off`.
    pub fn mount_options(&self) -> OsString {
        let mut options = OsString::from("lowerdir=");
        options.push(escape_mount_path(&self.lower_dir()));
        options.push(",upperdir=");
        options.push(escape_mount_path(&self.upper_dir()));
        options.push(",workdir=");
        options.push(escape_mount_path(&self.work_dir()));
        options.push(",userxattr,redirect_dir=nofollow,metacopy=off");
        options
    }

    /// What a checkpoint of this tree reads (see [`Repo::checkpoint_upper`]).
    pub fn upper_source(&self) -> UpperSource {
        UpperSource {
            run: self.run.clone(),
            subtask: self.subtask,
            admin_dir: self.admin_dir.clone(),
            upper: self.upper_dir(),
            lower: self.lower_dir(),
            base: self.base(),
        }
    }

    /// The `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<i>`/`GIT_CONFIG_VALUE_<i>` variables that
    /// keep the worker's own `git status` and `git diff` fast inside the overlay.
    pub fn git_env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "GIT_CONFIG_COUNT".to_owned(),
            WORKER_GIT_CONFIG.len().to_string(),
        )];
        for (i, (key, value)) in WORKER_GIT_CONFIG.iter().enumerate() {
            env.push((format!("GIT_CONFIG_KEY_{i}"), (*key).to_owned()));
            env.push((format!("GIT_CONFIG_VALUE_{i}"), (*value).to_owned()));
        }
        env
    }
}

impl Repo {
    /// Makes (or, on resume, finds again) subtask `spec.subtask`'s overlay tree: its
    /// branch at the base, its admin dir with an index copied from the base's, its empty
    /// upper and work directories with the `.git` pointer, and the empty mount point.
    /// Costs a few small files, whatever the repository's size.
    ///
    /// A branch with commits beyond the base cannot start an overlay tree (its upper
    /// directory would have to hold them): [`GitError::OverlayBranchAhead`], and the
    /// caller uses a git worktree.
    pub async fn create_overlay_tree(&self, spec: OverlaySpec) -> Result<OverlayTree, GitError> {
        if !spec.path.is_absolute() {
            return Err(GitError::InvalidName {
                what: "worktree path",
                value: spec.path.display().to_string(),
                reason: "must be absolute",
            });
        }
        let branch_ref = subtask_ref(&spec.run, spec.subtask);
        let base = spec.base.commit();
        let _guard = REGISTRATION.lock().await;
        let admin = self.common_dir().join("worktrees").join(format!(
            "ov-{}-{}",
            spec.run.as_str(),
            spec.subtask
        ));
        let start = match self.ref_target(&branch_ref)? {
            Some(tip) if tip == base => tip,
            Some(tip) if self.is_ancestor(base, tip)? => {
                return Err(GitError::OverlayBranchAhead {
                    branch: spec.run.subtask_branch(spec.subtask),
                    tip: tip.to_string(),
                    base: base.to_string(),
                });
            }
            Some(tip) => {
                return Err(GitError::BranchDiverged {
                    branch: spec.run.subtask_branch(spec.subtask),
                    tip: tip.to_string(),
                    base: base.to_string(),
                });
            }
            None => {
                self.git()
                    .args(["branch", "--no-track", "--"])
                    .arg(spec.run.subtask_branch(spec.subtask))
                    .arg(base.to_string())
                    .run()
                    .await?;
                base
            }
        };
        if let Some(path) = self.checked_out_at(&branch_ref)?
            && normalize_missing(&path) != normalize_missing(&spec.path)
        {
            return Err(GitError::BranchCheckedOutElsewhere {
                branch: spec.run.subtask_branch(spec.subtask),
                path,
            });
        }
        let layers = layers_dir(&spec.path);
        for dir in [
            &spec.path,
            &layers.join("upper"),
            &layers.join("work"),
            &admin,
        ] {
            std::fs::create_dir_all(dir).map_err(io("create", dir))?;
        }
        let path = canonical(&spec.path)?;
        let layers = canonical(&layers)?;
        if admin_head(&admin).as_deref() != Some(branch_ref.as_str()) {
            write_admin(&admin, &path, &branch_ref, &spec.base.index_path())?;
        }
        let pointer = layers.join("upper").join(".git");
        if std::fs::symlink_metadata(&pointer).is_err() {
            let text = format!("gitdir: {}\n", admin.display());
            std::fs::write(&pointer, text).map_err(io("write", &pointer))?;
        }
        Ok(OverlayTree {
            run: spec.run,
            subtask: spec.subtask,
            path,
            layers,
            admin_dir: admin,
            base: spec.base,
            start,
        })
    }

    /// Removes an overlay tree after its work is committed or archived: its admin dir,
    /// upper and work directories go to the trash at once and are deleted in the
    /// background; the base tree and the branch stay. The caller has unmounted it (or
    /// the worker's namespace is gone).
    pub async fn remove_overlay_tree(&self, tree: &OverlayTree) -> Result<(), GitError> {
        let trash = self.common_dir().join("grove").join("trash");
        let _guard = REGISTRATION.lock().await;
        discard_in_background(&tree.admin_dir, &trash)?;
        discard_in_background(&tree.layers, &trash)?;
        // The mount point is empty on the host's side; anything else in it is not ours.
        let _ = std::fs::remove_dir(&tree.path);
        Ok(())
    }
}

/// `<path>.layers`: the upper and work directories of the overlay mounted at `path`,
/// beside it (so on the same filesystem as the worktrees), never inside it.
fn layers_dir(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(OsString::from).unwrap_or_default();
    name.push(".layers");
    path.with_file_name(name)
}

/// Writes the admin dir of a linked worktree at `path` on `branch_ref`, locked, with a
/// copy of the base's index.
fn write_admin(
    admin: &Path,
    path: &Path,
    branch_ref: &str,
    base_index: &Path,
) -> Result<(), GitError> {
    let write = |name: &str, text: String| {
        let file = admin.join(name);
        std::fs::write(&file, text).map_err(io("write", &file))
    };
    let index = admin.join("index");
    std::fs::copy(base_index, &index).map_err(io("copy the base index to", &index))?;
    // The base index's date keeps its entries from being racily clean (see `base_tree`).
    let dated = std::fs::metadata(base_index)
        .and_then(|meta| meta.modified())
        .and_then(|date| {
            std::fs::File::options()
                .write(true)
                .open(&index)?
                .set_modified(date)
        });
    dated.map_err(io("date", &index))?;
    write("commondir", "../..\n".to_owned())?;
    write("gitdir", format!("{}\n", path.join(".git").display()))?;
    write("locked", LOCK_REASON.to_owned())?;
    // Last: a registration counts once its HEAD names the branch.
    write("HEAD", format!("ref: {branch_ref}\n"))
}

/// A mount option path: the kernel splits options at `,` and lower dirs at `:`.
fn escape_mount_path(path: &Path) -> OsString {
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut escaped = Vec::with_capacity(bytes.len());
    for byte in bytes {
        if matches!(byte, b'\\' | b',' | b':') {
            escaped.push(b'\\');
        }
        escaped.push(*byte);
    }
    std::os::unix::ffi::OsStringExt::from_vec(escaped)
}

fn normalize_missing(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GitError {
    let path = path.to_path_buf();
    move |source| GitError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_escaped_and_layers_sit_beside_the_mount_point() {
        assert_eq!(
            escape_mount_path(Path::new("/a,b:c\\d")),
            OsString::from("/a\\,b\\:c\\\\d")
        );
        assert_eq!(
            layers_dir(Path::new("/cache/run/3")),
            PathBuf::from("/cache/run/3.layers")
        );
    }
}
