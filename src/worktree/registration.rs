//! A linked worktree registered in process, as `git worktree add --no-checkout` writes
//! one (gitrepository-layout(5): `worktrees/<id>/{gitdir,commondir,HEAD}` and the
//! worktree's `.git` file), without starting git.
//!
//! A run registers a worktree per `--jobs` slot while the lead's first call is in flight;
//! at 32 slots the `git worktree add` processes (each reading every other registration)
//! were 4 to 8 ms apiece on this machine, and the last subtasks' trees were still being
//! made after the lead's reply, so their workers started up to 170 ms late. What is
//! written here is read by the real git inside every tree and by `git worktree
//! prune/remove`; the tests run both against it.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

use super::spare;
use crate::git::CommitId;
use crate::git::GitError;
use crate::git::{Repo, canonical};

/// Written while a registration is incomplete, as git does: `git worktree prune` keeps
/// a locked registration, so one run elsewhere never removes it half made.
const INITIALIZING: &[u8] = b"initializing\n";

impl Repo {
    /// Registers the empty or missing directory `path` as a worktree on `branch_ref`,
    /// creating that branch at `create_at` first when given (it must not exist then).
    /// Returns the registration's admin dir. On failure nothing of it is left: the admin
    /// dir is removed, and so is a branch made here.
    pub(super) fn register_worktree(
        &self,
        path: &Path,
        branch_ref: &str,
        create_at: Option<CommitId>,
    ) -> Result<PathBuf, GitError> {
        if let Some(start) = create_at {
            let repo = self.libgit();
            repo.reference(
                branch_ref,
                start.oid(),
                false,
                &format!("branch: Created from {start}"),
            )
            .map_err(|source| GitError::write(branch_ref.to_owned(), source))?;
        }
        let made = self.worktree_dir(path).and_then(|(path, root, name)| {
            let files = registration_files(&path, branch_ref);
            if let Some(admin) = spare::take(self.common_dir(), &root, &name, &path, &files) {
                return Ok(admin);
            }
            let admin = unique_dir(&root, &name).map_err(GitError::io("create", &root))?;
            match write_registration(&path, &admin, branch_ref) {
                Ok(()) => Ok(admin),
                Err(error) => {
                    let _ = std::fs::remove_dir_all(&admin);
                    Err(error)
                }
            }
        });
        if let (Err(_), Some(start)) = (&made, create_at) {
            let _ = self.delete_new_branch(branch_ref, start);
        }
        made
    }

    /// Makes `path` (if missing) and `<common>/worktrees/`; returns `path` canonical, that
    /// directory, and the name its admin dir is given (as git names it, after `path`).
    fn worktree_dir(&self, path: &Path) -> Result<(PathBuf, PathBuf, OsString), GitError> {
        let root = self.common_dir().join("worktrees");
        std::fs::create_dir_all(&root).map_err(GitError::io("create", &root))?;
        match std::fs::create_dir(path) {
            Err(error) if error.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(GitError::io("create", path)(error));
            }
            _ => {}
        }
        let path = canonical(path)?;
        let name = path
            .file_name()
            .map_or_else(|| "worktree".into(), std::ffi::OsStr::to_os_string);
        Ok((path, root, name))
    }

    /// Deletes the branch this call made at `start`, if it is still there: a branch
    /// someone moved meanwhile holds their work. (libgit2's delete checks the value it
    /// looked up, under the ref's lock.)
    fn delete_new_branch(&self, reference: &str, start: CommitId) -> Result<(), git2::Error> {
        let repo = self.libgit();
        let mut branch = repo.find_reference(reference)?;
        if branch.target() == Some(start.oid()) {
            branch.delete()?;
        }
        Ok(())
    }
}

/// The files of the registration of worktree `path` on `branch_ref`, with their text.
fn registration_files(path: &Path, branch_ref: &str) -> [(&'static str, Vec<u8>); 3] {
    let mut gitdir = path.join(".git").into_os_string().into_vec();
    gitdir.push(b'\n');
    [
        ("commondir", b"../..\n".to_vec()),
        ("gitdir", gitdir),
        ("HEAD", format!("ref: {branch_ref}\n").into_bytes()),
    ]
}

/// Writes the registration of worktree `path` on `branch_ref` into `admin`, locked until
/// its last file is written.
fn write_registration(path: &Path, admin: &Path, branch_ref: &str) -> Result<(), GitError> {
    let locked = admin.join("locked");
    std::fs::write(&locked, INITIALIZING).map_err(GitError::io("write", &locked))?;
    for (file, text) in registration_files(path, branch_ref) {
        let file = admin.join(file);
        std::fs::write(&file, text).map_err(GitError::io("write", &file))?;
    }
    for dir in ["refs", "logs"] {
        let dir = admin.join(dir);
        std::fs::create_dir(&dir).map_err(GitError::io("create", &dir))?;
    }
    let dot_git = path.join(".git");
    let mut pointer = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&dot_git)
        .map_err(GitError::io("create", &dot_git))?;
    pointer
        .write_all(&[b"gitdir: ", admin.as_os_str().as_bytes(), b"\n"].concat())
        .map_err(GitError::io("write", &dot_git))?;
    std::fs::remove_file(&locked).map_err(GitError::io("remove", &locked))
}

/// Creates `<root>/<name>`, or `<name>1`, `<name>2`, … when taken (as git names them).
fn unique_dir(root: &Path, name: &std::ffi::OsStr) -> std::io::Result<PathBuf> {
    let mut counter = 0u32;
    loop {
        let mut candidate = name.to_os_string();
        if counter > 0 {
            candidate.push(counter.to_string());
        }
        let dir = root.join(candidate);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => counter += 1,
            Err(error) => return Err(error),
        }
    }
}
