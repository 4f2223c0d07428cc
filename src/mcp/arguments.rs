//! A tool call's arguments as grove reads them, and the input schema clients see.
//!
//! This file owns two rules of the README's: arguments of the wrong shape or type are
//! refused as JSON-RPC invalid params (rmcp would turn them into an `isError` result),
//! and an argument the tool does not have is ignored — Gemini CLI adds an optional
//! `wait_for_previous` to every tool it offers its model — and reported back so that it
//! can be logged and told to the caller. The schemas carry no `uint*` formats, which
//! Gemini CLI warns about once per property. It must never decide what an argument
//! means (`params.rs` does).

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::handler::server::common::{FromContextPart, schema_for_empty_input, schema_for_input};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::JsonObject;
use rmcp::schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A tool's arguments: `value`, read from those the tool has, and the names of the
/// others, which were left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arguments<T> {
    pub value: T,
    pub ignored: Vec<String>,
}

impl<S, T> FromContextPart<ToolCallContext<'_, S>> for Arguments<T>
where
    T: DeserializeOwned + JsonSchema + 'static,
{
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let arguments = context.arguments.take().unwrap_or_default();
        read(&context.name, arguments)
    }
}

/// Reads `arguments` of the tool `tool` as `T`: the names `T`'s schema does not list
/// are set aside, and what is left must deserialize, or the call is invalid params.
pub fn read<T>(tool: &str, mut arguments: JsonObject) -> Result<Arguments<T>, ErrorData>
where
    T: DeserializeOwned + JsonSchema + 'static,
{
    let schema = input_schema::<T>();
    let known = schema.get("properties").and_then(Value::as_object);
    let ignored: Vec<String> = arguments
        .keys()
        .filter(|name| !known.is_some_and(|known| known.contains_key(*name)))
        .cloned()
        .collect();
    for name in &ignored {
        arguments.remove(name);
    }
    let value = serde_json::from_value(Value::Object(arguments)).map_err(|error| {
        ErrorData::invalid_params(format!("invalid arguments for `{tool}`: {error}"), None)
    })?;
    Ok(Arguments { value, ignored })
}

/// The input schema of a tool whose arguments are `T`, without `uint*` formats.
pub fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let Ok(schema) = schema_for_input::<T>() else {
        return schema_for_empty_input();
    };
    let mut schema = Value::Object(schema.as_ref().clone());
    drop_unsigned_formats(&mut schema);
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => schema_for_empty_input(),
    }
}

/// Removes every `"format": "uint…"` (schemars marks unsigned integers so; `minimum: 0`
/// says the same in plain JSON Schema).
fn drop_unsigned_formats(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| format.starts_with("uint"))
            {
                object.remove("format");
            }
            object.values_mut().for_each(drop_unsigned_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_unsigned_formats),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::params::{RunParams, ShowParams};

    fn object(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn unknown_arguments_are_set_aside_and_a_wrong_type_is_invalid_params() {
        let read_show = |value| read::<ShowParams>("show_run", object(value));
        let read = read_show(json!({"run_id": "r", "wait_for_previous": true, "jobz": 2})).unwrap();
        assert_eq!(
            (read.value.run_id.as_str(), read.ignored),
            ("r", vec!["jobz".to_owned(), "wait_for_previous".to_owned()])
        );
        let refused = read_show(json!({"run_id": 5})).unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_ref()),
            (
                rmcp::model::ErrorCode::INVALID_PARAMS,
                "invalid arguments for `show_run`: invalid type: integer `5`, expected a string"
            )
        );
    }

    #[test]
    fn no_schema_has_an_unsigned_format_and_the_bounds_stay() {
        let schema = Value::Object(input_schema::<RunParams>().as_ref().clone());
        let text = schema.to_string();
        assert!(!text.contains("uint"), "{text}");
        assert_eq!(schema["properties"]["jobs"]["minimum"], json!(0));
    }
}
