//! The reservations of a history against the database: every acknowledged reservation is there
//! once with the items it asked for, every refused one is not; each row's status is the fate
//! the answers gave it (confirmed when an acknowledged confirm lists it, released when an
//! acknowledged release does, never both, else active); and the units add up per product.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::types::{Books, Check, Found, Opening, ReservationRow};
use crate::faults::history::{Op, Record, Verdict};

/// Units the answers put in each state, per product.
#[derive(Debug, Default)]
pub struct Units {
    pub active: BTreeMap<i64, i64>,
    pub confirmed: BTreeMap<i64, i64>,
}

/// The products an order's acknowledged confirms and releases list.
#[derive(Debug, Default)]
struct Fate {
    confirmed: BTreeSet<i64>,
    released: BTreeSet<i64>,
}

/// The products of `body[key]`, a list of items.
fn products_in(body: &Value, key: &str) -> Vec<i64> {
    body[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["product_id"].as_i64())
                .collect()
        })
        .unwrap_or_default()
}

fn fates(history: &[Record]) -> BTreeMap<&str, Fate> {
    let mut fates: BTreeMap<&str, Fate> = BTreeMap::new();
    for record in history {
        if record.outcome() != Verdict::Applied {
            continue;
        }
        let body = record.deciding().body();
        match &record.op {
            Op::Confirm { order } => fates
                .entry(order)
                .or_default()
                .confirmed
                .extend(products_in(body, "confirmed")),
            Op::Release { order } => fates
                .entry(order)
                .or_default()
                .released
                .extend(products_in(body, "released")),
            _ => {}
        }
    }
    fates
}

/// Checks every reservation of `history` against `books`; returns the units the answers put
/// in each state.
pub fn check(history: &[Record], books: &Books, found: &mut Found) -> Units {
    let mut rows: BTreeMap<&str, Vec<&ReservationRow>> = BTreeMap::new();
    for row in &books.reservations {
        rows.entry(&row.order).or_default().push(row);
    }
    let fates = fates(history);
    let mut units = Units::default();
    let mut known: BTreeSet<&str> = BTreeSet::new();
    for record in history {
        let Op::Reserve { order, items } = &record.op else {
            continue;
        };
        known.insert(order.as_str());
        let of_order = rows.get(order.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        match record.outcome() {
            Verdict::Applied => {
                let fate = fates.get(order.as_str());
                applied_once(order, items, of_order, fate, found, &mut units);
            }
            Verdict::NotApplied if !of_order.is_empty() => found.add(
                Check::RefusedNotApplied,
                format!(
                    "reservation {order} was answered {:?}, yet the database has {of_order:?}",
                    record.deciding()
                ),
            ),
            _ => {}
        }
    }
    for (order, of_order) in &rows {
        if !known.contains(order) {
            found.add(
                Check::RefusedNotApplied,
                format!(
                    "order {order} is in the database, though no client reserved it: {of_order:?}"
                ),
            );
        }
    }
    units
}

/// One acknowledged reservation: each item once, nothing else, each in the state its fate says.
fn applied_once(
    order: &str,
    items: &[(i64, i32)],
    rows: &[&ReservationRow],
    fate: Option<&Fate>,
    found: &mut Found,
    units: &mut Units,
) {
    for row in rows {
        if !items.iter().any(|(p, _)| *p == row.product) {
            found.add(
                Check::AppliedOnce,
                format!("reservation {order} has a row it did not ask for: {row:?}"),
            );
        }
    }
    for &(product, quantity) in items {
        let quantity = i64::from(quantity);
        let confirmed = fate.is_some_and(|f| f.confirmed.contains(&product));
        let released = fate.is_some_and(|f| f.released.contains(&product));
        if confirmed && released {
            found.add(
                Check::OneFatePerReservation,
                format!("order {order}, product {product}: answered both confirmed and released"),
            );
        }
        let expected = match (confirmed, released) {
            (true, _) => "confirmed",
            (false, true) => "released",
            (false, false) => "active",
        };
        match expected {
            "confirmed" => *units.confirmed.entry(product).or_default() += quantity,
            "active" => *units.active.entry(product).or_default() += quantity,
            _ => {}
        }
        let of_product: Vec<_> = rows.iter().filter(|r| r.product == product).collect();
        let [row] = of_product.as_slice() else {
            found.add(
                Check::AppliedOnce,
                format!("acknowledged reservation {order} of {quantity} × product {product}: the database has {of_product:?}"),
            );
            continue;
        };
        if row.quantity != quantity {
            found.add(
                Check::AppliedOnce,
                format!("reservation {order} asked {quantity} × product {product}, the database has {row:?}"),
            );
        }
        if row.status != expected {
            // A state nobody acknowledged was reached, or an acknowledged one was not.
            let check = if expected == "active" {
                Check::RefusedNotApplied
            } else {
                Check::AppliedOnce
            };
            found.add(
                check,
                format!("order {order}, product {product}: the answers say {expected}, the database says {}", row.status),
            );
        }
    }
}

/// Per product: the database's units add up to what was counted and restocked, and its
/// reserved and confirmed units are what the answers said.
pub fn units(opening: &Opening, books: &Books, told: &Units, found: &mut Found) {
    let mut confirmed: BTreeMap<i64, i64> = BTreeMap::new();
    for row in books
        .reservations
        .iter()
        .filter(|r| r.status == "confirmed")
    {
        *confirmed.entry(row.product).or_default() += row.quantity;
    }
    for (&product, &units) in &opening.units {
        let Some(stock) = books.stock.get(&product) else {
            found.add(
                Check::UnitsConserved,
                format!("product {product} has no stock row"),
            );
            continue;
        };
        let sold = confirmed.get(&product).copied().unwrap_or(0);
        let on_books = stock.available + stock.reserved + sold;
        if on_books != units {
            found.add(
                Check::UnitsConserved,
                format!("product {product}: {units} counted and restocked, but available {} + reserved {} + confirmed {sold} = {on_books}", stock.available, stock.reserved),
            );
        }
        let active = told.active.get(&product).copied().unwrap_or(0);
        let told_sold = told.confirmed.get(&product).copied().unwrap_or(0);
        if (stock.reserved, sold) != (active, told_sold) {
            found.add(
                Check::UnitsConserved,
                format!("product {product}: reserved {} and confirmed {sold} in the database, {active} and {told_sold} by the answers", stock.reserved),
            );
        }
    }
}
