//! Dollars for people: the estimate before a run (one line, or the dry run's block per
//! role with what it assumed) and the cost line of the end table.
//!
//! This file owns how costs read on the terminal; it must never compute one (the
//! library prices, this prints).

use grove::prices::format_usd;
use grove::run::RunReport;
use grove::run::estimate::Estimate;
use grove::text::printable;

/// `$0.40–$2.10`, or `unknown` for a range nothing was priced in.
fn range(low: Option<f64>, high: Option<f64>) -> String {
    match (low, high) {
        (Some(low), Some(high)) => format!("{}–{}", format_usd(low), format_usd(high)),
        _ => "unknown (no price)".to_owned(),
    }
}

/// `, not counted: local-model (no price; --prices FILE)` when a model has no price.
fn unpriced(models: &[String]) -> String {
    if models.is_empty() {
        return String::new();
    }
    format!(
        ", not counted: {} (no price; --prices FILE)",
        models.join(", ")
    )
}

/// The one line `grove run` starts with on a terminal.
pub fn estimate_line(estimate: &Estimate) -> String {
    let [few, many] = estimate.subtasks;
    let subtasks = if few == many {
        format!("{few} subtask{}", if few == 1 { "" } else { "s" })
    } else {
        format!("{few}–{many} subtasks")
    };
    printable(&format!(
        "grove: estimate {} for {subtasks}{} (`grove run --dry-run` prices the plan)",
        range(Some(estimate.low_usd), Some(estimate.high_usd)),
        unpriced(&estimate.unpriced)
    ))
    .into_owned()
}

/// The dry run's estimate under its plan: per role, the total, and what it assumed.
pub fn estimate_block(estimate: &Estimate, plan_usd: Option<f64>) -> Vec<String> {
    let mut lines = vec![
        String::new(),
        "Estimated cost of running this plan:".to_owned(),
    ];
    for role in &estimate.roles {
        let [few, many] = role.agents;
        let agents = if few == many {
            format!("{few}×")
        } else {
            format!("{few}–{many}×")
        };
        lines.push(format!(
            "  {:<9} {:<20} {:>6} {:>3}–{:<3} turns  {}",
            role.role,
            role.model,
            agents,
            role.turns[0],
            role.turns[1],
            range(role.low_usd, role.high_usd)
        ));
    }
    lines.push(format!(
        "  total     {}{}",
        range(Some(estimate.low_usd), Some(estimate.high_usd)),
        unpriced(&estimate.unpriced)
    ));
    if let Some(usd) = plan_usd {
        lines.push(format!("  (this plan itself cost {})", format_usd(usd)));
    }
    lines.push("It assumes:".to_owned());
    lines.extend(estimate.assumptions.iter().map(|a| format!("  - {a}")));
    lines
        .into_iter()
        .map(|line| printable(&line).into_owned())
        .collect()
}

/// `cost: $1.23 (lead $0.40) of the $5.00 budget; estimated $0.80–$3.10`, for the end
/// table.
pub fn cost_line(report: &RunReport) -> String {
    let cost = &report.cost;
    let mut line = format!("cost: {}", format_usd(cost.total_usd));
    if let Some(lead) = cost.lead_usd {
        line.push_str(&format!(" (lead {})", format_usd(lead)));
    }
    if let Some(budget) = cost.budget_usd {
        line.push_str(&format!(" of the {} budget", format_usd(budget)));
    }
    line.push_str(&unpriced(&cost.unpriced));
    if let Some(estimate) = &report.estimate {
        line.push_str(&format!(
            "; estimated {}",
            range(Some(estimate.low_usd), Some(estimate.high_usd))
        ));
    }
    printable(&line).into_owned()
}

/// A subtask's cost for the table's column: `$0.0312`, or `?` without a price.
pub fn cell(usd: Option<f64>) -> String {
    usd.map_or_else(|| "?".to_owned(), format_usd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use grove::run::estimate::RoleEstimate;

    #[test]
    fn the_first_line_gives_the_range_and_names_what_it_cannot_price() {
        let role = |role: &str, model: &str, usd: Option<(f64, f64)>| RoleEstimate {
            role: role.to_owned(),
            model: model.to_owned(),
            agents: [1, 4],
            turns: [5, 15],
            input_tokens: [1, 2],
            output_tokens: [1, 2],
            low_usd: usd.map(|(low, _)| low),
            high_usd: usd.map(|(_, high)| high),
        };
        let estimate = Estimate {
            subtasks: [1, 4],
            planned: false,
            repository_files: 3,
            repository_bytes: 300,
            roles: vec![
                role("lead", "claude-sonnet-5-5", Some((0.02, 0.2))),
                role("worker", "local\u{1b}[31m", None),
            ],
            low_usd: 0.02,
            high_usd: 0.2,
            unpriced: vec!["local\u{1b}[31m".to_owned()],
            assumptions: vec!["a guess".to_owned()],
        };
        assert_eq!(
            estimate_line(&estimate),
            "grove: estimate $0.02–$0.20 for 1–4 subtasks, not counted: local\\x1b[31m (no \
             price; --prices FILE) (`grove run --dry-run` prices the plan)"
        );
        assert_eq!(
            estimate_block(&estimate, None)[3],
            "  worker    local\\x1b[31m             1–4×   5–15  turns  unknown (no price)",
            "an unpriced role is unknown, its name escaped"
        );
        assert_eq!(
            (cell(Some(0.0312)), cell(None)),
            ("$0.0312".into(), "?".into())
        );
    }
}
