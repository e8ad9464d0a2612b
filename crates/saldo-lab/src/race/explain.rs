//! `saldo race --explain`: the interleaving one run actually went through, printed like the
//! last-unit race's two-session timeline — the first few sessions side by side, one column
//! each, then a summary of how many sessions read the same balance and what each of them
//! wrote.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use saldo::stock::trace::{TraceEvent, TraceStep};

/// Sessions printed side by side; the rest are summarised.
pub const COLUMNS: usize = 3;
/// Width of one session column.
const WIDTH: usize = 30;
/// Most timeline lines printed.
pub const MAX_LINES: usize = 40;

fn describe(step: &TraceStep) -> String {
    match step {
        TraceStep::Read {
            available, version, ..
        } => format!("read available={available} v{version}"),
        TraceStep::Locked { available } => format!("locked, available={available}"),
        TraceStep::Refused { available } => format!("refused (available={available})"),
        TraceStep::Wrote {
            available,
            reserved,
        } => format!("wrote available={available} res={reserved}"),
        TraceStep::VersionMoved { read_version } => format!("0 rows: v{read_version} is gone"),
        TraceStep::WriteFailed { sqlstate } if sqlstate == "23514" => {
            "UPDATE refused: CHECK 23514".into()
        }
        TraceStep::WriteFailed { sqlstate } => format!("UPDATE failed: {sqlstate}"),
    }
}

/// Renders the timeline and its summary; `strategy` names the column owner.
pub fn render(strategy: &str, events: &[TraceEvent], dropped: u64) -> String {
    let mut out = String::new();
    if events.is_empty() {
        let _ = writeln!(
            out,
            "{strategy}: nothing to show — it does not read before it writes; the check lives \
             inside the UPDATE, so there is no window to interleave in."
        );
        return out;
    }
    // Columns: the first sessions in order of their first event.
    let mut order: Vec<u32> = Vec::new();
    for e in events {
        if !order.contains(&e.session) {
            order.push(e.session);
        }
    }
    let shown: Vec<u32> = order.iter().copied().take(COLUMNS).collect();
    let _ = writeln!(
        out,
        "{strategy}: first run, {} sessions; the first {} side by side",
        order.len(),
        shown.len()
    );
    let mut header = format!("{:>10}  ", "t (ms)");
    for (i, _) in shown.iter().enumerate() {
        let _ = write!(header, "{:<WIDTH$}", format!("session {}", i + 1));
    }
    let _ = writeln!(out, "{}", header.trim_end());
    let _ = writeln!(out, "{:>10}  {}", "", "-".repeat(WIDTH * shown.len() - 2));
    let mut lines = 0;
    for e in events {
        let Some(col) = shown.iter().position(|s| *s == e.session) else {
            continue;
        };
        if lines == MAX_LINES {
            let _ = writeln!(out, "{:>10}  …", "");
            break;
        }
        lines += 1;
        let ms = e.at_us as f64 / 1000.0;
        let _ = writeln!(
            out,
            "{ms:>10.3}  {}{}",
            " ".repeat(WIDTH * col),
            describe(&e.step)
        );
    }
    out.push_str(&summary(events, order.len()));
    if dropped > 0 {
        let _ = writeln!(
            out,
            "  ({dropped} events beyond the trace bound were not kept)"
        );
    }
    out
}

/// How many sessions read each balance, and what the writes left behind.
fn summary(events: &[TraceEvent], sessions: usize) -> String {
    let mut out = String::from("summary:\n");
    // Sessions that read (or locked) each (product, available) before writing.
    let mut reads: BTreeMap<(i64, i32), Vec<u32>> = BTreeMap::new();
    let mut wrote: BTreeMap<(i64, i32, i32), u64> = BTreeMap::new();
    let mut failed: BTreeMap<String, u64> = BTreeMap::new();
    let (mut refused, mut moved) = (0u64, 0u64);
    for e in events {
        let p = e.product_id.get();
        match &e.step {
            TraceStep::Read { available, .. } | TraceStep::Locked { available } => {
                let s = reads.entry((p, *available)).or_default();
                if !s.contains(&e.session) {
                    s.push(e.session);
                }
            }
            TraceStep::Wrote {
                available,
                reserved,
            } => *wrote.entry((p, *available, *reserved)).or_default() += 1,
            TraceStep::WriteFailed { sqlstate } => {
                *failed.entry(sqlstate.clone()).or_default() += 1
            }
            TraceStep::Refused { .. } => refused += 1,
            TraceStep::VersionMoved { .. } => moved += 1,
        }
    }
    for ((product, available), who) in &reads {
        if *available > 0 {
            let _ = writeln!(
                out,
                "  {} of {sessions} sessions read product {product} with available={available}",
                who.len()
            );
        }
    }
    let writes: u64 = wrote.values().sum();
    for ((product, available, reserved), n) in &wrote {
        let _ = writeln!(
            out,
            "  {n} wrote product {product}: available={available} reserved={reserved}"
        );
    }
    for (state, n) in &failed {
        let why = if state == "23514" {
            " (CHECK available >= 0: the write would have gone negative)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {n} writes failed with SQLSTATE {state}{why}");
    }
    if moved > 0 {
        let _ = writeln!(
            out,
            "  {moved} optimistic UPDATEs found the version moved and re-read"
        );
    }
    let _ = writeln!(out, "  {refused} refused after reading too little");
    // The lost update: several sessions wrote the same resulting row.
    if let Some(((product, available, reserved), n)) = wrote.iter().find(|(_, n)| **n > 1) {
        let _ = writeln!(
            out,
            "  => lost update: {n} sessions each wrote available={available} reserved={reserved} \
             on product {product}; {writes} units were taken from one balance"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use saldo::domain::ProductId;

    fn ev(session: u32, at_us: u64, step: TraceStep) -> TraceEvent {
        TraceEvent {
            session,
            product_id: ProductId::new(1).expect("id"),
            at_us,
            step,
        }
    }

    #[test]
    fn two_sessions_that_read_the_same_unit_show_as_a_lost_update() {
        let read = TraceStep::Read {
            available: 1,
            reserved: 0,
            version: 1,
        };
        let wrote = TraceStep::Wrote {
            available: 0,
            reserved: 1,
        };
        let events = vec![
            ev(1, 10, read.clone()),
            ev(2, 20, read),
            ev(1, 30, wrote.clone()),
            ev(2, 40, wrote),
        ];
        let text = render("naive-overwrite", &events, 0);
        assert!(
            text.contains("2 of 2 sessions read product 1 with available=1"),
            "{text}"
        );
        assert!(text.contains("lost update: 2 sessions"), "{text}");
        // Session 2's events sit in the second column.
        assert!(text.contains(&format!("{}read available=1", " ".repeat(WIDTH))));
    }

    #[test]
    fn a_strategy_without_reads_says_so() {
        assert!(render("atomic", &[], 0).contains("nothing to show"));
    }
}
