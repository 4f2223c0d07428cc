//! Sealed git repositories for tests: built in a temp dir, with no user or system
//! config, a temp `HOME`, and fixed author, committer and dates, set on each command
//! (never process-wide), so a test sees the same repository on every machine.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use grove::git::{CommitId, GitOptions, Repo};

/// A temp dir holding a repository at `root/repo`, a `HOME` and room for more.
pub struct GitFixture {
    pub dir: tempfile::TempDir,
    /// The user's work tree.
    pub repo: PathBuf,
}

/// The sealed environment every fixture command and every library call gets.
pub fn sealed_env(home: &Path) -> Vec<(OsString, OsString)> {
    [
        ("GIT_CONFIG_GLOBAL", OsString::from("/dev/null")),
        ("GIT_CONFIG_NOSYSTEM", OsString::from("1")),
        ("HOME", home.as_os_str().to_owned()),
        ("XDG_CONFIG_HOME", home.join(".config").into_os_string()),
        // Worktrees go under the cache directory: the fixture's, never the machine's.
        ("XDG_CACHE_HOME", home.join(".cache").into_os_string()),
        ("GIT_AUTHOR_NAME", OsString::from("Test Author")),
        ("GIT_AUTHOR_EMAIL", OsString::from("author@example.com")),
        ("GIT_AUTHOR_DATE", OsString::from("2026-01-01T00:00:00Z")),
        ("GIT_COMMITTER_NAME", OsString::from("Test Committer")),
        (
            "GIT_COMMITTER_EMAIL",
            OsString::from("committer@example.com"),
        ),
        ("GIT_COMMITTER_DATE", OsString::from("2026-01-01T00:00:00Z")),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), v))
    .collect()
}

/// Runs git in `dir` with the sealed env; panics with stderr on failure.
pub fn git_in(home: &Path, dir: &Path, args: &[&str]) -> String {
    let output = sealed_command(home, dir, args).output().unwrap();
    assert!(
        output.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned()
}

/// A sealed `git` command in `dir`, for tests that inspect failures themselves.
pub fn sealed_command(home: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(&key);
        }
    }
    cmd.envs(sealed_env(home)).current_dir(dir).args(args);
    cmd
}

impl GitFixture {
    /// An empty repository on branch `main`.
    pub fn empty() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let fixture = Self { dir, repo };
        fixture.git(&["init", "--quiet", "--initial-branch=main"]);
        fixture
    }

    /// A repository on `main` with one commit holding `files`.
    pub fn with_files(files: &[(&str, &str)]) -> Self {
        let fixture = Self::empty();
        for (path, content) in files {
            fixture.write(path, content);
        }
        fixture.commit_all("initial");
        fixture
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Runs git in the user's work tree.
    pub fn git(&self, args: &[&str]) -> String {
        git_in(&self.home(), &self.repo, args)
    }

    /// Writes a file in the user's work tree, creating directories.
    pub fn write(&self, path: &str, content: impl AsRef<[u8]>) {
        write_file(&self.repo, path, content);
    }

    pub fn read(&self, path: &str) -> Vec<u8> {
        std::fs::read(self.repo.join(path)).unwrap()
    }

    /// Commits everything in the work tree; returns the commit.
    pub fn commit_all(&self, message: &str) -> CommitId {
        self.git(&["add", "--all"]);
        self.git(&["commit", "--quiet", "--allow-empty", "-m", message]);
        self.rev("HEAD")
    }

    pub fn rev(&self, rev: &str) -> CommitId {
        CommitId::parse(&self.git(&["rev-parse", "--verify", rev])).unwrap()
    }

    /// A commit on a new branch `name` from `from` changing `files`, without touching
    /// the user's work tree (built with a temporary index).
    pub fn commit_on_branch(
        &self,
        name: &str,
        from: &str,
        files: &[(&str, Option<&str>)],
    ) -> CommitId {
        let scratch = self
            .dir
            .path()
            .join(format!("scratch-{}", name.replace('/', "-")));
        git_in(
            &self.home(),
            &self.repo,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                name,
                scratch.to_str().unwrap(),
                from,
            ],
        );
        for (path, content) in files {
            match content {
                Some(content) => write_file(&scratch, path, content),
                None => std::fs::remove_file(scratch.join(path)).unwrap(),
            }
        }
        git_in(&self.home(), &scratch, &["add", "--all"]);
        git_in(&self.home(), &scratch, &["commit", "--quiet", "-m", name]);
        let commit = self.rev(name);
        git_in(
            &self.home(),
            &self.repo,
            &["worktree", "remove", "--force", scratch.to_str().unwrap()],
        );
        commit
    }

    /// Where subtask `n` of run `run_id` has its worktree: under the fixture's cache
    /// directory, `<home>/.cache/grove/<repo>-<hash>/<run>/<n>` (the folder is found, not
    /// computed; a path that does not exist yet when no run has created it).
    pub fn worktree_dir(&self, run_id: &str, n: u32) -> PathBuf {
        let grove = self.home().join(".cache").join("grove");
        let mut folders: Vec<PathBuf> = std::fs::read_dir(&grove)
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        folders.sort();
        folders
            .iter()
            .map(|folder| folder.join(run_id).join(n.to_string()))
            .find(|path| path.exists())
            .unwrap_or_else(|| {
                grove
                    .join("unknown-repository")
                    .join(run_id)
                    .join(n.to_string())
            })
    }

    /// What runs of this repository left in git and on disk besides their results: the
    /// subtask branches (a run keeps `result` and `squashed`), every worktree registered
    /// but the user's, and every path under the repository's folder in the cache
    /// directory but the base trees copy-on-write worktrees reuse (`bases/`), and that
    /// folder itself when it is empty.
    pub fn leftovers(&self) -> Leftovers {
        let branches = self.git(&[
            "for-each-ref",
            "--format=%(refname:short)",
            "refs/heads/grove/",
        ]);
        let branches = branches
            .lines()
            .filter(|branch| !branch.ends_with("/result") && !branch.ends_with("/squashed"))
            .map(str::to_owned)
            .collect();
        let worktrees = self.git(&["worktree", "list", "--porcelain"]);
        let worktrees = worktrees
            .lines()
            .filter_map(|line| line.strip_prefix("worktree "))
            .skip(1)
            .map(str::to_owned)
            .collect();
        let mut on_disk = Vec::new();
        let grove = self.home().join(".cache").join("grove");
        for folder in std::fs::read_dir(&grove).into_iter().flatten().flatten() {
            let entries: Vec<_> = std::fs::read_dir(folder.path())
                .into_iter()
                .flatten()
                .flatten()
                .collect();
            if entries.is_empty() {
                // An empty folder is a leftover too.
                on_disk.push(folder.path().strip_prefix(&grove).unwrap().to_owned());
            }
            for entry in entries {
                if entry.file_name() != "bases" {
                    on_disk.push(entry.path().strip_prefix(&grove).unwrap().to_owned());
                }
            }
        }
        on_disk.sort();
        let kept = ["runs", "base-checks", "lock", "spares"];
        let mut in_git_dir: Vec<String> = std::fs::read_dir(self.repo.join(".git/grove"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !kept.contains(&name.as_str()))
            .collect();
        in_git_dir.sort();
        Leftovers {
            branches,
            worktrees,
            on_disk,
            in_git_dir,
        }
    }

    /// Library options with the sealed env.
    pub fn options(&self) -> GitOptions {
        GitOptions {
            env: sealed_env(&self.home()),
            ..GitOptions::default()
        }
    }

    pub async fn open(&self) -> Repo {
        Repo::open(&self.repo, self.options()).await.unwrap()
    }

    /// A snapshot of everything the user could lose: every file under the work tree
    /// (including `.git/index`) with its bytes, plus `git status`.
    pub fn user_state(&self) -> (Vec<(String, Vec<u8>)>, String) {
        let mut files = Vec::new();
        collect_files(&self.repo, &self.repo, &mut files);
        files.sort();
        let status = self.git(&[
            "status",
            "--porcelain=v1",
            "--untracked-files=all",
            "--ignored",
        ]);
        (files, status)
    }
}

pub fn write_file(root: &Path, path: &str, content: impl AsRef<[u8]>) {
    let full = root.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(full, content).unwrap();
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if relative == ".git" {
            out.push((
                ".git/index".to_owned(),
                std::fs::read(path.join("index")).unwrap_or_default(),
            ));
        } else if meta.is_dir() {
            collect_files(root, &path, out);
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            out.push((relative, target.to_string_lossy().into_owned().into_bytes()));
        } else {
            out.push((relative, std::fs::read(&path).unwrap()));
        }
    }
}

/// What runs left behind ([`GitFixture::leftovers`]); `Leftovers::default()` is nothing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub branches: Vec<String>,
    pub worktrees: Vec<String>,
    /// Paths relative to the cache directory's `grove/` folder.
    pub on_disk: Vec<PathBuf>,
    /// Entries of `.git/grove/` but the runs' records (`runs/`, `base-checks/`, the
    /// `lock`) and the registrations kept for the next run (`spares/`).
    pub in_git_dir: Vec<String>,
}
