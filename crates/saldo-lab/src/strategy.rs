//! The strategies the lab and the bench race: every served strategy of `saldo`
//! ([`StrategyName`]) plus the naive ones that exist only here ([`LabStrategy`]), and the
//! transfer strategies ([`LabTransfer`]: saldo's `ordered` plus the naive arrival order).

use std::time::Duration;

use saldo::error::Error;
use saldo::ledger::{Ledger, Transfer, TransferRequest, TransferStrategy};
use saldo::stock::{build, StockEngine, Store, StrategyConfig, StrategyName};

use crate::naive;

/// A stock strategy the lab can race: a served one, or a naive one (never safe, never served).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LabStrategy {
    Atomic,
    Pessimistic,
    Optimistic,
    Batched,
    NaiveSubtract,
    NaiveOverwrite,
    NaiveReplay,
}

impl LabStrategy {
    /// Every strategy, safe ones first, in the order the lab prints them.
    pub const ALL: &'static [LabStrategy] = &[
        LabStrategy::Atomic,
        LabStrategy::Pessimistic,
        LabStrategy::Optimistic,
        LabStrategy::Batched,
        LabStrategy::NaiveSubtract,
        LabStrategy::NaiveOverwrite,
        LabStrategy::NaiveReplay,
    ];

    pub fn parse(s: &str) -> Option<LabStrategy> {
        LabStrategy::ALL.iter().copied().find(|n| n.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LabStrategy::Atomic => StrategyName::Atomic.as_str(),
            LabStrategy::Pessimistic => StrategyName::Pessimistic.as_str(),
            LabStrategy::Optimistic => StrategyName::Optimistic.as_str(),
            LabStrategy::Batched => StrategyName::Batched.as_str(),
            LabStrategy::NaiveSubtract => "naive-subtract",
            LabStrategy::NaiveOverwrite => "naive-overwrite",
            LabStrategy::NaiveReplay => "naive-replay",
        }
    }

    /// The served strategy of the same name, if this is one.
    pub fn served(self) -> Option<StrategyName> {
        match self {
            LabStrategy::Atomic => Some(StrategyName::Atomic),
            LabStrategy::Pessimistic => Some(StrategyName::Pessimistic),
            LabStrategy::Optimistic => Some(StrategyName::Optimistic),
            LabStrategy::Batched => Some(StrategyName::Batched),
            LabStrategy::NaiveSubtract | LabStrategy::NaiveOverwrite | LabStrategy::NaiveReplay => {
                None
            }
        }
    }

    /// True for strategies that keep every invariant under concurrency: the served ones.
    pub fn is_safe(self) -> bool {
        self.served().is_some()
    }

    /// Builds the strategy over `store`: a served one through `saldo::stock::build`, a naive
    /// one here. `think` is how long a naive taker waits between its read and its write (the
    /// widened window; at most [`naive::stock::MAX_THINK`]).
    pub fn build(self, store: Store, config: &StrategyConfig, think: Duration) -> StockEngine {
        let trace = config.trace.clone();
        match self {
            LabStrategy::Atomic => build(StrategyName::Atomic, store, config),
            LabStrategy::Pessimistic => build(StrategyName::Pessimistic, store, config),
            LabStrategy::Optimistic => build(StrategyName::Optimistic, store, config),
            LabStrategy::Batched => build(StrategyName::Batched, store, config),
            LabStrategy::NaiveSubtract => {
                StockEngine::new(store, naive::stock::NaiveSubtract { think, trace })
            }
            LabStrategy::NaiveOverwrite => {
                StockEngine::new(store, naive::stock::NaiveOverwrite { think, trace })
            }
            LabStrategy::NaiveReplay => {
                let replay = naive::stock::NaiveReplay::new(store.clone());
                StockEngine::new(store, replay)
            }
        }
    }
}

impl From<StrategyName> for LabStrategy {
    fn from(name: StrategyName) -> Self {
        match name {
            StrategyName::Atomic => LabStrategy::Atomic,
            StrategyName::Pessimistic => LabStrategy::Pessimistic,
            StrategyName::Optimistic => LabStrategy::Optimistic,
            StrategyName::Batched => LabStrategy::Batched,
        }
    }
}

impl std::fmt::Display for LabStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transfer strategy the lab can race: saldo's `ordered` and `batched`, or the naive arrival
/// order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabTransfer {
    /// Id-ordered locking: both rows locked in ascending id by one statement, then the decision.
    Ordered,
    /// Group commit for a hot account (`saldo::ledger::batched`); a lone transfer runs as
    /// `ordered`.
    Batched,
    /// Debit then credit in arrival order; crossed transfers deadlock (40P01).
    Naive,
}

impl LabTransfer {
    /// Every strategy, the safe one first.
    pub const ALL: &'static [LabTransfer] = &[
        LabTransfer::Ordered,
        LabTransfer::Batched,
        LabTransfer::Naive,
    ];

    pub fn parse(s: &str) -> Option<LabTransfer> {
        LabTransfer::ALL.iter().copied().find(|t| t.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LabTransfer::Ordered => TransferStrategy::Ordered.as_str(),
            LabTransfer::Batched => TransferStrategy::Batched.as_str(),
            LabTransfer::Naive => "naive",
        }
    }

    /// The served strategy behind it; `None` for the naive one.
    pub fn served(self) -> Option<TransferStrategy> {
        match self {
            LabTransfer::Ordered => Some(TransferStrategy::Ordered),
            LabTransfer::Batched => Some(TransferStrategy::Batched),
            LabTransfer::Naive => None,
        }
    }

    /// True for the strategies that cannot deadlock against themselves (the served ones).
    pub fn is_safe(self) -> bool {
        self.served().is_some()
    }

    /// Moves the money with this strategy through `ledger` (validation, idempotency, journal
    /// and retry are the ledger's either way).
    pub async fn transfer(
        self,
        ledger: &Ledger,
        request: &TransferRequest,
    ) -> Result<Transfer, Error> {
        match self.served() {
            Some(served) => ledger.transfer(served, request).await,
            None => {
                ledger
                    .transfer_with(&naive::ledger::NaiveTransfer, request)
                    .await
            }
        }
    }
}

impl From<TransferStrategy> for LabTransfer {
    fn from(served: TransferStrategy) -> Self {
        match served {
            TransferStrategy::Ordered => LabTransfer::Ordered,
            TransferStrategy::Batched => LabTransfer::Batched,
        }
    }
}

impl std::fmt::Display for LabTransfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_served_strategies_are_safe() {
        for s in LabStrategy::ALL {
            assert_eq!(LabStrategy::parse(s.as_str()), Some(*s));
            assert_eq!(s.is_safe(), s.served().is_some());
        }
        for name in StrategyName::ALL {
            assert_eq!(LabStrategy::from(*name).served(), Some(*name));
        }
        assert!(!LabStrategy::NaiveReplay.is_safe());
        for s in LabTransfer::ALL {
            assert_eq!(LabTransfer::parse(s.as_str()), Some(*s));
        }
        assert!(LabTransfer::Ordered.is_safe());
        assert!(LabTransfer::Batched.is_safe());
        assert!(!LabTransfer::Naive.is_safe());
    }
}
