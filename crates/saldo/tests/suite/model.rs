//! Model-based property test: random sequences of reserve / confirm / release / expire /
//! adjust / transfer run against the real engine (the `atomic` strategy and the ledger, on a
//! fresh database per case) and against a plain in-memory model. Every outcome must agree, and
//! after every step both audits are clean and every stock row and balance equals the model's.

use std::collections::BTreeMap;

use proptest::prelude::*;
use saldo::audit::audit_ledger;
use saldo::domain::{
    AccountId, Amount, OrderId, OrderItems, ProductId, Reason, RequestKey, TransferId, Ttl,
};
use saldo::ledger::{Ledger, TransferRequest};
use saldo::stock::batched::BatchedConfig;
use saldo::stock::{
    admin, build, sweeper, RereserveRequest, ReserveRequest, ReservedItem, Status, StockEngine,
    StrategyConfig, StrategyName,
};
use saldo::Error;

use super::harness::{test_db, TestDb, TRANSFER};

/// Cases per run and steps per case: bounded so the property stays a few seconds (on Citus a
/// case's database takes seconds to make, so fewer cases).
const CASES: u32 = if super::harness::CITUS { 4 } else { 24 };
const MAX_STEPS: usize = 30;
/// Products 1..=PRODUCTS exist; PRODUCTS + 1 never does.
const PRODUCTS: i64 = 3;
/// Accounts 1..=ACCOUNTS are opened.
const ACCOUNTS: i64 = 3;
/// Few order and transfer ids, so replays, conflicts and re-reserves happen often.
const ORDERS: u8 = 3;
const TRANSFER_IDS: u8 = 6;
/// Few re-reserve keys, so their replays and conflicts happen often too.
const RERESERVE_KEYS: u8 = 2;

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        order: u8,
        items: Vec<(i64, i64)>,
    },
    /// A re-reserve under key `key` of what the order lost (`items`: all of it when `None`).
    Rereserve {
        order: u8,
        key: u8,
        items: Option<Vec<(i64, i64)>>,
    },
    Confirm {
        order: u8,
    },
    Release {
        order: u8,
    },
    /// Test-only: the order's active reservations fall due, then the sweeper runs.
    Expire {
        order: u8,
    },
    Adjust {
        product: i64,
        delta: i64,
    },
    Transfer {
        id: u8,
        from: i64,
        to: i64,
        amount: i64,
    },
    /// Deposits and withdrawals share the transfer ids, so cross-kind conflicts happen too.
    Deposit {
        id: u8,
        to: i64,
        amount: i64,
    },
    Withdraw {
        id: u8,
        from: i64,
        amount: i64,
    },
}

/// The ledger's operations are part of the model, except on Citus in the stock binary
/// (`tests/citus_stock.rs`), which checks the stock operations there; the ledger on Citus has
/// suites of its own.
const LEDGER_OPS: bool = !super::harness::CITUS;

fn op() -> BoxedStrategy<Op> {
    if LEDGER_OPS {
        prop_oneof![11 => stock_op(), 5 => ledger_op()].boxed()
    } else {
        stock_op().boxed()
    }
}

fn stock_op() -> impl Strategy<Value = Op> {
    // Mostly products that exist; now and then one that does not.
    let product = prop_oneof![9 => 1..=PRODUCTS, 1 => Just(PRODUCTS + 1)];
    prop_oneof![
        4 => (0..ORDERS, prop::collection::vec((product.clone(), 1..=3i64), 1..=2))
            .prop_map(|(order, items)| Op::Reserve { order, items }),
        2 => (0..ORDERS, 0..RERESERVE_KEYS, prop::option::of(prop::collection::vec((product.clone(), 1..=3i64), 1..=2)))
            .prop_map(|(order, key, items)| Op::Rereserve { order, key, items }),
        2 => (0..ORDERS).prop_map(|order| Op::Confirm { order }),
        1 => (0..ORDERS).prop_map(|order| Op::Release { order }),
        1 => (0..ORDERS).prop_map(|order| Op::Expire { order }),
        1 => (product, prop_oneof![-3..=-1i64, 1..=3i64])
            .prop_map(|(product, delta)| Op::Adjust { product, delta }),
    ]
}

fn ledger_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // `to` is another account nine times in ten, the same one (a refusal) otherwise.
        3 => (0..TRANSFER_IDS, 1..=ACCOUNTS, prop_oneof![9 => 1..ACCOUNTS, 1 => Just(0)], 1..=60i64)
            .prop_map(|(id, from, offset, amount)| Op::Transfer {
                id,
                from,
                to: (from - 1 + offset) % ACCOUNTS + 1,
                amount,
            }),
        1 => (0..TRANSFER_IDS, 1..=ACCOUNTS, 1..=60i64)
            .prop_map(|(id, to, amount)| Op::Deposit { id, to, amount }),
        1 => (0..TRANSFER_IDS, 1..=ACCOUNTS, 1..=60i64)
            .prop_map(|(id, from, amount)| Op::Withdraw { id, from, amount }),
    ]
}

/// What an operation answered, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Reserved {
        replayed: bool,
        items: Vec<(i64, i32)>,
    },
    Confirmed {
        confirmed: Vec<(i64, i32)>,
        missing: Vec<(i64, i32)>,
    },
    Released(Vec<(i64, i32)>),
    Expired(u64),
    Adjusted {
        available: i32,
        reserved: i32,
    },
    Transferred {
        replayed: bool,
    },
    Refused(String),
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone)]
struct Row {
    product: i64,
    quantity: i32,
    status: Status,
    /// `None` for the order's own request, the re-reserve's key else.
    key: Option<u8>,
}

/// Per product, its latest row: the order's current state.
fn latest(rows: &[Row]) -> Vec<&Row> {
    let mut latest: BTreeMap<i64, &Row> = BTreeMap::new();
    for r in rows {
        latest.insert(r.product, r);
    }
    latest.into_values().collect()
}

fn summed(items: &[(i64, i64)]) -> BTreeMap<i64, i32> {
    let mut request: BTreeMap<i64, i32> = BTreeMap::new();
    for (p, q) in items {
        *request.entry(*p).or_default() += *q as i32;
    }
    request
}

#[derive(Debug, Default)]
struct Model {
    /// product → (available, reserved)
    stock: BTreeMap<i64, (i32, i32)>,
    /// order → its rows in creation order
    orders: BTreeMap<u8, Vec<Row>>,
    /// account → balance; 0 is the system account.
    balances: BTreeMap<i64, i64>,
    /// transfer id → (kind, from, to, amount)
    journal: BTreeMap<u8, (&'static str, i64, i64, i64)>,
}

fn pairs<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<(i64, i32)> {
    let mut v: Vec<(i64, i32)> = rows.map(|r| (r.product, r.quantity)).collect();
    // Stable: rows of one product stay in creation order, as the engine's ORDER BY gives them.
    v.sort_by_key(|p| p.0);
    v
}

impl Model {
    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Reserve { order, items } => self.reserve(*order, items),
            Op::Rereserve { order, key, items } => self.rereserve(*order, *key, items.as_deref()),
            Op::Confirm { order } => self.settle(*order, Status::Confirmed),
            Op::Release { order } => self.settle(*order, Status::Released),
            Op::Expire { order } => {
                let rows = self.orders.entry(*order).or_default();
                let mut n = 0;
                for r in rows.iter_mut().filter(|r| r.status == Status::Active) {
                    r.status = Status::Expired;
                    let s = self
                        .stock
                        .get_mut(&r.product)
                        .expect("reserved product exists");
                    s.0 += r.quantity;
                    s.1 -= r.quantity;
                    n += 1;
                }
                Outcome::Expired(n)
            }
            Op::Adjust { product, delta } => match self.stock.get_mut(product) {
                None => Outcome::Refused(format!("unknown product {product}")),
                Some(s) if i64::from(s.0) + delta < 0 => {
                    Outcome::Refused(format!("adjustment would go negative {product}"))
                }
                Some(s) => {
                    s.0 += *delta as i32;
                    Outcome::Adjusted {
                        available: s.0,
                        reserved: s.1,
                    }
                }
            },
            Op::Transfer {
                id,
                from,
                to,
                amount,
            } => {
                if from == to {
                    return Outcome::Refused("same account".into());
                }
                self.movement(*id, ("transfer", *from, *to, *amount))
            }
            Op::Deposit { id, to, amount } => self.movement(*id, ("deposit", 0, *to, *amount)),
            Op::Withdraw { id, from, amount } => {
                self.movement(*id, ("withdrawal", *from, 0, *amount))
            }
        }
    }

    /// A journal entry: replay or conflict by id, else a funds check (not on the system
    /// account), then both sides move.
    fn movement(&mut self, id: u8, entry: (&'static str, i64, i64, i64)) -> Outcome {
        let (_, from, to, amount) = entry;
        if let Some(existing) = self.journal.get(&id) {
            return if *existing == entry {
                Outcome::Transferred { replayed: true }
            } else {
                Outcome::Refused("transfer conflict".into())
            };
        }
        if from != 0 && self.balances[&from] < amount {
            return Outcome::Refused(format!("insufficient funds {from}"));
        }
        *self.balances.get_mut(&from).expect("account") -= amount;
        *self.balances.get_mut(&to).expect("account") += amount;
        self.journal.insert(id, entry);
        Outcome::Transferred { replayed: false }
    }

    /// Idempotency for good: once the order's own request wrote rows, the same items are a
    /// replay whatever became of them, other items a conflict.
    fn reserve(&mut self, order: u8, items: &[(i64, i64)]) -> Outcome {
        let request = summed(items);
        let rows = self.orders.entry(order).or_default();
        if !rows.is_empty() {
            let original: BTreeMap<i64, i32> = rows
                .iter()
                .filter(|r| r.key.is_none())
                .map(|r| (r.product, r.quantity))
                .collect();
            return if original == request {
                Outcome::Reserved {
                    replayed: true,
                    items: pairs(latest(rows).into_iter()),
                }
            } else {
                Outcome::Refused("idempotency conflict".into())
            };
        }
        self.take(order, None, request.into_iter().collect())
    }

    /// Takes again what the order lost, once per key.
    fn rereserve(&mut self, order: u8, key: u8, items: Option<&[(i64, i64)]>) -> Outcome {
        let rows = self.orders.entry(order).or_default();
        if rows.is_empty() {
            return Outcome::Refused(format!("unknown order {order}"));
        }
        let request = items.map(summed);
        let mine: BTreeMap<i64, i32> = rows
            .iter()
            .filter(|r| r.key == Some(key))
            .map(|r| (r.product, r.quantity))
            .collect();
        if !mine.is_empty() {
            return match request {
                Some(request) if request != mine => Outcome::Refused("idempotency conflict".into()),
                _ => Outcome::Reserved {
                    replayed: true,
                    items: pairs(latest(rows).into_iter()),
                },
            };
        }
        let lost: BTreeMap<i64, i32> = latest(rows)
            .into_iter()
            .filter(|r| !r.status.is_live())
            .map(|r| (r.product, r.quantity))
            .collect();
        let take: Vec<(i64, i32)> = match request {
            None => lost.into_iter().collect(),
            Some(request) => {
                if let Some(p) = request.keys().find(|p| !lost.contains_key(p)) {
                    return Outcome::Refused(format!("not rereservable {p}"));
                }
                request.into_iter().collect()
            }
        };
        if take.is_empty() {
            return Outcome::Refused("nothing to rereserve".into());
        }
        self.take(order, Some(key), take)
    }

    /// All or nothing, checked in ascending product id like the engine's locks.
    fn take(&mut self, order: u8, key: Option<u8>, take: Vec<(i64, i32)>) -> Outcome {
        for (p, q) in &take {
            match self.stock.get(p) {
                None => return Outcome::Refused(format!("unknown product {p}")),
                Some(s) if s.0 < *q => return Outcome::Refused(format!("insufficient stock {p}")),
                Some(_) => {}
            }
        }
        let rows = self.orders.entry(order).or_default();
        for (p, q) in &take {
            let s = self.stock.get_mut(p).expect("checked");
            s.0 -= q;
            s.1 += q;
            rows.push(Row {
                product: *p,
                quantity: *q,
                status: Status::Active,
                key,
            });
        }
        Outcome::Reserved {
            replayed: false,
            items: pairs(latest(rows).into_iter()),
        }
    }

    /// Confirm or release: active rows move to `to`, stock follows.
    fn settle(&mut self, order: u8, to: Status) -> Outcome {
        let rows = self.orders.entry(order).or_default();
        if rows.is_empty() {
            return Outcome::Refused(format!("unknown order {order}"));
        }
        for r in rows.iter_mut() {
            if r.status == Status::Active {
                let s = self
                    .stock
                    .get_mut(&r.product)
                    .expect("reserved product exists");
                s.1 -= r.quantity;
                if to == Status::Released {
                    s.0 += r.quantity;
                }
                r.status = to;
            }
        }
        if to == Status::Released {
            // The lines as they now stand: released ones are the answer; with none, the release
            // is refused naming the first line that stops it (sold or expired).
            let mut latest: BTreeMap<i64, &Row> = BTreeMap::new();
            for r in rows.iter() {
                latest.insert(r.product, r);
            }
            let released: Vec<&Row> = latest
                .values()
                .copied()
                .filter(|r| r.status == Status::Released)
                .collect();
            if released.is_empty() {
                if let Some(r) = latest.values().find(|r| r.status != Status::Released) {
                    return Outcome::Refused(format!("not releasable {} {}", r.product, r.status));
                }
            }
            return Outcome::Released(pairs(released.into_iter()));
        }
        let mut latest: BTreeMap<i64, &Row> = BTreeMap::new();
        for r in rows.iter() {
            latest.insert(r.product, r);
        }
        Outcome::Confirmed {
            confirmed: pairs(rows.iter().filter(|r| r.status == Status::Confirmed)),
            missing: pairs(latest.into_values().filter(|r| !r.status.is_live())),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The engine.

struct Engine {
    db: TestDb,
    stock: StockEngine,
    ledger: Ledger,
}

fn order_id(order: u8) -> OrderId {
    OrderId::new(format!("order-{order}")).expect("order id")
}

fn transfer_id(id: u8) -> TransferId {
    TransferId::new(format!("t{id}")).expect("transfer id")
}

/// 0 is the system account, which only the model names.
fn account(a: i64) -> AccountId {
    if a == 0 {
        AccountId::SYSTEM
    } else {
        AccountId::new(a).expect("account id")
    }
}

fn transferred(t: saldo::ledger::Transfer) -> Outcome {
    Outcome::Transferred {
        replayed: t.replayed,
    }
}

fn engine_pairs(items: &[ReservedItem]) -> Vec<(i64, i32)> {
    items
        .iter()
        .map(|i| (i.product_id.get(), i.quantity))
        .collect()
}

/// The refusals the operations may answer, named like the model names them; anything else is
/// a failure of the test.
fn refusal(e: Error) -> Outcome {
    Outcome::Refused(match e {
        Error::UnknownProduct(p) => format!("unknown product {p}"),
        Error::InsufficientStock { product_id, .. } => format!("insufficient stock {product_id}"),
        Error::IdempotencyConflict(_) => "idempotency conflict".into(),
        Error::NothingToRereserve(_) => "nothing to rereserve".into(),
        Error::NotRereservable { product_id, .. } => format!("not rereservable {product_id}"),
        Error::UnknownOrder(o) => {
            format!("unknown order {}", o.as_str().trim_start_matches("order-"))
        }
        Error::NotReleasable {
            product_id, status, ..
        } => format!("not releasable {product_id} {status}"),
        Error::AdjustmentWouldGoNegative { product_id, .. } => {
            format!("adjustment would go negative {product_id}")
        }
        Error::Input(saldo::InputError::SameAccount) => "same account".into(),
        Error::TransferConflict(_) => "transfer conflict".into(),
        Error::InsufficientFunds { account, .. } => format!("insufficient funds {account}"),
        other => panic!("unexpected error: {other:?}"),
    })
}

impl Engine {
    async fn apply(&self, op: &Op) -> Outcome {
        let result = match op {
            Op::Reserve { order, items } => {
                let request = ReserveRequest {
                    order_id: order_id(*order),
                    items: OrderItems::new(items.iter().copied()).expect("items"),
                    ttl: Ttl::default(),
                    tags: saldo::domain::Tags::NONE,
                };
                self.stock
                    .reserve(&request)
                    .await
                    .map(|r| Outcome::Reserved {
                        replayed: r.replayed,
                        items: engine_pairs(&r.items),
                    })
            }
            Op::Rereserve { order, key, items } => {
                let request = RereserveRequest {
                    order_id: order_id(*order),
                    rereserve_id: RequestKey::new(format!("k{key}")).expect("key"),
                    items: items
                        .as_ref()
                        .map(|i| OrderItems::new(i.iter().copied()).expect("items")),
                    ttl: Ttl::default(),
                };
                self.stock
                    .rereserve(&request)
                    .await
                    .map(|r| Outcome::Reserved {
                        replayed: r.replayed,
                        items: engine_pairs(&r.items),
                    })
            }
            Op::Confirm { order } => {
                self.stock
                    .confirm(&order_id(*order))
                    .await
                    .map(|c| Outcome::Confirmed {
                        confirmed: engine_pairs(&c.confirmed),
                        missing: engine_pairs(&c.missing),
                    })
            }
            Op::Release { order } => self
                .stock
                .release(&order_id(*order))
                .await
                .map(|r| Outcome::Released(engine_pairs(&r.released))),
            Op::Expire { order } => {
                let client = self.db.pool.get().await.expect("client");
                client
                    .execute(
                        "UPDATE reservations SET expires_at = now() - interval '1 second' \
                         WHERE order_id = $1 AND status = 'active'",
                        &[&order_id(*order).as_str()],
                    )
                    .await
                    .expect("make due");
                sweeper::sweep(self.stock.store())
                    .await
                    .map(Outcome::Expired)
            }
            Op::Adjust { product, delta } => {
                let reason = Reason::new("model").expect("reason");
                let product = ProductId::new(*product).expect("product");
                admin::adjust(self.stock.store(), product, *delta, &reason)
                    .await
                    .map(|s| Outcome::Adjusted {
                        available: s.available,
                        reserved: s.reserved,
                    })
            }
            Op::Transfer {
                id,
                from,
                to,
                amount,
            } => {
                let request = TransferRequest {
                    id: transfer_id(*id),
                    from: account(*from),
                    to: account(*to),
                    amount: Amount::new(*amount).expect("amount"),
                    tags: Default::default(),
                };
                self.ledger
                    .transfer(TRANSFER, &request)
                    .await
                    .map(transferred)
            }
            Op::Deposit { id, to, amount } => self
                .ledger
                .deposit(
                    transfer_id(*id),
                    account(*to),
                    Amount::new(*amount).expect("amount"),
                )
                .await
                .map(transferred),
            Op::Withdraw { id, from, amount } => self
                .ledger
                .withdraw(
                    transfer_id(*id),
                    account(*from),
                    Amount::new(*amount).expect("amount"),
                )
                .await
                .map(transferred),
        };
        result.unwrap_or_else(refusal)
    }

    /// Every invariant: both audits clean, every row equal to the model's.
    async fn check(&self, model: &Model, step: usize) {
        let stock = self.db.audit_stock().await.expect("stock audit");
        assert!(stock.is_empty(), "step {step}: stock audit {stock:?}");
        if LEDGER_OPS {
            let ledger = audit_ledger(&self.db.pool).await.expect("ledger audit");
            assert!(ledger.is_empty(), "step {step}: ledger audit {ledger:?}");
        }
        for (p, expected) in &model.stock {
            let s = admin::get(self.stock.store(), ProductId::new(*p).expect("id"))
                .await
                .expect("stock");
            assert_eq!(
                (s.available, s.reserved),
                *expected,
                "step {step}: product {p}"
            );
        }
        for (a, expected) in &model.balances {
            let found = self.ledger.account(account(*a)).await.expect("account");
            assert_eq!(found.balance, *expected, "step {step}: account {a}");
        }
    }
}

async fn run_case(counts: Vec<i64>, balances: Vec<i64>, ops: Vec<Op>) {
    let db = test_db().await;
    let store = db.store();
    let mut model = Model::default();
    for (i, count) in counts.iter().enumerate() {
        let p = i as i64 + 1;
        admin::set_count(&store, ProductId::new(p).expect("id"), *count)
            .await
            .expect("count");
        model.stock.insert(p, (*count as i32, 0));
    }
    let ledger = Ledger::serving(store.clone(), TRANSFER, &BatchedConfig::default());
    for (i, balance) in balances.iter().enumerate().filter(|_| LEDGER_OPS) {
        let a = i as i64 + 1;
        ledger
            .open_account(AccountId::new(a).expect("id"), *balance)
            .await
            .expect("open");
        model.balances.insert(a, *balance);
    }
    if LEDGER_OPS {
        model.balances.insert(0, -balances.iter().sum::<i64>());
    }
    let engine = Engine {
        stock: build(StrategyName::Atomic, store, &StrategyConfig::default()),
        ledger,
        db,
    };
    engine.check(&model, 0).await;
    for (step, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let actual = engine.apply(op).await;
        assert_eq!(actual, expected, "step {}: {op:?}", step + 1);
        engine.check(&model, step + 1).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        // Each case owns a database; shrinking reruns cases, so keep it bounded too.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn engine_and_ledger_agree_with_the_model(
        counts in prop::collection::vec(0..=8i64, PRODUCTS as usize),
        balances in prop::collection::vec(0..=100i64, ACCOUNTS as usize),
        ops in prop::collection::vec(op(), 1..=MAX_STEPS),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run_case(counts, balances, ops));
    }
}
