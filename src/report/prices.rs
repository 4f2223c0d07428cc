//! The price table a report estimates costs with: built-in rates for the default
//! models, overridable from a TOML file.
//!
//! This file owns the rates and the override file's format. It must never present a
//! guess as a price: a model it has no rate for costs "unknown", never zero.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ledger::Ledger;

/// What one model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens that were not read from or written to the prompt cache.
    pub input: f64,
    pub output: f64,
    /// `None` when the provider publishes no such rate.
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// `None` when the provider publishes no such rate.
    #[serde(default)]
    pub cache_write: Option<f64>,
}

/// The rates a report uses, and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    /// Model name (or name prefix, see [`PriceTable::lookup`]) to its rates.
    pub models: BTreeMap<String, ModelPrice>,
    /// The override file, when one was read.
    pub overrides: Option<PathBuf>,
}

/// An estimated cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    /// US dollars.
    Usd(f64),
    /// The table has no rates for the model.
    UnknownModel,
    /// The model has tokens of a kind the table has no rate for.
    MissingRate { kind: &'static str },
}

impl Cost {
    /// The dollars, if the cost is known.
    pub fn usd(self) -> Option<f64> {
        match self {
            Cost::Usd(usd) => Some(usd),
            _ => None,
        }
    }
}

/// Why a price file could not be used. Never retried: the user fixes the file.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    #[error("cannot read the price file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, or not a price table.
    #[error("price file {path}, line {line}: {message}")]
    Invalid {
        path: PathBuf,
        /// 1-based; 1 when the parser could not say.
        line: usize,
        message: String,
    },
}

/// The override file's shape: `[models."NAME"]` tables of rates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    #[serde(default)]
    models: BTreeMap<String, toml::Spanned<ModelPrice>>,
}

impl PriceTable {
    /// The built-in rates (USD per million tokens, list prices when this was written).
    pub fn builtin() -> PriceTable {
        let models = [
            (
                "claude-sonnet-4-5",
                ModelPrice {
                    input: 3.0,
                    output: 15.0,
                    cache_read: Some(0.30),
                    cache_write: Some(3.75),
                },
            ),
            (
                "gpt-4.1",
                ModelPrice {
                    input: 2.0,
                    output: 8.0,
                    cache_read: Some(0.50),
                    cache_write: None,
                },
            ),
        ]
        .into_iter()
        .map(|(name, price)| (name.to_owned(), price))
        .collect();
        PriceTable {
            models,
            overrides: None,
        }
    }

    /// The built-in rates with the models of the TOML file at `path` added or replaced.
    pub fn with_overrides_from(path: &Path) -> Result<PriceTable, PriceError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::builtin().with_overrides(path, &text)
    }

    /// These rates with the models of the TOML `text` added or replaced; `path` only
    /// names the file in errors and in the report.
    pub fn with_overrides(mut self, path: &Path, text: &str) -> Result<PriceTable, PriceError> {
        let invalid = |offset: Option<usize>, message: String| PriceError::Invalid {
            path: path.to_path_buf(),
            line: offset.map_or(1, |offset| line_of(text, offset)),
            message,
        };
        let file: PriceFile = toml::from_str(text)
            .map_err(|error| invalid(error.span().map(|s| s.start), error.message().to_owned()))?;
        for (name, price) in file.models {
            let offset = Some(price.span().start);
            let price = price.into_inner();
            if name.trim().is_empty() {
                return Err(invalid(offset, "a model name is empty".to_owned()));
            }
            let rates = [
                ("input", Some(price.input)),
                ("output", Some(price.output)),
                ("cache_read", price.cache_read),
                ("cache_write", price.cache_write),
            ];
            for (kind, rate) in rates {
                if let Some(rate) = rate
                    && !(rate.is_finite() && rate >= 0.0)
                {
                    return Err(invalid(
                        offset,
                        format!(
                            "model {name:?}: `{kind}` must be a non-negative number of US \
                             dollars per million tokens, not {rate}"
                        ),
                    ));
                }
            }
            self.models.insert(name, price);
        }
        self.overrides = Some(path.to_path_buf());
        Ok(self)
    }

    /// The rates of `model`, and the table entry they come from: the entry named exactly
    /// `model`, else the longest entry `model` starts with followed by `-` (so
    /// `claude-sonnet-4-5-20250929` gets the rates of `claude-sonnet-4-5`).
    pub fn lookup(&self, model: &str) -> Option<(&str, &ModelPrice)> {
        if let Some((name, price)) = self.models.get_key_value(model) {
            return Some((name, price));
        }
        self.models
            .iter()
            .filter(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(name, price)| (name.as_str(), price))
    }

    /// The estimated cost of `ledger` spent on `model`.
    pub fn cost(&self, model: &str, ledger: &Ledger) -> Cost {
        let Some((_, price)) = self.lookup(model) else {
            return Cost::UnknownModel;
        };
        let per_token = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
        let mut usd = per_token(ledger.input_tokens, price.input)
            + per_token(ledger.output_tokens, price.output);
        for (kind, tokens, rate) in [
            ("cache read", ledger.cache_read_tokens, price.cache_read),
            ("cache write", ledger.cache_write_tokens, price.cache_write),
        ] {
            match (tokens, rate) {
                (0, _) => {}
                (tokens, Some(rate)) => usd += per_token(tokens, rate),
                (_, None) => return Cost::MissingRate { kind },
            }
        }
        Cost::Usd(usd)
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ledger(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Ledger {
        Ledger {
            steps: 1,
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
        }
    }

    #[test]
    fn builtin_rates_price_every_kind_of_token() {
        let table = PriceTable::builtin();
        let cost = table
            .cost(
                "claude-sonnet-4-5",
                &ledger(1_000_000, 100_000, 2_000_000, 10_000),
            )
            .usd()
            .unwrap();
        // 3 + 1.5 + 0.6 + 0.0375
        assert!(
            (cost - 5.1375).abs() < 1e-9,
            "input, output, cache read and cache write each at their rate: {cost}"
        );
    }

    #[test]
    fn dated_model_names_use_their_family_and_unknown_models_are_not_free() {
        let table = PriceTable::builtin();
        assert_eq!(
            table
                .lookup("claude-sonnet-4-5-20250929")
                .map(|(name, _)| name),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(
            table.lookup("claude-sonnet-4-50").map(|(name, _)| name),
            None,
            "a prefix counts only up to a `-`"
        );
        assert_eq!(
            table.cost("local-model", &ledger(10, 10, 0, 0)),
            Cost::UnknownModel
        );
        assert_eq!(
            table.cost("gpt-4.1", &ledger(10, 10, 0, 5)),
            Cost::MissingRate {
                kind: "cache write"
            },
            "tokens of a kind with no rate make the cost unknown, not cheaper"
        );
        assert_eq!(
            table.cost("gpt-4.1", &ledger(1_000_000, 0, 0, 0)),
            Cost::Usd(2.0)
        );
    }

    #[test]
    fn an_override_file_adds_and_replaces_models() {
        let text = "[models.\"gpt-4.1\"]\ninput = 1.0\noutput = 4.0\n\n\
                    [models.local-model]\ninput = 0.0\noutput = 0.0\n";
        let table = PriceTable::builtin()
            .with_overrides(Path::new("prices.toml"), text)
            .unwrap();
        assert_eq!(
            table.models.get("gpt-4.1"),
            Some(&ModelPrice {
                input: 1.0,
                output: 4.0,
                cache_read: None,
                cache_write: None
            })
        );
        assert_eq!(
            table.cost("local-model", &ledger(5, 5, 0, 0)),
            Cost::Usd(0.0)
        );
        assert!(
            table.models.contains_key("claude-sonnet-4-5"),
            "built-ins stay"
        );
        assert_eq!(table.overrides, Some(PathBuf::from("prices.toml")));
    }

    #[test]
    fn bad_price_files_name_the_file_and_line() {
        let cases = [
            (
                "[models.a]\ninput = 1.0\noutput = \"x\"\n",
                3,
                "invalid type",
            ),
            ("[models.a]\ninput = 1.0\n", 1, "missing field `output`"),
            (
                "\n[models.a]\ninput = 1.0\noutput = 2.0\ncache_reed = 1.0\n",
                5,
                "unknown field `cache_reed`",
            ),
            (
                "\n\n[models.a]\ninput = -1.0\noutput = 2.0\n",
                3,
                "non-negative",
            ),
            ("[models.a\n", 1, ""),
        ];
        for (text, line, needle) in cases {
            let error = PriceTable::builtin()
                .with_overrides(Path::new("/x/prices.toml"), text)
                .unwrap_err();
            let PriceError::Invalid {
                line: found,
                ref message,
                ..
            } = error
            else {
                panic!("{error:?}");
            };
            assert!(
                error
                    .to_string()
                    .starts_with("price file /x/prices.toml, line "),
                "the message names the file: {error}"
            );
            assert!(message.contains(needle), "{text:?}: {message}");
            assert_eq!(found, line, "{text:?}: {error}");
        }
    }
}
