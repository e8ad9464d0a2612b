//! Where the `saldo` command's logs go and how they look: stderr, as text for people or one
//! JSON object per line for machines (`--log-format`, `SALDO_LOG_FORMAT`), filtered by
//! `RUST_LOG` or the command's default. Colour only when stderr is a terminal and `NO_COLOR` is
//! unset or empty (no-color.org): escape codes in a redirected log are noise to every reader.
//!
//! Whatever `RUST_LOG` says, `tokio_postgres` stays at info: at debug it logs every statement
//! with its parameters (order and transfer ids, amounts, account ids), so `RUST_LOG=debug` on a
//! service would copy its traffic into the log. A `RUST_LOG` that names `tokio_postgres`
//! itself gets what it asks for, with a warning: that is a deliberate choice, for debugging
//! the driver.

use std::ffi::OsStr;
use std::io::IsTerminal;

/// The `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, event fields at the top level.
    Json,
}

/// Filter directives used when `RUST_LOG` is unset or invalid. refinery's own lines are left
/// out: `saldo::db::migrate` says in one line what migrating did.
pub const DEFAULT_FILTER: &str = "info,refinery_core=warn";

/// The database driver whose debug lines carry statement parameters.
const DRIVER: &str = "tokio_postgres";
/// Its level whatever `RUST_LOG` says, unless `RUST_LOG` names it.
const DRIVER_CAP: &str = "tokio_postgres=info";

/// Installs the process's subscriber on stderr with `default_filter` unless `RUST_LOG` is set.
pub fn init(format: LogFormat, default_filter: &str) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let driver_named = names_driver(rust_log.as_deref());
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    if !driver_named {
        // A target directive outranks RUST_LOG's global level (`debug`, `trace`).
        if let Ok(cap) = DRIVER_CAP.parse() {
            filter = filter.add_directive(cap);
        }
    }
    install(format, filter);
    if driver_named {
        tracing::warn!(
            "RUST_LOG names tokio_postgres: at debug its lines carry every statement's \
             parameters (ids, amounts); keep such a log private"
        );
    }
}

/// True when `RUST_LOG` has a directive for the driver (or one of its modules).
fn names_driver(rust_log: Option<&str>) -> bool {
    rust_log.is_some_and(|directives| directives.split(',').any(|d| d.trim().starts_with(DRIVER)))
}

fn install(format: LogFormat, filter: tracing_subscriber::EnvFilter) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => {
            let no_color = std::env::var_os("NO_COLOR");
            let ansi = colour(std::io::stderr().is_terminal(), no_color.as_deref());
            builder.with_ansi(ansi).init()
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

/// Colour on a terminal, unless `NO_COLOR` is set to anything but the empty string.
fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directive_for_the_driver_names_it() {
        assert!(!names_driver(None));
        assert!(!names_driver(Some("debug")));
        assert!(!names_driver(Some("trace,saldo=debug")));
        assert!(names_driver(Some("debug,tokio_postgres=debug")));
        assert!(names_driver(Some("tokio_postgres::query=trace")));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
