//! The library's typed errors: what a caller can cause ([`InputError`] and the business
//! refusals), and what the database did ([`Error::Database`] with its SQLSTATE).

use tokio_postgres::error::SqlState;

// `InputError` lives with the newtypes that raise it, so `domain` imports nothing from here
// and the dependency points one way: error → domain.
pub use crate::domain::InputError;
use crate::domain::{
    AccountId, GroupId, LocationId, MoveId, OrderId, ProductId, ReservationStatus, ReturnId,
    SaleId, StockState, TransferId, TransferStatus,
};
use crate::ledger::currency::{Currency, Scale};
use crate::operation::Operation;

/// Everything a library operation can return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid input: {0}")]
    Input(#[from] InputError),
    #[error("unknown product {0}")]
    UnknownProduct(ProductId),
    #[error(
        "insufficient stock for product {product_id}: requested {requested}, available {available}"
    )]
    InsufficientStock {
        product_id: ProductId,
        requested: i32,
        available: i32,
    },
    #[error("order {0} was already reserved with different items")]
    IdempotencyConflict(OrderId),
    #[error("unknown order {0}")]
    UnknownOrder(OrderId),
    /// A re-reserve found nothing expired or released to take again.
    #[error("order {0} has nothing expired or released to re-reserve")]
    NothingToRereserve(OrderId),
    /// A re-reserve named a product the order does not hold, or one it still holds live.
    #[error("product {product_id} of order {order_id} cannot be re-reserved: it is {why}")]
    NotRereservable {
        order_id: OrderId,
        product_id: ProductId,
        why: &'static str,
    },
    /// A reservation or sale named a location the product is not stocked at.
    #[error("product {product_id} is not stocked at location {location_id}")]
    UnknownLocation {
        product_id: ProductId,
        location_id: LocationId,
    },
    /// No location has this id.
    #[error("unknown location {0}")]
    NoSuchLocation(LocationId),
    /// The location was retired: it takes no count, priority or stock any more.
    #[error("location {0} is retired")]
    LocationRetired(LocationId),
    /// A location is retired only once it holds nothing: this is what it still holds.
    #[error(
        "location {location_id} still holds {available} available, {reserved} reserved and {in_states} non-sellable units"
    )]
    LocationNotEmpty {
        location_id: LocationId,
        available: i64,
        reserved: i64,
        /// Units in the non-sellable states (damaged, safety stock, incoming) at it.
        in_states: i64,
    },
    /// The product is stocked per location: its total is the sum of its locations, so it is
    /// counted per location (not as a whole) and adjusted by counting a location.
    #[error("product {0} is stocked per location: count one of its locations instead")]
    StockedByLocation(ProductId),
    /// The product is a bundle: it holds no units of its own (its stock is its components'),
    /// so it takes no count, move, location or backorder policy, and is no component of
    /// another bundle.
    #[error("product {0} is a bundle: its stock is its components'")]
    ProductIsBundle(ProductId),
    /// A product is declared a bundle only while it holds nothing (in any state, reserved or
    /// backordered) and is neither stocked per location nor takes backorders.
    #[error("product {0} holds stock, is stocked per location or takes backorders: it cannot become a bundle")]
    BundleHoldsStock(ProductId),
    /// A bundle is never a component: this product is one of `bundle_id`'s.
    #[error(
        "product {product_id} is a component of bundle {bundle_id}: a bundle is never a component"
    )]
    ComponentOfBundle {
        product_id: ProductId,
        bundle_id: ProductId,
    },
    /// The product is not a bundle.
    #[error("product {0} is not a bundle")]
    NotABundle(ProductId),
    /// The sale id was used before with other items.
    #[error("sale {0} was already made with different items")]
    SaleConflict(SaleId),
    /// An extension found the order's hold already lapsed (expired, or past its expiry and not
    /// yet swept): the sweeper won; re-reserve to take the units again.
    #[error("the reservation of product {product_id} in order {order_id} has already expired")]
    ReservationExpired {
        order_id: OrderId,
        product_id: ProductId,
    },
    /// A release found no line of the order to release: a sold (confirmed) line cannot be given
    /// back by a release, and an expired one holds nothing any more. Names the first such line
    /// and its status.
    #[error("order {order_id} cannot be released: product {product_id} is {status}")]
    NotReleasable {
        order_id: OrderId,
        product_id: ProductId,
        status: ReservationStatus,
    },
    /// A partial confirm or release, or a return, named a product the order has no line of.
    #[error("order {order_id} has no line of product {product_id}")]
    NotInOrder {
        order_id: OrderId,
        product_id: ProductId,
    },
    /// The return id was used before with another order, items or reason.
    #[error("return {0} was already made with a different payload")]
    ReturnConflict(ReturnId),
    /// A return would bring back more of a line than was confirmed (sold and on its way):
    /// `confirmed` units of the line left the shelf, `returned` of them came back already.
    #[error("cannot return {requested} of product {product_id} in order {order_id}: {confirmed} confirmed, {returned} returned already")]
    ReturnExceedsConfirmed {
        order_id: OrderId,
        product_id: ProductId,
        confirmed: i64,
        returned: i64,
        requested: i64,
    },
    /// The move id was used before (for this product) with another quantity, places or reason.
    #[error("move {0} was already made with a different payload")]
    MoveConflict(MoveId),
    /// A move would take more units than its source holds (in that state, at that location):
    /// nothing moved. Reserved units are not a source: only `available` and the states are.
    #[error("cannot move {requested} units of product {product_id} out of {state}{at}: it holds {held}", at = location_id.as_ref().map(|l| format!(" at {l}")).unwrap_or_default(), state = state.as_str())]
    MoveShort {
        product_id: ProductId,
        state: StockState,
        location_id: Option<LocationId>,
        held: i32,
        requested: i32,
    },
    /// An extension found nothing active to extend (everything confirmed or released).
    #[error("order {0} holds nothing active to extend (confirmed or released)")]
    NothingToExtend(OrderId),
    /// An extension would hold a reservation past the maximum lifetime since it was made.
    #[error("extending order {order_id} would hold product {product_id} past the maximum hold of {max_hold_s}s since it was reserved")]
    HoldLimitExceeded {
        order_id: OrderId,
        product_id: ProductId,
        max_hold_s: u64,
    },
    /// Another transaction held the product's stock row past the lock timeout: nothing was
    /// applied. (The batched engine names the product; a single transaction answers with the
    /// database's lock-timeout error, which says the same.)
    #[error("product {0} stayed locked by another transaction past the lock timeout; nothing was applied")]
    ProductLocked(ProductId),
    /// The operation's deadline passed before it could be applied: nothing was applied, and the
    /// same request may be sent again.
    #[error("the deadline passed before {operation} was applied; nothing was applied")]
    DeadlineExceeded { operation: Operation },
    /// A feed cursor from before what retention pruned: events after it are gone. Resynchronise
    /// from the list endpoints, then follow the feed from its end.
    #[error("cursor {cursor} is older than the events kept; resynchronise from the lists")]
    CursorExpired { cursor: String },
    /// No webhook subscription has this id.
    #[error("unknown webhook {0}")]
    UnknownWebhook(uuid::Uuid),
    /// The subscription limit is reached: delete one first.
    #[error("at most {max} webhook subscriptions may exist")]
    TooManyWebhooks { max: usize },
    /// A webhook target this service may not send to (a loopback, private, link-local or
    /// unspecified address, or a name that does not resolve); the reason says which.
    #[error("webhook target refused: {0}")]
    WebhookTargetRefused(String),
    /// This service's webhook key is not the one the database's other services sign with:
    /// copy their `webhook.key` beside this service's token files and restart it.
    #[error(
        "this service's webhook key differs from the one recorded in the database: copy the \
         other services' webhook.key beside this service's token files and restart it"
    )]
    WebhookKeyMismatch,
    /// The COMMIT was sent but its answer was lost (deadline or connection): the operation may
    /// or may not have been applied. Replaying the same request (same order or transfer id)
    /// tells which, and never applies it twice.
    #[error("the outcome of {operation} is unknown: its commit was in flight when {cause}; replay the same request to learn it")]
    OutcomeUnknown { operation: Operation, cause: String },
    #[error("count {count} is below the {reserved} units reserved for product {product_id}")]
    CountBelowReserved {
        product_id: ProductId,
        count: i32,
        reserved: i32,
    },
    #[error(
        "adjustment of {delta} would make product {product_id} negative (available {available})"
    )]
    AdjustmentWouldGoNegative {
        product_id: ProductId,
        delta: i32,
        available: i32,
    },
    /// A restock that would take on-hand (available + reserved) past [`MAX_STOCK_COUNT`]: a
    /// conflict with the row's current state (the same delta fits a smaller stock), not bad
    /// input.
    ///
    /// [`MAX_STOCK_COUNT`]: crate::domain::MAX_STOCK_COUNT
    #[error(
        "adjustment of {delta} would take product {product_id} to {on_hand_after} units on hand, above the limit of {max}"
    )]
    StockWouldExceedLimit {
        product_id: ProductId,
        delta: i32,
        on_hand_after: i64,
        max: i32,
    },
    /// Lowering a product's `backorder_limit` below the units it has backordered now: nothing
    /// was written (the backorders stay; lower it once they are filled or dropped).
    #[error("backorder_limit {limit} of product {product_id} is below the {backordered} units backordered now")]
    BackorderLimitBelowBackordered {
        product_id: ProductId,
        limit: i32,
        backordered: i32,
    },
    /// The operation is not supported on a Citus database (yet): refused before anything is
    /// read or written. Names the operation.
    #[error("{0} is not supported on a Citus database; nothing was written")]
    UnsupportedOnCitus(&'static str),
    /// Optimistic strategy: the version kept changing under us until attempts ran out.
    /// Distinct from insufficient stock: the units may still be there.
    #[error("version conflict on product {product_id} after {attempts} attempts")]
    VersionConflict {
        product_id: ProductId,
        attempts: u32,
    },
    /// A bounded queue is full: try again later. Never unbounded memory.
    #[error("overloaded: {0}")]
    Overloaded(String),
    #[error("unknown account {0}")]
    UnknownAccount(AccountId),
    /// The account has no entry at or before that time: it was opened later (or, for an
    /// account older than migration V20, its history starts at V20's time).
    #[error(
        "account {account} has no entry at or before {}: it was opened later",
        .at.to_rfc3339()
    )]
    NoBalanceAt {
        account: AccountId,
        at: chrono::DateTime<chrono::Utc>,
    },
    #[error("account {0} already exists")]
    AccountExists(AccountId),
    /// The debit (posted or held) would take `balance - held` below the account's
    /// `min_balance` (0 unless it has a credit line).
    #[error("insufficient funds in account {account}: requested {requested}, balance {balance}, held {held}, min_balance {min_balance}")]
    InsufficientFunds {
        account: AccountId,
        requested: i64,
        balance: i64,
        held: i64,
        min_balance: i64,
    },
    /// The credit (posted or pending) would take `balance + pending_credits` above the account's
    /// `max_balance`.
    #[error("account {account} would exceed its max_balance {max_balance}: requested {requested}, balance {balance}, pending_credits {pending_credits}")]
    MaxBalanceExceeded {
        account: AccountId,
        requested: i64,
        balance: i64,
        pending_credits: i64,
        max_balance: i64,
    },
    /// The movement would take a balance outside what a 64-bit integer holds (the system account
    /// below `i64::MIN` after ~9.2 million maximal deposits, or an account above `i64::MAX`).
    /// Decided on the locked balances before anything is written.
    #[error("the movement would take the balance of account {account} out of range")]
    BalanceOutOfRange { account: AccountId },
    /// A transfer, hold, post or group leg between accounts of two currencies: money moves
    /// only within one currency (an exchange is a group with one leg per currency). Decided on
    /// the locked rows; nothing was written.
    #[error("account {from} is in {from_currency} (scale {from_scale}) and account {to} in {to_currency} (scale {to_scale}): money moves only within one currency")]
    CurrencyMismatch {
        from: AccountId,
        to: AccountId,
        from_currency: Currency,
        to_currency: Currency,
        from_scale: Scale,
        to_scale: Scale,
    },
    #[error("transfer {0} was already made with a different payload")]
    TransferConflict(TransferId),
    #[error("unknown transfer {0}")]
    UnknownTransfer(TransferId),
    /// A post, void or expiry found the transfer already settled another way (or never
    /// pending): `status` is the state it reached, `posted_amount` what moved if it was posted.
    #[error("transfer {id} is not pending: it is {status}")]
    TransferNotPending {
        id: TransferId,
        status: TransferStatus,
        posted_amount: Option<i64>,
    },
    /// A post asked for more than the hold holds.
    #[error("cannot post {requested} of transfer {id}: it holds {held}")]
    PostExceedsHold {
        id: TransferId,
        requested: i64,
        held: i64,
    },
    /// A reversal found its original not posted: a hold still pending (or past its deadline:
    /// `expired`), voided or expired. `status` is the state it is in, as a read says it.
    #[error("transfer {id} is not posted: it is {status}; only posted money can be reversed")]
    TransferNotPosted {
        id: TransferId,
        status: TransferStatus,
    },
    /// A reversal asked for more than is left of the original (`posted` minus what was
    /// `reversed` already); `requested` is `None` when it asked for the rest and nothing is
    /// left.
    #[error("{}", reversal_exceeds(id, *posted, *reversed, *requested))]
    ReversalExceedsPosted {
        id: TransferId,
        posted: i64,
        reversed: i64,
        requested: Option<i64>,
    },
    #[error("transfer group {0} was already applied with a different payload")]
    GroupConflict(GroupId),
    /// A linked group was refused as a whole: nothing of it was written. `index` and `transfer`
    /// name the first transfer that failed, `source` why.
    #[error("transfer group {group} refused: transfer {transfer} (#{index}) failed: {source}")]
    GroupRefused {
        group: GroupId,
        index: usize,
        transfer: TransferId,
        #[source]
        source: Box<Error>,
    },
    /// No connection could be had (the pool's wait timed out, the database refused or the pool
    /// could not be built). The pool's own error is kept as the source, for the log.
    #[error("could not get a database connection: {0}")]
    Pool(#[source] PoolFailure),
    #[error("gave up after {attempts} attempts, last SQLSTATE {sqlstate}: {source}")]
    RetriesExhausted {
        attempts: u32,
        sqlstate: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("database error: {0}")]
    Database(#[from] tokio_postgres::Error),
    /// The transaction failed and its connection was gone right after (the server or a Citus
    /// node went away mid-request): COMMIT was never sent, so nothing was applied. Known by the
    /// connection's state, not by the error's text.
    #[error("the database connection was lost before {operation} could commit ({cause}); nothing was applied")]
    ConnectionLost { operation: Operation, cause: String },
    #[error("migration failed: {0}")]
    Migration(String),
    /// Something the code relies on did not hold (a row the schema cannot produce, a product
    /// missing from a batch it was locked in). A bug, reported loudly instead of guessed around.
    #[error("internal invariant broken: {0}")]
    Invariant(String),
}

/// The message of [`Error::ReversalExceedsPosted`].
fn reversal_exceeds(id: &TransferId, posted: i64, reversed: i64, requested: Option<i64>) -> String {
    let left = posted.saturating_sub(reversed);
    match requested {
        Some(n) => format!(
            "cannot reverse {n} of transfer {id}: it posted {posted}, {reversed} of it is \
             reversed already, {left} is left"
        ),
        None => format!(
            "transfer {id} is reversed in full: it posted {posted}, {reversed} of it is \
             reversed already, nothing is left"
        ),
    }
}

/// The unique constraint of an event stream's positions (`migrations/V9__events.sql`).
pub(crate) const STREAM_POSITION_CONSTRAINT: &str = "events_stream_position";

/// Why the pool gave no connection: taking one, or building the pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolFailure {
    #[error(transparent)]
    Checkout(#[from] deadpool_postgres::PoolError),
    #[error(transparent)]
    Create(#[from] deadpool_postgres::CreatePoolError),
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        Error::Pool(PoolFailure::Checkout(e))
    }
}

impl From<deadpool_postgres::CreatePoolError> for Error {
    fn from(e: deadpool_postgres::CreatePoolError) -> Self {
        Error::Pool(PoolFailure::Create(e))
    }
}

impl Error {
    /// An internal invariant broke: logged loudly here (at error level, once, where it is
    /// detected) and returned, so the caller fails instead of guessing around it.
    pub(crate) fn invariant(what: impl Into<String>) -> Error {
        let what = what.into();
        tracing::error!(invariant = %what, "internal invariant broken");
        Error::Invariant(what)
    }

    /// The SQLSTATE of a database error, if this is one.
    pub fn sqlstate(&self) -> Option<&SqlState> {
        match self {
            Error::Database(e) | Error::RetriesExhausted { source: e, .. } => e.code(),
            // The lock timeout the database reported, named with its product.
            Error::ProductLocked(_) => Some(&SqlState::LOCK_NOT_AVAILABLE),
            _ => None,
        }
    }

    /// Deadlock or serialization failure: the transaction left no effect and may be rerun.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Database(e) if e.code().is_some_and(is_retryable_state))
            || self.is_stream_position_taken()
    }

    /// Two transactions gave the same event stream the same position: each read the stream's
    /// last position before the other committed (an order's rows written by two transactions
    /// that each hold only some of them: a sweep and a fill). The later one waited for the first
    /// on the unique index and lost; rerun from BEGIN, it reads the position the first wrote
    /// and takes the next one, so positions stay gap-free. Named by its constraint (the events
    /// table is never distributed, so the name always comes back).
    fn is_stream_position_taken(&self) -> bool {
        let Error::Database(e) = self else {
            return false;
        };
        e.as_db_error().is_some_and(|db| {
            db.code() == &SqlState::UNIQUE_VIOLATION
                && db.constraint() == Some(STREAM_POSITION_CONSTRAINT)
        })
    }

    /// A lock or statement timeout (55P03 / 57014): the statement was cancelled, and with it the
    /// transaction — nothing of it was applied.
    pub fn is_timeout(&self) -> bool {
        matches!(self.sqlstate(), Some(code)
            if *code == SqlState::LOCK_NOT_AVAILABLE || *code == SqlState::QUERY_CANCELED)
    }

    /// True for a unique violation (SQLSTATE 23505) of the named constraint or index, of one
    /// shard's copy of it on Citus (a worker names it `<name>_<shard id>`), or of a constraint
    /// the error does not name: Citus re-raises a worker's error on the coordinator with its
    /// SQLSTATE but without the constraint field. Decided by SQLSTATE and constraint name only,
    /// never by the message (whose language is the server's `lc_messages`). An unnamed one may
    /// be another constraint's: the callers rerun a bounded number of times, and a rerun either
    /// sees the concurrent copy that won and answers as a replay, or meets the same violation
    /// again and returns it.
    pub(crate) fn may_be_unique_violation_of(&self, constraint: &str) -> bool {
        let Error::Database(e) = self else {
            return false;
        };
        let Some(db) = e.as_db_error() else {
            return false;
        };
        if db.code() != &SqlState::UNIQUE_VIOLATION {
            return false;
        }
        db.constraint()
            .is_none_or(|name| names_constraint(name, constraint))
    }
}

/// `name` is `constraint`, or a Citus shard's `constraint_<digits>`.
fn names_constraint(name: &str, constraint: &str) -> bool {
    match name.strip_prefix(constraint) {
        Some("") => true,
        Some(rest) => rest
            .strip_prefix('_')
            .is_some_and(|shard| !shard.is_empty() && shard.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

pub(crate) fn is_retryable_state(code: &SqlState) -> bool {
    *code == SqlState::T_R_DEADLOCK_DETECTED || *code == SqlState::T_R_SERIALIZATION_FAILURE
}

/// Citus's source files whose errors without a SQLSTATE (XX000) say that a node went away under
/// a query: the coordinator's postmaster died while it waited on a worker, or a connection to a
/// worker failed ("postmaster was shut down, exiting" and its kin): the cluster is unavailable
/// for now. Before COMMIT nothing of the transaction was committed; at COMMIT the coordinator
/// may already have written its commit record (`remote_commands.c` raises the same error while
/// it waits on COMMIT PREPARED), which `store::retry` answers as outcome unknown.
const CITUS_NODE_FAILURE_SOURCES: [&str; 4] = [
    "adaptive_executor.c",
    "connection_management.c",
    "intermediate_results.c",
    "remote_commands.c",
];

/// True for Citus's report that a node went away under the query (see
/// [`CITUS_NODE_FAILURE_SOURCES`]): told by SQLSTATE and the source file the server names, never
/// by the message, whose language is the server's.
pub fn is_citus_node_failure(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else {
        return false;
    };
    *db.code() == SqlState::INTERNAL_ERROR
        && db.file().is_some_and(|file| {
            let name = file.rsplit('/').next().unwrap_or(file);
            CITUS_NODE_FAILURE_SOURCES.contains(&name)
        })
}

/// An error and its causes on one line, `: `-separated: some libraries' own message hides the
/// cause that says why (refinery's "db error", hyper's connection errors).
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::names_constraint;

    #[test]
    fn a_constraint_is_named_by_itself_or_by_a_citus_shard_copy() {
        assert!(names_constraint("transfer_ids_pkey", "transfer_ids_pkey"));
        assert!(names_constraint(
            "transfer_ids_pkey_102044",
            "transfer_ids_pkey"
        ));
        assert!(!names_constraint("transfer_ids_pkey_", "transfer_ids_pkey"));
        assert!(!names_constraint(
            "transfer_ids_pkey_x1",
            "transfer_ids_pkey"
        ));
        assert!(!names_constraint("transfers_pkey", "transfer_ids_pkey"));
        assert!(!names_constraint("transfer_ids", "transfer_ids_pkey"));
    }
}
