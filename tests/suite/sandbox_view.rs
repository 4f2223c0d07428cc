//! The view a command's file system is built from (issue 42): the attacks that got a
//! secret out of the "everything but a list" sandbox, tried again through bash, Python's
//! `open`, grove's own file tools through a link, a secret written while the command
//! runs, another tree's socket, the host's and another tree's IPC objects.
//!
//! Every secret is a canary under the test's own directories (a scratch `HOME`), never
//! the user's real files; the test asserts its bytes reach no command's output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use grove::tools::sandbox::{ProjectView, SandboxPolicy};
use grove::tools::{ToolContext, ToolSet, builtin_with_executor};

use crate::suite::sandbox::{SECRET, Scene, repository_with_worktrees, run_in};

/// Credential stores no deny list named (each got its secret out before), relative to
/// the home.
const STORES_IN_HOME: &[&str] = &[
    ".pgpass",
    ".my.cnf",
    ".config/containers/auth.json",
    ".config/glab-cli/config.yml",
    ".config/rclone/rclone.conf",
    ".config/sops/age/keys.txt",
    ".fly/config.yml",
    ".databrickscfg",
    ".config/composer/auth.json",
    ".ipython/profile_default/history.sqlite",
    ".local/share/atuin/history.db",
    ".config/grove/config.toml",
    ".cache/grove/other-repo-0123/20260101-000000-0000/1/unreviewed.txt",
    ".ssh/id_ed25519",
    ".cargo/credentials.toml",
    ".npmrc",
];

/// The same, outside the home: `$XDG_RUNTIME_DIR`'s podman login, another checkout's
/// `.env` and its git config with a token URL, and the key file
/// `GOOGLE_APPLICATION_CREDENTIALS` names.
const STORES_ELSEWHERE: &[&str] = &[
    "run/user/0/containers/auth.json",
    "other-checkout/.env",
    "other-checkout/.git/config",
    "gcloud/service-account.json",
];

/// Reads `path` every way a worker's command can: `cat`, Python's `open`, `grep`.
fn read_every_way(path: &Path) -> String {
    let path = path.display();
    format!(
        "cat '{path}' 2>/dev/null; \
         python3 -c 'import sys; print(open(sys.argv[1]).read())' '{path}' 2>/dev/null; \
         grep -r . '{path}' 2>/dev/null; "
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_store_is_read_whether_a_list_named_it_or_not() {
    let Some(scene) = Scene::confined("no_credential_store_is_read_whether_a_list_named_it_or_not")
    else {
        return;
    };
    let (fixture, trees) = repository_with_worktrees("");
    let root = scene.home.parent().unwrap().to_path_buf();
    let mut planted: Vec<PathBuf> = STORES_IN_HOME.iter().map(|p| scene.home.join(p)).collect();
    planted.extend(STORES_ELSEWHERE.iter().map(|p| root.join(p)));
    // A Kerberos ticket cache in the host's /tmp, as `kinit` leaves it.
    let ticket = PathBuf::from(format!("/tmp/krb5cc_grove_test_{}", std::process::id()));
    planted.push(ticket.clone());
    // The user's uncommitted secret in the checkout the worktrees come from.
    planted.push(fixture.repo.join(".env"));
    for path in &planted {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{SECRET}\n")).unwrap();
    }
    let executor = scene.executor_for(&fixture);
    let mut command: String = planted.iter().map(|path| read_every_way(path)).collect();
    // The system's private parts, as root sees them on the host.
    command.push_str(
        "cat /etc/shadow /etc/gshadow 2>/dev/null | grep -c : ; \
         ls -A /etc/ssl/private 2>/dev/null | wc -l; \
         ls -A / | tr '\\n' ' '; echo; ls -A ~ | tr '\\n' ' '; echo; \
         ls -A /root 2>/dev/null | tr '\\n' ' '; echo",
    );
    let result = run_in(&executor, &trees[0], &command).await;
    std::fs::remove_file(&ticket).unwrap();
    let output = result.output_text();
    assert!(
        !output.contains(SECRET),
        "no canary was read by any means: {output}"
    );
    let lines: Vec<&str> = output.lines().collect();
    let home_entries: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        (
            lines[0],
            lines[1],
            home_entries.iter().any(|entry| entry.starts_with(".ssh"))
        ),
        ("0", "0", false),
        "the system's secrets and the home's stores do not exist for the command: {output}"
    );
    let mut top: Vec<&str> = lines[2].split_whitespace().collect();
    top.sort_unstable();
    for absent in ["run", "home", "srv", "mnt", "media", "var"] {
        assert!(
            !top.contains(&absent),
            "/{absent} does not exist for the command (its root is built): {top:?}"
        );
    }
    // The machine's own /root (grove's home here) shows the toolchains on PATH alone.
    let root_home: Vec<&str> = lines[4].split_whitespace().collect();
    for store in [".npmrc", ".gitconfig", ".claude", ".ssh", ".bashrc"] {
        assert!(
            !root_home.contains(&store),
            "another home shows no {store}, only the toolchain stores granted: {root_home:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grove_s_file_tools_follow_no_link_out_of_the_tree_to_a_store() {
    let Some(scene) =
        Scene::confined("grove_s_file_tools_follow_no_link_out_of_the_tree_to_a_store")
    else {
        return;
    };
    let store = scene.home.join(".pgpass");
    std::fs::write(&store, format!("db:5432:*:me:{SECRET}\n")).unwrap();
    std::os::unix::fs::symlink(&store, scene.worktree.join("pgpass")).unwrap();
    let tools = builtin_with_executor(
        ToolSet::Worker,
        Arc::new(scene.executor(SandboxPolicy::default())),
    );
    let ctx = ToolContext::plain(scene.worktree.clone(), CancellationToken::new());
    let mut outputs = Vec::new();
    for (tool, input) in [
        ("read_file", json!({ "path": "pgpass" })),
        ("grep", json!({ "pattern": "5432" })),
        ("bash", json!({ "command": "cat pgpass; echo status=$?" })),
    ] {
        let output = tools.dispatch(tool, input, &ctx).await.unwrap();
        outputs.push(output.content);
    }
    for output in &outputs {
        assert!(
            !output.contains(SECRET),
            "a link to ~/.pgpass gives its bytes to no tool: {outputs:#?}"
        );
    }
    assert!(
        outputs[2].contains("No such file or directory") && outputs[2].contains("status=1"),
        "the link's target does not exist for the command: {}",
        outputs[2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_or_a_socket_made_while_the_command_runs_is_out_of_its_reach() {
    let Some(scene) =
        Scene::confined("a_secret_or_a_socket_made_while_the_command_runs_is_out_of_its_reach")
    else {
        return;
    };
    let executor = scene.executor(SandboxPolicy::default());
    let gem = scene.home.join(".gem/credentials");
    let socket = scene.home.join("agent.sock");
    // The command looks for both for three seconds; they appear after half a second.
    let command = format!(
        "python3 - <<'EOF'\n\
         import socket, time\n\
         seen = set()\n\
         for _ in range(30):\n\
         \x20   try:\n\
         \x20       seen.add(open('{gem}').read().strip())\n\
         \x20   except OSError as error:\n\
         \x20       seen.add(type(error).__name__)\n\
         \x20   try:\n\
         \x20       s = socket.socket(socket.AF_UNIX)\n\
         \x20       s.connect('{socket}')\n\
         \x20       seen.add('connected')\n\
         \x20   except OSError as error:\n\
         \x20       seen.add('socket ' + type(error).__name__)\n\
         \x20   time.sleep(0.1)\n\
         print(sorted(seen))\n\
         EOF",
        gem = gem.display(),
        socket = socket.display()
    );
    let writer = {
        let gem = gem.clone();
        let socket = socket.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            std::fs::create_dir_all(gem.parent().unwrap()).unwrap();
            std::fs::write(&gem, SECRET).unwrap();
            let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
            listener.set_nonblocking(true).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(4));
            listener.accept().is_ok()
        })
    };
    let result = run_in(&executor, &scene.worktree, &command).await;
    let accepted = writer.join().unwrap();
    assert_eq!(
        (result.output_text(), accepted),
        (
            "['FileNotFoundError', 'socket FileNotFoundError']\n".to_owned(),
            false
        ),
        "a credential file and a socket made in the home while the command runs do not \
         exist for it, before or after"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_share_no_socket_no_ipc_object_with_each_other_or_the_host() {
    let Some(scene) =
        Scene::confined("trees_share_no_socket_no_ipc_object_with_each_other_or_the_host")
    else {
        return;
    };
    let (fixture, trees) = repository_with_worktrees("");
    let executor = scene.executor_for(&fixture);
    let ipc_count = "ipcs -m -q 2>/dev/null | grep -c '^0x' || true";
    // Sizes no other program here uses, so that the host's list can be searched for them
    // whatever else runs on the machine meanwhile.
    let made_inside = "ipcs -m 2>/dev/null | grep -c ' 40999 ' || true";
    // The host's own segment, which no command may see.
    let host_segment = std::process::Command::new("ipcmk")
        .args(["-M", "40977"])
        .output()
        .unwrap();
    let host_id: String = String::from_utf8_lossy(&host_segment.stdout)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let a_socket = trees[0].join("a.sock");
    let holder = format!(
        "ipcmk -M 40999 >/dev/null && ipcmk -Q >/dev/null && {ipc_count}; \
         python3 -c \"import socket, time\ns = socket.socket(socket.AF_UNIX)\n\
         s.bind('{}')\ns.listen(1)\ntime.sleep(3)\"",
        a_socket.display()
    );
    let intruder = format!(
        "sleep 1; {ipc_count}; python3 -c \"import socket\ns = socket.socket(socket.AF_UNIX)\n\
         try:\n    s.connect('{}')\n    print('connected')\nexcept OSError as e:\n    \
         print(type(e).__name__)\"",
        a_socket.display()
    );
    let (a, b) = tokio::join!(
        run_in(&executor, &trees[0], &holder),
        run_in(&executor, &trees[1], &intruder)
    );
    let left_on_host = std::process::Command::new("sh")
        .args(["-c", made_inside])
        .output()
        .unwrap();
    std::process::Command::new("ipcrm")
        .args(["-m", &host_id])
        .status()
        .unwrap();
    assert_eq!(
        (
            a.output_text(),
            b.output_text(),
            String::from_utf8_lossy(&left_on_host.stdout)
                .trim()
                .to_owned(),
        ),
        (
            "2\n".to_owned(),
            "0\nFileNotFoundError\n".to_owned(),
            "0".to_owned(),
        ),
        "tree A sees its own two IPC objects and none of the host's; tree B sees none of \
         A's nor the host's, and A's socket does not exist for it; A's segment is not on \
         the host, during or after it"
    );
}

/// A command's view of the project: the user's checkout path shows the tree (so an
/// editable install reaches the tree's code), and its git data the tree's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkout_path_shows_the_tree_and_git_works_there() {
    let Some(scene) = Scene::confined("the_checkout_path_shows_the_tree_and_git_works_there")
    else {
        return;
    };
    let (fixture, trees) = repository_with_worktrees("");
    std::fs::write(trees[0].join("src/a.txt"), "changed in the tree\n").unwrap();
    let executor = scene
        .executor(SandboxPolicy::default())
        .project(ProjectView {
            checkout: Some(fixture.repo.clone()),
            common_dir: Some(fixture.repo.join(".git")),
            share: Vec::new(),
        });
    let repo = fixture.repo.canonicalize().unwrap();
    let command = format!(
        "cat {repo}/src/a.txt; echo new > {repo}/made-there; cat made-there; \
         git -C {repo} status --short; git rev-parse --abbrev-ref HEAD",
        repo = repo.display()
    );
    let result = run_in(&executor, &trees[0], &command).await;
    assert_eq!(
        (
            result.output_text(),
            std::fs::read_to_string(repo.join("src/a.txt")).unwrap()
        ),
        (
            "changed in the tree\nnew\n M src/a.txt\n?? made-there\ngrove/r/1\n".to_owned(),
            "alpha\n".to_owned()
        ),
        "the checkout's path is the tree (its change, a file made through it), git there \
         is the tree's; the user's checkout is untouched"
    );
}

/// rustc, git and pip write their output beside it and rename it into place: a file or
/// a directory moved or hard-linked across directories of the tree must work (a second
/// Landlock layer, for the scopes alone, refused every such move with `EXDEV`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_directories_move_across_the_trees_directories() {
    let Some(scene) = Scene::confined("files_and_directories_move_across_the_trees_directories")
    else {
        return;
    };
    let command = "mkdir -p d/a e && echo x > d/a/f && python3 -c \"import os\n\
                   os.rename('d/a/f', 'd/g')\nos.rename('d', 'e/d')\nos.link('e/d/g', 'e/h')\" \
                   && cat e/h && echo t > /tmp/t && \
                   python3 -c \"import os; os.rename('/tmp/t', 'moved')\" 2>&1 | tail -1";
    let result = run_in(
        &scene.executor(SandboxPolicy::default()),
        &scene.worktree,
        command,
    )
    .await;
    assert_eq!(
        result.output_text(),
        "x\nOSError: [Errno 18] Invalid cross-device link: '/tmp/t' -> 'moved'\n",
        "moves and links inside the tree work; one from /tmp into the tree crosses a mount \
         and is refused as across devices"
    );
}

/// A worker's git works on its own tree: it stages, removes, moves, stashes and branches
/// in a copy of the repository only its tree sees; `git commit` says why grove commits;
/// the repository itself (refs, objects, the tree's real index) is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_git_stages_and_stashes_in_its_own_copy_and_never_commits() {
    let Some(scene) =
        Scene::confined("a_workers_git_stages_and_stashes_in_its_own_copy_and_never_commits")
    else {
        return;
    };
    let (fixture, trees) = repository_with_worktrees("");
    let executor = scene.executor_for(&fixture);
    let snapshot = || {
        (
            fixture.git(&["for-each-ref", "--format=%(refname) %(objectname)"]),
            fixture.git(&["count-objects"]),
            std::fs::read(fixture.repo.join(".git/worktrees/wt1/index")).unwrap(),
        )
    };
    let before = snapshot();
    let command = "echo new > src/b.txt && git add src/b.txt && git rm -q src/a.txt && \
                   git mv src/b.txt src/c.txt && git status --short && \
                   git stash -q && git stash list | wc -l && git stash pop -q && \
                   git checkout -q -b scratch && git branch --show-current && \
                   git commit -qm mine 2>&1; echo commit=$?";
    let result = run_in(&executor, &trees[0], command).await;
    let after = snapshot();
    assert_eq!(
        (&after.0, &after.1),
        (&before.0, &before.1),
        "the repository's refs and objects are as they were"
    );
    assert_eq!(
        (
            result.output_text(),
            after.2 == before.2,
            trees[0].join("src/c.txt").exists()
        ),
        (
            "D  src/a.txt\nA  src/c.txt\n1\nscratch\ngrove: commits are grove's to make: it \
             commits this worktree as it is when your turn ends, so leave your changes in \
             it. git add, rm, mv, stash, branch and checkout work here, in a copy of the \
             repository only this worktree sees; nothing reaches the repository or a \
             remote.\ncommit=1\n"
                .to_owned(),
            true,
            true
        ),
        "git add, rm, mv, stash and branch work in the tree; commit is refused saying why; \
         the repository's refs, objects and the tree's index are as they were"
    );
}

/// The check runs the project's code, which a worker wrote: a test that reads the user's
/// stores and prints them must put no secret into the check's output, which the
/// reviewer (a model) reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_prints_the_users_stores_sends_no_secret_to_any_model() {
    if !crate::suite::sandbox::sandbox_or_skip(
        "a_check_that_prints_the_users_stores_sends_no_secret_to_any_model",
    ) {
        return;
    }
    let fixture = crate::support::git_fixture::GitFixture::with_files(&[("src/a.txt", "a\n")]);
    let home = fixture.home();
    let other = fixture.dir.path().join("other-checkout");
    for path in [
        home.join(".pgpass"),
        home.join(".config/rclone/rclone.conf"),
        other.join(".env"),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, SECRET).unwrap();
    }
    let check = format!(
        "cat ~/.pgpass ~/.config/rclone/rclone.conf {}/.env; \
         python3 -c \"import glob; [print(open(p).read()) for p in glob.glob('$HOME/.*')]\"; true",
        other.display()
    );
    let server = crate::suite::sandbox::obedient_server(vec![(
        "write_file",
        json!({ "path": "src/a.txt", "content": "A\n" }),
    )])
    .await;
    let options = grove::run::RunOptions {
        check: Some(grove::settings::options::CheckOptions::new(&check)),
        ..crate::suite::sandbox::sandboxed_options(&fixture, &home)
    };
    let report = grove::run::run(
        &fixture.repo,
        options,
        crate::suite::sandbox::models(&server),
        grove::event::EventSink::discard(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    server.assert_no_violations();
    let leaked: Vec<String> = server
        .requests()
        .iter()
        .filter(|request| request.raw_body.contains(SECRET))
        .map(|request| request.raw_body.clone())
        .collect();
    assert_eq!(
        (leaked, report.subtasks.len()),
        (Vec::<String>::new(), 1),
        "the check ran on the base, the worktree and the result, and no request to a model \
         holds a secret it tried to print"
    );
}

/// A reviewer's `run` sees the tree as the worker left it, writes into a copy that is
/// thrown away when the command ends, and reaches no network; the tree never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disposable_view_shows_the_tree_and_throws_every_write_away() {
    let Some(scene) =
        Scene::confined("a_disposable_view_shows_the_tree_and_throws_every_write_away")
    else {
        return;
    };
    let (fixture, trees) = repository_with_worktrees("");
    std::fs::write(trees[0].join("src/a.txt"), "the worker's\n").unwrap();
    let executor = scene.executor_for(&fixture);
    let disposable = grove::tools::CommandExecutor::disposable(&executor).unwrap();
    let before = std::fs::read_dir(&trees[0]).unwrap().count();
    let first = run_in(
        disposable.as_ref(),
        &trees[0],
        "cat src/a.txt; echo scratch > made.txt; echo more >> src/a.txt; rm README 2>/dev/null; \
         cat made.txt; git status --short",
    )
    .await;
    let second = run_in(
        disposable.as_ref(),
        &trees[0],
        "cat made.txt 2>&1; cat src/a.txt",
    )
    .await;
    assert_eq!(
        (
            first.output_text(),
            second.output_text(),
            std::fs::read_to_string(trees[0].join("src/a.txt")).unwrap(),
            std::fs::read_dir(&trees[0]).unwrap().count()
        ),
        (
            "the worker's\nscratch\n M src/a.txt\n?? made.txt\n".to_owned(),
            "cat: made.txt: No such file or directory\nthe worker's\n".to_owned(),
            "the worker's\n".to_owned(),
            before
        ),
        "a command sees the worker's change and may write; the next sees none of its writes, \
         and the tree is as the worker left it"
    );
}
