//! The token ledger: what one subagent, or a whole run, cost.
//!
//! This module owns what a ledger counts ([`Ledger::record`]) and the one-line format
//! users read in the run summary ([`LedgerLine`]). Any module may use it; it must never
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
}

impl Ledger {
    /// Adds one turn's usage.
    pub fn record(&mut self, usage: &Usage) {
        self.steps += 1;
        self.input_tokens += usage.input_tokens;
        self.output_tokens += usage.output_tokens;
        self.cache_read_tokens += usage.cache_read_input_tokens;
        self.cache_write_tokens += usage.cache_creation_input_tokens;
    }

    /// Adds another ledger (run totals).
    pub fn add(&mut self, other: &Ledger) {
        self.steps += other.steps;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    /// Every token the provider counted, for budgets.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
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
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AgentId;

    fn worker_s2() -> AgentId {
        AgentId {
            role: "worker".to_owned(),
            label: "S2".to_owned(),
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
        };
        assert_eq!(
            ledger.line(&worker_s2()).to_string(),
            "[worker S2 · steps=1 in=10 out=2 cache_read=5 cache_write=7]"
        );
    }

    #[test]
    fn empty_ledger_has_no_cache_counters() {
        let lead = AgentId {
            role: "lead".to_owned(),
            label: "lead".to_owned(),
        };
        assert_eq!(
            Ledger::default().line(&lead).to_string(),
            "[lead · steps=0 in=0 out=0]"
        );
    }
}
