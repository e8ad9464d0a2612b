//! Each check shown failing: a clean history and its books pass, then one broken variant per
//! promise — a service that answers 500, an outcome never learned, an acknowledged write
//! missing or applied twice, a refused write applied, a unit or a cent created, a hold both
//! posted and voided, a reservation both confirmed and released — is caught by its check.

use serde_json::{json, Value};

use super::check;
use super::types::{AccountRow, Books, Check, Opening, ReservationRow, StockRow, TransferRow};
use crate::faults::history::{Op, Record};
use crate::faults::http::Answer;

fn ok(status: u16, body: Value) -> Answer {
    Answer::Status(status, body)
}

fn rec(op: Op, answer: Answer) -> Record {
    Record::new(0, op, answer)
}

fn reserve(order: &str, items: &[(i64, i32)]) -> Op {
    Op::Reserve {
        order: order.into(),
        items: items.to_vec(),
    }
}

fn transfer(id: &str, from: i64, to: i64, amount: i64) -> Op {
    Op::Transfer {
        id: id.into(),
        from,
        to,
        amount,
    }
}

fn hold(id: &str, from: i64, to: i64, amount: i64) -> Op {
    Op::Hold {
        id: id.into(),
        from,
        to,
        amount,
    }
}

fn items(products: &[i64]) -> Value {
    json!(products
        .iter()
        .map(|p| json!({"product_id": p}))
        .collect::<Vec<_>>())
}

fn opening() -> Opening {
    Opening {
        units: [(1, 100), (2, 100)].into(),
        cents: [(1, 1_000), (2, 1_000)].into(),
    }
}

/// A history with every kind of answer: applied, refused, not applied, replayed after no
/// answer, a race lost, and the fates of reservations and holds.
fn history() -> Vec<Record> {
    let mut replayed = rec(
        reserve("o3", &[(1, 1), (2, 1)]),
        Answer::None("reset".into()),
    );
    replayed.replays.push(ok(200, json!({"replayed": true})));
    vec![
        rec(reserve("o1", &[(1, 2)]), ok(201, json!({}))),
        rec(
            Op::Confirm { order: "o1".into() },
            ok(200, json!({"confirmed": items(&[1]), "missing": []})),
        ),
        rec(reserve("o2", &[(2, 3)]), ok(201, json!({}))),
        rec(
            Op::Release { order: "o2".into() },
            ok(200, json!({"released": items(&[2])})),
        ),
        replayed,
        rec(reserve("o4", &[(1, 10_000)]), ok(409, json!({}))),
        rec(transfer("t1", 1, 2, 100), ok(201, json!({}))),
        rec(transfer("t2", 2, 1, 5_000), ok(409, json!({}))),
        rec(hold("h1", 1, 2, 300), ok(201, json!({}))),
        rec(
            Op::Post {
                id: "h1".into(),
                amount: 200,
            },
            ok(200, json!({})),
        ),
        rec(Op::Void { id: "h1".into() }, ok(409, json!({}))),
        rec(hold("h2", 2, 1, 50), ok(201, json!({}))),
        rec(Op::Void { id: "h2".into() }, ok(200, json!({}))),
        rec(hold("h3", 1, 2, 70), ok(503, json!({"applied": false}))),
        rec(hold("h4", 2, 1, 40), ok(201, json!({}))),
    ]
}

fn row(order: &str, product: i64, quantity: i64, status: &str) -> ReservationRow {
    ReservationRow {
        order: order.into(),
        product,
        quantity,
        status: status.into(),
    }
}

fn journal(id: &str, from: i64, to: i64, amount: i64, status: &str) -> TransferRow {
    TransferRow {
        id: id.into(),
        from,
        to,
        amount,
        kind: "transfer".into(),
        status: status.into(),
        posted_amount: None,
        copies: 1,
    }
}

/// The books [`history`] leaves on one node.
fn books() -> Books {
    let stock = |available, reserved| StockRow {
        available,
        reserved,
    };
    let account = |balance, held, pending_credits| AccountRow {
        balance,
        held,
        pending_credits,
    };
    let mut opening_0_1 = journal("open-1", 0, 1, 1_000, "posted");
    opening_0_1.kind = "opening".into();
    let mut posted = journal("h1", 1, 2, 300, "posted");
    posted.posted_amount = Some(200);
    Books {
        stock: [(1, stock(97, 1)), (2, stock(99, 1))].into(),
        reservations: vec![
            row("o1", 1, 2, "confirmed"),
            row("o2", 2, 3, "released"),
            row("o3", 1, 1, "active"),
            row("o3", 2, 1, "active"),
        ],
        transfers: vec![
            opening_0_1,
            journal("t1", 1, 2, 100, "posted"),
            posted,
            journal("h2", 2, 1, 50, "voided"),
            journal("h4", 2, 1, 40, "pending"),
        ],
        accounts: [
            (0, account(-2_000, 0, 0)),
            (1, account(700, 0, 40)),
            (2, account(1_300, 40, 0)),
        ]
        .into(),
        sides: 1,
    }
}

/// The checks that fail, each once, in order.
fn failing(history: &[Record], books: &Books) -> Vec<Check> {
    let mut checks: Vec<Check> = check(history, &opening(), books)
        .into_iter()
        .map(|v| v.check)
        .collect();
    checks.sort();
    checks.dedup();
    checks
}

#[test]
fn a_clean_history_passes() {
    assert_eq!(check(&history(), &opening(), &books()), vec![]);
}

#[test]
fn on_citus_each_transfer_has_a_row_per_side() {
    let mut citus = books();
    citus.sides = 2;
    for t in &mut citus.transfers {
        t.copies = 2;
    }
    assert_eq!(check(&history(), &opening(), &citus), vec![]);
    citus.transfers[1].copies = 1;
    assert_eq!(failing(&history(), &citus), [Check::AppliedOnce]);
}

#[test]
fn an_internal_error_is_caught_even_when_a_replay_settled_it() {
    let mut history = history();
    history[6].answer = ok(500, json!({"type": "urn:saldo:problem:internal"}));
    history[6].replays.push(ok(200, json!({"replayed": true})));
    assert_eq!(failing(&history, &books()), [Check::NoInternalError]);
}

#[test]
fn an_outcome_never_learned_is_caught() {
    let mut history = history();
    history[13].answer = Answer::None("timed out".into());
    history[13].replays.push(ok(503, json!({"applied": null})));
    assert_eq!(failing(&history, &books()), [Check::Settled]);
}

#[test]
fn an_acknowledged_transfer_missing_is_caught() {
    let mut books = books();
    books.transfers.retain(|t| t.id != "t1");
    assert_eq!(failing(&history(), &books), [Check::AppliedOnce]);
    // Its money did not move either: the balances disagree with the answers.
    books.accounts.get_mut(&1).expect("account 1").balance += 100;
    books.accounts.get_mut(&2).expect("account 2").balance -= 100;
    assert_eq!(
        failing(&history(), &books),
        [Check::AppliedOnce, Check::MoneyConserved]
    );
}

#[test]
fn a_reservation_applied_twice_is_caught() {
    let mut books = books();
    books.reservations.push(row("o3", 2, 1, "active"));
    books.stock.insert(
        2,
        StockRow {
            available: 98,
            reserved: 2,
        },
    );
    assert_eq!(
        failing(&history(), &books),
        [Check::AppliedOnce, Check::UnitsConserved]
    );
}

#[test]
fn a_client_that_double_posts_is_caught() {
    // The service let a second post of h1 through: both acknowledged, 200 moved twice.
    let mut history = history();
    history.push(rec(
        Op::Post {
            id: "h1".into(),
            amount: 200,
        },
        ok(200, json!({})),
    ));
    let mut books = books();
    books.accounts.get_mut(&1).expect("account 1").balance -= 200;
    books.accounts.get_mut(&2).expect("account 2").balance += 200;
    assert_eq!(failing(&history, &books), [Check::MoneyConserved]);
}

#[test]
fn a_write_answered_not_applied_is_caught() {
    let mut books = books();
    books.transfers.push(journal("h3", 1, 2, 70, "pending"));
    let one = books.accounts.get_mut(&1).expect("account 1");
    one.held += 70;
    books
        .accounts
        .get_mut(&2)
        .expect("account 2")
        .pending_credits += 70;
    assert_eq!(
        failing(&history(), &books),
        [Check::RefusedNotApplied, Check::MoneyConserved]
    );
    // A refused reservation written, and a write nobody asked for.
    let mut books = self::books();
    books.reservations.push(row("o4", 1, 10_000, "active"));
    books.transfers.push(journal("ghost", 1, 2, 1, "posted"));
    assert_eq!(failing(&history(), &books), [Check::RefusedNotApplied]);
}

#[test]
fn a_unit_created_is_caught() {
    let mut books = books();
    books.stock.get_mut(&1).expect("product 1").available += 1;
    assert_eq!(failing(&history(), &books), [Check::UnitsConserved]);
}

#[test]
fn a_cent_created_is_caught() {
    let mut books = books();
    books.accounts.get_mut(&2).expect("account 2").balance += 1;
    assert_eq!(failing(&history(), &books), [Check::MoneyConserved]);
}

#[test]
fn a_hold_both_posted_and_voided_is_caught() {
    let mut history = history();
    history[10].answer = ok(200, json!({}));
    assert_eq!(failing(&history, &books()), [Check::OneFatePerHold]);
}

#[test]
fn a_hold_voided_behind_an_acknowledged_post_is_caught() {
    let mut books = books();
    let h1 = books
        .transfers
        .iter_mut()
        .find(|t| t.id == "h1")
        .expect("h1");
    (h1.status, h1.posted_amount) = ("voided".into(), None);
    assert!(failing(&history(), &books).contains(&Check::AppliedOnce));
}

#[test]
fn a_reservation_both_confirmed_and_released_is_caught() {
    let mut history = history();
    history.push(rec(
        Op::Release { order: "o1".into() },
        ok(200, json!({"released": items(&[1])})),
    ));
    assert_eq!(failing(&history, &books()), [Check::OneFatePerReservation]);
}

#[test]
fn a_confirm_answered_not_applied_that_applied_is_caught() {
    let mut history = history();
    history[1].answer = ok(503, json!({"applied": false}));
    // The row is confirmed all the same: nobody acknowledged that.
    assert_eq!(
        failing(&history, &books()),
        [Check::RefusedNotApplied, Check::UnitsConserved]
    );
}
