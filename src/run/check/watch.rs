//! Which files of a subtask's change its check opened while it ran: executed, imported
//! or read. Such a file runs later too (a `conftest.py`, a test that connects out, a
//! script the test suite calls), whatever its name, so its reviewer is told to look at
//! it twice.
//!
//! This file owns the watch: one inotify watch per changed file (never per directory of
//! the tree), read once the check has ended. It decides nothing about the check and
//! must never stop one from running: without inotify, or past its limits, it watches
//! less and says so through what it returns.

use std::collections::HashMap;
use std::path::Path;

/// How many changed files one check watches at most (each watch is a kernel object
/// counted against `fs.inotify.max_user_watches`).
const MAX_WATCHED: usize = 4_096;

/// The watch on one check's changed files.
pub(crate) struct OpenWatch {
    #[cfg(target_os = "linux")]
    inotify: nix::sys::inotify::Inotify,
    #[cfg(target_os = "linux")]
    watched: HashMap<nix::sys::inotify::WatchDescriptor, String>,
    #[cfg(not(target_os = "linux"))]
    watched: HashMap<(), String>,
}

impl OpenWatch {
    /// Watches `paths` (relative to `root`, the tree as grove's own process reaches it)
    /// for opens; `None` when nothing could be watched (no inotify, no such file).
    #[cfg(target_os = "linux")]
    pub(crate) fn start(root: &Path, paths: &[String]) -> Option<Self> {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        if paths.is_empty() {
            return None;
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mut watched = HashMap::new();
        for path in paths.iter().take(MAX_WATCHED) {
            // A deleted file has nothing to open; a link is watched where it leads,
            // which is what a command opening it reads.
            let mask = AddWatchFlags::IN_OPEN | AddWatchFlags::IN_ACCESS;
            if let Ok(watch) = inotify.add_watch(&root.join(path), mask) {
                watched.insert(watch, path.clone());
            }
        }
        (!watched.is_empty()).then_some(Self { inotify, watched })
    }

    /// Without inotify nothing is watched.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn start(_root: &Path, _paths: &[String]) -> Option<Self> {
        None
    }

    /// The watched files opened since [`start`](Self::start), sorted. When the kernel's
    /// queue overflowed, which ones is unknown: every watched file counts as opened, so
    /// that nothing is left unflagged.
    #[cfg(target_os = "linux")]
    pub(crate) fn opened(self) -> Vec<String> {
        use nix::sys::inotify::AddWatchFlags;
        let mut opened = std::collections::BTreeSet::new();
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return sorted(self.watched.into_values());
                }
                if let Some(path) = self.watched.get(&event.wd) {
                    opened.insert(path.clone());
                }
            }
        }
        opened.into_iter().collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn opened(self) -> Vec<String> {
        sorted(self.watched.into_values())
    }
}

fn sorted(paths: impl Iterator<Item = String>) -> Vec<String> {
    let mut paths: Vec<String> = paths.collect();
    paths.sort();
    paths
}

#[cfg(test)]
#[cfg(target_os = "linux")]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_watched_files_a_command_opened_are_named() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["conftest.py", "tests/test_a.py", "docs/guide.md"] {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x = 1\n").unwrap();
        }
        let watched =
            ["conftest.py", "docs/guide.md", "gone.py", "tests/test_a.py"].map(str::to_owned);
        let watch = OpenWatch::start(dir.path(), &watched).expect("inotify watches");

        let status = std::process::Command::new("sh")
            .current_dir(dir.path())
            .args([
                "-c",
                "cat conftest.py tests/test_a.py >/dev/null; ls docs >/dev/null",
            ])
            .status()
            .unwrap();

        assert!(status.success());
        assert_eq!(
            watch.opened(),
            vec!["conftest.py".to_owned(), "tests/test_a.py".to_owned()],
            "the files read are named; one only listed, or missing, is not"
        );
    }
}
