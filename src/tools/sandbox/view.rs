//! The file system one worktree's commands see, planned in grove's process: an empty
//! root into which only what is granted is bound.
//!
//! This file owns the plan: the list of mount operations a command's process makes (see
//! `mount_ops`) before it pivots into the new root — the system read-only, the tree
//! read-write (also at the user's checkout path, so an editable install reaches the
//! tree's code), a private `/tmp`, a minimal `/dev`, a `/proc` of its own, an empty
//! `$HOME` holding only the granted toolchain stores, and the repository's git data with
//! everything not this tree's covered. A path the plan does not bind does not exist for
//! the command. It must never bind a path writable that is not the tree, its `/tmp` or a
//! cache the user made writable, and never bind anything of the user's checkout but its
//! shared directories.

use std::ffi::CString;
use std::path::{Component, Path, PathBuf};

use super::grants::{Grants, SYSTEM_ROOTS};

/// Where a command's git finds its repository's data in the view (the common dir, with
/// everything that is not this tree's covered). Not its host path: that may lie in the
/// user's checkout, whose path shows the tree.
pub const GIT_VIEW: &str = "/.grove/git";

/// [`GIT_VIEW`] as the kernel takes it (granted in the command's own process).
pub(super) const GIT_VIEW_C: &std::ffi::CStr = c"/.grove/git";

/// `path` as the kernel takes it; `None` for one with a NUL byte (no such path exists).
pub(super) fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).ok()
}

/// The file systems a command's process mounts of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FsKind {
    Tmpfs,
    Devpts,
    /// A copy-on-write view of a directory: what the command writes lands in a private
    /// upper directory, never in the lower one.
    Overlay,
}

/// One step of building the view; every path is where the new root is built.
#[derive(Debug)]
pub(super) enum MountOp {
    /// A directory (one already there is fine).
    Dir(CString),
    /// An empty file to bind a file onto (one already there is fine).
    File(CString),
    /// A symbolic link reading `link`.
    Symlink { link: CString, at: CString },
    /// A file system of the command's own; `data` its mount options.
    Fs {
        kind: FsKind,
        at: CString,
        data: CString,
        required: bool,
    },
    /// `source` (with what is mounted beneath it) bound at `at`; read-only unless
    /// `writable`. A bind that fails refuses the command when `required`; one made but
    /// not read-only always does.
    Bind {
        source: CString,
        at: CString,
        writable: bool,
        required: bool,
    },
    /// A file system of the command's own made read-only once filled.
    ReadOnly(CString),
}

/// The view of one worktree's commands.
#[derive(Debug)]
pub(super) struct ViewPlan {
    /// The empty directory the new root is mounted on before the command pivots into it.
    pub staging: CString,
    /// Where the command's own `/proc` is mounted before the pivot.
    pub proc_at: CString,
    pub ops: Vec<MountOp>,
    /// Each host path bound, and where the view shows it.
    binds: Vec<(PathBuf, PathBuf)>,
    /// Whether [`GIT_VIEW`] is a copy-on-write view the command's git may write.
    pub git_writable: bool,
    /// A disposable view's tree (its path in the view), written through an overlay.
    pub tree_overlay: Option<CString>,
    /// The staging directory, as a path.
    staging_path: PathBuf,
}

impl ViewPlan {
    /// The view path `at` where the root is built, before the pivot.
    pub(super) fn staged(&self, at: &Path) -> PathBuf {
        self.staging_path.join(at.strip_prefix("/").unwrap_or(at))
    }

    /// Where the view shows the host path `path` (none when it is not granted).
    pub(super) fn translate(&self, path: &Path) -> Vec<PathBuf> {
        self.binds
            .iter()
            .filter_map(|(source, at)| path.strip_prefix(source).ok().map(|rest| at.join(rest)))
            .filter(|at| !at.as_os_str().is_empty())
            .map(|at| {
                if at.as_os_str() == "." {
                    PathBuf::from("/")
                } else {
                    at
                }
            })
            .collect()
    }
}

/// The repository's git data one tree's commands read: the common dir with its `config`
/// sanitized, every grove ref but the tree's own branch covered, and of the worktrees'
/// admin dirs only its own.
#[derive(Debug, Clone)]
pub(super) struct GitMounts {
    /// The common dir, canonical.
    pub common: PathBuf,
    /// This tree's admin dir (beneath `common/worktrees`).
    pub admin: PathBuf,
    /// This tree's branch ref file and its path relative to `common`.
    pub own_ref: Option<(PathBuf, PathBuf)>,
    /// Directories of `common` covered whole (grove's store, refs and logs).
    pub covered: Vec<PathBuf>,
    /// Sanitized copies bound over the common dir's files: `(copy, relative path)`.
    pub copies: Vec<(PathBuf, PathBuf)>,
    /// The pointer file the view shows as the tree's `.git`: it names [`GIT_VIEW`].
    pub pointer: PathBuf,
    /// The private upper and work directories of the copy-on-write views of the common
    /// dir and of the admin dir, so that the command's git can stage, stash and branch
    /// without writing the repository; `None`: both read-only.
    pub writable: Option<GitUppers>,
    /// The hooks the sanitized config names (`git commit` says why grove commits).
    pub hooks: Option<PathBuf>,
}

/// The private directories the command's git writes in: `(upper, work)` of each overlay.
#[derive(Debug, Clone)]
pub(super) struct GitUppers {
    pub common: (PathBuf, PathBuf),
    pub admin: (PathBuf, PathBuf),
    /// A private directory over each of [`GitMounts::covered`], in its order: empty, but
    /// for a copy of the tree's own branch ref where that lies.
    pub covers: Vec<PathBuf>,
}

/// Where the view shows the hooks of the command's git.
pub const GIT_HOOKS_VIEW: &str = "/.grove/hooks";

/// What one worktree's view is built from.
#[derive(Debug)]
pub(super) struct ViewSpec<'a> {
    /// An empty directory of grove's, for the new root.
    pub staging: &'a Path,
    pub grants: &'a Grants,
    /// `/etc`'s entries only their owner may read: covered.
    pub private_etc: &'a [PathBuf],
    /// Files `/etc`'s links lead to (`resolv.conf`), bound where they are.
    pub etc_links: &'a [PathBuf],
    /// Writable besides the tree and `/tmp` (the caches a setup command fills).
    pub writable: &'a [PathBuf],
    /// The tree, as its commands name it.
    pub tree: &'a Path,
    /// The commands' private temporary directory, shown as `/tmp`.
    pub temp_dir: &'a Path,
    /// The checkout's shared directories and where in the tree they show.
    pub shared: &'a [(PathBuf, PathBuf)],
    /// The user's checkout: its path shows the tree.
    pub checkout: Option<&'a Path>,
    pub home: Option<&'a Path>,
    pub git: Option<&'a GitMounts>,
    /// Host paths covered wherever a bind shows them (the run store, `deny_read`).
    pub hidden: &'a [PathBuf],
    /// An empty read-only file, bound over a file that is covered.
    pub empty_file: &'a Path,
    /// For a disposable view: the overlay's upper and work directories the tree is seen
    /// through, so that nothing a command writes reaches it.
    pub tree_scratch: Option<&'a (PathBuf, PathBuf)>,
}

/// `path` as an overlay mount option takes it: its separators (`,` between options, `:`
/// between lower layers) and the escape itself escaped.
fn overlay_escape(path: &Path) -> String {
    let mut escaped = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, ',' | ':' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Devices every command reads and writes, or only reads.
const DEVICES: &[(&str, bool)] = &[
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/full", true),
    ("/dev/tty", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
];

const DEV_LINKS: &[(&str, &str)] = &[
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
    ("/dev/ptmx", "pts/ptmx"),
];

/// Plans the view `spec` describes.
pub(super) fn plan(spec: &ViewSpec<'_>) -> ViewPlan {
    let mut view = Builder::new(spec.staging);
    view.fs(FsKind::Tmpfs, Path::new("/"), "mode=0755,size=16m", true);
    for root in SYSTEM_ROOTS {
        if let Ok(link) = std::fs::read_link(root) {
            view.symlink(&link, Path::new(root));
        }
    }
    // Mounted before what may lie beneath them (a home or a tree under `/tmp`).
    view.bind(spec.temp_dir, Path::new("/tmp"), true, true);
    view.dev();
    view.dir(Path::new("/proc"));
    // Nothing of the user's checkout is granted but its shared directories.
    let mut read: Vec<&Path> = spec
        .grants
        .read
        .iter()
        .map(|grant| grant.path.as_path())
        .filter(|path| {
            spec.checkout
                .is_none_or(|checkout| !path.starts_with(checkout))
        })
        .collect();
    read.sort_by_key(|path| path.components().count());
    for path in read {
        view.bind(path, path, false, true);
    }
    for target in spec.etc_links {
        view.bind(target, target, false, false);
    }
    if let Some(home) = spec.home.filter(|home| !view.shows(home)) {
        view.dir(home);
    }
    for path in spec.writable {
        if let Ok(path) = path.canonicalize() {
            view.bind(&path, &path, true, false);
        }
    }
    match spec.tree_scratch {
        Some(scratch) => {
            view.overlay(spec.tree, scratch, spec.tree);
            view.tree_overlay = c_path(spec.tree);
        }
        None => view.bind(spec.tree, spec.tree, true, true),
    }
    for (source, target) in spec.shared {
        view.bind(source, target, false, false);
    }
    let checkout = spec.checkout.filter(|checkout| {
        let apart = |other: &Path| !checkout.starts_with(other) && !other.starts_with(checkout);
        apart(spec.tree) && spec.home.is_none_or(apart)
    });
    if let Some(checkout) = checkout {
        // From the view's tree, so that its shared directories come along.
        view.rebind(spec.tree, checkout);
    }
    if let Some(git) = spec.git {
        view.git(git, spec.tree, checkout);
    }
    for covered in spec.private_etc.iter().chain(spec.hidden) {
        view.cover(covered, spec.empty_file);
    }
    view.read_only(Path::new("/"));
    view.finish()
}

struct Builder {
    staging: PathBuf,
    ops: Vec<MountOp>,
    /// The directories planned so far (view paths).
    made: Vec<PathBuf>,
    binds: Vec<(PathBuf, PathBuf)>,
    git_writable: bool,
    tree_overlay: Option<CString>,
}

impl Builder {
    fn new(staging: &Path) -> Self {
        Self {
            staging: staging.to_path_buf(),
            ops: Vec::new(),
            made: vec![PathBuf::from("/")],
            binds: Vec::new(),
            git_writable: false,
            tree_overlay: None,
        }
    }

    /// `at` (a view path) where the root is built.
    fn staged(&self, at: &Path) -> Option<CString> {
        let relative = at.strip_prefix("/").unwrap_or(at);
        let staged = if relative.as_os_str().is_empty() {
            self.staging.clone()
        } else {
            self.staging.join(relative)
        };
        c_path(&staged)
    }

    /// Whether a bind shows `path` already.
    fn shows(&self, path: &Path) -> bool {
        self.binds.iter().any(|(_, at)| path.starts_with(at))
    }

    /// `at` and the directories above it.
    fn dir(&mut self, at: &Path) {
        let mut path = PathBuf::from("/");
        for component in at.components() {
            let Component::Normal(name) = component else {
                continue;
            };
            path.push(name);
            if self.made.contains(&path) {
                continue;
            }
            if let Some(staged) = self.staged(&path) {
                self.ops.push(MountOp::Dir(staged));
            }
            self.made.push(path.clone());
        }
    }

    fn symlink(&mut self, link: &Path, at: &Path) {
        if let Some(parent) = at.parent() {
            self.dir(parent);
        }
        if let (Some(link), Some(at)) = (c_path(link), self.staged(at)) {
            self.ops.push(MountOp::Symlink { link, at });
        }
    }

    fn fs(&mut self, kind: FsKind, at: &Path, data: &str, required: bool) {
        self.dir(at);
        if let (Some(at), Ok(data)) = (self.staged(at), CString::new(data)) {
            self.ops.push(MountOp::Fs {
                kind,
                at,
                data,
                required,
            });
        }
    }

    fn read_only(&mut self, at: &Path) {
        if let Some(at) = self.staged(at) {
            self.ops.push(MountOp::ReadOnly(at));
        }
    }

    /// Binds `source` at `at`: a directory onto a directory, anything else onto a file.
    fn bind(&mut self, source: &Path, at: &Path, writable: bool, required: bool) {
        let Ok(meta) = std::fs::metadata(source) else {
            return;
        };
        if meta.is_dir() {
            self.dir(at);
        } else {
            if let Some(parent) = at.parent() {
                self.dir(parent);
            }
            if let Some(staged) = self.staged(at) {
                self.ops.push(MountOp::File(staged));
            }
        }
        if let (Some(source_c), Some(at_c)) = (c_path(source), self.staged(at)) {
            self.ops.push(MountOp::Bind {
                source: source_c,
                at: at_c,
                writable,
                required,
            });
            self.binds.push((source.to_path_buf(), at.to_path_buf()));
        }
    }

    /// Shows the view's `from` (with what is mounted beneath it there) at `at` too,
    /// writable as it is.
    fn rebind(&mut self, from: &Path, at: &Path) {
        self.dir(at);
        let shown: Vec<(PathBuf, PathBuf)> = self
            .binds
            .iter()
            .filter(|(_, shown_at)| shown_at.starts_with(from))
            .filter_map(|(source, shown_at)| {
                let rest = shown_at.strip_prefix(from).ok()?;
                Some((source.clone(), at.join(rest)))
            })
            .collect();
        if let (Some(source), Some(at_c)) = (self.staged(from), self.staged(at)) {
            self.ops.push(MountOp::Bind {
                source,
                at: at_c,
                writable: true,
                required: false,
            });
            self.binds.extend(shown);
        }
    }

    /// A minimal `/dev`: the harmless devices, the standard links, its own ptys and
    /// shared memory (best effort: a kernel that refuses them leaves them out).
    fn dev(&mut self) {
        for (device, _) in DEVICES {
            self.bind(Path::new(device), Path::new(device), true, false);
        }
        for (at, link) in DEV_LINKS {
            self.symlink(Path::new(link), Path::new(at));
        }
        self.fs(
            FsKind::Devpts,
            Path::new("/dev/pts"),
            "newinstance,ptmxmode=0666,mode=0620",
            false,
        );
        self.fs(
            FsKind::Tmpfs,
            Path::new("/dev/shm"),
            "mode=1777,size=256m",
            false,
        );
    }

    /// Hides the host path `hidden` wherever a bind shows it: an empty directory (a
    /// file system of its own, read-only) over a directory, the empty file over a file.
    fn cover(&mut self, hidden: &Path, empty_file: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(hidden) else {
            return;
        };
        let shown: Vec<PathBuf> = self
            .binds
            .iter()
            .filter_map(|(source, at)| hidden.strip_prefix(source).ok().map(|rest| at.join(rest)))
            .filter(|at| at.components().count() > 1)
            .collect();
        for at in shown {
            if meta.is_dir() {
                self.empty_dir(&at);
            } else if let (Some(source), Some(at)) = (c_path(empty_file), self.staged(&at)) {
                self.ops.push(MountOp::Bind {
                    source,
                    at,
                    writable: false,
                    required: true,
                });
            }
        }
    }

    fn empty_dir(&mut self, at: &Path) {
        self.fs(FsKind::Tmpfs, at, "mode=0755,size=64k", true);
        self.read_only(at);
    }

    /// The repository's git data at [`GIT_VIEW`], and the tree's `.git` (at the tree
    /// and at the checkout's path) naming it.
    fn git(&mut self, git: &GitMounts, tree: &Path, checkout: Option<&Path>) {
        let view = Path::new(GIT_VIEW);
        let uppers = git.writable.as_ref();
        self.git_writable = uppers.is_some();
        match uppers {
            Some(uppers) => self.overlay(&git.common, &uppers.common, view),
            None => self.bind(&git.common, view, false, true),
        }
        for (n, covered) in git.covered.iter().enumerate() {
            let Ok(relative) = covered.strip_prefix(&git.common) else {
                continue;
            };
            // Covered by an empty directory: a private one the command's git may write
            // (its own branch's ref and reflog move with a stash or a reset), or a
            // read-only one of the view's own.
            let private = uppers.and_then(|uppers| uppers.covers.get(n));
            match private {
                Some(dir) => self.bind(dir, &view.join(relative), true, true),
                None => self.fs(
                    FsKind::Tmpfs,
                    &view.join(relative),
                    "mode=0755,size=64k",
                    true,
                ),
            }
            if let Some((file, own)) = &git.own_ref
                && own.starts_with(relative)
                && private.is_none()
            {
                self.bind(file, &view.join(own), false, true);
            }
            if let Ok(own) = git.admin.strip_prefix(&git.common)
                && own.starts_with(relative)
            {
                match uppers {
                    Some(uppers) => self.overlay(&git.admin, &uppers.admin, &view.join(own)),
                    None => self.bind(&git.admin, &view.join(own), false, true),
                }
            }
            if private.is_none() {
                self.read_only(&view.join(relative));
            }
        }
        for (copy, relative) in &git.copies {
            self.bind(copy, &view.join(relative), false, true);
        }
        if let Some(hooks) = &git.hooks {
            self.bind(hooks, Path::new(GIT_HOOKS_VIEW), false, true);
        }
        for root in std::iter::once(tree).chain(checkout) {
            let dot_git = root.join(".git");
            if std::fs::symlink_metadata(tree.join(".git")).is_ok_and(|meta| meta.is_file()) {
                self.bind(&git.pointer, &dot_git, false, true);
            }
        }
    }

    /// A copy-on-write view of `lower` at `at`, its writes in `upper` (with overlayfs's
    /// `work` directory beside it).
    fn overlay(&mut self, lower: &Path, (upper, work): &(PathBuf, PathBuf), at: &Path) {
        let data = format!(
            // In a user namespace the overlay keeps its own attributes in `user.overlay.*`.
            "lowerdir={},upperdir={},workdir={},userxattr",
            overlay_escape(lower),
            overlay_escape(upper),
            overlay_escape(work)
        );
        self.fs(FsKind::Overlay, at, &data, true);
        self.binds.push((lower.to_path_buf(), at.to_path_buf()));
    }

    fn finish(self) -> ViewPlan {
        let proc_at = self.staged(Path::new("/proc")).unwrap_or_default();
        ViewPlan {
            staging: c_path(&self.staging).unwrap_or_default(),
            proc_at,
            ops: self.ops,
            binds: self.binds,
            git_writable: self.git_writable,
            tree_overlay: self.tree_overlay,
            staging_path: self.staging,
        }
    }
}
