//! Stand-in agent CLIs for the worker backends: small `sh` scripts in a temp bin dir that
//! check their argv and environment the way grove must call the real CLI (and fail
//! loudly, exit 64, when it does not), edit a file in their working directory, and print
//! a recorded output sample in that CLI's real format.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The key each provider's CLI must get, and that no other program may see.
pub const ANTHROPIC_KEY: &str = "sk-ant-fake-for-claude";
pub const OPENAI_KEY: &str = "sk-fake-for-codex";
pub const GEMINI_KEY: &str = "fake-for-gemini";
/// A secret that belongs to no CLI: it must never reach one.
pub const UNRELATED_SECRET: &str = "ghp_fake_unrelated";

/// Shell helpers every stand-in starts with.
const PRELUDE: &str = r#"#!/bin/sh
fail() { echo "fake $(basename "$0"): $*" >&2; exit 64; }
need_env() { eval "value=\${$1:-}"; [ "$value" = "$2" ] || fail "$1 must be passed to this CLI"; }
no_env() { eval "value=\${$1:-}"; [ -z "$value" ] || fail "$1 must not reach this CLI"; }
need_prompt() {
  case "$1" in *"$BRIEF_MARK"*) ;; *) fail "the prompt lacks the brief: $1" ;; esac
  case "$1" in *"House rule"*) ;; *) fail "the prompt lacks the project rules" ;; esac
}
[ -f .git ] || fail "not started in a linked worktree: $PWD"
no_env GITHUB_TOKEN
"#;

/// A temp dir with a `bin/` of stand-in CLIs.
pub struct FakeClis {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
}

impl FakeClis {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        Self { dir, bin }
    }

    /// A scratch directory the scripts may keep state in.
    pub fn state(&self) -> PathBuf {
        let state = self.dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        state
    }

    /// Installs an executable `name` whose body follows [`PRELUDE`]; `brief_mark` is text
    /// the prompt must contain.
    pub fn install(&self, name: &str, brief_mark: &str, body: &str) -> PathBuf {
        let path = self.bin.join(name);
        let script = format!("{PRELUDE}BRIEF_MARK='{brief_mark}'\n{body}");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// The environment a run's worker CLIs start from: this bin dir first on `PATH`, a
    /// key for every provider, and one unrelated secret.
    pub fn env(&self, home: &Path) -> Vec<(OsString, OsString)> {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        [
            ("PATH", path.as_str()),
            ("HOME", home.to_str().unwrap()),
            ("ANTHROPIC_API_KEY", ANTHROPIC_KEY),
            ("OPENAI_API_KEY", OPENAI_KEY),
            ("GEMINI_API_KEY", GEMINI_KEY),
            ("GITHUB_TOKEN", UNRELATED_SECRET),
        ]
        .into_iter()
        .map(|(name, value)| (OsString::from(name), OsString::from(value)))
        .collect()
    }
}

/// `cat` of a recorded sample, as a here-document.
pub fn print_sample(sample: &str) -> String {
    format!("cat <<'GROVE_SAMPLE'\n{sample}\nGROVE_SAMPLE\n")
}

/// Claude Code: `claude -p PROMPT --output-format stream-json --verbose --permission-mode
/// acceptEdits --max-turns N`, then `sample` on stdout.
pub fn claude_script(edit: &str, sample: &str) -> String {
    format!(
        r#"[ "$1" = "-p" ] || fail "argv must start with -p: $*"
prompt=$2
shift 2
[ "$*" = "--output-format stream-json --verbose --permission-mode acceptEdits --max-turns 60" ] || fail "unexpected flags: $*"
need_prompt "$prompt"
need_env ANTHROPIC_API_KEY {ANTHROPIC_KEY}
no_env OPENAI_API_KEY
no_env GEMINI_API_KEY
{edit}
{}"#,
        print_sample(sample)
    )
}

/// Codex: `codex exec --json --sandbox workspace-write --skip-git-repo-check --color never
/// -- PROMPT`.
pub fn codex_script(edit: &str, sample: &str) -> String {
    format!(
        r#"[ "$1 $2 $3 $4 $5 $6 $7 $8" = "exec --json --sandbox workspace-write --skip-git-repo-check --color never --" ] || fail "unexpected argv: $*"
[ "$#" = 9 ] || fail "the prompt must be the one argument after --: $*"
need_prompt "$9"
need_env OPENAI_API_KEY {OPENAI_KEY}
no_env ANTHROPIC_API_KEY
no_env GEMINI_API_KEY
{edit}
{}"#,
        print_sample(sample)
    )
}

/// Gemini CLI: `gemini -p PROMPT --output-format json --approval-mode auto_edit --skip-trust`.
pub fn gemini_script(edit: &str, sample: &str) -> String {
    format!(
        r#"[ "$1" = "-p" ] || fail "argv must start with -p: $*"
prompt=$2
shift 2
[ "$*" = "--output-format json --approval-mode auto_edit --skip-trust" ] || fail "unexpected flags: $*"
need_prompt "$prompt"
need_env GEMINI_API_KEY {GEMINI_KEY}
no_env ANTHROPIC_API_KEY
no_env OPENAI_API_KEY
{edit}
{}"#,
        print_sample(sample)
    )
}

/// aider: `aider --message PROMPT --yes-always --no-auto-commits …`, with its history
/// files outside the worktree; it leaves its tag cache in the worktree, as aider does.
pub fn aider_script(edit: &str, sample: &str) -> String {
    format!(
        r#"[ "$1" = "--message" ] || fail "argv must start with --message: $*"
prompt=$2
[ "$3 $4 $5 $6 $7" = "--yes-always --no-auto-commits --no-dirty-commits --no-gitignore --no-suggest-shell-commands" ] || fail "aider must be kept from committing: $*"
[ "$8" = "--chat-history-file" ] && [ "${{10}}" = "--input-history-file" ] || fail "history files: $*"
case "$9" in "$PWD"/*|"") fail "the chat history must not go into the worktree: $9" ;; esac
case "${{11}}" in "$PWD"/*|"") fail "the input history must not go into the worktree: ${{11}}" ;; esac
shift 11
[ "$*" = "--no-pretty --no-stream --no-check-update --no-show-model-warnings --no-analytics" ] || fail "unexpected flags: $*"
need_prompt "$prompt"
need_env ANTHROPIC_API_KEY {ANTHROPIC_KEY}
need_env OPENAI_API_KEY {OPENAI_KEY}
mkdir -p .aider.tags.cache.v4 && echo cache > .aider.tags.cache.v4/cache.db
{edit}
{}"#,
        print_sample(sample)
    )
}

/// A recorded Claude Code stream-json session that edited one file.
pub const CLAUDE_SAMPLE: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":["Bash","Edit","Read"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"acceptEdits","apiKeySource":"ANTHROPIC_API_KEY","uuid":"u0"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_01","name":"Edit","input":{"file_path":"/w/src/a.txt","old_string":"alpha","new_string":"ALPHA"}}],"stop_reason":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":1800,"cache_read_input_tokens":9000,"output_tokens":90}},"parent_tool_use_id":null,"session_id":"s1","uuid":"u1"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"The file /w/src/a.txt has been updated."}]},"parent_tool_use_id":null,"session_id":"s1","uuid":"u2"}
{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"CLAUDE-FINAL: src/a.txt now shouts."}],"stop_reason":"end_turn","usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":10800,"output_tokens":12}},"parent_tool_use_id":null,"session_id":"s1","uuid":"u3"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":6100,"duration_api_ms":5900,"num_turns":2,"result":"CLAUDE-FINAL: src/a.txt now shouts.","session_id":"s1","total_cost_usd":0.0107,"usage":{"input_tokens":8,"cache_creation_input_tokens":1900,"cache_read_input_tokens":19800,"output_tokens":102,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[],"uuid":"u4"}"#;

/// A recorded `codex exec --json` run that edited one file.
pub const CODEX_SAMPLE: &str = r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Reading src/a.txt**"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'cat src/a.txt'","aggregated_output":"alpha\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"src/a.txt","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"CODEX-FINAL: src/a.txt now shouts."}}
{"type":"turn.completed","usage":{"input_tokens":18200,"cached_input_tokens":17000,"output_tokens":240}}"#;

/// A recorded `gemini -p … --output-format json` answer.
pub const GEMINI_SAMPLE: &str = r#"{
  "session_id": "9a1c",
  "response": "GEMINI-FINAL: src/a.txt now shouts.",
  "stats": {
    "models": {
      "gemini-2.5-pro": {
        "api": { "totalRequests": 3, "totalErrors": 0, "totalLatencyMs": 4410 },
        "tokens": { "input": 9000, "prompt": 12000, "candidates": 300, "total": 12350, "cached": 3000, "thoughts": 50, "tool": 0 }
      }
    },
    "tools": { "totalCalls": 2, "totalSuccess": 2, "totalFail": 0 },
    "files": { "totalLinesAdded": 1, "totalLinesRemoved": 1 }
  }
}"#;

/// A recorded `aider --message … --no-pretty --no-stream` run.
pub const AIDER_SAMPLE: &str = "Aider v0.86.1
Main model: anthropic/claude-sonnet-4-5 with diff edit format
Git repo: .git with 5 files
Repo-map: using 4096 tokens, auto refresh

src/a.txt
<<<<<<< SEARCH
alpha
=======
ALPHA
>>>>>>> REPLACE

AIDER-FINAL: src/a.txt now shouts.
Tokens: 4.2k sent, 1.5k cache hit, 120 received. Cost: $0.02 message, $0.02 session.
Applied edit to src/a.txt";
