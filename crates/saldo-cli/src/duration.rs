//! Duration flags as people type them: `500ms`, `10s`, `15m`, `1h 30m` (humantime), or a plain
//! number in the flag's own unit (seconds for `*_s` flags, milliseconds for `*_ms` ones), so
//! every value that worked before still means the same. The result stays a whole number in the
//! flag's unit and is checked against the flag's bounds, which the error message states.

use std::time::Duration;

/// The unit a flag's plain numbers are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

impl Unit {
    fn suffix(self) -> &'static str {
        match self {
            Unit::Seconds => "s",
            Unit::Millis => "ms",
        }
    }

    fn of(self, d: Duration) -> Option<u64> {
        match self {
            Unit::Seconds if d.subsec_nanos() == 0 => Some(d.as_secs()),
            Unit::Millis if d.subsec_nanos() % 1_000_000 == 0 => u64::try_from(d.as_millis()).ok(),
            _ => None,
        }
    }
}

/// Parses `raw` as a count of `unit` within `min..=max` (both in `unit`).
pub fn parse(raw: &str, unit: Unit, min: u64, max: u64) -> Result<u64, String> {
    let raw = raw.trim();
    let bounds = || format!("between {min}{u} and {max}{u}", u = unit.suffix());
    let value = if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        raw.parse::<u64>()
            .map_err(|_| format!("{raw:?} is too large: give a duration {}", bounds()))?
    } else {
        let d = humantime::parse_duration(raw).map_err(|e| {
            format!(
                "{raw:?} is not a duration ({e}): give a number of {} or a duration such as \
                 500ms, 10s, 15m, 1h",
                match unit {
                    Unit::Seconds => "seconds",
                    Unit::Millis => "milliseconds",
                }
            )
        })?;
        unit.of(d).ok_or_else(|| {
            format!(
                "{raw:?} is not a whole number of {}: give a duration {}",
                match unit {
                    Unit::Seconds => "seconds",
                    Unit::Millis => "milliseconds",
                },
                bounds()
            )
        })?
    };
    if !(min..=max).contains(&value) {
        return Err(format!(
            "{raw} is out of range: give a duration {}",
            bounds()
        ));
    }
    Ok(value)
}

/// A clap value parser for a seconds flag within `min..=max` seconds.
pub fn secs(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |raw| parse(raw, Unit::Seconds, min, max)
}

/// A clap value parser for a milliseconds flag within `min..=max` ms.
pub fn millis(min: u64, max: u64) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |raw| parse(raw, Unit::Millis, min, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn units_and_plain_numbers() {
        let s = |raw| parse(raw, Unit::Seconds, 1, 86_400);
        assert_eq!(s("900"), Ok(900));
        assert_eq!(s("15m"), Ok(900));
        assert_eq!(s("10s"), Ok(10));
        assert_eq!(s("1h 30m"), Ok(5_400));
        assert_eq!(s(" 2m "), Ok(120));
        assert!(s("500ms")
            .expect_err("refused")
            .contains("whole number of seconds"));
        assert!(s("0")
            .expect_err("refused")
            .contains("between 1s and 86400s"));
        assert!(s("2d").expect_err("refused").contains("out of range"));
        assert!(s("ten").expect_err("refused").contains("not a duration"));
        assert!(s("").is_err());
        assert!(s("99999999999999999999999")
            .expect_err("refused")
            .contains("too large"));
        let ms = |raw| parse(raw, Unit::Millis, 100, 300_000);
        assert_eq!(ms("500"), Ok(500));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("1.5s"), Ok(1_500));
        assert_eq!(ms("5m"), Ok(300_000));
        assert!(ms("6m").is_err());
        assert!(ms("100us").is_err());
    }

    proptest! {
        /// A plain number keeps the flag's unit, and the same time written with a unit parses
        /// to the same value.
        #[test]
        fn a_number_and_its_spelled_out_duration_agree(n in 0u64..1_000_000) {
            prop_assert_eq!(parse(&n.to_string(), Unit::Seconds, 0, u64::MAX), Ok(n));
            prop_assert_eq!(parse(&format!("{n}s"), Unit::Seconds, 0, u64::MAX), Ok(n));
            prop_assert_eq!(parse(&format!("{n}ms"), Unit::Millis, 0, u64::MAX), Ok(n));
            prop_assert_eq!(parse(&format!("{n}s"), Unit::Millis, 0, u64::MAX), Ok(n * 1_000));
        }

        /// Whatever the input, the parser answers (no panic) and never leaves the bounds.
        #[test]
        fn never_outside_the_bounds(raw in "\\PC{0,12}", min in 0u64..100, span in 0u64..1_000) {
            if let Ok(v) = parse(&raw, Unit::Millis, min, min + span) {
                prop_assert!((min..=min + span).contains(&v));
            }
        }
    }
}
