//! `grove trust`: trusts the `[worktree] setup` command of this repository's
//! `.grove/config.toml`, its `[check]` command when that asks for the network, and the
//! keys that widen what workers' commands see (`[sandbox] allow_read`, `[worktree] copy`,
//! `[worktree] share`), exactly as the file has them now; with `--mcp NAME=VALUE`,
//! instead, a run argument
//! that MCP clients may then give in this repository (`worker_backend=cmd:…`,
//! `sandbox=off`, `allow_network=true`).
//!
//! It prints each command and value it trusts, asks nothing, and records them outside the
//! repository (`grove::settings::trust`). It must never run a command.

use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;

use grove::settings::config::{ProjectConfig, RunSettings};
use grove::settings::trust::{McpGrant, TrustStore};
use grove::settings::widening::file_widenings;

use crate::cli::drive;

/// Arguments of `grove trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    /// Trust MCP clients to give this `grove mcp` run argument, with exactly this value,
    /// in this repository (instead of trusting the config's commands):
    /// `worker_backend=cmd:COMMAND`, `sandbox=off` or `allow_network=true`.
    #[arg(long = "mcp", value_name = "NAME=VALUE")]
    pub mcp: Vec<McpGrant>,
}

/// Records trust of the setup command, a network check and the widenings of the sandbox
/// in the config of the repository containing `directory`.
#[allow(clippy::print_stdout)]
pub async fn trust(directory: &Path, args: &TrustArgs) -> anyhow::Result<ExitCode> {
    let repo = drive::open_repo(directory).await?;
    if !args.mcp.is_empty() {
        let root = repo.work_tree().unwrap_or(repo.common_dir());
        let store = TrustStore::for_user()?;
        for grant in &args.mcp {
            let record = store.trust_mcp(root, grant)?;
            println!(
                "trusted MCP clients to give `{}` for runs in {} (recorded in {})",
                grant.as_argument(),
                root.display(),
                record.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(root) = repo.work_tree() else {
        bail!(
            "{} is a bare repository; it has no .grove/config.toml whose setup command \
             could be trusted",
            repo.common_dir().display()
        );
    };
    let Some(config) = ProjectConfig::load(root)? else {
        println!(
            "{} has no .grove/config.toml; nothing to trust",
            root.display()
        );
        return Ok(ExitCode::SUCCESS);
    };
    // What runs with the network in every worktree: the setup, and a check that asks for it.
    let mut commands = Vec::new();
    if let Some(setup) = &config.settings.setup {
        commands.push(("setup command", setup.as_str()));
    }
    if let Some(check) = config.settings.check.as_ref().filter(|check| check.network) {
        commands.push(("check (network = true)", check.command.as_str()));
    }
    // `grove trust` takes no flags for these: what it records is what `grove run` reads.
    let widenings = file_widenings(&config.settings, &RunSettings::default());
    if commands.is_empty() && widenings.is_empty() {
        println!(
            "{} has no [worktree] setup command, no [check] with network = true, and no \
             [sandbox] allow_read, [worktree] copy or [worktree] share; nothing to trust",
            config.path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let store = TrustStore::for_user()?;
    for (what, command) in commands {
        let record = store.trust(root, command)?;
        println!(
            "trusted this {what} for {}:\n\n    {command}\n\ngrove runs it in every new \
             worktree until the command in {} changes (recorded in {})",
            root.display(),
            config.path.display(),
            record.display()
        );
    }
    for widening in &widenings {
        let record = store.trust_widening(root, widening)?;
        println!(
            "trusted this value for {}:\n\n    {widening}\n\nwhich {}; grove uses it until the \
             value in {} changes (recorded in {})",
            root.display(),
            widening.key.consequence(),
            config.path.display(),
            record.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
