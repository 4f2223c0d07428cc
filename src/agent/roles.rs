//! Roles as data: the built-in lead, worker and reviewer, and user agent files.
//!
//! This file owns what makes one role different from another — its prompt, its tool
//! names, its model and turn cap — and how `.grove/agents/<name>.md` files override or
//! add roles. It must never decide how a role runs: every role runs the same loop.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The three kinds of subagent a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    Lead,
    Worker,
    Reviewer,
}

impl RoleKind {
    /// The name used in events, ledgers and agent files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lead => "lead",
            Self::Worker => "worker",
            Self::Reviewer => "reviewer",
        }
    }
}

/// A role: prompt, tools, model and turn cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleDef {
    /// `lead`, `worker`, `reviewer`, or a user agent's name.
    pub name: String,
    /// What the role is for, shown to the lead for user agents.
    pub description: String,
    /// The role's own instructions; the project rules are appended by [`system_prompt`].
    pub prompt: String,
    /// Tool names; `None` means the kind's default set.
    pub tools: Option<Vec<String>>,
    /// A model name overriding the run's model for this role.
    pub model: Option<String>,
    /// A turn cap overriding the run's.
    pub max_turns: Option<u32>,
}

const LEAD_PROMPT: &str = "\
You are the lead engineer of a small team working on one task in a git repository. You can \
read the repository (read_file, list_files, grep) but you cannot change it yourself: you \
split the task into subtasks and hand each one to a worker with the `delegate` tool.

How to work:
- Look at the repository first, just enough to plan. Then delegate.
- Each subtask must be self-contained: the worker sees only your brief, not the user's \
task and not this conversation, unless you ask for `mode: \"fork\"`. Name the files, the \
exact change wanted, and how to check it.
- Subtasks run in parallel in separate worktrees and are merged afterwards, so give \
different subtasks different files. Two subtasks that edit the same lines will conflict.
- Give each subtask `paths`: globs of the files it may change (e.g. [\"src/config/**\", \
\"src/lib.rs\"]); its worker cannot write other files. Two subtasks whose `paths` overlap \
never run at the same time: the later one waits until the earlier is merged (or \
settled), then starts from the merged result and builds on it.
- Subtasks are numbered S1, S2, … in call order. `after: [\"S1\"]` makes a subtask wait \
for S1 the same way: define a new API in S1, then migrate its callers in subtasks with \
`after: [\"S1\"]`, in parallel. `after` may name only subtasks delegated before it.
- A `delegate` without `paths` is not ordered by scope: its worker may change any file, \
yet it waits for no other subtask and none waits for it (only `after` orders it). It \
starts at once from the base and runs beside the others, so it conflicts with any that \
changes the same lines.
- `delegate` returns at once with the subtask's id; the subtasks run at the same time. \
`wait` returns as soon as one of them settles, with every result you have not had yet \
and which still run: call it after delegating, act on each result (a follow-up for a \
rejection need not wait for the slower siblings), and call it again until none runs. \
`wait {\"all\": true}` waits for every running subtask at once.
- Every subtask is reviewed by an independent reviewer. The result you get says \
whether it was merged, rejected (with findings, each blocking or not) or in conflict, \
with the worker's and the reviewer's summaries. `show_subtask {\"id\": \"S2\"}` reads a \
subtask's whole record (add `\"diff\": true` for its diff), and `show_subtask {\"id\": \
\"result\"}` the run's merged result against the base. Fix a rejected, failed or \
conflicting subtask with a follow-up: `start_from: \"S5\"` starts its worker's tree from \
S5's kept work and tells it S5's findings, so it fixes what was found instead of redoing \
everything; `replaces: \"S5\"` marks a fresh attempt at S5's work. Once the follow-up \
merges, S5 counts as done.
- `attempts: 2` or `3` has that many workers try one brief at once, each in its own tree; \
a judge compares the attempts that pass the check and only the best is merged. It costs \
each attempt's tokens, not more time. Use it for a subtask with more than one reasonable \
design, or one that already failed once; not for a mechanical change any worker gets \
right. Every attempt gets the same brief: leave the open design choice to the workers \
(or name the alternatives, neutrally), rather than settle it in the brief; the judge reads \
their code, not their summaries, so ask for a design's reason in a docstring or comment. The attempts take one \
subtask id each (`attempts: 3` as S4 makes S4, S5 and S6; the group is known as S4), and \
its one result names the pick and why each other lost.
- When all work is merged, or nothing more can be done, end with a short summary of what \
changed and what did not.";

const WORKER_PROMPT: &str = "\
You are a software engineer working on one subtask in your own git worktree, which is \
your current directory. Your tools can read and change files only inside it. Do the \
subtask described in the brief, completely and carefully.

- Read before you edit; keep changes minimal and in the style of the code around them.
- Run the project's checks with `bash` when they are cheap (a build, the relevant tests).
- The tool calls of one answer run in the order you wrote them, each that changes a file \
or runs a command after the ones before it have finished (an edit, then the test that \
reads it, works in one answer); their results come back together.
- When you are done, reply with a short summary. Its first line is the commit subject \
of your change: what it does, in the imperative, plain text, at most 72 characters. Then \
what you changed, how you checked it, and anything left undone. An independent reviewer \
will judge your diff.";

const REVIEWER_PROMPT: &str = "\
You are an independent code reviewer. You are given a subtask's brief and the diff that \
was produced for it. You can read the resulting tree (read_file, list_files, grep) but not \
change it. You have not seen how the change was made and must judge only the result.

When you have the `run` tool, you can also try the work: it runs a shell command in a \
throwaway copy of the tree (the worker's changes are there; what the command writes is \
discarded; no network). Use it when reading is not enough: a check the brief names, one \
test, importing a moved module in a fresh process.

Approve when the diff does what the brief asks and is correct. Reject when it is wrong, incomplete, breaks something, does things the brief did \
not ask for, or touches files that run on the host or in CI without a clear need. Be \
concrete: each finding names a path, a line when you can, and the problem. Mark each \
finding `blocking: true` when the diff must not be merged with it and `blocking: false` \
for a remark that need not stop the merge: an approval may carry non-blocking findings, \
and a rejection names at least one blocking finding.

End by calling `submit_verdict` once with your verdict, a one-paragraph summary and your \
findings: that call ends the review, so make it your last. When you are shown several \
attempts at one brief instead of one diff, you judge them side by side as the message \
says and pick one, or reject them all.";

/// The built-in definition of `kind`.
pub fn builtin(kind: RoleKind) -> RoleDef {
    let prompt = match kind {
        RoleKind::Lead => LEAD_PROMPT,
        RoleKind::Worker => WORKER_PROMPT,
        RoleKind::Reviewer => REVIEWER_PROMPT,
    };
    RoleDef {
        name: kind.as_str().to_owned(),
        description: String::new(),
        prompt: prompt.to_owned(),
        tools: None,
        model: None,
        max_turns: None,
    }
}

/// The project rules every role's system prompt carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectRules {
    /// The file they came from, e.g. `AGENTS.md`.
    pub file: String,
    pub text: String,
}

/// Why the project rules cannot be read: the file is there, but is not a regular file of
/// bounded size (or reading it failed). Not retried: the user fixes the file.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the project rules {}: {source}", path.display())]
pub struct RulesError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The files that may hold project rules, in order of preference.
pub const RULES_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

/// A role's whole system prompt: its instructions, then the project rules if any (the
/// built-in prompts speak of rules nowhere else, so a repository without them reads of
/// none).
pub fn system_prompt(role: &RoleDef, rules: Option<&ProjectRules>) -> String {
    let mut prompt = role.prompt.trim_end().to_owned();
    if let Some(rules) = rules {
        let _ = write!(
            prompt,
            "\n\n# Project rules ({})\n\nThese rules apply to all work in this repository: \
             every worker gets them, and a change that breaks them is wrong even when it \
             works.\n\n{}",
            rules.file,
            rules.text.trim_end()
        );
    }
    prompt
}

/// When grove commits a worker's changes: after every turn (grove's own loop), or once
/// it has finished (an agent CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpoints {
    EveryTurn,
    AtTheEnd,
}

/// What a worker is told of its worktree's git: when grove commits, and the commit to
/// diff against to see all of its work (`start`, the commit its subtask started from,
/// named as `what`: `the run's base`, `the run's result after S1`).
pub fn worktree_note(start: &str, what: &str, checkpoints: Checkpoints) -> String {
    let (when, own_copy) = match checkpoints {
        Checkpoints::EveryTurn => (
            "after every turn in which files changed (a checkpoint on your branch), so a \
             plain `git diff` shows only this turn's changes (none at its start)",
            // grove's own workers run in its sandbox, whose git writes a private copy.
            " `git add`, `rm`, `mv` and `stash` work, in a copy of the repository only your \
             worktree sees.",
        ),
        Checkpoints::AtTheEnd => ("once you have finished", ""),
    };
    format!(
        "\n\n# Your worktree's git\n\ngrove commits your changes {when}. Your subtask started \
         from commit {start} ({what}): `git diff {start}` shows all of your work so far, and \
         `git log {start}..` the checkpoints. Do not run `git commit` (it is refused), `git \
         push` or switch branches: grove commits your work, and the reviewer judges that \
         diff.{own_copy}"
    )
}

/// Why an agent file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AgentFileError {
    #[error("cannot read agent file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// The keys an agent file's front matter may set.
const FRONT_MATTER_KEYS: [&str; 4] = ["description", "tools", "model", "max_turns"];

/// Parses an agent file: `---` front matter of `key: value` lines, then the prompt.
///
/// `name` is the file's stem. Front matter keys: `description`, `tools` (comma-separated
/// or `[a, b]`), `model`, `max_turns`. Unknown keys are errors naming the line, so a
/// typo never silently drops a setting.
pub fn parse_agent_file(name: &str, path: &Path, text: &str) -> Result<RoleDef, AgentFileError> {
    let invalid = |line: usize, message: String| AgentFileError::Invalid {
        path: path.to_owned(),
        line,
        message,
    };
    let mut role = RoleDef {
        name: name.to_owned(),
        description: String::new(),
        prompt: String::new(),
        tools: None,
        model: None,
        max_turns: None,
    };
    let mut lines = text.lines().enumerate();
    let body_start = match lines.next() {
        Some((_, first)) if first.trim_end() == "---" => {
            let mut closed = None;
            for (index, line) in lines.by_ref() {
                let number = index + 1;
                if line.trim_end() == "---" {
                    closed = Some(number);
                    break;
                }
                if line.trim().is_empty() || line.trim_start().starts_with('#') {
                    continue;
                }
                let Some((key, value)) = line.split_once(':') else {
                    return Err(invalid(
                        number,
                        format!("expected `key: value`, got `{line}`"),
                    ));
                };
                let key = key.trim();
                let value = unquote(value.trim());
                match key {
                    "description" => role.description = value.to_owned(),
                    "model" => role.model = Some(value.to_owned()).filter(|m| !m.is_empty()),
                    "max_turns" => {
                        let turns = value.parse::<u32>().ok().filter(|turns| *turns > 0);
                        let Some(turns) = turns else {
                            return Err(invalid(
                                number,
                                format!("max_turns must be a positive whole number, got `{value}`"),
                            ));
                        };
                        role.max_turns = Some(turns);
                    }
                    "tools" => role.tools = Some(parse_list(value)),
                    other => {
                        return Err(invalid(
                            number,
                            format!(
                                "unknown key `{other}`; the keys are {}",
                                FRONT_MATTER_KEYS.join(", ")
                            ),
                        ));
                    }
                }
            }
            match closed {
                Some(number) => number,
                None => {
                    return Err(invalid(
                        1,
                        "front matter opened with `---` is never closed".into(),
                    ));
                }
            }
        }
        _ => 0,
    };
    role.prompt = text
        .lines()
        .skip(body_start)
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned();
    if role.prompt.is_empty() {
        return Err(invalid(
            body_start.max(1),
            "the agent file has no prompt after its front matter".into(),
        ));
    }
    Ok(role)
}

/// Reads `.grove/agents/<name>.md` under `root`, if it exists.
pub fn load_agent(root: &Path, name: &str) -> Result<Option<RoleDef>, AgentFileError> {
    if !valid_agent_name(name) {
        return Err(AgentFileError::Invalid {
            path: root.join(".grove/agents"),
            line: 0,
            message: format!(
                "`{name}` is not a valid agent name (letters, digits, `-` and `_` only)"
            ),
        });
    }
    let relative = Path::new(".grove")
        .join("agents")
        .join(format!("{name}.md"));
    let path = root.join(&relative);
    let text = crate::repo_file::read(root, &relative).and_then(|bytes| {
        String::from_utf8(bytes)
            .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))
    });
    match text {
        Ok(text) => parse_agent_file(name, &path, &text).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(AgentFileError::Read { path, source }),
    }
}

/// True for names that are safe as a file stem and a label.
pub fn valid_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn unquote(value: &str) -> &str {
    let quoted = value.len() >= 2
        && ((value.starts_with('"') && value.ends_with('"'))
            || (value.starts_with('\'') && value.ends_with('\'')));
    if quoted {
        &value[1..value.len() - 1]
    } else {
        value
    }
}

fn parse_list(value: &str) -> Vec<String> {
    let inner = value
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(value);
    inner
        .split(',')
        .map(|item| unquote(item.trim()).to_owned())
        .filter(|item| !item.is_empty())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn agent_file_front_matter_and_prompt() {
        let text = "---\ndescription: Writes docs\ntools: [read_file, write_file]\nmodel: \"m-1\"\nmax_turns: 7\n---\n\nYou write documentation.\n";
        let role = parse_agent_file("docs", Path::new("docs.md"), text).unwrap();
        assert_eq!(
            role,
            RoleDef {
                name: "docs".into(),
                description: "Writes docs".into(),
                prompt: "You write documentation.".into(),
                tools: Some(vec!["read_file".into(), "write_file".into()]),
                model: Some("m-1".into()),
                max_turns: Some(7),
            }
        );
    }

    #[test]
    fn agent_file_without_front_matter_is_all_prompt() {
        let role = parse_agent_file("x", Path::new("x.md"), "Just do it.\n").unwrap();
        assert_eq!(role.prompt, "Just do it.");
        assert_eq!(role.tools, None);
    }

    #[test]
    fn agent_file_errors_name_the_line() {
        let cases = [
            ("---\nmodle: x\n---\nhi", 2, "unknown key `modle`"),
            ("---\nmax_turns: lots\n---\nhi", 2, "max_turns must be"),
            ("---\ndescription: x\n", 1, "never closed"),
            ("---\ndescription: x\n---\n", 3, "no prompt"),
            ("---\njust words\n---\nhi", 2, "expected `key: value`"),
        ];
        for (text, line, message) in cases {
            let error = parse_agent_file("a", Path::new("a.md"), text).unwrap_err();
            match error {
                AgentFileError::Invalid {
                    line: got,
                    message: got_message,
                    ..
                } => {
                    assert_eq!(got, line, "wrong line for {text:?}");
                    assert!(got_message.contains(message), "{got_message}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn system_prompt_carries_the_project_rules() {
        let rules = ProjectRules {
            file: "AGENTS.md".into(),
            text: "Use tabs.\n".into(),
        };
        let prompt = system_prompt(&builtin(RoleKind::Worker), Some(&rules));
        assert!(prompt.starts_with(WORKER_PROMPT));
        assert!(prompt.ends_with(
            "# Project rules (AGENTS.md)\n\nThese rules apply to all work in this repository: \
             every worker gets them, and a change that breaks them is wrong even when it \
             works.\n\nUse tabs."
        ));
    }

    #[test]
    fn a_repository_without_rules_reads_of_none() {
        for kind in [RoleKind::Lead, RoleKind::Worker, RoleKind::Reviewer] {
            let prompt = system_prompt(&builtin(kind), None);
            assert!(
                !prompt.to_lowercase().contains("rules"),
                "{kind:?}: no rules file, no word of rules: {prompt}"
            );
        }
    }

    #[test]
    fn agent_names_are_confined() {
        assert!(valid_agent_name("docs-writer_2"));
        for bad in ["", "../x", "a/b", "a.md", "a b"] {
            assert!(!valid_agent_name(bad), "{bad:?} must be refused");
        }
    }
}
