//! A tool call's arguments on their way in from a model and back out in the history.
//!
//! This file owns the one rule both wire formats follow: arguments that are a JSON
//! object are the call's input; anything else (text that is not JSON, or JSON that is
//! not an object) is kept as the model's raw text, so the dispatcher answers it as an
//! error, and goes back in the history as a well-formed object that records that text.
//! It must never send a model's malformed text back as if it were valid arguments:
//! servers that validate history (llama.cpp's, proxies) refuse every later request of
//! the conversation, and a resumed run would resend the same history.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// The one key of the object that stands, in the history, for arguments that were not a
/// JSON object; its value is the text the model sent.
pub const UNPARSED_ARGUMENTS_KEY: &str = "unparsed_arguments";

/// A call's input from the arguments text a model streamed or sent: the object it
/// holds, an empty object for no text at all, and otherwise the raw text as a
/// [`Value::String`].
pub(crate) fn parse(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(object @ Value::Object(_)) => object,
        _ => Value::String(raw.to_owned()),
    }
}

/// A call's input from arguments a server sent as a JSON value: a string is the
/// arguments text ([`parse`]), an object is the input, nothing is an empty object, and
/// any other value is kept as its JSON text.
pub(crate) fn from_value(arguments: Option<&Value>) -> Value {
    match arguments {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(raw)) => parse(raw),
        Some(object @ Value::Object(_)) => object.clone(),
        Some(other) => Value::String(other.to_string()),
    }
}

/// The input of a call as the history sends it back: always a JSON object. An input
/// that is not one (a transcript written before this rule, or arguments a server sent as
/// a bare JSON value) becomes `{"unparsed_arguments": TEXT}`.
pub(crate) fn for_history(input: &Value) -> Cow<'_, Value> {
    if input.is_object() {
        return Cow::Borrowed(input);
    }
    let text = match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    let mut record = Map::new();
    record.insert(UNPARSED_ARGUMENTS_KEY.to_owned(), Value::String(text));
    Cow::Owned(Value::Object(record))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_an_object_is_an_input_and_anything_else_keeps_the_models_text() {
        assert_eq!(
            ["{\"a\": 1}", "  ", "{\"a\": ", "[1, 2]", "\"text\"", "7"].map(parse),
            [
                json!({"a": 1}),
                json!({}),
                json!("{\"a\": "),
                json!("[1, 2]"),
                json!("\"text\""),
                json!("7"),
            ]
        );
    }

    #[test]
    fn a_value_a_server_sent_becomes_an_object_or_its_text() {
        assert_eq!(
            [
                None,
                Some(json!(null)),
                Some(json!("{\"a\": 1}")),
                Some(json!("{oops")),
                Some(json!({"a": 1})),
                Some(json!([1])),
            ]
            .iter()
            .map(|value| from_value(value.as_ref()))
            .collect::<Vec<_>>(),
            [
                json!({}),
                json!({}),
                json!({"a": 1}),
                json!("{oops"),
                json!({"a": 1}),
                json!("[1]"),
            ]
        );
    }

    #[test]
    fn the_history_gets_an_object_that_records_what_the_model_sent() {
        assert_eq!(
            [
                json!({"a": 1}),
                json!("{\"a\": "),
                json!([1, 2]),
                json!(null)
            ]
            .iter()
            .map(|input| for_history(input).into_owned())
            .collect::<Vec<_>>(),
            [
                json!({"a": 1}),
                json!({"unparsed_arguments": "{\"a\": "}),
                json!({"unparsed_arguments": "[1,2]"}),
                json!({"unparsed_arguments": "null"}),
            ],
            "every input sent back is a JSON object, and none loses what the model wrote"
        );
    }
}
