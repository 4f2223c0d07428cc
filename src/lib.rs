//! grove: run one coding task as a fleet of LLM subagents, each in its own git worktree,
//! with an isolated reviewer that must approve every diff before it is merged.
//!
//! The layers only point down: the binary's `cli → {run, review, report, demo} → {agent,
//! store, settings} → {tools, model, git}`, and any module may use `event`, `ledger`,
//! `prices`, `status` and `text` (and `repo_file`), which use nothing above them. `tools`, `model` and `git` know nothing of each
//! other or of the layers above; `agent` knows no git. The library never prints: everything a user should see travels as an
//! [`event::Event`] on a channel that the binary renders.

pub mod agent;
pub mod demo;
pub mod event;
pub mod exec_server;
pub mod git;
pub mod ledger;
pub mod mcp;
pub mod model;
pub mod prices;
pub mod remote;
pub mod repo_file;
pub mod report;
pub mod review;
pub mod run;
pub mod settings;
pub mod status;
pub mod store;
pub mod text;
pub mod tools;
pub mod worktree;
