//! The machine's processes as the test (outside every sandbox) sees them in `/proc`: a
//! command's own pids are those of its pid namespace and mean nothing here.

use std::path::Path;

/// True when process `pid` is gone (or a zombie nobody has reaped yet).
pub fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// The live processes whose working directory is `dir` (as each one's own mount
/// namespace names it).
pub fn running_in(dir: &Path) -> Vec<i32> {
    live(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
}

/// The live processes whose working directory is `dir` or lies under it.
pub fn running_under(dir: &Path) -> Vec<i32> {
    live(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir)))
}

/// The live processes one of whose arguments is `arg`.
pub fn running_with_arg(arg: &str) -> Vec<i32> {
    live(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
            line.split(|byte| *byte == 0)
                .any(|part| part == arg.as_bytes())
        })
    })
}

fn live(matches: impl Fn(i32) -> bool) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter(|pid| matches(*pid) && !is_gone(*pid))
        .collect();
    pids.sort_unstable();
    pids
}

/// Waits up to 5 s for `running` to find nothing; what it still finds then.
pub fn settled(running: impl Fn() -> Vec<i32>) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = running();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Every mount under `dir` that any process on the machine still sees, as `pid: mount
/// point`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    let mut mounts = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        mounts.extend(
            info.lines()
                .filter_map(|line| line.split(' ').nth(4))
                .filter(|point| point.starts_with(&dir))
                .map(|point| format!("{name}: {point}")),
        );
    }
    mounts
}
