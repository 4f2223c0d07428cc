//! Codex's `exec --json` output, checked against codex 0.171.0.
//!
//! One JSON object per line, tagged by `type`: `thread.started`, `turn.started`,
//! `item.started`/`item.updated`/`item.completed` (an `item` whose `type` is
//! `agent_message` with `text`, `reasoning`, `command_execution` with `exit_code` and
//! `status`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`, `error`),
//! `turn.completed` with `usage` (`input_tokens` — cached and cache-written ones
//! included —, `cached_input_tokens`, `cache_write_input_tokens`, `output_tokens` —
//! reasoning included —, `reasoning_output_tokens`), `turn.failed` with
//! `error.message`, and top-level `error` events with `message`.
//!
//! A top-level `error` is not fatal by itself: codex prints `Reconnecting... 1/5 (…)`
//! as an `error` while it retries, and the turn may then complete. Only a failed turn,
//! or an error with no completed turn after it, fails the worker.

use serde::Deserialize;

use super::{CliReport, Progress, count, jsonl_event, non_empty};

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "item.completed")]
    ItemCompleted { item: Item },
    #[serde(rename = "turn.completed")]
    TurnCompleted {
        #[serde(default)]
        usage: Option<Usage>,
    },
    #[serde(rename = "turn.failed")]
    TurnFailed {
        #[serde(default)]
        error: ErrorBody,
    },
    #[serde(rename = "error")]
    Error {
        #[serde(default)]
        message: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ErrorBody {
    message: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    AgentMessage {
        #[serde(default)]
        text: String,
    },
    CommandExecution {
        #[serde(default)]
        status: String,
        #[serde(default)]
        exit_code: Option<i64>,
    },
    FileChange {
        #[serde(default)]
        status: String,
    },
    McpToolCall {
        #[serde(default)]
        server: String,
        #[serde(default)]
        tool: String,
        #[serde(default)]
        status: String,
    },
    WebSearch {},
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct Usage {
    #[serde(deserialize_with = "count")]
    input_tokens: u64,
    #[serde(deserialize_with = "count")]
    cached_input_tokens: u64,
    #[serde(deserialize_with = "count")]
    cache_write_input_tokens: u64,
    #[serde(deserialize_with = "count")]
    output_tokens: u64,
}

#[derive(Debug, Default)]
pub(super) struct CodexParser {
    pub(super) report: CliReport,
    /// The last top-level `error` since the last completed turn.
    pending_error: Option<String>,
    /// A `turn.failed` message: always fatal.
    failed: Option<String>,
}

impl CodexParser {
    pub(super) fn line(&mut self, line: &str) -> Vec<Progress> {
        let Some(event) = jsonl_event::<Event>(line, &mut self.report.unreadable_lines) else {
            return Vec::new();
        };
        let report = &mut self.report;
        match event {
            Event::ItemCompleted { item } => return self.item(item),
            Event::TurnCompleted { usage } => {
                let usage = usage.unwrap_or_default();
                let ledger = &mut report.ledger;
                // The answer that closed the turn is a step too (tool calls counted
                // theirs as they came).
                ledger.steps += 1;
                ledger.input_tokens += usage
                    .input_tokens
                    .saturating_sub(usage.cached_input_tokens)
                    .saturating_sub(usage.cache_write_input_tokens);
                ledger.cache_read_tokens += usage.cached_input_tokens;
                ledger.cache_write_tokens += usage.cache_write_input_tokens;
                ledger.output_tokens += usage.output_tokens;
                report.usage_reported = true;
                report.complete = true;
                self.pending_error = None;
                return vec![Progress::Turn {
                    turn: ledger.steps,
                    ledger: *ledger,
                }];
            }
            Event::TurnFailed { error } => {
                report.ledger.steps += 1;
                report.complete = true;
                self.failed =
                    Some(non_empty(error.message).unwrap_or_else(|| "the turn failed".into()));
            }
            Event::Error { message } => {
                self.pending_error =
                    Some(non_empty(message).unwrap_or_else(|| "codex reported an error".into()));
            }
            Event::Other => {}
        }
        Vec::new()
    }

    fn item(&mut self, item: Item) -> Vec<Progress> {
        let (name, is_error) = match item {
            Item::AgentMessage { text } => {
                if let Some(text) = non_empty(text) {
                    self.report.final_message = Some(text);
                }
                return Vec::new();
            }
            Item::CommandExecution { status, exit_code } => (
                "shell".to_owned(),
                status == "failed" || exit_code.is_some_and(|code| code != 0),
            ),
            Item::FileChange { status } => ("apply_patch".to_owned(), status == "failed"),
            Item::McpToolCall {
                server,
                tool,
                status,
            } => (format!("{server}.{tool}"), status == "failed"),
            Item::WebSearch {} => ("web_search".to_owned(), false),
            Item::Other => return Vec::new(),
        };
        // Each tool call came from a model response: one step.
        self.report.ledger.steps += 1;
        vec![Progress::Tool { name, is_error }]
    }

    pub(super) fn finish(mut self) -> CliReport {
        self.report.error = self.failed.or(self.pending_error);
        self.report
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::{OutputFormat, parse_output};
    use super::*;
    use crate::agent::Ledger;
    use pretty_assertions::assert_eq;

    /// Recorded from codex 0.171.0 against the fake server: an `apply_patch` call, then
    /// the answer; each response used 1000 input (400 cached), 50 output (10 reasoning).
    const EDIT: &str = include_str!("../../../../tests/fixtures/cli/codex-0.171.0-edit.jsonl");
    /// The same against a server that answers 401: five reconnects, then a failed turn.
    const UNAUTHORIZED: &str =
        include_str!("../../../../tests/fixtures/cli/codex-0.171.0-401.jsonl");

    #[test]
    fn the_ledger_counts_cached_input_apart_and_a_step_per_response() {
        assert_eq!(
            parse_output(OutputFormat::CodexJsonl, EDIT),
            CliReport {
                final_message: Some("Updated a.txt to ALPHA.".into()),
                ledger: Ledger {
                    steps: 2,
                    input_tokens: 1200,
                    output_tokens: 100,
                    cache_read_tokens: 800,
                    cache_write_tokens: 0,
                    cache_write_1h_tokens: 0,
                },
                usage_reported: true,
                error: None,
                denials: Vec::new(),
                turn_limit: false,
                complete: true,
                unreadable_lines: 0,
                refused_for_good: None,
            }
        );
    }

    #[test]
    fn reconnect_notices_before_a_completed_turn_are_not_errors() {
        let text = "{\"type\":\"turn.started\"}\n\
            {\"type\":\"error\",\"message\":\"Reconnecting... 1/5 (stream disconnected before completion)\"}\n\
            {\"type\":\"item.completed\",\"item\":{\"id\":\"i\",\"type\":\"agent_message\",\"text\":\"Done.\"}}\n\
            {\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":2,\"cache_write_input_tokens\":3,\"output_tokens\":4,\"reasoning_output_tokens\":1}}\n";
        let report = parse_output(OutputFormat::CodexJsonl, text);
        assert_eq!(
            (report.error, report.ledger),
            (
                None,
                Ledger {
                    steps: 1,
                    input_tokens: 5,
                    output_tokens: 4,
                    cache_read_tokens: 2,
                    cache_write_tokens: 3,
                    cache_write_1h_tokens: 0,
                }
            )
        );
    }

    #[test]
    fn a_failed_turn_is_the_error_in_codexs_words() {
        let report = parse_output(OutputFormat::CodexJsonl, UNAUTHORIZED);
        assert_eq!(
            (report.error.as_deref(), report.complete),
            (
                Some(
                    "unexpected status 401 Unauthorized: Incorrect API key provided: sk-x., \
                     url: http://127.0.0.1:18998/v1/responses"
                ),
                true
            )
        );
    }

    #[test]
    fn an_error_with_no_completed_turn_after_it_is_fatal_and_garbage_is_counted() {
        let text = "{\"type\":\"turn.started\"}\nnot json\n{\"type\":\"error\",\"message\":\"stream disconnected\"}\n";
        let report = parse_output(OutputFormat::CodexJsonl, text);
        assert_eq!(
            (
                report.error.as_deref(),
                report.unreadable_lines,
                report.complete
            ),
            (Some("stream disconnected"), 1, false)
        );
    }
}
