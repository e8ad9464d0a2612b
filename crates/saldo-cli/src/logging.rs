//! Where the `saldo` command's logs go and how they look: stderr, as text for people or one
//! JSON object per line for machines (`--log-format`, `SALDO_LOG_FORMAT`), filtered by
//! `RUST_LOG` or the command's default. Colour only when stderr is a terminal and `NO_COLOR` is
//! unset or empty (no-color.org): escape codes in a redirected log are noise to every reader.

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

/// Installs the process's subscriber on stderr with `default_filter` unless `RUST_LOG` is set.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
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
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }
}
