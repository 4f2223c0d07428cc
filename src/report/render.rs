//! Rendering a [`ReportData`] as one self-contained HTML page.
//!
//! This file owns the page: inline CSS, the inline SVG timeline, a few lines of inline
//! script that mark the page as rendered (so a headless browser can tell). It must never
//! emit an external URL (a Content-Security-Policy forbids loading anything anyway),
//! and every string that came from a model, the repository or the user goes through
//! [`escape`].

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use crate::ledger::Ledger;
use crate::store::journal::{
    CheckRun, CheckStatus, ON_BASE, ON_RESULT, ON_RESULT_WITHOUT, SubtaskKind,
};
use crate::store::state::{RunStatus, VerdictState};

use super::diff::{FileDiff, Row, Segment, word_segments};
use super::html::{duration, escape};
use super::timeline;
use super::{AgentCost, Cost, DiffView, ReportData, SubtaskSection};
use crate::text::truncate;

/// Lines longer than this are shown cut, with the count of what was left out.
const MAX_LINE_CHARS: usize = 1_000;

/// The whole report page. Pure: the same data gives the same bytes.
pub fn render_html(data: &ReportData) -> String {
    let mut page = String::with_capacity(64 * 1024);
    let title = format!("grove report {}", data.run_id);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
         <title>{}</title>\n<script>{ERROR_SCRIPT}</script>\n<style>{STYLE}</style>\n</head>\n\
         <body data-grove-report=\"pending\">\n",
        escape(&title)
    );
    header(&mut page, data);
    page.push_str(
        "<nav><a href=\"#timeline\">Timeline</a> · <a href=\"#subtasks\">Subtasks</a> · \
         <a href=\"#checks\">Checks</a> · <a href=\"#cost\">Tokens and cost</a></nav>\n",
    );
    timeline_section(&mut page, data);
    subtasks_section(&mut page, data);
    checks_section(&mut page, data);
    cost_section(&mut page, data);
    if !data.notes.is_empty() {
        page.push_str("<section id=\"notes\"><h2>What the report could not read</h2><ul>");
        for note in &data.notes {
            let _ = write!(page, "<li>{}</li>", escape(note));
        }
        page.push_str("</ul></section>\n");
    }
    let _ = write!(
        page,
        "<footer>Written by <code>grove report {}</code>. Self-contained: this page loads \
         nothing from anywhere.</footer>\n<script>{CHECK_SCRIPT}</script>\n</body>\n</html>\n",
        escape(&data.run_id)
    );
    page
}

/// Registered first, so an error in any later script is recorded on the page.
const ERROR_SCRIPT: &str = "window.onerror=function(message){\
document.documentElement.setAttribute('data-grove-error',String(message));};";

/// Checks that every timeline lane has its subtask section, then marks the page as
/// rendered with the number of subtasks it shows.
const CHECK_SCRIPT: &str = "(function(){\
var lanes=document.querySelectorAll('[data-lane-subtask]');\
for(var i=0;i<lanes.length;i++){var id=lanes[i].getAttribute('data-lane-subtask');\
if(!document.getElementById('subtask-'+id)){throw new Error('the timeline lane of '+id+' has no subtask section');}}\
var subtasks=document.querySelectorAll('article.subtask');\
document.body.setAttribute('data-subtasks',String(subtasks.length));\
document.body.setAttribute('data-grove-report','ok');})();";

const STYLE: &str = "\
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;\
--lead:#8250df;--worker:#0969da;--reviewer:#bf8700;--ok:#1a7f37;--bad:#cf222e;--warn:#bc4c00;\
--del:#ffebe9;--delw:#ffb8b0;--add:#dafbe1;--addw:#aceebb}\
*{box-sizing:border-box}\
body{margin:0 auto;max-width:1400px;padding:16px 24px;font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:var(--fg);background:var(--bg)}\
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px;margin-top:28px}\
code,pre,.code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}\
.task{white-space:pre-wrap;background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px 12px;margin:8px 0}\
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:8px 0}dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}\
nav{margin:12px 0;color:var(--muted)}a{color:var(--worker)}\
.status{display:inline-block;padding:0 8px;border-radius:10px;font-weight:600;font-size:12px;border:1px solid currentColor}\
.s-merged,.s-finished,.v-approve{color:var(--ok)}.s-rejected,.s-failed,.v-reject{color:var(--bad)}\
.s-conflict,.s-paused,.s-interrupted{color:var(--warn)}.s-running{color:var(--worker)}\
svg.timeline{width:100%;height:auto;border:1px solid var(--line);border-radius:6px;background:var(--bg)}\
svg .axis line{stroke:var(--line)}svg text{font-size:11px;fill:var(--muted)}svg .lane-name{fill:var(--fg);font-size:12px}\
svg .bar{fill:var(--worker);opacity:.85}svg .lead .bar{fill:var(--lead)}svg .reviewer .bar{fill:var(--reviewer)}\
svg .bar.open{opacity:.45;stroke:var(--fg);stroke-dasharray:4 3}\
svg .turn{stroke:var(--fg);stroke-width:1.5}svg .queued{stroke:var(--muted);stroke-dasharray:2 3;stroke-width:2}\
svg .marker{stroke:#fff;stroke-width:1.5}svg .approved,svg .merged{fill:var(--ok)}svg .rejected,svg .failed{fill:var(--bad)}svg .conflict{fill:var(--warn)}\
svg .run-event line{stroke:var(--muted);stroke-dasharray:6 4}\
svg .check.passed{fill:var(--ok)}svg .check.failed{fill:var(--bad)}\
.legend{display:flex;flex-wrap:wrap;gap:4px 18px;color:var(--muted);font-size:12px;margin:6px 0}\
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-2px;margin-right:4px}\
table{border-collapse:collapse}th,td{text-align:left;padding:3px 10px;border-bottom:1px solid var(--line);vertical-align:top}\
th{background:var(--soft)}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
article.subtask{border:1px solid var(--line);border-radius:8px;padding:4px 16px 12px;margin:16px 0}\
article.subtask h3{margin:10px 0 4px}.brief{white-space:pre-wrap}\
.verdict{border-left:4px solid var(--line);padding:2px 12px;margin:8px 0}.verdict.v-approve{border-color:var(--ok)}.verdict.v-reject{border-color:var(--bad)}\
.verdict p{color:var(--fg);white-space:pre-wrap;margin:4px 0}.verdict li{color:var(--fg)}\
details.file{margin:10px 0;border:1px solid var(--line);border-radius:6px}details.file>summary{padding:4px 8px;background:var(--soft);cursor:pointer}\
table.sbs{width:100%;table-layout:fixed}table.sbs td{border:0;padding:0 6px;white-space:pre-wrap;word-break:break-all;tab-size:4}\
table.sbs col.ln{width:48px}table.sbs td.ln{color:var(--muted);text-align:right;user-select:none}\
table.sbs tr.hunk td{background:#ddf4ff;color:var(--muted);padding:2px 6px}\
td.del{background:var(--del)}td.add{background:var(--add)}td.none{background:var(--soft)}\
td.del .w{background:var(--delw)}td.add .w{background:var(--addw)}\
.note{color:var(--muted);font-style:italic;margin:4px 8px}\
footer{margin-top:32px;color:var(--muted);font-size:12px}";

fn header(page: &mut String, data: &ReportData) {
    let status = data.status.as_str();
    let _ = write!(
        page,
        "<header>\n<h1>grove run <code>{}</code> <span class=\"status s-{status}\" \
         id=\"run-status\">{status}</span></h1>\n<div class=\"task\">{}</div>\n<dl class=\"facts\">",
        escape(&data.run_id),
        escape(&data.task)
    );
    let mut fact = |name: &str, value: String| {
        let _ = write!(page, "<dt>{name}</dt><dd>{value}</dd>");
    };
    fact(
        "started",
        escape(&utc(data.timeline.start_ms))
            + &format!(
                " · {} recorded",
                duration(data.timeline.end_ms - data.timeline.start_ms)
            ),
    );
    fact(
        "repository",
        format!(
            "base <code>{}</code> on <code>{}</code>",
            escape(&short(&data.base)),
            escape(&data.branch)
        ),
    );
    fact("provider", escape(&data.provider));
    let result = match (&data.result_commit, &data.applied_history) {
        // The branch holds the squashed history, not the merge graph: name what it holds.
        (Some(commit), Some((squashed, commits))) if data.applied => format!(
            "<code>{}</code> ({commits} commit{}, one per subtask), applied to your branch; \
             the merge graph <code>{}</code> is on <code>grove/{}/result</code>",
            escape(&short(squashed)),
            if *commits == 1 { "" } else { "s" },
            escape(&short(commit)),
            escape(&data.run_id)
        ),
        (Some(commit), _) if data.applied => {
            format!(
                "<code>{}</code>, applied to your branch",
                escape(&short(commit))
            )
        }
        (Some(commit), _) => format!(
            "<code>{}</code> on <code>grove/{}/result</code>, not applied",
            escape(&short(commit)),
            escape(&data.run_id)
        ),
        (None, _) => "nothing merged".to_owned(),
    };
    fact("result", result);
    if let Some(reason) = &data.pause_reason {
        fact("paused", escape(reason));
    }
    if let Some(error) = &data.error {
        fact("error", escape(error));
    }
    if matches!(data.status, RunStatus::Paused | RunStatus::Interrupted) {
        fact(
            "continue",
            format!("<code>grove resume {}</code>", escape(&data.run_id)),
        );
    }
    page.push_str("</dl>\n</header>\n");
}

fn timeline_section(page: &mut String, data: &ReportData) {
    page.push_str("<section id=\"timeline\"><h2>Timeline</h2>\n");
    page.push_str(&timeline::svg(&data.timeline));
    page.push_str(
        "\n<div class=\"legend\"><span><i style=\"background:var(--lead)\"></i>lead</span>\
         <span><i style=\"background:var(--worker)\"></i>worker</span>\
         <span><i style=\"background:var(--reviewer)\"></i>reviewer</span>\
         <span>┆ dotted: delegated, waiting (for a slot, the check on the base, or the \
         subtasks it waits for: its title says which)</span>\
         <span><i style=\"background:var(--ok);height:4px\"></i>\
         <i style=\"background:var(--bad);height:4px\"></i>thin: the project's check, \
         passed or failed</span>\
         <span>| tick: a model turn answered (the last turn ends the bar)</span>\
         <span><i style=\"background:var(--ok);border-radius:6px\"></i>approved</span>\
         <span><i style=\"background:var(--bad);border-radius:6px\"></i>rejected</span>\
         <span><i style=\"background:var(--ok);transform:rotate(45deg)\"></i>merged</span>\
         <span><i style=\"background:var(--warn)\"></i>merge conflict</span>\
         <span><i style=\"background:var(--bad)\"></i>failed</span>\
         <span>dashed bar: no end recorded</span></div>\n</section>\n",
    );
}

fn subtasks_section(page: &mut String, data: &ReportData) {
    page.push_str("<section id=\"subtasks\"><h2>Subtasks</h2>\n");
    if data.subtasks.is_empty() {
        page.push_str("<p class=\"note\">The lead delegated no subtask.</p>\n");
    } else {
        page.push_str(
            "<table class=\"summary\"><tr><th>subtask</th><th>status</th><th>verdict</th>\
             <th>diff</th><th>brief</th></tr>",
        );
        for subtask in &data.subtasks {
            let status = subtask.status.as_str();
            let verdict = verdict_word(subtask.verdict.as_ref());
            let diff = match &subtask.diff {
                DiffView::Shown { summary, .. } => escape(summary),
                DiffView::Unavailable { .. } => "—".to_owned(),
            };
            let _ = write!(
                page,
                "<tr><td><a href=\"#subtask-{id}\">{id}</a></td>\
                 <td><span class=\"status s-{status}\">{status}</span></td>\
                 <td class=\"v-{verdict}\">{verdict}</td><td>{diff}</td><td>{}</td></tr>",
                match subtask.kind {
                    SubtaskKind::Task => escape(&truncate(first_line(&subtask.task), 100)),
                    kind => kind_label(kind).trim_start_matches(" · ").to_owned(),
                },
                id = escape(&subtask.id),
            );
        }
        page.push_str("</table>\n");
    }
    super::attempts::groups(page, data);
    for subtask in &data.subtasks {
        subtask_article(page, subtask);
    }
    page.push_str("</section>\n");
}

/// Every run of the project's check, each named for what it checked (the base, a
/// subtask's tree, the merged result, the result rebuilt without some subtasks in the
/// culprit search), and the culprit the search found.
fn checks_section(page: &mut String, data: &ReportData) {
    if data.checks.is_empty() {
        return;
    }
    page.push_str(
        "<section id=\"checks\"><h2>Checks</h2>\n<table class=\"summary\"><tr><th>on</th>\
         <th>what it checked</th><th>status</th><th>how it ended</th><th>time</th></tr>",
    );
    for run in &data.checks {
        let what = if run.on == ON_BASE {
            "the base, before any change".to_owned()
        } else if run.on == ON_RESULT {
            "the merged result".to_owned()
        } else if let Some(without) = run.on.strip_prefix(ON_RESULT_WITHOUT) {
            format!("culprit search: the result without {without}")
        } else {
            format!("{}'s worktree", run.on)
        };
        let what = match &run.same_as {
            Some(same) => format!("{what} (the same tree as {same}'s: not run again)"),
            None => what,
        };
        let status = match run.status {
            CheckStatus::Passed => "passed",
            CheckStatus::Failed => "failed",
        };
        let _ = write!(
            page,
            "<tr data-check-on=\"{on}\" data-run=\"{status}\"><td>{on}</td><td>{}</td>\
             <td class=\"{class}\">{status}</td><td>{}</td><td>{:.1} s</td></tr>",
            escape(&what),
            escape(&run.ended),
            run.seconds,
            on = escape(&run.on),
            class = if status == "passed" {
                "v-approve"
            } else {
                "v-reject"
            },
        );
        for tally in &run.ratchets {
            let _ = write!(
                page,
                "<tr class=\"ratchet\" data-ratchet-on=\"{on}\" data-new=\"{}\" \
                 data-fixed=\"{}\" data-unchanged=\"{}\"><td></td><td colspan=\"4\">\
                 [[check.ratchet]] {}</td></tr>",
                tally.new,
                tally.fixed,
                tally.unchanged,
                escape(&tally.counts()),
                on = escape(&run.on),
            );
        }
    }
    page.push_str("</table>\n");
    if let Some((subtasks, found_by, at)) = &data.culprit {
        let how = match (found_by.as_str(), at) {
            ("failing_line", Some(at)) => {
                format!("its merge last changed {at}, where the check failed")
            }
            ("failing_file", Some(at)) => format!("it changed {at}, where the check failed"),
            ("passes_without", _) => "the result rebuilt without it passes".to_owned(),
            ("only_merged", _) => "the only subtask merged".to_owned(),
            ("first_had", Some(at)) => format!("its own tree first had the new finding {at}"),
            (other, _) => other.to_owned(),
        };
        let _ = writeln!(
            page,
            "<p class=\"culprit\" data-culprit=\"{}\">The culprit of the red result: \
             <strong>{}</strong> ({})</p>",
            escape(&subtasks.join(",")),
            escape(&subtasks.join(", ")),
            escape(&how)
        );
    }
    page.push_str("</section>\n");
}

/// A subtask's own check: its status, how it ended, its time, and its output's end.
fn check_block(page: &mut String, check: &CheckRun) {
    let (class, word) = match check.status {
        CheckStatus::Passed => ("v-approve", "passed"),
        CheckStatus::Failed => ("v-reject", "failed"),
    };
    let _ = write!(
        page,
        "<div class=\"verdict {class}\" data-check=\"{word}\"><strong class=\"{class}\">check: \
         {word}</strong> ({}, {:.1} s)",
        escape(&check.ended),
        check.seconds
    );
    if !check.output_tail.is_empty() {
        let _ = write!(
            page,
            "<details><summary>the end of its output</summary><pre>{}</pre></details>",
            escape(&check.output_tail)
        );
    }
    page.push_str("</div>\n");
}

/// What a subtask grove started itself is, after its id: ` · fixer of the red result`.
fn kind_label(kind: SubtaskKind) -> &'static str {
    match kind {
        SubtaskKind::Task => "",
        SubtaskKind::Fix => " · fixer of the red result",
        SubtaskKind::Resolve => " · resolver of a conflict",
    }
}

fn verdict_word(verdict: Option<&VerdictState>) -> &'static str {
    verdict.map_or("none", |v| v.verdict.as_str())
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("")
}

fn subtask_article(page: &mut String, subtask: &SubtaskSection) {
    let status = subtask.status.as_str();
    let verdict = verdict_word(subtask.verdict.as_ref());
    let id = escape(&subtask.id);
    let _ = write!(
        page,
        "<article class=\"subtask\" id=\"subtask-{id}\" data-subtask=\"{id}\" \
         data-status=\"{status}\" data-verdict=\"{verdict}\">\n\
         <h3>{id}{} <span class=\"status s-{status}\">{status}</span></h3>\n\
         <dl class=\"facts\"><dt>agent</dt><dd>{}</dd><dt>branch</dt><dd><code>{}</code></dd>",
        kind_label(subtask.kind),
        escape(&subtask.agent),
        escape(&subtask.branch)
    );
    if let Some(archive) = &subtask.archive_ref {
        let _ = write!(
            page,
            "<dt>work kept at</dt><dd><code>{}</code></dd>",
            escape(archive)
        );
    }
    if !subtask.paths.is_empty() {
        let _ = write!(
            page,
            "<dt>may change</dt><dd><code>{}</code></dd>",
            escape(&subtask.paths.join(", "))
        );
    }
    if !subtask.waits_for.is_empty() {
        let (term, then) = if subtask.waiting {
            ("waiting for", "; starts from their result")
        } else {
            ("waited for", "; started from their result")
        };
        let _ = write!(
            page,
            "<dt>{term}</dt><dd class=\"waits-for\">{}{then}</dd>",
            escape(&subtask.waits_for.join(", "))
        );
    }
    chain_terms(page, &subtask.chain);
    super::attempts::attempt_term(page, subtask);
    if !subtask.conflict_paths.is_empty() {
        let _ = write!(
            page,
            "<dt>conflicted in</dt><dd>{}</dd>",
            escape(&subtask.conflict_paths.join(", "))
        );
    }
    let _ = write!(
        page,
        "</dl>\n<details><summary>brief</summary><div class=\"brief\">{}</div></details>\n",
        escape(&subtask.task)
    );
    match &subtask.verdict {
        Some(state) => {
            let _ = write!(
                page,
                "<div class=\"verdict v-{verdict}\"><strong class=\"v-{verdict}\">\
                 reviewer: {verdict}</strong><p>{}</p>",
                escape(&state.summary)
            );
            if !state.findings.is_empty() {
                page.push_str("<ul class=\"findings\">");
                for finding in &state.findings {
                    let _ = write!(
                        page,
                        "<li><span class=\"severity\">{}</span> <code>{}</code>: {}</li>",
                        finding.severity(),
                        escape(&finding.place().to_string()),
                        escape(&finding.problem)
                    );
                }
                page.push_str("</ul>");
            }
            page.push_str("</div>\n");
        }
        None => page.push_str("<div class=\"verdict\"><p>No review happened.</p></div>\n"),
    }
    if let Some(check) = &subtask.check {
        check_block(page, check);
    }
    match &subtask.diff {
        DiffView::Shown {
            base,
            head,
            source,
            summary,
            files,
        } => {
            let _ = writeln!(
                page,
                "<p>Diff of the {} (<code>{}</code>) against the base (<code>{}</code>): {}</p>",
                escape(source),
                escape(&short(head)),
                escape(&short(base)),
                escape(summary)
            );
            for file in files {
                file_diff(page, file);
            }
        }
        DiffView::Unavailable { reason } => {
            let _ = writeln!(page, "<p class=\"note\">No diff: {}</p>", escape(reason));
        }
    }
    page.push_str("</article>\n");
}

fn file_diff(page: &mut String, file: &FileDiff) {
    let renamed = match &file.old_path {
        Some(old) => format!(" (renamed from <code>{}</code>)", escape(old)),
        None => String::new(),
    };
    let _ = writeln!(
        page,
        "<details class=\"file\" open><summary><code>{}</code>{renamed} +{} −{}</summary>",
        escape(&file.path),
        file.added,
        file.removed
    );
    if file.binary {
        page.push_str("<p class=\"note\">Binary file changed; not shown.</p>");
    } else if !file.hunks.is_empty() {
        page.push_str(
            "<table class=\"sbs\"><colgroup><col class=\"ln\"><col><col class=\"ln\"><col>\
             </colgroup><tbody>\n",
        );
        for hunk in &file.hunks {
            let _ = writeln!(
                page,
                "<tr class=\"hunk\"><td colspan=\"4\">{}</td></tr>",
                escape(&hunk.header)
            );
            for row in &hunk.rows {
                diff_row(page, row);
            }
        }
        page.push_str("</tbody></table>\n");
    }
    if file.rows_left_out > 0 {
        let _ = writeln!(
            page,
            "<p class=\"note\">{} more rows of this file are not shown (the report shows at \
             most the first rows of each file; see the full diff with git).</p>",
            file.rows_left_out
        );
    }
    if file.cut {
        page.push_str(
            "<p class=\"note\">The patch was cut at the report's size cap: this file's \
             changes are missing or incomplete.</p>\n",
        );
    }
    page.push_str("</details>\n");
}

fn diff_row(page: &mut String, row: &Row) {
    let cell = |number: Option<u32>, class: &str, body: String| {
        let number = number.map_or_else(String::new, |n| n.to_string());
        let class = if class.is_empty() {
            "code".to_owned()
        } else {
            format!("code {class}")
        };
        format!("<td class=\"ln\">{number}</td><td class=\"{class}\">{body}</td>")
    };
    if !row.changed {
        let old = row.old.as_ref().map(|l| (l.number, shown(&l.text)));
        let new = row.new.as_ref().map(|l| (l.number, shown(&l.text)));
        let _ = writeln!(
            page,
            "<tr class=\"ctx\">{}{}</tr>",
            cell(
                old.as_ref().map(|l| l.0),
                "",
                escape(old.map(|l| l.1).as_deref().unwrap_or(""))
            ),
            cell(
                new.as_ref().map(|l| l.0),
                "",
                escape(new.map(|l| l.1).as_deref().unwrap_or(""))
            ),
        );
        return;
    }
    let (old_text, new_text) = (
        row.old.as_ref().map(|l| shown(&l.text)),
        row.new.as_ref().map(|l| shown(&l.text)),
    );
    let (old_body, new_body) = match (&old_text, &new_text) {
        (Some(old), Some(new)) => {
            let (old, new) = word_segments(old, new);
            (highlighted(&old), highlighted(&new))
        }
        (old, new) => (
            escape(old.as_deref().unwrap_or("")),
            escape(new.as_deref().unwrap_or("")),
        ),
    };
    let side = |present: bool, class: &'static str| if present { class } else { "none" };
    let _ = writeln!(
        page,
        "<tr class=\"chg\">{}{}</tr>",
        cell(
            row.old.as_ref().map(|l| l.number),
            side(row.old.is_some(), "del"),
            old_body
        ),
        cell(
            row.new.as_ref().map(|l| l.number),
            side(row.new.is_some(), "add"),
            new_body
        ),
    );
}

/// A line as shown: cut at [`MAX_LINE_CHARS`] with the count of what was left out.
fn shown(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_LINE_CHARS {
        return text.to_owned();
    }
    let cut = truncate(text, MAX_LINE_CHARS);
    format!("{cut} [{} more characters]", total - MAX_LINE_CHARS)
}

fn highlighted(segments: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for segment in segments {
        if segment.changed {
            let _ = write!(out, "<span class=\"w\">{}</span>", escape(segment.text));
        } else {
            out.push_str(&escape(segment.text));
        }
    }
    out
}

fn cost_section(page: &mut String, data: &ReportData) {
    page.push_str(
        "<section id=\"cost\"><h2>Tokens and estimated cost</h2>\n<table class=\"ledger\">\
         <tr><th>agent</th><th>model</th><th class=\"num\">turns</th><th class=\"num\">input</th>\
         <th class=\"num\">output</th><th class=\"num\">cache read</th>\
         <th class=\"num\">cache write</th><th class=\"num\">estimated cost</th></tr>\n",
    );
    let mut total = Ledger::default();
    let mut total_usd = 0.0;
    let mut unknown = 0usize;
    let mut incomplete = false;
    for agent in &data.agents {
        total.add(&agent.ledger);
        let cost = data.prices.cost(&agent.model, &agent.ledger);
        match cost.usd() {
            Some(usd) => total_usd += usd,
            None => unknown += 1,
        }
        incomplete |= !agent.complete;
        ledger_row(page, agent, cost);
    }
    let total_cost = match unknown {
        0 => usd(total_usd),
        n if n == data.agents.len() => "unknown price".to_owned(),
        n => format!(
            "{} + {n} agent{} at unknown price",
            usd(total_usd),
            if n == 1 { "" } else { "s" }
        ),
    };
    let _ = writeln!(
        page,
        "<tr class=\"total\"><th>total</th><th></th>{}<th class=\"num\">{}</th></tr></table>",
        ledger_cells(&total, "th"),
        total_cost
    );
    if incomplete {
        page.push_str(
            "<p class=\"note\">* no end recorded for this agent (still running, or grove \
             stopped): its last turn may be missing from these counts.</p>\n",
        );
    }
    let source = if data.prices.overrides.is_empty() {
        "built-in prices; <code>grove report --prices FILE</code> overrides them".to_owned()
    } else {
        let files: Vec<String> = data
            .prices
            .overrides
            .iter()
            .map(|path| format!("<code>{}</code>", escape(&path.display().to_string())))
            .collect();
        format!(
            "built-in prices, with the models of {} added or replaced",
            files.join(", then ")
        )
    };
    let _ = write!(
        page,
        "<p>Costs are an <strong>estimate</strong>: token counts times list prices in US \
         dollars per million tokens ({source}; the rows below are those this run used). A \
         model whose name is not in the table, nor is a dated snapshot of a name in it, has \
         an unknown price, not a zero one.</p>\n\
         <table class=\"prices\"><tr><th>model</th><th class=\"num\">input</th>\
         <th class=\"num\">output</th><th class=\"num\">cache read</th>\
         <th class=\"num\">cache write</th><th class=\"num\">cache write 1h</th></tr>"
    );
    let rate = |rate: Option<f64>| {
        rate.map_or_else(
            || "—".to_owned(),
            // Cents when they are whole, the figure as published otherwise ($0.125).
            |r| {
                if (r * 100.0).fract().abs() < 1e-9 {
                    format!("{r:.2}")
                } else {
                    format!("{r}")
                }
            },
        )
    };
    // The rows that priced an agent of this run (the whole table is `src/prices.toml`).
    let used: std::collections::BTreeSet<&str> = data
        .agents
        .iter()
        .filter_map(|agent| data.prices.lookup(&agent.model).map(|(name, _)| name))
        .collect();
    for (model, price) in data
        .prices
        .models
        .iter()
        .filter(|(model, _)| used.contains(model.as_str()))
    {
        let _ = write!(
            page,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(model),
            rate(Some(price.input)),
            rate(Some(price.output)),
            rate(price.cache_read),
            rate(price.cache_write),
            rate(price.cache_write_1h)
        );
    }
    page.push_str("</table>\n");
    super::cost_chart::cost_over_time(page, data);
    page.push_str("</section>\n");
}

fn ledger_row(page: &mut String, agent: &AgentCost, cost: Cost) {
    let cost = match cost {
        Cost::Usd(value) => usd(value),
        Cost::UnknownModel => "unknown price".to_owned(),
        Cost::MissingRate { kind } => format!("unknown price (no {kind} rate)"),
    };
    let _ = writeln!(
        page,
        "<tr><td>{}{}</td><td><code>{}</code></td>{}<td class=\"num\">{cost}</td></tr>",
        escape(&agent.name()),
        if agent.complete { "" } else { " *" },
        escape(&agent.model),
        ledger_cells(&agent.ledger, "td"),
    );
}

fn ledger_cells(ledger: &Ledger, cell: &str) -> String {
    [
        u64::from(ledger.steps),
        ledger.input_tokens,
        ledger.output_tokens,
        ledger.cache_read_tokens,
        ledger.cache_write_tokens,
    ]
    .iter()
    .map(|n| format!("<{cell} class=\"num\">{}</{cell}>", grouped(*n)))
    .collect()
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn usd(value: f64) -> String {
    if value > 0.0 && value < 0.01 {
        format!("${value:.4}")
    } else {
        format!("${value:.2}")
    }
}

/// The first 12 hex digits of a commit id.
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// `Sun, 29 Nov 2026 21:55:30 GMT` for ms since the epoch.
fn utc(ms: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(ms))
}

/// A subtask's place in a chain of follow-ups, as terms of its description list.
fn chain_terms(page: &mut String, chain: &crate::report::Chain) {
    if let Some(earlier) = &chain.replaces {
        let how = match chain.started_from_it {
            true => "; started from its kept work",
            false => "",
        };
        let _ = write!(
            page,
            "<dt>replaces</dt><dd class=\"chain\">{}{how}</dd>",
            escape(earlier)
        );
    }
    if let Some(later) = &chain.superseded_by {
        let _ = write!(
            page,
            "<dt>superseded by</dt><dd class=\"chain\">{}</dd>",
            escape(later)
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::report::{
        CheckSpan, DiffView, FileDiff, Hunk, Lane, Line, Marker, MarkerKind, PriceTable, Row,
        RunEvent, SubtaskSection, Timeline,
    };
    use crate::store::journal::{Finding, VerdictKind};
    use crate::store::state::SubtaskStatus;

    const EVIL: &str = "</script><script>alert(1)</script>\"'><img src=x onerror=alert(2)>";

    fn line(number: u32, text: &str) -> Option<Line> {
        Some(Line {
            number,
            text: text.to_owned(),
        })
    }

    fn ledger(steps: u32, input: u64) -> Ledger {
        Ledger {
            steps,
            input_tokens: input,
            output_tokens: input / 10,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
        }
    }

    /// A small run with every field set, `evil` in every string a model, the
    /// repository or the user could have written.
    fn sample(evil: &str) -> ReportData {
        let lane = |role: &str, label: &str, start: u64, end: Option<u64>| Lane {
            role: role.into(),
            label: label.into(),
            subtask: (role != "lead").then(|| label.to_owned()),
            queued_ms: None,
            waited_for: "a slot".into(),
            started_ms: start,
            ended_ms: end,
            turn_ms: vec![start + 500],
            turns: 2,
            markers: vec![],
            checks: vec![],
        };
        // Delegated while the base's check ran; its own check between it and its reviewer.
        let mut worker = lane("worker", "S1", 2_000, Some(3_400));
        worker.queued_ms = Some(1_200);
        worker.waited_for = "the check on the base".into();
        worker.checks = vec![CheckSpan {
            on: "S1".into(),
            started_ms: 3_400,
            ended_ms: 3_900,
            passed: true,
        }];
        let mut reviewer = lane("reviewer", "S1", 4_000, Some(5_000));
        reviewer.markers = vec![
            Marker {
                ts_ms: 5_000,
                kind: MarkerKind::Rejected,
            },
            Marker {
                ts_ms: 5_000,
                kind: MarkerKind::Failed,
            },
        ];
        let file = FileDiff {
            path: format!("src/{evil}.rs"),
            old_path: None,
            added: 1,
            removed: 1,
            binary: false,
            hunks: vec![Hunk {
                header: format!("@@ -1,2 +1,2 @@ {evil}"),
                rows: vec![
                    Row {
                        old: line(1, "// see https://example.com/docs"),
                        new: line(1, "// see https://example.com/docs"),
                        changed: false,
                    },
                    Row {
                        old: line(2, "let x = 1;"),
                        new: line(2, &format!("let x = \"{evil}\";")),
                        changed: true,
                    },
                ],
            }],
            rows_left_out: 3,
            cut: true,
        };
        ReportData {
            run_id: "20261129-215530-7f3a".into(),
            task: format!("Fix it {evil}"),
            status: RunStatus::Paused,
            base: "0123456789abcdef0123456789abcdef01234567".into(),
            branch: format!("refs/heads/{evil}"),
            provider: "anthropic".into(),
            result_commit: None,
            applied: false,
            applied_history: None,
            pause_reason: Some(format!("the model API failed: {evil}")),
            error: None,
            timeline: Timeline {
                start_ms: 1_000,
                end_ms: 6_000,
                lanes: vec![lane("lead", "lead", 1_000, None), worker, reviewer],
                events: vec![RunEvent {
                    ts_ms: 6_000,
                    label: format!("paused: {evil}"),
                }],
            },
            subtasks: vec![SubtaskSection {
                id: "S1".into(),
                kind: SubtaskKind::Task,
                task: format!("Do the thing {evil}"),
                branch: "grove/20261129-215530-7f3a/1".into(),
                agent: "worker".into(),
                status: SubtaskStatus::Rejected,
                verdict: Some(VerdictState {
                    verdict: VerdictKind::Reject,
                    summary: format!("No. {evil}"),
                    findings: vec![Finding {
                        path: format!("src/{evil}.rs"),
                        line: Some(2),
                        problem: format!("bad {evil}"),
                        blocking: true,
                    }],
                }),
                conflict_paths: vec![],
                paths: vec![],
                waits_for: vec![],
                chain: crate::report::Chain::default(),
                waiting: false,
                archive_ref: Some("refs/grove/archive/20261129-215530-7f3a/1".into()),
                check: Some(CheckRun {
                    on: "S1".into(),
                    status: CheckStatus::Failed,
                    seconds: 1.25,
                    ended: "exited with status 1".into(),
                    output_tail: format!("FAILED test_{evil}"),
                    opened: Vec::new(),
                    tree: None,
                    same_as: None,
                    ratchets: Vec::new(),
                }),
                attempt: None,
                diff: DiffView::Shown {
                    base: "0123456789abcdef0123456789abcdef01234567".into(),
                    head: "89abcdef0123456789abcdef0123456789abcdef".into(),
                    source: "archived work refs/grove/archive/20261129-215530-7f3a/1".into(),
                    summary: "1 file changed, 1 insertion(+), 1 deletion(-)".into(),
                    files: vec![file],
                },
            }],
            checks: vec![CheckRun {
                on: "result without S1".into(),
                status: CheckStatus::Passed,
                seconds: 2.0,
                ended: "exited with status 0".into(),
                output_tail: format!("ok {evil}"),
                opened: Vec::new(),
                tree: None,
                same_as: None,
                ratchets: Vec::new(),
            }],
            culprit: Some((vec!["S1".into()], "passes_without".into(), None)),
            agents: vec![
                AgentCost {
                    role: "lead".into(),
                    label: "lead".into(),
                    model: "claude-sonnet-4-5".into(),
                    ledger: ledger(2, 1_000_000),
                    complete: false,
                },
                AgentCost {
                    role: "worker".into(),
                    label: "S1".into(),
                    model: format!("local {evil}"),
                    ledger: ledger(2, 100),
                    complete: true,
                },
            ],
            prices: PriceTable {
                overrides: vec![PathBuf::from(format!("/p/{evil}.toml"))],
                ..PriceTable::builtin()
            },
            notes: vec![format!("transcript {evil}: broken")],
            attempt_groups: Vec::new(),
        }
    }

    #[test]
    fn a_groups_attempts_are_shown_side_by_side_with_the_judges_words() {
        use crate::status::SubtaskId;
        use crate::store::attempt_status::{AttemptOf, AttemptStatus};
        use crate::store::attempts::{AttemptGroup, NotPicked, Pick};
        let evil = "<b>&";
        let mut data = sample(evil);
        let mut second = data.subtasks[0].clone();
        second.id = "S2".into();
        second.status = SubtaskStatus::Merged;
        second.check = None;
        let of = |label, status, reason: Option<String>| AttemptOf {
            group: SubtaskId(1),
            label,
            status,
            reason,
            merged: Some(SubtaskId(2)),
        };
        data.subtasks[0].attempt = Some(of(
            'A',
            AttemptStatus::NotPicked,
            Some(format!("A is casual {evil}")),
        ));
        second.attempt = Some(of('B', AttemptStatus::Picked, None));
        data.subtasks.push(second);
        data.attempt_groups = vec![AttemptGroup {
            group: SubtaskId(1),
            subtasks: vec![SubtaskId(1), SubtaskId(2)],
            pick: Some(Pick {
                picked: Some(SubtaskId(2)),
                summary: format!("B is formal {evil}"),
                not_picked: vec![NotPicked {
                    subtask: SubtaskId(1),
                    reason: format!("A is casual {evil}"),
                }],
            }),
        }];
        let page = render_html(&data);
        let start = page
            .find("<div class=\"attempts\"")
            .expect("the group's block");
        let end = start + page[start..].find("</div>").unwrap() + "</div>".len();
        insta::assert_snapshot!("attempts_side_by_side", &page[start..end]);
        assert!(
            page.contains("<dt>attempt</dt><dd class=\"chain\">A of <a href=\"#attempts-S1\">S1</a>, not picked: A is casual &lt;b&gt;&amp;</dd>"),
            "each attempt's section names its group, escaped"
        );
    }

    #[test]
    fn every_string_from_the_run_is_escaped() {
        let page = render_html(&sample(EVIL));
        assert!(
            !page.contains("<script>alert") && !page.contains("<img"),
            "no injected element survives"
        );
        assert_eq!(
            page.matches("<script>").count(),
            2,
            "the page's own scripts only"
        );
        let escaped = escape(EVIL);
        assert_eq!(
            escaped,
            "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&gt;&lt;img \
             src=x onerror=alert(2)&gt;"
        );
        // task, branch, pause reason, timeline event (title and label), subtask brief
        // (table and details), verdict summary, finding path and problem, file path,
        // hunk header, diff line, check output, model name, price file, note.
        assert!(
            page.matches(escaped.as_str()).count() >= 15,
            "each field is shown, escaped: {} times",
            page.matches(escaped.as_str()).count()
        );
    }

    #[test]
    fn the_page_references_nothing_outside_itself() {
        let page = render_html(&sample("x"));
        let mut references = Vec::new();
        for attribute in ["src=", "href=", "action=", "url(", "@import"] {
            for (start, _) in page.match_indices(attribute) {
                references.push(page[start..].chars().take(40).collect::<String>());
            }
        }
        assert!(
            references.iter().all(|r| r.starts_with("href=\"#")),
            "only links to the page's own sections: {references:?}"
        );
        assert_eq!(
            page.matches("https://").count(),
            2,
            "the only URLs are the diff's inert text, on each side"
        );
        assert!(
            page.contains("content=\"default-src 'none';"),
            "a Content-Security-Policy forbids loading anything"
        );
    }

    #[test]
    fn costs_say_estimate_and_unknown_prices_are_never_zero() {
        let page = render_html(&sample("x"));
        assert!(page.contains("<strong>estimate</strong>"));
        assert!(
            page.contains(
                "<td><code>local x</code></td><td class=\"num\">2</td>\
                 <td class=\"num\">100</td><td class=\"num\">10</td><td class=\"num\">0</td>\
                 <td class=\"num\">0</td><td class=\"num\">unknown price</td>"
            ),
            "an unlisted model's cost is unknown"
        );
        assert!(
            page.contains("<th class=\"num\">$4.50 + 1 agent at unknown price</th>"),
            "the total says what it leaves out"
        );
        assert!(
            page.contains("<td>lead *</td>"),
            "an agent with no end is flagged"
        );
    }

    #[test]
    fn a_subtask_shows_its_paths_and_what_it_waits_or_waited_for() {
        let facts = |waiting: bool| {
            let mut data = sample("x");
            let subtask = &mut data.subtasks[0];
            subtask.paths = vec!["src/config/**".into(), "src/<lib>.rs".into()];
            subtask.waits_for = vec!["S1".into(), "S3".into()];
            subtask.waiting = waiting;
            let page = render_html(&data);
            let start = page.find("<dt>may change</dt>").unwrap();
            let end = start + page[start..].find("</dl>").unwrap();
            page[start..end].to_owned()
        };
        assert_eq!(
            [facts(true), facts(false)],
            [
                "<dt>may change</dt><dd><code>src/config/**, src/&lt;lib&gt;.rs</code></dd>\
                 <dt>waiting for</dt><dd class=\"waits-for\">S1, S3; starts from their \
                 result</dd>",
                "<dt>may change</dt><dd><code>src/config/**, src/&lt;lib&gt;.rs</code></dd>\
                 <dt>waited for</dt><dd class=\"waits-for\">S1, S3; started from their \
                 result</dd>",
            ],
            "the report says what a subtask may change and whom it waits for, escaped"
        );
    }

    #[test]
    fn a_checks_ratchets_are_a_row_each_under_it_with_their_counts() {
        let mut data = sample("x");
        data.checks[0].ratchets = vec![crate::store::findings::RatchetTally {
            command: "mypy <src>".into(),
            new: 1,
            fixed: 2,
            unchanged: 15,
            new_findings: Vec::new(),
            fixed_findings: Vec::new(),
            error: None,
        }];

        let page = render_html(&data);

        assert!(
            page.contains(
                "<tr class=\"ratchet\" data-ratchet-on=\"result without S1\" data-new=\"1\" \
                 data-fixed=\"2\" data-unchanged=\"15\"><td></td><td colspan=\"4\">\
                 [[check.ratchet]] mypy &lt;src&gt;: 1 new, 2 fixed, 15 unchanged</td></tr>"
            ),
            "{page}"
        );
        assert!(
            !render_html(&sample("x")).contains("class=\"ratchet\""),
            "no row without ratchets"
        );
    }

    #[test]
    fn token_counts_are_grouped_by_thousands() {
        assert_eq!(
            [0, 999, 1_000, 1_000_000, 12_345_678].map(grouped),
            ["0", "999", "1,000", "1,000,000", "12,345,678"]
        );
    }

    #[test]
    fn a_small_report_renders_as_reviewed() {
        let page = render_html(&sample("<evil>"));
        let body = &page[page.find("<body").unwrap()..];
        insta::assert_snapshot!(body);
    }

    #[test]
    fn an_applied_squashed_history_is_named_as_the_branch_holds_it() {
        let data = ReportData {
            result_commit: Some("aaaaaaaaaa0123456789aaaaaaaaaaaaaaaaaaaa".into()),
            applied: true,
            applied_history: Some(("bbbbbbbbbb0123456789bbbbbbbbbbbbbbbbbbbb".into(), 2)),
            ..sample("x")
        };
        let page = render_html(&data);
        assert!(
            page.contains(
                "<code>bbbbbbbbbb01</code> (2 commits, one per subtask), applied to your branch; \
                 the merge graph <code>aaaaaaaaaa01</code> is on \
                 <code>grove/20261129-215530-7f3a/result</code>"
            ),
            "the commit named as applied is the one the branch holds, the squashed one"
        );
    }
}
