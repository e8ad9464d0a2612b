//! The one builder of multi-row `VALUES` statements.
//!
//! Citus routes each row of an `INSERT … VALUES (…), (…)` to its shard, where it runs an
//! `INSERT … SELECT … FROM unnest(…)` through the coordinator (intermediate results, then one
//! insert per shard: a batch's router rows took 137 ms that way, 6 ms as `VALUES` on the
//! 2-worker test cluster). So on Citus the multi-row writes are `VALUES` statements with one
//! placeholder per cell. Their text depends only on the row count, so each count's text is
//! built once per process and cached ([`Values::statement`]); callers bound the count
//! (a chunk size), which bounds the texts and keeps every statement under PostgreSQL's 65,535
//! parameters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One column of a row: the expression around its parameter, e.g. `("", "::uuid")` for
/// `$n::uuid`, or `("now() + make_interval(secs => ", "::float8)")`.
#[derive(Debug, Clone, Copy)]
pub struct Col {
    pub before: &'static str,
    pub after: &'static str,
}

impl Col {
    /// `$n::<ty>`.
    pub const fn cast(after: &'static str) -> Col {
        Col { before: "", after }
    }

    /// `<before>$n<after>`.
    pub const fn wrapped(before: &'static str, after: &'static str) -> Col {
        Col { before, after }
    }
}

/// A multi-row `VALUES` statement: `<head> VALUES (<cols>), … <tail>`.
pub struct Values {
    head: &'static str,
    cols: &'static [Col],
    tail: &'static str,
    /// Texts built so far, by row count (bounded by the callers' chunk sizes).
    built: Mutex<BTreeMap<usize, Arc<str>>>,
}

impl Values {
    pub const fn new(head: &'static str, cols: &'static [Col], tail: &'static str) -> Values {
        Values {
            head,
            cols,
            tail,
            built: Mutex::new(BTreeMap::new()),
        }
    }

    /// Parameters per row.
    pub fn width(&self) -> usize {
        self.cols.len()
    }

    /// The statement for `rows` rows (≥ 1), parameters numbered row by row.
    pub fn statement(&self, rows: usize) -> Arc<str> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        built
            .entry(rows)
            .or_insert_with(|| Arc::from(self.build(rows)))
            .clone()
    }

    fn build(&self, rows: usize) -> String {
        let mut text = String::with_capacity(self.head.len() + self.tail.len() + rows * 64);
        text.push_str(self.head);
        text.push_str(" VALUES ");
        let mut n = 0;
        for row in 0..rows {
            if row > 0 {
                text.push_str(", ");
            }
            text.push('(');
            for (i, col) in self.cols.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                n += 1;
                text.push_str(col.before);
                text.push('$');
                text.push_str(&n.to_string());
                text.push_str(col.after);
            }
            text.push(')');
        }
        if !self.tail.is_empty() {
            text.push(' ');
            text.push_str(self.tail);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TWO: Values = Values::new(
        "INSERT INTO t (a, b)",
        &[
            Col::cast("::uuid"),
            Col::wrapped("now() + (", " * interval '1s')"),
        ],
        "RETURNING a",
    );

    #[test]
    fn rows_are_numbered_in_order() {
        assert_eq!(
            &*TWO.statement(2),
            "INSERT INTO t (a, b) VALUES ($1::uuid, now() + ($2 * interval '1s')), \
             ($3::uuid, now() + ($4 * interval '1s')) RETURNING a"
        );
        assert_eq!(TWO.width(), 2);
        assert!(Arc::ptr_eq(&TWO.statement(2), &TWO.statement(2)));
    }
}
