//! The price table every cost in grove comes from: built-in list prices of the providers'
//! current models, added to or replaced by a TOML file (`--prices FILE`, the `prices` key
//! of the user's configuration).
//!
//! This module owns the rates, the price file's format and the arithmetic of a cost. Any
//! module may use it (a run's money budget, the live view, the end table, the report);
//! it uses nothing but the ledger. It must never present a guess as a price: a model it
//! has no rate for costs "unknown", never zero.

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
    /// Writing the prompt cache for 5 minutes (Anthropic's default lifetime); `None` when
    /// the provider publishes no such rate. The ledger does not tell the two lifetimes
    /// apart, so every cache write is priced at this rate.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Writing the prompt cache for 1 hour; `None` when the provider has no such lifetime.
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
}

impl ModelPrice {
    /// The cost of `ledger` at these rates, or the kind of token it holds that has no rate.
    pub fn cost(&self, ledger: &Ledger) -> Cost {
        let per_token = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
        let mut usd = per_token(ledger.input_tokens, self.input)
            + per_token(ledger.output_tokens, self.output);
        for (kind, tokens, rate) in [
            ("cache read", ledger.cache_read_tokens, self.cache_read),
            ("cache write", ledger.cache_write_tokens, self.cache_write),
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

/// The rates a run or a report uses, and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    /// Model name (or name prefix, see [`PriceTable::lookup`]) to its rates.
    pub models: BTreeMap<String, ModelPrice>,
    /// The files read over the built-in rates, in the order they were read.
    pub overrides: Vec<PathBuf>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::builtin()
    }
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

/// Dollars as people read them: cents from a dollar up or when whole, four decimals
/// below a dollar otherwise (`$12.40`, `$0.50`, `$0.0312`).
pub fn format_usd(usd: f64) -> String {
    let whole_cents = ((usd * 100.0).round() - usd * 100.0).abs() < 1e-6;
    if usd >= 1.0 || whole_cents {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    }
}

/// An amount of US dollars a budget allows, held in millionths of a dollar so that
/// settings compare exactly; written and journaled as a number of dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Usd(u64);

/// The largest budget accepted: a million dollars (a larger one is a typo, not a cap).
const MAX_BUDGET_USD: f64 = 1_000_000.0;

impl Usd {
    /// `dollars` as a budget: positive, finite and at most a million; `None` otherwise.
    pub fn from_dollars(dollars: f64) -> Option<Usd> {
        (dollars.is_finite() && dollars > 0.0 && dollars <= MAX_BUDGET_USD)
            .then(|| Usd((dollars * 1_000_000.0).round() as u64))
            .filter(|usd| usd.0 > 0)
    }

    /// The amount in dollars.
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }
}

impl std::fmt::Display for Usd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_usd(self.dollars()))
    }
}

/// What a budget in dollars must be, for the messages of the flag and the config key.
pub const USD_EXPECTED: &str = "a positive number of US dollars up to 1000000, e.g. 5 or 2.50";

impl std::str::FromStr for Usd {
    type Err = String;

    /// `5`, `2.50` or `$2.50`.
    fn from_str(text: &str) -> Result<Usd, String> {
        let trimmed = text.trim();
        let number = trimmed.strip_prefix('$').unwrap_or(trimmed);
        number
            .parse::<f64>()
            .ok()
            .and_then(Usd::from_dollars)
            .ok_or_else(|| format!("expected {USD_EXPECTED}, got {text:?}"))
    }
}

impl serde::Serialize for Usd {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Usd, D::Error> {
        let dollars = f64::deserialize(deserializer)?;
        Usd::from_dollars(dollars).ok_or_else(|| {
            serde::de::Error::custom(format!("expected {USD_EXPECTED}, got {dollars}"))
        })
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

/// The built-in table, in the price file's format (its comments cite each figure).
const BUILTIN: &str = include_str!("prices.toml");

/// A model the table has no price for, under a money budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{flag} needs the price of every model the run uses, and {} no price: {}; give {} in \
     a price file with `--prices FILE` ([models.\"NAME\"] input = 3.0, output = 15.0, \
     cache_read = 0.3, cache_write = 3.75)",
    if models.len() == 1 { "this one has" } else { "these have" },
    models.join(", "),
    if models.len() == 1 { "its rates" } else { "their rates" }
)]
pub struct Unpriced {
    /// The flag (or config key) that asked for a money budget.
    pub flag: String,
    /// Every model without a price, once each, in the order asked.
    pub models: Vec<String>,
}

impl PriceTable {
    /// The built-in rates: list prices of the providers' current models (`src/prices.toml`
    /// says where each comes from and when it was read).
    pub fn builtin() -> PriceTable {
        let empty = PriceTable {
            models: BTreeMap::new(),
            overrides: Vec::new(),
        };
        // The file is tested to parse; were it not to, every model would be "unknown"
        // rather than priced by a guess.
        let mut table = empty
            .clone()
            .with_overrides(Path::new("prices.toml"), BUILTIN)
            .unwrap_or(empty);
        table.overrides.clear();
        table
    }

    /// The built-in rates with the models of the TOML file at `path` added or replaced.
    pub fn with_overrides_from(path: &Path) -> Result<PriceTable, PriceError> {
        Self::builtin().with_file(path)
    }

    /// These rates with the models of the TOML file at `path` added or replaced.
    pub fn with_file(self, path: &Path) -> Result<PriceTable, PriceError> {
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.with_overrides(path, &text)
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
                ("cache_write_1h", price.cache_write_1h),
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
        self.overrides.push(path.to_path_buf());
        Ok(self)
    }

    /// The rates of `model`, and the table entry they come from: the entry named exactly
    /// `model`, else the longest entry `model` starts with followed by `-` and a dated
    /// snapshot's suffix (digits and dashes: `claude-sonnet-4-5-20250929` gets the rates of
    /// `claude-sonnet-4-5`, `gpt-5.4-2026-03-05` those of `gpt-5.4`). Any other suffix is
    /// another model (`claude-sonnet-5-7` is not `claude-sonnet-5`): unknown, not guessed.
    pub fn lookup(&self, model: &str) -> Option<(&str, &ModelPrice)> {
        if let Some((name, price)) = self.models.get_key_value(model) {
            return Some((name, price));
        }
        self.models
            .iter()
            .filter(|(name, _)| {
                model
                    .strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(is_snapshot_suffix)
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(name, price)| (name.as_str(), price))
    }

    /// The estimated cost of `ledger` spent on `model`.
    pub fn cost(&self, model: &str, ledger: &Ledger) -> Cost {
        match self.lookup(model) {
            Some((_, price)) => price.cost(ledger),
            None => Cost::UnknownModel,
        }
    }

    /// Refuses a money budget (named by `flag`) when one of `models` has no price.
    pub fn check_priced<'a>(
        &self,
        flag: &str,
        models: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), Unpriced> {
        let mut missing: Vec<String> = Vec::new();
        for model in models {
            if self.lookup(model).is_none() && !missing.iter().any(|m| m == model) {
                missing.push(model.to_owned());
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(Unpriced {
            flag: flag.to_owned(),
            models: missing,
        })
    }
}

/// A dated snapshot's suffix: a date of eight digits, dashes allowed between them
/// (`20250929`, `2026-03-05`); a short number (`7`) is another version, not a date.
fn is_snapshot_suffix(rest: &str) -> bool {
    rest.starts_with(|c: char| c.is_ascii_digit())
        && rest.chars().all(|c| c.is_ascii_digit() || c == '-')
        && rest.chars().filter(char::is_ascii_digit).count() >= 8
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
            (
                table.lookup("claude-sonnet-5-5-20261001").map(|(n, _)| n),
                table.lookup("claude-sonnet-5-7").map(|(n, _)| n),
                table.lookup("gpt-5.4-2026-03-05").map(|(n, _)| n),
                table.lookup("gpt-5.4-mini").map(|(n, _)| n),
            ),
            (
                Some("claude-sonnet-5-5"),
                None,
                Some("gpt-5.4"),
                Some("gpt-5.4-mini")
            ),
            "a dated snapshot gets its model's rates; another model is never its \
             neighbour's"
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
    fn the_builtin_table_parses_and_prices_the_default_models() {
        let table = PriceTable::builtin();
        let builtin = PriceTable {
            models: BTreeMap::new(),
            overrides: Vec::new(),
        }
        .with_overrides(Path::new("prices.toml"), BUILTIN);
        assert!(builtin.is_ok(), "src/prices.toml parses: {builtin:?}");
        assert!(table.overrides.is_empty());
        assert_eq!(
            table.lookup("claude-sonnet-5-5").map(|(_, p)| *p),
            Some(ModelPrice {
                input: 2.0,
                output: 10.0,
                cache_read: Some(0.10),
                cache_write: Some(2.5),
                cache_write_1h: Some(4.0),
            })
        );
        assert_eq!(
            table.check_priced("--budget-usd", ["claude-sonnet-5-5", "gpt-5.5"]),
            Ok(())
        );
        let refused = table
            .check_priced("--budget-usd", ["gpt-5.5", "local", "other", "local"])
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "--budget-usd needs the price of every model the run uses, and these have no \
             price: local, other; give their rates in a price file with `--prices FILE` \
             ([models.\"NAME\"] input = 3.0, output = 15.0, cache_read = 0.3, cache_write = \
             3.75)"
        );
        assert_eq!(format_usd(12.404), "$12.40");
        assert_eq!(format_usd(0.03125), "$0.0312");
        assert_eq!(format_usd(0.0), "$0.00");
        assert_eq!(format_usd(0.5), "$0.50");
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
                cache_write: None,
                cache_write_1h: None,
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
        assert_eq!(table.overrides, vec![PathBuf::from("prices.toml")]);
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
