//! Command-line definitions: one args struct and one function per subcommand.
//!
//! This is the binary's edge: it parses flags, builds the library's inputs, renders
//! events and reports, and maps outcomes to exit codes (DESIGN.md: 0 every subtask
//! merged, 3 some not merged, 1 error, 2 usage, 130 interrupted).

mod init;
mod mcp;
mod render;
mod report;
mod review;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use grove::event::EventSink;
use grove::git::{GitOptions, Repo, RunId as GitRunId};
use grove::model::{self, Provider};
use grove::run::backend::WorkerBackend;
use grove::run::config::{RoleValues, RunSettings};
use grove::run::launch::{self, Launch, RunRequest, parse_turn_caps};
use grove::run::store::RunStore;
use grove::run::{RunEnd, RunError, RunReport};

/// Exit code: finished with some subtask not merged.
const EXIT_NOT_ALL_MERGED: u8 = 3;
/// Exit code: interrupted (Ctrl-C).
const EXIT_INTERRUPTED: u8 = 130;

/// Run one coding task as a fleet of LLM subagents in parallel git worktrees, with an
/// isolated reviewer that must approve every diff before it is merged.
#[derive(Debug, Parser)]
#[command(name = "grove", version, about, long_about = None)]
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
    Run(RunArgs),
    /// Continue an interrupted run (after Ctrl-C, a crash or an outage).
    #[command(
        after_help = "Examples:\n  grove resume 20261129-215530-7f3a\n  grove resume --json 20261129-215530-7f3a"
    )]
    Resume(ResumeArgs),
    /// List this repository's runs, oldest first.
    #[command(after_help = "Examples:\n  grove runs\n  grove runs --json")]
    Runs(RunsArgs),
    /// Remove a run's worktrees, archiving their work first.
    #[command(after_help = "Examples:\n  grove clean 20261129-215530-7f3a")]
    Clean(CleanArgs),
    /// Delete archived work older than a number of days (the only command that deletes it).
    #[command(after_help = "Examples:\n  grove gc --older-than 30")]
    Gc(GcArgs),
    /// Show grove at work on a sample repository, with a scripted model: no key, no network.
    #[command(
        after_help = "The sample repository is real and kept afterwards (a new temp \
        dir unless --keep-dir); only the model is replaced, by a replay server on 127.0.0.1. \
        One subtask is rejected by its reviewer on purpose.\n\n\
        Exit status: 0 when the demo went as scripted (two subtasks merged, one rejected), \
        1 when it did not, 130 when interrupted.\n\n\
        Examples:\n  grove demo\n  grove demo --keep-dir /tmp/grove-demo"
    )]
    Demo(DemoArgs),
    /// Write .grove/config.toml (every key commented at its default) and a sample agent.
    #[command(
        after_help = "Keys in .grove/config.toml apply to every `grove run` in the \
        repository; a flag beats the file, the file beats the built-in default.\n\n\
        Examples:\n  grove init\n  grove init --force"
    )]
    Init(init::InitArgs),
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
    Completions(CompletionsArgs),
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
}

/// Arguments of `grove completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in.
    pub shell: clap_complete::Shell,
}

/// Arguments of `grove run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What to do, in plain words.
    pub task: String,
    /// How many subtasks may run at once [default: 2 per core, at most 4].
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: Option<u32>,
    /// The model API: anthropic (ANTHROPIC_API_KEY) or openai (OPENAI_API_KEY, OPENAI_BASE_URL)
    /// [default: anthropic].
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<Provider>,
    /// The model of every role [default: claude-sonnet-4-5 for anthropic, gpt-4.1 for openai].
    #[arg(long)]
    pub model: Option<String>,
    /// The lead's model (overrides --model).
    #[arg(long)]
    pub lead_model: Option<String>,
    /// The workers' model (overrides --model).
    #[arg(long)]
    pub worker_model: Option<String>,
    /// The reviewers' model (overrides --model).
    #[arg(long)]
    pub reviewer_model: Option<String>,
    /// Turn caps: N for every role, or ROLE=N (lead, worker, reviewer); repeatable.
    #[arg(long, value_name = "N|ROLE=N")]
    pub max_turns: Vec<String>,
    /// Tokens the whole run may spend; no new subtask starts once they are spent.
    #[arg(long, value_name = "TOKENS")]
    pub budget_tokens: Option<u64>,
    /// Tokens one subagent may spend; over it, its subtask fails.
    #[arg(long, value_name = "TOKENS")]
    pub subagent_budget_tokens: Option<u64>,
    /// Leave the result on grove/<run>/result instead of moving your branch.
    #[arg(long, conflicts_with = "apply")]
    pub no_apply: bool,
    /// Move your branch to the result when safe (the default; beats `apply = false` in
    /// .grove/config.toml).
    #[arg(long)]
    pub apply: bool,
    /// Keep every worktree after the run, for inspection.
    #[arg(long)]
    pub keep_worktrees: bool,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
    /// Show the lead's plan (the subtasks it would delegate) without running any worker:
    /// no worktree, branch or run is created.
    #[arg(long)]
    pub dry_run: bool,
    /// Who does the workers' job: builtin (grove's own), claude, codex, gemini, aider, or
    /// cmd:"COMMAND" (the brief in $GROVE_BRIEF and on stdin). Lead and reviewer stay grove's.
    #[arg(long, value_name = "BACKEND", default_value = "builtin", value_parser = parse_worker_backend)]
    pub worker_backend: WorkerBackend,
    /// Wall-clock limit of one external worker CLI run, in seconds [default: 3600].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub worker_timeout: Option<u64>,
    /// Confine workers' shell commands in the kernel sandbox (on), or run them with your
    /// full rights (off: loud, and recorded in the run's journal).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = clap::builder::ValueParser::new(|text: &str| text.parse::<grove::tools::sandbox::SandboxMode>()))]
    pub sandbox: grove::tools::sandbox::SandboxMode,
    /// Let sandboxed shell commands use the network (the rest of the sandbox holds).
    #[arg(long)]
    pub allow_network: bool,
}

/// Arguments of `grove resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue, as `grove runs` lists it.
    pub run_id: String,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `grove runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `grove clean`.
#[derive(Debug, Args)]
pub struct CleanArgs {
    /// The run to clean, as `grove runs` lists it.
    pub run_id: String,
}

/// Arguments of `grove demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Create the sample repository in DIR (empty or new) instead of a new temp dir.
    #[arg(long, value_name = "DIR")]
    pub keep_dir: Option<PathBuf>,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `grove gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Delete archives whose commit is older than this many days.
    #[arg(long, value_name = "DAYS")]
    pub older_than: u64,
}

fn parse_worker_backend(text: &str) -> Result<WorkerBackend, String> {
    text.parse()
        .map_err(|error: grove::run::backend::BackendParseError| error.to_string())
}

fn parse_provider(text: &str) -> Result<Provider, String> {
    text.parse()
        .map_err(|error: model::ModelError| error.to_string())
}

/// Runs the parsed command line and returns the process's exit code.
pub async fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    let directory = match cli.directory {
        Some(directory) => directory,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    match cli.command {
        Command::Run(args) => run(&directory, args).await,
        Command::Resume(args) => resume(&directory, &args).await,
        Command::Runs(args) => runs(&directory, &args).await,
        Command::Clean(args) => clean(&directory, &args).await,
        Command::Gc(args) => gc(&directory, &args).await,
        Command::Demo(args) => demo(&directory, &args).await,
        Command::Completions(args) => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut command, "grove", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Init(args) => init::init(&directory, &args).await,
        Command::Review(args) => review::review(&directory, &args).await,
        Command::Report(args) => report::report(&directory, &args).await,
        Command::Mcp(args) => mcp::mcp(&directory, &args).await,
    }
}

async fn run(directory: &std::path::Path, args: RunArgs) -> anyhow::Result<ExitCode> {
    // Flags beat .grove/config.toml, which beats the built-in defaults (RunSettings::over).
    let flags = RunSettings {
        provider: args.provider,
        model: args.model.clone(),
        models: RoleValues {
            lead: args.lead_model.clone(),
            worker: args.worker_model.clone(),
            reviewer: args.reviewer_model.clone(),
        },
        jobs: args.jobs,
        max_turns: parse_turn_caps(&args.max_turns)?,
        budget_tokens: args.budget_tokens,
        subagent_budget_tokens: args.subagent_budget_tokens,
        apply: match (args.no_apply, args.apply) {
            (true, _) => Some(false),
            (false, true) => Some(true),
            (false, false) => None,
        },
        ..RunSettings::default()
    };
    let Launch { options, models } = launch::prepare(
        directory,
        RunRequest {
            task: args.task.clone(),
            flags,
            keep_worktrees: args.keep_worktrees,
            worker_backend: args.worker_backend.clone(),
            worker_timeout_secs: args.worker_timeout,
            sandbox: args.sandbox,
            allow_network: args.allow_network,
        },
    )
    .await?;

    let json = args.json;
    if args.dry_run {
        let (plan, ledgers) = drive_live(|events, cancel| {
            grove::run::plan::plan(directory, options, models, events, cancel)
        })
        .await;
        let plan = plan?;
        render::plan(&plan, &ledgers);
        if json {
            render::json(&plan)?;
        }
        return Ok(match plan.stopped.as_deref() {
            None => ExitCode::SUCCESS,
            Some("interrupted") => ExitCode::from(EXIT_INTERRUPTED),
            Some(_) => ExitCode::FAILURE,
        });
    }
    let report = drive(json, |events, cancel| {
        grove::run::run(directory, options, models, events, cancel)
    })
    .await?;
    Ok(exit_code(&report))
}

async fn resume(directory: &std::path::Path, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    let models = launch::resume_models;
    let report = drive(args.json, |events, cancel| {
        grove::run::resume(
            directory,
            &args.run_id,
            GitOptions::default(),
            models,
            events,
            cancel,
        )
    })
    .await?;
    Ok(exit_code(&report))
}

/// Runs a run (new or resumed) with the live view and Ctrl-C handling, then prints the
/// report; [`exit_code`] maps it to the exit code.
async fn drive<F, Fut>(json: bool, start: F) -> anyhow::Result<RunReport>
where
    F: FnOnce(EventSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<RunReport, RunError>>,
{
    let (outcome, ledgers) = drive_live(start).await;
    let report = outcome?;

    render::report(&report, &ledgers);
    if json {
        render::json(&report)?;
    }
    Ok(report)
}

/// Runs `start` with the live view on stderr and Ctrl-C cancelling it; returns its
/// outcome and every agent's ledger.
async fn drive_live<T, F, Fut>(start: F) -> (Result<T, RunError>, render::Ledgers)
where
    F: FnOnce(EventSink, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<T, RunError>>,
{
    let cancel = CancellationToken::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let renderer = tokio::spawn(render::live(rx, std::io::stderr().is_terminal()));
    let interrupt = tokio::spawn(watch_interrupts(cancel.clone()));
    let outcome = start(EventSink::new(tx), cancel).await;
    interrupt.abort();
    (outcome, renderer.await.unwrap_or_default())
}

/// The exit code of a run or resume (DESIGN.md).
fn exit_code(report: &RunReport) -> ExitCode {
    match report.status {
        RunEnd::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        RunEnd::Failed | RunEnd::Paused => ExitCode::FAILURE,
        RunEnd::Finished if report.all_merged() => ExitCode::SUCCESS,
        RunEnd::Finished => ExitCode::from(EXIT_NOT_ALL_MERGED),
    }
}

/// `grove demo`: the real pipeline on a sample repository and a replayed model.
///
/// Exit code 0 means the demo went as scripted, its one rejection included: the
/// rejection is the point of the demo, and a first command that "fails" would teach the
/// wrong thing. Anything else is 1 (or 130 when interrupted), so a broken demo is loud.
async fn demo(directory: &std::path::Path, args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = match &args.keep_dir {
        Some(dir) => directory.join(dir),
        // Kept on purpose: the user is told to look at it afterwards.
        None => tempfile::Builder::new()
            .prefix("grove-demo-")
            .tempdir()
            .context("cannot create a temp dir for the demo")?
            .keep(),
    };
    let demo = grove::demo::Demo::prepare(&dir).await?;
    let report = drive(args.json, |events, cancel| demo.run(events, cancel)).await?;
    let as_scripted = grove::demo::went_as_scripted(&report);
    render::demo_epilogue(demo.repo(), &report, as_scripted);
    Ok(match report.status {
        RunEnd::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        RunEnd::Finished if as_scripted => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}

/// The first Ctrl-C cancels the run (work is checkpointed, the run stays resumable); a
/// second one ends the process at once.
async fn watch_interrupts(cancel: CancellationToken) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    render::interrupted();
    cancel.cancel();
    if tokio::signal::ctrl_c().await.is_ok() {
        std::process::exit(i32::from(EXIT_INTERRUPTED));
    }
}

async fn open_repo(directory: &std::path::Path) -> anyhow::Result<Repo> {
    Ok(Repo::open(directory, GitOptions::default()).await?)
}

async fn runs(directory: &std::path::Path, args: &RunsArgs) -> anyhow::Result<ExitCode> {
    let repo = open_repo(directory).await?;
    let runs = RunStore::new(repo.common_dir()).list_runs()?;
    if args.json {
        render::json(&runs)?;
    } else {
        render::runs_table(&runs);
    }
    Ok(ExitCode::SUCCESS)
}

async fn clean(directory: &std::path::Path, args: &CleanArgs) -> anyhow::Result<ExitCode> {
    let repo = open_repo(directory).await?;
    let run: grove::run::store::RunId = args
        .run_id
        .parse()
        .with_context(|| format!("{:?} is not a run id; `grove runs` lists them", args.run_id))?;
    let holder = grove::run::lock::read_holder(repo.common_dir())?;
    if let Some(holder) = holder
        && holder.run_id == run.as_str()
        && holder.liveness() != grove::run::lock::Liveness::Dead
    {
        bail!(
            "run {} is still running (pid {}); stop it before cleaning it",
            holder.run_id,
            holder.pid
        );
    }
    let git_run = GitRunId::new(run.as_str())?;
    let report = repo
        .clean_run(&git_run, &repo.default_worktrees_dir(&git_run))
        .await?;
    render::clean_report(&report);
    Ok(ExitCode::SUCCESS)
}

async fn gc(directory: &std::path::Path, args: &GcArgs) -> anyhow::Result<ExitCode> {
    let repo = open_repo(directory).await?;
    let deleted = repo
        .gc_archives(Duration::from_secs(args.older_than.saturating_mul(86_400)))
        .await?;
    render::gc_report(&deleted);
    Ok(ExitCode::SUCCESS)
}
