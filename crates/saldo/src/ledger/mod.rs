//! The ledger (seed 002, issue 14): accounts and money moving between them by double entry,
//! posted at once or held first.
//!
//! Every movement is a row of the `transfers` journal between two accounts, and the system
//! account 0 is the other side of every opening balance, deposit and withdrawal, so the sum of
//! all balances (the system account included) is always zero. A transfer is idempotent by the
//! client's id: the same id and payload answer the original result, another payload conflicts.
//!
//! # Data model (migration V5)
//!
//! - `accounts(id, balance, held, pending_credits, min_balance, max_balance)`: `balance` is
//!   posted money; `held` the sum of the account's live pending debits, `pending_credits` of its
//!   live pending credits; `available = balance - held`. Limits: `balance - held >= min_balance`
//!   (default 0; negative = a credit line; NULL only for the system account, which has no
//!   limits) and `balance + pending_credits <= max_balance` when set. Both are CHECKs too.
//! - `transfers(…, status, posted_amount, timeout_s, expires_at, settled_at, group_id,
//!   group_position)`: `status` ∈ pending | posted | voided | expired. A one-shot transfer is
//!   `posted` at once (posted_amount NULL = the whole amount); a hold is `pending` until ONE of
//!   post (whole or partial), void or the sweeper's expiry settles it.
//! - `transfer_groups(id, size)`: a linked group, applied all or none, idempotent by its id.
//!
//! `held` and `pending_credits` are columns of the account row, changed in the same
//! transaction as the transfer row whose status they follow (never recomputed on the hot path);
//! the audit ([`crate::audit::audit_ledger`]) checks them against the live pending transfers.
//!
//! # Locks and the single winner
//!
//! Lock order: account rows in ascending id, taken once each by ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE` before any decision, for a transfer, a
//! hold, a settle and a whole group alike; a transfer row is written only after the locks of
//! its accounts are held. No two ledger transactions can wait on each other in a cycle.
//! Post, void and expiry of one hold all lock its two accounts first, so they run one after
//! the other; each then moves the row with `UPDATE … WHERE id = $1 AND status = 'pending'`,
//! and whoever comes later reads the state the winner reached ([`Error::TransferNotPending`],
//! or the same answer again for the very post or void that won). The sweeper reads due holds
//! without locking them, locks their accounts with `SKIP LOCKED` (never waiting, never in a
//! cycle) and expires only those whose two accounts it got.
//!
//! # Layers
//!
//! [`apply`] decides ONE operation on already-locked rows, in memory (limits, overflow, new
//! balances, the status move); [`holds`] is the thin transaction around it (lock, apply,
//! one UPDATE of the changed accounts, the journal rows). The batched engine calls `apply` for
//! each operation of a batch on one set of locks. The race lab (`saldo-lab`) brings a naive
//! strategy that updates in arrival order and deadlocks, through [`MoveFunds`] and
//! [`Ledger::transfer_with`], to show what the ordered strategy prevents; the service never
//! offers it.

pub mod apply;
pub mod batched;
pub mod holds;
pub(crate) mod journal;
mod ordered;
pub mod types;

pub use apply::{NewTransfer, Settle};
pub use types::{
    Account, Group, GroupRequest, LinkedTransfer, MoveFunds, Movement, Transfer, TransferKind,
    TransferRequest, TransferStrategy,
};

use crate::batch::config::BatchedConfig;
use crate::domain::{
    AccountId, Amount, BalanceLimits, GroupId, InputError as In, TransferId, TransferTimeout,
    MAX_AMOUNT, MAX_GROUP_TRANSFERS,
};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_idempotent_transaction, in_transaction};
use crate::store::schema::Layout;
use batched::BatchedLedger;

/// Most transfers one [`Ledger::transfers_of`] call returns.
pub const MAX_LIST: i64 = 1_000;
/// The opening balance of account N is journalled as transfer `opening:N`; client transfer ids
/// may not start with this prefix, so they can never collide with it.
pub const OPENING_PREFIX: &str = "opening:";
/// A unique violation on the journal's key means a concurrent copy of the same transfer
/// committed first; rerunning finds it and answers as a replay ([`in_idempotent_transaction`]).
/// On Citus the id's key is `transfer_ids` (written before the sides: see `journal`).
pub(crate) fn transfers_key(layout: Layout) -> &'static str {
    match layout {
        Layout::Single => "transfers_pkey",
        Layout::Citus => "transfer_ids_pkey",
    }
}
/// The same for a linked group's id.
const GROUPS_KEY: &str = "transfer_groups_pkey";
/// Holds expired per sweeper transaction.
pub const EXPIRE_BATCH: i64 = 500;
/// Batches per sweeper round at most, so one round is bounded even under a flood of expiries.
pub const MAX_EXPIRE_BATCHES_PER_ROUND: usize = 1_000;

/// The ledger over one database, with the transfer strategy it serves deposits and
/// withdrawals with (and the batched engine, whose workers start only if it is used).
#[derive(Clone)]
pub struct Ledger {
    store: Store,
    strategy: TransferStrategy,
    engine: BatchedLedger,
}

impl Ledger {
    /// A ledger serving `ordered`.
    pub fn new(store: Store) -> Self {
        Ledger::serving(store, TransferStrategy::Ordered, &BatchedConfig::default())
    }

    /// A ledger whose deposits and withdrawals use `strategy`; `batched` is the engine
    /// configured by `config` (also used by [`Ledger::transfer`] with `Batched`).
    pub fn serving(store: Store, strategy: TransferStrategy, config: &BatchedConfig) -> Self {
        Ledger {
            engine: BatchedLedger::new(store.clone(), config),
            store,
            strategy,
        }
    }

    /// The strategy this ledger serves.
    pub fn strategy(&self) -> TransferStrategy {
        self.strategy
    }

    /// The batched engine (its counters; the bench reads them).
    pub fn engine(&self) -> &BatchedLedger {
        &self.engine
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Opens account `id` with `opening_balance` (0..=[`MAX_AMOUNT`]) moved from the system
    /// account and journalled as transfer `opening:<id>`, with the default limits (no
    /// overdraft, no ceiling). [`Error::AccountExists`] if it exists.
    pub async fn open_account(
        &self,
        id: AccountId,
        opening_balance: i64,
    ) -> Result<Account, Error> {
        self.open_account_with_limits(id, opening_balance, BalanceLimits::default())
            .await
    }

    /// [`Ledger::open_account`] with balance limits; the opening balance must be within them.
    pub async fn open_account_with_limits(
        &self,
        id: AccountId,
        opening_balance: i64,
        limits: BalanceLimits,
    ) -> Result<Account, Error> {
        if id == AccountId::SYSTEM {
            return Err(InputError::AccountIdNotPositive(id.get()).into());
        }
        if !(0..=MAX_AMOUNT).contains(&opening_balance) {
            return Err(InputError::AmountOutOfRange {
                amount: opening_balance,
                max: MAX_AMOUNT,
            }
            .into());
        }
        if opening_balance < limits.min_balance()
            || limits
                .max_balance()
                .is_some_and(|max| opening_balance > max)
        {
            return Err(In::OpeningOutsideLimits {
                opening_balance,
                min_balance: limits.min_balance(),
                max_balance: limits.max_balance(),
            }
            .into());
        }
        let opening_id = TransferId::new(format!("{OPENING_PREFIX}{id}"))?;
        let layout = self.store.layout();
        let result = in_transaction(&self.store.pool, &self.store.tx, Operation::OpenAccount, |client| {
            let opening_id = &opening_id;
            crate::tx_body!(client => journal::open(client, layout, id, opening_balance, limits, opening_id))
        })
        .await;
        observe("opening", &result.as_ref().map(|_| false));
        result
    }

    /// Moves `amount` from the system account into `to`.
    pub async fn deposit(
        &self,
        id: TransferId,
        to: AccountId,
        amount: Amount,
    ) -> Result<Transfer, Error> {
        let movement = Movement {
            id: &id,
            from: AccountId::SYSTEM,
            to,
            amount,
            kind: TransferKind::Deposit,
        };
        self.apply(self.strategy, movement).await
    }

    /// Moves `amount` from `from` to the system account; the balance may not go negative.
    pub async fn withdraw(
        &self,
        id: TransferId,
        from: AccountId,
        amount: Amount,
    ) -> Result<Transfer, Error> {
        let movement = Movement {
            id: &id,
            from,
            to: AccountId::SYSTEM,
            amount,
            kind: TransferKind::Withdrawal,
        };
        self.apply(self.strategy, movement).await
    }

    /// Moves `request.amount` between two customer accounts with `strategy`.
    pub async fn transfer(
        &self,
        strategy: TransferStrategy,
        request: &TransferRequest,
    ) -> Result<Transfer, Error> {
        let movement = request.movement();
        self.apply(strategy, movement).await
    }

    /// [`Ledger::transfer`] with any [`MoveFunds`]: for the race lab's naive strategy. The
    /// validation, idempotency, journal row and retry are the ledger's, as for every transfer.
    pub async fn transfer_with(
        &self,
        strategy: &dyn MoveFunds,
        request: &TransferRequest,
    ) -> Result<Transfer, Error> {
        let movement = request.movement();
        let result = apply_one(&self.store, strategy, Operation::Transfer, movement).await;
        observe(movement.kind.as_str(), &result.as_ref().map(|t| t.replayed));
        result
    }

    /// Places a hold: `request.amount` is held against `request.from` (counted against its
    /// `min_balance`) and pending to `request.to` (counted against its `max_balance`) until it is
    /// posted, voided or expires after `timeout`. Nothing moves yet. Idempotent by id.
    pub async fn hold(
        &self,
        request: &TransferRequest,
        timeout: TransferTimeout,
    ) -> Result<Transfer, Error> {
        let t = NewTransfer {
            movement: request.movement(),
            pending: Some(timeout),
        };
        let result = self.place(self.strategy, t).await;
        observe("hold", &result.as_ref().map(|t| t.replayed));
        result
    }

    /// Posts a hold: `amount` (the whole hold when `None`; at most the hold) moves, the rest is
    /// released. [`Error::TransferNotPending`] if it was voided, expired or posted otherwise;
    /// the same post again answers the same transfer with `replayed`.
    pub async fn post(&self, id: &TransferId, amount: Option<Amount>) -> Result<Transfer, Error> {
        self.settle(Operation::Post, id, Settle::Post(amount)).await
    }

    /// Voids a hold: its amount is released. Idempotent like [`Ledger::post`].
    pub async fn void(&self, id: &TransferId) -> Result<Transfer, Error> {
        self.settle(Operation::Void, id, Settle::Void).await
    }

    /// The transfer with this id, whatever its status; [`Error::UnknownTransfer`] if none.
    pub async fn get_transfer(&self, id: &TransferId) -> Result<Transfer, Error> {
        let client = self.client().await?;
        let mut t = journal::find(&client, self.store.layout(), id)
            .await?
            .ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
        t.replayed = false;
        Ok(t)
    }

    /// Applies a linked group all or none: every account locked once, in id order, by one
    /// statement; the transfers placed in request order; the first refusal refuses the group
    /// ([`Error::GroupRefused`] names it). Idempotent by group id ([`Error::GroupConflict`] for
    /// another payload).
    pub async fn transfer_group(&self, request: &GroupRequest) -> Result<Group, Error> {
        let result = self.transfer_group_checked(request).await;
        observe("group", &result.as_ref().map(|g| g.replayed));
        result
    }

    async fn transfer_group_checked(&self, request: &GroupRequest) -> Result<Group, Error> {
        let len = request.transfers.len();
        if !(1..=MAX_GROUP_TRANSFERS).contains(&len) {
            return Err(In::GroupSize {
                len,
                max: MAX_GROUP_TRANSFERS,
            }
            .into());
        }
        let ts: Vec<NewTransfer<'_>> = request
            .transfers
            .iter()
            .map(|l| NewTransfer {
                movement: l.transfer.movement(),
                pending: l.pending,
            })
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for (index, t) in ts.iter().enumerate() {
            if !seen.insert(t.movement.id.as_str()) {
                return Err(In::GroupDuplicateTransfer(t.movement.id.to_string()).into());
            }
            validate(&t.movement).map_err(|e| Error::GroupRefused {
                group: request.id.clone(),
                index,
                transfer: t.movement.id.clone(),
                source: Box::new(e.into()),
            })?;
        }
        let group: &GroupId = &request.id;
        let ts = &ts;
        let layout = self.store.layout();
        let mut run = 1;
        loop {
            let result = in_idempotent_transaction(
                &self.store.pool,
                &self.store.tx,
                Operation::TransferGroup,
                GROUPS_KEY,
                |client| crate::tx_body!(client => holds::place_group(client, layout, group, ts)),
            )
            .await;
            match result {
                // A lone transfer took one of the ids meanwhile: the rerun names it.
                Err(e)
                    if e.may_be_unique_violation_of(transfers_key(layout))
                        && run < crate::store::retry::REPLAY_RACE_ATTEMPTS =>
                {
                    run += 1;
                }
                other => return other,
            }
        }
    }

    /// Expires due holds in bounded batches until none are due (or the rest are locked by
    /// someone else: the next round takes them); returns how many expired.
    pub async fn expire_due(&self) -> Result<u64, Error> {
        self.expire_due_with_batch(EXPIRE_BATCH).await
    }

    pub async fn expire_due_with_batch(&self, batch: i64) -> Result<u64, Error> {
        let batch = batch.clamp(1, EXPIRE_BATCH);
        // No retry: the next round picks up whatever this one did not finish.
        let options = crate::store::retry::TxOptions {
            retry: crate::store::retry::RetryPolicy::none(),
            ..self.store.tx.clone()
        };
        let mut total = 0u64;
        let layout = self.store.layout();
        for _ in 0..MAX_EXPIRE_BATCHES_PER_ROUND {
            let result = in_transaction(
                &self.store.pool,
                &options,
                Operation::ExpireHolds,
                |client| crate::tx_body!(client => holds::expire_batch(client, layout, batch)),
            )
            .await;
            match result {
                Ok(n) => {
                    total += n;
                    metrics::counter!(crate::telemetry::TRANSFERS, "kind" => "expire", "outcome" => "applied")
                        .increment(n);
                    if n < batch as u64 {
                        break;
                    }
                }
                Err(Error::RetriesExhausted { .. }) => break,
                Err(e) if e.is_retryable() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    /// The account's balance; [`Error::UnknownAccount`] if it was never opened.
    /// [`AccountId::SYSTEM`] may be read: its balance is minus everything ever put in.
    pub async fn account(&self, id: AccountId) -> Result<Account, Error> {
        let client = self.client().await?;
        journal::account(&client, id).await
    }

    /// The account's latest transfers, newest first; `limit` is clamped to 1..=[`MAX_LIST`].
    pub async fn transfers_of(&self, id: AccountId, limit: i64) -> Result<Vec<Transfer>, Error> {
        let client = self.client().await?;
        journal::account(&client, id).await?;
        journal::list(&client, self.store.layout(), id, limit.clamp(1, MAX_LIST)).await
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, Error> {
        checkout(&self.store.pool, Operation::LedgerRead).await
    }

    /// Post or void with the served strategy: one transaction, or through the engine.
    async fn settle(
        &self,
        operation: Operation,
        id: &TransferId,
        how: Settle,
    ) -> Result<Transfer, Error> {
        let result = match self.strategy {
            TransferStrategy::Ordered => settle_alone(&self.store, operation, id, how).await,
            TransferStrategy::Batched => self.engine.settle(id, how).await,
        };
        observe(operation.as_str(), &result.as_ref().map(|t| t.replayed));
        result
    }

    /// A new transfer (posted or held) with `strategy`: one transaction, or through the engine.
    async fn place(
        &self,
        strategy: TransferStrategy,
        t: NewTransfer<'_>,
    ) -> Result<Transfer, Error> {
        validate(&t.movement)?;
        match strategy {
            TransferStrategy::Ordered => place_alone(&self.store, t.operation(), t).await,
            TransferStrategy::Batched => self.engine.place(&t).await,
        }
    }

    /// A transfer, deposit or withdrawal, posted at once.
    async fn apply(
        &self,
        strategy: TransferStrategy,
        movement: Movement<'_>,
    ) -> Result<Transfer, Error> {
        let result = self.place(strategy, NewTransfer::posted(movement)).await;
        observe(movement.kind.as_str(), &result.as_ref().map(|t| t.replayed));
        result
    }
}

/// One new transfer (posted or held) as its own transaction, the `ordered` way: its accounts
/// locked in id order by one statement, decided by [`apply::place`], idempotent, retried.
/// Validated by the caller.
pub(crate) async fn place_alone(
    store: &Store,
    operation: Operation,
    t: NewTransfer<'_>,
) -> Result<Transfer, Error> {
    let layout = store.layout();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        operation,
        transfers_key(layout),
        |client| crate::tx_body!(client => holds::place_one(client, layout, t)),
    )
    .await
}

/// One post or void as its own transaction.
pub(crate) async fn settle_alone(
    store: &Store,
    operation: Operation,
    id: &TransferId,
    how: Settle,
) -> Result<Transfer, Error> {
    let layout = store.layout();
    in_transaction(
        &store.pool,
        &store.tx,
        operation,
        |client| crate::tx_body!(client => holds::settle_one(client, layout, id, how)),
    )
    .await
}

/// A movement through any [`MoveFunds`] (the lab's naive strategy), as its own transaction.
async fn apply_one(
    store: &Store,
    strategy: &dyn MoveFunds,
    operation: Operation,
    movement: Movement<'_>,
) -> Result<Transfer, Error> {
    validate(&movement)?;
    let layout = store.layout();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        operation,
        transfers_key(layout),
        |client| crate::tx_body!(client => apply_tx(client, layout, strategy, movement)),
    )
    .await
}

/// Input checks that need no database: distinct customer accounts, no reserved id.
fn validate(m: &Movement<'_>) -> Result<(), InputError> {
    if m.id.as_str().starts_with(OPENING_PREFIX) {
        return Err(InputError::TransferIdInvalid);
    }
    if m.from == m.to {
        return Err(InputError::SameAccount);
    }
    // Only the ledger names the system account, and only on the side its kind says.
    let system_ok = match m.kind {
        TransferKind::Deposit | TransferKind::Opening => m.from == AccountId::SYSTEM,
        TransferKind::Withdrawal => m.to == AccountId::SYSTEM,
        TransferKind::Transfer => false,
    };
    for side in [m.from, m.to] {
        if side == AccountId::SYSTEM && !system_ok {
            return Err(InputError::AccountIdNotPositive(side.get()));
        }
    }
    Ok(())
}

async fn apply_tx(
    client: &deadpool_postgres::Client,
    layout: Layout,
    strategy: &dyn MoveFunds,
    m: Movement<'_>,
) -> Result<Transfer, Error> {
    if let Some(existing) = journal::find(client, layout, m.id).await? {
        let t = NewTransfer {
            movement: m,
            pending: None,
        };
        return journal::replay(existing, &t);
    }
    strategy.move_funds(client, layout, &m).await?;
    journal::insert(client, layout, &m).await
}

#[async_trait::async_trait]
impl MoveFunds for TransferStrategy {
    async fn move_funds(
        &self,
        client: &deadpool_postgres::Client,
        layout: Layout,
        m: &Movement<'_>,
    ) -> Result<(), Error> {
        match self {
            // A batch of one is an `ordered` transaction.
            TransferStrategy::Ordered | TransferStrategy::Batched => {
                ordered::move_funds(client, layout, m).await
            }
        }
    }
}

/// Counts a ledger outcome by kind (bounded labels: kinds and outcome names only).
fn observe(kind: &'static str, result: &Result<bool, &Error>) {
    let outcome = match result {
        Ok(true) => "replayed",
        Ok(false) => "applied",
        Err(Error::InsufficientFunds { .. }) => "insufficient_funds",
        Err(Error::MaxBalanceExceeded { .. }) => "max_balance",
        Err(Error::TransferNotPending { .. }) => "not_pending",
        Err(Error::UnknownTransfer(_)) => "unknown_transfer",
        Err(Error::GroupRefused { .. }) => "group_refused",
        Err(Error::GroupConflict(_)) => "conflict",
        Err(Error::PostExceedsHold { .. }) => "invalid",
        Err(Error::UnknownAccount(_)) => "unknown_account",
        Err(Error::AccountExists(_)) => "account_exists",
        Err(Error::TransferConflict(_)) => "conflict",
        Err(Error::BalanceOutOfRange { .. }) => "out_of_range",
        Err(Error::Input(_)) => "invalid",
        Err(_) => "error",
    };
    metrics::counter!(crate::telemetry::TRANSFERS, "kind" => kind, "outcome" => outcome)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn movement(
        id: &TransferId,
        from: AccountId,
        to: AccountId,
        kind: TransferKind,
    ) -> Movement<'_> {
        Movement {
            id,
            from,
            to,
            amount: Amount::new(1).expect("amount"),
            kind,
        }
    }

    #[test]
    fn validation_refuses_same_account_system_and_reserved_ids() {
        let id = TransferId::new("t1").expect("id");
        let a = AccountId::new(1).expect("id");
        let b = AccountId::new(2).expect("id");
        let sys = AccountId::SYSTEM;
        assert_eq!(
            validate(&movement(&id, a, b, TransferKind::Transfer)),
            Ok(())
        );
        assert_eq!(
            validate(&movement(&id, a, a, TransferKind::Transfer)),
            Err(InputError::SameAccount)
        );
        assert_eq!(
            validate(&movement(&id, sys, a, TransferKind::Transfer)),
            Err(InputError::AccountIdNotPositive(0))
        );
        assert_eq!(
            validate(&movement(&id, sys, a, TransferKind::Deposit)),
            Ok(())
        );
        assert_eq!(
            validate(&movement(&id, a, sys, TransferKind::Deposit)),
            Err(InputError::AccountIdNotPositive(0))
        );
        assert_eq!(
            validate(&movement(&id, a, sys, TransferKind::Withdrawal)),
            Ok(())
        );
        let reserved = TransferId::new("opening:1").expect("id");
        assert_eq!(
            validate(&movement(&reserved, a, b, TransferKind::Transfer)),
            Err(InputError::TransferIdInvalid)
        );
    }

    #[test]
    fn names_round_trip() {
        for s in TransferStrategy::ALL {
            assert_eq!(TransferStrategy::parse(s.as_str()), Some(*s));
        }
        for k in ["transfer", "opening", "deposit", "withdrawal"] {
            assert_eq!(TransferKind::parse(k).map(TransferKind::as_str), Some(k));
        }
    }
}
