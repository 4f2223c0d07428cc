//! The benches' large repository (source-like files of about 1 KiB, 100 to a
//! directory) and plain git run on it the user's way, sealed from this machine's config.

#![allow(dead_code, reason = "each bench uses what it needs of this file")]

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// Writes `files` files `pkg<NNN>/src/file<NNNNN>.js` under `repo`, and a `.gitignore`
/// that ignores `node_modules/` (where the benches' setup step writes).
pub fn generate(repo: &Path, files: usize) -> std::io::Result<()> {
    for i in 0..files {
        let dir = repo.join(format!("pkg{:03}/src", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let mut body = String::with_capacity(1100);
        for line in 0..30 {
            body.push_str(&format!(
                "export const value_{i}_{line} = {};\n",
                i * 31 + line
            ));
        }
        std::fs::write(dir.join(format!("file{i:05}.js")), body)?;
    }
    std::fs::write(repo.join(".gitignore"), "node_modules/\n")
}

/// A git environment without the user's or the system's config, with a fixed identity,
/// `home` as `HOME` and, given one, `cache` as `XDG_CACHE_HOME`.
pub fn sealed_env(home: &Path, cache: Option<&Path>) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = [
        ("GIT_CONFIG_GLOBAL", OsString::from("/dev/null")),
        ("GIT_CONFIG_NOSYSTEM", OsString::from("1")),
        ("HOME", home.as_os_str().to_owned()),
        ("GIT_AUTHOR_NAME", OsString::from("bench")),
        ("GIT_AUTHOR_EMAIL", OsString::from("bench@localhost")),
        ("GIT_COMMITTER_NAME", OsString::from("bench")),
        ("GIT_COMMITTER_EMAIL", OsString::from("bench@localhost")),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), v))
    .collect();
    if let Some(cache) = cache {
        env.push(("XDG_CACHE_HOME".into(), cache.as_os_str().to_owned()));
    }
    env
}

/// Runs plain git with `env` in `dir`; its trimmed stdout.
pub fn git(env: &[(OsString, OsString)], dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("git")
        .envs(env.iter().cloned())
        .current_dir(dir)
        .args(args)
        .output()
        .with_context(|| format!("starting git {args:?}"))?;
    if !output.status.success() {
        bail!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
