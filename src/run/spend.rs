//! The run's money: every model turn of the run's own agents priced as it arrives, the
//! total told to the user, and the run paused at its budget in dollars (`--budget-usd`).
//!
//! This file owns the count and the pause at the cap. The count lives in a model client
//! that wraps the run's ([`MeteredModel`]), so every role is counted whoever runs it,
//! and no request leaves once the budget is spent. Under a budget a request leaves only
//! when it is alone, or when what is spent, what the requests in flight may cost and
//! what it may cost (its whole text as input at the dearest input rate, `max_tokens` of
//! output) stay within the budget: so a run passes its budget by at most one turn, the
//! one that went alone, and near the budget its requests go one at a time.
//! It must never price a model the table does not know: such turns are named, never
//! counted as free, and under a budget they pause the run.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::git::RunId;
use crate::ledger::Ledger;
use crate::model::{Model, ModelError, ModelNotice, Request, Response};
use crate::prices::{Cost, PriceTable, Usd, format_usd};
use crate::run::context::{Pause, lock};
use crate::store::spend::{self, Spent};

/// How a pause at the money budget starts: its reason is whole (what was spent, what to
/// run).
pub(crate) const BUDGET_SPENT: &str = "the run's budget of";

/// The run's spending, shared by the model clients of every role.
pub(crate) struct RunSpend {
    cap: Option<Usd>,
    prices: PriceTable,
    spent: Mutex<Spent>,
    /// What the requests in flight may cost at most, and how many there are.
    in_flight: Mutex<(f64, usize)>,
    /// Told when a request in flight ends: a held one may go.
    landed: tokio::sync::Notify,
    run: RunId,
    run_dir: std::path::PathBuf,
    pause: Pause,
    cancel: CancellationToken,
    events: EventSink,
}

/// Where the run is and how it stops, for [`RunSpend::new`].
pub(crate) struct SpendSetup {
    pub(crate) cap: Option<Usd>,
    pub(crate) prices: PriceTable,
    pub(crate) run: RunId,
    pub(crate) run_dir: std::path::PathBuf,
    pub(crate) pause: Pause,
    pub(crate) cancel: CancellationToken,
    pub(crate) events: EventSink,
}

impl RunSpend {
    /// The spending of a run, starting from what its earlier processes spent.
    pub(crate) fn new(setup: SpendSetup) -> Arc<Self> {
        let spent = spend::read(&setup.run_dir);
        let this = Arc::new(Self {
            cap: setup.cap,
            prices: setup.prices,
            spent: Mutex::new(spent),
            in_flight: Mutex::new((0.0, 0)),
            landed: tokio::sync::Notify::new(),
            run: setup.run,
            run_dir: setup.run_dir,
            pause: setup.pause,
            cancel: setup.cancel,
            events: setup.events,
        });
        let earlier = lock(&this.spent).clone();
        if earlier.usd > 0.0 || !earlier.unpriced.is_empty() {
            this.tell(&earlier);
        }
        this
    }

    /// What the run spent so far.
    pub(crate) fn spent(&self) -> Spent {
        lock(&self.spent).clone()
    }

    /// Counts one turn of `model` and pauses the run when it reached the budget.
    fn record(&self, model: &str, usage: &crate::model::Usage) {
        let mut ledger = Ledger::default();
        ledger.record(usage);
        let turn = self.prices.cost(model, &ledger);
        let mut spent = lock(&self.spent);
        match turn {
            Cost::Usd(usd) => spent.usd += usd,
            Cost::UnknownModel | Cost::MissingRate { .. } => {
                if !spent.unpriced.iter().any(|m| m == model) {
                    spent.unpriced.push(model.to_owned());
                }
            }
        }
        let now = spent.clone();
        // Under the lock: two turns ending together must not leave the older figure.
        let written = spend::write(&self.run_dir, &now);
        drop(spent);
        if let Err(error) = written {
            self.events.emit(Event::Note {
                message: format!(
                    "could not record what the run spent ({error}); a resume counts its \
                     budget from the turns it takes"
                ),
            });
        }
        self.tell(&now);
        if let Some(reason) = self.over_cap(&now, turn.usd()) {
            self.pause.set(reason);
            self.cancel.cancel();
        }
    }

    fn tell(&self, spent: &Spent) {
        self.events.emit(Event::Spent {
            usd: spent.usd,
            cap_usd: self.cap.map(Usd::dollars),
            unpriced: spent.unpriced.clone(),
        });
    }

    /// The pause's reason once `spent` reached the budget (or spent on a model without a
    /// price under one); `last_turn` is the cost of the turn that reached it.
    fn over_cap(&self, spent: &Spent, last_turn: Option<f64>) -> Option<String> {
        let cap = self.cap?;
        let resume = format!(
            "Nothing was applied; `grove resume {} --budget-usd HIGHER` finishes the run",
            self.run
        );
        if !spent.unpriced.is_empty() {
            return Some(format!(
                "{BUDGET_SPENT} {cap} cannot be counted: {} has no price (give its rates \
                 with --prices FILE). Spent {} on priced turns. {resume}",
                spent.unpriced.join(", "),
                format_usd(spent.usd)
            ));
        }
        (spent.usd >= cap.dollars()).then(|| {
            let turn = last_turn
                .map(|usd| format!(" (the turn that reached it cost {})", format_usd(usd)))
                .unwrap_or_default();
            format!(
                "{BUDGET_SPENT} {cap} is spent: {} so far{turn}. {resume}",
                format_usd(spent.usd)
            )
        })
    }
}

impl RunSpend {
    /// The most `request` may cost: every byte of it an input token (a token is more than
    /// a byte) at the model's dearest input rate, and `max_tokens` of output; `None`
    /// without a budget (nothing is held) or a price (the count pauses the run).
    fn most(&self, request: &Request) -> Option<f64> {
        self.cap?;
        let (_, price) = self.prices.lookup(&request.model)?;
        let bytes = serde_json::to_vec(request).map_or(0, |body| body.len());
        let input = [price.cache_write, price.cache_write_1h]
            .into_iter()
            .flatten()
            .fold(price.input, f64::max);
        Some((bytes as f64 * input + f64::from(request.max_tokens) * price.output) / 1_000_000.0)
    }

    /// Waits until `most` may be spent: alone, or within the budget with what is in
    /// flight. `false` when the budget is spent (the run is paused) or `cancel` fired.
    async fn admit(&self, most: f64, cancel: &CancellationToken) -> bool {
        loop {
            let landed = self.landed.notified();
            {
                let spent = self.spent();
                if let Some(reason) = self.over_cap(&spent, None) {
                    self.pause.set(reason);
                    self.cancel.cancel();
                    return false;
                }
                let cap = self.cap.map_or(f64::INFINITY, Usd::dollars);
                let mut flight = lock(&self.in_flight);
                if flight.1 == 0 || spent.usd + flight.0 + most <= cap {
                    flight.0 += most;
                    flight.1 += 1;
                    return true;
                }
            }
            tokio::select! {
                () = landed => {}
                () = cancel.cancelled() => return false,
            }
        }
    }

    /// A request admitted with `most` has ended (answered or not).
    fn landed(&self, most: f64) {
        let mut flight = lock(&self.in_flight);
        flight.0 = (flight.0 - most).max(0.0);
        flight.1 = flight.1.saturating_sub(1);
        drop(flight);
        self.landed.notify_waiters();
    }
}

/// A request admitted under the budget, until it ends.
struct Flight<'a> {
    spend: &'a RunSpend,
    most: f64,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.spend.landed(self.most);
    }
}

/// A model client whose every turn [`RunSpend`] counts; it sends nothing once the run's
/// budget is spent.
pub(crate) struct MeteredModel {
    pub(crate) inner: Arc<dyn Model>,
    pub(crate) spend: Arc<RunSpend>,
}

#[async_trait]
impl Model for MeteredModel {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn complete(
        &self,
        request: &Request,
        cancel: &CancellationToken,
        on_notice: &(dyn Fn(ModelNotice) + Send + Sync),
    ) -> Result<Response, ModelError> {
        let Some(most) = self.spend.most(request) else {
            // No budget, or no price: counted, never held (without a price under a budget
            // the first answer pauses the run).
            if let Some(reason) = self.spend.over_cap(&self.spend.spent(), None) {
                self.spend.pause.set(reason);
                self.spend.cancel.cancel();
                return Err(ModelError::Cancelled);
            }
            let response = self.inner.complete(request, cancel, on_notice).await?;
            self.spend.record(&request.model, &response.usage);
            return Ok(response);
        };
        // A resume with the same budget, or a turn that would start as others spend it.
        if !self.spend.admit(most, cancel).await {
            return Err(ModelError::Cancelled);
        }
        // Landed however this ends, the future dropped by a cancelled agent included: a
        // request never held in flight would hold the others back for ever.
        let _flight = Flight {
            spend: &self.spend,
            most,
        };
        let response = self.inner.complete(request, cancel, on_notice).await?;
        self.spend.record(&request.model, &response.usage);
        Ok(response)
    }
}
