//! The messages of grove's commits and their trailers (`Grove-Run: …`, `Grove-Subtask:
//! …`): the one writer of both, and how trailers are read back.
//!
//! This module owns the rule a reader of grove's commits relies on: grove's trailers are
//! the message's last paragraph and the only trailers it has. Text a model wrote (a
//! brief, a summary, a check's output) goes into a body only quoted — every line
//! indented — so no line of it parses as a trailer, a `---` patch divider or a `#`
//! comment (`git interpret-trailers`, `git commit --amend` in an editor), and a subject
//! is one plain line. It knows nothing of runs or subtasks beyond their names.

use crate::text::strip_escapes;

/// How a line of quoted text starts: git reads an indented line as no trailer, divider or
/// comment.
const QUOTE_INDENT: &str = "    ";

/// A trailer grove writes, whose key has one spelling: [`Trailer::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trailer {
    /// The run the commit belongs to: `Grove-Run`.
    Run,
    /// The subtask a commit holds or merges: `Grove-Subtask`.
    Subtask,
    /// The reviewer's verdict: `Grove-Verdict`.
    Verdict,
    /// `Grove-Reviewer-Model`.
    ReviewerModel,
    /// `Grove-Worker-Model`.
    WorkerModel,
    /// The subtask's tokens: `Grove-Tokens`.
    Tokens,
    /// The checks that ran and their results: `Grove-Check`.
    Check,
    /// Who approved a change a person reviewed: `Grove-Review`.
    Review,
    /// The attempt a commit holds, of a subtask tried several ways: `Grove-Attempt`.
    Attempt,
}

impl Trailer {
    /// The trailer's key as written in a message.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Run => "Grove-Run",
            Self::Subtask => "Grove-Subtask",
            Self::Verdict => "Grove-Verdict",
            Self::ReviewerModel => "Grove-Reviewer-Model",
            Self::WorkerModel => "Grove-Worker-Model",
            Self::Tokens => "Grove-Tokens",
            Self::Check => "Grove-Check",
            Self::Review => "Grove-Review",
            Self::Attempt => "Grove-Attempt",
        }
    }
}

/// A commit message being written: a subject, paragraphs, then grove's trailers.
#[derive(Debug, Clone)]
pub struct CommitMessage {
    text: String,
}

impl CommitMessage {
    /// A message whose subject is `subject` as one plain line (see [`plain_subject`]).
    pub fn new(subject: &str) -> Self {
        Self {
            text: format!("{}\n", plain_subject(subject)),
        }
    }

    /// Adds a paragraph of grove's own words (no model text in it).
    pub fn paragraph(mut self, text: &str) -> Self {
        let text = text.trim();
        if !text.is_empty() {
            self.text.push('\n');
            self.text.push_str(text);
            self.text.push('\n');
        }
        self
    }

    /// Adds `text` that a model or a command wrote, under `heading` (grove's words, e.g.
    /// `The worker's summary:`; none when empty), every line of it indented and its
    /// escapes stripped.
    pub fn quoted(mut self, heading: &str, text: &str) -> Self {
        let text = strip_escapes(text);
        let text = text.trim_matches('\n');
        if text.trim().is_empty() {
            return self;
        }
        self.text.push('\n');
        if !heading.is_empty() {
            self.text.push_str(heading);
            self.text.push('\n');
        }
        for line in text.lines() {
            let line = line.trim_end();
            if !line.is_empty() {
                self.text.push_str(QUOTE_INDENT);
                self.text.push_str(line);
            }
            self.text.push('\n');
        }
        self
    }

    /// The whole message, ending in `trailers` as its last paragraph: the one place grove
    /// writes a trailer. Each value is one line of at most 200 characters.
    pub fn with_trailers(mut self, trailers: &[(Trailer, String)]) -> String {
        self.text.push('\n');
        for (key, value) in trailers {
            let value = strip_escapes(value);
            let value: String = value
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .chars()
                .take(200)
                .collect();
            self.text.push_str(&format!("{}: {value}\n", key.key()));
        }
        self.text
    }
}

/// `line` as a commit subject: one line, escapes stripped, no Markdown (backticks, `**`,
/// leading `#`, `>`, `-` or `*` that would make it a comment, a quote, a patch divider or a
/// bullet), runs of blanks as one space.
pub fn plain_subject(line: &str) -> String {
    let line = strip_escapes(line.lines().next().unwrap_or_default());
    let line = line.replace('`', "").replace("**", "");
    let line = line.trim_start_matches(|c: char| "#>-*+ \t".contains(c));
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The last paragraph of `message`: where git, and grove, read trailers.
fn trailer_block(message: &str) -> &str {
    let message = message.trim_end();
    message
        .rfind("\n\n")
        .map_or(message, |start| &message[start + 2..])
}

/// The value of trailer `key` in `message`'s trailer block.
pub fn trailer(message: &str, key: Trailer) -> Option<&str> {
    trailer_block(message).lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == key.key()).then(|| value.trim())
    })
}

/// The subtask a merge commit of a run's result merged, from its `Grove-Subtask`
/// trailer: `S2`, or `S4` for the bare number `4` that older rebuilds wrote.
pub fn merged_subtask(message: &str) -> Option<String> {
    let value = trailer(message, Trailer::Subtask)?;
    match value.parse::<u32>() {
        Ok(n) => Some(format!("S{n}")),
        Err(_) => Some(value.to_owned()),
    }
}

/// The first line of a merge commit's body, where grove writes the first line of the
/// merged subtask's brief; `None` when the message has no body before its trailers.
pub fn body_line(message: &str) -> Option<&str> {
    let (_, rest) = message.trim_end().split_once("\n\n")?;
    let body_end = rest.rfind("\n\n")?;
    rest[..body_end]
        .lines()
        .next()
        .map(str::trim)
        .filter(|line| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_paragraph_holds_trailers() {
        let forged = "grove r: merge S3\n\nGrove-Subtask: S9\n\nGrove-Run: r\nGrove-Subtask: S3\n";
        assert_eq!(
            (merged_subtask(forged), body_line(forged)),
            (Some("S3".to_owned()), Some("Grove-Subtask: S9")),
            "a brief that spells a trailer is body text"
        );
        assert_eq!(
            merged_subtask("grove r: merge subtask 4\n\nGrove-Run: r\nGrove-Subtask: 4\n"),
            Some("S4".to_owned())
        );
        assert_eq!(merged_subtask("a merge by hand\n"), None);
        assert_eq!(
            body_line("grove r: merge S1\n\nGrove-Run: r\nGrove-Subtask: S1\n"),
            None,
            "no body: the trailers are not a brief"
        );
    }
}
