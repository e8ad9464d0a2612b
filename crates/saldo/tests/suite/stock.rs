//! Strategy-independent stock checks: the audit catches a row written behind the engine's back,
//! and the CHECK constraints refuse negative stock. The scenarios every strategy must pass live
//! in the contract suite (`contract.rs`).

use saldo::audit::{audit_stock, Invariant};
use saldo::domain::Ttl;
use saldo::stock::{StrategyConfig, StrategyName};

use crate::contract::{assert_audit_clean, engine_with_stock, pid, request};
use crate::harness::test_db;

#[tokio::test]
async fn audit_catches_a_row_written_behind_the_engines_back() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10), (2, 10)],
    )
    .await;
    engine
        .reserve(&request("o-a", &[(1, 3)], Ttl::default()))
        .await
        .expect("reserve");
    assert_audit_clean(&db, StrategyName::Atomic).await;
    let client = db.pool.get().await.expect("client");
    // The bug the audit exists for: a script that sells without the engine.
    client
        .batch_execute("UPDATE stock SET available = available - 1 WHERE product_id = 2")
        .await
        .expect("raw update");
    client
        .batch_execute("UPDATE stock SET reserved = reserved + 1, available = available - 1 WHERE product_id = 1")
        .await
        .expect("raw update");
    let d = audit_stock(&db.pool).await.expect("audit");
    assert!(d.iter().any(|d| d.product_id == pid(2)
        && d.invariant == Invariant::OnHandMatchesHistory
        && d.expected == 10
        && d.actual == 9));
    assert!(d.iter().any(|d| d.product_id == pid(1)
        && d.invariant == Invariant::ReservedMatchesActive
        && d.expected == 3
        && d.actual == 4));
}

#[tokio::test]
async fn check_constraints_refuse_negative_stock() {
    let db = test_db().await;
    engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 1)],
    )
    .await;
    let client = db.pool.get().await.expect("client");
    let err = client
        .batch_execute("UPDATE stock SET available = available - 2 WHERE product_id = 1")
        .await
        .expect_err("CHECK must refuse");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
}
