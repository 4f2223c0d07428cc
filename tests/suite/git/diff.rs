//! Diffs of a branch against its base: stat, capped patch, binary files named.

use grove::git::{DiffStat, FileStat};
use pretty_assertions::assert_eq;

use super::{filled_worktree, project};

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
    let head = repo.checkpoint(&worktree, "turn 1").await.unwrap().unwrap();

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
        diff.patch
            .text
            .contains("Binary files /dev/null and b/logo.png differ"),
        "binary files are named: {}",
        diff.patch.text
    );
    assert!(
        !diff.patch.text.contains("PNG"),
        "binary bytes are never dumped"
    );
    assert!(
        diff.patch
            .text
            .contains("rename from src/util.rs\nrename to src/helpers.rs")
    );

    let plain = repo.render_diff(base, head, &diff.stat, false).unwrap();
    assert_eq!(
        plain,
        "README (+1 -0)\n@@ -1,1 +1,2 @@\n hello\n+world\nlogo.png (+0 -0)\n  binary file changed\n\
src/util.rs → src/helpers.rs (+0 -0)\n3 files changed, 1 insertion(+), 0 deletions(-)\n"
    );
    let coloured = repo.render_diff(base, head, &diff.stat, true).unwrap();
    assert!(
        coloured.contains("\x1b[32m+world\x1b[0m"),
        "insertions are green: {coloured:?}"
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
    let head = repo.checkpoint(&worktree, "turn 1").await.unwrap().unwrap();

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
