//! `grove init`: writes the project configuration `.grove/config.toml` (every key
//! commented out at its default) and a sample agent file, then says what to do next.
//!
//! It writes only inside the repository's `.grove/` and never overwrites the config
//! without `--force`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Args;

use grove::git::{GitOptions, Repo};
use grove::settings::config::CONFIG_PATH;
use grove::settings::template::{AGENT_SAMPLE, AGENT_SAMPLE_PATH, template};

/// Arguments of `grove init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Overwrite an existing .grove/config.toml (and the sample agent file).
    #[arg(long)]
    pub force: bool,
}

/// Writes the files in the root of the repository containing `directory`.
#[allow(clippy::print_stdout)]
pub async fn init(directory: &Path, args: &InitArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::open(directory, GitOptions::default())
        .await
        .context("grove init writes .grove/config.toml into a git repository")?;
    let Some(root) = repo.work_tree() else {
        bail!(
            "{} is a bare repository; grove init needs a work tree to write .grove/config.toml \
             into",
            repo.common_dir().display()
        );
    };
    let config = root.join(CONFIG_PATH);
    if !args.force && std::fs::symlink_metadata(&config).is_ok() {
        bail!(
            "{} already exists; edit it, or run `grove init --force` to replace it with the \
             commented defaults",
            config.display()
        );
    }
    let sample = root.join(AGENT_SAMPLE_PATH);
    let write_sample = args.force || std::fs::symlink_metadata(&sample).is_err();
    for (path, text, wanted) in [
        (&config, template(), true),
        (&sample, AGENT_SAMPLE.to_owned(), write_sample),
    ] {
        if !wanted {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }

    println!("In {}:", root.display());
    println!("  wrote {CONFIG_PATH} (every key commented out at its default)");
    if write_sample {
        println!("  wrote {AGENT_SAMPLE_PATH}");
    } else {
        println!("  kept {AGENT_SAMPLE_PATH} (it exists; --force replaces it)");
    }
    println!();
    println!("Next:");
    println!("  - uncomment and change what your project needs in {CONFIG_PATH}: provider,");
    println!("    models, jobs, budgets, a setup command for each worktree (e.g. `npm ci`),");
    println!("    untracked files each worktree needs (e.g. .env); flags still beat the file");
    println!("  - to add an agent the lead can delegate to, copy {AGENT_SAMPLE_PATH}");
    println!("    to .grove/agents/<name>.md and edit it");
    println!("  - commit .grove/ to share the configuration, then:");
    println!("    grove run \"describe the change you want\"");
    Ok(ExitCode::SUCCESS)
}
