//! `grove resume RUN_ID`: continues an interrupted run; it ends like `grove run`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;

use grove::git::GitOptions;
use grove::model::{self, Provider};
use grove::run::start::ResumeProblem;
use grove::run::{ModelNames, RunError};
use grove::settings::config::CONFIG_PATH;
use grove::settings::trust::TrustStore;
use grove::store::state::RunState;
use grove::store::{RunId, RunStore};

use crate::cli::{drive, render};

/// Arguments of `grove resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to continue, as `grove runs` lists it.
    pub run_id: String,
    /// Print one JSON object with the run's report on stdout at the end.
    #[arg(long)]
    pub json: bool,
}

/// Resumes `args.run_id` with the provider and models the run started with.
pub async fn resume(directory: &Path, args: &ResumeArgs) -> anyhow::Result<ExitCode> {
    check_setup_trusted(directory, &args.run_id).await?;
    let models = |state: &RunState| {
        let not_resumable = |error: model::ModelError| RunError::NotResumable {
            run_id: state.run_id.clone(),
            source: ResumeProblem::Model(Box::new(error)),
        };
        let provider: Provider = state.provider.parse().map_err(not_resumable)?;
        // Runs journaled before per-role models name only one model.
        let names: ModelNames = state
            .options
            .get()
            .map(|options| options.model_names.clone())
            .unwrap_or_default();
        let or_run_model = |name: String| {
            if name.is_empty() {
                state.model.clone()
            } else {
                name
            }
        };
        let names = ModelNames {
            lead: or_run_model(names.lead),
            worker: or_run_model(names.worker),
            reviewer: or_run_model(names.reviewer),
        };
        drive::connect_models(provider, names).map_err(not_resumable)
    };
    let run_id = drive::parse_run_id(&args.run_id)?;
    let repo = drive::open_repo(directory).await?;
    render::agent_file_problems(&drive::agent_file_problems(
        repo.work_tree().unwrap_or(repo.common_dir()),
    ));
    let report = drive::drive(args.json, |events, cancel| {
        grove::run::resume(
            directory,
            run_id.as_str(),
            GitOptions::default(),
            models,
            events,
            cancel,
        )
    })
    .await?;
    Ok(drive::exit_code(&report))
}

/// Refuses to resume a run whose journaled setup command the user has not trusted here
/// (a run started before grove asked for trust). A run started since had its command
/// trusted at its start. Problems reading the run are left to the resume to report.
async fn check_setup_trusted(directory: &Path, run_id: &str) -> anyhow::Result<()> {
    let repo = drive::open_repo(directory).await?;
    let (Some(root), Ok(run_id)) = (repo.work_tree(), run_id.parse::<RunId>()) else {
        return Ok(());
    };
    let Ok(state) = RunStore::new(repo.common_dir()).read_state(&run_id) else {
        return Ok(());
    };
    if let Ok(options) = state.options.get()
        && let Some(command) = &options.worktree_setup.setup
    {
        TrustStore::for_user()?.check(root, &root.join(CONFIG_PATH), command)?;
    }
    Ok(())
}
