//! Copy-on-write worktrees on the real kernel, from git's side: a base tree checked out
//! once, a worker's overlay worktree mounted by grove's tree host, and checkpoints read
//! from its upper directory, held to what `git add --all` records on a plain checkout
//! and to the CLI path inside the tree.
//!
//! Where the kernel refuses unprivileged overlay mounts, each test says so and passes
//! without asserting (there is nothing to hold the code to there).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use grove::git::Repo;

use grove::worktree::{BaseTree, CommitPath, Worktree, WorktreeSpec, settle_deletions};
use grove::worktree::{Layers, OverlayTree, TreeHost};
use pretty_assertions::assert_eq;

use super::run_id;
use crate::support::git_fixture::{GitFixture, git_in, sealed_env};

/// The changes a worker makes, as a shell script run in its tree: every kind an upper
/// directory records (changed, new, executable bit on and off, symlink, deleted file,
/// deleted directory, a directory deleted and made again, a renamed directory), plus
/// what a checkpoint must leave out (ignored files and directories, a file a changed
/// `.gitignore` ignores, a nested repository).
const WORKER_CHANGES: &str = "\
set -e
echo changed >> README
rm src/util.rs
chmod +x src/lib.rs
chmod -x run.sh
rm -rf docs && mkdir docs && echo fresh > docs/c.md
rm -rf deep
mv keep kept
ln -s README readme-link
ln -s ../README src/up-link
echo new > new.txt
mkdir -p brand/new/dir && echo deep > brand/new/dir/file
echo log > debug.log
mkdir build && echo out > build/out.o
echo '*.tmp' >> .gitignore && echo t > scratch.tmp
echo ignored-but-tracked >> vendor/tracked.log
echo new-in-ignored > vendor/more.log
mkdir nested && echo inner > nested/f && git init -q nested
";

/// A worktree mounted over its base by a tree host of its own, as a run mounts one.
struct Mounted {
    worktree: Worktree,
    overlay: Arc<OverlayTree>,
    _base: BaseTree,
}

impl Mounted {
    /// Subtask `n`'s copy-on-write worktree, mounted; `None` (the test skips) where
    /// the kernel refuses the mount.
    async fn new(repo: &Repo, fixture: &GitFixture, n: u32) -> Option<Self> {
        let base = repo.base_tree(fixture.rev("HEAD"), None).await.unwrap();
        let spec = WorktreeSpec {
            run: run_id(),
            subtask: n,
            base: base.commit(),
            path: repo.default_worktrees_dir(&run_id()).join(n.to_string()),
        };
        let worktree = repo.create_overlay_worktree(spec, &base).await.unwrap();
        let layers = Layers::beside(&base.tree_dir(), worktree.path());
        // As a run's mount does: the tree's `.git` file is in its upper directory.
        std::fs::create_dir_all(&layers.upper).unwrap();
        std::fs::copy(worktree.path().join(".git"), layers.upper.join(".git")).unwrap();
        let parent = worktree.path().parent().unwrap().to_path_buf();
        if !crate::suite::overlay::overlay_or_skip("git::overlay", &parent).await {
            return None;
        }
        let overlay = Arc::new(OverlayTree::new(TreeHost::start(layers).await.unwrap()));
        let worktree = worktree.mounted(Arc::clone(&overlay));
        Some(Self {
            worktree,
            overlay,
            _base: base,
        })
    }

    /// Runs `script` in the tree (in its namespaces, at its path); its stdout.
    fn sh(&self, fixture: &GitFixture, script: &str) -> String {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .envs(sealed_env(&fixture.home()))
            .current_dir("/");
        self.overlay
            .namespace_ref()
            .entry(self.worktree.path())
            .unwrap()
            .at_exec(&mut command);
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "the script failed in the tree: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn upper(&self) -> std::path::PathBuf {
        self.overlay.layers().unwrap().upper.clone()
    }
}

fn fixture() -> GitFixture {
    let fixture = GitFixture::with_files(&[
        ("README", "hello\n"),
        ("src/lib.rs", "pub fn answer() -> u32 { 42 }\n"),
        ("src/util.rs", "pub fn double(x: u32) -> u32 { x * 2 }\n"),
        ("run.sh", "#!/bin/sh\necho run\n"),
        ("docs/a.md", "a\n"),
        ("docs/b.md", "b\n"),
        ("keep/x", "x\n"),
        ("deep/dir/f", "f\n"),
        (".gitignore", "*.log\nbuild/\n"),
    ]);
    std::fs::set_permissions(
        fixture.repo.join("run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    fixture.write("vendor/tracked.log", "tracked despite the rule\n");
    fixture.git(&["add", "--force", "vendor/tracked.log", "run.sh"]);
    fixture.git(&["commit", "--quiet", "-m", "tracked log, executable script"]);
    fixture
}

/// The tree `git add --all` records after `script` on a plain checkout of `HEAD` (the
/// nested repository left out, as a checkpoint leaves it).
fn plain_tree(fixture: &GitFixture, script: &str) -> String {
    let plain = fixture.dir.path().join("plain-checkout");
    fixture.git(&[
        "worktree",
        "add",
        "--quiet",
        "--detach",
        plain.to_str().unwrap(),
        "HEAD",
    ]);
    let status = Command::new("sh")
        .args(["-c", script])
        .current_dir(&plain)
        .envs(sealed_env(&fixture.home()))
        .status()
        .unwrap();
    assert!(status.success(), "the script runs on the plain checkout");
    let home = fixture.home();
    git_in(&home, &plain, &["add", "--all", "--", ".", ":!nested"]);
    git_in(&home, &plain, &["write-tree"])
}

fn tree_of(fixture: &GitFixture, commit: &str) -> String {
    fixture.git(&["rev-parse", &format!("{commit}^{{tree}}")])
}

#[tokio::test]
async fn an_upper_dir_checkpoint_records_what_git_add_all_records_on_a_plain_checkout() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 1).await else {
        return;
    };
    tree.sh(&fixture, WORKER_CHANGES);

    let commit = tree
        .worktree
        .checkpoint(&repo, "S1: work")
        .await
        .unwrap()
        .expect("the changes make a commit");

    let expected = plain_tree(&fixture, WORKER_CHANGES);
    assert_eq!(
        tree_of(&fixture, &commit.to_string()),
        expected,
        "the upper directory's commit has exactly the tree git add --all gives on a plain \
         checkout: {}",
        fixture.git(&["diff", "--stat", &expected, &commit.to_string()])
    );
    assert_eq!(
        repo.ref_target(&tree.worktree.branch_ref()).unwrap(),
        Some(commit),
        "the branch moved to the checkpoint"
    );
    assert_eq!(
        tree.worktree.checkpoint(&repo, "S1: again").await.unwrap(),
        None,
        "nothing changed since: no empty commit"
    );
    assert_eq!(
        repo.git_dir_paths(&tree.worktree).await.unwrap(),
        vec!["nested".to_owned()],
        "the nested repository is listed as left out"
    );
    tree.overlay.stop().await;
}

#[tokio::test]
async fn the_upper_dir_and_the_cli_inside_the_tree_give_the_same_commit() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let (Some(fast), Some(cli)) = (
        Mounted::new(&repo, &fixture, 4).await,
        Mounted::new(&repo, &fixture, 5).await,
    ) else {
        return;
    };
    fast.sh(&fixture, WORKER_CHANGES);
    cli.sh(&fixture, WORKER_CHANGES);

    let by_upper = fast
        .worktree
        .checkpoint(&repo, "work")
        .await
        .unwrap()
        .unwrap();
    let by_cli = repo
        .checkpoint_with(&cli.worktree, "work", CommitPath::Cli)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(
        tree_of(&fixture, &by_upper.to_string()),
        tree_of(&fixture, &by_cli.to_string()),
        "both ways record the same tree"
    );
    fast.overlay.stop().await;
    cli.overlay.stop().await;
}

#[tokio::test]
async fn a_later_checkpoint_starts_from_the_base_so_a_deleted_new_file_is_gone() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 2).await else {
        return;
    };
    tree.sh(&fixture, "echo one > made.txt && echo two > kept.txt");
    let first = tree
        .worktree
        .checkpoint(&repo, "one")
        .await
        .unwrap()
        .unwrap();
    tree.sh(&fixture, "rm made.txt && echo more >> README");
    assert!(
        !tree.upper().join("made.txt").exists(),
        "a file made and deleted again leaves no whiteout in the upper directory"
    );

    let second = tree
        .worktree
        .checkpoint(&repo, "two")
        .await
        .unwrap()
        .unwrap();

    assert_eq!(
        fixture.git(&[
            "diff",
            "--name-status",
            &first.to_string(),
            &second.to_string()
        ]),
        "M\tREADME\nD\tmade.txt",
        "the file is deleted all the same"
    );
    assert_eq!(
        fixture.git(&["rev-parse", &format!("{second}^")]),
        first.to_string(),
        "checkpoints chain on the branch"
    );
    tree.overlay.stop().await;
}

#[tokio::test]
async fn the_workers_git_status_inside_the_tree_shows_only_its_changes() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 3).await else {
        return;
    };
    let before = tree.sh(
        &fixture,
        "echo changed >> README && echo new > new.txt && git status --porcelain",
    );
    assert_eq!(
        before, " M README\n?? new.txt\n",
        "the worker's git sees its branch, its index and only its own changes"
    );
    tree.worktree
        .checkpoint(&repo, "work")
        .await
        .unwrap()
        .unwrap();

    let after = tree.sh(&fixture, "git status --porcelain && git log --format=%s -1");

    assert_eq!(
        after, "grove r1/3: work\n",
        "after a checkpoint the index follows the branch: nothing is left to show"
    );
    tree.overlay.stop().await;
}

#[tokio::test]
async fn a_trees_index_is_its_own_part_of_a_split_index_over_the_bases_and_git_reads_it() {
    let fixture = fixture();
    let generated: Vec<(String, String)> = (0..500)
        .map(|i| (format!("gen/f{i:03}.txt"), format!("file {i}\n")))
        .collect();
    for (path, text) in &generated {
        fixture.write(path, text);
    }
    fixture.commit_all("many files");
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 4).await else {
        return;
    };
    let admin = tree.worktree.admin_dir().to_path_buf();
    let shared: Vec<_> = std::fs::read_dir(&admin)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sharedindex."))
        .map(|e| e.path())
        .collect();
    let [shared] = shared.as_slice() else {
        panic!("one shared index beside the tree's index: {shared:?}");
    };
    let base_shared = tree
        ._base
        .index_path()
        .with_file_name(shared.file_name().unwrap());
    let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let own = std::fs::metadata(admin.join("index")).unwrap().len();
    assert!(
        (ino(shared), own < 8 * 1024) == (ino(&base_shared), true),
        "the shared part is the base's file, hard-linked; the tree's own index is small \
         ({own} bytes)"
    );

    tree.sh(
        &fixture,
        "echo more >> gen/f007.txt && rm gen/f100.txt && echo n > gen/new",
    );
    repo.checkpoint(&tree.worktree, "work")
        .await
        .unwrap()
        .unwrap();
    let after = tree.sh(
        &fixture,
        "git status --porcelain && git diff HEAD --stat && git ls-files | wc -l && \
         echo again >> gen/f008.txt && git status --porcelain",
    );

    assert_eq!(
        (
            after,
            std::fs::metadata(admin.join("index")).unwrap().len() < 8 * 1024
        ),
        (format!("{}\n M gen/f008.txt\n", generated.len() + 10), true),
        "after a checkpoint git in the tree sees the commit's files and nothing changed, \
         then a new change; the tree's index stays its own small part"
    );
    assert!(
        !std::fs::read_dir(repo.common_dir())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex")),
        "no shared index lands in the repository's git dir"
    );
    tree.overlay.stop().await;
}

#[tokio::test]
async fn a_base_is_built_once_reused_and_removed_only_when_unheld() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let head = fixture.rev("HEAD");
    let first = repo.base_tree(head, None).await.unwrap();
    let again = repo.base_tree(head, None).await.unwrap();
    assert_eq!(
        (
            first.was_built(),
            again.was_built(),
            first.tree_dir() == again.tree_dir()
        ),
        (true, false, true),
        "the second run on the same base reuses the first one's tree"
    );
    assert_eq!(
        std::fs::read_to_string(again.tree_dir().join("README")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        repo.remove_unused_bases(None).unwrap(),
        Vec::<std::path::PathBuf>::new(),
        "a held base is never removed"
    );
    drop((first, again));
    let removed = repo.remove_unused_bases(None).unwrap();
    settle_deletions().await;
    assert_eq!(removed.len(), 1, "the unheld base is removed");
    assert!(!removed[0].exists(), "its files are gone");
}

#[tokio::test]
async fn a_half_made_base_folder_is_replaced_by_a_complete_one() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let head = fixture.rev("HEAD");
    let folder = repo.bases_home().join(head.to_string());
    std::fs::create_dir_all(folder.join("tree/src")).unwrap();
    std::fs::write(folder.join("tree/src/lib.rs"), "half").unwrap();

    let base = repo.base_tree(head, None).await.unwrap();

    assert_eq!(
        std::fs::read_to_string(base.tree_dir().join("src/lib.rs")).unwrap(),
        "pub fn answer() -> u32 { 42 }\n",
        "a folder without the complete record is rebuilt"
    );
    assert!(base.was_built());
    assert!(
        Path::new(&base.index_path()).is_file(),
        "the base has its index"
    );
}

#[tokio::test]
async fn grove_clean_archives_a_tree_whose_host_died_from_its_upper_dir_and_removes_it() {
    let fixture = fixture();
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 6).await else {
        return;
    };
    tree.sh(&fixture, "echo unsaved > wip.txt && rm README");
    let upper = tree.upper();
    let own_dir = upper.parent().unwrap().to_path_buf();
    // A crash: the host is gone, nothing was committed, the upper dir stays.
    tree.overlay.stop().await;

    let report = repo.clean_run(&run_id()).await.unwrap();
    settle_deletions().await;

    let archive = &report.archived[0].reference;
    assert_eq!(
        fixture.git(&[
            "diff",
            "--name-status",
            &fixture.rev("HEAD").to_string(),
            archive
        ]),
        "D\tREADME\nA\twip.txt",
        "the archive holds the dead tree's changes, read from its upper directory"
    );
    assert!(
        !own_dir.exists() && !tree.worktree.path().exists(),
        "its upper and work directories and its mount point are gone"
    );
}

#[tokio::test]
async fn an_upper_dir_checkpoint_converts_line_endings_as_git_add_does() {
    let fixture = GitFixture::with_files(&[
        (".gitattributes", "*.txt text eol=lf\n*.bin -text\n"),
        ("notes.txt", "one\n"),
    ]);
    let repo = fixture.open().await;
    let Some(tree) = Mounted::new(&repo, &fixture, 1).await else {
        return;
    };
    let script = "printf 'one\\r\\ntwo\\r\\n' > notes.txt && printf 'a\\r\\n' > new.txt \
                  && printf 'raw\\r\\n' > data.bin";
    tree.sh(&fixture, script);

    let commit = tree
        .worktree
        .checkpoint(&repo, "S1: work")
        .await
        .unwrap()
        .expect("the changes make a commit");

    let expected = plain_tree(&fixture, script);
    assert_eq!(
        (
            tree_of(&fixture, &commit.to_string()),
            fixture.git(&["show", &format!("{commit}:notes.txt")]),
        ),
        (expected.clone(), "one\ntwo".to_owned()),
        "CRLF is stored as LF where `text` says so, and kept in a `-text` file, as \
         git add --all stores them on a plain checkout: {}",
        fixture.git(&["diff", "--stat", &expected, &commit.to_string()])
    );
    tree.overlay.stop().await;
}
