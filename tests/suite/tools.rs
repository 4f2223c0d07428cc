//! The built-in tools as the agent loop sees them: through `Registry::dispatch`.
//!
//! Every test arranges a worktree root next to an `outside` directory (the thing that must
//! never be touched), runs tools, and asserts the whole result the model would see.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grove::tools::{
    CommandExecutor, ExecError, ExecRequest, LocalExecutor, OutputCap, Registry, ToolContext,
    ToolOutput, ToolSet, builtin, builtin_with_executor,
};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A worktree root and a sibling directory outside it, with a secret file in the latter.
struct Fixture {
    _temp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
    tools: Registry,
}

const SECRET: &str = "outside secret\n";

impl Fixture {
    fn new() -> Self {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path().canonicalize().unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret.txt"), SECRET).unwrap();
        let ctx = ToolContext::plain(root.clone(), CancellationToken::new());
        let executor = LocalExecutor::with_env(test_env(&base));
        let tools = builtin_with_executor(ToolSet::Worker, Arc::new(executor));
        Self {
            _temp: temp,
            root,
            outside,
            ctx,
            tools,
        }
    }

    fn write(&self, path: &str, contents: impl AsRef<[u8]>) {
        let path = self.root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }

    fn read(&self, path: &str) -> String {
        fs::read_to_string(self.root.join(path)).unwrap()
    }

    async fn call(&self, tool: &str, input: Value) -> ToolOutput {
        self.tools
            .dispatch(tool, input, &self.ctx)
            .await
            .unwrap_or_else(|fatal| panic!("`{tool}` failed fatally: {fatal}"))
    }
}

/// The environment handed to the bash executor: what a real user's shell would have,
/// including secrets that must never reach a command.
fn test_env(base: &Path) -> Vec<(OsString, OsString)> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), base.as_os_str().to_owned()),
        ("LANG".into(), "C.UTF-8".into()),
        (
            "GROVE_TEST_SECRET_TOKEN".into(),
            "grove-fake-token-value".into(),
        ),
        ("ANTHROPIC_API_KEY".into(), "sk-ant-fake-key-value".into()),
        ("UNLISTED_SETTING".into(), "not-allow-listed".into()),
    ]
}

fn assert_refused(output: &ToolOutput, what: &str) {
    assert!(
        output.is_error,
        "{what}: an escape must be refused, got {output:?}"
    );
    assert!(
        output.content.contains("outside the worktree"),
        "{what}: the refusal must say why: {}",
        output.content
    );
    assert!(
        !output.content.contains(SECRET.trim()),
        "{what}: nothing from outside may leak: {}",
        output.content
    );
}

// ---------------------------------------------------------------------------------------
// Confinement

/// Every file tool with a path argument, and an input that uses `path`.
fn path_calls(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": path})),
        (
            "write_file",
            json!({"path": path, "content": "overwritten"}),
        ),
        (
            "edit_file",
            json!({"path": path, "old_string": "outside", "new_string": "edited"}),
        ),
        ("list_files", json!({"path": path})),
        ("grep", json!({"pattern": "secret", "path": path})),
    ]
}

#[tokio::test]
async fn every_file_tool_refuses_dotdot_and_absolute_escapes() {
    let fx = Fixture::new();
    fx.write("a/inside.txt", "inside\n");
    let absolute_secret = fx.outside.join("secret.txt");
    for path in [
        "../outside/secret.txt",
        "a/../../outside/secret.txt",
        "/etc/passwd",
        absolute_secret.to_str().unwrap(),
    ] {
        for (tool, input) in path_calls(path) {
            let output = fx.call(tool, input).await;
            assert_refused(&output, &format!("{tool} {path}"));
        }
    }
    assert_eq!(
        fs::read_to_string(&absolute_secret).unwrap(),
        SECRET,
        "the outside file is untouched"
    );
}

#[tokio::test]
async fn every_file_tool_refuses_symlinks_that_lead_outside() {
    let fx = Fixture::new();
    std::os::unix::fs::symlink("../outside/secret.txt", fx.root.join("file-link")).unwrap();
    std::os::unix::fs::symlink("../outside", fx.root.join("dir-link")).unwrap();
    std::os::unix::fs::symlink(&fx.outside, fx.root.join("absolute-link")).unwrap();
    for path in [
        "file-link",
        "dir-link/secret.txt",
        "dir-link",
        "absolute-link/secret.txt",
    ] {
        for (tool, input) in path_calls(path) {
            if path == "dir-link" && matches!(tool, "write_file" | "edit_file" | "read_file") {
                continue; // covered through dir-link/secret.txt
            }
            let output = fx.call(tool, input).await;
            assert_refused(&output, &format!("{tool} {path}"));
        }
    }
    let output = fx
        .call(
            "write_file",
            json!({"path": "dir-link/new.txt", "content": "x"}),
        )
        .await;
    assert_refused(&output, "write_file through a directory symlink");
    assert_eq!(
        (
            fs::read_to_string(fx.outside.join("secret.txt")).unwrap(),
            fx.outside.join("new.txt").exists()
        ),
        (SECRET.to_owned(), false),
        "writes through symlinks never reach outside"
    );
}

#[tokio::test]
async fn a_directory_swapped_for_an_outside_symlink_between_calls_is_refused() {
    let fx = Fixture::new();
    fx.write("sub/secret.txt", "inside secret\n");
    let first = fx
        .call("read_file", json!({"path": "sub/secret.txt"}))
        .await;
    assert_eq!(
        first,
        ToolOutput::ok("     1\tinside secret\n"),
        "the first access inside the root works"
    );

    fs::rename(fx.root.join("sub"), fx.root.join("sub-old")).unwrap();
    std::os::unix::fs::symlink("../outside", fx.root.join("sub")).unwrap();

    for (tool, input) in path_calls("sub/secret.txt") {
        let output = fx.call(tool, input).await;
        assert_refused(&output, &format!("{tool} after the swap"));
    }
    for (tool, input) in [
        ("list_files", json!({"path": "sub"})),
        ("grep", json!({"pattern": "secret", "path": "sub"})),
    ] {
        let output = fx.call(tool, input).await;
        assert_refused(&output, &format!("{tool} of the swapped directory"));
    }
    assert_eq!(
        fs::read_to_string(fx.outside.join("secret.txt")).unwrap(),
        SECRET,
        "the outside file is untouched"
    );
}

#[tokio::test]
async fn symlinks_and_absolute_paths_that_stay_inside_are_followed() {
    let fx = Fixture::new();
    fx.write("real/data.txt", "data\n");
    std::os::unix::fs::symlink("real", fx.root.join("alias")).unwrap();
    std::os::unix::fs::symlink("data.txt", fx.root.join("real/data-link")).unwrap();
    std::os::unix::fs::symlink(fx.root.join("real"), fx.root.join("absolute-alias")).unwrap();
    std::os::unix::fs::symlink(fx.root.join("real/data.txt"), fx.root.join("absolute-file"))
        .unwrap();
    let absolute = fx.root.join("real/data.txt");
    for path in [
        "alias/data.txt",
        "real/data-link",
        "absolute-alias/data.txt",
        "absolute-file",
        absolute.to_str().unwrap(),
    ] {
        assert_eq!(
            fx.call("read_file", json!({"path": path})).await,
            ToolOutput::ok("     1\tdata\n"),
            "{path} stays inside the root and is readable"
        );
    }
    let written = fx
        .call(
            "write_file",
            json!({"path": "alias/new.txt", "content": "via alias"}),
        )
        .await;
    assert_eq!(written, ToolOutput::ok("created `alias/new.txt` (9 bytes)"));
    assert_eq!(fx.read("real/new.txt"), "via alias");
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "absolute-alias/new.txt", "old_string": "via", "new_string": "through"})
        )
        .await,
        ToolOutput::ok(
            "edited `absolute-alias/new.txt`: 1 replacement; as the file now reads:\n     1\tthrough alias\n"
        )
    );
    assert_eq!(
        fx.read("real/new.txt"),
        "through alias",
        "an absolute symlink that stays inside is followed for writes too"
    );
    assert_eq!(
        fx.call("list_files", json!({"path": "absolute-alias"}))
            .await,
        ToolOutput::ok("real/data-link (symlink)\nreal/data.txt\nreal/new.txt\n")
    );
}

// ---------------------------------------------------------------------------------------
// Dispatch and input validation

#[tokio::test]
async fn dispatch_refuses_tools_outside_the_registry() {
    let fx = Fixture::new();
    let read_only = builtin(ToolSet::ReadOnly);
    let output = read_only
        .dispatch("bash", json!({"command": "touch pwned"}), &fx.ctx)
        .await
        .unwrap();
    assert_eq!(
        output,
        ToolOutput::error(
            "tool `bash` is not available to you; your tools are: grep, list_files, read_file"
        ),
        "a read-only role cannot run bash even by naming it"
    );
    assert!(!fx.root.join("pwned").exists(), "the command never ran");

    let unknown = fx.call("rm_rf", json!({})).await;
    assert!(
        unknown.is_error && unknown.content.contains("tool `rm_rf` is not available"),
        "an unknown tool is refused: {unknown:?}"
    );
}

#[tokio::test]
async fn invalid_input_is_answered_naming_the_field() {
    let fx = Fixture::new();
    let cases = [
        (
            "read_file",
            json!("src/lib.rs"),
            "the input to `read_file` must be a JSON object matching its schema (it is not valid \
             JSON: expected value at line 1 column 1); got: src/lib.rs",
        ),
        (
            "read_file",
            json!({}),
            "invalid input for `read_file`: the required field `path` is missing (expected a string)",
        ),
        (
            "read_file",
            json!({"path": 42}),
            "invalid input for `read_file`: the field `path` must be a string, got an integer 42",
        ),
        (
            "read_file",
            json!({"path": "a", "offset": "ten"}),
            "invalid input for `read_file`: the field `offset` must be an integer ≥ 1, got a string \"ten\"",
        ),
        (
            "write_file",
            json!({"path": "a"}),
            "invalid input for `write_file`: the required field `content` is missing (expected a string)",
        ),
        (
            "edit_file",
            json!({"path": "a", "old_string": "x", "new_string": "y", "replace_all": "yes"}),
            "invalid input for `edit_file`: the field `replace_all` must be a boolean (true or false), got a string \"yes\"",
        ),
        (
            "bash",
            json!({"command": ["ls"]}),
            "invalid input for `bash`: the field `command` must be a string, got an array [\"ls\"]",
        ),
        (
            "bash",
            json!({"command": "ls", "timeout_s": 100000}),
            "invalid input for `bash`: the field `timeout_s` must be an integer from 1 to 600, got an integer 100000",
        ),
        (
            "grep",
            json!({"path": "."}),
            "invalid input for `grep`: the required field `pattern` is missing (expected a string)",
        ),
        (
            "list_files",
            json!({"path": false}),
            "invalid input for `list_files`: the field `path` must be a string, got a boolean false",
        ),
    ];
    for (tool, input, expected) in cases {
        assert_eq!(
            fx.call(tool, input.clone()).await,
            ToolOutput::error(expected),
            "{tool} with {input} is answered with a message naming the problem"
        );
    }
}

#[tokio::test]
async fn junk_fields_from_the_model_are_ignored() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha\n");
    let output = fx
        .call(
            "read_file",
            json!({"path": "a.txt", "explanation": "I want to read it", "offset": null}),
        )
        .await;
    assert_eq!(output, ToolOutput::ok("     1\talpha\n"));
}

// ---------------------------------------------------------------------------------------
// read_file

#[tokio::test]
async fn read_file_numbers_lines_and_pages_with_offset_and_limit() {
    let fx = Fixture::new();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    fx.write("ten.txt", &text);
    assert_eq!(
        fx.call(
            "read_file",
            json!({"path": "ten.txt", "offset": 4, "limit": 3})
        )
        .await,
        ToolOutput::ok(
            "     4\tline 4\n     5\tline 5\n     6\tline 6\n\
             [showing lines 4-6: the limit of 3 lines was reached; the file (71 bytes) continues: \
             call read_file with offset=7 to read more]\n"
        )
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "ten.txt", "offset": 9}))
            .await,
        ToolOutput::ok("     9\tline 9\n    10\tline 10\n"),
        "reading to the end adds no note"
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "ten.txt", "offset": 11}))
            .await,
        ToolOutput::error("offset 11 is past the end of `ten.txt`, which has 10 lines")
    );
    assert_eq!(
        fx.call("read_file", json!({"path": "missing.txt"})).await,
        ToolOutput::error("cannot read `missing.txt`: it does not exist")
    );
    fx.write("empty.txt", "");
    assert_eq!(
        fx.call("read_file", json!({"path": "empty.txt"})).await,
        ToolOutput::ok("`empty.txt` is empty (0 bytes)")
    );
    fs::create_dir(fx.root.join("dir")).unwrap();
    assert_eq!(
        fx.call("read_file", json!({"path": "dir"})).await,
        ToolOutput::error("cannot read `dir`: it is a directory (list_files shows what it holds)")
    );
}

#[tokio::test]
async fn read_file_shows_every_byte_of_binary_and_invalid_utf8_files_written_out() {
    let fx = Fixture::new();
    fx.write("blob.bin", [b"PK\x03\x04".as_slice(), &[0u8; 3]].concat());
    assert_eq!(
        fx.call("read_file", json!({"path": "blob.bin"})).await,
        ToolOutput::ok(
            "     1\tPK\\x03\\x04\\x00\\x00\\x00\n\
             [`blob.bin` holds NUL bytes, so git calls it binary; line 1 is written out: a \
             control character or a byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n"
        ),
        "a binary file is shown, never 'not shown'"
    );
    fx.write("run.sh", b"#!/bin/sh\n\0\ncurl x | sh # \\o/\n");
    assert_eq!(
        fx.call("read_file", json!({"path": "run.sh"})).await,
        ToolOutput::ok(
            "     1\t#!/bin/sh\n     2\t\\x00\n     3\tcurl x | sh # \\o/\n\
             [`run.sh` holds NUL bytes, so git calls it binary; line 2 is written out: a \
             control character or a byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n"
        ),
        "a script with one NUL (sh still runs it) shows what it runs; only the lines that \
         need it are written out, and the note names them"
    );
    fx.write("latin1.txt", b"caf\xe9\nok\n");
    assert_eq!(
        fx.call("read_file", json!({"path": "latin1.txt"})).await,
        ToolOutput::ok(
            "     1\tcaf\\xe9\n     2\tok\n\
             [`latin1.txt` holds bytes that are not UTF-8; line 1 is written out: a control \
             character or a byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n"
        )
    );
}

#[tokio::test]
async fn read_file_cuts_long_lines_without_splitting_characters() {
    let fx = Fixture::new();
    // 1999 ASCII bytes, then a 2-byte character straddling the 2000-byte cap.
    let line = format!("{}é{}", "a".repeat(1999), "b".repeat(10));
    fx.write("long.txt", format!("{line}\nshort\n"));
    let output = fx.call("read_file", json!({"path": "long.txt"})).await;
    assert_eq!(
        output,
        ToolOutput::ok(format!(
            "     1\t{} … [12 more bytes on this line: bash `sed -n 1p long.txt | cut -b \
             2000-` shows them]\n     2\tshort\n\
             [1 line(s) longer than 2000 bytes were cut; use bash (e.g. `cut -c`) to see the rest]\n",
            "a".repeat(1999)
        )),
        "a character split by the cap is dropped whole, not shown as invalid UTF-8"
    );
}

#[tokio::test]
async fn read_file_stops_at_the_byte_cap_and_says_where_to_resume() {
    let fx = Fixture::new();
    let line = "w".repeat(1500);
    fx.write("wide.txt", format!("{line}\n").repeat(100));
    let output = fx.call("read_file", json!({"path": "wide.txt"})).await;
    let expected: String = (1..=66).map(|n| format!("{n:>6}\t{line}\n")).collect();
    assert_eq!(
        output,
        ToolOutput::ok(format!(
            "{expected}[showing lines 1-66: the output cap of 100000 bytes was reached; \
             the file (150100 bytes) continues: call read_file with offset=67 to read more]\n"
        )),
        "whole lines up to 100 kB are shown, then a note with the next offset"
    );
}

#[tokio::test]
async fn read_file_streams_a_huge_file_and_caps_the_result() {
    let fx = Fixture::new();
    let path = fx.root.join("huge.log");
    let head: String = (1..=10_000).map(|n| format!("entry {n:05}\n")).collect();
    fs::write(&path, &head).unwrap();
    let size = 200 * 1024 * 1024;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size)
        .unwrap();

    let output = fx.call("read_file", json!({"path": "huge.log"})).await;
    let expected_lines: String = (1..=2000)
        .map(|n| format!("{n:>6}\tentry {n:05}\n"))
        .collect();
    assert_eq!(
        output,
        ToolOutput::ok(format!(
            "{expected_lines}[showing lines 1-2000: the limit of 2000 lines was reached; \
             the file ({size} bytes) continues: call read_file with offset=2001 to read more]\n"
        )),
        "the default read of a 200 MB file is the first 2000 lines"
    );

    // The sparse tail is one 200 MB line of NUL bytes: shown cut, never loaded whole.
    let tail = fx
        .call(
            "read_file",
            json!({"path": "huge.log", "offset": 10_000, "limit": 5}),
        )
        .await;
    let nul_line_bytes = size - head.len() as u64;
    assert_eq!(
        tail,
        ToolOutput::ok(format!(
            " 10000\tentry 10000\n 10001\t{} … [{} more bytes on this line: bash `sed -n \
             10001p huge.log | cut -b 501-` shows them]\n\
             [1 line(s) longer than 2000 bytes (500 when written out) were cut; use bash (e.g. \
             `cut -c`) to see the rest]\n\
             [`huge.log` holds NUL bytes; line 10001 is written out: a control character or a \
             byte that is not UTF-8 as \\xNN, a backslash as \\\\]\n",
            "\\x00".repeat(500),
            nul_line_bytes - 500
        ))
    );
}

#[tokio::test]
async fn a_fifo_in_the_worktree_never_hangs_a_tool() {
    let fx = Fixture::new();
    nix::unistd::mkfifo(&fx.root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    fx.write("plain.txt", "needle\n");
    let expected = "it is not a regular file (a FIFO, socket or device)";
    assert_eq!(
        fx.call("read_file", json!({"path": "pipe"})).await,
        ToolOutput::error(format!("cannot read `pipe`: {expected}"))
    );
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"})
        )
        .await,
        ToolOutput::error(format!("cannot edit `pipe`: {expected}"))
    );
    assert_eq!(
        fx.call("grep", json!({"pattern": "needle"})).await,
        ToolOutput::ok("plain.txt:1:needle\n"),
        "grep passes over the FIFO instead of blocking on it"
    );
}

// ---------------------------------------------------------------------------------------
// write_file and edit_file

#[tokio::test]
async fn write_file_creates_parent_directories_and_overwrites() {
    let fx = Fixture::new();
    assert_eq!(
        fx.call(
            "write_file",
            json!({"path": "deep/er/new.rs", "content": "fn main() {}\n"})
        )
        .await,
        ToolOutput::ok("created `deep/er/new.rs` (13 bytes)")
    );
    assert_eq!(fx.read("deep/er/new.rs"), "fn main() {}\n");
    assert_eq!(
        fx.call(
            "write_file",
            json!({"path": "deep/er/new.rs", "content": "x"})
        )
        .await,
        ToolOutput::ok("overwrote `deep/er/new.rs` (1 bytes)")
    );
    assert_eq!(fx.read("deep/er/new.rs"), "x");
    assert_eq!(
        fx.call("write_file", json!({"path": "deep", "content": "x"}))
            .await,
        ToolOutput::error(
            "cannot write `deep`: it is a directory (list_files shows what it holds)"
        )
    );
}

#[tokio::test]
async fn write_file_and_edit_file_never_write_git_data() {
    let fx = Fixture::new();
    fx.write(".git", "gitdir: /repo/.git/worktrees/1\n");
    let refusal = |shown: &str| {
        ToolOutput::error(format!(
            "cannot write `{shown}`: grove manages git for this worktree and commits your \
             changes itself; `.git` is not writable"
        ))
    };
    let attempts = [
        (
            fx.call(
                "write_file",
                json!({"path": ".git", "content": "gitdir: /tmp/evil\n"}),
            )
            .await,
            refusal(".git"),
        ),
        (
            fx.call(
                "write_file",
                json!({"path": "sub/.git/hooks/post-checkout", "content": "#!/bin/sh\n"}),
            )
            .await,
            refusal("sub/.git/hooks/post-checkout"),
        ),
        (
            fx.call(
                "edit_file",
                json!({"path": "./.git", "old_string": "/repo", "new_string": "/tmp"}),
            )
            .await,
            refusal("./.git"),
        ),
    ];
    for (got, expected) in attempts {
        assert_eq!(
            got, expected,
            "a write to git data is refused for the model"
        );
    }
    assert_eq!(
        (fx.read(".git"), fx.root.join("sub").exists()),
        ("gitdir: /repo/.git/worktrees/1\n".to_owned(), false),
        "the pointer is unchanged and nothing was created"
    );
}

#[tokio::test]
async fn edit_file_replaces_exactly_once_or_says_why_not() {
    let fx = Fixture::new();
    let original = "let a = 1;\nlet b = 1;\nlet c = 2;\n";
    fx.write("src.rs", original);

    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "src.rs", "old_string": "let d", "new_string": "let e"})
        )
        .await,
        ToolOutput::error(
            "`old_string` was not found in `src.rs`; it must match the file exactly, including \
             whitespace and indentation (read the file again to check)"
        )
    );
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "src.rs", "old_string": "= 1;", "new_string": "= 3;"})
        )
        .await,
        ToolOutput::error(
            "`old_string` was found 2 times in `src.rs`; include more surrounding text to make \
             it unique, or set replace_all to true to replace all 2"
        )
    );
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "src.rs", "old_string": "", "new_string": "x"})
        )
        .await,
        ToolOutput::error(
            "`old_string` is empty; give the exact text to replace (use write_file to create a file)"
        )
    );
    assert_eq!(fx.read("src.rs"), original, "failed edits change nothing");

    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "src.rs", "old_string": "let c = 2;", "new_string": "let c = 4;"})
        )
        .await,
        ToolOutput::ok(
            "edited `src.rs`: 1 replacement; as the file now reads:\n     1\tlet a = 1;\n     \
             2\tlet b = 1;\n     3\tlet c = 4;\n"
        )
    );
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "src.rs", "old_string": "= 1;", "new_string": "= 3;", "replace_all": true})
        )
        .await,
        ToolOutput::ok(
            "edited `src.rs`: 2 replacements (at lines 1, 2 of the edited file); the first \
             replacement, as the file now reads:\n     1\tlet a = 3;\n     2\tlet b = 3;\n     3\tlet c = 4;\n"
        )
    );
    assert_eq!(fx.read("src.rs"), "let a = 3;\nlet b = 3;\nlet c = 4;\n");
    assert_eq!(
        fx.call(
            "edit_file",
            json!({"path": "nope.rs", "old_string": "a", "new_string": "b"})
        )
        .await,
        ToolOutput::error("cannot edit `nope.rs`: it does not exist")
    );
}

#[tokio::test]
async fn edit_file_shows_the_edited_lines_with_three_around_them_and_bounded() {
    let fx = Fixture::new();
    let numbered: String = (1..=80).map(|n| format!("line {n}\n")).collect();
    fx.write("long.txt", &numbered);

    let small = fx
        .call(
            "edit_file",
            json!({"path": "long.txt", "old_string": "line 10\n", "new_string": "ten\nTEN\n"}),
        )
        .await;
    let big = fx
        .call(
            "edit_file",
            json!({"path": "long.txt", "old_string": "line 50\n",
                   "new_string": "x\n".repeat(40)}),
        )
        .await;

    assert_eq!(
        small,
        ToolOutput::ok(
            "edited `long.txt`: 1 replacement; as the file now reads:\n     7\tline 7\n     \
             8\tline 8\n     9\tline 9\n    10\tten\n    11\tTEN\n    12\tline 11\n    \
             13\tline 12\n    14\tline 13\n"
        ),
        "the replaced lines, three lines before and three after, numbered as read_file does"
    );
    assert!(
        big.content.ends_with(
            "    77\tx\n[… more of the edit follows; read_file with offset=78 shows it]\n"
        ),
        "a long edit is shown up to thirty lines, then says how to read on: {}",
        big.content
    );
}

// ---------------------------------------------------------------------------------------
// list_files and grep

fn ignored_tree(fx: &Fixture) {
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("src/lib.rs", "pub fn needle() {}\n");
    fx.write("src/deep/mod.rs", "// needle in a comment\n");
    fx.write("src/.gitignore", "generated.rs\n");
    fx.write("src/generated.rs", "needle generated\n");
    fx.write("target/debug/out.rs", "needle built\n");
    fx.write("run.log", "needle logged\n");
    fx.write(".git/config", "[core] needle\n");
    fx.write(".git/HEAD", "ref: refs/heads/main\n");
    fx.write("README.md", "no match here\n");
    fx.write("image.png", [b"needle".as_slice(), &[0u8, 1, 2]].concat());
}

#[tokio::test]
async fn list_files_respects_gitignore_skips_git_and_sorts() {
    let fx = Fixture::new();
    ignored_tree(&fx);
    assert_eq!(
        fx.call("list_files", json!({})).await,
        ToolOutput::ok(
            ".gitignore\nREADME.md\nimage.png\nsrc/.gitignore\nsrc/deep/mod.rs\nsrc/lib.rs\n"
        ),
        "ignored files (also by a nested .gitignore) and .git are not listed, even without `git init`"
    );
    assert_eq!(
        fx.call("list_files", json!({"path": "src"})).await,
        ToolOutput::ok("src/.gitignore\nsrc/deep/mod.rs\nsrc/lib.rs\n"),
        "a subdirectory is listed with root-relative paths and the root's rules"
    );
    assert_eq!(
        fx.call("list_files", json!({"path": "target"})).await,
        ToolOutput::ok("target/debug/out.rs\n"),
        "an ignored directory named explicitly is listed"
    );
    assert_eq!(
        fx.call("list_files", json!({"path": "missing"})).await,
        ToolOutput::error("cannot list `missing`: it does not exist")
    );
}

#[tokio::test]
async fn list_files_caps_the_listing_and_counts_the_rest() {
    let fx = Fixture::new();
    for n in 0..1010 {
        fx.write(&format!("many/f{n:04}"), "");
    }
    let output = fx.call("list_files", json!({"path": "many"})).await;
    let expected: String = (0..1000).map(|n| format!("many/f{n:04}\n")).collect();
    assert_eq!(
        output,
        ToolOutput::ok(format!(
            "{expected}[10 more files not shown; list a subdirectory to see them]\n"
        ))
    );
}

#[tokio::test]
async fn grep_respects_gitignore_skips_git_and_binary_files() {
    let fx = Fixture::new();
    ignored_tree(&fx);
    assert_eq!(
        fx.call("grep", json!({"pattern": "need(le)"})).await,
        ToolOutput::ok(
            "src/deep/mod.rs:1:// needle in a comment\nsrc/lib.rs:1:pub fn needle() {}\n"
        )
    );
    assert_eq!(
        fx.call("grep", json!({"pattern": "needle", "path": "src/lib.rs"}))
            .await,
        ToolOutput::ok("src/lib.rs:1:pub fn needle() {}\n"),
        "a single file can be searched"
    );
    assert_eq!(
        fx.call("grep", json!({"pattern": "absent"})).await,
        ToolOutput::ok(
            "[no matches for `absent` under `.`: 5 files searched, 1 binary files skipped]\n"
        )
    );
}

#[tokio::test]
async fn grep_refuses_an_invalid_regex_and_caps_output() {
    let fx = Fixture::new();
    let invalid = fx.call("grep", json!({"pattern": "fn (unclosed"})).await;
    assert!(
        invalid.is_error
            && invalid
                .content
                .starts_with("invalid regex `fn (unclosed`: "),
        "an invalid regex is a clear error: {invalid:?}"
    );

    let long = "x".repeat(1000);
    let text: String = std::iter::once(format!("hit long {long}\n"))
        .chain((1..300).map(|n| format!("hit {n}\n")))
        .collect();
    fx.write("many.txt", text);
    let output = fx.call("grep", json!({"pattern": "^hit"})).await;
    assert!(!output.is_error, "{output:?}");
    let lines: Vec<&str> = output.content.lines().collect();
    assert_eq!(
        lines.len(),
        201,
        "200 matches and a note: {}",
        output.content
    );
    assert_eq!(
        lines[0],
        format!("many.txt:1:hit long {}…", "x".repeat(291)),
        "long lines are truncated to 300 characters"
    );
    assert_eq!(
        lines[200],
        "[stopped after 200 matches (cap: 200 matches or 50000 bytes); there may be more: \
         narrow the pattern or the path]"
    );
}

// ---------------------------------------------------------------------------------------
// bash

#[tokio::test]
async fn bash_reports_exit_codes_and_merges_output() {
    let fx = Fixture::new();
    assert_eq!(
        fx.call("bash", json!({"command": "echo out; echo err >&2; pwd"}))
            .await,
        ToolOutput::ok(format!("out\nerr\n{}\n[exit code: 0]\n", fx.root.display()))
    );
    assert_eq!(
        fx.call("bash", json!({"command": "exit 3"})).await,
        ToolOutput::error("(no output)\n[exit code: 3]\n")
    );
    assert_eq!(
        fx.call("bash", json!({"command": "cat; echo read-nothing"}))
            .await,
        ToolOutput::ok("read-nothing\n[exit code: 0]\n"),
        "stdin is /dev/null, so reading it never blocks"
    );
    assert_eq!(
        fx.call("bash", json!({"command": "kill -TERM $$"})).await,
        ToolOutput::error("(no output)\n[killed by signal 15]\n")
    );
}

#[tokio::test]
async fn bash_caps_huge_output_to_head_and_tail() {
    let fx = Fixture::new();
    let output = fx
        .call("bash", json!({"command": "yes abcdefg | head -c 50000000"}))
        .await;
    let kept = "abcdefg\n".repeat(2048);
    assert_eq!(
        output,
        ToolOutput::ok(format!(
            "{kept}[... 49967232 bytes of output cut here; 50000000 bytes in total ...]\n{kept}[exit code: 0]\n"
        )),
        "50 MB of output becomes 16 KiB of head, 16 KiB of tail and a note of the cut"
    );
}

#[tokio::test]
async fn bash_environment_holds_no_secrets() {
    let fx = Fixture::new();
    let output = fx.call("bash", json!({"command": "env | sort"})).await;
    assert!(!output.is_error, "{output:?}");
    let names: Vec<&str> = output
        .content
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    for secret in [
        "GROVE_TEST_SECRET_TOKEN",
        "ANTHROPIC_API_KEY",
        "UNLISTED_SETTING",
    ] {
        assert!(
            !names.contains(&secret),
            "{secret} must not reach commands: {names:?}"
        );
    }
    for value in ["grove-fake-token-value", "sk-ant-fake-key-value"] {
        assert!(
            !output.content.contains(value),
            "no secret value reaches commands"
        );
    }
    for kept in ["PATH", "HOME", "LANG", "GIT_TERMINAL_PROMPT"] {
        assert!(names.contains(&kept), "{kept} is passed: {names:?}");
    }
}

/// True while `pid` is a live process (a zombie waiting to be reaped counts as dead).
fn alive(pid: i32) -> bool {
    if kill(Pid::from_raw(pid), None).is_err() {
        return false;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(state.and_then(|rest| rest.chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Waits (bounded) for SIGKILLed processes to finish dying; the kill is asynchronous.
fn still_alive_after_kill(pids: &[i32]) -> Vec<i32> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let living: Vec<i32> = pids.iter().copied().filter(|&pid| alive(pid)).collect();
        if living.is_empty() || Instant::now() > give_up {
            return living;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_pids(path: &Path) -> Vec<i32> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect()
}

/// Starts a background sleeper, a grandchild sleeper, and records both pids, then runs
/// `then`.
fn spawn_sleepers(pid_file: &Path, then: &str) -> String {
    let pids = pid_file.display();
    format!(
        "sleep 1000 & echo $! >> {pids}; \
         bash -c 'sleep 1000 & echo $! >> {pids}; wait' & \
         while [ $(wc -l < {pids}) -lt 2 ]; do sleep 0.01; done; {then}"
    )
}

#[tokio::test]
async fn bash_timeout_kills_the_whole_process_group() {
    let fx = Fixture::new();
    let pid_file = fx.outside.join("pids-timeout");
    let output = fx
        .call(
            "bash",
            json!({"command": spawn_sleepers(&pid_file, "echo started; sleep 1000"), "timeout_s": 3}),
        )
        .await;
    assert_eq!(
        output,
        ToolOutput::error(
            "started\n[timed out after 3 s: the command and every process it started were killed; \
             pass a larger timeout_s (at most 600) or run less at once]\n"
        )
    );
    let pids = read_pids(&pid_file);
    assert_eq!(pids.len(), 2, "both sleepers started: {pids:?}");
    assert_eq!(
        still_alive_after_kill(&pids),
        Vec::<i32>::new(),
        "children and grandchildren die with the command"
    );
}

#[tokio::test]
async fn bash_background_children_do_not_outlive_a_finished_command() {
    let fx = Fixture::new();
    let pid_file = fx.outside.join("pids-exit");
    let output = fx
        .call(
            "bash",
            json!({"command": spawn_sleepers(&pid_file, "echo done")}),
        )
        .await;
    assert_eq!(
        output,
        ToolOutput::ok("done\n[exit code: 0]\n"),
        "the command returns although its children hold the output pipe"
    );
    let pids = read_pids(&pid_file);
    assert_eq!(pids.len(), 2, "both sleepers started: {pids:?}");
    assert_eq!(still_alive_after_kill(&pids), Vec::<i32>::new());
}

#[tokio::test]
async fn bash_cancellation_kills_the_whole_process_group() {
    let fx = Fixture::new();
    let pid_file = fx.outside.join("pids-cancel");
    let command = spawn_sleepers(&pid_file, "echo ready; sleep 1000");
    let call = fx.call("bash", json!({"command": command}));
    let cancel = fx.ctx.cancel.clone();
    let watcher = {
        let pid_file = pid_file.clone();
        async move {
            while read_pids(&pid_file).len() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            cancel.cancel();
        }
    };
    let (output, ()) = tokio::join!(call, watcher);
    assert!(
        output.is_error
            && output
                .content
                .ends_with("[cancelled: the command and every process it started were killed]\n"),
        "a cancelled command says so: {output:?}"
    );
    assert_eq!(
        still_alive_after_kill(&read_pids(&pid_file)),
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn dropping_a_running_command_kills_its_process_group() {
    let fx = Fixture::new();
    let pid_file = fx.outside.join("pids-drop");
    let executor = LocalExecutor::with_env(test_env(&fx.outside));
    let request = ExecRequest {
        command: spawn_sleepers(&pid_file, "sleep 1000"),
        cwd: fx.root.clone(),
        timeout: Duration::from_secs(600),
        cancel: CancellationToken::new(),
        output_cap: OutputCap::default(),
    };
    let running = tokio::spawn(async move { executor.execute(request).await });
    while read_pids(&pid_file).len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.abort();
    assert!(
        running.await.unwrap_err().is_cancelled(),
        "the task was aborted mid-command"
    );
    assert_eq!(
        still_alive_after_kill(&read_pids(&pid_file)),
        Vec::<i32>::new(),
        "an aborted agent loop leaves no process behind"
    );
}

#[tokio::test]
async fn a_missing_working_directory_is_a_spawn_error() {
    let fx = Fixture::new();
    let executor = LocalExecutor::with_env(test_env(&fx.outside));
    let missing = fx.root.join("gone");
    let err = executor
        .execute(ExecRequest {
            command: "true".to_owned(),
            cwd: missing.clone(),
            timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
            output_cap: OutputCap::default(),
        })
        .await
        .unwrap_err();
    match err {
        ExecError::Spawn { cwd, .. } => assert_eq!(cwd, missing, "the error names the directory"),
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[tokio::test]
async fn git_dirs_under_other_spellings_links_and_bare_repositories_are_refused() {
    let fx = Fixture::new();
    fx.write(".git", "gitdir: /repo/.git/worktrees/1\n");
    // What a worker's bash can make: a link to the pointer, a link to a folder holding
    // a `.GIT`, and a bare repository of its own.
    std::os::unix::fs::symlink(".git", fx.root.join("gp")).unwrap();
    std::os::unix::fs::symlink(fx.root.join(".git"), fx.root.join("gp-abs")).unwrap();
    fx.write("evilgd/HEAD", "ref: refs/heads/main\n");
    fs::create_dir_all(fx.root.join("evilgd/objects")).unwrap();
    fs::create_dir_all(fx.root.join("evilgd/refs")).unwrap();
    std::os::unix::fs::symlink("evilgd", fx.root.join("gd-link")).unwrap();
    let refusal = |shown: &str| {
        ToolOutput::error(format!(
            "cannot write `{shown}`: grove manages git for this worktree and commits your \
             changes itself; `.git` is not writable"
        ))
    };
    let paths = [
        "gp",
        "gp-abs",
        ".GIT/config",
        "notes/.Git/x",
        "a/.git./hooks/pre-commit",
        "evilgd/config",
        "gd-link/hooks/post-checkout",
    ];
    for path in paths {
        let got = fx
            .call(
                "write_file",
                json!({"path": path, "content": "gitdir: evilgd\n"}),
            )
            .await;
        assert_eq!(
            got,
            refusal(path),
            "`{path}` is or lies inside a git dir and is refused"
        );
    }
    let edited = fx
        .call(
            "edit_file",
            json!({"path": "gp", "old_string": "/repo", "new_string": "evilgd"}),
        )
        .await;
    assert_eq!(
        edited,
        refusal("gp"),
        "edit_file through the link is refused too"
    );
    assert_eq!(
        (
            fx.read(".git"),
            fx.root.join(".GIT").exists() && !fx.root.join(".git").is_file(),
            fx.root.join("notes").exists(),
            fx.root.join("evilgd/config").exists(),
        ),
        (
            "gitdir: /repo/.git/worktrees/1\n".to_owned(),
            false,
            false,
            false
        ),
        "the pointer is unchanged and nothing was created"
    );
    let fine = fx
        .call(
            "write_file",
            json!({"path": "docs/gitignore-notes.md", "content": "x\n"}),
        )
        .await;
    assert!(
        !fine.is_error,
        "an ordinary path is still written: {fine:?}"
    );
}
