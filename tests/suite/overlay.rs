//! Copy-on-write worktrees (issue 15), the kernel side: one tree host per worktree, every
//! command and file operation of the worktree seeing the same merged tree, writes landing
//! in the upper directory alone, the sandbox still refusing every way out, and no mount
//! outliving grove.
//!
//! The tests mount real overlays in real user namespaces. Where the kernel refuses (an
//! older kernel, a container without user namespaces) they skip with the reason, unless
//! `GROVE_REQUIRE_OVERLAY` is set (CI sets it), where a refusal fails them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::tools::sandbox::{SandboxPolicy, SandboxedExecutor};
use grove::tools::tree::{TreeAccess, in_tree};
use grove::tools::{
    CommandExecutor, ExecOutcome, ExecRequest, LocalExecutor, OutputCap, Registry, ToolContext,
    ToolOutput, ToolSet, builtin_with_executor,
};
use grove::worktree::{Layers, OverlayTree, TreeHost};

/// Whether this kernel gives grove copy-on-write trees under `parent`; false (test
/// skipped) otherwise.
pub(crate) async fn overlay_or_skip(test: &str, parent: &Path) -> bool {
    match grove::worktree::overlay::probe(parent).await {
        Ok(()) => true,
        Err(error) if std::env::var_os("GROVE_REQUIRE_OVERLAY").is_some() => {
            panic!(
                "{test}: GROVE_REQUIRE_OVERLAY is set but overlay trees are unavailable: {error}"
            )
        }
        Err(error) => {
            eprintln!("skipped {test}: copy-on-write trees are unavailable here: {error}");
            false
        }
    }
}

/// A base tree, a worktree mounted over it through a tree host, and the run's executor
/// routed into it.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    layers: Layers,
    tree: Arc<OverlayTree>,
}

impl Scene {
    async fn mounted(test: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        if !overlay_or_skip(test, &root).await {
            return None;
        }
        let lower = root.join("base");
        std::fs::create_dir_all(lower.join("src")).unwrap();
        std::fs::write(lower.join("src/lib.rs"), "fn base() {}\n").unwrap();
        std::fs::write(lower.join("README"), "the base\n").unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        let layers = Layers::beside(&lower, &root.join("run").join("1"));
        let host = TreeHost::start(layers.clone()).await.unwrap();
        let tree = Arc::new(OverlayTree::new(host));
        Some(Self {
            _dir: dir,
            root,
            layers,
            tree,
        })
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        vec![
            ("PATH".into(), path),
            ("HOME".into(), self.root.join("home").into_os_string()),
        ]
    }

    /// The worker's tools, `bash` sandboxed (the tree is handed to it with each call).
    fn tools(&self) -> Registry {
        let sandboxed: Arc<dyn CommandExecutor> =
            Arc::new(SandboxedExecutor::new(SandboxPolicy::default(), self.env()));
        builtin_with_executor(ToolSet::Worker, sandboxed)
    }

    /// What grove hands every tool call of a worker in this tree.
    fn context(&self) -> ToolContext {
        ToolContext {
            root: self.layers.mount_point.clone(),
            cancel: CancellationToken::new(),
            tree: Some(Arc::clone(&self.tree) as Arc<dyn TreeAccess>),
            call_id: None,
        }
    }

    async fn call(&self, tools: &Registry, tool: &str, input: serde_json::Value) -> ToolOutput {
        let ctx = self.context();
        tools.dispatch(tool, input, &ctx).await.unwrap()
    }

    async fn bash(&self, tools: &Registry, command: &str) -> ToolOutput {
        self.call(
            tools,
            "bash",
            json!({ "command": command, "timeout_s": 20 }),
        )
        .await
    }

    /// Runs `command` the way an external agent CLI runs: unsandboxed, in the worktree.
    async fn unconfined(&self, command: &str) -> (ExecOutcome, String) {
        let local: Arc<dyn CommandExecutor> = Arc::new(LocalExecutor::with_env(self.env()));
        let result = in_tree(Some(self.tree.as_ref()), &local)
            .unwrap()
            .execute(ExecRequest {
                command: command.to_owned(),
                cwd: self.layers.mount_point.clone(),
                timeout: Duration::from_secs(20),
                cancel: CancellationToken::new(),
                output_cap: OutputCap::default(),
            })
            .await
            .unwrap();
        (result.outcome, result.output_text())
    }
}

/// Every entry beneath `dir` with what it is: a file's bytes, a link's target, a
/// whiteout (`c 0:0`), a directory; sorted.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(dir).unwrap().display().to_string();
            let what = if meta.is_dir() {
                stack.push(path);
                "dir".to_owned()
            } else if meta.file_type().is_char_device() {
                format!("whiteout {}", meta.rdev())
            } else if meta.is_symlink() {
                format!("-> {}", std::fs::read_link(&path).unwrap().display())
            } else {
                String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned()
            };
            entries.push((name, what));
        }
    }
    entries.sort();
    entries
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_the_file_tools_and_a_cli_see_one_tree_whose_writes_land_in_the_upper_dir() {
    let Some(scene) = Scene::mounted("one_tree_for_every_access").await else {
        return;
    };
    let tools = scene.tools();
    let base_before = snapshot(&scene.layers.lower);

    let wrote = scene
        .call(
            &tools,
            "write_file",
            json!({"path": "from_tool.txt", "content": "tool\n"}),
        )
        .await;
    assert!(
        !wrote.is_error,
        "write_file works in the tree: {}",
        wrote.content
    );
    let bash = scene
        .bash(
            &tools,
            "cat from_tool.txt src/lib.rs && echo bash > from_bash.txt && rm README && pwd",
        )
        .await;
    assert_eq!(
        (bash.is_error, bash.content),
        (
            false,
            format!(
                "tool\nfn base() {{}}\n{}\n[exit code: 0]\n",
                scene.layers.mount_point.display()
            )
        ),
        "bash sees the file tool's write and the base, at the worktree's own path"
    );
    let read = scene
        .call(&tools, "read_file", json!({"path": "from_bash.txt"}))
        .await;
    assert_eq!(
        (read.is_error, read.content.trim_end().to_owned()),
        (false, "     1\tbash".to_owned()),
        "read_file sees bash's write"
    );
    let absolute = scene.layers.mount_point.join("from_bash.txt");
    let read_absolute = scene
        .call(
            &tools,
            "read_file",
            json!({"path": absolute.display().to_string()}),
        )
        .await;
    assert!(
        !read_absolute.is_error,
        "an absolute path at the worktree's own path works for the file tools: {}",
        read_absolute.content
    );
    let cli = scene
        .unconfined("cat from_tool.txt from_bash.txt; ls -A; test -e README || echo gone")
        .await;
    assert_eq!(
        cli,
        (
            ExecOutcome::Exited(0),
            "tool\nbash\nfrom_bash.txt\nfrom_tool.txt\nsrc\ngone\n".to_owned()
        ),
        "an external CLI's process sees the same tree"
    );

    assert_eq!(
        snapshot(&scene.layers.upper),
        pairs(&[
            ("README", "whiteout 0"),
            ("from_bash.txt", "bash\n"),
            ("from_tool.txt", "tool\n"),
        ]),
        "the upper directory holds exactly the changes: two files and one deletion"
    );
    assert_eq!(
        snapshot(&scene.layers.lower),
        base_before,
        "the base is untouched"
    );
    assert_eq!(
        snapshot(&scene.layers.mount_point),
        Vec::<(String, String)>::new(),
        "grove's own namespace sees only the empty mount point: nothing was mounted here"
    );
    assert_eq!(
        scene.tree.path(),
        scene.layers.mount_point.as_path(),
        "the tree's path is the worktree's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_refuses_writes_outside_the_tree_by_any_path() {
    let Some(scene) = Scene::mounted("sandbox_in_a_tree").await else {
        return;
    };
    let tools = scene.tools();
    let base_before = snapshot(&scene.layers.lower);
    let upper_before = snapshot(&scene.layers.upper);
    let lower = scene.layers.lower.display();
    let upper = scene.layers.upper.display();
    let outside = scene.root.join("outside");
    let outside = outside.display();
    let host = scene.tree.host_pid().unwrap();
    let attempts = [
        format!("ln -s {lower} base && echo pwned > base/planted"),
        format!("ln -s {lower}/README readme && echo pwned >> readme"),
        format!("echo pwned > {lower}/planted"),
        format!("echo pwned >> {lower}/README"),
        format!("echo pwned > /proc/{host}/root{lower}/planted"),
        format!("echo pwned > /proc/{host}/root{outside}/planted"),
        format!("echo pwned > /proc/self/root{lower}/planted"),
        format!("echo pwned > {upper}/planted"),
        format!("echo pwned > {outside}/planted"),
        format!("exec 9>>{lower}/README; echo pwned >&9"),
        format!("mv src/lib.rs {outside}/"),
        format!("ln src/lib.rs {outside}/hard"),
    ];
    for attempt in &attempts {
        let output = scene.bash(&tools, attempt).await;
        assert!(
            output.is_error,
            "`{attempt}` must fail inside the tree's sandbox: {}",
            output.content
        );
    }
    let cleanup = scene.bash(&tools, "rm -f base readme").await;
    assert!(!cleanup.is_error, "{}", cleanup.content);
    assert_eq!(
        snapshot(&scene.layers.lower),
        base_before,
        "no way through a link, /proc or a direct path writes the base"
    );
    assert_eq!(
        snapshot(&scene.layers.upper),
        upper_before,
        "nothing reached the upper directory but through the tree (and the links were removed)"
    );
    assert_eq!(
        snapshot(&scene.root.join("outside")),
        Vec::<(String, String)>::new(),
        "nothing was written outside"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inherited_descriptor_does_not_reach_into_a_command() {
    let Some(scene) = Scene::mounted("inherited_fd_in_a_tree").await else {
        return;
    };
    let target = scene.root.join("outside/inherited.txt");
    std::fs::write(&target, "before\n").unwrap();
    // A descriptor grove itself might have inherited, open for writing and not
    // close-on-exec.
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&target)
        .unwrap();
    let fd = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_DUPFD(40)).unwrap();
    let tools = scene.tools();
    let output = scene.bash(&tools, &format!("echo pwned >&{fd}")).await;
    let cli = scene.unconfined(&format!("echo pwned >&{fd}")).await;
    nix::unistd::close(fd).unwrap();
    assert!(
        output.is_error,
        "bash cannot write through fd {fd}: {}",
        output.content
    );
    assert!(
        cli.0 != ExecOutcome::Exited(0),
        "a CLI's process cannot either: {cli:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "before\n",
        "the inherited file is untouched"
    );
}

// ---------------------------------------------------------------------------------------
// End to end: runs whose worktrees are copy-on-write trees.

use grove::event::{Event, EventSink};
use grove::model::Provider;
use grove::run::{Models, RunOptions};
use grove::store::journal::SubtaskOutcome;
use grove::tools::sandbox::CommandHost;
use grove::worktree::WorktreeMode;

use crate::support::fake_server::{FakeServer, Turn};
use crate::support::git_fixture::GitFixture;
use crate::support::processes::running_with_arg;
use crate::support::requests::role as who;

/// A server whose lead delegates one brief, whose reviewer approves, and whose worker
/// makes `steps` tool calls one per turn, then finishes.
async fn obedient_server(steps: Vec<(&'static str, serde_json::Value)>) -> FakeServer {
    FakeServer::with_responder(move |request| {
        let done = request.tool_results().len();
        match who(request) {
            "lead" if done == 0 => Turn::text("Delegating.")
                .tool_use("lead_1", "delegate", json!({ "task": "Change the files." }))
                .into(),
            "lead" => Turn::text("Done.").into(),
            "reviewer" if done == 0 => Turn::new()
                .tool_use(
                    "review_1",
                    "submit_verdict",
                    json!({ "verdict": "approve", "summary": "Fine." }),
                )
                .into(),
            "reviewer" => Turn::text("Verdict given.").into(),
            _ => match steps.get(done) {
                Some((tool, input)) => Turn::text("Working.")
                    .tool_use(&format!("worker_{done}"), tool, input.clone())
                    .into(),
                None => Turn::text("WORKER-FINAL: done.").into(),
            },
        }
    })
    .await
}

/// The worker's tool results, in call order.
fn worker_results(server: &FakeServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|request| who(request) == "worker")
        .max_by_key(|request| request.tool_results().len())
        .map(|request| {
            request
                .tool_results()
                .into_iter()
                .map(|(_, content)| content)
                .collect()
        })
        .unwrap_or_default()
}

fn options(fixture: &GitFixture, home: &Path, mode: WorktreeMode) -> RunOptions {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    RunOptions {
        jobs: 1,
        git: fixture.options(),
        worktree_mode: mode,
        commands: CommandHost {
            env: Some(vec![
                ("PATH".into(), path),
                ("HOME".into(), home.as_os_str().to_owned()),
            ]),
        },
        ..RunOptions::new("Change the files.")
    }
}

async fn run(
    fixture: &GitFixture,
    server: &FakeServer,
    options: RunOptions,
) -> (grove::run::RunReport, Vec<String>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let report = grove::run::run(
        &fixture.repo,
        options,
        crate::support::scripted_run::models(server, Provider::Anthropic, true) as Models,
        EventSink::new(tx),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut notes = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let Event::Note { message } = event {
            notes.push(message);
        }
    }
    (report, notes)
}

/// Processes whose mount table shows an overlay at or beneath `path`.
fn mounts_beneath(path: &Path) -> Vec<String> {
    let wanted = path.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(table) = std::fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        for line in table.lines() {
            if line.contains(" - overlay ") && line.contains(&wanted) {
                found.push(format!("{pid}: {line}"));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_overlay_mode_commits_what_the_worker_changed_and_keeps_only_the_base() {
    let fixture = GitFixture::with_files(&[("README", "the base\n"), ("src/a.txt", "alpha\n")]);
    let repo = fixture.open().await;
    if !overlay_or_skip("a_run_in_overlay_mode", repo.worktrees_home()).await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let steps = vec![
        ("write_file", json!({"path": "new.txt", "content": "new\n"})),
        (
            "bash",
            json!({"command": "echo beta >> src/a.txt && rm README && git status --porcelain"}),
        ),
    ];
    let server = obedient_server(steps).await;
    let (report, notes) = run(
        &fixture,
        &server,
        options(&fixture, home.path(), WorktreeMode::Auto),
    )
    .await;
    server.assert_no_violations();

    let results = worker_results(&server);
    assert_eq!(
        results.get(1).map(String::as_str),
        Some(" D README\n M src/a.txt\n[exit code: 0]\n"),
        "git inside the tree shows exactly the worker's changes since grove's checkpoint of \
         its first turn (which committed new.txt): {results:#?}"
    );
    assert_eq!(
        report.subtasks[0].status,
        SubtaskOutcome::Merged,
        "the subtask merged: {report:#?}"
    );
    let branch = &report.branch;
    assert_eq!(
        (
            fixture.git(&["show", &format!("{branch}:new.txt")]),
            fixture.git(&["show", &format!("{branch}:src/a.txt")]),
            fixture.git(&["ls-tree", "--name-only", branch]),
        ),
        (
            "new".to_owned(),
            "alpha\nbeta".to_owned(),
            "new.txt\nsrc".to_owned()
        ),
        "the commit holds the new file, the change and the deletion"
    );
    assert!(
        !notes.iter().any(|note| note.contains("copy-on-write")),
        "no fallback line where overlay works: {notes:#?}"
    );
    let base = repo.bases_home().join(report.base.as_str());
    assert_eq!(
        snapshot(&base.join("tree")),
        pairs(&[
            ("README", "the base\n"),
            ("src", "dir"),
            ("src/a.txt", "alpha\n"),
        ]),
        "the base tree is kept for the next run, untouched"
    );
    let run_dir = repo.default_worktrees_dir(&report.run_id.parse().unwrap());
    let left: Vec<String> = std::fs::read_dir(&run_dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "the worker's tree, upper and work directories are gone"
    );
    assert_eq!(
        mounts_beneath(repo.worktrees_home()),
        Vec::<String>::new(),
        "no overlay outlives its worktree"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_git_makes_git_worktrees_and_no_base_tree() {
    let fixture = GitFixture::with_files(&[("README", "the base\n")]);
    let repo = fixture.open().await;
    let home = tempfile::tempdir().unwrap();
    let steps = vec![(
        "bash",
        json!({"command": "echo more >> README && test -d .git || test -f .git && echo git-worktree"}),
    )];
    let server = obedient_server(steps).await;
    let (report, notes) = run(
        &fixture,
        &server,
        options(&fixture, home.path(), WorktreeMode::Git),
    )
    .await;
    assert_eq!(
        (report.subtasks[0].status, worker_results(&server)),
        (
            SubtaskOutcome::Merged,
            vec!["git-worktree\n[exit code: 0]\n".to_owned()]
        ),
        "the worker ran in a git worktree"
    );
    assert!(
        !repo.worktrees_home().join("base").exists(),
        "no base tree is made in git mode"
    );
    assert!(
        !notes.iter().any(|note| note.contains("copy-on-write")),
        "mode = git is no fallback, and says nothing: {notes:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_worktrees_leaves_the_merged_tree_as_a_directory() {
    let fixture = GitFixture::with_files(&[("README", "the base\n"), ("src/a.txt", "alpha\n")]);
    let repo = fixture.open().await;
    if !overlay_or_skip("keep_worktrees_in_overlay_mode", repo.worktrees_home()).await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let steps = vec![(
        "bash",
        json!({"command": "echo kept > kept.txt && ln -s src/a.txt link && rm README"}),
    )];
    let server = obedient_server(steps).await;
    let mut options = options(&fixture, home.path(), WorktreeMode::Overlay);
    options.keep_worktrees = true;
    let (report, _) = run(&fixture, &server, options).await;
    assert_eq!(report.subtasks[0].status, SubtaskOutcome::Merged);
    let kept = repo
        .default_worktrees_dir(&report.run_id.parse().unwrap())
        .join("1");
    let mut seen = snapshot(&kept);
    seen.retain(|(name, _)| name != ".git");
    assert_eq!(
        seen,
        pairs(&[
            ("kept.txt", "kept\n"),
            ("link", "-> src/a.txt"),
            ("src", "dir"),
            ("src/a.txt", "alpha\n"),
        ]),
        "the kept worktree is a real directory holding the merged tree"
    );
    assert_eq!(
        crate::support::git_fixture::git_in(&fixture.home(), &kept, &["status", "--porcelain"]),
        "",
        "git in the kept directory sees it as its branch's commit"
    );
    assert_eq!(
        mounts_beneath(repo.worktrees_home()),
        Vec::<String>::new(),
        "no overlay outlives the run"
    );
}

// ---------------------------------------------------------------------------------------
// No mount outlives grove; the fallback and the forced mode, through the binary.

/// Where the helper below makes its tree and writes its pids.
const HELPER_DIR: &str = "GROVE_TEST_OVERLAY_HELPER_DIR";

/// Not a test: the grove process of
/// `a_killed_grove_leaves_no_tree_host_no_command_and_no_mount`, started by it and killed
/// with SIGKILL while a command runs in its tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by a_killed_grove_leaves_no_tree_host_no_command_and_no_mount"]
async fn helper_a_grove_with_a_tree_that_gets_killed() {
    let Some(dir) = std::env::var_os(HELPER_DIR).map(PathBuf::from) else {
        return;
    };
    let lower = dir.join("base");
    std::fs::create_dir_all(&lower).unwrap();
    std::fs::write(lower.join("README"), "base\n").unwrap();
    let layers = Layers::beside(&lower, &dir.join("tree"));
    let tree = Arc::new(OverlayTree::new(
        TreeHost::start(layers.clone()).await.unwrap(),
    ));
    std::fs::write(dir.join("host"), tree.host_pid().unwrap().to_string()).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let sandboxed: Arc<dyn CommandExecutor> = Arc::new(SandboxedExecutor::new(
        SandboxPolicy::default(),
        [(OsString::from("PATH"), path)],
    ));
    let _ = in_tree(Some(tree.as_ref()), &sandboxed)
        .unwrap()
        .execute(ExecRequest {
            // Written in the tree: it lands in the upper directory.
            command: "echo started > shell; sleep 100131".to_owned(),
            cwd: layers.mount_point.clone(),
            timeout: Duration::from_secs(120),
            cancel: CancellationToken::new(),
            output_cap: OutputCap::default(),
        })
        .await;
}

#[tokio::test]
async fn a_killed_grove_leaves_no_tree_host_no_command_and_no_mount() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    if !overlay_or_skip("a_killed_grove_leaves_no_mount", &root).await {
        return;
    }
    let mut grove = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::overlay::helper_a_grove_with_a_tree_that_gets_killed",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_DIR, &root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let read_pid = |name: &str| {
        std::fs::read_to_string(root.join(name))
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let shell_file = "tree.cow/upper/shell";
    while (read_pid("host").is_none() || !root.join(shell_file).exists())
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let host = read_pid("host").unwrap();
    // The command's own pids are its pid namespace's: found by its argument here.
    let shell = || running_with_arg("100131");
    assert_eq!(shell().len(), 1, "the command runs in the tree");
    assert!(
        !mounts_beneath(&root).is_empty(),
        "while grove lives, its tree is mounted (in the host's namespace)"
    );
    grove.kill().unwrap(); // SIGKILL: grove gets no chance to clean up.
    grove.wait().unwrap();
    let gone = |pid: i32| match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !(gone(host) && shell().is_empty() && mounts_beneath(&root).is_empty())
        && std::time::Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        (gone(host), shell(), mounts_beneath(&root)),
        (true, Vec::new(), Vec::new()),
        "the tree host and the command die with grove, and the mount goes with them"
    );
}

/// `grove ARGS` inside a user namespace whose own limit allows no further user
/// namespace (a container that refuses them): the overlay is refused, the rest works.
/// `None` when this system cannot make that namespace (`unshare` missing or refused).
async fn grove_without_user_namespaces(
    grove: &crate::support::grove::Grove,
    args: &[&str],
) -> Option<std::process::Output> {
    let probe = std::process::Command::new("unshare")
        .args(["-U", "-r", "true"])
        .output();
    if !probe.is_ok_and(|output| output.status.success()) {
        eprintln!("skipped: `unshare -U -r` is not available here");
        return None;
    }
    let mut command = std::process::Command::new("unshare");
    grove.seal(&mut command);
    command
        .args([
            "-U",
            "-r",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
            crate::support::grove::GROVE,
        ])
        .args(args)
        .stdin(std::process::Stdio::null());
    Some(
        tokio::process::Command::from(command)
            .output()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_overlay_is_refused_auto_falls_back_in_one_line_and_forced_overlay_exits_1() {
    let fixture = GitFixture::with_files(&[("README", "the base\n")]);
    let server = obedient_server(vec![(
        "write_file",
        json!({"path": "README", "content": "changed\n"}),
    )])
    .await;
    let grove = crate::support::grove::Grove::in_repo(&fixture).with_server(&server);
    let Some(auto) =
        grove_without_user_namespaces(&grove, &["run", "--json", "Change the files."]).await
    else {
        return;
    };
    let stderr = String::from_utf8_lossy(&auto.stderr).into_owned();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("copy-on-write"))
        .collect();
    assert_eq!(
        (auto.status.code(), lines.len()),
        (Some(0), 1),
        "auto falls back to git worktrees, said in one line, and the run works: {stderr}"
    );
    assert!(
        lines[0].contains("using git worktrees"),
        "the line says what grove does instead: {}",
        lines[0]
    );

    fixture.write(".grove/config.toml", "[worktree]\nmode = \"overlay\"\n");
    let forced = grove_without_user_namespaces(&grove, &["run", "Change the files."])
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&forced.stderr).into_owned();
    assert_eq!(
        (
            forced.status.code(),
            stderr.contains(
                "copy-on-write worktrees ([worktree] mode = \"overlay\") are unavailable here"
            )
        ),
        (Some(1), true),
        "a forced overlay that the system refuses is a clear error, exit 1: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setup_runs_once_in_the_base_tree_for_every_worker_and_is_never_committed() {
    let fixture = GitFixture::with_files(&[("README", "the base\n"), (".gitignore", "deps/\n")]);
    let repo = fixture.open().await;
    if !overlay_or_skip("setup_once_per_base", repo.worktrees_home()).await {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let server = FakeServer::with_responder(|request| match who(request) {
        "lead" => crate::support::scripted_run::lead_reply(
            request,
            &[("WRITE one.txt one", None), ("WRITE two.txt two", None)],
        ),
        "reviewer" => crate::support::scripted_run::reviewer_reply(request),
        _ => crate::support::scripted_run::worker_reply(request),
    })
    .await;
    let setup = "echo ran >> setup-runs.txt; mkdir -p deps && echo warm > deps/cache";
    let mut options = options(&fixture, home.path(), WorktreeMode::Overlay);
    options.jobs = 2;
    options.worktree_setup.setup = Some(setup.to_owned());

    let (report, notes) = run(&fixture, &server, options).await;

    assert_eq!(
        report
            .subtasks
            .iter()
            .map(|subtask| subtask.status)
            .collect::<Vec<_>>(),
        vec![SubtaskOutcome::Merged, SubtaskOutcome::Merged],
        "both subtasks merged: {report:#?}"
    );
    let bases: Vec<PathBuf> = std::fs::read_dir(repo.bases_home())
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.is_dir() && !path.file_name().unwrap().to_string_lossy().starts_with('.')
        })
        .collect();
    assert_eq!(bases.len(), 1, "one base tree for the run: {bases:?}");
    assert_eq!(
        (
            std::fs::read_to_string(bases[0].join("tree/setup-runs.txt")).unwrap(),
            std::fs::read_to_string(bases[0].join("tree/deps/cache")).unwrap(),
        ),
        ("ran\n".to_owned(), "warm\n".to_owned()),
        "the setup ran once, in the base tree both workers' trees show"
    );
    assert_eq!(
        notes
            .iter()
            .filter(|note| note.contains("running the setup command"))
            .count(),
        1,
        "one setup note for the run: {notes:#?}"
    );
    assert_eq!(
        fixture.git(&["ls-tree", "-r", "--name-only", &report.branch]),
        ".gitignore\nREADME\none.txt\ntwo.txt",
        "what setup made is not committed (a file git does not ignore included), the \
         workers' files are"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfined_command_that_unmounts_the_tree_leaves_it_to_the_next() {
    let Some(scene) = Scene::mounted("unmount_in_a_tree").await else {
        return;
    };
    let mount_point = scene.layers.mount_point.display().to_string();
    let first = scene
        .unconfined(&format!(
            "cd / && umount -l {mount_point} && echo unmounted"
        ))
        .await;
    let next = scene.unconfined("cat README").await;
    assert_eq!(
        (
            first.1.contains("unmounted") || first.0 != ExecOutcome::Exited(0),
            next
        ),
        (true, (ExecOutcome::Exited(0), "the base\n".to_owned())),
        "what one command does to its mounts stays its own: the next sees the tree ({first:?})"
    );
}
