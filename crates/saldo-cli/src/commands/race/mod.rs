//! `saldo race SCENARIO`: rerun one of the lab's races against any strategies, side by side,
//! on the embedded cluster, `--database-url` or a local Citus cluster (the lab works in a
//! scratch database of its own and drops it at the end). Flags are parsed in two phases: clap
//! reads raw values, then saldo-lab's [`Race::plan`] checks them against the scenario (what
//! it takes, its defaults and bounds, who races in it) before any database is opened. The
//! scenarios themselves, their descriptions and defaults are saldo-lab's
//! (`saldo_lab::race::catalog`).
//!
//! Exit status: non-zero when a SAFE strategy breaks an invariant; zero when only the naive
//! ones do — their failure is the expected demonstration and is printed as such.

mod innodb;
mod table;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use saldo_lab::race::{self as lab, explain, Race, RaceRequest, Report, RunDone, Scenario};
use saldo_lab::scratch::{Scratch, Server};

use crate::commands::shared::Global;
use crate::database::{self, Database, Role};
use table::{conclusion, table};

/// Of the multi-item order mix, when `--seed` is absent.
const DEFAULT_SEED: u64 = 42;
/// deadlock_timeout of the local Citus cluster `race --citus-workers` starts: the lab's
/// deadlocks are on purpose, and only their detection matters (the single node's scratch
/// database gets the same through `ALTER DATABASE`).
const CITUS_RACE_DEADLOCK_TIMEOUT: &str = "100ms";
/// A race that has run this long shows one line per finished run (stderr).
const PROGRESS_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(value_enum)]
    scenario: Scenario,
    /// One strategy, a comma list, or `all` (naive ones included). Stock: atomic, pessimistic,
    /// optimistic, batched, naive-subtract, naive-overwrite, naive-replay; crossed-transfers and
    /// the hold scenarios: ordered, naive; extend-vs-sweeper: the served four and naive-extend;
    /// sales-vs-reservations: the served four and naive-sale; backorder-fill: the served four
    /// and naive-fill; split-locations: the served four and naive-locations.
    #[arg(long, default_value = "all")]
    strategy: String,
    // Its help states each scenario's default, from saldo-lab's catalog.
    #[arg(long, help = runs_help(),
          value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_RUNS)))]
    runs: Option<u32>,
    /// Concurrent buyers per run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_BUYERS)))]
    buyers: Option<u32>,
    /// Units stocked per product.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(lab::MAX_STOCK)))]
    stock: Option<u32>,
    /// hold-settle, hold-deadline, hold-last-funds, crossed-groups, reversal-race: holds (groups,
    /// reversals) per run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=i64::from(lab::holds::MAX_HOLDS)))]
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
    #[command(flatten)]
    innodb: innodb::InnoArgs,
}

/// `--runs`'s help: `Runs per strategy, each from a fresh state (default 5; crossed-transfers
/// 1; …)`, the most common default first, then the scenarios with another one, grouped by it
/// in the scenarios' order.
fn runs_help() -> String {
    let runs: Vec<(Scenario, u32)> = Scenario::ALL
        .iter()
        .map(|&s| (s, s.defaults().runs))
        .collect();
    let count = |n: u32| runs.iter().filter(|(_, r)| *r == n).count();
    let usual = runs
        .iter()
        .map(|&(_, r)| r)
        .max_by_key(|&r| count(r))
        .unwrap_or(1);
    let mut parts = vec![format!("default {usual}")];
    let mut others: Vec<u32> = Vec::new();
    for &(_, r) in &runs {
        if r != usual && !others.contains(&r) {
            others.push(r);
        }
    }
    for r in others {
        let names: Vec<&str> = runs
            .iter()
            .filter(|(_, n)| *n == r)
            .map(|(s, _)| s.as_str())
            .collect();
        parts.push(format!("{} {r}", names.join(", ")));
    }
    format!(
        "Runs per strategy, each from a fresh state ({})",
        parts.join("; ")
    )
}

/// The validated configuration of one `saldo race`: the race and how to print it.
#[derive(Debug)]
pub struct Options {
    race: Race,
    json: bool,
    explain: bool,
}

impl Options {
    pub fn from_args(args: Args) -> Result<Options> {
        let request = RaceRequest {
            scenario: args.scenario,
            strategy: args.strategy,
            runs: args.runs,
            buyers: args.buyers,
            stock: args.stock,
            holds: args.holds,
            transfers: args.transfers,
            think_ms: args.think_ms,
            seed: args.seed,
            no_retry: args.no_retry,
            explain: args.explain,
        };
        Ok(Options {
            race: Race::plan(&request)?,
            json: args.json,
            explain: args.explain,
        })
    }
}

/// Validates, finds the server (only its scratch database is touched), races and prints.
pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    if args.innodb.wanted()? {
        let plan = innodb::Plan {
            scenario: args.scenario,
            strategy: args.strategy,
            runs: args.runs,
            size: args.buyers.or(args.transfers),
            stock: args.stock,
            think_ms: args.think_ms,
            no_retry: args.no_retry,
            json: args.json,
        };
        return innodb::run(args.innodb, plan).await;
    }
    let options = Options::from_args(args)?;
    // Kept until the race is over: an embedded cluster lives as long as its `Database`.
    let (server, _database) = server(global).await?;
    let reports = race(&options.race, server).await?;
    print(&reports, &options)?;
    if lab::safe_strategy_broke(&reports) {
        bail!("a safe strategy broke an invariant (see above)");
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the scratch database is made: a local Citus cluster (`--citus-workers`), or the
/// server of `--database-url` or of the embedded cluster.
async fn server(global: Global) -> Result<(Server, Option<Database>)> {
    if let Some(workers) = global.citus_workers {
        anyhow::ensure!(
            global.database_url.is_none(),
            "--citus-workers and --database-url: the race runs on one of them"
        );
        let cluster = database::start_citus(workers, Some(CITUS_RACE_DEADLOCK_TIMEOUT)).await?;
        return Ok((Server::Citus(cluster), None));
    }
    let database = database::open_with(global.database_url, global.embedded, Role::Tool).await?;
    Ok((Server::from(database.url.as_str()), Some(database)))
}

/// Runs `race` on a scratch database of `server`, dropped whatever happened (Ctrl-C
/// included); past a few seconds, one progress line per run on stderr.
async fn race(race: &Race, server: Server) -> Result<Vec<Report>> {
    let scratch = Scratch::for_race(server).await?;
    let started = Instant::now();
    let on_run = |done: RunDone<'_>| {
        if started.elapsed() >= PROGRESS_AFTER {
            eprintln!("{}", progress_line(&done));
        }
    };
    let result = tokio::select! {
        r = race.run(&scratch, &on_run) => r.map_err(anyhow::Error::from),
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    // Report the run's error first, the drop's second.
    let dropped = scratch.drop_database().await;
    let reports = result?;
    dropped?;
    Ok(reports)
}

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

/// The JSON array, or the table, the `--explain` timelines and one sentence per strategy.
fn print(reports: &[Report], options: &Options) -> Result<()> {
    if options.json {
        println!("{}", serde_json::to_string_pretty(reports)?);
        return Ok(());
    }
    print!("{}", table(reports));
    if options.explain {
        for r in reports {
            println!();
            let events = r.trace.as_deref().unwrap_or(&[]);
            let dropped = r.trace_dropped.unwrap_or(0);
            print!("{}", explain::render(&r.strategy, events, dropped));
        }
    }
    println!();
    for r in reports {
        println!("{}", conclusion(r));
    }
    Ok(())
}
