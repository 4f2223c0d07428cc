//! A ratchet's findings as the journal keeps them: what one `[[check.ratchet]]` found
//! on a tree against the base — new, fixed, unchanged — and a finding's identity.
//!
//! This file owns those records and the one comparison that makes them (a multiset of
//! identities, so that a finding is new only when the tree has it more often than the
//! base). It never runs nor parses a tool (`run/check/ratchet` does).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The most findings of each kind a record lists (the counts are always whole).
pub const LISTED_FINDINGS: usize = 200;

/// One finding of a ratchet: a type error, a lint, a failing test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatchetFinding {
    /// The file it is in, relative to the tree (a test's class or module for JUnit).
    pub file: String,
    /// The tool's code for it (`return-value`, `F401`, `TS2322`), or empty.
    pub code: String,
    /// What the tool says (a failing test's name for JUnit).
    pub message: String,
    /// Where in the file (`12` or `12:5`), shown but never compared: unrelated lines
    /// moving must not make a finding new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

impl RatchetFinding {
    /// What makes two findings the same: everything but where.
    pub fn identity(&self) -> (&str, &str, &str) {
        (&self.file, &self.code, &self.message)
    }

    /// One line for a person or a model: `src/a.py:12: [return-value] Incompatible …`.
    pub fn line(&self) -> String {
        let at = self
            .at
            .as_deref()
            .map(|at| format!(":{at}"))
            .unwrap_or_default();
        let code = if self.code.is_empty() {
            String::new()
        } else {
            format!("[{}] ", self.code)
        };
        format!("{}{at}: {code}{}", self.file, self.message)
    }
}

/// What one ratchet found on a tree against the base's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatchetTally {
    /// The ratchet's command.
    pub command: String,
    /// How many findings the tree has that the base has not (counted per identity).
    pub new: usize,
    /// How many of the base's findings the tree no longer has.
    pub fixed: usize,
    /// How many findings both have.
    pub unchanged: usize,
    /// The new findings (at most [`LISTED_FINDINGS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_findings: Vec<RatchetFinding>,
    /// The fixed findings, as the base had them (at most [`LISTED_FINDINGS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixed_findings: Vec<RatchetFinding>,
    /// Set when the ratchet gave nothing to compare (it could not run, its JUnit file
    /// is missing or not XML): the tree is then red, with this as the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RatchetTally {
    /// `tree`'s findings against `base`'s: an identity the tree has more often than the
    /// base is new that many times (its last occurrences listed), one it has less often
    /// is fixed that many times.
    pub fn compare(command: &str, base: &[RatchetFinding], tree: &[RatchetFinding]) -> Self {
        let group = |findings: &'_ [RatchetFinding]| {
            let mut groups: BTreeMap<(String, String, String), Vec<RatchetFinding>> =
                BTreeMap::new();
            for finding in findings {
                let (file, code, message) = finding.identity();
                groups
                    .entry((file.to_owned(), code.to_owned(), message.to_owned()))
                    .or_default()
                    .push(finding.clone());
            }
            groups
        };
        let (base, tree) = (group(base), group(tree));
        let mut tally = Self {
            command: command.to_owned(),
            new: 0,
            fixed: 0,
            unchanged: 0,
            new_findings: Vec::new(),
            fixed_findings: Vec::new(),
            error: None,
        };
        for (identity, had) in &tree {
            let before = base.get(identity).map_or(0, Vec::len);
            tally.unchanged += had.len().min(before);
            tally.new += had.len().saturating_sub(before);
            tally.new_findings.extend(had.iter().skip(before).cloned());
        }
        for (identity, had) in &base {
            let now = tree.get(identity).map_or(0, Vec::len);
            tally.fixed += had.len().saturating_sub(now);
            tally.fixed_findings.extend(had.iter().skip(now).cloned());
        }
        tally.new_findings.truncate(LISTED_FINDINGS);
        tally.fixed_findings.truncate(LISTED_FINDINGS);
        tally
    }

    /// A ratchet that gave nothing to compare, and why.
    pub fn failed(command: &str, error: String) -> Self {
        Self {
            error: Some(error),
            ..Self::compare(command, &[], &[])
        }
    }

    /// Whether this ratchet makes the tree red: a new finding, or nothing to compare.
    pub fn is_red(&self) -> bool {
        self.new > 0 || self.error.is_some()
    }

    /// `mypy src: 1 new, 2 fixed, 15 unchanged`.
    pub fn counts(&self) -> String {
        match &self.error {
            Some(error) => format!("{}: not compared: {error}", self.command),
            None => format!(
                "{}: {} new, {} fixed, {} unchanged",
                self.command, self.new, self.fixed, self.unchanged
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(file: &str, at: &str, message: &str) -> RatchetFinding {
        RatchetFinding {
            file: file.into(),
            code: "return-value".into(),
            message: message.into(),
            at: Some(at.into()),
        }
    }

    #[test]
    fn findings_are_counted_per_identity_and_where_they_are_is_never_compared() {
        let base = [
            finding("a.py", "3", "bad"),
            finding("a.py", "9", "bad"),
            finding("b.py", "1", "gone"),
        ];
        // Every line moved; one more "bad" and one "gone" fixed.
        let tree = [
            finding("a.py", "13", "bad"),
            finding("a.py", "19", "bad"),
            finding("a.py", "29", "bad"),
            finding("c.py", "2", "fresh"),
        ];

        let tally = RatchetTally::compare("mypy .", &base, &tree);

        assert_eq!(
            tally,
            RatchetTally {
                command: "mypy .".into(),
                new: 2,
                fixed: 1,
                unchanged: 2,
                new_findings: vec![finding("a.py", "29", "bad"), finding("c.py", "2", "fresh")],
                fixed_findings: vec![finding("b.py", "1", "gone")],
                error: None,
            }
        );
        assert_eq!(
            tally.new_findings[0].line(),
            "a.py:29: [return-value] bad",
            "a finding reads as the tool wrote it"
        );
        assert!(tally.is_red());
        assert!(!RatchetTally::compare("mypy .", &tree, &base[..2]).is_red());
    }
}
