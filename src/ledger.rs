//! The token ledger: what one subagent, or a whole run, cost.
//!
//! This module owns what a ledger counts ([`Ledger::record`], saturating, never
//! wrapping) and the one-line format users read in the run summary ([`LedgerLine`]). Any module may use it; it must never
//! depend on anything but the model's usage type.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// What one subagent cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Model turns taken.
    pub steps: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written to live an hour (priced higher).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: u64,
}

fn is_zero(count: &u64) -> bool {
    *count == 0
}

impl Ledger {
    /// Adds one turn's usage. A counter that would pass `u64::MAX` stops there (see
    /// [`Ledger::is_saturated`]): absurd usage from a server must not wrap to a small
    /// figure that slips under a budget.
    pub fn record(&mut self, usage: &Usage) {
        self.steps = self.steps.saturating_add(1);
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(usage.cache_read_input_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(usage.cache_creation_input_tokens);
        self.cache_write_1h_tokens = self.cache_write_1h_tokens.saturating_add(
            usage
                .cache_creation_1h_input_tokens
                .min(usage.cache_creation_input_tokens),
        );
    }

    /// Adds another ledger (run totals), saturating like [`Ledger::record`].
    pub fn add(&mut self, other: &Ledger) {
        self.steps = self.steps.saturating_add(other.steps);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cache_write_1h_tokens = self
            .cache_write_1h_tokens
            .saturating_add(other.cache_write_1h_tokens);
    }

    /// Every token the provider counted, for budgets (`u64::MAX` when that overflows).
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Whether a counter reached `u64::MAX`: the true figure is unknown (at least
    /// that), so the ledger line flags it rather than show a number as exact.
    pub fn is_saturated(&self) -> bool {
        [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        ]
        .contains(&u64::MAX)
            || self.steps == u32::MAX
    }
}

/// One agent's ledger as a single line, e.g.
/// `[worker S2 · steps=3 in=3400 out=290 cache_read=2900]`.
///
/// Cache counters are shown only when non-zero, so runs without prompt caching stay short.
#[derive(Clone, Copy)]
pub struct LedgerLine<'a> {
    /// Who spent it: an agent (`worker S2`) or any other label.
    pub agent: &'a dyn fmt::Display,
    pub ledger: &'a Ledger,
}

impl Ledger {
    /// This ledger rendered as `agent`'s one-line summary.
    pub fn line<'a>(&'a self, agent: &'a dyn fmt::Display) -> LedgerLine<'a> {
        LedgerLine {
            agent,
            ledger: self,
        }
    }
}

impl fmt::Display for LedgerLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ledger {
            steps,
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            cache_write_1h_tokens: _,
        } = self.ledger;
        write!(
            f,
            "[{} · steps={steps} in={input_tokens} out={output_tokens}",
            self.agent
        )?;
        if *cache_read_tokens > 0 {
            write!(f, " cache_read={cache_read_tokens}")?;
        }
        if *cache_write_tokens > 0 {
            write!(f, " cache_write={cache_write_tokens}")?;
        }
        if self.ledger.is_saturated() {
            f.write_str(" · counters saturated: the API reported absurd usage")?;
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AgentId, AgentLabel};
    use crate::status::SubtaskId;

    fn worker_s2() -> AgentId {
        AgentId {
            role: "worker".to_owned(),
            label: AgentLabel::Subtask(SubtaskId(2)),
        }
    }

    #[test]
    fn shows_cache_read_only_when_non_zero() {
        let ledger = Ledger {
            steps: 3,
            input_tokens: 3400,
            output_tokens: 290,
            cache_read_tokens: 2900,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        };
        assert_eq!(
            ledger.line(&worker_s2()).to_string(),
            "[worker S2 · steps=3 in=3400 out=290 cache_read=2900]"
        );
    }

    #[test]
    fn shows_both_cache_counters_when_non_zero() {
        let ledger = Ledger {
            steps: 1,
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 5,
            cache_write_tokens: 7,
            cache_write_1h_tokens: 0,
        };
        assert_eq!(
            ledger.line(&worker_s2()).to_string(),
            "[worker S2 · steps=1 in=10 out=2 cache_read=5 cache_write=7]"
        );
    }

    #[test]
    fn absurd_usage_saturates_and_is_flagged_instead_of_wrapping() {
        let absurd = Usage {
            input_tokens: u64::MAX,
            output_tokens: 5,
            cache_read_input_tokens: u64::MAX - 1,
            cache_creation_input_tokens: 0,
            cache_creation_1h_input_tokens: 0,
        };
        let mut ledger = Ledger::default();
        ledger.record(&absurd);
        ledger.record(&absurd);
        let mut total = Ledger::default();
        total.add(&ledger);
        total.add(&ledger);
        assert_eq!(
            (total, total.total_tokens(), total.is_saturated()),
            (
                Ledger {
                    steps: 4,
                    input_tokens: u64::MAX,
                    output_tokens: 20,
                    cache_read_tokens: u64::MAX,
                    cache_write_tokens: 0,
                    cache_write_1h_tokens: 0,
                },
                u64::MAX,
                true
            ),
            "counters stop at u64::MAX and say so"
        );
        assert_eq!(
            total.line(&worker_s2()).to_string(),
            format!(
                "[worker S2 · steps=4 in={max} out=20 cache_read={max} · counters saturated: \
                 the API reported absurd usage]",
                max = u64::MAX
            )
        );
        assert!(!Ledger::default().is_saturated());
    }

    #[test]
    fn empty_ledger_has_no_cache_counters() {
        let lead = AgentId {
            role: "lead".to_owned(),
            label: AgentLabel::Lead,
        };
        assert_eq!(
            Ledger::default().line(&lead).to_string(),
            "[lead · steps=0 in=0 out=0]"
        );
    }
}
