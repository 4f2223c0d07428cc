//! The run's money: every model turn of the run's own agents priced as it arrives, the
//! total told to the user, and the run paused at its budget in dollars (`--budget-usd`).
//!
//! This file owns the count and the pause at the cap. The count lives in a model client
//! that wraps the run's ([`MeteredModel`]), so every role is counted whoever runs it,
//! and no request leaves once the budget is spent: a run goes over its budget by at most
//! the turns that were already in flight when one turn reached it (cancelled at once).
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
        let before = self.spend.spent();
        if let Some(reason) = self.spend.over_cap(&before, None) {
            // A resume with the same budget, or a turn that starts as another spends it.
            self.spend.pause.set(reason);
            self.spend.cancel.cancel();
            return Err(ModelError::Cancelled);
        }
        let response = self.inner.complete(request, cancel, on_notice).await?;
        self.spend.record(&request.model, &response.usage);
        Ok(response)
    }
}
