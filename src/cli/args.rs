//! The clap definitions of the command line: the global flags and the subcommands, each
//! with the args struct of its file in `commands/`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::cli::commands::{
    clean, completions, demo, exec_server, gc, init, mcp, report, resume, review, run, runs, trust,
};

/// Run one coding task as a fleet of LLM subagents in parallel git worktrees, with an
/// isolated reviewer that must approve every diff before it is merged.
#[derive(Debug, Parser)]
#[command(
    name = "grove",
    version,
    about,
    long_about = None,
    after_help = "Examples:\n  \
        grove demo\n  \
        grove run \"rename Config::load to Config::open everywhere\"\n  \
        grove runs\n  \
        grove review --list 20261129-215530-7f3a\n  \
        grove report 20261129-215530-7f3a\n\n\
        `grove COMMAND --help` shows each command's flags and examples."
)]
pub struct Cli {
    /// Run as if grove was started in DIR.
    #[arg(short = 'C', global = true, value_name = "DIR")]
    pub directory: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a task in the current repository.
    #[command(after_help = "Examples:\n  \
        grove run \"rename Config::load to Config::open everywhere\"\n  \
        grove run --jobs 2 --no-apply \"add doc comments to src/model\"\n  \
        grove run --dry-run \"split the parser module\"\n  \
        OPENAI_BASE_URL=http://127.0.0.1:8080/v1 grove run --provider openai --model local \"fix the typos in docs/\"\n\n\
        Settings: a flag beats .grove/config.toml (`grove init` writes one), which beats the \
        built-in default.")]
    Run(Box<run::RunArgs>),
    /// Continue an interrupted run (after Ctrl-C, a crash or an outage).
    #[command(
        after_help = "Examples:\n  grove resume 20261129-215530-7f3a\n  grove resume --json 20261129-215530-7f3a"
    )]
    Resume(resume::ResumeArgs),
    /// List this repository's runs, oldest first.
    #[command(after_help = "Examples:\n  grove runs\n  grove runs --json")]
    Runs(runs::RunsArgs),
    /// Remove a run's worktrees, archiving their work first.
    #[command(after_help = "Examples:\n  grove clean 20261129-215530-7f3a")]
    Clean(clean::CleanArgs),
    /// Delete archived work older than a number of days (the only command that deletes it).
    #[command(after_help = "Examples:\n  grove gc --older-than 30")]
    Gc(gc::GcArgs),
    /// Show grove at work on a sample repository, with a scripted model: no key, no network.
    #[command(
        after_help = "The sample repository is real and kept afterwards (a new temp \
        dir unless --keep-dir); only the model is replaced, by a replay server on 127.0.0.1. \
        One subtask is rejected by its reviewer on purpose.\n\n\
        Exit status: 0 when the demo went as scripted (two subtasks merged, one rejected), \
        1 when it did not, 130 when interrupted.\n\n\
        Examples:\n  grove demo\n  grove demo --keep-dir /tmp/grove-demo"
    )]
    Demo(demo::DemoArgs),
    /// Write .grove/config.toml (every key commented at its default) and a sample agent.
    #[command(
        after_help = "Keys in .grove/config.toml apply to every `grove run` in the \
        repository; a flag beats the file, the file beats the built-in default.\n\n\
        Examples:\n  grove init\n  grove init --force"
    )]
    Init(init::InitArgs),
    /// Trust what .grove/config.toml asks to run or to open to workers, exactly as it is now.
    #[command(
        after_help = "grove runs a setup command from .grove/config.toml, and a [check] with \
        network = true, only once you have trusted that exact text in this repository; \
        [sandbox] allow_read, [worktree] copy and [worktree] share widen what workers' \
        commands see only once you have trusted that exact value. A changed command or value \
        must be trusted again. \
        `grove trust` prints each, asks nothing, and records it in your data directory \
        ($XDG_DATA_HOME/grove/trust, default ~/.local/share/grove/trust), never in the \
        repository. `grove init` does not trust anything.\n\n\
        Over MCP (`grove mcp`), a run may use a `cmd:` worker backend, `sandbox: off` or \
        `allow_network` only once you have trusted that exact value here with `--mcp`.\n\n\
        Examples:\n  grove trust\n  grove trust --mcp 'worker_backend=cmd:./scripts/agent.sh'\n  \
        grove trust --mcp sandbox=off --mcp allow_network=true"
    )]
    Trust(trust::TrustArgs),
    /// Write one self-contained HTML page about a run: timeline, diffs, verdicts, cost.
    #[command(
        after_help = "Works for finished, failed, paused and interrupted runs (and running \
        ones). The page loads nothing from the network; open it in any browser.\n\n\
        Examples:\n  grove report 20261129-215530-7f3a\n  \
        grove report --output /tmp/run.html --prices prices.toml 20261129-215530-7f3a"
    )]
    Report(report::ReportArgs),
    /// Print a shell completion script on stdout.
    #[command(after_help = "Examples:\n  \
        grove completions bash > ~/.local/share/bash-completion/completions/grove\n  \
        grove completions zsh > \"${fpath[1]}/_grove\"\n  \
        grove completions fish > ~/.config/fish/completions/grove.fish")]
    Completions(completions::CompletionsArgs),
    /// Walk a finished run's diffs and verdicts, override the reviewer, and apply.
    #[command(
        after_help = "On a terminal, grove shows each subtask and asks [a]pprove / \
        [r]eject / [k]eep as is / [q]uit, then what to do with the result. With flags it \
        asks nothing. A person's decision outranks the reviewer's; the result is rebuilt \
        from the base with the approved subtasks, in order, and work left out is archived.\n\n\
        Exit status: 0 done (applied, nothing to apply, or not asked to apply); 3 a subtask \
        you approve is not in the result (it conflicts); 1 error, or the apply was refused \
        (your branch untouched); 2 usage error.\n\n\
        Examples:\n  grove review 20261129-215530-7f3a\n  \
        grove review --list 20261129-215530-7f3a\n  \
        grove review --approve S2 --reject S1 --apply 20261129-215530-7f3a"
    )]
    Review(review::ReviewArgs),
    /// Serve the Model Context Protocol on stdio, for Claude Code, Codex, Gemini CLI...
    #[command(
        after_help = "Tools: run, resume, list_runs, show_run, review (see the \
        README). Nothing but the protocol goes to stdout; the runs' progress goes to \
        stderr.\n\n\
        Examples:\n  claude mcp add grove -- grove mcp\n  grove -C ~/src/project mcp"
    )]
    Mcp(mcp::McpArgs),
    /// Serve one remote worker's tools on stdio (started by `grove run --remote`'s launcher).
    #[command(
        after_help = "A grove on another machine starts this through a launcher such as \
        `ssh HOST grove exec-server` or `kubectl exec -i POD -- grove exec-server`, as \
        `[remote.NAME]` in .grove/config.toml says. Mirrors and trees are kept under \
        $GROVE_REMOTE_HOME (default ~/.cache/grove/remote); every process it started ends \
        when its input closes.\n\n\
        Examples:\n  grove run --remote build1 \"split the parser module\""
    )]
    ExecServer(exec_server::ExecServerArgs),
}
