//! `saldo events tail`: the event feed on stdout, read with the library's cursor
//! (`saldo::events`), attached to a database the way `saldo audit` is (never migrating it).
//! Starts after `--after CURSOR`, or `--from start|end` (default: end); filters by `--type`
//! (repeat or comma-separate) and `--stream`; prints JSON lines (one event each) or a table.
//! Without `--follow` it reads until caught up and exits, saying on stderr where to resume;
//! with it, it polls every `--poll-interval` until Ctrl-C or `--max-events`.
//!
//! Reading runs a sequencer pass first, as every reader of the feed does: the feed rows it may
//! add are the same any reader (or the service) would have added.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use saldo::events::{self, Cursor, Event, Filter};
use saldo::stock::Store;

use crate::commands::shared::{attached_store, Global};
use crate::database::Role;
use crate::duration;

/// Largest `--max-events`.
pub const MAX_EVENTS_LIMIT: u64 = 1_000_000_000;
/// Bounds of `--poll-interval` (ms).
pub const MIN_POLL_MS: u64 = 50;
pub const MAX_POLL_MS: u64 = 60_000;
/// Events one read asks for.
const PAGE: usize = events::MAX_PAGE;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: EventsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum EventsCommand {
    /// Print the event feed: from its end (default), its start or after a cursor, filtered by
    /// type and stream; until caught up, or following it with --follow.
    Tail(TailArgs),
}

/// Where `tail` starts without `--after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StartAt {
    /// The oldest event kept.
    Start,
    /// Only what commits from now on.
    End,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// One JSON object per event and line.
    Json,
    /// Aligned columns (the event's data left out).
    Table,
}

#[derive(Debug, clap::Args)]
struct TailArgs {
    /// Start after this cursor (an event's `cursor`, or the one printed when tail exits).
    #[arg(long, conflicts_with = "from", value_parser = cursor)]
    after: Option<Cursor>,
    /// Start at the oldest event kept or at the end.
    #[arg(long, value_enum, default_value_t = StartAt::End)]
    from: StartAt,
    /// Only events of these types (repeat, or separate with commas), e.g. stock.changed.
    #[arg(long = "type", value_name = "TYPE", value_delimiter = ',')]
    types: Vec<String>,
    /// Only the events of one stream, e.g. product:42 or order:o-1.
    #[arg(long, value_name = "KIND:ID")]
    stream: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// Keep polling for new events instead of exiting once caught up (Ctrl-C stops).
    #[arg(long)]
    follow: bool,
    /// Exit after this many events.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_EVENTS_LIMIT))]
    max_events: Option<u64>,
    /// With --follow: time between polls when caught up (50ms to 60s).
    #[arg(long = "poll-interval", default_value = "500ms",
          value_parser = duration::millis(MIN_POLL_MS, MAX_POLL_MS))]
    poll_interval_ms: u64,
}

/// Flag parser of `--after`.
fn cursor(raw: &str) -> Result<Cursor, String> {
    raw.trim()
        .parse()
        .map_err(|e: saldo::InputError| e.to_string())
}

pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    let EventsCommand::Tail(args) = args.command;
    global.no_citus_workers()?;
    let filter = Filter {
        types: events::parse_types(args.types.iter().map(String::as_str))?,
        stream: args
            .stream
            .as_deref()
            .map(events::parse_stream)
            .transpose()?,
    };
    let (_database, pool) = global.open_pool(Role::Tool).await?;
    // Never migrated: the schema must be this binary's.
    let store = attached_store(&pool).await?;
    let start = match (args.after, args.from) {
        (Some(after), _) => Some(after),
        (None, StartAt::Start) => None,
        (None, StartAt::End) => Some(events::end(&store).await?),
    };
    let tail = tokio::select! {
        tail = tail(&store, &args, &filter, start) => tail,
        _ = tokio::signal::ctrl_c() => Ok(None),
    };
    pool.close();
    if let Some(at) = tail? {
        eprintln!("caught up at {at}: resume with `saldo events tail --after {at}`");
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads and prints until caught up (or for ever with `--follow`), at most `--max-events`;
/// answers the cursor to resume after (`None`: stdout closed or interrupted).
async fn tail(
    store: &Store,
    args: &TailArgs,
    filter: &Filter,
    start: Option<Cursor>,
) -> Result<Option<Cursor>> {
    let mut out = Printer::new(args.format);
    let mut after = start;
    let mut left = args.max_events.unwrap_or(u64::MAX);
    loop {
        let limit = PAGE.min(usize::try_from(left).unwrap_or(PAGE));
        let page = events::read(store, after, limit, filter)
            .await
            .map_err(|e| match e {
                saldo::Error::CursorExpired { .. } => anyhow::Error::new(e).context(
                    "resynchronise from the list endpoints, then `saldo events tail --from end`",
                ),
                e => e.into(),
            })?;
        let next: Cursor = page.next.parse().context("the feed's next cursor")?;
        let moved = after != Some(next);
        for event in &page.events {
            if !out.print(event)? {
                return Ok(None);
            }
            after = Some(event.cursor.parse().context("an event's cursor")?);
            left -= 1;
            if left == 0 {
                return Ok(after);
            }
        }
        after = after.max(Some(next));
        if !moved {
            if !args.follow {
                return Ok(after);
            }
            tokio::time::sleep(Duration::from_millis(args.poll_interval_ms)).await;
        }
    }
}

/// Writes events to stdout; a closed stdout (`| head`) ends the tail quietly.
struct Printer {
    format: Format,
    header: bool,
}

impl Printer {
    fn new(format: Format) -> Self {
        Printer {
            format,
            header: false,
        }
    }

    /// False when stdout is closed.
    fn print(&mut self, e: &Event) -> Result<bool> {
        let mut stdout = std::io::stdout().lock();
        let written = match self.format {
            Format::Json => writeln!(stdout, "{}", serde_json::to_string(e)?),
            Format::Table => {
                let header = if self.header {
                    Ok(())
                } else {
                    self.header = true;
                    writeln!(
                        stdout,
                        "{:<10} {:<24} {:<22} {:<24} {:>8}  CURSOR",
                        "SEQ", "AT", "TYPE", "STREAM", "POSITION"
                    )
                };
                header.and_then(|()| {
                    writeln!(
                        stdout,
                        "{:<10} {:<24} {:<22} {:<24} {:>8}  {}",
                        e.seq,
                        e.at.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                        e.kind,
                        e.stream,
                        e.position,
                        e.cursor
                    )
                })
            }
        };
        match written.and_then(|()| stdout.flush()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
