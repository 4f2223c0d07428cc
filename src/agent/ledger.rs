//! The one-line rendering of what an agent cost.
//!
//! This file owns the ledger line's format, which users read in the run summary; it
//! must never decide what a ledger counts (that is [`Ledger::record`]).

use std::fmt;

use crate::agent::Ledger;
use crate::event::AgentId;

/// One agent's ledger as a single line, e.g.
/// `[worker S2 · steps=3 in=3400 out=290 cache_read=2900]`.
///
/// Cache counters are shown only when non-zero, so runs without prompt caching stay short.
#[derive(Debug, Clone, Copy)]
pub struct LedgerLine<'a> {
    pub agent: &'a AgentId,
    pub ledger: &'a Ledger,
}

impl Ledger {
    /// This ledger rendered as `agent`'s one-line summary.
    pub fn line<'a>(&'a self, agent: &'a AgentId) -> LedgerLine<'a> {
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
