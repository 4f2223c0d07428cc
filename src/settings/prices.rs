//! Which price table a command uses: the built-in one, then the price file the user's
//! own configuration names (`prices = "FILE"` in `~/.config/grove/config.toml`), then
//! `--prices FILE`, each adding models or replacing them.
//!
//! This file owns that layering. A repository's `.grove/config.toml` cannot name a price
//! file: what a run may spend is the user's to say, not a repository's.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::prices::{PriceError, PriceTable};
use crate::settings::config::{ConfigError, line_and_column, parse_error};
use crate::settings::values::ValueProblem;

/// Why the price table could not be built. Not retried: the user fixes the file.
#[derive(Debug, thiserror::Error)]
pub enum PricesError {
    /// The user's configuration cannot be read, or its `prices` is not a path.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A price file cannot be read or is not a valid price table.
    #[error(transparent)]
    Price(#[from] PriceError),
}

#[derive(Debug, Default, Deserialize)]
struct RawUserPrices {
    #[serde(default)]
    prices: Option<Spanned<toml::Value>>,
}

/// The built-in table, with the price file of the user's configuration (found through
/// `env`) and then `flag` (`--prices FILE`) added over it.
pub fn price_table(
    env: &[(OsString, OsString)],
    flag: Option<&Path>,
) -> Result<PriceTable, PricesError> {
    let mut table = PriceTable::builtin();
    if let Some(config) = crate::settings::remote::user_config_path(env)
        && let Some(file) = user_price_file(&config)?
    {
        table = table.with_file(&file)?;
    }
    if let Some(file) = flag {
        table = table.with_file(file)?;
    }
    Ok(table)
}

/// The price file `config` names, relative to its directory; `None` when there is no
/// such configuration or it names none.
fn user_price_file(config: &Path) -> Result<Option<PathBuf>, ConfigError> {
    let text = match std::fs::read_to_string(config) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                path: config.to_path_buf(),
                source,
            });
        }
    };
    let raw: RawUserPrices =
        toml::from_str(&text).map_err(|error| parse_error(config, &text, &error))?;
    let Some(value) = raw.prices else {
        return Ok(None);
    };
    match value
        .get_ref()
        .as_str()
        .filter(|path| !path.trim().is_empty())
    {
        Some(path) => Ok(Some(
            config
                .parent()
                .map_or_else(|| PathBuf::from(path), |dir| dir.join(path)),
        )),
        None => {
            let (line, column) = line_and_column(&text, value.span().start);
            Err(ConfigError::Invalid {
                path: config.to_path_buf(),
                line,
                column,
                key: Some("prices".to_owned()),
                problem: ValueProblem::Expected {
                    expected: "the path of a price file",
                    got: value.get_ref().to_string(),
                },
            })
        }
    }
}
