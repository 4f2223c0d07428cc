//! The commented files `grove init` writes: the project config and an example agent.
//!
//! This file owns their text. It must never state a default other than the one the
//! settings use: every default below is interpolated from the constant that defines it.

use crate::model::Provider;
use crate::settings::config::{
    MAX_CHECK_TIMEOUT_S, MAX_FIX_ATTEMPTS, MAX_JOBS, MAX_SETUP_TIMEOUT_S, default_model,
};
use crate::settings::options::{
    DEFAULT_CHECK_TIMEOUT_S, DEFAULT_FIX_ATTEMPTS, DEFAULT_SETUP_TIMEOUT_S, TurnCaps, default_jobs,
};

/// The commented file `grove init` writes. Every key is commented out at its built-in
/// default (or, for keys that have none, at an example marked as such), so the file as
/// written changes nothing until a line is uncommented.
pub fn template() -> String {
    head() + &body() + &check_and_sandbox()
}

/// The template's opening: how the file works, the provider, models and jobs.
fn head() -> String {
    let model = default_model(Provider::Anthropic);
    format!(
        r#"# grove's project configuration (written by `grove init`).
#
# Every key is optional. A flag on the command line beats this file, and this file beats
# the built-in default shown on each line below. Uncomment a line to change it.
# A mistake here (an unknown key, a value out of range) stops `grove run` with an error
# naming this file, the line and the key.

# The model API: "anthropic" (ANTHROPIC_API_KEY) or "openai" (OPENAI_API_KEY, and
# OPENAI_BASE_URL for any OpenAI-compatible server). Flag: --provider.
# provider = "anthropic"

# The model of every role. Default: {model} with anthropic, {openai_model} with openai.
# Model names here belong to this file's provider: when --provider picks another one,
# they are not used. Flag: --model.
# model = "{model}"

# How many subtasks may run at once, 1 to {MAX_JOBS}.
# Default: 2 per core, at most 4 ({jobs} on this machine). Flag: --jobs.
# jobs = {jobs}

"#,
        openai_model = default_model(Provider::OpenAi),
        jobs = default_jobs(),
    )
}

/// The template's run keys after `jobs`, and its tables up to `[check]`.
fn body() -> String {
    let model = default_model(Provider::Anthropic);
    let caps = TurnCaps::default();
    format!(
        r#"# How many workers try each subtask at once, each in its own tree; a judge compares
# the attempts that pass the check and merges the best one. The lead may ask for more
# on one subtask, up to max_attempts. Default: 1. Flag: --attempts.
# attempts = 1

# The most attempts the lead may ask for on one subtask, 1 to 8. Default: 4.
# max_attempts = 4

# Tokens the whole run may spend; no new subtask starts once they are spent.
# Default: no limit. Example below. Flag: --budget-tokens.
# budget_tokens = 2000000

# Tokens one subagent may spend; over it, its subtask fails.
# Default: no limit. Example below. Flag: --subagent-budget-tokens.
# subagent_budget_tokens = 400000

# US dollars the run may spend (list prices); at it the run pauses, resumable.
# Default: no limit. Example below. Flag: --budget-usd.
# budget_usd = 20
# US dollars one subagent may spend; over it, its subtask fails. Default: no limit.
# Flag: --subagent-budget-usd.
# subagent_budget_usd = 4

# Move your branch to the result at the end, when that is safe; false leaves the result
# on grove/<run>/result. Flags: --no-apply, --apply.
# apply = true

# What your branch gets: "squash", one commit per merged subtask authored with your git
# identity (user.name/user.email, or GIT_AUTHOR_*), its subject the worker's, the brief and
# its summary quoted beneath, with Grove-* trailers (run, subtask, verdict, models, tokens,
# check); or "merge", the result's graph: a merge commit per subtask over the workers'
# per-turn checkpoint commits. Either way the merge graph stays on grove/<run>/result and
# the squashed commits (with "squash") on grove/<run>/squashed.
# history = "squash"

# A role's model, overriding `model` for that role. Default: `model`.
# Flags: --lead-model, --worker-model, --reviewer-model.
# [models]
# lead = "{model}"
# worker = "{model}"
# reviewer = "{model}"

# Turn caps per role; an agent file's own `max_turns` beats them.
# Flag: --max-turns N (every role) or --max-turns ROLE=N.
# [max_turns]
# lead = {lead}
# worker = {worker}
# reviewer = {reviewer}

# Each subtask's worktree, prepared before its worker's first turn (again on resume).
# [worktree]
# A shell command run in the worktree, with the same scrubbed environment (no API keys
# or other secrets) as the agents' bash tool. If it fails or times out, the subtask fails
# with the command's output and its worker never starts. Files it creates are committed
# like the worker's unless .gitignore ignores them (grove names them in a note).
# Default: none. Example below.
# setup = "npm ci"
# Seconds the setup command may run, 1 to {MAX_SETUP_TIMEOUT_S}.
# setup_timeout_s = {DEFAULT_SETUP_TIMEOUT_S}
# With copy-on-write worktrees the setup runs once in the base tree the workers share
# (and not again while the base commit and the command stay the same); true runs it in
# every worker's tree instead, as with git worktrees. Default: false.
# per_worker = false
# Files git does not track that each worktree needs, relative to the repository root,
# e.g. .env. Each is copied into every worktree and never committed, reviewed or merged;
# a listed file that is missing or tracked stops the run at its start. A list here takes
# effect only once you have trusted it with `grove trust`, like a setup command.
# Default: none. Example below.
# copy = [".env"]
# Ignored directories of your checkout that hold the project's environment, relative to
# the repository root: every worktree sees your copy at the same place, read-only, so
# `.venv/bin/python -m pytest` or `node_modules/.bin/jest` works there without a copy
# per worker (a worker's writes there fail). A listed directory that is missing or
# tracked stops the run at its start. Default: `.venv`, `venv`, `node_modules` and every
# other top-level virtualenv (a directory with a pyvenv.cfg) that exist and git does not
# track; none when `setup` is set (it makes the environment in each tree). A list here
# takes effect only once you have trusted it with `grove trust`. Example below.
# share = [".venv"]
# Where the worktrees go: <dir>/<run>/<n>, an absolute path outside any .git directory.
# Default: the user's cache directory ($XDG_CACHE_HOME/grove or ~/.cache/grove; on macOS
# ~/Library/Caches/grove), one folder per repository. Example below.
# dir = "/var/tmp/grove-worktrees"
# How worktrees are made: "overlay" (copy-on-write views of the base, Linux 5.11+: a
# worker's tree costs what it changes), "git" (one `git worktree add` each), or "auto":
# overlay where this system allows it, else git, said in one line at the run's start.
# Default: auto.
# mode = "auto"

# Workers run by another agent CLI (--worker-backend claude|codex|gemini|aider).
# [workers]
# Variables each CLI gets by name besides grove's scrubbed environment and its own
# credentials, e.g. a CLI's own settings. Default: none. Example below.
# pass_env = ["DISABLE_AUTOUPDATER"]

"#,
        lead = caps.lead,
        worker = caps.worker,
        reviewer = caps.reviewer,
    )
}

/// The `[check]` and `[sandbox]` tables of [`template`].
fn check_and_sandbox() -> String {
    format!(
        r#"# The project's check: the command that says whether a tree is green. It runs sandboxed
# like the agents' bash tool, after the setup: on each subtask's worktree (its result is
# shown to the reviewer) and on the merged result before your branch moves (red: a fixer
# subtask tries to make it green; still red, your branch is not moved).
# Default: no check; the final message then says the result was not checked.
# [check]
# command = "cargo test"
# Seconds it may run, 1 to {MAX_CHECK_TIMEOUT_S}; past it the check counts as red.
# timeout_s = {DEFAULT_CHECK_TIMEOUT_S}
# Whether it may use the network: on the merged result only (a subtask's check runs code
# no reviewer has approved yet, and never gets it); true needs `grove trust`, like a
# setup command.
# network = false
# "evidence": a subtask's red check is shown to its reviewer, who weighs it (a piece of
# a refactor may fail alone); "require": a subtask's red check rejects it.
# subtask = "evidence"
# Fixer rounds a red result check gets, 0 to {MAX_FIX_ATTEMPTS}.
# fix_attempts = {DEFAULT_FIX_ATTEMPTS}
# "require": the check runs on the base while the lead plans, and a red base stops the
# run before any worker starts, saying why (a path the sandbox denied, a module or a
# command not found, no network); "skip": for a suite known to be red.
# base = "require"
#
# A ratchet (one or more): a type checker, linter or suite that is not clean today may
# not get worse. Its findings on each tree are compared with the base's (found once per
# base commit): a new one makes the check red, one gone is counted fixed. mypy, pyright,
# ruff, flake8, eslint (-f unix), tsc (--pretty false) and cargo/clippy
# (--message-format=json) are read as they are; otherwise a `pattern` with the groups
# file, code and message, or parse = "junit" with the `junit` file the command writes.
# [[check.ratchet]]
# command = "mypy src"

# What workers' commands may read. They read everything but your secrets: ~/.ssh,
# ~/.gnupg, ~/.aws, cloud, registry and git credentials, keyrings, browser profiles,
# shell histories, your checkout's files but its shared directories (see the README's
# Sandbox section for the whole list).
# [sandbox]
# More paths they may not read: absolute, or in your home as ~/path. Default: none.
# deny_read = ["~/private"]
# Paths they may read though the list above hides them (said loudly at the run's start
# and recorded in its journal); takes effect only once you have trusted the list with
# `grove trust`. Default: none.
# allow_read = ["~/.m2/settings.xml"]
"#
    )
}

/// The commented example agent file `grove init` writes next to the config.
pub const AGENT_SAMPLE_PATH: &str = ".grove/agents/example.md.sample";

/// The example agent: rename it to `<name>.md` to make it an agent the lead can name.
pub const AGENT_SAMPLE: &str = "\
---
description: Writes and fixes documentation; give it doc-only subtasks
tools: [read_file, list_files, grep, write_file, edit_file]
max_turns: 30
---

This is an example agent. Rename this file to `docs.md` (any name of letters, digits, `-`
and `_`, ending in `.md`) and the lead may delegate to it with `agent: \"docs\"`. The front
matter sets what the lead is told about it (`description`), the worker tools it may use
(`tools`, default all), its own `model` and `max_turns`; this text becomes its prompt,
and the project rules (AGENTS.md or CLAUDE.md) are appended to it.

You write documentation. Change only comments, doc comments and Markdown files; keep
every statement you write true of the code as it is.
";
