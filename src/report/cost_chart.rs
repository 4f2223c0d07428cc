//! The report's cost over time: what the run had spent at each moment, drawn as one
//! cumulative line in an inline SVG.
//!
//! This file owns that picture. The transcripts keep when each turn's answer arrived but
//! not each turn's tokens, so an agent's cost is spread evenly over its turns; the page
//! says so. It must never draw an agent without a price as free: such agents are left
//! out of the line, and named.

use std::fmt::Write as _;

use super::ReportData;
use super::html::escape;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;

/// `(ms since the epoch, dollars)`: each priced agent's cost, spread over its turns.
fn spending(data: &ReportData) -> (Vec<(u64, f64)>, Vec<String>) {
    let mut points = Vec::new();
    let mut unpriced = Vec::new();
    for agent in &data.agents {
        let Some(usd) = data.prices.cost(&agent.model, &agent.ledger).usd() else {
            if !unpriced.contains(&agent.name()) {
                unpriced.push(agent.name());
            }
            continue;
        };
        let Some(lane) = data
            .timeline
            .lanes
            .iter()
            .find(|lane| lane.role == agent.role && lane.label == agent.label)
        else {
            continue;
        };
        // The saved turns' times, then the lane's end for the last answer.
        let mut times = lane.turn_ms.clone();
        times.push(lane.ended_ms.unwrap_or(data.timeline.end_ms));
        let share = usd / times.len() as f64;
        points.extend(times.into_iter().map(|ts| (ts, share)));
    }
    points.sort_by_key(|(ts, _)| *ts);
    (points, unpriced)
}

/// The section's figure and its note, appended to `page`.
pub(super) fn cost_over_time(page: &mut String, data: &ReportData) {
    let (points, unpriced) = spending(data);
    let total: f64 = points.iter().map(|(_, usd)| usd).sum();
    let (start, end) = (
        data.timeline.start_ms,
        data.timeline.end_ms.max(data.timeline.start_ms + 1),
    );
    page.push_str("<h3>Cost over time</h3>\n");
    if points.is_empty() || total <= 0.0 {
        page.push_str("<p>No priced model turn to draw.</p>\n");
        return;
    }
    let x = |ts: u64| (ts.clamp(start, end) - start) as f64 / (end - start) as f64 * WIDTH;
    let y = |usd: f64| HEIGHT - usd / total * HEIGHT;
    let mut line = format!("0,{HEIGHT:.1}");
    let mut spent = 0.0;
    for (ts, usd) in &points {
        let _ = write!(line, " {:.1},{:.1}", x(*ts), y(spent));
        spent += usd;
        let _ = write!(line, " {:.1},{:.1}", x(*ts), y(spent));
    }
    let _ = write!(line, " {WIDTH:.1},{:.1}", y(spent));
    let _ = writeln!(
        page,
        "<svg class=\"cost\" viewBox=\"-4 -14 {w} {h}\" width=\"{w}\" height=\"{h}\" \
         role=\"img\" aria-label=\"cost over time\"><polyline fill=\"none\" \
         stroke=\"currentColor\" stroke-width=\"2\" points=\"{line}\"/>\
         <text x=\"0\" y=\"-2\" font-size=\"11\">{top}</text>\
         <text x=\"{WIDTH}\" y=\"{bottom}\" font-size=\"11\" text-anchor=\"end\">{secs:.0} s</text>\
         </svg>",
        w = WIDTH + 8.0,
        h = HEIGHT + 30.0,
        top = crate::prices::format_usd(total),
        bottom = HEIGHT + 14.0,
        secs = (end - start) as f64 / 1000.0,
    );
    let mut note = String::from(
        "<p class=\"note\">What the run had spent, from its start to its last record: each \
         agent's estimated cost spread evenly over its turns (the transcripts keep when \
         each answer arrived, not its tokens).",
    );
    if !unpriced.is_empty() {
        let _ = write!(
            note,
            " Not drawn, at unknown price: {}.",
            escape(&unpriced.join(", "))
        );
    }
    note.push_str("</p>\n");
    page.push_str(&note);
}
