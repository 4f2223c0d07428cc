//! The exit codes of the binary (DESIGN.md's contract): 0 done, 1 error, 2 usage
//! error, 3 finished but not everything was done, 130 interrupted.

/// Exit code: a usage error (as clap's own).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: finished, but not everything was done (DESIGN.md).
pub const EXIT_NOT_ALL_DONE: u8 = 3;
/// Exit code: interrupted (Ctrl-C, SIGTERM or SIGHUP).
pub const EXIT_INTERRUPTED: u8 = 130;
