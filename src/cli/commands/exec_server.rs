//! `grove exec-server`: the far side of a remote worker, started by a launcher (`ssh
//! HOST grove exec-server`). It speaks grove's exec-server protocol on its standard input
//! and output; nothing else may write there, so it prints nothing but its last error.

use std::process::ExitCode;

use clap::Args;

/// Arguments of `grove exec-server`.
#[derive(Debug, Args)]
pub struct ExecServerArgs {}

/// Serves one connection until its input ends.
pub async fn exec_server(_args: &ExecServerArgs) -> anyhow::Result<ExitCode> {
    let env: Vec<_> = std::env::vars_os().collect();
    let home = grove::exec_server::default_home(&env);
    grove::exec_server::serve(tokio::io::stdin(), tokio::io::stdout(), home).await?;
    Ok(ExitCode::SUCCESS)
}
