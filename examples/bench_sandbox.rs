//! The sandbox's overhead per `bash` call: the same command through the plain executor and
//! through the sandboxed one (between `fork` and `exec`: pids cgroup, user namespace,
//! rlimits, Landlock, seccomp), interleaved in one process so that both see
//! the same machine load. Prints the median and mean per call of each, their difference
//! and ratio, and the target (a difference under 5 ms). The worktree's first sandboxed
//! command also builds its rules; that one-off cost is printed on its own line.
//!
//! Usage: bench_sandbox [CALLS] [COMMAND]   (defaults 200, `true`)
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use grove::tools::sandbox::{self, CommandHost, SandboxMode, SandboxPolicy, SandboxedExecutor};
use grove::tools::{CommandExecutor, ExecOutcome, ExecRequest, LocalExecutor, OutputCap};

const TARGET: Duration = Duration::from_millis(5);

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let calls: usize = match args.next().map(|text| text.parse()) {
        None => 200,
        Some(Ok(calls)) if calls > 0 => calls,
        Some(_) => {
            eprintln!("CALLS must be a positive number");
            return ExitCode::from(2);
        }
    };
    let command = args.next().unwrap_or_else(|| "true".to_owned());
    if let Err(error) = sandbox::probe(&CommandHost::default(), SandboxMode::On) {
        eprintln!("{}", sandbox::refusal_advice(&error));
        return ExitCode::FAILURE;
    }
    let workdir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("cannot create a work dir: {error}");
            return ExitCode::FAILURE;
        }
    };
    let plain = LocalExecutor::from_process_env();
    let sandboxed = SandboxedExecutor::new(SandboxPolicy::default(), std::env::vars_os());
    let request = ExecRequest {
        command: command.clone(),
        cwd: workdir.path().to_path_buf(),
        timeout: Duration::from_secs(30),
        cancel: CancellationToken::new(),
        output_cap: OutputCap::default(),
    };

    let mut plain_times = Vec::with_capacity(calls);
    let mut sandboxed_times = Vec::with_capacity(calls);
    for _ in 0..calls {
        for (executor, times) in [
            (&plain as &dyn CommandExecutor, &mut plain_times),
            (&sandboxed as &dyn CommandExecutor, &mut sandboxed_times),
        ] {
            let start = Instant::now();
            match executor.execute(request.clone()).await {
                Ok(result) if result.outcome == ExecOutcome::Exited(0) => {
                    times.push(start.elapsed());
                }
                Ok(result) => {
                    eprintln!(
                        "`{command}` did not succeed ({:?}): {}",
                        result.outcome,
                        result.output_text()
                    );
                    return ExitCode::FAILURE;
                }
                Err(error) => {
                    eprintln!("`{command}` could not run: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
    }

    let first_sandboxed = sandboxed_times[0];
    let plain = Stats::of(&mut plain_times);
    let sandboxed = Stats::of(&mut sandboxed_times);
    let overhead = sandboxed.median.saturating_sub(plain.median);
    println!("sandbox overhead per bash call: `{command}`, {calls} calls each, interleaved");
    println!(
        "  {:<11} median {:>8.2} ms   mean {:>8.2} ms",
        "plain",
        ms(plain.median),
        ms(plain.mean)
    );
    println!(
        "  {:<11} median {:>8.2} ms   mean {:>8.2} ms",
        "sandboxed",
        ms(sandboxed.median),
        ms(sandboxed.mean)
    );
    println!(
        "  overhead    median {:>8.2} ms   ratio {:.2}x   target < {} ms: {}",
        ms(overhead),
        sandboxed.median.as_secs_f64() / plain.median.as_secs_f64().max(f64::MIN_POSITIVE),
        TARGET.as_millis(),
        if overhead < TARGET { "PASS" } else { "FAIL" }
    );
    println!(
        "  first sandboxed call (builds the worktree's rules once): {:.2} ms",
        ms(first_sandboxed)
    );
    ExitCode::SUCCESS
}

struct Stats {
    median: Duration,
    mean: Duration,
}

impl Stats {
    fn of(times: &mut [Duration]) -> Self {
        times.sort();
        let total: Duration = times.iter().sum();
        Self {
            median: times[times.len() / 2],
            mean: total / u32::try_from(times.len()).unwrap_or(u32::MAX),
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
