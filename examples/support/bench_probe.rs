//! What a bench run of `grove run` wrote where, and when: the disk one worker's tree
//! takes while its worker runs, what is left on disk after the run, and the milestones of
//! a run seen from outside (the base's build folder, its completion and setup record,
//! each tree's registration and mount), polled from the file system every few ms.
//!
//! Sizes come from `du` itself (`du -s -B1`, and with `--apparent-size`), so hard links
//! are counted once and directories count as `du` counts them.

#![allow(dead_code, reason = "each bench uses what it needs of this file")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes on disk and apparent bytes of some paths, as `du -s` counts them together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Du {
    pub disk: u64,
    pub apparent: u64,
}

impl std::fmt::Display for Du {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on disk / {} apparent",
            human(self.disk),
            human(self.apparent)
        )
    }
}

/// `1.23 MiB`, `456 KiB`, `789 B`.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / 1024.0 / 1024.0)
    } else if b >= 1024.0 {
        format!("{:.0} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// `du -s` of `paths` together (missing ones skipped); zero for none.
pub fn du(paths: &[PathBuf]) -> Du {
    let present: Vec<&PathBuf> = paths
        .iter()
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    if present.is_empty() {
        return Du::default();
    }
    let total = |apparent: bool| -> u64 {
        let mut command = Command::new("du");
        command.args(["-s", "-c", "-B1"]);
        if apparent {
            command.arg("--apparent-size");
        }
        let output = command.args(&present).output();
        output
            .ok()
            .and_then(|out| {
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.lines()
                    .last()
                    .and_then(|line| line.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    };
    Du {
        disk: total(false),
        apparent: total(true),
    }
}

/// Where a run keeps things: the repository's `.git` and grove's cache for it.
#[derive(Debug, Clone)]
pub struct Places {
    pub git_dir: PathBuf,
    /// `<XDG_CACHE_HOME>/grove`.
    pub cache: PathBuf,
}

impl Places {
    /// `<cache>/grove/<repo>-<hash>/`: the only entry of the cache for one repository.
    fn repo_cache(&self) -> Option<PathBuf> {
        children(&self.cache).into_iter().find(|p| p.is_dir())
    }

    fn bases(&self) -> Option<PathBuf> {
        self.repo_cache().map(|c| c.join("bases"))
    }

    /// The run folders of the cache (every entry but `bases`).
    fn run_dirs(&self) -> Vec<PathBuf> {
        self.repo_cache()
            .map(|c| {
                children(&c)
                    .into_iter()
                    .filter(|p| p.file_name().is_some_and(|n| n != "bases") && p.is_dir())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn children(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.sort();
    found
}

/// What grove wrote for one worker, each part on its own and all together.
#[derive(Debug, Clone, Default)]
pub struct WorkerDisk {
    /// Its registration under `.git/worktrees/`.
    pub admin: Du,
    /// The index in it.
    pub index: Du,
    /// `<tree>.cow/` (upper and work directories), copy-on-write trees only.
    pub layers: Du,
    /// The tree's own path as the host sees it (a mount point, or a git checkout).
    pub tree: Du,
    pub total: Du,
    /// What the worker's paths add to the base folders' (`du` counts a file hard-linked
    /// from a base once): the disk this worker costs beyond what every worker shares.
    pub beyond_base: Du,
    /// The paths measured.
    pub paths: Vec<PathBuf>,
}

/// The disk of the worker whose tree holds `marker` (a file it wrote) at `rel`; `None`
/// when no tree does.
pub fn worker_disk(places: &Places, rel: &str, marker: &str) -> Option<WorkerDisk> {
    let tree = places
        .run_dirs()
        .into_iter()
        .flat_map(|run| children(&run))
        .find(|t| {
            let name = t.to_string_lossy();
            if name.ends_with(".cow") {
                return false;
            }
            let upper = PathBuf::from(format!("{name}.cow")).join("upper").join(rel);
            [upper, t.join(rel)]
                .iter()
                .any(|file| std::fs::read_to_string(file).is_ok_and(|text| text.contains(marker)))
        })?;
    let pointer = tree.join(".git");
    let admin = children(&places.git_dir.join("worktrees"))
        .into_iter()
        .find(|admin| {
            std::fs::read_to_string(admin.join("gitdir"))
                .is_ok_and(|text| Path::new(text.trim()) == pointer)
        })
        .unwrap_or_default();
    let layers = PathBuf::from(format!("{}.cow", tree.display()));
    let paths = vec![admin.clone(), layers.clone(), tree.clone()];
    let bases: Vec<PathBuf> = places
        .bases()
        .map(|bases| {
            children(&bases)
                .into_iter()
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    let (shared, with_worker) = (
        du(&bases),
        du(&bases.iter().chain(&paths).cloned().collect::<Vec<_>>()),
    );
    Some(WorkerDisk {
        beyond_base: Du {
            disk: with_worker.disk.saturating_sub(shared.disk),
            apparent: with_worker.apparent.saturating_sub(shared.apparent),
        },
        admin: du(std::slice::from_ref(&admin)),
        index: du(&[admin.join("index")]),
        layers: du(&[layers]),
        tree: du(&[tree]),
        total: du(&paths),
        paths,
    })
}

/// What is on disk in grove's places, one line per entry: `.git/worktrees/*`,
/// `.git/grove/*`, and the repository's cache (`bases/*`, every run folder).
pub fn leftovers(places: &Places) -> Vec<(String, Du)> {
    let mut found = Vec::new();
    let mut add = |label: String, path: PathBuf| {
        found.push((label, du(&[path])));
    };
    for admin in children(&places.git_dir.join("worktrees")) {
        add(format!(".git/worktrees/{}", name(&admin)), admin);
    }
    for entry in children(&places.git_dir.join("grove")) {
        add(format!(".git/grove/{}", name(&entry)), entry);
    }
    if let Some(bases) = places.bases() {
        for entry in children(&bases) {
            if entry.is_dir() {
                add(format!("cache bases/{}", short(&name(&entry))), entry);
            }
        }
    }
    for run in places.run_dirs() {
        add(format!("cache {}/", name(&run)), run);
    }
    found
}

fn name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A base's key with its commit shortened.
fn short(key: &str) -> String {
    match key.get(..40) {
        Some(commit) if commit.chars().all(|c| c.is_ascii_hexdigit()) => {
            format!("{}…{}", &commit[..8], &key[40..])
        }
        _ => key.to_owned(),
    }
}

/// Milestones seen on disk while a run goes, each the first time it held.
#[derive(Debug, Default)]
pub struct Timeline {
    pub marks: Mutex<Vec<(String, Instant)>>,
}

impl Timeline {
    pub fn mark(&self, what: impl Into<String>) {
        self.mark_at(what, Instant::now());
    }

    /// Marks `what` as held at `at`, unless it already is.
    pub fn mark_at(&self, what: impl Into<String>, at: Instant) {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        let what = what.into();
        if !marks.iter().any(|(seen, _)| *seen == what) {
            marks.push((what, at));
        }
    }

    /// Every milestone, in order, as time since `start`.
    pub fn since(&self, start: Instant) -> Vec<(String, Duration)> {
        let mut marks: Vec<(String, Duration)> = self
            .marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(what, at)| (what.clone(), at.saturating_duration_since(start)))
            .collect();
        marks.sort_by_key(|(_, at)| *at);
        marks
    }
}

/// Polls `places` every 5 ms until the returned flag is set: the base's build folder
/// appearing, a base completing and being set up, each registration and tree mount.
pub fn watch(
    places: Places,
    timeline: Arc<Timeline>,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let handle = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            poll(&places, &timeline);
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (stop, handle)
}

fn poll(places: &Places, timeline: &Timeline) {
    if let Some(bases) = places.bases() {
        for entry in children(&bases) {
            let file = name(&entry);
            if file.starts_with(".build-") {
                timeline.mark("base: build folder made (checkout starts)");
            } else if entry.join("complete").is_file() {
                timeline.mark("base: complete (checked out, index written)");
                if entry.join("setup-done").is_file() {
                    timeline.mark("base: setup done");
                }
            }
        }
    }
    let registered = children(&places.git_dir.join("worktrees")).len();
    if registered == 1 || (registered > 0 && registered.is_multiple_of(8)) {
        timeline.mark(format!("{registered} worktree(s) registered"));
    }
    for run in places.run_dirs() {
        let mut mounted: usize = 0;
        for tree in children(&run) {
            if name(&tree).ends_with(".cow") && tree.join("upper").join(".git").is_file() {
                mounted += 1;
            }
        }
        if mounted == 1 || (mounted > 0 && mounted.is_multiple_of(8)) {
            timeline.mark(format!("{mounted} tree(s)' layers made (host starting)"));
        }
    }
}
