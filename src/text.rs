//! Text shown to people and models: truncation, tails, shell quoting, control characters.
//!
//! This module owns every rule for cutting and cleaning text that came from outside
//! (a model, a repository, an external CLI). Any module may use it; it must never do I/O
//! and never depend on another module of the crate.

/// At most `max` characters of `text`, with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
