//! Currencies through the library: an account's currency and scale fixed when it is opened
//! (EUR, scale 2 by default, and for every account and transfer from before migration V12);
//! money moving only within one currency, a mismatch refused with nothing written for a
//! transfer, a hold, a group leg and a post, with every transfer strategy; bad codes and scales
//! as typed input errors; and the audit catching a journal row in another currency.

use saldo::audit::{audit_ledger, LedgerDivergence, LedgerInvariant};
use saldo::domain::{BalanceLimits, GroupId, TransferStatus, TransferTimeout};
use saldo::ledger::{
    Currency, Denomination, GroupRequest, Ledger, LinkedTransfer, Scale, TransferStrategy,
};
use saldo::schema::{self, Layout};
use saldo::stock::batched::BatchedConfig;
use saldo::{Error, InputError};
use saldo_lab::testing::ledger_divergences;

use super::harness::{test_db, TestDb};
use super::ledger::{acc, amount, request, tid};

fn code(c: &str) -> Currency {
    Currency::new(c).expect("currency")
}

fn in_(c: &str) -> Denomination {
    Denomination::new(code(c), None)
}

async fn clean(db: &TestDb) {
    let divergences = ledger_divergences(&db.store()).await;
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

/// Every journal row and every account's counters, to show a refusal wrote nothing.
async fn books(db: &TestDb) -> (i64, Vec<(i64, i64, i64, i64)>) {
    let client = db.pool.get().await.expect("client");
    let journal: i64 = client
        .query_one("SELECT count(*) FROM transfers", &[])
        .await
        .expect("count")
        .get(0);
    let accounts = client
        .query(
            "SELECT id, balance, held, pending_credits FROM accounts ORDER BY id",
            &[],
        )
        .await
        .expect("accounts")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    (journal, accounts)
}

#[tokio::test]
async fn accounts_default_to_eur_and_take_the_iso_scale_of_their_currency() {
    let db = test_db().await;
    let ledger = Ledger::new(db.store());
    let eur = ledger.open_account(acc(1), 100).await.expect("open 1");
    assert_eq!(
        (eur.currency, eur.scale),
        (Some(code("EUR")), Some(Scale::DEFAULT))
    );
    let limits = BalanceLimits::default();
    let yen = ledger
        .open_account_in(acc(2), 500, limits, in_("JPY"))
        .await
        .expect("open 2");
    assert_eq!(
        (yen.currency, yen.scale.map(Scale::get)),
        (Some(code("JPY")), Some(0))
    );
    let gold = Denomination::new(code("GOLD_OZ"), Some(Scale::new(6).expect("scale")));
    ledger
        .open_account_in(acc(3), 0, limits, gold)
        .await
        .expect("open 3");
    let read = ledger.account(acc(3)).await.expect("read 3");
    assert_eq!(
        (read.currency, read.scale),
        (Some(gold.currency), Some(gold.scale))
    );
    // The system account is every currency's other side: it has none.
    let system = ledger
        .account(saldo::domain::AccountId::SYSTEM)
        .await
        .expect("0");
    assert_eq!((system.currency, system.scale), (None, None));
    // Each opening is journalled in its account's currency.
    let openings = ledger.transfers_of(acc(2), 10).await.expect("list");
    assert_eq!(openings.len(), 1);
    assert_eq!(openings[0].currency, code("JPY"));
    let deposit = ledger
        .deposit(tid("d-yen"), acc(2), amount(7))
        .await
        .expect("deposit");
    assert_eq!(deposit.currency, code("JPY"));
    // An account written without a currency (as before V12) gets the documented default.
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute("INSERT INTO accounts (id, balance) VALUES (9, 0)")
        .await
        .expect("an old writer's row");
    let old = ledger.account(acc(9)).await.expect("read 9");
    assert_eq!(
        (old.currency, old.scale),
        (Some(code("EUR")), Some(Scale::DEFAULT))
    );
    clean(&db).await;
}

/// Migration V12 run on a database as it was before it (its columns dropped again, rows
/// written without them): every account and transfer is EUR with scale 2, the system account
/// has none, and the audit is clean.
#[tokio::test]
async fn migration_v12_puts_existing_accounts_and_transfers_in_eur() {
    let db = test_db().await;
    let v12 = schema::migrations(Layout::Single)
        .into_iter()
        .find(|m| m.version() == 12)
        .expect("V12 is embedded");
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute(
            "ALTER TABLE transfers DROP COLUMN currency; \
             ALTER TABLE accounts DROP COLUMN currency, DROP COLUMN scale; \
             INSERT INTO accounts (id, balance) VALUES (1, 40), (2, 60); \
             UPDATE accounts SET balance = -100, entry_seq = 0 WHERE id = 0; \
             DELETE FROM entries; \
             INSERT INTO transfers (id, from_account, to_account, amount, kind) \
               VALUES ('opening:1', 0, 1, 100, 'opening'), ('t', 1, 2, 60, 'transfer');",
        )
        .await
        .expect("a database from before V12");
    client
        .batch_execute(v12.sql().expect("sql"))
        .await
        .expect("V12 applies");
    let ledger = Ledger::new(db.store());
    for n in [1, 2] {
        let a = ledger.account(acc(n)).await.expect("account");
        assert_eq!(
            (a.currency, a.scale),
            (Some(code("EUR")), Some(Scale::DEFAULT))
        );
    }
    let system = ledger
        .account(saldo::domain::AccountId::SYSTEM)
        .await
        .expect("0");
    assert_eq!(system.currency, None);
    let t = ledger.get_transfer(&tid("t")).await.expect("t");
    assert_eq!(t.currency, code("EUR"));
    clean(&db).await;
}

/// Accounts `base+1` (EUR, 100), `base+2` (USD), `base+3` (EUR), `base+4` (EUR at scale 3).
async fn four_accounts(ledger: &Ledger, base: i64) {
    let limits = BalanceLimits::default();
    let eur3 = Denomination::new(code("EUR"), Some(Scale::new(3).expect("scale")));
    for (n, opening, denomination) in [
        (1, 100, in_("EUR")),
        (2, 0, in_("USD")),
        (3, 0, in_("EUR")),
        (4, 0, eur3),
    ] {
        ledger
            .open_account_in(acc(base + n), opening, limits, denomination)
            .await
            .expect("open");
    }
}

/// A group of posted transfers of 10, `<group>-<i>` each.
fn group_of(group: &str, legs: &[(i64, i64)]) -> GroupRequest {
    GroupRequest {
        id: GroupId::new(group).expect("group"),
        transfers: legs
            .iter()
            .enumerate()
            .map(|(i, &(from, to))| LinkedTransfer {
                transfer: request(&format!("{group}-{i}"), from, to, 10),
                pending: None,
            })
            .collect(),
        tags: Default::default(),
    }
}

fn is_mismatch(e: &Error, from: i64, to: i64, to_currency: &str, to_scale: u8) -> bool {
    matches!(e, Error::CurrencyMismatch {
        from: f, to: t, from_currency, to_currency: tc, from_scale, to_scale: ts
    } if f.get() == from && t.get() == to && from_currency.as_str() == "EUR"
        && from_scale.get() == 2 && tc.as_str() == to_currency && ts.get() == to_scale)
}

/// A transfer, a hold and a group leg between two currencies (or two scales of one) are
/// refused with `CurrencyMismatch` naming both sides, and nothing is written; the same
/// movements within one currency go through. With every strategy the service serves.
#[tokio::test]
async fn money_moves_only_within_one_currency_and_a_mismatch_writes_nothing() {
    let db = test_db().await;
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for (k, &strategy) in TransferStrategy::ALL.iter().enumerate() {
        let base = 10 * k as i64;
        let ledger = Ledger::serving(db.store(), strategy, &BatchedConfig::default());
        four_accounts(&ledger, base).await;
        let before = books(&db).await;
        let (eur, usd, eur_too, eur3) = (base + 1, base + 2, base + 3, base + 4);
        let id = |s: &str| format!("{s}-{strategy}");
        for (to, currency, scale) in [(usd, "USD", 2), (eur3, "EUR", 3)] {
            let refused = ledger
                .transfer(strategy, &request(&id("t"), eur, to, 10))
                .await
                .expect_err("transfer across currencies");
            assert!(
                is_mismatch(&refused, eur, to, currency, scale),
                "{refused:?}"
            );
            let refused = ledger
                .hold(&request(&id("h"), eur, to, 10), timeout)
                .await
                .expect_err("hold across currencies");
            assert!(
                is_mismatch(&refused, eur, to, currency, scale),
                "{refused:?}"
            );
        }
        let group = group_of(&id("g"), &[(eur, eur_too), (eur, usd)]);
        let refused = ledger.transfer_group(&group).await.expect_err("group");
        assert!(
            matches!(&refused, Error::GroupRefused { index: 1, source, .. }
                if is_mismatch(source, eur, usd, "USD", 2)),
            "{refused:?}"
        );
        assert_eq!(books(&db).await, before, "{strategy}: nothing written");
        assert!(matches!(
            ledger.get_transfer(&tid(&id("t"))).await,
            Err(Error::UnknownTransfer(_))
        ));
        // Within one currency: the same movements go through, in EUR.
        let t = ledger
            .transfer(strategy, &request(&id("ok"), eur, eur_too, 10))
            .await
            .expect("EUR to EUR");
        assert_eq!(
            (t.currency, t.status),
            (code("EUR"), TransferStatus::Posted)
        );
        let group = group_of(&id("g"), &[(eur, eur_too)]);
        let applied = ledger.transfer_group(&group).await.expect("EUR group");
        assert_eq!(applied.transfers[0].currency, code("EUR"));
        let dollars = ledger
            .deposit(tid(&id("d")), acc(usd), amount(5))
            .await
            .expect("deposit");
        assert_eq!(dollars.currency, code("USD"));
    }
    clean(&db).await;
}

/// A post moves money: its accounts' currencies are checked on the locked rows like a
/// placement's. A hold whose destination was put in another currency behind the ledger's back
/// is refused with nothing written (it stays pending).
#[tokio::test]
async fn a_post_between_two_currencies_is_refused_and_the_hold_stays_pending() {
    let db = test_db().await;
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for (k, &strategy) in TransferStrategy::ALL.iter().enumerate() {
        let base = 10 * k as i64;
        let ledger = Ledger::serving(db.store(), strategy, &BatchedConfig::default());
        four_accounts(&ledger, base).await;
        let (eur, other) = (base + 1, base + 3);
        let hold = format!("h-{strategy}");
        ledger
            .hold(&request(&hold, eur, other, 30), timeout)
            .await
            .expect("hold in EUR");
        let client = db.pool.get().await.expect("client");
        client
            .execute(
                "UPDATE accounts SET currency = 'USD' WHERE id = $1",
                &[&other],
            )
            .await
            .expect("a write around the engine");
        let before = books(&db).await;
        let refused = ledger.post(&tid(&hold), None).await.expect_err("post");
        assert!(is_mismatch(&refused, eur, other, "USD", 2), "{refused:?}");
        assert_eq!(books(&db).await, before, "{strategy}: nothing written");
        let read = ledger.get_transfer(&tid(&hold)).await.expect("read");
        assert_eq!(read.status, TransferStatus::Pending);
        // Put back, the post goes through.
        client
            .execute(
                "UPDATE accounts SET currency = 'EUR' WHERE id = $1",
                &[&other],
            )
            .await
            .expect("restore");
        let posted = ledger.post(&tid(&hold), None).await.expect("post");
        assert_eq!(
            (posted.status, posted.currency),
            (TransferStatus::Posted, code("EUR"))
        );
    }
    clean(&db).await;
}

#[tokio::test]
async fn bad_codes_and_scales_are_typed_input_errors_and_the_schema_refuses_them_too() {
    for bad in ["", "eur", "EU", "1EUR", "EURO-1", "ABCDEFGHIJKLM"] {
        assert!(
            matches!(
                Denomination::parse(Some(bad), None),
                Err(InputError::CurrencyInvalid(_))
            ),
            "{bad:?}"
        );
    }
    for bad in [-1, 19] {
        assert_eq!(
            Denomination::parse(Some("USD"), Some(bad)),
            Err(InputError::ScaleOutOfRange {
                scale: bad,
                max: 18
            })
        );
    }
    let db = test_db().await;
    let client = db.pool.get().await.expect("client");
    for sql in [
        "INSERT INTO accounts (id, balance, currency) VALUES (5, 0, 'eur')",
        "INSERT INTO accounts (id, balance, scale) VALUES (5, 0, 19)",
        "INSERT INTO accounts (id, balance, currency, scale) VALUES (5, 0, NULL, NULL)",
        "UPDATE accounts SET currency = 'EUR', scale = 2 WHERE id = 0",
    ] {
        let refused = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(refused.code().map(|c| c.code()), Some("23514"), "{sql}");
    }
}

/// A journal row written by hand between a EUR and a USD account (balances moved to match, so
/// every account equals its journal and the grand total is still zero) is caught: each
/// currency's total is off by the amount, the USD account has a row not in its currency, and
/// the EUR account's latest entry no longer says its balance.
#[tokio::test]
async fn the_audit_catches_a_journal_row_across_currencies() {
    let db = test_db().await;
    let ledger = Ledger::new(db.store());
    let limits = BalanceLimits::default();
    ledger.open_account(acc(1), 100).await.expect("open 1");
    ledger
        .open_account_in(acc(2), 50, limits, in_("USD"))
        .await
        .expect("open 2");
    assert_eq!(audit_ledger(&db.pool).await.expect("audit"), []);
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute(
            "INSERT INTO transfers (id, from_account, to_account, amount, currency) \
               VALUES ('x', 1, 2, 10, 'EUR'); \
             UPDATE accounts SET balance = balance - 10 WHERE id = 1; \
             UPDATE accounts SET balance = balance + 10 WHERE id = 2;",
        )
        .await
        .expect("a row around the engine");
    let total = |currency: &str, actual| LedgerDivergence {
        account: None,
        invariant: LedgerInvariant::CurrencyTotalIsZero,
        expected: 0,
        actual,
        currency: Some(code(currency)),
        transfer: None,
    };
    assert_eq!(
        audit_ledger(&db.pool).await.expect("audit"),
        [
            total("EUR", -10),
            total("USD", 10),
            // Its counters were moved with the row, its entries were not.
            LedgerDivergence {
                account: Some(acc(1)),
                invariant: LedgerInvariant::LatestEntryMatchesCounters,
                expected: 100,
                actual: 90,
                currency: None,
                transfer: None,
            },
            LedgerDivergence {
                account: Some(acc(2)),
                invariant: LedgerInvariant::JournalInAccountCurrency,
                expected: 0,
                actual: 1,
                currency: Some(code("USD")),
                transfer: None,
            },
        ]
    );
}
