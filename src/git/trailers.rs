//! grove's commit trailers (`Grove-Run: …`, `Grove-Subtask: …`): how they are read back
//! from a commit message.
//!
//! This module owns the one rule a reader of grove's commits relies on: grove's trailers
//! are the message's last paragraph, and only that paragraph is read. A line of model
//! text in the body (a brief, a summary) that looks like a trailer is never taken for
//! one. It knows nothing of runs or subtasks beyond their names.

/// The last paragraph of `message`: where git, and grove, read trailers.
fn trailer_block(message: &str) -> &str {
    let message = message.trim_end();
    message
        .rfind("\n\n")
        .map_or(message, |start| &message[start + 2..])
}

/// The value of trailer `key` (`Grove-Subtask`) in `message`'s trailer block.
pub fn trailer<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    trailer_block(message).lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == key).then(|| value.trim())
    })
}

/// The subtask a merge commit of a run's result merged, from its `Grove-Subtask`
/// trailer: `S2`, or `S4` for the bare number `4` that older rebuilds wrote.
pub fn merged_subtask(message: &str) -> Option<String> {
    let value = trailer(message, "Grove-Subtask")?;
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
