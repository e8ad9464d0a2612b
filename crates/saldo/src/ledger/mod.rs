//! The ledger (seed 002): accounts and money moving between them by double entry.
//!
//! Every movement is a row of the `transfers` journal between two accounts, and the system
//! account 0 is the other side of every opening balance, deposit and withdrawal, so the sum of
//! all balances (the system account included) is always zero. A transfer is idempotent by the
//! client's id: the same id and payload answer the original result, another payload conflicts.
//!
//! Lock order: account rows in ascending id, taken by ONE `SELECT … ORDER BY id FOR UPDATE`
//! before any decision ([`TransferStrategy::Ordered`]); no two transfers can wait on each other
//! in a cycle. The race lab (`saldo-lab`) brings a naive strategy that updates in arrival order
//! and deadlocks, through [`MoveFunds`] and [`Ledger::transfer_with`], to show what the ordered
//! strategy prevents; the service never offers it.

pub mod batched;
mod journal;
mod ordered;
pub mod types;

pub use types::{
    Account, MoveFunds, Movement, Transfer, TransferKind, TransferRequest, TransferStrategy,
};

use crate::domain::{AccountId, Amount, TransferId, MAX_AMOUNT};
use crate::error::{Error, InputError};
use crate::retry::{checkout, in_idempotent_transaction, in_transaction};
use crate::stock::batched::BatchedConfig;
use crate::stock::Store;
use batched::BatchedLedger;

/// Most transfers one [`Ledger::transfers_of`] call returns.
pub const MAX_LIST: i64 = 1_000;
/// The opening balance of account N is journalled as transfer `opening:N`; client transfer ids
/// may not start with this prefix, so they can never collide with it.
pub const OPENING_PREFIX: &str = "opening:";
/// A unique violation on the journal's key means a concurrent copy of the same transfer
/// committed first; rerunning finds it and answers as a replay ([`in_idempotent_transaction`]).
const TRANSFERS_KEY: &str = "transfers_pkey";

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
    /// account and journalled as transfer `opening:<id>`. [`Error::AccountExists`] if it exists.
    pub async fn open_account(
        &self,
        id: AccountId,
        opening_balance: i64,
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
        let opening_id = TransferId::new(format!("{OPENING_PREFIX}{id}"))?;
        let result = in_transaction(&self.store.pool, &self.store.tx, "open_account", |client| {
            let opening_id = &opening_id;
            crate::tx_body!(client => journal::open(client, id, opening_balance, opening_id))
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
        let movement = Movement {
            id: &request.id,
            from: request.from,
            to: request.to,
            amount: request.amount,
            kind: TransferKind::Transfer,
        };
        self.apply(strategy, movement).await
    }

    /// [`Ledger::transfer`] with any [`MoveFunds`]: for the race lab's naive strategy. The
    /// validation, idempotency, journal row and retry are the ledger's, as for every transfer.
    pub async fn transfer_with(
        &self,
        strategy: &dyn MoveFunds,
        request: &TransferRequest,
    ) -> Result<Transfer, Error> {
        let movement = Movement {
            id: &request.id,
            from: request.from,
            to: request.to,
            amount: request.amount,
            kind: TransferKind::Transfer,
        };
        let result = self.apply_with(strategy, "transfer", movement).await;
        observe(movement.kind.as_str(), &result.as_ref().map(|t| t.replayed));
        result
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
        journal::list(&client, id, limit.clamp(1, MAX_LIST)).await
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, Error> {
        checkout(&self.store.pool, "ledger_read").await
    }

    /// A served strategy's movement: `ordered` in its own transaction, `batched` through the
    /// engine.
    async fn apply(
        &self,
        strategy: TransferStrategy,
        movement: Movement<'_>,
    ) -> Result<Transfer, Error> {
        let result = match strategy {
            TransferStrategy::Ordered => apply_ordered(&self.store, &movement).await,
            TransferStrategy::Batched => match validate(&movement) {
                Ok(()) => self.engine.apply(&movement).await,
                Err(e) => Err(e.into()),
            },
        };
        observe(movement.kind.as_str(), &result.as_ref().map(|t| t.replayed));
        result
    }

    async fn apply_with(
        &self,
        strategy: &dyn MoveFunds,
        operation: &'static str,
        movement: Movement<'_>,
    ) -> Result<Transfer, Error> {
        apply_one(&self.store, strategy, operation, movement).await
    }
}

/// One movement as one `ordered` transaction: validated, idempotent, retried.
pub(crate) async fn apply_ordered(
    store: &Store,
    movement: &Movement<'_>,
) -> Result<Transfer, Error> {
    let operation = movement.kind.as_str();
    apply_one(store, &TransferStrategy::Ordered, operation, *movement).await
}

async fn apply_one(
    store: &Store,
    strategy: &dyn MoveFunds,
    operation: &'static str,
    movement: Movement<'_>,
) -> Result<Transfer, Error> {
    validate(&movement)?;
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        operation,
        TRANSFERS_KEY,
        |client| crate::tx_body!(client => apply_tx(client, strategy, movement)),
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
    strategy: &dyn MoveFunds,
    m: Movement<'_>,
) -> Result<Transfer, Error> {
    if let Some(existing) = journal::find(client, m.id).await? {
        return journal::replay(existing, &m);
    }
    strategy.move_funds(client, &m).await?;
    journal::insert(client, &m).await
}

#[async_trait::async_trait]
impl MoveFunds for TransferStrategy {
    async fn move_funds(
        &self,
        client: &deadpool_postgres::Client,
        m: &Movement<'_>,
    ) -> Result<(), Error> {
        match self {
            // A batch of one is an `ordered` transaction.
            TransferStrategy::Ordered | TransferStrategy::Batched => {
                ordered::move_funds(client, m).await
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
