//! The timeline as an inline SVG picture: one lane per agent, a bar for its running
//! time, what it waited for before it, a tick per timed turn, a thin bar per check
//! (a subtask's on its worker's lane, the base's and the result's on the lead's),
//! markers for verdicts, merges, conflicts and failures.
//!
//! This file owns the picture's geometry. It must never emit text it did not escape,
//! nor any reference outside the page (lane links point at the page's own sections).

use std::fmt::Write as _;

use super::html::{duration, escape};
use super::{CheckSpan, Lane, Marker, MarkerKind, Timeline};
use crate::text::truncate;

/// The picture's width in SVG units (it scales to the page).
const WIDTH: f64 = 1100.0;
/// Left column for the lane names.
const LABEL_WIDTH: f64 = 150.0;
const RIGHT_PAD: f64 = 24.0;
const AXIS_HEIGHT: f64 = 30.0;
const LANE_HEIGHT: f64 = 28.0;
const BAR_HEIGHT: f64 = 14.0;
/// A check's bar: thinner than an agent's, so that one drawn over the lead's shows.
const CHECK_HEIGHT: f64 = 4.0;
/// Room under the lanes for the run events' labels.
const FOOTER_HEIGHT: f64 = 22.0;

/// The axis step: the smallest of a few round durations that needs at most ten ticks.
fn tick_step_ms(span_ms: u64) -> u64 {
    const STEPS_MS: [u64; 17] = [
        100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 900_000, 1_800_000, 3_600_000, 7_200_000,
    ];
    STEPS_MS
        .iter()
        .copied()
        .find(|step| span_ms / step <= 10)
        .unwrap_or_else(|| span_ms.div_ceil(10).max(1))
}

struct Scale {
    start_ms: u64,
    span_ms: u64,
}

impl Scale {
    fn x(&self, ts_ms: u64) -> f64 {
        let offset = ts_ms.saturating_sub(self.start_ms).min(self.span_ms);
        LABEL_WIDTH + offset as f64 / self.span_ms as f64 * (WIDTH - LABEL_WIDTH - RIGHT_PAD)
    }

    /// `+12.3s` from the run's start.
    fn at(&self, ts_ms: u64) -> String {
        format!("+{}", duration(ts_ms.saturating_sub(self.start_ms)))
    }
}

/// The timeline's `<svg>` element.
pub fn svg(timeline: &Timeline) -> String {
    let scale = Scale {
        start_ms: timeline.start_ms,
        span_ms: timeline.end_ms.saturating_sub(timeline.start_ms).max(1),
    };
    let lanes_height = LANE_HEIGHT * timeline.lanes.len() as f64;
    let height = AXIS_HEIGHT + lanes_height + FOOTER_HEIGHT;
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"timeline\" role=\"img\" viewBox=\"0 0 {WIDTH} {height}\" \
         aria-label=\"timeline of every agent of the run\">"
    );
    axis(&mut out, &scale, AXIS_HEIGHT + lanes_height);
    for (index, lane) in timeline.lanes.iter().enumerate() {
        let top = AXIS_HEIGHT + LANE_HEIGHT * index as f64;
        lane_svg(&mut out, lane, top, &scale, timeline.end_ms);
    }
    for event in &timeline.events {
        let x = scale.x(event.ts_ms);
        let _ = write!(
            out,
            "<g class=\"run-event\"><title>{} at {}</title>\
             <line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{AXIS_HEIGHT}\" y2=\"{:.1}\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></g>",
            escape(&event.label),
            scale.at(event.ts_ms),
            AXIS_HEIGHT + lanes_height,
            AXIS_HEIGHT + lanes_height + 15.0,
            escape(&truncate(&event.label, 40)),
        );
    }
    out.push_str("</svg>");
    out
}

fn axis(out: &mut String, scale: &Scale, bottom: f64) {
    let step = tick_step_ms(scale.span_ms);
    out.push_str("<g class=\"axis\">");
    let mut offset = 0;
    while offset <= scale.span_ms {
        let x = scale.x(scale.start_ms + offset);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{bottom:.1}\"/>\
             <text x=\"{x:.1}\" y=\"16\" text-anchor=\"middle\">{}</text>",
            AXIS_HEIGHT - 6.0,
            duration(offset)
        );
        offset += step;
    }
    out.push_str("</g>");
}

fn lane_svg(out: &mut String, lane: &Lane, top: f64, scale: &Scale, end_ms: u64) {
    let name = if lane.role == lane.label {
        lane.role.clone()
    } else {
        format!("{} {}", lane.role, lane.label)
    };
    let mid = top + LANE_HEIGHT / 2.0;
    lane_open(out, lane, &name, mid);
    if let Some(queued) = lane.queued_ms.filter(|queued| *queued < lane.started_ms) {
        let _ = write!(
            out,
            "<line class=\"queued\" x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{mid:.1}\" y2=\"{mid:.1}\">\
             <title>{} waiting for {} from {} to {}</title></line>",
            scale.x(queued),
            scale.x(lane.started_ms),
            escape(&name),
            escape(&lane.waited_for),
            scale.at(queued),
            scale.at(lane.started_ms)
        );
    }
    lane_bar(out, lane, &name, mid, scale, end_ms);
    for check in &lane.checks {
        check_svg(out, check, mid, scale);
    }
    for (index, turn) in lane.turn_ms.iter().enumerate() {
        let x = scale.x(*turn);
        let _ = write!(
            out,
            "<line class=\"turn\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\">\
             <title>{}: turn {} answered at {}</title></line>",
            mid - BAR_HEIGHT / 2.0 - 3.0,
            mid + BAR_HEIGHT / 2.0 + 3.0,
            escape(&name),
            index + 1,
            scale.at(*turn)
        );
    }
    for marker in &lane.markers {
        marker_svg(out, &lane.label, marker, mid, scale);
    }
    out.push_str("</g>");
}

/// The lane's group and its name (a link to the subtask's section when it has one).
fn lane_open(out: &mut String, lane: &Lane, name: &str, mid: f64) {
    let kind = match lane.role.as_str() {
        "lead" => "lead",
        "reviewer" => "reviewer",
        _ => "worker",
    };
    let _ = write!(
        out,
        "<g class=\"lane {kind}\" data-lane=\"{}\"",
        escape(name)
    );
    if let Some(subtask) = &lane.subtask {
        let _ = write!(out, " data-lane-subtask=\"{}\"", escape(subtask));
    }
    out.push('>');
    let text = format!(
        "<text class=\"lane-name\" x=\"8\" y=\"{:.1}\">{}</text>",
        mid + 4.0,
        escape(&truncate(name, 22))
    );
    if lane.subtask.is_some() {
        let _ = write!(
            out,
            "<a href=\"#subtask-{}\">{text}</a>",
            escape(&lane.label)
        );
    } else {
        out.push_str(&text);
    }
}

/// The bar of the lane's running time; open-ended (to `end_ms`) when no end was recorded.
fn lane_bar(out: &mut String, lane: &Lane, name: &str, mid: f64, scale: &Scale, end_ms: u64) {
    let (bar_end, open) = match lane.ended_ms {
        Some(ended) => (ended.max(lane.started_ms), false),
        None => (end_ms.max(lane.started_ms), true),
    };
    let x1 = scale.x(lane.started_ms);
    let bar_width = (scale.x(bar_end) - x1).max(2.0);
    let ran = if open {
        format!(
            "started at {}, no end recorded (still running, or grove stopped)",
            scale.at(lane.started_ms)
        )
    } else {
        format!(
            "ran {} from {} to {}",
            duration(bar_end - lane.started_ms),
            scale.at(lane.started_ms),
            scale.at(bar_end)
        )
    };
    let _ = write!(
        out,
        "<rect class=\"bar{}\" x=\"{x1:.1}\" y=\"{:.1}\" width=\"{bar_width:.1}\" \
         height=\"{BAR_HEIGHT}\" rx=\"3\"><title>{}: {ran}; {} model turns</title></rect>",
        if open { " open" } else { "" },
        mid - BAR_HEIGHT / 2.0,
        escape(name),
        lane.turns
    );
}

/// One run of the project's check: a thin bar across the lane, where the check ran (a
/// subtask's between its worker and its reviewer).
fn check_svg(out: &mut String, check: &CheckSpan, mid: f64, scale: &Scale) {
    let x1 = scale.x(check.started_ms);
    let width = (scale.x(check.ended_ms) - x1).max(2.0);
    let status = if check.passed { "passed" } else { "failed" };
    let _ = write!(
        out,
        "<rect class=\"check {status}\" data-check=\"{}\" x=\"{x1:.1}\" y=\"{:.1}\" \
         width=\"{width:.1}\" height=\"{CHECK_HEIGHT}\"><title>check on {} {status} in {} \
         from {} to {}</title></rect>",
        escape(&check.on),
        mid - CHECK_HEIGHT / 2.0,
        escape(&check.on),
        duration(check.ended_ms.saturating_sub(check.started_ms)),
        scale.at(check.started_ms),
        scale.at(check.ended_ms)
    );
}

/// One verdict, merge, conflict or failure marker on a lane.
fn marker_svg(out: &mut String, label: &str, marker: &Marker, mid: f64, scale: &Scale) {
    let x = scale.x(marker.ts_ms);
    let title = format!(
        "<title>{} {} at {}</title>",
        escape(label),
        marker.kind.as_str(),
        scale.at(marker.ts_ms)
    );
    let class = match marker.kind {
        MarkerKind::Approved => "approved",
        MarkerKind::Rejected => "rejected",
        MarkerKind::Merged => "merged",
        MarkerKind::Conflict => "conflict",
        MarkerKind::Failed => "failed",
    };
    let shape = match marker.kind {
        MarkerKind::Approved | MarkerKind::Rejected => {
            format!("<circle cx=\"{x:.1}\" cy=\"{mid:.1}\" r=\"6\"/>")
        }
        MarkerKind::Merged => {
            format!("<path d=\"M{x:.1} {:.1} l6 6 l-6 6 l-6 -6 z\"/>", mid - 6.0)
        }
        MarkerKind::Conflict => format!("<path d=\"M{x:.1} {:.1} l6 11 h-12 z\"/>", mid - 6.0),
        MarkerKind::Failed => format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\"/>",
            x - 5.0,
            mid - 5.0
        ),
    };
    let _ = write!(
        out,
        "<g class=\"marker {class}\" data-marker=\"{class}\">{title}{shape}</g>"
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::report::{Marker, RunEvent};

    fn lane(role: &str, label: &str, started: u64, ended: Option<u64>) -> Lane {
        Lane {
            role: role.into(),
            label: label.into(),
            subtask: (role != "lead").then(|| label.to_owned()),
            queued_ms: None,
            waited_for: "a slot".into(),
            started_ms: started,
            ended_ms: ended,
            turn_ms: vec![],
            turns: 0,
            markers: vec![],
            checks: vec![],
        }
    }

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(
            [850, 12_345, 245_000, 3_720_000].map(duration),
            ["850ms", "12.3s", "4m 05s", "1h 02m"]
        );
        assert_eq!(tick_step_ms(9_000), 1_000);
        assert_eq!(tick_step_ms(95_000), 10_000);
        assert_eq!(tick_step_ms(900), 100);
        assert_eq!(tick_step_ms(0), 100);
    }

    #[test]
    fn bars_ticks_and_markers_sit_at_their_times() {
        let mut worker = lane("worker", "S1", 1_000, Some(3_000));
        worker.turn_ms = vec![2_000];
        worker.markers = vec![Marker {
            ts_ms: 3_000,
            kind: MarkerKind::Merged,
        }];
        let timeline = Timeline {
            start_ms: 1_000,
            end_ms: 5_000,
            lanes: vec![lane("lead", "lead", 1_000, None), worker],
            events: vec![RunEvent {
                ts_ms: 5_000,
                label: "finished".into(),
            }],
        };
        let svg = svg(&timeline);
        let plot = WIDTH - LABEL_WIDTH - RIGHT_PAD;
        let x = |fraction: f64| format!("{:.1}", LABEL_WIDTH + fraction * plot);
        assert!(
            svg.contains(&format!(
                "<rect class=\"bar open\" x=\"{}\" y=\"37.0\" width=\"{:.1}\"",
                x(0.0),
                plot
            )),
            "a lane with no end runs open to the chart's end: {svg}"
        );
        assert!(
            svg.contains(&format!(
                "<line class=\"turn\" x1=\"{0}\" x2=\"{0}\"",
                x(0.25)
            )),
            "the turn tick sits a quarter in: {svg}"
        );
        assert!(svg.contains(&format!("<path d=\"M{} ", x(0.5))), "{svg}");
        assert!(svg.contains("<title>S1 merged at +2.0s</title>"), "{svg}");
        assert!(
            svg.contains("href=\"#subtask-S1\""),
            "lanes link to their subtask"
        );
    }

    #[test]
    fn a_check_is_drawn_where_it_ran_and_a_wait_says_what_it_waited_for() {
        let mut worker = lane("worker", "S1", 2_000, Some(3_000));
        worker.queued_ms = Some(1_000);
        worker.waited_for = "the check on the base".into();
        worker.checks = vec![CheckSpan {
            on: "S1".into(),
            started_ms: 3_000,
            ended_ms: 4_000,
            passed: false,
        }];
        let timeline = Timeline {
            start_ms: 1_000,
            end_ms: 5_000,
            lanes: vec![worker],
            events: vec![],
        };
        let svg = svg(&timeline);
        let plot = WIDTH - LABEL_WIDTH - RIGHT_PAD;
        let x = |fraction: f64| format!("{:.1}", LABEL_WIDTH + fraction * plot);
        assert!(
            svg.contains(&format!(
                "<rect class=\"check failed\" data-check=\"S1\" x=\"{}\" y=\"42.0\" \
                 width=\"{:.1}\" height=\"4\"><title>check on S1 failed in 1.0s from +2.0s \
                 to +3.0s</title></rect>",
                x(0.5),
                plot / 4.0
            )),
            "the check fills the gap between the worker's end and its reviewer: {svg}"
        );
        assert!(
            svg.contains("<title>worker S1 waiting for the check on the base from +0ms to +1.0s"),
            "the wait before the worker says what it waited for: {svg}"
        );
    }
}
