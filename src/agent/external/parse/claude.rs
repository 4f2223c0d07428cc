//! Claude Code's `stream-json` output (`claude -p --output-format stream-json
//! --verbose`), checked against Claude Code 2.1.197.
//!
//! One JSON object per line: a `system` `init` event (and `api_retry` notices: the
//! attempt, `error_status` and `error`, the API's error type), then
//! `assistant` and `user` messages — each content block of an assistant message on its
//! own line, sharing the message id — and a final `result` event with `subtype`
//! (`success`, `error_max_turns`, `error_during_execution`), `is_error`,
//! `api_error_status`, `result` (the final text), `num_turns`, the main conversation's
//! `usage`, `modelUsage` (every model call of the session, side requests such as the
//! session title included) and `permission_denials`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{CliReport, Progress, count, jsonl_event, non_empty};
use crate::agent::Ledger;

/// Claude Code's assistant events carry the usage of the stream's `message_start`
/// (output tokens 1, 2, …): until the `result` event, a message's output is estimated
/// from its content at this many characters a token, so a mid-run budget check is not
/// blind.
const CHARS_PER_TOKEN: u64 = 4;

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Assistant {
        message: Message,
    },
    Result(ResultEvent),
    System(SystemEvent),
    #[serde(other)]
    Other,
}

/// Statuses a retry cannot change: the key, or its permissions. Claude Code retries them
/// all the same (a 401 ten times, over minutes); the first retry is left to it, as it
/// may refresh a login's token.
const REFUSED_FOR_GOOD: [u16; 2] = [401, 403];

/// A `system` event: `init`, or an `api_retry` notice.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SystemEvent {
    subtype: String,
    attempt: u32,
    max_retries: u32,
    error_status: Option<u16>,
    error: Option<String>,
}

impl SystemEvent {
    /// What the API answered, when this notice is a second retry of a refusal that no
    /// retry changes.
    fn refused_for_good(&self) -> Option<String> {
        let status = self.error_status?;
        (self.subtype == "api_retry" && self.attempt >= 2 && REFUSED_FOR_GOOD.contains(&status))
            .then(|| {
                format!(
                    "the model API refused every request with {status} {}; claude would retry \
                     it {} times, so grove stopped it after {} attempts",
                    self.error.as_deref().unwrap_or("(no error type)"),
                    self.max_retries,
                    self.attempt
                )
            })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Message {
    id: String,
    content: Vec<Block>,
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: serde_json::Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct Usage {
    #[serde(deserialize_with = "count")]
    input_tokens: u64,
    #[serde(deserialize_with = "count")]
    output_tokens: u64,
    #[serde(deserialize_with = "count")]
    cache_read_input_tokens: u64,
    #[serde(deserialize_with = "count")]
    cache_creation_input_tokens: u64,
}

impl Usage {
    fn ledger(self) -> Ledger {
        Ledger {
            steps: 0,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_creation_input_tokens,
            cache_write_1h_tokens: 0,
        }
    }
}

/// One model's share of `modelUsage`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ModelUsage {
    #[serde(deserialize_with = "count")]
    input_tokens: u64,
    #[serde(deserialize_with = "count")]
    output_tokens: u64,
    #[serde(deserialize_with = "count")]
    cache_read_input_tokens: u64,
    #[serde(deserialize_with = "count")]
    cache_creation_input_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResultEvent {
    subtype: String,
    is_error: Option<bool>,
    api_error_status: Option<u16>,
    result: Option<String>,
    #[serde(deserialize_with = "count")]
    num_turns: u64,
    usage: Option<Usage>,
    #[serde(rename = "modelUsage")]
    model_usage: BTreeMap<String, ModelUsage>,
    permission_denials: Vec<Denial>,
    errors: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Denial {
    tool_name: String,
    tool_input: serde_json::Value,
}

impl Denial {
    /// `Edit /path`, `Bash git commit …`: the tool and what it was refused for.
    fn describe(&self) -> String {
        let target = ["file_path", "path", "command", "url"]
            .iter()
            .find_map(|key| self.tool_input.get(key).and_then(serde_json::Value::as_str));
        match target {
            Some(target) => format!("{} {target}", self.tool_name),
            None => self.tool_name.clone(),
        }
    }
}

/// One assistant message seen so far: its id, reported usage and content size.
#[derive(Debug)]
struct Seen {
    id: String,
    usage: Ledger,
    content_chars: u64,
}

impl Seen {
    fn ledger(&self) -> Ledger {
        let mut ledger = self.usage;
        ledger.output_tokens = ledger
            .output_tokens
            .max(self.content_chars.div_ceil(CHARS_PER_TOKEN));
        ledger
    }
}

#[derive(Debug, Default)]
pub(super) struct ClaudeParser {
    pub(super) report: CliReport,
    messages: Vec<Seen>,
    last_text: Option<(String, String)>,
}

impl ClaudeParser {
    fn sum(&self) -> Ledger {
        let mut total = Ledger::default();
        for message in &self.messages {
            total.add(&message.ledger());
        }
        total.steps = self.messages.len() as u32;
        total
    }

    pub(super) fn line(&mut self, line: &str) -> Vec<Progress> {
        match jsonl_event(line, &mut self.report.unreadable_lines) {
            Some(Event::Assistant { message }) => self.assistant(message),
            Some(Event::Result(result)) => {
                self.result(result);
                Vec::new()
            }
            Some(Event::System(system)) => {
                if self.report.refused_for_good.is_none() {
                    self.report.refused_for_good = system.refused_for_good();
                }
                Vec::new()
            }
            // `user` (tool results) and anything newer.
            Some(Event::Other) | None => Vec::new(),
        }
    }

    fn assistant(&mut self, message: Message) -> Vec<Progress> {
        let mut progress = Vec::new();
        let usage = message.usage.map(Usage::ledger).unwrap_or_default();
        self.report.usage_reported |= message.usage.is_some();
        let chars: u64 = message
            .content
            .iter()
            .map(|block| match block {
                Block::Text { text } => text.chars().count() as u64,
                Block::ToolUse { input, .. } => input.to_string().chars().count() as u64,
                Block::Other => 0,
            })
            .sum();
        match self.messages.last_mut() {
            // Later lines of the same message carry its usage so far.
            Some(last) if last.id == message.id => {
                last.usage = usage;
                last.content_chars += chars;
            }
            _ => {
                self.messages.push(Seen {
                    id: message.id.clone(),
                    usage,
                    content_chars: chars,
                });
            }
        }
        progress.push(Progress::Turn {
            turn: self.messages.len() as u32,
            ledger: self.sum(),
        });
        for block in message.content {
            match block {
                Block::Text { text } => match &mut self.last_text {
                    Some((id, joined)) if *id == message.id => joined.push_str(&text),
                    _ => self.last_text = Some((message.id.clone(), text)),
                },
                Block::ToolUse { name, .. } => progress.push(Progress::Tool {
                    name,
                    is_error: false,
                }),
                Block::Other => {}
            }
        }
        progress
    }

    fn result(&mut self, result: ResultEvent) {
        let report = &mut self.report;
        report.complete = true;
        report.final_message = result.result.as_deref().and_then(non_empty);
        let mut ledger = if result.model_usage.is_empty() {
            result.usage.map(Usage::ledger).unwrap_or_default()
        } else {
            let mut total = Ledger::default();
            for model in result.model_usage.values() {
                total.add(&Ledger {
                    steps: 0,
                    input_tokens: model.input_tokens,
                    output_tokens: model.output_tokens,
                    cache_read_tokens: model.cache_read_input_tokens,
                    cache_write_tokens: model.cache_creation_input_tokens,
                    cache_write_1h_tokens: 0,
                });
            }
            total
        };
        report.usage_reported |= result.usage.is_some() || !result.model_usage.is_empty();
        ledger.steps = u32::try_from(result.num_turns).unwrap_or(u32::MAX);
        if ledger.steps == 0 {
            ledger.steps = self.messages.len() as u32;
        }
        report.ledger = ledger;
        report.denials = result
            .permission_denials
            .iter()
            .map(Denial::describe)
            .collect();
        let is_error = result
            .is_error
            .unwrap_or(result.subtype.starts_with("error"));
        if result.subtype == "error_max_turns" {
            report.turn_limit = true;
            report.final_message = Some(format!(
                "turn limit reached after {} turns",
                report.ledger.steps
            ));
        } else if is_error {
            let detail = if !result.errors.is_empty() {
                result.errors.join("; ")
            } else {
                report
                    .final_message
                    .clone()
                    .unwrap_or_else(|| result.subtype.clone())
            };
            let detail = match result.api_error_status {
                Some(status) => format!("API error {status}: {detail}"),
                None => detail,
            };
            report.error =
                Some(non_empty(detail).unwrap_or_else(|| "claude reported an error".into()));
        }
    }

    pub(super) fn finish(mut self) -> CliReport {
        if !self.report.complete {
            // Truncated: what the assistant messages said is all there is.
            self.report.ledger = self.sum();
        }
        if self.report.final_message.is_none() {
            self.report.final_message = self.last_text.and_then(|(_, text)| non_empty(text));
        }
        self.report
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::{OutputFormat, OutputParser, parse_output};
    use super::*;
    use pretty_assertions::assert_eq;

    /// Recorded from Claude Code 2.1.197 against the fake server: a title request, then
    /// Read, Edit and a final answer, each request's usage 100 in, 20 out, 7 cache
    /// read, 3 cache write.
    const EDIT: &str = include_str!("../../../../tests/fixtures/cli/claude-2.1.197-edit.jsonl");
    /// The same, answered 401 on every request (`CLAUDE_CODE_MAX_RETRIES=0`).
    const UNAUTHORIZED: &str =
        include_str!("../../../../tests/fixtures/cli/claude-2.1.197-401.jsonl");
    /// The edit of a file under a `.git` directory, which Claude Code refuses.
    const DENIED: &str = include_str!("../../../../tests/fixtures/cli/claude-2.1.197-denied.jsonl");

    #[test]
    fn the_ledger_is_every_model_call_of_the_session_title_included() {
        assert_eq!(
            parse_output(OutputFormat::ClaudeStreamJson, EDIT),
            CliReport {
                final_message: Some("Changed alpha to ALPHA.".into()),
                ledger: Ledger {
                    steps: 3,
                    input_tokens: 400,
                    output_tokens: 80,
                    cache_read_tokens: 28,
                    cache_write_tokens: 12,
                    cache_write_1h_tokens: 0,
                },
                usage_reported: true,
                error: None,
                denials: Vec::new(),
                turn_limit: false,
                complete: true,
                unreadable_lines: 0,
                refused_for_good: None,
            },
            "modelUsage (4 requests) counts, not usage (the 3 of the main conversation)"
        );
    }

    #[test]
    fn mid_run_output_is_estimated_from_the_content_not_the_stream_start() {
        let mut parser = OutputParser::new(OutputFormat::ClaudeStreamJson);
        let turns: Vec<(u32, u64)> = EDIT
            .lines()
            .flat_map(|line| parser.line(line))
            .filter_map(|progress| match progress {
                Progress::Turn { turn, ledger } => Some((turn, ledger.output_tokens)),
                Progress::Tool { .. } => None,
            })
            .collect();
        assert_eq!(
            turns,
            vec![(1, 2), (1, 12), (2, 38), (3, 44)],
            "each message's output is at least its content's (the stream said 1 each), and a \
             message split over two lines is one turn"
        );
    }

    #[test]
    fn an_api_error_is_the_error_in_claudes_words() {
        let report = parse_output(OutputFormat::ClaudeStreamJson, UNAUTHORIZED);
        assert_eq!(
            (report.error.as_deref(), report.turn_limit, report.complete),
            (
                Some("API error 401: Invalid API key · Fix external API key"),
                false,
                true
            )
        );
    }

    #[test]
    fn a_refusal_retried_a_second_time_is_for_good_and_other_retries_are_not() {
        let retry = |attempt: u32, status: u16| {
            format!(
                r#"{{"type":"system","subtype":"api_retry","attempt":{attempt},"max_retries":10,"retry_delay_ms":621.5,"error_status":{status},"error":"authentication_failed","session_id":"s"}}"#
            )
        };
        let after = |lines: &[String]| {
            let mut parser = OutputParser::new(OutputFormat::ClaudeStreamJson);
            for line in lines {
                parser.line(line);
            }
            parser.refused_for_good().map(str::to_owned)
        };
        assert_eq!(
            [
                after(&[retry(1, 401)]),
                after(&[retry(1, 529), retry(2, 529), retry(3, 529)]),
                after(&[retry(1, 401), retry(2, 401)]),
            ],
            [
                None,
                None,
                Some(
                    "the model API refused every request with 401 authentication_failed; \
                     claude would retry it 10 times, so grove stopped it after 2 attempts"
                        .to_owned()
                ),
            ],
            "the first retry may refresh a login; an overload is worth every retry"
        );
    }

    #[test]
    fn permission_denials_are_reported_with_their_targets() {
        let report = parse_output(OutputFormat::ClaudeStreamJson, DENIED);
        assert_eq!(
            (report.denials, report.error),
            (vec!["Edit /tmp/explore/repo/.git/x/a.txt".to_owned()], None)
        );
    }

    #[test]
    fn max_turns_is_a_turn_limit_with_a_summary_that_says_so() {
        let capped = format!(
            "{}\n{}",
            EDIT.lines().nth(1).unwrap(),
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":4,"session_id":"s","usage":{"input_tokens":5,"output_tokens":1},"unknown_field":[1]}"#
        );
        let report = parse_output(OutputFormat::ClaudeStreamJson, &capped);
        assert_eq!(
            (
                report.error,
                report.turn_limit,
                report.ledger.steps,
                report.final_message.as_deref()
            ),
            (None, true, 4, Some("turn limit reached after 4 turns")),
            "a turn cap is not an error, and the summary is not a stale early text"
        );
    }

    #[test]
    fn truncated_output_falls_back_to_the_messages_and_skips_garbage() {
        let cut: String = EDIT.lines().take(6).collect::<Vec<_>>().join("\n");
        let text = format!("npm WARN something odd\n{cut}\n{{\"type\":\"result\",\"subt");
        let report = parse_output(OutputFormat::ClaudeStreamJson, &text);
        assert_eq!(
            (
                report.complete,
                report.unreadable_lines,
                report.ledger.steps,
                report.ledger.input_tokens,
                report.final_message.as_deref()
            ),
            (false, 2, 2, 200, Some("Reading."))
        );
    }
}
