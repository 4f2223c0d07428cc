//! The sandbox's overhead per `bash` call: the same command through the plain executor,
//! the sandbox without namespaces (`--sandbox no-loopback`: pids cgroup, user namespace,
//! rlimits, Landlock, seccomp) and the whole sandbox (`on`: also a mount namespace with
//! every host socket covered and a network namespace with its loopback up), interleaved
//! in one process so that all see the same machine load. Prints the median and mean per
//! call of each, the differences and ratios, and the target (under 5 ms over plain). The
//! worktree's first sandboxed command also builds its rules; that one-off cost is printed
//! on its own line.
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
    let no_loopback = SandboxedExecutor::new(
        SandboxPolicy {
            own_loopback: false,
            ..SandboxPolicy::default()
        },
        std::env::vars_os(),
    );
    let sandboxed = SandboxedExecutor::new(SandboxPolicy::default(), std::env::vars_os());
    let request = ExecRequest {
        command: command.clone(),
        cwd: workdir.path().to_path_buf(),
        timeout: Duration::from_secs(30),
        cancel: CancellationToken::new(),
        output_cap: OutputCap::default(),
    };

    let executors: [(&str, &dyn CommandExecutor); 3] = [
        ("plain", &plain),
        ("no-loopback", &no_loopback),
        ("sandboxed", &sandboxed),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(calls); executors.len()];
    for _ in 0..calls {
        for ((_, executor), times) in executors.iter().zip(times.iter_mut()) {
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

    let first_sandboxed = times[2][0];
    let stats: Vec<Stats> = times.iter_mut().map(|times| Stats::of(times)).collect();
    println!("sandbox overhead per bash call: `{command}`, {calls} calls each, interleaved");
    for ((name, _), stats) in executors.iter().zip(&stats) {
        println!(
            "  {name:<11} median {:>8.2} ms   mean {:>8.2} ms",
            ms(stats.median),
            ms(stats.mean)
        );
    }
    let plain = &stats[0];
    for (name, of) in [("no-loopback", &stats[1]), ("sandboxed", &stats[2])] {
        let overhead = of.median.saturating_sub(plain.median);
        println!(
            "  {name:<11} overhead {:>6.2} ms   ratio {:.2}x   target < {} ms: {}",
            ms(overhead),
            of.median.as_secs_f64() / plain.median.as_secs_f64().max(f64::MIN_POSITIVE),
            TARGET.as_millis(),
            if overhead < TARGET { "PASS" } else { "FAIL" }
        );
    }
    println!(
        "  namespaces (sandboxed - no-loopback): {:.2} ms",
        ms(stats[2].median.saturating_sub(stats[1].median))
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
