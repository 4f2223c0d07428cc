//! Shipping this grove to a host that lacks it, over the host's own launcher.
//!
//! Every step is a plain command with plain words (`mkdir -p`, `dd of=`, `chmod`, `mv`),
//! so it runs the same through a launcher that hands its words to a shell (ssh) and one
//! that runs them as they are (`kubectl exec`, `podman exec`). Paths are relative to
//! where the launcher starts (ssh: the home directory; a container: its working
//! directory). The binary lands under a temporary name and is renamed into place, so a
//! connection never starts half a binary.

use std::process::Stdio;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::RemoteError;
use super::hosts::RemoteHost;
use super::protocol::VERSION;
use crate::text::shell_quote;

/// The most of a shipping step's stderr kept for its error: ssh's or a shell's message.
const STDERR_KEPT: u64 = 4096;

/// Where a shipped grove lives on a host, relative to where its launcher starts.
pub fn shipped_program() -> String {
    format!(".cache/grove/bin/grove-{VERSION}")
}

/// True when `error` says the host has no program by the name the launcher ran.
pub(super) fn program_missing(error: &RemoteError) -> bool {
    let RemoteError::Lost { reason, stderr, .. } = error else {
        return false;
    };
    reason.contains("exit status: 127")
        || ["not found", "No such file or directory"]
            .iter()
            .any(|words| stderr.contains(words))
}

/// Copies this process's own binary to `host` as [`shipped_program`].
pub(super) async fn ship(host: &RemoteHost) -> Result<(), RemoteError> {
    let exe = std::env::current_exe().map_err(|source| failed(host, "find this grove", &source))?;
    let binary = tokio::fs::read(&exe)
        .await
        .map_err(|source| failed(host, "read this grove", &source))?;
    let target = shipped_program();
    let part = format!("{target}.part-{:08x}", fastrand::u32(..));
    let dir = ".cache/grove/bin";
    run(host, &["mkdir", "-p", dir], Vec::new()).await?;
    run(host, &["dd", &format!("of={part}"), "status=none"], binary).await?;
    run(host, &["chmod", "755", &part], Vec::new()).await?;
    run(host, &["mv", "-f", &part, &target], Vec::new()).await
}

async fn run(host: &RemoteHost, words: &[&str], input: Vec<u8>) -> Result<(), RemoteError> {
    let quoted: Vec<String> = words
        .iter()
        .map(|word| shell_quote(word).into_owned())
        .collect();
    let line = format!("{} {}", host.launch, quoted.join(" "));
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| RemoteError::Launch {
            host: host.name.clone(),
            command: line.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&input)
            .await
            .map_err(|source| failed(host, "send grove", &source))?;
    }
    let mut stderr = child.stderr.take();
    let ended = async {
        let mut kept = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = (&mut *stderr)
                .take(STDERR_KEPT)
                .read_to_end(&mut kept)
                .await;
            // The rest is read and dropped: a host that floods its stderr neither fills
            // this memory nor stalls on a full pipe.
            let _ = tokio::io::copy(stderr, &mut tokio::io::sink()).await;
        }
        (child.wait().await, kept)
    };
    let (status, stderr) = tokio::time::timeout(host.silence() * 10, ended)
        .await
        .map_err(|_| {
            failed(
                host,
                words[0],
                &std::io::Error::from(std::io::ErrorKind::TimedOut),
            )
        })?;
    let status = status.map_err(|source| failed(host, words[0], &source))?;
    if status.success() {
        return Ok(());
    }
    Err(RemoteError::Refused {
        host: host.name.clone(),
        message: format!(
            "shipping grove failed at `{line}` ({status}): {}",
            String::from_utf8_lossy(&stderr).trim()
        ),
    })
}

fn failed(host: &RemoteHost, step: &str, source: &std::io::Error) -> RemoteError {
    RemoteError::Refused {
        host: host.name.clone(),
        message: format!("shipping grove failed ({step}): {source}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_host_that_floods_its_stderr_while_grove_ships_is_read_to_a_bounded_message() {
        let host = RemoteHost {
            name: "loud".into(),
            launch: "sh -c 'head -c 5000000 /dev/zero | tr \\\\0 x >&2; exit 3' sh".into(),
            program: "grove".into(),
            slots: 1,
            timeout: std::time::Duration::from_secs(30),
            ship: true,
        };
        let error = run(&host, &["mkdir", "-p", "x"], Vec::new())
            .await
            .unwrap_err();
        let RemoteError::Refused { host, message } = error else {
            panic!("a failed step is refused: {error}");
        };
        assert_eq!(
            (host.as_str(), message.as_str()),
            (
                "loud",
                format!(
                    "shipping grove failed at `{} mkdir -p x` (exit status: 3): {}",
                    "sh -c 'head -c 5000000 /dev/zero | tr \\\\0 x >&2; exit 3' sh",
                    "x".repeat(STDERR_KEPT as usize)
                )
                .as_str()
            ),
            "of five million bytes of stderr the step's error keeps the start, no more"
        );
    }
}
