//! How a failed command reads: `error: <what failed>`, then one `  caused by: <why>` line per
//! cause in the chain, and nothing else. A backtrace is printed only when asked for with
//! `SALDO_BACKTRACE=1` (anyhow captures one whenever `RUST_BACKTRACE` is set, and printing it
//! by default flooded every error with 60 lines a user cannot act on). A value clap refuses
//! that came from an environment variable gets a note naming the variable.

use std::fmt::Write as _;

/// The switch that adds the backtrace.
pub const BACKTRACE_VAR: &str = "SALDO_BACKTRACE";

/// Whether the user asked for backtraces.
pub fn backtrace_requested() -> bool {
    std::env::var_os(BACKTRACE_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The lines printed for `error`.
pub fn render(error: &anyhow::Error, with_backtrace: bool) -> String {
    let mut out = String::new();
    let mut shown: Vec<String> = Vec::new();
    for (i, cause) in error.chain().enumerate() {
        let text = cause.to_string();
        // Many errors repeat their source in their own message ("x: <source>"): a cause already
        // said by the line above adds nothing.
        if text.is_empty() || shown.iter().any(|s| s.contains(&text)) {
            continue;
        }
        let text_lines: Vec<&str> = text.lines().collect();
        let prefix = if i == 0 { "error: " } else { "  caused by: " };
        let _ = writeln!(out, "{prefix}{}", text_lines.first().copied().unwrap_or(""));
        for more in text_lines.iter().skip(1) {
            let _ = writeln!(out, "    {more}");
        }
        shown.push(text);
    }
    if with_backtrace {
        let _ = writeln!(out, "backtrace:\n{}", error.backtrace());
    }
    out
}

/// For a value clap refused that came from an environment variable rather than the command
/// line, a line saying which variable (clap's message names only the flag). Never the value.
pub fn env_source_note(error: &clap::Error, command: &clap::Command) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let on_command_line = std::env::args_os().any(|a| {
        let a = a.to_string_lossy();
        a.strip_prefix("--")
            .is_some_and(|rest| rest == long || rest.starts_with(&format!("{long}=")))
    });
    if on_command_line {
        return None;
    }
    let var = env_of(command, long)?;
    std::env::var_os(&var).map(|_| {
        format!(
            "note: that value came from the environment variable {}, not from --{long}",
            var.to_string_lossy()
        )
    })
}

/// The environment variable of the flag `--long`, searched through every subcommand.
fn env_of(command: &clap::Command, long: &str) -> Option<std::ffi::OsString> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env().map(ToOwned::to_owned))
        .or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn one_line_per_cause_and_repeats_dropped() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Err::<(), _>(io)
            .context("error connecting to server: refused")
            .context("connecting to PostgreSQL at 127.0.0.1:1")
            .expect_err("refused");
        assert_eq!(
            render(&e, false),
            "error: connecting to PostgreSQL at 127.0.0.1:1\n  caused by: error connecting to \
             server: refused\n"
        );
        assert!(render(&e, true).contains("backtrace:"));
    }
}
