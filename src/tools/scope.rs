//! Write scopes: the globs a subtask may change (`delegate`'s `paths`), as the file tools
//! enforce them, and whether two scopes may touch the same file.
//!
//! This file owns the spelling of a scope glob (normalised once, here), matching a
//! root-relative path against it, and the overlap test the scheduler orders subtasks by.
//! It must never call two scopes disjoint when some path could match both (the test is
//! conservative: it may call disjoint scopes overlapping, never the reverse), and never
//! let a file tool write a path, or follow a link to one, that its scope does not match.

use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::ToolError;
use super::confine::ConfinedRoot;

/// Most globs one scope may list.
const MAX_GLOBS: usize = 64;

/// Most alternatives a glob's `{a,b}` groups may expand to before the overlap test gives
/// up and treats the glob as matching everything (conservative).
const MAX_ALTERNATIVES: usize = 256;

/// The characters that make a glob segment more than a literal name.
const META: &[char] = &['*', '?', '[', ']', '{', '}', '\\', ','];

/// The files one subtask may change: globs relative to the worktree root, where `*`
/// stays within one path segment, `**` spans any number, and a glob naming a directory
/// covers everything beneath it.
#[derive(Debug, Clone)]
pub struct WriteScope {
    /// The globs as normalised, for messages, the journal and the overlap test.
    globs: Vec<String>,
    set: GlobSet,
}

/// Why a `paths` entry is refused. Not retried: the lead rewrites the glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("`paths` lists {count} globs; at most {MAX_GLOBS} are allowed (use `dir/**`)")]
    TooMany { count: usize },
    #[error("`paths` entry `{glob}` {problem}")]
    Glob { glob: String, problem: GlobProblem },
}

/// What is wrong with one glob.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobProblem {
    #[error("is empty; write a path relative to the repository root, e.g. `src/config/**`")]
    Empty,
    #[error("is absolute; write it relative to the repository root, e.g. `src/lib.rs`")]
    Absolute,
    #[error("climbs out with `..`; write it relative to the repository root")]
    ParentDir,
    #[error("contains a NUL byte")]
    Nul,
    #[error("is not a valid glob ({reason}); e.g. `src/config/**` or `src/*.rs`")]
    Invalid { reason: String },
}

impl WriteScope {
    /// The scope of `globs`, each normalised (`./` and `.` segments dropped, a trailing
    /// `/` read as `/**`); `None` for an empty list: no scope, any file may change.
    pub fn new(globs: &[String]) -> Result<Option<Self>, ScopeError> {
        if globs.is_empty() {
            return Ok(None);
        }
        if globs.len() > MAX_GLOBS {
            return Err(ScopeError::TooMany { count: globs.len() });
        }
        let mut normalised = Vec::with_capacity(globs.len());
        let mut set = GlobSetBuilder::new();
        for glob in globs {
            let clean = normalise(glob).map_err(|problem| ScopeError::Glob {
                glob: glob.clone(),
                problem,
            })?;
            for pattern in with_contents(&clean) {
                let compiled = GlobBuilder::new(&pattern)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|error| ScopeError::Glob {
                        glob: glob.clone(),
                        problem: GlobProblem::Invalid {
                            reason: error.kind().to_string(),
                        },
                    })?;
                set.add(compiled);
            }
            if !normalised.contains(&clean) {
                normalised.push(clean);
            }
        }
        let set = set.build().map_err(|error| ScopeError::Glob {
            glob: globs.join(", "),
            problem: GlobProblem::Invalid {
                reason: error.to_string(),
            },
        })?;
        Ok(Some(Self {
            globs: normalised,
            set,
        }))
    }

    /// The globs, normalised.
    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    /// True when the root-relative `path` (`/`-separated, no `.` or `..`) may change.
    pub fn allows(&self, path: &str) -> bool {
        self.set.is_match(path)
    }

    /// True when some path may match a glob of each scope.
    pub fn overlaps(&self, other: &WriteScope) -> bool {
        self.globs
            .iter()
            .any(|a| other.globs.iter().any(|b| globs_overlap(a, b)))
    }

    /// Refuses, with a message for the model, a write to the root-relative `relative`
    /// (the model wrote `shown`) when it, or the file its symlinks lead to, is outside
    /// the scope.
    pub(crate) fn check(
        &self,
        confined: &ConfinedRoot,
        relative: &Path,
        shown: &str,
    ) -> Result<(), ToolError> {
        let written = slash_path(relative);
        // A link that leads out of the root is refused by the open; one that stays inside
        // must lead into the scope too, or a link in scope would write outside it.
        let resolved = confined
            .resolve_links(relative)
            .map(|path| slash_path(&path));
        let outside = match &resolved {
            _ if !self.allows(&written) => Some(written.clone()),
            Some(target) if !self.allows(target) => Some(target.clone()),
            _ => None,
        };
        let Some(outside) = outside else {
            return Ok(());
        };
        let through = if outside == written {
            String::new()
        } else {
            format!(" (`{written}` leads to `{outside}`)")
        };
        Err(ToolError::RespondToModel(format!(
            "cannot write `{shown}`: this subtask may change only files matching its `paths` \
             ({}), and `{outside}` is outside them{through}. Leave it unchanged; if the task \
             needs it changed, say so in your final message.",
            self.globs.join(", ")
        )))
    }
}

/// `path` with `/` separators, as globs and git spell paths.
fn slash_path(path: &Path) -> String {
    path.components()
        .map(|component| component.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// `glob` relative to the root, without `.` segments, empty segments or a trailing `/`
/// (which becomes `/**`).
fn normalise(glob: &str) -> Result<String, GlobProblem> {
    let trimmed = glob.trim();
    if trimmed.contains('\0') {
        return Err(GlobProblem::Nul);
    }
    if trimmed.starts_with('/') {
        return Err(GlobProblem::Absolute);
    }
    let mut segments = Vec::new();
    for segment in trimmed.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err(GlobProblem::ParentDir),
            other => segments.push(other),
        }
    }
    if segments.is_empty() {
        return Err(GlobProblem::Empty);
    }
    if trimmed.ends_with('/') && segments.last() != Some(&"**") {
        segments.push("**");
    }
    Ok(segments.join("/"))
}

/// The patterns `glob` matches with: itself, and everything beneath what it names.
fn with_contents(glob: &str) -> Vec<String> {
    if glob == "**" || glob.ends_with("/**") {
        vec![glob.to_owned()]
    } else {
        vec![glob.to_owned(), format!("{glob}/**")]
    }
}

/// True when some path may match both normalised globs (each also covering what lies
/// beneath it). Case is ignored, so that two spellings of one file on a case-insensitive
/// file system count as overlapping.
pub fn globs_overlap(a: &str, b: &str) -> bool {
    let (a, b) = (a.to_lowercase(), b.to_lowercase());
    let (a_all, b_all) = (expand_braces(&a), expand_braces(&b));
    a_all.iter().flat_map(|a| with_contents(a)).any(|a| {
        b_all.iter().flat_map(|b| with_contents(b)).any(|b| {
            let a_segments: Vec<&str> = a.split('/').collect();
            let b_segments: Vec<&str> = b.split('/').collect();
            segments_overlap(&a_segments, &b_segments)
        })
    })
}

/// Whether a path of segments may match both segment lists, `**` matching any number of
/// segments (none included). Each pair of suffixes is decided once (`memo`), so globs
/// full of `**` cost `len(a) × len(b)` steps, never an exponential search.
fn segments_overlap(a: &[&str], b: &[&str]) -> bool {
    let mut memo = vec![None; (a.len() + 1) * (b.len() + 1)];
    suffixes_overlap(a, b, 0, 0, &mut memo)
}

/// Whether `a[i..]` and `b[j..]` may match one path; see [`segments_overlap`].
fn suffixes_overlap(a: &[&str], b: &[&str], i: usize, j: usize, memo: &mut [Option<bool>]) -> bool {
    let slot = i * (b.len() + 1) + j;
    if let Some(known) = memo[slot] {
        return known;
    }
    let overlap = match (a.get(i), b.get(j)) {
        (None, None) => true,
        (Some(&"**"), _) => {
            suffixes_overlap(a, b, i + 1, j, memo)
                || (j < b.len() && suffixes_overlap(a, b, i, j + 1, memo))
        }
        (_, Some(&"**")) => {
            suffixes_overlap(a, b, i, j + 1, memo)
                || (i < a.len() && suffixes_overlap(a, b, i + 1, j, memo))
        }
        (Some(x), Some(y)) => segment_overlap(x, y) && suffixes_overlap(a, b, i + 1, j + 1, memo),
        (None, Some(_)) | (Some(_), None) => false,
    };
    memo[slot] = Some(overlap);
    overlap
}

/// Whether one path segment may match both segment globs. A literal is matched against
/// the other glob; two wildcard segments overlap unless their literal starts or ends
/// contradict each other (`a*` and `b*`, `*.rs` and `*.md`).
fn segment_overlap(x: &str, y: &str) -> bool {
    let literal = |segment: &str| !segment.contains(META);
    match (literal(x), literal(y)) {
        (true, true) => x == y,
        (true, false) => segment_matches(y, x),
        (false, true) => segment_matches(x, y),
        (false, false) => {
            let (x_start, x_end) = literal_ends(x);
            let (y_start, y_end) = literal_ends(y);
            (x_start.starts_with(y_start) || y_start.starts_with(x_start))
                && (x_end.ends_with(y_end) || y_end.ends_with(x_end))
        }
    }
}

/// Whether the segment glob `glob` matches the literal `name`; a glob that does not
/// compile counts as matching (conservative).
fn segment_matches(glob: &str, name: &str) -> bool {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_or(true, |glob| glob.compile_matcher().is_match(name))
}

/// The literal text before the first and after the last special character of `segment`.
fn literal_ends(segment: &str) -> (&str, &str) {
    let first = segment.find(META).unwrap_or(segment.len());
    let last = segment.rfind(META).map_or(segment.len(), |index| index + 1);
    (&segment[..first], &segment[last.max(first)..])
}

/// Every alternative of `glob`'s `{a,b}` groups; `**` (everything) when there are too
/// many or a group is unbalanced.
fn expand_braces(glob: &str) -> Vec<String> {
    let mut done = Vec::new();
    let mut pending = vec![glob.to_owned()];
    while let Some(glob) = pending.pop() {
        let Some(open) = glob.find('{') else {
            done.push(glob);
            continue;
        };
        let Some((close, alternatives)) = group(&glob, open) else {
            return vec!["**".to_owned()];
        };
        for alternative in alternatives {
            pending.push(format!(
                "{}{alternative}{}",
                &glob[..open],
                &glob[close + 1..]
            ));
        }
        if done.len() + pending.len() > MAX_ALTERNATIVES {
            return vec!["**".to_owned()];
        }
    }
    done
}

/// The `}` closing the group opened at `open`, and its top-level alternatives.
fn group(glob: &str, open: usize) -> Option<(usize, Vec<&str>)> {
    let mut depth = 0;
    let mut start = open + 1;
    let mut alternatives = Vec::new();
    for (index, ch) in glob.char_indices().skip_while(|(index, _)| *index < open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    alternatives.push(&glob[start..index]);
                    return Some((index, alternatives));
                }
            }
            ',' if depth == 1 => {
                alternatives.push(&glob[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn scope(globs: &[&str]) -> WriteScope {
        let globs: Vec<String> = globs.iter().map(|glob| (*glob).to_owned()).collect();
        WriteScope::new(&globs).unwrap().unwrap()
    }

    #[test]
    fn globs_are_normalised_and_a_directory_covers_its_contents() {
        let scope = scope(&["./src/config/", "src//lib.rs", "docs", "src/./lib.rs"]);
        assert_eq!(
            scope.globs(),
            &["src/config/**", "src/lib.rs", "docs"],
            "`./`, `.` and empty segments are dropped, a trailing `/` means everything beneath"
        );
        let allowed: Vec<bool> = [
            "src/config/a.rs",
            "src/config/deep/b.rs",
            "src/lib.rs",
            "docs/guide/intro.md",
            "docs",
            "src/main.rs",
            "src/configs/a.rs",
            "SRC/lib.rs",
        ]
        .iter()
        .map(|path| scope.allows(path))
        .collect();
        assert_eq!(
            allowed,
            vec![true, true, true, true, true, false, false, false],
            "only paths the globs match may change, case included"
        );
    }

    #[test]
    fn a_single_star_stays_within_one_segment() {
        let scope = scope(&["src/*.rs"]);
        assert_eq!(
            (scope.allows("src/lib.rs"), scope.allows("src/run/mod.rs")),
            (true, false),
            "`*` never crosses a `/`"
        );
    }

    #[test]
    fn unusable_globs_are_refused_with_what_to_write() {
        let refused = |glob: &str| WriteScope::new(&[glob.to_owned()]).unwrap_err().to_string();
        assert_eq!(
            [
                refused("/etc/passwd"),
                refused("../x"),
                refused(" "),
                refused("src/[a")
            ],
            [
                "`paths` entry `/etc/passwd` is absolute; write it relative to the repository \
                 root, e.g. `src/lib.rs`",
                "`paths` entry `../x` climbs out with `..`; write it relative to the repository root",
                "`paths` entry ` ` is empty; write a path relative to the repository root, e.g. \
                 `src/config/**`",
                "`paths` entry `src/[a` is not a valid glob (unclosed character class; missing \
                 ']'); e.g. `src/config/**` or `src/*.rs`",
            ]
        );
        assert!(
            WriteScope::new(&[]).unwrap().is_none(),
            "no globs is no scope"
        );
    }

    #[test]
    fn overlap_is_decided_per_segment_and_conservatively() {
        let cases = [
            ("src/config/**", "src/config/load.rs", true),
            ("src/config/**", "src/lib.rs", false),
            ("src/**", "**/lib.rs", true),
            ("**", "README.md", true),
            ("src/*.rs", "src/lib.rs", true),
            ("src/*.rs", "src/run/mod.rs", false),
            ("src/*.rs", "src/*.md", false),
            ("src/a*", "src/*b", true),
            ("src/a*", "src/b*", false),
            ("src/config", "src/config/load.rs", true),
            ("{src,docs}/x.md", "docs/**", true),
            ("{src,tests}/a.rs", "docs/**", false),
            ("src/Lib.rs", "src/lib.rs", true),
            ("src/?.rs", "src/ab.rs", false),
            ("a/**/z", "a/b/**", true),
            ("a/**/z", "b/**", false),
        ];
        let found: Vec<(&str, &str, bool)> = cases
            .iter()
            .map(|(a, b, _)| (*a, *b, globs_overlap(a, b)))
            .collect();
        assert_eq!(found, cases, "overlap as a path could match both globs");
        let symmetric: Vec<bool> = cases.iter().map(|(a, b, _)| globs_overlap(b, a)).collect();
        let expected: Vec<bool> = cases.iter().map(|(_, _, overlap)| *overlap).collect();
        assert_eq!(symmetric, expected, "overlap does not depend on the order");
        assert!(
            scope(&["src/lib.rs", "docs/**"]).overlaps(&scope(&["docs/a.md"])),
            "scopes overlap when any pair of their globs does"
        );
    }

    /// Runs `tool` with `input` in `root`, as the dispatcher would.
    async fn run(tool: &dyn crate::tools::Tool, root: &Path, input: serde_json::Value) -> String {
        let ctx = crate::tools::ToolContext::plain(
            root.to_path_buf(),
            tokio_util::sync::CancellationToken::new(),
        );
        match tool.run(input, &ctx).await {
            Ok(output) => output.content,
            Err(error) => format!("refused: {error}"),
        }
    }

    #[tokio::test]
    async fn links_out_of_the_scope_are_refused_both_ways_and_nothing_is_created() {
        use crate::tools::{EditFile, WriteFile};
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(root.join("src/a.txt"), "alpha\n").unwrap();
        // A dangling link in the scope to a file outside it, and a link outside into it.
        std::os::unix::fs::symlink("../docs/new.md", root.join("src/new.md")).unwrap();
        std::os::unix::fs::symlink("../src/a.txt", root.join("docs/a.txt")).unwrap();
        let scope = Arc::new(scope(&["src/**"]));
        let write = WriteFile::scoped(Arc::clone(&scope));
        let edit = EditFile::scoped(scope);

        let outcomes = vec![
            run(&write, &root, json!({"path": "src/new.md", "content": "x"})).await,
            run(&write, &root, json!({"path": "docs/a.txt", "content": "x"})).await,
            run(
                &edit,
                &root,
                json!({"path": "docs/a.txt", "old_string": "alpha", "new_string": "x"}),
            )
            .await,
            run(
                &write,
                &root,
                json!({"path": "src/deep/b.txt", "content": "b"}),
            )
            .await,
        ];

        let refusal = |shown: &str, outside: &str, through: &str| {
            format!(
                "refused: cannot write `{shown}`: this subtask may change only files matching \
                 its `paths` (src/**), and `{outside}` is outside them{through}. Leave it \
                 unchanged; if the task needs it changed, say so in your final message."
            )
        };
        assert_eq!(
            outcomes,
            vec![
                refusal(
                    "src/new.md",
                    "docs/new.md",
                    " (`src/new.md` leads to `docs/new.md`)"
                ),
                refusal("docs/a.txt", "docs/a.txt", ""),
                refusal("docs/a.txt", "docs/a.txt", ""),
                "created `src/deep/b.txt` (1 bytes)".to_owned(),
            ],
            "a write must stay inside the scope as written and where its links lead"
        );
        assert!(
            !root.join("docs/new.md").exists(),
            "nothing is created outside the scope"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
            "alpha\n"
        );
    }

    #[test]
    fn globs_full_of_double_stars_are_decided_quickly() {
        // Found only once every `**` is tried against every segment of the other side.
        let a = format!("{}/z/a", ["**", "x"].repeat(40).join("/"));
        let b = format!("{}/y/b", ["x", "**"].repeat(40).join("/"));
        let started = std::time::Instant::now();
        assert!(globs_overlap(&a, &b), "`…/x/z/a/…` can also be `…/x/…/y/b`");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "decided in {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn too_many_alternatives_count_as_everything() {
        let many = "{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}{a,b,c,d}";
        assert_eq!(expand_braces(many), vec!["**".to_owned()]);
        assert!(globs_overlap(many, "zzz/yyy"), "given up means overlapping");
    }
}
