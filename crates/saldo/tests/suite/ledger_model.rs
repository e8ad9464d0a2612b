//! Model-based property test of the ledger's holds: random sequences of transfers
//! (posted or held), posts (whole or partial), voids, expiries and linked groups over accounts
//! with limits (a credit line, a ceiling) run against the real ledger and a plain in-memory
//! model. Every answer must agree, and after every step the audit is clean and every account's
//! balance, held and pending credits equal the model's.
//!
//! Generic over how operations are applied ([`Applier`]): `ordered` (the ledger's own
//! transactions) here; the batched ledger engine implements the same trait and reruns
//! [`run_case`] with its own applier.

use std::collections::BTreeMap;

use proptest::prelude::*;
use saldo::domain::{
    AccountId, Amount, BalanceLimits, GroupId, TransferId, TransferStatus, TransferTimeout,
};
use saldo::fixtures::make_holds_due;
use saldo::ledger::{Group, GroupRequest, Ledger, LinkedTransfer, Transfer, TransferRequest};
use saldo::{Error, InputError};
use saldo_lab::testing::ledger_divergences;

use super::harness::{test_db, TRANSFER};
use saldo::stock::batched::BatchedConfig;

/// Cases per run (`harness::LEDGER_MODEL_CASES`) and steps per case: bounded so the property
/// stays a few seconds.
pub const CASES: u32 = super::harness::LEDGER_MODEL_CASES;
pub const MAX_STEPS: usize = 30;
/// Accounts 1..=3: 1 has a credit line of 30, 2 the default limits, 3 a ceiling of 150.
pub const ACCOUNTS: i64 = 3;
const LIMITS: [(i64, Option<i64>); 3] = [(-30, None), (0, None), (0, Some(150))];
/// Few transfer and group ids, so replays, conflicts and settles of settled holds happen often.
const TRANSFER_IDS: u8 = 8;
const GROUP_IDS: u8 = 3;
/// Every hold's timeout in the property (expiry is forced by making it due).
const TIMEOUT_S: i64 = 60;

/// One transfer as the property draws it: (id, from, to, amount, pending).
type Draw = (u8, i64, i64, i64, bool);

#[derive(Debug, Clone)]
pub enum Op {
    Transfer(Draw),
    Post {
        id: u8,
        amount: Option<i64>,
    },
    Void {
        id: u8,
    },
    /// Test-only: the hold falls due, then the sweeper runs.
    Expire {
        id: u8,
    },
    Group {
        id: u8,
        transfers: Vec<Draw>,
    },
}

fn draw() -> impl Strategy<Value = Draw> {
    // `to` is another account nine times in ten, the same one (a refusal) otherwise.
    (
        0..TRANSFER_IDS,
        1..=ACCOUNTS,
        prop_oneof![9 => 1..ACCOUNTS, 1 => Just(0)],
        1..=60i64,
        any::<bool>(),
    )
        .prop_map(|(id, from, offset, amount, pending)| {
            (
                id,
                from,
                (from - 1 + offset) % ACCOUNTS + 1,
                amount,
                pending,
            )
        })
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => draw().prop_map(Op::Transfer),
        2 => (0..TRANSFER_IDS, prop::option::of(1..=60i64))
            .prop_map(|(id, amount)| Op::Post { id, amount }),
        1 => (0..TRANSFER_IDS).prop_map(|id| Op::Void { id }),
        1 => (0..TRANSFER_IDS).prop_map(|id| Op::Expire { id }),
        2 => (0..GROUP_IDS, prop::collection::vec(draw(), 1..=3))
            .prop_map(|(id, transfers)| Op::Group { id, transfers }),
    ]
}

/// What an operation answered, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A transfer's (status, posted_amount, replayed).
    Transfer(TransferStatus, Option<i64>, bool),
    /// A group's replay flag and its transfers' statuses.
    Group(bool, Vec<TransferStatus>),
    Expired(u64),
    Refused(String),
}

fn tid(id: u8) -> TransferId {
    TransferId::new(format!("t{id}")).expect("transfer id")
}

fn account(n: i64) -> AccountId {
    AccountId::new(n).expect("account id")
}

fn linked(d: &Draw) -> LinkedTransfer {
    LinkedTransfer {
        transfer: TransferRequest {
            id: tid(d.0),
            from: account(d.1),
            to: account(d.2),
            amount: Amount::new(d.3).expect("amount"),
            tags: Default::default(),
        },
        pending: d
            .4
            .then(|| TransferTimeout::from_secs(TIMEOUT_S).expect("timeout")),
    }
}

/// How the ledger under test applies the operations: the one thing an engine changes.
pub trait Applier {
    async fn transfer(&self, ledger: &Ledger, t: &LinkedTransfer) -> Result<Transfer, Error>;
    async fn post(
        &self,
        ledger: &Ledger,
        id: &TransferId,
        amount: Option<Amount>,
    ) -> Result<Transfer, Error>;
    async fn void(&self, ledger: &Ledger, id: &TransferId) -> Result<Transfer, Error>;
    async fn group(&self, ledger: &Ledger, g: &GroupRequest) -> Result<Group, Error>;
}

/// The ledger's own operations, with the strategy it serves (`harness::TRANSFER`: `ordered`,
/// or the batched ledger engine in `tests/ledger_batched.rs`).
pub struct Ordered;

impl Applier for Ordered {
    async fn transfer(&self, ledger: &Ledger, t: &LinkedTransfer) -> Result<Transfer, Error> {
        match t.pending {
            Some(timeout) => ledger.hold(&t.transfer, timeout).await,
            None => ledger.transfer(ledger.strategy(), &t.transfer).await,
        }
    }
    async fn post(
        &self,
        ledger: &Ledger,
        id: &TransferId,
        amount: Option<Amount>,
    ) -> Result<Transfer, Error> {
        ledger.post(id, amount).await
    }
    async fn void(&self, ledger: &Ledger, id: &TransferId) -> Result<Transfer, Error> {
        ledger.void(id).await
    }
    async fn group(&self, ledger: &Ledger, g: &GroupRequest) -> Result<Group, Error> {
        ledger.transfer_group(g).await
    }
}

/// The name a refusal is compared by: its kind and the account, position or state it names.
fn refusal(e: Error) -> Outcome {
    Outcome::Refused(match e {
        Error::InsufficientFunds { account, .. } => format!("min {account}"),
        Error::MaxBalanceExceeded { account, .. } => format!("max {account}"),
        Error::TransferConflict(_) => "conflict".into(),
        Error::UnknownTransfer(_) => "unknown".into(),
        Error::TransferNotPending { status, .. } => format!("not pending: {status}"),
        Error::PostExceedsHold { .. } => "exceeds".into(),
        Error::GroupConflict(_) => "group conflict".into(),
        Error::GroupRefused { index, source, .. } => match refusal(*source) {
            Outcome::Refused(why) => format!("group #{index}: {why}"),
            other => format!("group #{index}: {other:?}"),
        },
        Error::Input(InputError::SameAccount) => "same account".into(),
        Error::Input(InputError::GroupDuplicateTransfer(_)) => "duplicate".into(),
        other => panic!("unexpected error: {other:?}"),
    })
}

fn transferred(t: Transfer) -> Outcome {
    Outcome::Transfer(t.status, t.posted_amount, t.replayed)
}

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Acc {
    balance: i64,
    held: i64,
    pending_credits: i64,
    min: i64,
    max: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tr {
    draw: Draw,
    status: TransferStatus,
    posted: Option<i64>,
    group: Option<u8>,
}

#[derive(Debug, Clone, Default)]
struct Model {
    accounts: BTreeMap<i64, Acc>,
    transfers: BTreeMap<u8, Tr>,
    /// Each applied group's transfer ids, in request order.
    groups: BTreeMap<u8, Vec<u8>>,
}

impl Model {
    fn same(existing: &Tr, d: &Draw, group: Option<u8>) -> bool {
        existing.draw.1 == d.1
            && existing.draw.2 == d.2
            && existing.draw.3 == d.3
            && existing.draw.4 == d.4
            && existing.group == group
    }

    /// Places `d` on `accounts`, or the refusal.
    fn place(accounts: &mut BTreeMap<i64, Acc>, d: &Draw) -> Result<(), String> {
        let (_, from, to, amount, pending) = *d;
        let f = accounts[&from];
        let t = accounts[&to];
        if f.balance - f.held - amount < f.min {
            return Err(format!("min {from}"));
        }
        if t.max
            .is_some_and(|max| t.balance + t.pending_credits + amount > max)
        {
            return Err(format!("max {to}"));
        }
        let f = accounts.get_mut(&from).expect("from");
        if pending {
            f.held += amount;
        } else {
            f.balance -= amount;
        }
        let t = accounts.get_mut(&to).expect("to");
        if pending {
            t.pending_credits += amount;
        } else {
            t.balance += amount;
        }
        Ok(())
    }

    fn status_of(pending: bool) -> TransferStatus {
        if pending {
            TransferStatus::Pending
        } else {
            TransferStatus::Posted
        }
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Transfer(d) => {
                if d.1 == d.2 {
                    return Outcome::Refused("same account".into());
                }
                if let Some(existing) = self.transfers.get(&d.0) {
                    return if Self::same(existing, d, None) {
                        Outcome::Transfer(existing.status, existing.posted, true)
                    } else {
                        Outcome::Refused("conflict".into())
                    };
                }
                if let Err(why) = Self::place(&mut self.accounts, d) {
                    return Outcome::Refused(why);
                }
                let status = Self::status_of(d.4);
                let posted = (!d.4).then_some(d.3);
                self.transfers.insert(
                    d.0,
                    Tr {
                        draw: *d,
                        status,
                        posted,
                        group: None,
                    },
                );
                Outcome::Transfer(status, posted, false)
            }
            Op::Post { id, amount } => self.settle(*id, TransferStatus::Posted, *amount),
            Op::Void { id } => self.settle(*id, TransferStatus::Voided, None),
            Op::Expire { id } => {
                let pending = self
                    .transfers
                    .get(id)
                    .is_some_and(|t| t.status == TransferStatus::Pending);
                if pending {
                    self.settle(*id, TransferStatus::Expired, None);
                }
                Outcome::Expired(u64::from(pending))
            }
            Op::Group { id, transfers } => self.group(*id, transfers),
        }
    }

    fn settle(&mut self, id: u8, target: TransferStatus, amount: Option<i64>) -> Outcome {
        let Some(t) = self.transfers.get(&id).cloned() else {
            return Outcome::Refused("unknown".into());
        };
        let (_, from, to, full, was_pending) = t.draw;
        if t.status != TransferStatus::Pending {
            let same_post = target == TransferStatus::Posted
                && t.status == TransferStatus::Posted
                && t.posted == Some(amount.unwrap_or(full));
            let same_void = target == TransferStatus::Voided && t.status == TransferStatus::Voided;
            return if was_pending && (same_post || same_void) {
                Outcome::Transfer(t.status, t.posted, true)
            } else {
                Outcome::Refused(format!("not pending: {}", t.status))
            };
        }
        let posted = if target == TransferStatus::Posted {
            let n = amount.unwrap_or(full);
            if n > full {
                return Outcome::Refused("exceeds".into());
            }
            n
        } else {
            0
        };
        let f = self.accounts.get_mut(&from).expect("from");
        f.held -= full;
        f.balance -= posted;
        let to_acc = self.accounts.get_mut(&to).expect("to");
        to_acc.pending_credits -= full;
        to_acc.balance += posted;
        let posted = (posted > 0).then_some(posted);
        let entry = self.transfers.get_mut(&id).expect("transfer");
        entry.status = target;
        entry.posted = posted;
        Outcome::Transfer(target, posted, false)
    }

    fn group(&mut self, gid: u8, transfers: &[Draw]) -> Outcome {
        let mut seen = Vec::new();
        for (index, d) in transfers.iter().enumerate() {
            if seen.contains(&d.0) {
                return Outcome::Refused("duplicate".into());
            }
            seen.push(d.0);
            if d.1 == d.2 {
                return Outcome::Refused(format!("group #{index}: same account"));
            }
        }
        if let Some(ids) = self.groups.get(&gid) {
            let same = ids.len() == transfers.len()
                && ids
                    .iter()
                    .zip(transfers)
                    .all(|(id, d)| *id == d.0 && Self::same(&self.transfers[id], d, Some(gid)));
            return if same {
                Outcome::Group(
                    true,
                    ids.iter().map(|id| self.transfers[id].status).collect(),
                )
            } else {
                Outcome::Refused("group conflict".into())
            };
        }
        if let Some(index) = transfers
            .iter()
            .position(|d| self.transfers.contains_key(&d.0))
        {
            return Outcome::Refused(format!("group #{index}: conflict"));
        }
        let mut accounts = self.accounts.clone();
        for (index, d) in transfers.iter().enumerate() {
            if let Err(why) = Self::place(&mut accounts, d) {
                return Outcome::Refused(format!("group #{index}: {why}"));
            }
        }
        self.accounts = accounts;
        for d in transfers {
            self.transfers.insert(
                d.0,
                Tr {
                    draw: *d,
                    status: Self::status_of(d.4),
                    posted: (!d.4).then_some(d.3),
                    group: Some(gid),
                },
            );
        }
        self.groups
            .insert(gid, transfers.iter().map(|d| d.0).collect());
        Outcome::Group(
            false,
            transfers.iter().map(|d| Self::status_of(d.4)).collect(),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The real ledger.

async fn apply_real<A: Applier>(applier: &A, ledger: &Ledger, op: &Op) -> Outcome {
    let result = match op {
        Op::Transfer(d) => applier.transfer(ledger, &linked(d)).await.map(transferred),
        Op::Post { id, amount } => {
            let amount = amount.map(|n| Amount::new(n).expect("amount"));
            applier
                .post(ledger, &tid(*id), amount)
                .await
                .map(transferred)
        }
        Op::Void { id } => applier.void(ledger, &tid(*id)).await.map(transferred),
        Op::Expire { id } => {
            let name = tid(*id);
            make_holds_due(&ledger.store().pool, &[name.as_str()])
                .await
                .expect("due");
            ledger.expire_due().await.map(Outcome::Expired)
        }
        Op::Group { id, transfers } => {
            let request = GroupRequest {
                id: GroupId::new(format!("g{id}")).expect("group id"),
                transfers: transfers.iter().map(linked).collect(),
                tags: Default::default(),
            };
            applier
                .group(ledger, &request)
                .await
                .map(|g| Outcome::Group(g.replayed, g.transfers.iter().map(|t| t.status).collect()))
        }
    };
    result.unwrap_or_else(refusal)
}

async fn check(ledger: &Ledger, model: &Model, step: usize) {
    let divergences = ledger_divergences(ledger.store()).await;
    assert!(
        divergences.is_empty(),
        "step {step}: ledger audit {divergences:?}"
    );
    for (a, expected) in &model.accounts {
        let found = ledger.account(account(*a)).await.expect("account");
        assert_eq!(
            (found.balance, found.held, found.pending_credits),
            (expected.balance, expected.held, expected.pending_credits),
            "step {step}: account {a}"
        );
    }
}

/// One case: fresh database, accounts opened with `balances` and [`LIMITS`], then `ops`
/// applied by `applier` and by the model, compared step by step.
pub async fn run_case<A: Applier>(applier: &A, balances: Vec<i64>, ops: Vec<Op>) {
    let db = test_db().await;
    let ledger = Ledger::serving(db.store(), TRANSFER, &BatchedConfig::default());
    let mut model = Model::default();
    for (i, (balance, (min, max))) in balances.iter().zip(LIMITS).enumerate() {
        let a = i as i64 + 1;
        let limits = BalanceLimits::new(min, max).expect("limits");
        ledger
            .open_account_with_limits(account(a), *balance, limits)
            .await
            .expect("open");
        model.accounts.insert(
            a,
            Acc {
                balance: *balance,
                min,
                max,
                ..Acc::default()
            },
        );
    }
    check(&ledger, &model, 0).await;
    for (step, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let actual = apply_real(applier, &ledger, op).await;
        assert_eq!(actual, expected, "step {}: {op:?}", step + 1);
        check(&ledger, &model, step + 1).await;
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
    fn ordered_holds_limits_and_groups_agree_with_the_model(
        balances in prop::collection::vec(0..=100i64, ACCOUNTS as usize),
        ops in prop::collection::vec(op(), 1..=MAX_STEPS),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run_case(&Ordered, balances, ops));
    }
}
