//! What to race, validated, and the one dispatch to the scenario modules. A [`RaceRequest`]
//! (what `saldo race` was asked, flags as given) is checked against the catalog
//! ([`crate::race::catalog`]: the settings a scenario takes, its defaults, its bounds, who
//! races in it) and turned into a [`Race`] of typed strategies and bounded sizes before any
//! database is touched; [`Race::run`] then runs it on a scratch database.

use crate::race::catalog::{Knob, Racers};
use crate::race::contender::{run_contenders, Contender, Runs};
use crate::race::holds::{HoldRace, LabHolds};
use crate::race::stock::StockRace;
use crate::race::transfers::TransferRace;
use crate::race::types::{bounded, LabError, OutOfRange, Report, RunDone, Scenario, MAX_RUNS};
use crate::race::{backorders, extend, follow, holds, late, locations, sales, stock, transfers};
use crate::scratch::Scratch;
use crate::strategy::{LabStrategy, LabTransfer};

/// What was asked, before validation: `None` (or `false`) where the flag was not given.
#[derive(Debug, Clone)]
pub struct RaceRequest {
    pub scenario: Scenario,
    /// `all`, or a comma list of names.
    pub strategy: String,
    pub runs: Option<u32>,
    pub buyers: Option<u32>,
    pub stock: Option<u32>,
    pub holds: Option<u32>,
    pub transfers: Option<u32>,
    pub think_ms: Option<u64>,
    /// Of the multi-item order mix.
    pub seed: u64,
    pub no_retry: bool,
    pub explain: bool,
}

impl RaceRequest {
    /// The settings given.
    fn given(&self) -> impl Iterator<Item = Knob> + '_ {
        [
            (Knob::Buyers, self.buyers.is_some()),
            (Knob::Stock, self.stock.is_some()),
            (Knob::Holds, self.holds.is_some()),
            (Knob::Transfers, self.transfers.is_some()),
            (Knob::ThinkMs, self.think_ms.is_some()),
            (Knob::NoRetry, self.no_retry),
            (Knob::Explain, self.explain),
        ]
        .into_iter()
        .filter_map(|(knob, given)| given.then_some(knob))
    }

    /// The size given for `knob` (buyers, holds or transfers).
    fn size(&self, knob: Knob) -> Option<u32> {
        match knob {
            Knob::Buyers => self.buyers,
            Knob::Holds => self.holds,
            Knob::Transfers => self.transfers,
            _ => None,
        }
    }
}

/// Why a request cannot be raced.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "--strategy: unknown strategy {name:?} for this scenario; expected all or a comma list \
         of: {}",
        .valid.join(", ")
    )]
    UnknownStrategy {
        name: String,
        valid: Vec<&'static str>,
    },
    #[error("{} does not apply to {}: it takes {}", .knob.flag(), .scenario.as_str(), takes(*.scenario))]
    NotTaken { knob: Knob, scenario: Scenario },
    #[error(transparent)]
    OutOfRange(#[from] OutOfRange),
}

/// `--buyers, --stock, --runs and --strategy only`: what `scenario` takes, for a refusal.
fn takes(scenario: Scenario) -> String {
    let mut flags: Vec<&str> = scenario.knobs().iter().map(|k| k.flag()).collect();
    flags.extend(["--runs", "--strategy"]);
    let last = flags.pop().unwrap_or_default();
    format!("{} and {last} only", flags.join(", "))
}

/// A validated race of one of the shop scenarios (see [`Racers::Contenders`]).
#[derive(Debug, Clone, Copy)]
pub struct ContenderRace {
    pub scenario: Scenario,
    pub buyers: u32,
    pub runs: u32,
}

/// What to race, validated.
#[derive(Debug)]
pub enum Race {
    Stock {
        race: StockRace,
        strategies: Vec<LabStrategy>,
    },
    Transfers {
        race: TransferRace,
        strategies: Vec<LabTransfer>,
    },
    Late {
        buyers: u32,
        runs: u32,
        strategies: Vec<LabStrategy>,
    },
    Holds {
        race: HoldRace,
        strategies: Vec<LabHolds>,
    },
    Contenders {
        race: ContenderRace,
        contenders: Vec<Contender>,
    },
}

/// `all`, or a comma list of names `parse` accepts, without repeats, in the order given.
fn pick<T: Copy + PartialEq>(
    raw: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    name: impl Fn(T) -> &'static str,
) -> Result<Vec<T>, PlanError> {
    if raw.trim() == "all" {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for given in raw.split(',').map(str::trim) {
        let Some(s) = parse(given).filter(|s| all.contains(s)) else {
            return Err(PlanError::UnknownStrategy {
                name: given.to_owned(),
                valid: all.iter().map(|s| name(*s)).collect(),
            });
        };
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

impl Race {
    /// Checks `request` against its scenario and fills in the defaults.
    pub fn plan(request: &RaceRequest) -> Result<Race, PlanError> {
        let scenario = request.scenario;
        if let Some(knob) = request.given().find(|k| !scenario.takes(*k)) {
            return Err(PlanError::NotTaken { knob, scenario });
        }
        let defaults = scenario.defaults();
        let size_knob = scenario.size_knob();
        let size = request.size(size_knob).unwrap_or(defaults.size);
        let (min, max) = scenario.size_bounds();
        bounded(size_knob.flag(), size.into(), min.into(), max.into())?;
        let runs = request.runs.unwrap_or(defaults.runs);
        bounded("--runs", runs.into(), 1, MAX_RUNS.into())?;
        let think_ms = request.think_ms.or(defaults.think_ms).unwrap_or(0);
        let strategy = request.strategy.as_str();
        Ok(match scenario.racers() {
            Racers::Stock => {
                let stock = request.stock.or(defaults.stock).unwrap_or(1);
                let mut race = StockRace::new(scenario, size, stock, runs, think_ms, request.seed)?;
                race.explain = request.explain;
                let all = LabStrategy::ALL;
                let strategies = pick(strategy, all, LabStrategy::parse, LabStrategy::as_str)?;
                Race::Stock { race, strategies }
            }
            Racers::LateRetry => Race::Late {
                buyers: size,
                runs,
                strategies: pick(
                    strategy,
                    &late_racers(),
                    LabStrategy::parse,
                    LabStrategy::as_str,
                )?,
            },
            Racers::Transfers => Race::Transfers {
                race: TransferRace::new(size, runs, !request.no_retry)?,
                strategies: pick(
                    strategy,
                    LabTransfer::ALL,
                    LabTransfer::parse,
                    LabTransfer::as_str,
                )?,
            },
            Racers::Holds => Race::Holds {
                race: HoldRace::new(scenario, size, runs, think_ms)?,
                strategies: pick(strategy, LabHolds::ALL, LabHolds::parse, LabHolds::as_str)?,
            },
            Racers::Contenders { naive } => Race::Contenders {
                race: ContenderRace {
                    scenario,
                    buyers: size,
                    runs,
                },
                contenders: pick(
                    strategy,
                    &Contender::all(naive),
                    |name| Contender::parse(name, naive),
                    Contender::as_str,
                )?,
            },
        })
    }

    /// Runs every run of the race for each strategy on `scratch`, telling `on_run` after every
    /// run (the holds scenarios say nothing until the end).
    pub async fn run(
        &self,
        scratch: &Scratch,
        on_run: &(dyn Fn(RunDone<'_>) + Sync),
    ) -> Result<Vec<Report>, LabError> {
        match self {
            Race::Stock { race, strategies } => {
                stock::run_with_progress(scratch, race, strategies, on_run).await
            }
            Race::Transfers { race, strategies } => {
                transfers::run_with_progress(scratch, race, strategies, on_run).await
            }
            Race::Late {
                buyers,
                runs,
                strategies,
            } => late::run_with_progress(scratch, *buyers, *runs, strategies, on_run).await,
            Race::Holds { race, strategies } => holds::run(scratch, race, strategies).await,
            Race::Contenders { race, contenders } => race.run(scratch, contenders, on_run).await,
        }
    }
}

/// The late-retry scenario races the idempotency rule, not the take: the naive takers corrupt
/// the counts on their own (a lost update of `reserved`) before any retry is sent, so only
/// `naive-replay` joins the served strategies.
fn late_racers() -> Vec<LabStrategy> {
    LabStrategy::ALL
        .iter()
        .copied()
        .filter(|n| n.is_safe() || *n == LabStrategy::NaiveReplay)
        .collect()
}

impl ContenderRace {
    /// Every run for each contender, through [`run_contenders`] and the scenario's `run_on`.
    pub async fn run(
        &self,
        scratch: &Scratch,
        contenders: &[Contender],
        on_run: &(dyn Fn(RunDone<'_>) + Sync),
    ) -> Result<Vec<Report>, LabError> {
        let ContenderRace {
            scenario,
            buyers,
            runs,
        } = *self;
        let runs = |stock_per_run| Runs {
            scenario,
            buyers,
            stock_per_run,
            runs,
        };
        // One arm per scenario: its stock per run (for the report) and its `run_on`.
        macro_rules! race {
            ($stock_per_run:expr, $scenario:ident) => {
                run_contenders(
                    scratch,
                    runs($stock_per_run),
                    contenders,
                    on_run,
                    |s, c, run| async move { $scenario::run_on(&s, buyers, c, run).await },
                )
                .await
            };
        }
        match scenario {
            Scenario::ExtendVsSweeper => race!(buyers.into(), extend),
            Scenario::SalesVsReservations => race!(1, sales),
            Scenario::BackorderFill => race!(0, backorders),
            Scenario::EventsFollow => race!(buyers.into(), follow),
            _ => race!(locations::stocked_units(), locations),
        }
    }
}
