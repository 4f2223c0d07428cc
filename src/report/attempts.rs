//! A subtask tried several ways (best of N) in the report: the group's attempts side by
//! side — each one's status, why it lost, its check, its diff and its cost — with the
//! judge's summary, and each attempt's place in its own section.
//!
//! This file owns that rendering, pure like the rest of the page; where an attempt
//! stands comes from [`crate::store::attempt_status`] through the gathered data.

use std::fmt::Write as _;

use crate::store::attempts::AttemptGroup;
use crate::store::journal::CheckStatus;

use super::html::escape;
use super::{DiffView, ReportData, SubtaskSection};

/// Each group of attempts as one table, a column per attempt.
pub(super) fn groups(page: &mut String, data: &ReportData) {
    for group in &data.attempt_groups {
        group_table(page, data, group);
    }
}

fn group_table(page: &mut String, data: &ReportData, group: &AttemptGroup) {
    let attempts: Vec<&SubtaskSection> = group
        .subtasks
        .iter()
        .filter_map(|id| data.subtasks.iter().find(|s| s.id == id.to_string()))
        .collect();
    let _ = write!(
        page,
        "<div class=\"attempts\" id=\"attempts-{group}\"><h3>{group}: tried {n} ways</h3>\n\
         <table class=\"summary\"><tr><th></th>",
        group = escape(&group.group.to_string()),
        n = group.subtasks.len()
    );
    for attempt in &attempts {
        let label = attempt.attempt.as_ref().map_or('?', |of| of.label);
        let _ = write!(
            page,
            "<th>attempt {label} · <a href=\"#subtask-{id}\">{id}</a></th>",
            id = escape(&attempt.id)
        );
    }
    page.push_str("</tr>\n");
    let row = |page: &mut String, name: &str, cell: &dyn Fn(&SubtaskSection) -> String| {
        let _ = write!(page, "<tr><th>{name}</th>");
        for attempt in &attempts {
            let _ = write!(page, "<td>{}</td>", cell(attempt));
        }
        page.push_str("</tr>\n");
    };
    row(page, "status", &|s| {
        let status = s.status.as_str();
        let words = s.attempt.as_ref().map_or("", |of| of.status.words());
        format!("<span class=\"status s-{status}\">{status}</span> {words}")
    });
    row(page, "why not", &|s| {
        s.attempt
            .as_ref()
            .and_then(|of| of.reason.as_deref())
            .map_or_else(|| "—".to_owned(), escape)
    });
    row(page, "check", &|s| match &s.check {
        Some(check) if check.status == CheckStatus::Passed => "passed".to_owned(),
        Some(check) => format!("failed ({})", escape(&check.ended)),
        None => "—".to_owned(),
    });
    row(page, "diff", &|s| match &s.diff {
        DiffView::Shown { summary, .. } => escape(summary),
        DiffView::Unavailable { reason } => escape(reason),
    });
    row(page, "estimated cost", &|s| {
        cost(data, &s.id, |role| role != "judge")
    });
    page.push_str("</table>\n");
    if let Some(pick) = &group.pick {
        let label = group.group.to_string();
        let _ = writeln!(
            page,
            "<p class=\"judge\"><strong>the judge</strong> ({}): {}</p>",
            cost(data, &label, |role| role == "judge"),
            escape(&pick.summary)
        );
    }
    page.push_str("</div>\n");
}

/// What the agents labelled `id` whose role `counts` cost (an attempt's worker and
/// reviewer; a group's judge, under the group's label, apart), or `unknown price`.
fn cost(data: &ReportData, id: &str, counts: impl Fn(&str) -> bool) -> String {
    let mut total = 0.0;
    let agents = data.agents.iter();
    for agent in agents.filter(|agent| agent.label == id && counts(&agent.role)) {
        match data.prices.cost(&agent.model, &agent.ledger).usd() {
            Some(usd) => total += usd,
            None => return "unknown price".to_owned(),
        }
    }
    format!("${total:.4}")
}

/// `<dt>attempt</dt>` in a subtask's facts: its label, group, whether it was picked and
/// why not.
pub(super) fn attempt_term(page: &mut String, subtask: &SubtaskSection) {
    let Some(of) = &subtask.attempt else {
        return;
    };
    let why = of
        .reason
        .as_deref()
        .map(|reason| format!(": {}", escape(reason)))
        .unwrap_or_default();
    let _ = write!(
        page,
        "<dt>attempt</dt><dd class=\"chain\">{} of <a href=\"#attempts-{group}\">{group}</a>, \
         {}{why}</dd>",
        of.label,
        of.status.words(),
        group = escape(&of.group.to_string())
    );
}
