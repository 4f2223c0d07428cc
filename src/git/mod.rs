//! Everything grove does with git: worktrees, orchestrator-owned commits, diffs,
//! in-memory merges, refs, archives and the final apply.
//!
//! This module owns the user's repository safety. It must never touch the user's work
//! tree, index or branch except in the final apply, and only when that is safe. It knows
//! nothing of models, tools or agents.
