//! `grove report RUN`: writes one self-contained HTML page about a run and says how to
//! open it.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;

use grove::report;
use grove::settings::prices::price_table;
use grove::store::RunStore;
use grove::text::shell_word;

use crate::cli::drive::{self, UsageError};

/// Arguments of `grove report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run to report on, as `grove runs` lists it.
    pub run_id: String,
    /// Where to write the page [default: report.html in the run's directory].
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// A TOML file of model prices in US dollars per million tokens, added to (or
    /// replacing) the built-in ones and your configuration's `prices` file:
    /// [models."NAME"] input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

/// Gathers the report of `args.run_id`, writes it, prints where it is.
pub async fn report(directory: &Path, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let env: Vec<_> = std::env::vars_os().collect();
    let file = args.prices.as_ref().map(|file| directory.join(file));
    let prices =
        price_table(&env, file.as_deref()).map_err(|error| UsageError(error.to_string()))?;
    let run = drive::parse_run_id(&args.run_id)?;
    let repo = drive::open_repo(directory).await?;
    let data = report::gather(&repo, run.as_str(), prices).await?;
    let output = match &args.output {
        Some(path) => directory.join(path),
        None => RunStore::new(repo.common_dir())
            .run_dir(&run)
            .join(report::DEFAULT_FILE_NAME),
    };
    std::fs::write(&output, report::render_html(&data))
        .with_context(|| format!("cannot write the report to {}", output.display()))?;
    let shown = std::fs::canonicalize(&output).unwrap_or(output);
    println!(
        "wrote the report of run {} to {}",
        data.run_id,
        shown.display()
    );
    println!(
        "open it with: xdg-open {}   (or open {} in a browser)",
        shell_word(&shown.display().to_string()),
        file_url(&shown)
    );
    Ok(ExitCode::SUCCESS)
}

/// The `file://` URL of an absolute `path`, percent-encoding what a URL path cannot hold.
fn file_url(path: &Path) -> String {
    let mut url = String::from("file://");
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'.' | b'_' | b'~' => {
                url.push(char::from(*byte));
            }
            _ => url.push_str(&format!("%{byte:02X}")),
        }
    }
    url
}
