//! `saldo race SCENARIO`: rerun a seed's experiment against any strategies, side by side, on the
//! embedded cluster or `--database-url` (the lab works in a scratch database of its own and
//! drops it at the end). Flags are parsed in two phases: clap reads raw values, then
//! [`Config::from_args`] checks every bound and turns names into typed strategies.
//!
//! Exit status: non-zero when a SAFE strategy breaks an invariant; zero when only the naive
//! ones do — their failure is the expected demonstration and is printed as such.

use anyhow::{bail, Result};
use saldo_lab::naive::backorders::NAME as NAIVE_FILL;
use saldo_lab::naive::extend::NAME as NAIVE_EXTEND;
use saldo_lab::naive::locations::NAME as NAIVE_LOCATIONS;
use saldo_lab::naive::sales::NAME as NAIVE_SALE;
use saldo_lab::race::backorders::{MAX_FILL_BUYERS, MIN_FILL_BUYERS};
use saldo_lab::race::contender::{run_contenders, Runs};
use saldo_lab::race::extend::MAX_EXTEND_ORDERS;
use saldo_lab::race::holds::{HoldRace, LabHolds};
use saldo_lab::race::locations::MAX_LOCATION_BUYERS;
use saldo_lab::race::sales::MAX_SALE_BUYERS;
use saldo_lab::race::stock::StockRace;
use saldo_lab::race::transfers::TransferRace;
use saldo_lab::race::Contender;
use saldo_lab::race::{self as lab, explain, Report, RunDone, Scenario, Verdict};
use saldo_lab::scratch::{Scratch, Server};
use saldo_lab::{LabStrategy, LabTransfer};

/// Buyers per run when `--buyers` is absent: seed 000's 50 for the last unit, seed 004's 100.
pub const DEFAULT_LAST_UNIT_BUYERS: u32 = 50;
pub const DEFAULT_OVERSUBSCRIBED_BUYERS: u32 = 100;
pub const DEFAULT_MULTI_ITEM_BUYERS: u32 = 100;
/// Units per product when `--stock` is absent.
pub const DEFAULT_OVERSUBSCRIBED_STOCK: u32 = 10;
pub const DEFAULT_MULTI_ITEM_STOCK: u32 = 10;
/// Seed 002's 200 crossed transfers.
pub const DEFAULT_TRANSFERS: u32 = 200;
/// The naive read–write window: long enough that every pooled session reads before the first
/// write, the way seed 000's payment call did (1.5 s there).
pub const DEFAULT_THINK_MS: u64 = 20;
pub const DEFAULT_RUNS: u32 = 5;
/// crossed-transfers runs once by default: each naive deadlock costs `deadlock_timeout` (1 s on
/// the embedded cluster), so a naive run takes about a minute.
pub const DEFAULT_TRANSFER_RUNS: u32 = 1;
pub const DEFAULT_SEED: u64 = 42;
/// late-retry runs per strategy by default: the naive rule fails every run.
pub const DEFAULT_LATE_RUNS: u32 = 2;
/// Holds (or groups) per run of the issue-14 scenarios, and their runs.
pub const DEFAULT_HOLDS: u32 = 20;
pub const DEFAULT_HOLD_RUNS: u32 = 3;
/// The naive holds' read–write window.
pub const DEFAULT_HOLD_THINK_MS: u64 = 50;
/// extend-vs-sweeper: orders per run and runs per strategy by default.
pub const DEFAULT_EXTEND_ORDERS: u32 = 60;
pub const DEFAULT_EXTEND_RUNS: u32 = 2;
/// sales-vs-reservations: requests per run (half reserve, half buy) by default.
pub const DEFAULT_SALE_BUYERS: u32 = 50;
/// backorder-fill: requests per run (half reserve, half restock one unit) by default.
pub const DEFAULT_FILL_BUYERS: u32 = 40;
/// split-locations: orders per run by default (for 20 units of two products).
pub const DEFAULT_LOCATION_BUYERS: u32 = 40;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ScenarioArg {
    /// Seed 000: --buyers (50) for the last unit.
    LastUnit,
    /// Seed 004: --buyers (100; try 500, 1000) for --stock (10) units.
    Oversubscribed,
    /// Orders with crossing items (seeded mix of 4 products), all or nothing.
    MultiItem,
    /// Seed 002: --transfers (200) both ways between accounts 1 and 2.
    CrossedTransfers,
    /// --buyers (50) reserve, cancel or let expire, then retry late: a retry must take nothing.
    LateRetry,
    /// Issue 14: post, void and expiry race for each of --holds (20) due holds; one winner each.
    HoldSettle,
    /// Issue 14: --holds (20) holds of 10 race for the last 100 of one account.
    HoldLastFunds,
    /// Issue 14: --holds (20) linked groups crossing between accounts 1 and 2, no retry.
    CrossedGroups,
    /// --buyers (60) orders hold a unit for 400 ms and are extended, some before and some
    /// after the hold lapses, while the sweeper runs: each answer must match the hold's fate.
    ExtendVsSweeper,
    /// --buyers (50) for the last unit, half reserving it, half buying it directly (no hold).
    SalesVsReservations,
    /// A preorder with waiting backorders: --buyers (40) at once, half reserving a unit, half
    /// restocking one: never past the limit, filled oldest first, the books balance.
    BackorderFill,
    /// --buyers (40) orders split across three locations of two products (crossing orders
    /// included): no location oversold, all or nothing, no deadlock reaches a buyer.
    SplitLocations,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_enum)]
    scenario: ScenarioArg,
    /// One strategy, a comma list, or `all` (naive ones included). Stock: atomic, pessimistic,
    /// optimistic, batched, naive-subtract, naive-overwrite, naive-replay; crossed-transfers and
    /// the hold scenarios: ordered, naive; extend-vs-sweeper: the served four and naive-extend;
    /// sales-vs-reservations: the served four and naive-sale; backorder-fill: the served four
    /// and naive-fill; split-locations: the served four and naive-locations.
    #[arg(long, default_value = "all")]
    strategy: String,
    /// Runs per strategy, each from a fresh state (default 5; crossed-transfers 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_RUNS)))]
    runs: Option<u32>,
    /// Concurrent buyers per run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_BUYERS)))]
    buyers: Option<u32>,
    /// Units stocked per product.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_STOCK)))]
    stock: Option<u32>,
    /// hold-settle, hold-last-funds, crossed-groups: holds (or groups) per run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=i64::from(saldo_lab::race::holds::MAX_HOLDS)))]
    holds: Option<u32>,
    /// crossed-transfers: transfers per run, half each way.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=i64::from(lab::MAX_TRANSFERS)))]
    transfers: Option<u32>,
    /// How long the naive strategies "think" between read and write (the widened window;
    /// ms, or 1.5s).
    #[arg(long, value_parser = crate::duration::millis(0, lab::MAX_THINK_MS))]
    think_ms: Option<u64>,
    /// Seed of the multi-item order mix (same seed, same orders).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// crossed-transfers: let deadlock victims reach the caller instead of rerunning them.
    #[arg(long)]
    no_retry: bool,
    /// Print one JSON array (one object per strategy) instead of the table.
    #[arg(long)]
    json: bool,
    /// Print the interleaving of the first run: who read which balance and what each wrote.
    #[arg(long)]
    explain: bool,
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
    /// extend-vs-sweeper, sales-vs-reservations or split-locations.
    Shop {
        scenario: Scenario,
        buyers: u32,
        runs: u32,
        contenders: Vec<Contender>,
    },
}

/// The validated configuration of one `saldo race`.
#[derive(Debug)]
pub struct Config {
    pub race: Race,
    pub json: bool,
    pub explain: bool,
}

/// `all`, or a comma list of names `parse` accepts, without repeats, in the order given.
fn strategies<T: Copy + PartialEq>(
    raw: &str,
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    names: impl Fn(T) -> &'static str,
) -> Result<Vec<T>> {
    if raw.trim() == "all" {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for name in raw.split(',').map(str::trim) {
        let Some(s) = parse(name) else {
            let valid: Vec<&str> = all.iter().map(|s| names(*s)).collect();
            bail!(
                "--strategy: unknown strategy {name:?} for this scenario; expected all or a comma list of: {}",
                valid.join(", ")
            );
        };
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

/// `--strategy` of an issue-15 scenario: the served strategies and its naive variant.
fn contenders(raw: &str, naive: &'static str) -> Result<Vec<Contender>> {
    strategies(
        raw,
        &Contender::all(naive),
        |name| Contender::parse(name, naive),
        Contender::as_str,
    )
}

impl Config {
    pub fn from_args(args: &Args) -> Result<Config> {
        let scenario = match args.scenario {
            ScenarioArg::LastUnit => Scenario::LastUnit,
            ScenarioArg::Oversubscribed => Scenario::Oversubscribed,
            ScenarioArg::MultiItem => Scenario::MultiItem,
            ScenarioArg::CrossedTransfers => Scenario::CrossedTransfers,
            ScenarioArg::LateRetry => Scenario::LateRetry,
            ScenarioArg::HoldSettle => Scenario::HoldSettle,
            ScenarioArg::HoldLastFunds => Scenario::HoldLastFunds,
            ScenarioArg::CrossedGroups => Scenario::CrossedGroups,
            ScenarioArg::ExtendVsSweeper => Scenario::ExtendVsSweeper,
            ScenarioArg::SalesVsReservations => Scenario::SalesVsReservations,
            ScenarioArg::BackorderFill => Scenario::BackorderFill,
            ScenarioArg::SplitLocations => Scenario::SplitLocations,
        };
        let holds_scenario = matches!(
            scenario,
            Scenario::HoldSettle | Scenario::HoldLastFunds | Scenario::CrossedGroups
        );
        if args.holds.is_some() && !holds_scenario {
            bail!("--holds applies to hold-settle, hold-last-funds and crossed-groups");
        }
        // The scenarios that race one operation take no stock, window or transfer flags.
        if matches!(
            scenario,
            Scenario::LateRetry
                | Scenario::ExtendVsSweeper
                | Scenario::SalesVsReservations
                | Scenario::BackorderFill
                | Scenario::SplitLocations
        ) && (args.stock.is_some()
            || args.think_ms.is_some()
            || args.transfers.is_some()
            || args.no_retry
            || args.explain)
        {
            bail!(
                "{} takes --buyers, --runs and --strategy only",
                scenario.as_str()
            );
        }
        let shop = match scenario {
            Scenario::SalesVsReservations => Some((
                DEFAULT_SALE_BUYERS,
                2,
                MAX_SALE_BUYERS,
                DEFAULT_RUNS,
                NAIVE_SALE,
            )),
            Scenario::BackorderFill => Some((
                DEFAULT_FILL_BUYERS,
                u64::from(MIN_FILL_BUYERS),
                MAX_FILL_BUYERS,
                DEFAULT_RUNS,
                NAIVE_FILL,
            )),
            Scenario::SplitLocations => Some((
                DEFAULT_LOCATION_BUYERS,
                2,
                MAX_LOCATION_BUYERS,
                DEFAULT_RUNS,
                NAIVE_LOCATIONS,
            )),
            Scenario::ExtendVsSweeper => Some((
                DEFAULT_EXTEND_ORDERS,
                1,
                MAX_EXTEND_ORDERS,
                DEFAULT_EXTEND_RUNS,
                NAIVE_EXTEND,
            )),
            _ => None,
        };
        let race = if holds_scenario {
            if args.buyers.is_some()
                || args.stock.is_some()
                || args.transfers.is_some()
                || args.no_retry
                || args.explain
            {
                bail!(
                    "{} takes --holds, --runs, --think-ms and --strategy only (never a retry)",
                    scenario.as_str()
                );
            }
            Race::Holds {
                race: HoldRace::new(
                    scenario,
                    args.holds.unwrap_or(DEFAULT_HOLDS),
                    args.runs.unwrap_or(DEFAULT_HOLD_RUNS),
                    args.think_ms.unwrap_or(DEFAULT_HOLD_THINK_MS),
                )?,
                strategies: strategies(
                    &args.strategy,
                    LabHolds::ALL,
                    LabHolds::parse,
                    LabHolds::as_str,
                )?,
            }
        } else if let Some((buyers, min, max, runs, naive)) = shop {
            let buyers = args.buyers.unwrap_or(buyers);
            lab::bounded("--buyers", buyers.into(), min, max.into())?;
            Race::Shop {
                scenario,
                buyers,
                runs: args.runs.unwrap_or(runs),
                contenders: contenders(&args.strategy, naive)?,
            }
        } else if scenario == Scenario::LateRetry {
            // The scenario races the idempotency rule, not the take: the naive takers corrupt
            // the counts on their own (a lost update of `reserved`) before any retry is sent.
            let late: Vec<LabStrategy> = LabStrategy::ALL
                .iter()
                .copied()
                .filter(|n| n.is_safe() || *n == LabStrategy::NaiveReplay)
                .collect();
            Race::Late {
                buyers: args.buyers.unwrap_or(DEFAULT_LAST_UNIT_BUYERS),
                runs: args.runs.unwrap_or(DEFAULT_LATE_RUNS),
                strategies: strategies(
                    &args.strategy,
                    &late,
                    |name| LabStrategy::parse(name).filter(|n| late.contains(n)),
                    LabStrategy::as_str,
                )?,
            }
        } else if scenario == Scenario::CrossedTransfers {
            if args.buyers.is_some() || args.stock.is_some() || args.think_ms.is_some() {
                bail!("--buyers, --stock and --think-ms apply to the stock scenarios; crossed-transfers takes --transfers");
            }
            if args.explain {
                bail!("--explain applies to the stock scenarios");
            }
            let race = TransferRace::new(
                args.transfers.unwrap_or(DEFAULT_TRANSFERS),
                args.runs.unwrap_or(DEFAULT_TRANSFER_RUNS),
                !args.no_retry,
            )?;
            Race::Transfers {
                race,
                strategies: strategies(
                    &args.strategy,
                    LabTransfer::ALL,
                    LabTransfer::parse,
                    LabTransfer::as_str,
                )?,
            }
        } else {
            if args.transfers.is_some() || args.no_retry {
                bail!("--transfers and --no-retry apply to crossed-transfers only");
            }
            let (buyers, stock) = match scenario {
                Scenario::LastUnit => (DEFAULT_LAST_UNIT_BUYERS, 1),
                Scenario::MultiItem => (DEFAULT_MULTI_ITEM_BUYERS, DEFAULT_MULTI_ITEM_STOCK),
                _ => (DEFAULT_OVERSUBSCRIBED_BUYERS, DEFAULT_OVERSUBSCRIBED_STOCK),
            };
            let mut race = StockRace::new(
                scenario,
                args.buyers.unwrap_or(buyers),
                args.stock.unwrap_or(stock),
                args.runs.unwrap_or(DEFAULT_RUNS),
                args.think_ms.unwrap_or(DEFAULT_THINK_MS),
                args.seed,
            )?;
            race.explain = args.explain;
            Race::Stock {
                race,
                strategies: strategies(
                    &args.strategy,
                    LabStrategy::ALL,
                    LabStrategy::parse,
                    LabStrategy::as_str,
                )?,
            }
        };
        Ok(Config {
            race,
            json: args.json,
            explain: args.explain,
        })
    }
}

/// Runs the race (validated first, by [`Config::from_args`]) on a scratch database of the
/// server at `server_url`.
pub async fn run(config: Config, server: Server) -> Result<()> {
    let scratch = Scratch::for_race(server).await?;
    let started = std::time::Instant::now();
    let on_run = |done: RunDone<'_>| {
        // Quiet for a quick race; past a few seconds, one line per run on stderr.
        if started.elapsed() >= PROGRESS_AFTER {
            eprintln!("{}", progress_line(&done));
        }
    };
    let work = async {
        match &config.race {
            Race::Stock { race, strategies } => {
                lab::stock::run_with_progress(&scratch, race, strategies, &on_run).await
            }
            Race::Transfers { race, strategies } => {
                lab::transfers::run_with_progress(&scratch, race, strategies, &on_run).await
            }
            Race::Late {
                buyers,
                runs,
                strategies,
            } => lab::late::run_with_progress(&scratch, *buyers, *runs, strategies, &on_run).await,
            Race::Holds { race, strategies } => lab::holds::run(&scratch, race, strategies).await,
            Race::Shop {
                scenario,
                buyers,
                runs,
                contenders,
            } => {
                let (scenario, buyers) = (*scenario, *buyers);
                let runs = |stock_per_run| Runs {
                    scenario,
                    buyers,
                    stock_per_run,
                    runs: *runs,
                };
                match scenario {
                    Scenario::ExtendVsSweeper => {
                        run_contenders(&scratch, runs(buyers.into()), contenders, &on_run, |s, c, run| async move {
                            lab::extend::run_on(&s, buyers, c, run).await
                        })
                        .await
                    }
                    Scenario::BackorderFill => {
                        run_contenders(&scratch, runs(0), contenders, &on_run, |s, c, run| async move {
                            lab::backorders::run_on(&s, buyers, c, run).await
                        })
                        .await
                    }
                    Scenario::SplitLocations => {
                        let stocked = lab::locations::stocked_units();
                        run_contenders(&scratch, runs(stocked), contenders, &on_run, |s, c, run| async move {
                            lab::locations::run_on(&s, buyers, c, run).await
                        })
                        .await
                    }
                    _ => {
                        run_contenders(&scratch, runs(1), contenders, &on_run, |s, c, run| async move {
                            lab::sales::run_on(&s, buyers, c, run).await
                        })
                        .await
                    }
                }
            }
        }
    };
    // Ctrl-C ends the race but still drops the scratch database.
    let result = tokio::select! {
        r = work => r.map_err(anyhow::Error::from),
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    // Drop the scratch database whatever happened; report the run's error first.
    let dropped = scratch.drop_database().await;
    let reports = result?;
    dropped?;
    if config.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", table(&reports));
        if config.explain {
            for r in &reports {
                println!();
                let events = r.trace.as_deref().unwrap_or(&[]);
                print!(
                    "{}",
                    explain::render(&r.strategy, events, r.trace_dropped.unwrap_or(0))
                );
            }
        }
        println!();
        for r in &reports {
            println!("{}", conclusion(r));
        }
    }
    if lab::safe_strategy_broke(&reports) {
        bail!("a safe strategy broke an invariant (see above)");
    }
    Ok(())
}

/// A race that has run this long shows one line per finished run (stderr).
const PROGRESS_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// `race: <strategy> run <n>/<runs> done (<s> s)`.
fn progress_line(done: &RunDone<'_>) -> String {
    format!(
        "race: {} run {}/{} done ({:.1} s)",
        done.strategy,
        done.run,
        done.runs,
        done.elapsed.as_secs_f64()
    )
}

fn sold_per_run(r: &Report) -> String {
    if r.sold_per_run_min == r.sold_per_run_max {
        r.sold_per_run_min.to_string()
    } else {
        format!("{}..{}", r.sold_per_run_min, r.sold_per_run_max)
    }
}

fn errors(r: &Report) -> String {
    if r.errors.is_empty() {
        return "-".into();
    }
    r.errors
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn verdict(r: &Report) -> &'static str {
    match r.verdict {
        Verdict::Held => "held",
        Verdict::Broken => "BROKEN",
        Verdict::FailedAsExpected => "failed (expected)",
        Verdict::NotCaught => "not caught",
    }
}

/// The readable table: one row per strategy.
pub fn table(reports: &[Report]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let transfers = [
        Scenario::CrossedTransfers,
        Scenario::HoldSettle,
        Scenario::HoldLastFunds,
        Scenario::CrossedGroups,
    ]
    .iter()
    .any(|s| first.scenario == s.as_str());
    let late = first.scenario == Scenario::LateRetry.as_str();
    let extend = first.scenario == Scenario::ExtendVsSweeper.as_str();
    let mut out = if extend {
        format!(
            "{} — {} orders hold one unit each for {} ms and are extended while the sweeper runs; {} run(s)\n{:<16} {:>5} {:>9} {:>8} {:>9} {:>12} {:>9} {:>8} {:>11}  {:<18} {:>8}\n",
            first.scenario, first.buyers_per_run, lab::extend::HOLD.as_millis(), first.runs,
            "extender", "runs", "ext/run", "expired", "conflicts", "errors", "final a/r", "wrong", "violations", "verdict", "time"
        )
    } else if late {
        format!(
            "{} — {} buyers reserve {} unit(s), cancel or let expire, then retry late; {} run(s)\n{:<16} {:>5} {:>9} {:>8} {:>9} {:>12} {:>9} {:>8} {:>11}  {:<18} {:>8}\n",
            first.scenario, first.buyers_per_run, first.stock_per_run, first.runs,
            "strategy", "runs", "retaken", "refused", "conflicts", "errors", "final a/r", "oversold", "violations", "verdict", "time"
        )
    } else if transfers {
        format!(
            "{} — {} {} per run, {} run(s)\n{:<18} {:>5} {:>9} {:>8} {:>16} {:>10} {:>8} {:>11}  {:<18} {:>8}\n",
            first.scenario, first.buyers_per_run,
            if first.scenario == Scenario::CrossedGroups.as_str() {
                "linked groups"
            } else if first.scenario == Scenario::CrossedTransfers.as_str() {
                "transfers"
            } else {
                "holds"
            },
            first.runs,
            "strategy", "runs", "done/run", "refused", "errors", "retries", "drift", "violations", "verdict", "time"
        )
    } else {
        format!(
            "{} — {} buyers for {} unit(s) in stock per run, {} run(s)\n{:<16} {:>5} {:>9} {:>8} {:>9} {:>12} {:>9} {:>8} {:>11}  {:<18} {:>8}\n",
            first.scenario, first.buyers_per_run, first.stock_per_run, first.runs,
            "strategy", "runs", "sold/run", "refused", "conflicts", "errors", "final a/r", "oversold", "violations", "verdict", "time"
        )
    };
    for r in reports {
        let time = format!("{:.1}s", r.elapsed_ms as f64 / 1000.0);
        let violations = format!("{}/{}", r.violations, r.runs);
        if transfers {
            out.push_str(&format!(
                "{:<18} {:>5} {:>9} {:>8} {:>16} {:>10} {:>8} {:>11}  {:<18} {:>8}\n",
                r.strategy,
                r.runs,
                sold_per_run(r),
                r.refused,
                errors(r),
                r.deadlock_retries.unwrap_or(0),
                r.money_drift.unwrap_or(0),
                violations,
                verdict(r),
                time
            ));
        } else {
            out.push_str(&format!(
                "{:<16} {:>5} {:>9} {:>8} {:>9} {:>12} {:>9} {:>8} {:>11}  {:<18} {:>8}\n",
                r.strategy,
                r.runs,
                sold_per_run(r),
                r.refused,
                r.conflicts,
                errors(r),
                format!("{}/{}", r.final_available, r.final_reserved),
                r.wrong_answers.unwrap_or(r.oversold),
                violations,
                verdict(r),
                time
            ));
        }
    }
    out
}

/// One plain sentence per strategy: what held, or what broke and why that was expected.
pub fn conclusion(r: &Report) -> String {
    let mut broke = Vec::new();
    if r.oversold > 0 && r.scenario == Scenario::LateRetry.as_str() {
        broke.push(format!(
            "late retries of cancelled or expired orders took {} units again in {} of {} runs",
            r.oversold, r.runs_oversold, r.runs
        ));
    } else if r.oversold > 0 && r.scenario == Scenario::HoldSettle.as_str() {
        broke.push(format!(
            "{} holds had more than one winner (post, void and expiry all \"won\") in {} of {} runs",
            r.oversold, r.runs_oversold, r.runs
        ));
    } else if r.oversold > 0 && r.scenario == Scenario::HoldLastFunds.as_str() {
        broke.push(format!(
            "{} holds were placed beyond the funds (below min_balance) in {} of {} runs",
            r.oversold, r.runs_oversold, r.runs
        ));
    } else if r.oversold > 0 {
        broke.push(format!(
            "oversold {} units in {} of {} runs",
            r.oversold, r.runs_oversold, r.runs
        ));
    }
    if let Some(wrong) = r.wrong_answers.filter(|w| *w > 0) {
        broke.push(format!(
            "{wrong} extensions answered against the hold's fate (granted on a hold the sweeper \
             expired, or refused on one still active)"
        ));
    }
    if r.check_violations > 0 {
        broke.push(format!(
            "{} CHECK violations (23514) reached buyers — the constraint was the last line of defence",
            r.check_violations
        ));
    }
    if r.audit_divergences > 0 {
        broke.push(format!(
            "the audit found {} divergences",
            r.audit_divergences
        ));
    }
    if r.partial_orders > 0 {
        broke.push(format!("{} orders were written in part", r.partial_orders));
    }
    if let Some(drift) = r.money_drift.filter(|d| *d != 0) {
        broke.push(format!("money drifted by {drift}"));
    }
    let failed: u64 = r.errors.values().sum();
    if failed > 0 && r.check_violations == 0 {
        broke.push(format!("{failed} operations failed ({})", errors(r)));
    }
    let what = broke.join("; ");
    match r.verdict {
        Verdict::Held => format!(
            "{}: every invariant held in all {} run(s).",
            r.strategy, r.runs
        ),
        Verdict::Broken => format!("BROKEN: {} (a safe strategy): {what}.", r.strategy),
        Verdict::FailedAsExpected => format!(
            "{} failed as expected in {} of {} runs: {what}.",
            r.strategy, r.violations, r.runs
        ),
        Verdict::NotCaught => format!(
            "{}: no failure caught this time; widen the window with --think-ms or add --runs.",
            r.strategy
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report with every column filled: `safe` ones held, the others broke (`violations`
    /// runs) or were not caught.
    fn report(scenario: Scenario, strategy: &str, safe: bool, violations: u32) -> Report {
        let broke = !safe;
        let mut r = Report {
            scenario: scenario.as_str().into(),
            strategy: strategy.into(),
            safe,
            runs: 3,
            buyers_per_run: 50,
            stock_per_run: 10,
            sold: 30,
            sold_per_run_min: 9,
            sold_per_run_max: if broke { 12 } else { 9 },
            refused: 120,
            conflicts: 4,
            final_available: 1,
            final_reserved: 9,
            oversold: if broke { 6 } else { 0 },
            runs_oversold: if broke { 2 } else { 0 },
            check_violations: if broke { 2 } else { 0 },
            audit_divergences: if broke { 5 } else { 0 },
            partial_orders: u64::from(broke),
            violations,
            elapsed_ms: 1234,
            ..Report::default()
        };
        if broke {
            r.errors = [("40P01".to_owned(), 3), ("23514".to_owned(), 2)].into();
        }
        let ledger = [
            Scenario::CrossedTransfers,
            Scenario::HoldSettle,
            Scenario::HoldLastFunds,
            Scenario::CrossedGroups,
        ];
        if ledger.contains(&scenario) {
            r.money_drift = Some(if broke { -20 } else { 0 });
            r.deadlock_retries = Some(7);
        }
        if scenario == Scenario::ExtendVsSweeper {
            r.wrong_answers = Some(if broke { 11 } else { 0 });
        }
        r.judge();
        r
    }

    /// Every scenario's table and conclusions, for one safe strategy that held, one naive
    /// strategy that failed and one that was not caught.
    fn every_table() -> String {
        let mut out = String::new();
        for &scenario in Scenario::ALL {
            let reports = [
                report(scenario, "atomic", true, 0),
                report(scenario, "naive-x", false, 2),
                report(scenario, "naive-y", false, 0),
            ];
            out.push_str(&format!("#### {}\n{}", scenario.as_str(), table(&reports)));
            for r in &reports {
                out.push_str(&conclusion(r));
                out.push('\n');
            }
        }
        out
    }

    /// `saldo race` prints the same table and sentences for the same reports: the layout is
    /// pinned in `testdata/race_tables.txt` (regenerate it only on purpose).
    #[test]
    fn tables_and_conclusions_keep_their_layout() {
        let expected = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/race_tables.txt"
        ));
        let actual = every_table();
        if actual != expected {
            let path = std::env::temp_dir().join("saldo-race_tables.txt");
            let _ = std::fs::write(&path, &actual);
            panic!(
                "the race tables changed (now written to {}):\n{actual}",
                path.display()
            );
        }
    }
}
