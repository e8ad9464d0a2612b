//! `saldo race`'s scenarios as the lab offers them: for each [`Scenario`], what it reproduces
//! ([`Scenario::description`]), who races in it ([`Racers`]), the sizes a run uses when none
//! is given ([`Defaults`]) and the settings it takes ([`Knob`]). The CLI builds its help from
//! here (the scenario list through clap's `ValueEnum`, behind the `clap` feature) and
//! [`crate::race::plan`] checks a request against it.
//!
//! Sits above the scenario modules (it reads their sizes and bounds) and below `plan`.

use crate::naive;
use crate::race::backorders::{MAX_FILL_BUYERS, MIN_FILL_BUYERS};
use crate::race::extend::{HOLD, MAX_EXTEND_ORDERS};
use crate::race::follow::MAX_FOLLOW_BUYERS;
use crate::race::holds::{
    DEADLINE_SPREAD, DEADLINE_TIMEOUT_S, HOLD_AMOUNT, LAST_FUNDS, MAX_HOLDS, REVERSED,
};
use crate::race::locations::MAX_LOCATION_BUYERS;
use crate::race::sales::MAX_SALE_BUYERS;
use crate::race::stock::MULTI_ITEM_PRODUCTS;
use crate::race::types::{Scenario, MAX_BUYERS, MAX_TRANSFERS};

/// Who races in a scenario, and so how its runs go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Racers {
    /// The stock strategies, served and naive (`LabStrategy`): buyers for stocked units.
    Stock,
    /// The served stock strategies and `naive-replay`: late retries of settled orders.
    LateRetry,
    /// The transfer strategies (`LabTransfer`).
    Transfers,
    /// saldo's ledger against the naive holds (`LabHolds`).
    Holds,
    /// The served stock strategies against the scenario's own naive variant, named `naive`
    /// (`Contender`).
    Contenders { naive: &'static str },
}

/// A setting a scenario may take, beyond those every scenario takes (`--strategy`, `--runs`,
/// `--seed`, `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    Buyers,
    Stock,
    Holds,
    Transfers,
    ThinkMs,
    NoRetry,
    Explain,
}

impl Knob {
    /// Its flag in `saldo race`.
    pub fn flag(self) -> &'static str {
        match self {
            Knob::Buyers => "--buyers",
            Knob::Stock => "--stock",
            Knob::Holds => "--holds",
            Knob::Transfers => "--transfers",
            Knob::ThinkMs => "--think-ms",
            Knob::NoRetry => "--no-retry",
            Knob::Explain => "--explain",
        }
    }
}

/// What a run uses when the flag is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// Per run: buyers, holds (or groups) or transfers, whichever the scenario sizes
    /// ([`Scenario::size_knob`]).
    pub size: u32,
    pub runs: u32,
    /// Units stocked per product (the stock scenarios).
    pub stock: Option<u32>,
    /// The naive strategies' read–write window (the scenarios that take `--think-ms`).
    pub think_ms: Option<u64>,
}

/// Runs per strategy, unless the scenario says otherwise.
const RUNS: u32 = 5;
/// The naive stock strategies' read–write window: long enough that every pooled session reads
/// before the first write, the way the last-unit race's payment call did (1.5 s there).
const STOCK_THINK_MS: u64 = 20;
/// The naive holds' read–write window.
const HOLD_THINK_MS: u64 = 50;
/// The stock scenarios' sizes.
const STOCK_KNOBS: &[Knob] = &[Knob::Buyers, Knob::Stock, Knob::ThinkMs, Knob::Explain];

impl Scenario {
    /// Who races in it.
    pub fn racers(self) -> Racers {
        let naive = match self {
            Scenario::LastUnit | Scenario::Oversubscribed | Scenario::MultiItem => {
                return Racers::Stock
            }
            Scenario::LateRetry => return Racers::LateRetry,
            Scenario::CrossedTransfers => return Racers::Transfers,
            Scenario::HoldSettle
            | Scenario::HoldDeadline
            | Scenario::HoldLastFunds
            | Scenario::CrossedGroups
            | Scenario::ReversalRace => return Racers::Holds,
            Scenario::ExtendVsSweeper => naive::extend::NAME,
            Scenario::SalesVsReservations => naive::sales::NAME,
            Scenario::BackorderFill => naive::backorders::NAME,
            Scenario::SplitLocations => naive::locations::NAME,
            Scenario::EventsFollow => naive::follow::NAME,
        };
        Racers::Contenders { naive }
    }

    /// The settings it takes (beyond `--strategy`, `--runs`, `--seed` and `--json`).
    pub fn knobs(self) -> &'static [Knob] {
        match self.racers() {
            Racers::Stock => STOCK_KNOBS,
            Racers::Transfers => &[Knob::Transfers, Knob::NoRetry],
            // The naive post's fault in `hold-deadline` is what it checks, not a window.
            Racers::Holds if self == Scenario::HoldDeadline => &[Knob::Holds],
            Racers::Holds => &[Knob::Holds, Knob::ThinkMs],
            Racers::LateRetry | Racers::Contenders { .. } => &[Knob::Buyers],
        }
    }

    pub fn takes(self, knob: Knob) -> bool {
        self.knobs().contains(&knob)
    }

    /// The setting that sizes a run: buyers, holds or transfers.
    pub fn size_knob(self) -> Knob {
        self.knobs()[0]
    }

    /// The bounds of [`Scenario::size_knob`].
    pub fn size_bounds(self) -> (u32, u32) {
        match self {
            Scenario::CrossedTransfers => (2, MAX_TRANSFERS),
            Scenario::HoldSettle
            | Scenario::HoldDeadline
            | Scenario::HoldLastFunds
            | Scenario::CrossedGroups
            | Scenario::ReversalRace => (2, MAX_HOLDS),
            Scenario::ExtendVsSweeper => (1, MAX_EXTEND_ORDERS),
            Scenario::SalesVsReservations => (2, MAX_SALE_BUYERS),
            Scenario::BackorderFill => (MIN_FILL_BUYERS, MAX_FILL_BUYERS),
            Scenario::SplitLocations => (2, MAX_LOCATION_BUYERS),
            Scenario::EventsFollow => (1, MAX_FOLLOW_BUYERS),
            _ => (1, MAX_BUYERS),
        }
    }

    /// What a run uses when the flag is not given.
    pub fn defaults(self) -> Defaults {
        let stock = |size, stock| Defaults {
            size,
            runs: RUNS,
            stock: Some(stock),
            think_ms: Some(STOCK_THINK_MS),
        };
        let only = |size, runs| Defaults {
            size,
            runs,
            stock: None,
            think_ms: None,
        };
        match self {
            Scenario::LastUnit => stock(50, 1),
            Scenario::Oversubscribed | Scenario::MultiItem => stock(100, 10),
            // Once: each naive deadlock costs `deadlock_timeout`, so a naive run is long.
            Scenario::CrossedTransfers => only(200, 1),
            // The naive rule fails every run: two show it.
            Scenario::LateRetry => only(50, 2),
            Scenario::HoldDeadline => only(20, 3),
            Scenario::HoldSettle
            | Scenario::HoldLastFunds
            | Scenario::CrossedGroups
            | Scenario::ReversalRace => Defaults {
                think_ms: Some(HOLD_THINK_MS),
                ..only(20, 3)
            },
            Scenario::ExtendVsSweeper => only(60, 2),
            Scenario::SalesVsReservations => only(50, RUNS),
            Scenario::BackorderFill | Scenario::SplitLocations => only(40, RUNS),
            // The naive reader misses the late event every run: three show it.
            Scenario::EventsFollow => only(50, 3),
        }
    }

    /// One line for `saldo race --help`: what it races, with its default sizes.
    pub fn description(self) -> String {
        let d = self.defaults();
        let (n, stock) = (d.size, d.stock.unwrap_or(0));
        match self {
            Scenario::LastUnit => format!("The last-unit race: --buyers ({n}) for the last unit"),
            Scenario::Oversubscribed => format!(
                "The oversubscribed sale: --buyers ({n}; try 500, 1000) for --stock ({stock}) \
                 units"
            ),
            Scenario::MultiItem => format!(
                "--buyers ({n}) orders with crossing items (a seeded mix of \
                 {MULTI_ITEM_PRODUCTS} products, --stock ({stock}) units each), all or nothing"
            ),
            Scenario::CrossedTransfers => format!(
                "The crossed-transfers deadlock: --transfers ({n}) both ways between accounts 1 \
                 and 2"
            ),
            Scenario::LateRetry => format!(
                "--buyers ({n}) reserve, cancel or let expire, then retry late: a retry must take \
                 nothing"
            ),
            Scenario::HoldSettle => format!(
                "Post, void and expiry race for each of --holds ({n}) due holds; one winner each"
            ),
            Scenario::HoldDeadline => format!(
                "--holds ({n}) holds of {DEADLINE_TIMEOUT_S} s, each posted at its own moment \
                 from {} ms before its deadline to as long after, no sweeper: none may post \
                 once expired",
                DEADLINE_SPREAD.as_millis()
            ),
            Scenario::HoldLastFunds => format!(
                "--holds ({n}) holds of {HOLD_AMOUNT} race for the last {LAST_FUNDS} of one \
                 account"
            ),
            Scenario::CrossedGroups => {
                format!("--holds ({n}) linked groups crossing between accounts 1 and 2, no retry")
            }
            Scenario::ReversalRace => format!(
                "--holds ({n}) reversals of 1 race for a posted transfer of {REVERSED}: never \
                 more than it posted"
            ),
            Scenario::ExtendVsSweeper => format!(
                "--buyers ({n}) orders hold a unit for {} ms and are extended, some before and \
                 some after the hold lapses, while the sweeper runs: each answer must match the \
                 hold's fate",
                HOLD.as_millis()
            ),
            Scenario::SalesVsReservations => format!(
                "--buyers ({n}) for the last unit, half reserving it, half buying it directly \
                 (no hold)"
            ),
            Scenario::BackorderFill => format!(
                "A preorder with waiting backorders: --buyers ({n}) at once, half reserving a \
                 unit, half restocking one: never past the limit, filled oldest first, the books \
                 balance"
            ),
            Scenario::SplitLocations => format!(
                "--buyers ({n}) orders split across three locations of two products (crossing \
                 orders included): no location oversold, all or nothing, no deadlock reaches a \
                 buyer"
            ),
            Scenario::EventsFollow => format!(
                "A reader follows the event feed while --buyers ({n}) reservations commit and \
                 one transaction that wrote its event first commits last: every event once, \
                 each stream in order"
            ),
        }
    }
}

/// `saldo race`'s scenario argument: the names, each with its description as help.
#[cfg(feature = "clap")]
impl clap::ValueEnum for Scenario {
    fn value_variants<'a>() -> &'a [Self] {
        Scenario::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()).help(self.description()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_is_sized_within_its_bounds_by_default() {
        for &s in Scenario::ALL {
            let (min, max) = s.size_bounds();
            let d = s.defaults();
            assert!((min..=max).contains(&d.size), "{s:?}: {d:?}");
            assert!(d.runs >= 1, "{s:?}");
            assert_eq!(d.stock.is_some(), s.takes(Knob::Stock), "{s:?}");
            assert_eq!(d.think_ms.is_some(), s.takes(Knob::ThinkMs), "{s:?}");
            assert!(
                s.description().contains(&format!("({}", d.size)),
                "{s:?}: {}",
                s.description()
            );
        }
    }
}
