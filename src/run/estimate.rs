//! What a run will cost, before it runs: a range in US dollars per role and in total,
//! from the number of subtasks (the plan's, or a guess), the repository's size and the
//! models' prices, with every assumption it made said in words.
//!
//! This file owns the estimate's model of a run. It is arithmetic only: it never runs
//! a model, and it must never present a model without a price as free (its role's range
//! is unknown and it is named).

use serde::Serialize;

use crate::agent::external::WorkerBackend;
use crate::git::{Repo, TreeSize};
use crate::ledger::Ledger;
use crate::prices::{ModelPrice, PriceTable};
use crate::settings::options::{ModelNames, TurnCaps};

/// The subtasks `grove run` assumes when there is no plan to count them from.
pub const GUESSED_SUBTASKS: (u32, u32) = (1, 4);

/// Tokens of the system prompt, tools and project rules every request starts with.
const PROMPT_TOKENS: u64 = 3_000;

/// What an estimate is made from.
#[derive(Debug, Clone)]
pub struct EstimateInput<'a> {
    /// The fewest and most subtasks the run may have.
    pub subtasks: (u32, u32),
    /// Whether `subtasks` is the plan's count (a dry run) rather than a guess.
    pub planned: bool,
    pub repository: TreeSize,
    pub models: &'a ModelNames,
    pub prices: &'a PriceTable,
    pub max_turns: TurnCaps,
    pub worker_backend: &'a WorkerBackend,
}

/// A run's cost before it runs (`estimate` of `grove run --json` and `--dry-run --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The fewest and most subtasks it assumed.
    pub subtasks: [u32; 2],
    pub planned: bool,
    pub repository_files: u64,
    pub repository_bytes: u64,
    pub roles: Vec<RoleEstimate>,
    /// The sum of the priced roles' low and high ends.
    pub low_usd: f64,
    pub high_usd: f64,
    /// Models without a price: their roles are not in the sums.
    pub unpriced: Vec<String>,
    /// What the figures assume, one sentence each.
    pub assumptions: Vec<String>,
}

/// One role's part of an [`Estimate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoleEstimate {
    pub role: String,
    pub model: String,
    /// How many agents of the role, at the low and the high end.
    pub agents: [u32; 2],
    /// Model turns per agent.
    pub turns: [u32; 2],
    /// Input tokens in all (cache reads and writes included) and output tokens in all.
    pub input_tokens: [u64; 2],
    pub output_tokens: [u64; 2],
    /// `None` when the model has no price.
    pub low_usd: Option<f64>,
    pub high_usd: Option<f64>,
}

/// One end of a role's range: how many agents, their turns, the tokens of one turn.
#[derive(Debug, Clone, Copy)]
struct Shape {
    agents: u32,
    turns: u32,
    input_per_turn: u64,
    output_per_turn: u64,
    /// Shares of a turn's input read from and written to the prompt cache.
    cache_read: f64,
    cache_write: f64,
}

impl Shape {
    fn ledger(self) -> Ledger {
        let turns = u64::from(self.agents) * u64::from(self.turns);
        let input = turns * self.input_per_turn;
        let read = (input as f64 * self.cache_read) as u64;
        let write = (input as f64 * self.cache_write) as u64;
        Ledger {
            steps: u32::try_from(turns).unwrap_or(u32::MAX),
            input_tokens: input - read - write,
            output_tokens: turns * self.output_per_turn,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }
}

/// The size of `repo`'s HEAD tree; empty when it cannot be read (the estimate then says
/// 0 files, and counts what a prompt alone costs).
pub async fn repository_size(repo: &Repo) -> TreeSize {
    match repo.resolve("HEAD") {
        Ok(head) => repo.tree_size(head).await.unwrap_or_default(),
        Err(_) => TreeSize::default(),
    }
}

/// The estimate of a run shaped by `input`.
pub fn estimate(input: &EstimateInput<'_>) -> Estimate {
    let (few, many) = (input.subtasks.0, input.subtasks.1.max(input.subtasks.0));
    // What agents read of the repository, in tokens (4 bytes a token): a small
    // repository is read whole, a large one only in the parts the task touches.
    let repo_tokens = input.repository.bytes / 4;
    let read_low = repo_tokens.min(4_000);
    let read_high = repo_tokens.min(24_000);
    let low_cache = (0.7, 0.1);
    let high_cache = (0.3, 0.2);
    let shape = |agents, turns: u32, cap: u32, input, output, (read, write)| Shape {
        agents,
        turns: turns.min(cap.max(1)),
        input_per_turn: PROMPT_TOKENS + input,
        output_per_turn: output,
        cache_read: read,
        cache_write: write,
    };
    let caps = input.max_turns;
    let lead = (
        shape(
            1,
            few / 2 + 2,
            caps.lead,
            1_500 + 600 * u64::from(few) / 2,
            300,
            low_cache,
        ),
        shape(
            1,
            many + 4,
            caps.lead,
            4_000 + read_high / 2 + 800 * u64::from(many),
            1_200,
            high_cache,
        ),
    );
    let worker = (
        shape(few, 5, caps.worker, 1_000 + read_low / 2, 250, low_cache),
        shape(
            many,
            15,
            caps.worker,
            4_000 + read_high / 2,
            900,
            high_cache,
        ),
    );
    let reviewer = (
        shape(few, 2, caps.reviewer, 2_000, 300, low_cache),
        shape(
            many,
            5,
            caps.reviewer,
            10_000 + read_high / 4,
            800,
            high_cache,
        ),
    );
    let worker_model = match input.worker_backend {
        WorkerBackend::Builtin => input.models.worker.clone(),
        other => other.name().to_owned(),
    };
    let roles = vec![
        role("lead", &input.models.lead, lead, input.prices),
        role("worker", &worker_model, worker, input.prices),
        role("reviewer", &input.models.reviewer, reviewer, input.prices),
    ];
    let mut unpriced: Vec<String> = Vec::new();
    for role in &roles {
        if role.low_usd.is_none() && !unpriced.contains(&role.model) {
            unpriced.push(role.model.clone());
        }
    }
    Estimate {
        subtasks: [few, many],
        planned: input.planned,
        repository_files: input.repository.files,
        repository_bytes: input.repository.bytes,
        low_usd: roles.iter().filter_map(|r| r.low_usd).sum(),
        high_usd: roles.iter().filter_map(|r| r.high_usd).sum(),
        roles,
        unpriced,
        assumptions: assumptions(input, repo_tokens, few, many),
    }
}

fn role(name: &str, model: &str, (low, high): (Shape, Shape), prices: &PriceTable) -> RoleEstimate {
    let (low_ledger, high_ledger) = (low.ledger(), high.ledger());
    let price = prices.lookup(model).map(|(_, price)| *price);
    let cost = |ledger: &Ledger| price.map(|price| priced(&price, ledger));
    RoleEstimate {
        role: name.to_owned(),
        model: model.to_owned(),
        agents: [low.agents, high.agents],
        turns: [low.turns, high.turns],
        input_tokens: [input_of(&low_ledger), input_of(&high_ledger)],
        output_tokens: [low_ledger.output_tokens, high_ledger.output_tokens],
        low_usd: cost(&low_ledger),
        high_usd: cost(&high_ledger),
    }
}

fn input_of(ledger: &Ledger) -> u64 {
    ledger.input_tokens + ledger.cache_read_tokens + ledger.cache_write_tokens
}

/// `ledger` at `price`, a cache rate the model lacks taken as its input rate (OpenAI
/// bills no cache write: what it caches is ordinary input).
fn priced(price: &ModelPrice, ledger: &Ledger) -> f64 {
    let whole = ModelPrice {
        cache_read: Some(price.cache_read.unwrap_or(price.input)),
        cache_write: Some(price.cache_write.unwrap_or(price.input)),
        ..*price
    };
    whole.cost(ledger).usd().unwrap_or_default()
}

fn assumptions(input: &EstimateInput<'_>, repo_tokens: u64, few: u32, many: u32) -> Vec<String> {
    let subtasks = if input.planned {
        format!("{few} subtasks, as the plan has them (one reviewer each, no rework)")
    } else {
        format!(
            "{few} to {many} subtasks (a guess: `grove run --dry-run` counts the plan's), \
             one reviewer each, no rework"
        )
    };
    vec![
        subtasks,
        format!(
            "the repository at HEAD: {} files, {} bytes (~{repo_tokens} tokens); an agent \
             reads up to {} of them",
            input.repository.files,
            input.repository.bytes,
            if repo_tokens > 24_000 {
                "4,000 to 24,000 tokens"
            } else {
                "all"
            }
        ),
        "a worker takes 5 to 15 turns, a reviewer 2 to 5, the lead 2 + half the subtasks \
         to 4 + all of them (each within its turn cap)"
            .to_owned(),
        "every request carries ~3,000 tokens of prompt and tools, and its context grows \
         with what was read; 250 to 1,200 output tokens a turn"
            .to_owned(),
        "70% (low) to 30% (high) of input read from the prompt cache, 10% to 20% written \
         to it at the 5-minute rate"
            .to_owned(),
        format!(
            "list prices of the price table{}",
            if input.prices.overrides.is_empty() {
                String::new()
            } else {
                format!(
                    " (with {})",
                    input
                        .prices
                        .overrides
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn names(model: &str) -> ModelNames {
        ModelNames {
            lead: model.to_owned(),
            worker: model.to_owned(),
            reviewer: model.to_owned(),
        }
    }

    #[test]
    fn a_range_grows_with_subtasks_and_an_unpriced_model_is_named_not_free() {
        let prices = PriceTable::builtin();
        let models = names("claude-sonnet-5-5");
        let input = |subtasks| EstimateInput {
            subtasks,
            planned: true,
            repository: TreeSize {
                files: 40,
                bytes: 200_000,
            },
            models: &models,
            prices: &prices,
            max_turns: TurnCaps::default(),
            worker_backend: &WorkerBackend::Builtin,
        };
        let two = estimate(&input((2, 2)));
        let eight = estimate(&input((8, 8)));
        assert!(
            two.low_usd > 0.0 && two.low_usd < two.high_usd,
            "a range, low below high: {two:?}"
        );
        assert!(
            eight.low_usd > two.low_usd && eight.high_usd > two.high_usd,
            "more subtasks cost more: {two:?} {eight:?}"
        );
        let sum: f64 = eight.roles.iter().filter_map(|r| r.high_usd).sum();
        assert!(
            (sum - eight.high_usd).abs() < 1e-12,
            "the total is the roles' sum"
        );

        let local = names("local-model");
        let unpriced = estimate(&EstimateInput {
            models: &local,
            ..input((2, 2))
        });
        assert_eq!(
            (
                unpriced.unpriced,
                unpriced.low_usd,
                unpriced.roles[0].low_usd
            ),
            (vec!["local-model".to_owned()], 0.0, None),
            "an unknown model's share is unknown, named, and not in the sum"
        );
    }
}
