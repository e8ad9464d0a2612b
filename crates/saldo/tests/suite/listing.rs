//! Lists a page at a time (`saldo::listing`): keyset pages hold every id that existed when the
//! listing started exactly once, even with inserts going on between and during pages; the same
//! check is shown failing for OFFSET paging. Status filters, the read bound of a filtered page,
//! the system account kept out, cursors of another list refused, and orders found by the
//! reference their reserve request carried (which is also part of its idempotency).

use std::collections::BTreeSet;

use saldo::domain::{AccountId, OrderId, ProductId, Reference, Ttl};
use saldo::ledger::Ledger;
use saldo::listing::{self, Cursor, ListKind, PageLimit};
use saldo::stock::{admin, ReserveRequest, Status, Store, StrategyConfig, StrategyName};
use saldo::{Error, InputError};

use crate::contract::{assert_audit_clean, engine_with_stock, request, safe_strategies, tags};
use crate::harness::test_db;

fn limit(n: i64) -> PageLimit {
    PageLimit::new(n).expect("limit")
}

/// Ids seen more than once, and ids of `expected` never seen.
fn repeated_and_missing(seen: &[i64], expected: &BTreeSet<i64>) -> (Vec<i64>, Vec<i64>) {
    let mut once = BTreeSet::new();
    let repeated = seen
        .iter()
        .copied()
        .filter(|id| !once.insert(*id))
        .collect();
    let missing = expected.difference(&once).copied().collect();
    (repeated, missing)
}

/// Products 10, 20, … 400: room below and between them for products added while paging.
async fn stock_every_tenth(store: &Store) -> BTreeSet<i64> {
    let ids: BTreeSet<i64> = (1..=40).map(|n| n * 10).collect();
    for &id in &ids {
        add_product(store, id).await;
    }
    ids
}

async fn add_product(store: &Store, id: i64) {
    admin::set_count(store, ProductId::new(id).expect("id"), 1)
        .await
        .expect("count");
}

#[tokio::test]
async fn product_pages_neither_repeat_nor_hide_ids_while_products_are_added() {
    let db = test_db().await;
    let store = db.store();
    let before = stock_every_tenth(&store).await;
    // A writer adds products below and above the reader's position while it pages.
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for n in 1..=120_i64 {
                let id = if n % 2 == 0 { n * 3 + 1 } else { 400 + n };
                add_product(&store, id).await;
                tokio::task::yield_now().await;
            }
        })
    };
    let mut seen = Vec::new();
    let mut cursor: Option<Cursor> = None;
    for _ in 0..1_000 {
        let page = listing::stock::products(&store, limit(7), cursor.as_ref())
            .await
            .expect("page");
        seen.extend(page.items.iter().map(|s| s.product_id.get()));
        // A page on the deterministic side too: one product below the position.
        if let Some(last) = page.items.last() {
            let below = last.product_id.get() - 5;
            add_product(&store, below).await;
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    writer.await.expect("writer");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "ascending: {seen:?}");
    let (repeated, missing) = repeated_and_missing(&seen, &before);
    assert!(
        repeated.is_empty() && missing.is_empty(),
        "repeated {repeated:?}, missing {missing:?}"
    );
}

/// The naive variant of the same check: OFFSET pages shift when a row lands before the
/// position, so the row at the page boundary comes back again.
#[tokio::test]
async fn offset_pages_repeat_ids_when_products_are_added_below() {
    let db = test_db().await;
    let store = db.store();
    let before = stock_every_tenth(&store).await;
    let client = db.pool.get().await.expect("client");
    let (mut seen, mut offset) = (Vec::new(), 0_i64);
    loop {
        let rows = client
            .query(
                "SELECT product_id FROM stock ORDER BY product_id LIMIT 7 OFFSET $1",
                &[&offset],
            )
            .await
            .expect("offset page");
        if rows.is_empty() {
            break;
        }
        offset += rows.len() as i64;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let below = ids.last().expect("a row") - 5;
        seen.extend(ids);
        add_product(&store, below).await;
    }
    let (repeated, _) = repeated_and_missing(&seen, &before);
    assert!(
        !repeated.is_empty(),
        "OFFSET paging showed no repeat: {seen:?}"
    );
}

#[tokio::test]
async fn order_pages_filter_by_status_and_a_sparse_filter_pages_on_with_a_cursor() {
    let db = test_db().await;
    let stock = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 1_000), (2, 1_000)],
    )
    .await;
    let store = db.store();
    // 30 orders; every 10th confirmed, every 7th released, the rest active.
    for n in 0..30 {
        let id = format!("order-{n:03}");
        stock
            .reserve(&request(&id, &[(1, 1), (2, 2)], Default::default()))
            .await
            .expect("reserve");
        let order = OrderId::new(id).expect("order id");
        if n % 10 == 0 {
            stock.confirm(&order).await.expect("confirm");
        } else if n % 7 == 0 {
            stock.release(&order).await.expect("release");
        }
    }
    let all = collect_orders(&store, None, 4).await;
    assert_eq!(all.len(), 30);
    assert!(all.iter().all(|o| o.products == 2));
    assert!(all.windows(2).all(|w| w[0].order_id < w[1].order_id));

    // One confirmed order per ten: with limit 1 a page reads at most 20 orders, so pages come
    // back empty or short with a cursor, and following them finds all three.
    let mut pages = 0;
    let mut confirmed = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page =
            listing::stock::orders(&store, Some(Status::Confirmed), limit(1), cursor.as_ref())
                .await
                .expect("page");
        pages += 1;
        confirmed.extend(page.items);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let ids: Vec<&str> = confirmed.iter().map(|o| o.order_id.as_str()).collect();
    assert_eq!(ids, ["order-000", "order-010", "order-020"]);
    assert!(pages >= 3, "{pages} pages");
    let released = collect_orders(&store, Some(Status::Released), 2).await;
    let ids: Vec<&str> = released.iter().map(|o| o.order_id.as_str()).collect();
    assert_eq!(ids, ["order-007", "order-014", "order-021", "order-028"]);
    assert_eq!(
        collect_orders(&store, Some(Status::Active), 1_000)
            .await
            .len(),
        23
    );
    assert!(collect_orders(&store, Some(Status::Expired), 5)
        .await
        .is_empty());
}

async fn collect_orders(
    store: &Store,
    status: Option<Status>,
    n: i64,
) -> Vec<listing::stock::OrderSummary> {
    let mut out = Vec::new();
    let mut cursor: Option<Cursor> = None;
    for _ in 0..10_000 {
        let page = listing::stock::orders(store, status, limit(n), cursor.as_ref())
            .await
            .expect("page");
        assert!(page.items.len() <= n as usize);
        out.extend(page.items);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("no end of the order list");
}

#[tokio::test]
async fn account_pages_leave_the_system_account_out() {
    let db = test_db().await;
    let ledger = Ledger::new(db.store());
    for id in 1..=5 {
        ledger
            .open_account(AccountId::new(id).expect("id"), id * 100)
            .await
            .expect("open");
    }
    let first = listing::ledger::accounts(ledger.store(), limit(3), None)
        .await
        .expect("page");
    let ids: Vec<i64> = first.items.iter().map(|a| a.id.get()).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(first.items[2].balance, 300);
    let next = first.next.expect("a cursor");
    let second = listing::ledger::accounts(ledger.store(), limit(3), Some(&next))
        .await
        .expect("page");
    let ids: Vec<i64> = second.items.iter().map(|a| a.id.get()).collect();
    assert_eq!(ids, [4, 5]);
    assert_eq!(second.next, None);
    // A cursor past every id is a valid position with nothing after it.
    let end = Cursor::parse(ListKind::Accounts, "affffffffffffffff").expect("cursor");
    let empty = listing::ledger::accounts(ledger.store(), limit(3), Some(&end))
        .await
        .expect("page");
    assert!(empty.items.is_empty() && empty.next.is_none());
}

#[test]
fn a_cursor_of_another_list_is_a_typed_input_error() {
    let products = Cursor::Numeric(ListKind::Products, 7).to_string();
    let err = Cursor::parse(ListKind::Accounts, &products).expect_err("another list");
    assert_eq!(err, InputError::CursorInvalid { list: "accounts" });
    let as_error: Error = err.into();
    assert!(matches!(as_error, Error::Input(_)));
}

/// An order of one unit of products 1 and 2 whose request carries `reference` (and metadata).
fn tagged(order: &str, reference: &str) -> ReserveRequest {
    ReserveRequest {
        tags: tags(reference, &[("cart", "c-1")]),
        ..request(order, &[(1, 1), (2, 1)], Ttl::default())
    }
}

#[tokio::test]
async fn orders_carry_their_reference_are_found_by_it_and_replay_only_with_it() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine =
            engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 10), (2, 10)]).await;
        let first = engine.reserve(&tagged("o-1", "cart-7")).await.expect("o-1");
        assert_eq!(
            (first.replayed, &first.tags),
            (false, &tagged("o-1", "cart-7").tags),
            "{name}"
        );
        let replay = engine
            .reserve(&tagged("o-1", "cart-7"))
            .await
            .expect("replay");
        assert_eq!(
            (replay.replayed, &replay.tags),
            (true, &first.tags),
            "{name}"
        );
        // The same items under another reference, or none: another request, refused.
        for other in [
            tagged("o-1", "cart-8"),
            request("o-1", &[(1, 1), (2, 1)], Ttl::default()),
        ] {
            let refused = engine.reserve(&other).await;
            assert!(
                matches!(refused, Err(Error::IdempotencyConflict(_))),
                "{name}: {refused:?}"
            );
        }
        engine.reserve(&tagged("o-2", "cart-7")).await.expect("o-2");
        engine.reserve(&tagged("o-3", "cart-9")).await.expect("o-3");
        engine
            .reserve(&request("o-4", &[(1, 1)], Ttl::default()))
            .await
            .expect("o-4");
        // Four orders took a unit of product 1 each; the refused requests took nothing.
        let stock = admin::get(engine.store(), ProductId::new(1).expect("id"))
            .await
            .expect("stock");
        assert_eq!((stock.available, stock.reserved), (6, 4), "{name}");
        let (_, tags) = engine
            .order_with_tags(&OrderId::new("o-2").expect("id"))
            .await
            .expect("o-2");
        assert_eq!(tags, first.tags, "{name}");

        // Found by reference, a page at a time, each once.
        let reference = Reference::new("cart-7").expect("reference");
        let mut cursor: Option<Cursor> = None;
        let mut seen = Vec::new();
        for _ in 0..4 {
            let page = listing::stock::orders_by_reference(
                engine.store(),
                &reference,
                None,
                limit(1),
                cursor.as_ref(),
            )
            .await
            .expect("page");
            seen.extend(page.items.iter().map(|o| o.order_id.as_str().to_owned()));
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen, ["o-1", "o-2"], "{name}");
        let confirmed = listing::stock::orders_by_reference(
            engine.store(),
            &reference,
            Some(Status::Confirmed),
            limit(10),
            None,
        )
        .await
        .expect("filtered");
        assert!(confirmed.items.is_empty(), "{name}: {:?}", confirmed.items);
        assert_audit_clean(&db, name).await;
    }
}
