//! The user's project as a sandboxed command sees it: its environment shared into every
//! tree, and its editable installs pointed at the tree's code.
//!
//! This file owns two facts about the user's checkout that the confinement needs: which
//! of its ignored directories hold the project's environment (`.venv`, `node_modules`),
//! bound read-only at the same place in every tree, and which source directories of it
//! an editable install (`pip install -e .`) puts on Python's path, so that a tree's
//! commands put the tree's copy of them first. It reads files in grove's process only,
//! and must never make anything of the user's checkout writable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The user's project, as the sandbox needs to know it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectView {
    /// The user's checkout (work tree): hidden from commands but for `share`.
    pub checkout: Option<PathBuf>,
    /// The repository's common dir: grove's record of which admin dir is whose.
    pub common_dir: Option<PathBuf>,
    /// Directories of the checkout (relative paths) every tree sees read-only.
    pub share: Vec<PathBuf>,
}

/// The most virtualenvs of one kind looked into for editable installs (a home with
/// hundreds of poetry environments is not read whole before every run).
const MAX_ENVIRONMENTS: usize = 64;

/// The largest `.pth` or finder file read (they are a few lines).
const MAX_PATH_FILE_BYTES: u64 = 64 * 1024;

/// Homes' directories that hold one virtualenv per entry (virtualenvwrapper, pipenv,
/// poetry, pyenv's interpreters).
const ENVIRONMENT_HOMES: &[&str] = &[
    ".virtualenvs",
    ".local/share/virtualenvs",
    ".cache/pypoetry/virtualenvs",
    ".pyenv/versions",
];

impl ProjectView {
    /// Each shared directory as `(the user's copy, the same path in the tree at
    /// `tree`)`, for those that exist in the checkout.
    pub(super) fn shared_binds(&self, tree: &Path) -> Vec<(PathBuf, PathBuf)> {
        let Some(checkout) = &self.checkout else {
            return Vec::new();
        };
        self.share
            .iter()
            .filter_map(|relative| {
                let source = checkout.join(relative).canonicalize().ok()?;
                source.is_dir().then(|| (source, tree.join(relative)))
            })
            .collect()
    }

    /// The checkout's directories (relative; empty for its root) that an editable
    /// install in one of the Python environments `env` can name puts on `sys.path`.
    ///
    /// The environments: the shared virtualenvs, those of `PATH`'s `bin` directories,
    /// the homes' virtualenv collections ([`ENVIRONMENT_HOMES`]) and user site.
    pub(super) fn editable_sources(&self, env: &[(OsString, OsString)]) -> Vec<PathBuf> {
        let Some(checkout) = self
            .checkout
            .as_ref()
            .and_then(|dir| dir.canonicalize().ok())
        else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for site in site_dirs(&self.environments(&checkout, env)) {
            for path in editable_paths(&site) {
                let Ok(real) = path.canonicalize() else {
                    continue;
                };
                if let Ok(relative) = real.strip_prefix(&checkout)
                    && !found.iter().any(|known: &PathBuf| known == relative)
                {
                    found.push(relative.to_path_buf());
                }
            }
        }
        found
    }

    /// Directories that may be Python environments (prefixes holding `lib/python*`).
    fn environments(&self, checkout: &Path, env: &[(OsString, OsString)]) -> Vec<PathBuf> {
        let var = |name: &str| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        let mut prefixes: Vec<PathBuf> = self.share.iter().map(|dir| checkout.join(dir)).collect();
        if let Some(path) = var("PATH") {
            prefixes.extend(
                std::env::split_paths(&path)
                    .filter(|dir| dir.file_name().is_some_and(|name| name == "bin"))
                    .filter_map(|dir| dir.parent().map(Path::to_path_buf)),
            );
        }
        if let Some(home) = var("HOME")
            .map(PathBuf::from)
            .filter(|home| home.is_absolute())
        {
            prefixes.push(home.join(".local"));
            for collection in ENVIRONMENT_HOMES {
                let Ok(entries) = std::fs::read_dir(home.join(collection)) else {
                    continue;
                };
                prefixes.extend(entries.flatten().take(MAX_ENVIRONMENTS).map(|e| e.path()));
            }
        }
        prefixes.dedup();
        prefixes
    }
}

/// The `site-packages` (and Debian's `dist-packages`) directories beneath `prefixes`.
fn site_dirs(prefixes: &[PathBuf]) -> Vec<PathBuf> {
    let mut sites = Vec::new();
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with("python") {
                continue;
            }
            for name in ["site-packages", "dist-packages"] {
                let site = entry.path().join(name);
                if site.is_dir() && !sites.contains(&site) {
                    sites.push(site);
                }
            }
        }
    }
    sites
}

/// The directories the editable installs of `site` put on `sys.path`: the lines of its
/// `.pth` files that are paths, the first line of each `.egg-link`, and the parents of
/// the packages an editable finder (setuptools' `__editable___*_finder.py`) maps.
fn editable_paths(site: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let finder = name.starts_with("__editable__") && name.ends_with("_finder.py");
        if !(name.ends_with(".pth") || name.ends_with(".egg-link") || finder) {
            continue;
        }
        let Some(text) = read_small(&entry.path()) else {
            continue;
        };
        if name.ends_with(".pth") {
            paths.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty() && !line.starts_with(['#', ';']))
                    .filter(|line| !line.starts_with("import ") && !line.starts_with("import\t"))
                    .map(|line| site.join(line)),
            );
        } else if name.ends_with(".egg-link") {
            paths.extend(text.lines().next().map(|line| site.join(line.trim())));
        } else if finder {
            paths.extend(
                quoted_absolute_paths(&text)
                    .into_iter()
                    .filter_map(|package| package.parent().map(Path::to_path_buf)),
            );
        }
    }
    paths
}

/// The text of a regular file of at most [`MAX_PATH_FILE_BYTES`].
fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_PATH_FILE_BYTES {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The absolute paths quoted in Python source (a finder's `MAPPING` literal).
fn quoted_absolute_paths(text: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for quote in ['\'', '"'] {
        let mut parts = text.split(quote);
        // Every other part lies between a pair of quotes.
        parts.next();
        while let Some(inside) = parts.next() {
            if inside.starts_with('/') && !inside.contains('\n') {
                paths.push(PathBuf::from(inside));
            }
            parts.next();
        }
    }
    paths
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn editable_installs_of_every_kind_name_the_checkouts_source_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let checkout = root.join("click");
        for path in ["src/click", "tools/lint", "flat"] {
            std::fs::create_dir_all(checkout.join(path)).unwrap();
        }
        let home = root.join("home");
        let site = home.join(".virtualenvs/click/lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let src = checkout.join("src");
        std::fs::write(
            site.join("__editable__.click-8.2.pth"),
            "import __editable___click_8_2_finder; __editable___click_8_2_finder.install()\n",
        )
        .unwrap();
        std::fs::write(
            site.join("__editable___click_8_2_finder.py"),
            format!(
                "MAPPING: dict[str, str] = {{'click': '{}'}}\nNAMESPACES = {{}}\n",
                src.join("click").display()
            ),
        )
        .unwrap();
        std::fs::write(
            site.join("_lint.pth"),
            format!("# hatch\n{}\n", checkout.join("tools/lint").display()),
        )
        .unwrap();
        std::fs::write(
            site.join("flat.egg-link"),
            format!("{}\n.\n", checkout.join("flat").display()),
        )
        .unwrap();
        std::fs::write(site.join("other.pth"), "/usr/share/elsewhere\n").unwrap();
        let view = ProjectView {
            checkout: Some(checkout),
            common_dir: None,
            share: Vec::new(),
        };
        let env = vec![(OsString::from("HOME"), home.into_os_string())];
        let mut found = view.editable_sources(&env);
        found.sort();
        assert_eq!(
            found,
            vec![
                PathBuf::from("flat"),
                PathBuf::from("src"),
                PathBuf::from("tools/lint")
            ],
            "a finder's package, a path .pth and an egg-link each name their directory in \
             the checkout; paths elsewhere are not the project's"
        );
    }
}
