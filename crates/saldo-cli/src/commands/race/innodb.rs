//! `saldo race last-unit | oversubscribed | crossed-transfers --mariadb` (a private MariaDB
//! started for the race and stopped after it) or `--mariadb-url mysql://…`: the race on InnoDB,
//! under `--isolation repeatable-read` (InnoDB's default) or `read-committed`, one line per
//! strategy. The lab works in a scratch database of its own and drops it at the end. Exit
//! status as for PostgreSQL: non-zero only when a safe strategy broke an invariant.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use saldo_lab::innodb::stock::{self, InnoStrategy, StockRace};
use saldo_lab::innodb::transfers::{self, TransferRace, TransferStrategy};
use saldo_lab::innodb::{InnoReport, Isolation, Lab};
use saldo_lab::race::Scenario;

/// The InnoDB flags of `saldo race`.
#[derive(Debug, Clone, clap::Args)]
pub struct InnoArgs {
    /// last-unit, oversubscribed, crossed-transfers: race on a private MariaDB (InnoDB)
    /// started from this machine's binaries (`apt-get install -y mariadb-server`).
    #[arg(long, conflicts_with = "mariadb_url")]
    pub mariadb: bool,
    /// Race on this MySQL/MariaDB server instead (`mysql://user:pass@host:3306/`, or
    /// `…@localhost/?socket=/path`); the lab creates and drops a scratch database there.
    #[arg(long, env = "SALDO_MARIADB_URL", hide_env_values = true)]
    pub mariadb_url: Option<String>,
    /// With --mariadb/--mariadb-url: repeatable-read (InnoDB's default) or read-committed.
    /// (On PostgreSQL each lab strategy sets its own level, so the flag is refused there.)
    #[arg(long)]
    pub isolation: Option<String>,
}

impl InnoArgs {
    /// Whether the race runs on InnoDB; `--isolation` without a MariaDB to apply it to is an
    /// error rather than a flag silently ignored.
    pub fn wanted(&self) -> Result<bool> {
        let wanted = self.mariadb || self.mariadb_url.is_some();
        if !wanted && self.isolation.is_some() {
            bail!(
                "--isolation applies to the InnoDB races only (with --mariadb or --mariadb-url); \
                 on PostgreSQL each lab strategy sets its own isolation level"
            );
        }
        Ok(wanted)
    }
}

/// What the InnoDB race takes from the common flags.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    pub strategy: String,
    pub runs: Option<u32>,
    pub size: Option<u32>,
    pub stock: Option<u32>,
    pub think_ms: Option<u64>,
    pub no_retry: bool,
    pub json: bool,
}

/// Validates, starts (or reaches) the server, races, prints.
pub async fn run(inno: InnoArgs, plan: Plan) -> Result<ExitCode> {
    let isolation = Isolation::parse(inno.isolation.as_deref().unwrap_or("repeatable-read"))?;
    let race = Race::new(&plan, isolation)?;
    let (opts, server) = match inno.mariadb_url {
        Some(url) => (Lab::opts_from_url(&url)?, None),
        None => {
            let config = mariadb_local::Config::default();
            let server =
                tokio::task::spawn_blocking(move || mariadb_local::MariaDb::start(&config))
                    .await
                    .context("starting the private MariaDB")??;
            (Lab::opts_for(&server), Some(server))
        }
    };
    let lab = Lab::create(opts).await?;
    let result = tokio::select! {
        r = race.run(&lab) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    let dropped = lab.drop_database().await;
    let reports = result?;
    dropped?;
    if let Some(server) = server {
        tokio::task::spawn_blocking(move || server.stop()).await?;
    }
    print(&reports, plan.json)?;
    if reports.iter().any(InnoReport::safe_broke) {
        bail!("a safe strategy broke an invariant (see above)");
    }
    Ok(ExitCode::SUCCESS)
}

enum Race {
    Stock(StockRace, Vec<InnoStrategy>),
    Transfers(TransferRace, Vec<TransferStrategy>),
}

impl Race {
    fn new(plan: &Plan, isolation: Isolation) -> Result<Race> {
        let defaults = plan.scenario.defaults();
        let runs = plan.runs.unwrap_or(defaults.runs);
        let size = plan.size.unwrap_or(defaults.size);
        Ok(match plan.scenario {
            Scenario::LastUnit | Scenario::Oversubscribed => {
                let stock = plan.stock.or(defaults.stock).unwrap_or(1);
                let think = plan.think_ms.or(defaults.think_ms).unwrap_or(20);
                let name = plan.scenario.as_str();
                Race::Stock(
                    StockRace::new(name, (size, stock, runs), think, isolation)?,
                    InnoStrategy::parse_list(&plan.strategy)?,
                )
            }
            Scenario::CrossedTransfers => Race::Transfers(
                TransferRace::new(size, runs, !plan.no_retry, isolation)?,
                TransferStrategy::parse_list(&plan.strategy)?,
            ),
            other => bail!(
                "{} is not raced on MariaDB: last-unit, oversubscribed and crossed-transfers are",
                other.as_str()
            ),
        })
    }

    async fn run(&self, lab: &Lab) -> Result<Vec<InnoReport>> {
        Ok(match self {
            Race::Stock(race, strategies) => stock::run(lab, race, strategies).await?,
            Race::Transfers(race, strategies) => transfers::run(lab, race, strategies).await?,
        })
    }
}

fn print(reports: &[InnoReport], json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(reports)?);
        return Ok(());
    }
    for report in reports {
        println!("{report}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::InnoArgs;

    fn args(mariadb: bool, isolation: Option<&str>) -> InnoArgs {
        InnoArgs {
            mariadb,
            mariadb_url: None,
            isolation: isolation.map(str::to_owned),
        }
    }

    #[test]
    fn isolation_without_a_mariadb_is_refused_not_ignored() {
        let refused = args(false, Some("read-committed")).wanted();
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("--mariadb")),
            "{refused:?}"
        );
        assert!(matches!(args(false, None).wanted(), Ok(false)));
        assert!(matches!(
            args(true, Some("read-committed")).wanted(),
            Ok(true)
        ));
        assert!(matches!(args(true, None).wanted(), Ok(true)));
    }
}
