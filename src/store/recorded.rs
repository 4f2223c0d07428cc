//! The options a run was started with, as its `run_started` record and its snapshot hold
//! them: typed when written, and read back without ever making the journal unreadable.
//!
//! This module owns the journaled form of [`RunOptions`]. Its wire format is the plain
//! JSON object of the options' serde form, unchanged from the untyped journals written
//! before it (a run started by an older grove still resumes). It must never turn a
//! record it cannot read into defaults: a run whose options are unknown cannot be
//! resumed, only listed and reported.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::settings::RunOptions;

/// The options of a run's `run_started` record.
#[derive(Debug, Clone, Default)]
pub enum RecordedOptions {
    /// Read (or written) whole.
    Options(Box<RunOptions>),
    /// `null` or absent: journaled by a grove that failed to encode them (it wrote
    /// `null`), or that predates options in the journal.
    #[default]
    Missing,
    /// A value this grove cannot read as options (say, a setting a newer grove added).
    /// Kept verbatim, so that rewriting the snapshot loses nothing.
    Unreadable {
        raw: serde_json::Value,
        source: Arc<serde_json::Error>,
    },
}

/// Why a run's journaled options cannot be used to resume it. Not retried.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordedOptionsError {
    #[error("its options were not recorded")]
    Missing,
    #[error("its options cannot be read: {source}")]
    Unreadable {
        #[source]
        source: Arc<serde_json::Error>,
    },
}

impl RecordedOptions {
    /// The options, or why the journal holds none that this grove can use.
    pub fn get(&self) -> Result<&RunOptions, RecordedOptionsError> {
        match self {
            Self::Options(options) => Ok(options),
            Self::Missing => Err(RecordedOptionsError::Missing),
            Self::Unreadable { source, .. } => Err(RecordedOptionsError::Unreadable {
                source: Arc::clone(source),
            }),
        }
    }

    /// The journaled JSON, as written.
    fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        match self {
            Self::Options(options) => serde_json::to_value(options),
            Self::Missing => Ok(serde_json::Value::Null),
            Self::Unreadable { raw, .. } => Ok(raw.clone()),
        }
    }
}

impl From<RunOptions> for RecordedOptions {
    fn from(options: RunOptions) -> Self {
        Self::Options(Box::new(options))
    }
}

/// Two records are equal when they journal the same JSON: the options that are never
/// journaled (the git program, the commands' environment) do not count.
impl PartialEq for RecordedOptions {
    fn eq(&self, other: &Self) -> bool {
        match (self.to_json(), other.to_json()) {
            (Ok(mine), Ok(theirs)) => mine == theirs,
            _ => false,
        }
    }
}

impl Serialize for RecordedOptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Options(options) => options.serialize(serializer),
            Self::Missing => serializer.serialize_none(),
            Self::Unreadable { raw, .. } => raw.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for RecordedOptions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = serde_json::Value::deserialize(deserializer)?;
        if raw.is_null() {
            return Ok(Self::Missing);
        }
        Ok(match RunOptions::deserialize(&raw) {
            Ok(options) => Self::Options(Box::new(options)),
            Err(source) => Self::Unreadable {
                raw,
                source: Arc::new(source),
            },
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_read_back_as_written_and_the_wire_form_is_the_plain_object() {
        let options = RunOptions {
            jobs: 3,
            ..RunOptions::new("t")
        };
        let recorded = RecordedOptions::from(options.clone());
        let wire = serde_json::to_value(&recorded).unwrap();
        assert_eq!(
            wire,
            serde_json::to_value(&options).unwrap(),
            "the journal holds the options' own JSON, as untyped journals did"
        );
        let back: RecordedOptions = serde_json::from_value(wire).unwrap();
        assert_eq!(back, recorded);
        assert_eq!(back.get().unwrap().jobs, 3);
    }

    #[test]
    fn null_and_unreadable_options_read_without_failing_and_refuse_a_resume() {
        let null: RecordedOptions = serde_json::from_value(json!(null)).unwrap();
        assert!(
            matches!(null.get(), Err(RecordedOptionsError::Missing)),
            "`null` (journaled when encoding failed) is missing options: {null:?}"
        );
        assert_eq!(serde_json::to_value(&null).unwrap(), json!(null));

        let future = json!({ "task": "t", "sandbox": "some-new-mode" });
        let unreadable: RecordedOptions = serde_json::from_value(future.clone()).unwrap();
        let error = unreadable.get().unwrap_err();
        assert!(
            matches!(error, RecordedOptionsError::Unreadable { .. })
                && error
                    .to_string()
                    .starts_with("its options cannot be read: "),
            "options this grove cannot read are an error that says so: {error}"
        );
        assert_eq!(
            serde_json::to_value(&unreadable).unwrap(),
            future,
            "unreadable options are kept verbatim"
        );
    }
}
