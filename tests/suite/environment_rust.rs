//! Issue 42: a Rust project's `cargo test` in the sandbox's built view, with the shared
//! registry the user's cargo already holds (`~/.cargo/registry`, read-only) and rustup's
//! toolchains, in every tree, the base and the result.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use pretty_assertions::assert_eq;

use grove::store::journal::{CheckStatus, SubtaskOutcome};
use grove::worktree::WorktreeMode;

use crate::suite::environment::{brief, checks, run_with_env, server, statuses, worker_outputs};
use crate::suite::escapes::mode_or_skip;
use crate::support::git_fixture::GitFixture;

/// The user's cargo and rustup homes as this process has them, with a crate of the
/// registry already downloaded there (grove's own build fetched `itoa`).
fn toolchain() -> Option<(PathBuf, PathBuf)> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let cargo = std::env::var_os("CARGO_HOME").map_or_else(|| home.join(".cargo"), PathBuf::from);
    let rustup =
        std::env::var_os("RUSTUP_HOME").map_or_else(|| home.join(".rustup"), PathBuf::from);
    let cached = std::fs::read_dir(cargo.join("registry/cache"))
        .ok()?
        .flatten()
        .any(|index| {
            std::fs::read_dir(index.path()).is_ok_and(|crates| {
                crates
                    .flatten()
                    .any(|file| file.file_name().to_string_lossy().starts_with("itoa-1."))
            })
        });
    (cached && rustup.is_dir()).then_some((cargo, rustup))
}

async fn cargo_test_with_the_shared_registry(test: &str, mode: WorktreeMode) {
    let fixture = GitFixture::with_files(&[
        (".gitignore", "target/\n"),
        (
            "Cargo.toml",
            "[package]\nname = \"digits\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nitoa = \"1\"\n",
        ),
        (
            "src/lib.rs",
            "pub fn show(n: u32) -> String {\n    itoa::Buffer::new().format(n).to_owned()\n}\n\n\
             #[test]\nfn shows() {\n    assert_eq!(show(42), \"42\");\n}\n",
        ),
    ]);
    if !mode_or_skip(test, &fixture, mode).await {
        return;
    }
    let Some((cargo_home, rustup_home)) = toolchain() else {
        assert!(
            std::env::var_os("GROVE_REQUIRE_TOOLCHAINS").is_none(),
            "GROVE_REQUIRE_TOOLCHAINS is set but no cargo registry with itoa is here"
        );
        eprintln!("skipped {test}: no cargo registry holding itoa here");
        return;
    };
    // The lock file, resolved from the registry cargo already holds, as a user has it.
    let locked = Command::new("cargo")
        .args(["generate-lockfile", "--offline"])
        .current_dir(&fixture.repo)
        .status()
        .unwrap();
    assert!(locked.success(), "cargo generate-lockfile --offline");
    fixture.git(&["add", "Cargo.lock"]);
    fixture.git(&["commit", "-q", "-m", "lock"]);
    let path = std::env::var_os("PATH").unwrap();
    let env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path),
        ("HOME".into(), fixture.home().into_os_string()),
        ("CARGO_HOME".into(), cargo_home.clone().into_os_string()),
        ("RUSTUP_HOME".into(), rustup_home.into_os_string()),
    ];
    let suite = "cargo test --offline -q";
    let server = server(vec![brief(
        "Add a second test.",
        &[(
            "tests/more.rs",
            "#[test]\nfn shows_zero() {\n    assert_eq!(digits::show(0), \"0\");\n}\n",
        )],
        &[&format!("{suite} 2>&1 | grep -c 'test result: ok'")],
    )])
    .await;
    let registry_before = std::fs::read_dir(cargo_home.join("registry/cache"))
        .unwrap()
        .count();

    let report = run_with_env(&fixture, &server, suite, env, mode).await;

    assert_eq!(
        statuses(&report),
        vec![SubtaskOutcome::Merged],
        "{report:#?}"
    );
    assert_eq!(
        (
            checks(&report),
            worker_outputs(&server),
            std::fs::read_dir(cargo_home.join("registry/cache"))
                .unwrap()
                .count()
        ),
        (
            [
                ("S1", CheckStatus::Passed),
                ("base", CheckStatus::Passed),
                ("result", CheckStatus::Passed)
            ]
            .map(|(on, status)| (on.to_owned(), status))
            .to_vec(),
            vec!["3\n[exit code: 0]\n".to_owned()],
            registry_before
        ),
        "`cargo test` builds against the shared registry and passes on the base, in the \
         worktree and on the result; the worker's runs its three suites; the registry is \
         read, never written ({mode})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cargo_test_with_the_shared_registry_passes_in_every_tree() {
    cargo_test_with_the_shared_registry(
        "cargo_test_with_the_shared_registry_passes_in_every_tree",
        WorktreeMode::Overlay,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cargo_test_with_the_shared_registry_passes_in_every_git_tree() {
    cargo_test_with_the_shared_registry(
        "cargo_test_with_the_shared_registry_passes_in_every_git_tree",
        WorktreeMode::Git,
    )
    .await;
}
