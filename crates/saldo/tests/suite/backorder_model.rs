//! Model-based property test of backorders: random reserve / confirm / release / expire /
//! restock / count sequences on two products with random stock and backorder limits run
//! against the real engine (a random served strategy, a fresh database per case) and against a
//! plain in-memory model of the rules (available first, the rest backordered within the limit,
//! all items or none; arrivals fill live backorders oldest first, confirmed ones straight to
//! sold; release and expiry drop them). Every answer must agree, and after every step the audit
//! is clean and every stock row and every reservation's backorder equals the model's.

use std::collections::BTreeMap;

use proptest::prelude::*;
use saldo::audit::audit_stock;
use saldo::domain::{OrderId, OrderItems, ProductId, Reason, Ttl};
use saldo::stock::backorders::set_policy;
use saldo::stock::{
    admin, build, sweeper, ReserveRequest, Status, StockEngine, StrategyConfig, StrategyName,
};
use saldo::Error;

use super::harness::{test_db, TestDb};

/// Cases per run and steps per case: bounded so the property stays a few seconds.
const CASES: u32 = 24;
const MAX_STEPS: usize = 30;
const PRODUCTS: i64 = 2;
const ORDERS: u8 = 4;

#[derive(Debug, Clone)]
enum Op {
    Reserve { order: u8, items: Vec<(i64, i64)> },
    Confirm { order: u8 },
    Release { order: u8 },
    Expire { order: u8 },
    Restock { product: i64, delta: i64 },
    Count { product: i64, count: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let product = 1..=PRODUCTS;
    prop_oneof![
        5 => (0..ORDERS, prop::collection::vec((product.clone(), 1..=3i64), 1..=2))
            .prop_map(|(order, items)| Op::Reserve { order, items }),
        2 => (0..ORDERS).prop_map(|order| Op::Confirm { order }),
        1 => (0..ORDERS).prop_map(|order| Op::Release { order }),
        1 => (0..ORDERS).prop_map(|order| Op::Expire { order }),
        3 => (product.clone(), 1..=4i64).prop_map(|(product, delta)| Op::Restock { product, delta }),
        1 => (product, 0..=6i64).prop_map(|(product, count)| Op::Count { product, count }),
    ]
}

/// (product, quantity, backordered) per item.
type Items = Vec<(i64, i32, i32)>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Reserved {
        replayed: bool,
        items: Items,
    },
    Confirmed {
        confirmed: Items,
        missing: Items,
        pending: Vec<(i64, i32)>,
    },
    Released(Items),
    Expired(u64),
    Stock(Books),
    Refused(String),
}

/// (available, reserved, backordered)
type Books = (i32, i32, i32);

#[derive(Debug, Clone)]
struct Row {
    product: i64,
    quantity: i32,
    backordered: i32,
    status: Status,
    arrival: u64,
}

fn items<'a>(rows: impl Iterator<Item = &'a Row>) -> Items {
    let mut v: Items = rows
        .map(|r| (r.product, r.quantity, r.backordered))
        .collect();
    v.sort_by_key(|i| i.0);
    v
}

#[derive(Debug, Default)]
struct Model {
    stock: BTreeMap<i64, Books>,
    limits: BTreeMap<i64, i32>,
    orders: BTreeMap<u8, Vec<Row>>,
    arrivals: u64,
}

impl Model {
    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Reserve { order, items } => self.reserve(*order, items),
            Op::Confirm { order } => self.settle(*order, Status::Confirmed),
            Op::Release { order } => self.settle(*order, Status::Released),
            Op::Expire { order } => {
                let n = self.orders.get(order).map_or(0, |rows| {
                    rows.iter().filter(|r| r.status == Status::Active).count()
                });
                self.settle(*order, Status::Expired);
                Outcome::Expired(n as u64)
            }
            Op::Restock { product, delta } => {
                self.stock.get_mut(product).expect("product").0 += *delta as i32;
                self.fill(*product, *delta as i32);
                Outcome::Stock(self.stock[product])
            }
            Op::Count { product, count } => {
                let (available, reserved, _) = self.stock[product];
                let count = *count as i32;
                if count < reserved {
                    return Outcome::Refused(format!("count below reserved {product}"));
                }
                self.stock.get_mut(product).expect("product").0 = count - reserved;
                self.fill(*product, count - (available + reserved));
                Outcome::Stock(self.stock[product])
            }
        }
    }

    fn reserve(&mut self, order: u8, request: &[(i64, i64)]) -> Outcome {
        let mut summed: BTreeMap<i64, i32> = BTreeMap::new();
        for (p, q) in request {
            *summed.entry(*p).or_default() += *q as i32;
        }
        if let Some(rows) = self.orders.get(&order).filter(|r| !r.is_empty()) {
            let original: BTreeMap<i64, i32> =
                rows.iter().map(|r| (r.product, r.quantity)).collect();
            return if original == summed {
                Outcome::Reserved {
                    replayed: true,
                    items: items(rows.iter()),
                }
            } else {
                Outcome::Refused("idempotency conflict".into())
            };
        }
        let mut split = Vec::new();
        for (&p, &q) in &summed {
            let (available, _, backordered) = self.stock[&p];
            let allocated = q.min(available);
            if q - allocated > self.limits[&p] - backordered {
                return Outcome::Refused(format!("insufficient stock {p}"));
            }
            split.push((p, q, q - allocated));
        }
        let mut rows = Vec::new();
        for (p, q, back) in split {
            let s = self.stock.get_mut(&p).expect("product");
            s.0 -= q - back;
            s.1 += q - back;
            s.2 += back;
            self.arrivals += 1;
            rows.push(Row {
                product: p,
                quantity: q,
                backordered: back,
                status: Status::Active,
                arrival: self.arrivals,
            });
        }
        let answer = items(rows.iter());
        self.orders.insert(order, rows);
        Outcome::Reserved {
            replayed: false,
            items: answer,
        }
    }

    fn settle(&mut self, order: u8, to: Status) -> Outcome {
        let Some(rows) = self.orders.get_mut(&order).filter(|r| !r.is_empty()) else {
            return Outcome::Refused(format!("unknown order {order}"));
        };
        for r in rows.iter_mut().filter(|r| r.status == Status::Active) {
            let s = self.stock.get_mut(&r.product).expect("product");
            let allocated = r.quantity - r.backordered;
            s.1 -= allocated;
            if to != Status::Confirmed {
                s.0 += allocated;
                s.2 -= r.backordered;
            }
            r.status = to;
        }
        match to {
            Status::Confirmed => Outcome::Confirmed {
                confirmed: items(rows.iter().filter(|r| r.status == Status::Confirmed)),
                missing: items(rows.iter().filter(|r| !r.status.is_live())),
                pending: rows
                    .iter()
                    .filter(|r| r.status == Status::Confirmed && r.backordered > 0)
                    .map(|r| (r.product, r.backordered))
                    .collect(),
            },
            // With no line released (now or before) the release is refused, naming the first
            // line that stops it (sold or expired).
            _ => match rows.iter().find(|r| r.status != Status::Released) {
                Some(r) if !rows.iter().any(|r| r.status == Status::Released) => {
                    Outcome::Refused(format!("not releasable {} {}", r.product, r.status))
                }
                _ => Outcome::Released(items(rows.iter().filter(|r| r.status == Status::Released))),
            },
        }
    }

    /// `arrived` units just added to `product`'s available go to its live backorders, oldest
    /// first.
    fn fill(&mut self, product: i64, arrived: i32) {
        let mut left = arrived.max(0);
        let mut waiting: Vec<&mut Row> = self
            .orders
            .values_mut()
            .flatten()
            .filter(|r| r.product == product && r.backordered > 0 && r.status.is_live())
            .collect();
        waiting.sort_by_key(|r| r.arrival);
        let s = self.stock.get_mut(&product).expect("product");
        for r in waiting {
            if left == 0 {
                break;
            }
            let f = r.backordered.min(left);
            left -= f;
            r.backordered -= f;
            s.0 -= f;
            s.2 -= f;
            if r.status == Status::Active {
                s.1 += f;
            }
        }
    }
}

fn order_id(order: u8) -> OrderId {
    OrderId::new(format!("order-{order}")).expect("order id")
}

fn engine_items(items: &[saldo::stock::ReservedItem]) -> Items {
    items
        .iter()
        .map(|i| (i.product_id.get(), i.quantity, i.backordered))
        .collect()
}

fn refusal(e: Error) -> Outcome {
    Outcome::Refused(match e {
        Error::InsufficientStock { product_id, .. } => format!("insufficient stock {product_id}"),
        Error::IdempotencyConflict(_) => "idempotency conflict".into(),
        Error::UnknownOrder(o) => {
            format!("unknown order {}", o.as_str().trim_start_matches("order-"))
        }
        Error::NotReleasable {
            product_id, status, ..
        } => format!("not releasable {product_id} {status}"),
        Error::CountBelowReserved { product_id, .. } => {
            format!("count below reserved {product_id}")
        }
        other => panic!("unexpected error: {other:?}"),
    })
}

struct Engine {
    db: TestDb,
    stock: StockEngine,
}

impl Engine {
    async fn apply(&self, op: &Op) -> Outcome {
        let store = self.stock.store();
        let books =
            |s: saldo::stock::Stock| Outcome::Stock((s.available, s.reserved, s.backordered));
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
                        items: engine_items(&r.items),
                    })
            }
            Op::Confirm { order } => {
                self.stock
                    .confirm(&order_id(*order))
                    .await
                    .map(|c| Outcome::Confirmed {
                        confirmed: engine_items(&c.confirmed),
                        missing: engine_items(&c.missing),
                        pending: c
                            .pending
                            .iter()
                            .map(|p| (p.product_id.get(), p.quantity))
                            .collect(),
                    })
            }
            Op::Release { order } => self
                .stock
                .release(&order_id(*order))
                .await
                .map(|r| Outcome::Released(engine_items(&r.released))),
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
                sweeper::sweep(store).await.map(Outcome::Expired)
            }
            Op::Restock { product, delta } => {
                let reason = Reason::new("model").expect("reason");
                let product = ProductId::new(*product).expect("product");
                admin::adjust(store, product, *delta, &reason)
                    .await
                    .map(books)
            }
            Op::Count { product, count } => {
                let product = ProductId::new(*product).expect("product");
                admin::set_count(store, product, *count).await.map(books)
            }
        };
        result.unwrap_or_else(refusal)
    }

    async fn check(&self, model: &Model, step: usize) {
        let divergences = audit_stock(&self.db.pool).await.expect("audit");
        assert!(divergences.is_empty(), "step {step}: audit {divergences:?}");
        for (p, expected) in &model.stock {
            let s = admin::get(self.stock.store(), ProductId::new(*p).expect("id"))
                .await
                .expect("stock");
            assert_eq!(
                (s.available, s.reserved, s.backordered),
                *expected,
                "step {step}: product {p}"
            );
        }
        for (order, rows) in &model.orders {
            let found = self.stock.order(&order_id(*order)).await.expect("order");
            let found: Vec<(i64, i32, Status)> = found
                .iter()
                .map(|i| (i.product_id.get(), i.backordered, i.status))
                .collect();
            let mut expected: Vec<(i64, i32, Status)> = rows
                .iter()
                .map(|r| (r.product, r.backordered, r.status))
                .collect();
            expected.sort_by_key(|r| r.0);
            assert_eq!(found, expected, "step {step}: order {order}");
        }
    }
}

async fn run_case(strategy: StrategyName, setup: Vec<(i64, i64)>, ops: Vec<Op>) {
    let db = test_db().await;
    let store = db.store();
    let mut model = Model::default();
    for (i, &(count, limit)) in setup.iter().enumerate() {
        let p = ProductId::new(i as i64 + 1).expect("id");
        admin::set_count(&store, p, count).await.expect("count");
        set_policy(&store, p, limit).await.expect("policy");
        model.stock.insert(p.get(), (count as i32, 0, 0));
        model.limits.insert(p.get(), limit as i32);
    }
    let engine = Engine {
        stock: build(strategy, store, &StrategyConfig::default()),
        db,
    };
    engine.check(&model, 0).await;
    for (step, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let actual = engine.apply(op).await;
        assert_eq!(actual, expected, "{strategy} step {}: {op:?}", step + 1);
        engine.check(&model, step + 1).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn backorders_agree_with_the_model(
        strategy in prop::sample::select(StrategyName::ALL),
        setup in prop::collection::vec((0..=3i64, 0..=4i64), PRODUCTS as usize),
        ops in prop::collection::vec(op(), 1..=MAX_STEPS),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run_case(strategy, setup, ops));
    }
}
