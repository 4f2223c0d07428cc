//! Gemini CLI's `--output-format json`, checked against Gemini CLI 0.61.0.
//!
//! One (pretty-printed) object at the end — `response` (the final text),
//! `stats.models.<model>` with `api.totalRequests`, `tokens` (`prompt` including
//! `cached`, `input` = prompt minus cached, `candidates`, `thoughts`, `tool`, `cached`)
//! and `roles.<role>` (`main` is the conversation, `utility_router` the model router's
//! side requests), and `error` (`type`, `message`, `code`) when it failed; on failure
//! the object goes to stderr. Thought tokens are billed as output and counted there;
//! tool-use prompt tokens count as input. Text before the object is skipped.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{CliReport, count, non_empty};

/// Gemini prints one JSON object at the end; beyond this it cannot be parsed.
const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Document {
    response: Option<String>,
    stats: Stats,
    error: Option<ErrorBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Stats {
    models: BTreeMap<String, ModelStats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ModelStats {
    api: Api,
    tokens: Option<Tokens>,
    roles: BTreeMap<String, RoleStats>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Api {
    #[serde(deserialize_with = "count")]
    total_requests: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RoleStats {
    #[serde(deserialize_with = "count")]
    total_requests: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Tokens {
    input: Option<serde_json::Number>,
    #[serde(deserialize_with = "count")]
    prompt: u64,
    #[serde(deserialize_with = "count")]
    candidates: u64,
    #[serde(deserialize_with = "count")]
    thoughts: u64,
    #[serde(deserialize_with = "count")]
    tool: u64,
    #[serde(deserialize_with = "count")]
    cached: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ErrorBody {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

/// A Google API error envelope, which Gemini CLI puts verbatim in its message.
#[derive(Debug, Deserialize)]
struct ApiEnvelope {
    error: ApiError,
}

#[derive(Debug, Deserialize)]
struct ApiError {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
}

impl ErrorBody {
    /// `Error: 401 UNAUTHENTICATED: API key not valid…`: the API's own words when the
    /// message is its JSON envelope.
    fn describe(&self) -> String {
        let message = match serde_json::from_str::<ApiEnvelope>(self.message.trim()) {
            Ok(ApiEnvelope { error }) => {
                let code = error.code.map(|code| code.to_string()).unwrap_or_default();
                format!("{} {}: {}", code, error.status, error.message)
                    .trim()
                    .to_owned()
            }
            Err(_) => self.message.clone(),
        };
        let message = non_empty(message).unwrap_or_else(|| "gemini reported an error".into());
        match non_empty(&self.kind) {
            Some(kind) => format!("{kind}: {message}"),
            None => message,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct GeminiParser {
    text: String,
    pub(super) overflowed: bool,
}

impl GeminiParser {
    pub(super) fn line(&mut self, line: &str) {
        if self.text.len() + line.len() + 1 > MAX_DOCUMENT_BYTES {
            self.overflowed = true;
            return;
        }
        self.text.push_str(line);
        self.text.push('\n');
    }

    /// The output's JSON object: the whole text, else the text from the first line that
    /// opens one that parses to the end; with the count of lines skipped before it.
    fn document(&self) -> Option<(Document, u32)> {
        let object = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text.trim())
                .ok()
                .filter(serde_json::Value::is_object)
                .and_then(|value| serde_json::from_value::<Document>(value).ok())
        };
        if let Some(document) = object(&self.text) {
            return Some((document, 0));
        }
        let mut offset = 0;
        for line in self.text.split_inclusive('\n') {
            if line.starts_with('{')
                && let Some(document) = object(&self.text[offset..])
            {
                let skipped = self.text[..offset]
                    .lines()
                    .filter(|line| !line.trim().is_empty())
                    .count();
                return Some((document, skipped as u32));
            }
            offset += line.len();
        }
        None
    }

    pub(super) fn finish(self) -> CliReport {
        let mut report = CliReport::default();
        let Some((document, skipped)) = self.document() else {
            report.unreadable_lines = self
                .text
                .lines()
                .filter(|line| !line.trim().is_empty())
                .count() as u32
                + u32::from(self.overflowed);
            return report;
        };
        report.complete = true;
        report.unreadable_lines = skipped;
        report.final_message = document.response.as_deref().and_then(non_empty);
        let ledger = &mut report.ledger;
        for model in document.stats.models.values() {
            // The main conversation's requests are steps; the router's are not.
            let requests = match model.roles.get("main") {
                Some(main) => main.total_requests,
                None if model.roles.is_empty() => model.api.total_requests,
                None => 0,
            };
            ledger.steps += u32::try_from(requests).unwrap_or(u32::MAX);
            let Some(tokens) = &model.tokens else {
                continue;
            };
            let input = match tokens.input.as_ref().and_then(serde_json::Number::as_u64) {
                Some(input) => input,
                None => tokens.prompt.saturating_sub(tokens.cached),
            };
            ledger.input_tokens += input + tokens.tool;
            ledger.cache_read_tokens += tokens.cached;
            ledger.output_tokens += tokens.candidates + tokens.thoughts;
            report.usage_reported = true;
        }
        report.error = document.error.as_ref().map(ErrorBody::describe);
        report
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::{OutputFormat, parse_output};
    use super::*;
    use crate::agent::Ledger;
    use pretty_assertions::assert_eq;

    /// Recorded from Gemini CLI 0.61.0 against the fake server: five router requests and
    /// two of the conversation (a `replace` call, then the answer), each 1000 prompt
    /// tokens (300 cached), 50 candidates, 5 thoughts.
    const EDIT: &str = include_str!("../../../../tests/fixtures/cli/gemini-0.61.0-edit.json");
    /// Its stderr against a server that answers 401.
    const UNAUTHORIZED: &str =
        include_str!("../../../../tests/fixtures/cli/gemini-0.61.0-401.stderr");

    #[test]
    fn every_request_is_in_the_ledger_and_the_conversations_are_the_steps() {
        assert_eq!(
            parse_output(OutputFormat::GeminiJson, EDIT),
            CliReport {
                final_message: Some("Changed alpha to ALPHA.".into()),
                ledger: Ledger {
                    steps: 2,
                    input_tokens: 7 * 700,
                    output_tokens: 7 * 55,
                    cache_read_tokens: 7 * 300,
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
    fn an_api_error_is_unwrapped_from_its_envelope() {
        assert_eq!(
            parse_output(OutputFormat::GeminiJson, UNAUTHORIZED)
                .error
                .as_deref(),
            Some("Error: 401 UNAUTHENTICATED: API key not valid. Please pass a valid API key."),
            "the stack trace before the object is skipped"
        );
    }

    #[test]
    fn garbage_is_counted() {
        let garbage = parse_output(OutputFormat::GeminiJson, "oops\n{\"response\": \"cut");
        assert_eq!(
            (
                garbage.complete,
                garbage.final_message,
                garbage.unreadable_lines
            ),
            (false, None, 2)
        );
    }
}
