//! The ledger: accounts and money moving between them by double entry, posted at once or held
//! first.
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
//!   group_position)`: `status` ∈ pending | posted | voided | expired, moved only as
//!   [`transitions`] says. A one-shot transfer is `posted` at once (posted_amount NULL = the
//!   whole amount); a hold is `pending` until ONE of post (whole or partial), void or expiry
//!   settles it. Its deadline is exact: past `expires_at`, a post or void expires it there and
//!   then and is refused, whether or not the sweeper has run.
//! - `transfer_groups(id, size)`: a linked group, applied all or none, idempotent by its id.
//! - `account_repairs` (migration V10): the trace of every repair of an account's counters.
//! - `transfers.reverses`, `transfers.reversed`, `transfers.reversals` (migration V15): a
//!   reversal is a transfer of kind `reversal` that names the posted transfer it moves back
//!   (all or part, from its destination to its source); the original counts what its
//!   reversals moved (`reversed`, never more than it posted: a CHECK) and how many they were.
//! - `accounts.currency`, `accounts.scale`, `transfers.currency` (migration V12): what an
//!   account is denominated in, fixed when it is opened (NULL for the system account, the
//!   other side in every currency), and the currency each journal row moved. Money moves only
//!   between accounts of one denomination ([`currency`], decided by [`apply`]).
//! - `reference`, `metadata` on `accounts`, `transfers` and `transfer_groups` (migration V13):
//!   the caller's own id and tags, written with the row and never changed; V14 indexes the
//!   journal for the transfer search (`crate::listing::ledger`).
//! - `entries` and `accounts.entry_seq` (migration V20): one entry per account per change of
//!   its counters, written with them ([`entries`]); an account's statement and its balance at a
//!   time are `crate::listing::entries`.
//!
//! `held` and `pending_credits` are columns of the account row, changed in the same
//! transaction as the transfer row whose status they follow (never recomputed on the hot path);
//! the audit ([`crate::audit::audit_ledger`]) checks them against the live pending transfers,
//! and [`repair`] brings an account that drifted back to its journal.
//!
//! # Locks and the single winner
//!
//! Lock order: account rows in ascending id, taken once each by ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE` before any decision, for a transfer, a
//! hold, a settle and a whole group alike (id-ordered locking); a transfer row is written only
//! after the locks of its accounts are held. No two ledger transactions can wait on each other
//! in a cycle. Post, void and expiry of one hold all lock its two accounts first, so they run
//! one after the other; each then moves the row with `UPDATE … WHERE id = $1 AND status =
//! 'pending'`, and whoever comes later reads the state the winner reached
//! ([`Error::TransferNotPending`], or the same answer again for the very post or void that
//! won).
//!
//! # Layers
//!
//! Each importing only the ones below it:
//!
//! - [`types`]: the vocabulary, and [`currency`]: currencies and scales, both leaves;
//! - `sql`: every statement, pairs where Citus needs its own form;
//! - `rows`: data access through the store's dialect (the only place that asks the layout);
//! - [`transitions`] and [`apply`]: pure decisions: the transfer state machine, and ONE
//!   operation applied to already-locked rows in memory (limits, overflow, new balances);
//! - `flows`: each operation as one transaction (lock, read, decide, write once), and
//!   [`repair`];
//! - [`batched`]: the group-commit engine, every operation of a batch decided by `apply` on one
//!   set of locks;
//! - [`Ledger`]: the façade the service, the lab and the bench hold.
//!
//! The race lab (`saldo-lab`) brings a naive strategy that updates in arrival order and
//! deadlocks, through [`MoveFunds`] and [`Ledger::transfer_with`], to show what the ordered
//! strategy prevents; the service never offers it.

pub mod apply;
pub mod batched;
pub mod currency;
pub mod entries;
mod flows;
mod ordered;
pub(crate) mod rows;
pub(crate) mod sql;
pub mod transitions;
pub mod types;

pub use apply::{NewTransfer, OPENING_PREFIX};
pub use currency::{Currency, Denomination, Scale};
pub use flows::expire::{EXPIRE_BATCH, MAX_EXPIRE_BATCHES_PER_ROUND};
pub use flows::repair;
pub use transitions::Settle;
pub use types::{
    Account, AccountRequest, Counters, Group, GroupRequest, LinkedTransfer, MoveFunds, Movement,
    ReversalRequest, Transfer, TransferKind, TransferRequest, TransferStrategy,
    MAX_LISTED_REVERSALS,
};

use crate::batch::config::BatchedConfig;
use crate::domain::{
    AccountId, Amount, BalanceLimits, InputError as In, Tags, TransferId, TransferTimeout,
    MAX_AMOUNT,
};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::checkout;
use batched::BatchedLedger;
use flows::{expire, group, open, place, reverse, settle};
use rows::{accounts, journal, reversals, settles};

/// Most transfers one [`Ledger::transfers_of`] call returns.
pub const MAX_LIST: i64 = 1_000;

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
    /// The account is in [`Denomination::DEFAULT`] (EUR, scale 2).
    pub async fn open_account_with_limits(
        &self,
        id: AccountId,
        opening_balance: i64,
        limits: BalanceLimits,
    ) -> Result<Account, Error> {
        self.open_account_in(id, opening_balance, limits, Denomination::DEFAULT)
            .await
    }

    /// [`Ledger::open_account_with_limits`] in `denomination`: its currency and scale, fixed
    /// for good (money moves only between accounts of one denomination).
    pub async fn open_account_in(
        &self,
        id: AccountId,
        opening_balance: i64,
        limits: BalanceLimits,
        denomination: Denomination,
    ) -> Result<Account, Error> {
        self.open(&AccountRequest {
            id,
            opening_balance,
            limits,
            denomination,
            tags: Tags::NONE,
        })
        .await
    }

    /// Opens an account as `request` says: [`Ledger::open_account_in`] with the caller's
    /// reference and metadata, stored with the account and answered by every read of it. Not
    /// idempotent (an account opens once): [`Error::AccountExists`] if the id is taken, whatever
    /// the tags.
    pub async fn open(&self, request: &AccountRequest) -> Result<Account, Error> {
        let AccountRequest {
            id,
            opening_balance,
            limits,
            denomination,
            ref tags,
        } = *request;
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
        let opening = open::Opening {
            id,
            balance: opening_balance,
            limits,
            denomination,
            transfer: &opening_id,
            tags,
        };
        let result = open::open(&self.store, &opening).await;
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
        let t = NewTransfer {
            movement: request.movement(),
            pending: None,
            tags: &request.tags,
            reverses: None,
        };
        let result = self.place(strategy, t).await;
        observe("transfer", &result.as_ref().map(|t| t.replayed));
        result
    }

    /// [`Ledger::transfer`] with any [`MoveFunds`]: for the race lab's naive strategy. The
    /// validation, idempotency, journal row and retry are the ledger's, as for every transfer.
    pub async fn transfer_with(
        &self,
        strategy: &dyn MoveFunds,
        request: &TransferRequest,
    ) -> Result<Transfer, Error> {
        let movement = request.movement();
        let t = NewTransfer {
            movement,
            pending: None,
            tags: &request.tags,
            reverses: None,
        };
        let result = match apply::validate(&movement) {
            Ok(()) => place::move_alone(&self.store, strategy, Operation::Transfer, t).await,
            Err(e) => Err(e.into()),
        };
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
            tags: &request.tags,
            reverses: None,
        };
        let result = self.place(self.strategy, t).await;
        observe("hold", &result.as_ref().map(|t| t.replayed));
        result
    }

    /// Posts a hold: `amount` (the whole hold when `None`; at most the hold) moves, the rest is
    /// released. [`Error::TransferNotPending`] if it was voided, expired or posted otherwise,
    /// or is past its deadline (then it is expired now, and the refusal says `expired`); the
    /// same post again answers the same transfer with `replayed`.
    pub async fn post(&self, id: &TransferId, amount: Option<Amount>) -> Result<Transfer, Error> {
        self.settle(Operation::Post, id, Settle::Post(amount)).await
    }

    /// Voids a hold: its amount is released. Idempotent and exact about the deadline like
    /// [`Ledger::post`].
    pub async fn void(&self, id: &TransferId) -> Result<Transfer, Error> {
        self.settle(Operation::Void, id, Settle::Void).await
    }

    /// Reverses a posted transfer, all or part: `request.amount` of it (all that is left when
    /// `None`: posted minus what reversals moved back already) moves back from its destination
    /// to its source as transfer `request.id` of kind `reversal`, naming it. Never more in
    /// total than it posted: every reversal of one transfer locks its two accounts first and
    /// counts itself on the original's row in the same transaction (a CHECK stands behind).
    /// The reversing account needs the money as for any transfer ([`Error::InsufficientFunds`],
    /// after its due holds are expired). Refused, with nothing written: an unknown original
    /// ([`Error::UnknownTransfer`]); a hold still pending, voided or expired
    /// ([`Error::TransferNotPosted`], naming the state as a read says it); more than is left
    /// ([`Error::ReversalExceedsPosted`]). Idempotent by its id: the same request again answers
    /// the reversal as it was (`replayed`; without an amount it matches whatever the first one
    /// came to), another one under that id is [`Error::TransferConflict`]. Both strategies run
    /// it as one transaction in the ledger's lock order (`flows::reverse`).
    pub async fn reverse(&self, request: &ReversalRequest) -> Result<Transfer, Error> {
        let result = if request.id.as_str().starts_with(OPENING_PREFIX) {
            Err(InputError::TransferIdInvalid.into())
        } else {
            expire::reclaiming(&self.store, || reverse::reverse_alone(&self.store, request)).await
        };
        observe("reverse", &result.as_ref().map(|t| t.replayed));
        result
    }

    /// The transfer with this id, whatever its status; [`Error::UnknownTransfer`] if none. A
    /// hold past its deadline reads `expired` whether or not the sweeper has run
    /// ([`transitions::as_read`]). A transfer that was reversed lists its reversals' ids,
    /// oldest first (at most [`MAX_LISTED_REVERSALS`]).
    pub async fn get_transfer(&self, id: &TransferId) -> Result<Transfer, Error> {
        let client = self.client().await?;
        let tx = Tx::new(&client, self.store.dialect());
        // Pipelined: the clock costs no round trip of its own.
        let (found, now) = futures::try_join!(journal::find(&tx, id), settles::now(&tx))?;
        let mut found = found.ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
        if found.reversed_amount > 0 {
            found.reversals = reversals::of(&tx, id, found.to, MAX_LISTED_REVERSALS).await?;
        }
        Ok(transitions::as_read(found, now))
    }

    /// Applies a linked group all or none: every account locked once, in id order, by one
    /// statement; the transfers placed in request order; the first refusal refuses the group
    /// ([`Error::GroupRefused`] names it). Idempotent by group id ([`Error::GroupConflict`] for
    /// another payload).
    pub async fn transfer_group(&self, request: &GroupRequest) -> Result<Group, Error> {
        let result =
            expire::reclaiming(&self.store, || group::transfer_group(&self.store, request)).await;
        observe("group", &result.as_ref().map(|g| g.replayed));
        result
    }

    /// Expires due holds in bounded batches until none are due (or the rest are locked by
    /// someone else: the next round takes them); returns how many expired.
    pub async fn expire_due(&self) -> Result<u64, Error> {
        self.expire_due_with_batch(EXPIRE_BATCH).await
    }

    pub async fn expire_due_with_batch(&self, batch: i64) -> Result<u64, Error> {
        expire::expire_due(&self.store, batch).await
    }

    /// The account's balance; [`Error::UnknownAccount`] if it was never opened.
    /// [`AccountId::SYSTEM`] may be read: its balance is minus everything ever put in.
    pub async fn account(&self, id: AccountId) -> Result<Account, Error> {
        let client = self.client().await?;
        accounts::read(&Tx::new(&client, self.store.dialect()), id).await
    }

    /// The account's latest transfers, newest first; `limit` is clamped to 1..=[`MAX_LIST`].
    pub async fn transfers_of(&self, id: AccountId, limit: i64) -> Result<Vec<Transfer>, Error> {
        let client = self.client().await?;
        let tx = Tx::new(&client, self.store.dialect());
        // Pipelined: the account's existence (404 otherwise), its list and the clock.
        let (_, listed, now) = futures::try_join!(
            accounts::read(&tx, id),
            journal::list(&tx, id, limit.clamp(1, MAX_LIST)),
            settles::now(&tx)
        )?;
        Ok(listed
            .into_iter()
            .map(|t| transitions::as_read(t, now))
            .collect())
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
            TransferStrategy::Ordered => {
                settle::settle_alone(&self.store, operation, id, how).await
            }
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
        apply::validate(&t.movement)?;
        // A hold past its deadline frees its money before the refusal is the answer.
        expire::reclaiming(&self.store, || async {
            match strategy {
                TransferStrategy::Ordered => {
                    place::place_alone(&self.store, t.operation(), t).await
                }
                TransferStrategy::Batched => self.engine.place(&t).await,
            }
        })
        .await
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

/// Counts a ledger outcome by kind (bounded labels: kinds and outcome names only).
fn observe(kind: &'static str, result: &Result<bool, &Error>) {
    let outcome = match result {
        Ok(true) => "replayed",
        Ok(false) => "applied",
        Err(Error::InsufficientFunds { .. }) => "insufficient_funds",
        Err(Error::MaxBalanceExceeded { .. }) => "max_balance",
        Err(Error::TransferNotPending { .. }) => "not_pending",
        Err(Error::TransferNotPosted { .. }) => "not_posted",
        Err(Error::ReversalExceedsPosted { .. }) => "exceeds_posted",
        Err(Error::UnknownTransfer(_)) => "unknown_transfer",
        Err(Error::GroupRefused { .. }) => "group_refused",
        Err(Error::GroupConflict(_)) => "conflict",
        Err(Error::PostExceedsHold { .. }) => "invalid",
        Err(Error::UnknownAccount(_)) => "unknown_account",
        Err(Error::AccountExists(_)) => "account_exists",
        Err(Error::TransferConflict(_)) => "conflict",
        Err(Error::BalanceOutOfRange { .. }) => "out_of_range",
        Err(Error::CurrencyMismatch { .. }) => "currency_mismatch",
        Err(Error::Input(_)) => "invalid",
        Err(_) => "error",
    };
    metrics::counter!(crate::telemetry::TRANSFERS, "kind" => kind, "outcome" => outcome)
        .increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in TransferStrategy::ALL {
            assert_eq!(TransferStrategy::parse(s.as_str()), Some(*s));
        }
        for k in ["transfer", "opening", "deposit", "withdrawal", "reversal"] {
            assert_eq!(TransferKind::parse(k).map(TransferKind::as_str), Some(k));
        }
    }
}
