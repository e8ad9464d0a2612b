//! Every SQL statement of the ledger, in one place: account locks and writes, the journal's
//! reads and writes, the settles and the sweeper's expiry, and the repair's writes. Where Citus
//! needs its own form with the same parameters the statement is a named pair ([`Sql::pair`],
//! [`Sql::per_key`]); the store's dialect picks the text. Statements whose Citus form takes
//! other parameters or other steps (a router read first, one row per statement, both sides of a
//! transfer) are written out twice here, `CITUS_` beside the single-node form, and chosen by the
//! data-access functions of [`super::rows`], the only place that asks for the layout.
//!
//! On Citus (migrations-citus/V2 and V5) a transfer is two journal rows, its debit side on
//! `from_account`'s shard and its credit side on `to_account`'s, plus its `transfer_ids` row (the
//! id's global key and the router to its accounts) and, in a group, its
//! `transfer_group_positions` row. Reads return the debit side, one row per transfer.
//!
//! Text only: nothing here runs a statement. Values are always bound, never spliced in.

use crate::store::dialect::{Dialect, Sql};
use crate::store::schema::Layout;
use crate::store::values::{Col, Values};

/// Every column a [`crate::ledger::types::Transfer`] is read from, in every statement that
/// returns one.
macro_rules! transfer_columns {
    () => {
        "id, from_account, to_account, amount, currency, kind, created_at, status, \
         posted_amount, timeout_s, expires_at, settled_at, group_id, reference, metadata, \
         reverses, reversed"
    };
}

/// The same list as text, for statements written elsewhere (the transfer search) to be checked
/// against.
#[cfg(test)]
pub(crate) const TRANSFER_COLUMNS: &str = transfer_columns!();

/// `SELECT <transfer columns> FROM transfers <rest>`.
macro_rules! select_transfers {
    ($rest:literal) => {
        concat!("SELECT ", transfer_columns!(), " FROM transfers ", $rest)
    };
}

/// What a post, void or expiry reads of a transfer (`rows::settles::state_of`).
macro_rules! state_columns {
    () => {
        "id, from_account, to_account, amount, status, posted_amount, \
         timeout_s IS NOT NULL AS was_pending, expires_at, currency"
    };
}

/// The columns of an account row as `rows::accounts` reads them.
macro_rules! account_columns {
    () => {
        "id, balance, held, pending_credits, min_balance, max_balance, currency, scale, entry_seq"
    };
}

// ---- Keys -------------------------------------------------------------------------------------

/// The unique key a second transfer under a taken id fails on (23505): a concurrent copy of the
/// same transfer committed first, and rerunning finds it and answers as a replay. On Citus the
/// id's key is `transfer_ids` (written before the sides).
pub(crate) const fn transfers_key(dialect: Dialect) -> &'static str {
    match dialect.layout() {
        Layout::Single => "transfers_pkey",
        Layout::Citus => "transfer_ids_pkey",
    }
}

/// The same for a linked group's id.
pub(crate) const GROUPS_KEY: &str = "transfer_groups_pkey";

// ---- Accounts ---------------------------------------------------------------------------------

/// Locks accounts in ascending id: one statement on one node; on Citus one per account (a
/// `FOR UPDATE` spanning shards is refused, 0A000), issued one after the other in the same
/// order, now across workers.
pub(crate) const LOCK_ACCOUNTS: Sql = Sql::per_key(
    concat!(
        "SELECT ",
        account_columns!(),
        " FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE"
    ),
    concat!(
        "SELECT ",
        account_columns!(),
        " FROM accounts WHERE id = $1 FOR UPDATE"
    ),
);
/// [`LOCK_ACCOUNTS`] for the sweeper: never waits; an account someone holds gives no row.
pub(crate) const LOCK_ACCOUNTS_SKIP: Sql = Sql::per_key(
    concat!(
        "SELECT ",
        account_columns!(),
        " FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED"
    ),
    concat!(
        "SELECT ",
        account_columns!(),
        " FROM accounts WHERE id = $1 FOR UPDATE SKIP LOCKED"
    ),
);
/// The columns an account write returns: what `account.changed` says, and the seq of its
/// latest entry.
macro_rules! written_columns {
    () => {
        "id, balance, held, pending_credits, event_position, currency, entry_seq"
    };
}

/// Every changed account once, in one statement, with the seq of its latest entry. Every row is
/// locked by this transaction: the order the statement writes them in no longer matters.
pub(crate) const WRITE_ACCOUNTS: Sql = Sql::same(
    "UPDATE accounts a \
     SET balance = d.balance, held = d.held, pending_credits = d.pending_credits, \
         entry_seq = d.entry_seq, event_position = a.event_position + 1 \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) \
          AS d(id, balance, held, pending_credits, entry_seq) WHERE a.id = d.id \
     RETURNING a.id, a.balance, a.held, a.pending_credits, a.event_position, a.currency",
);
/// An account as a read answers it: the lock's columns and its reference and metadata (which
/// no movement needs, so the locks leave them unread).
pub(crate) const ACCOUNT: Sql = Sql::same(concat!(
    "SELECT ",
    account_columns!(),
    ", reference, metadata FROM accounts WHERE id = $1"
));
/// The system account (id 0) first: the ascending-id lock order of every ledger path.
pub(crate) const LOCK_SYSTEM: Sql =
    Sql::same("SELECT balance FROM accounts WHERE id = 0 FOR UPDATE");
/// A new account, with its opening entry (seq 1) to be written.
pub(crate) const CREATE_ACCOUNT: Sql = Sql::same(concat!(
    "INSERT INTO accounts (id, balance, min_balance, max_balance, currency, scale, \
     reference, metadata, event_position, entry_seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, 1) \
     ON CONFLICT (id) DO NOTHING \
     RETURNING ",
    written_columns!()
));
/// An opening balance taken from the system account, with its entry to be written.
pub(crate) const DEBIT_SYSTEM: Sql = Sql::same(concat!(
    "UPDATE accounts SET balance = balance - $1, event_position = event_position + 1, \
         entry_seq = entry_seq + 1 WHERE id = 0 RETURNING ",
    written_columns!()
));
/// Citus: a transaction that writes reference tables (a group, its positions) after reading
/// every journal shard must use one connection per node.
pub(crate) const SEQUENTIAL: Sql =
    Sql::citus_only("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'");
/// The transaction's time: on Citus the coordinator's, which both sides of a settle carry (each
/// shard's own `now()` is its own transaction's start, and the two sides must agree). Read once
/// per transaction: it is the same value whenever read.
pub(crate) const NOW: Sql = Sql::same("SELECT now() AS now");

// ---- The journal: new transfers, groups, reads --------------------------------------------------

pub(crate) const FIND: Sql = Sql::same(select_transfers!("WHERE id = $1"));
/// Citus: the debit side of an id whose `from_account` (`$2`) the router named.
pub(crate) const CITUS_FIND: Sql =
    Sql::same(select_transfers!("WHERE account_id = $2 AND id = $1"));
/// The two accounts of a transfer id: its row, or on Citus its router row (one shard).
pub(crate) const SIDES: Sql = Sql::pair(
    "SELECT from_account, to_account FROM transfers WHERE id = $1",
    "SELECT from_account, to_account FROM transfer_ids WHERE id = $1",
);
/// [`SIDES`] of many ids.
pub(crate) const SIDES_MANY: Sql = Sql::pair(
    "SELECT id, from_account, to_account FROM transfers WHERE id = ANY($1)",
    "SELECT id, from_account, to_account FROM transfer_ids WHERE id = ANY($1)",
);
/// The journalled transfers among `$1`; on Citus every shard is read (the ids' accounts are not
/// known yet) and the debit sides kept.
pub(crate) const FIND_MANY: Sql = Sql::pair(
    select_transfers!("WHERE id = ANY($1)"),
    select_transfers!("WHERE id = ANY($1) AND account_id = from_account"),
);
pub(crate) const OF_GROUP: Sql = Sql::pair(
    select_transfers!("WHERE group_id = $1 ORDER BY group_position"),
    select_transfers!("WHERE group_id = $1 AND account_id = from_account ORDER BY group_position"),
);
pub(crate) const FIND_GROUP: Sql =
    Sql::same("SELECT size, reference, metadata FROM transfer_groups WHERE id = $1");
pub(crate) const INSERT_GROUP: Sql = Sql::same(
    "INSERT INTO transfer_groups (id, size, reference, metadata) VALUES ($1, $2, $3, $4)",
);
/// An account's latest transfers; on Citus its side of each is on its own shard.
pub(crate) const LIST: Sql = Sql::pair(
    select_transfers!(
        "WHERE from_account = $1 OR to_account = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
    ),
    select_transfers!("WHERE account_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"),
);
/// One statement for one transfer or a whole group; a hold's deadline is the database's clock
/// plus its timeout, like every other timestamp of the journal.
pub(crate) const INSERT_TRANSFERS: Sql = Sql::same(concat!(
    "INSERT INTO transfers (id, from_account, to_account, amount, kind, status, timeout_s, \
     expires_at, group_id, group_position, currency, reference, metadata, reverses) \
     SELECT t.id, t.from_account, t.to_account, t.amount, t.kind, t.status, t.timeout_s, \
            now() + make_interval(secs => t.timeout_s), $9, t.group_position, t.currency, \
            t.reference, t.metadata, t.reverses \
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], \
                   $6::text[], $7::int[], $8::smallint[], $10::text[], $11::text[], \
                   $12::jsonb[], $13::text[]) \
            AS t(id, from_account, to_account, amount, kind, status, timeout_s, group_position, \
                 currency, reference, metadata, reverses) \
     RETURNING ",
    transfer_columns!()
));
/// Citus: an id's global key and router, written after the account locks and before the
/// sides, so a second transfer under a taken id fails here with 23505 on `transfer_ids_pkey`,
/// as the primary key fails on one node. One row per statement: Citus runs a multi-row
/// `INSERT … SELECT` through COPY, which reports a duplicate as XX000, not as the unique
/// violation the replay path watches for.
pub(crate) const CITUS_INSERT_ID: Sql =
    Sql::same("INSERT INTO transfer_ids (id, from_account, to_account) VALUES ($1, $2, $3)");
/// Citus: the unique (group_id, group_position) the portable index keeps.
pub(crate) const CITUS_INSERT_POSITIONS: Sql = Sql::same(
    "INSERT INTO transfer_group_positions (group_id, group_position, transfer_id) \
     SELECT $1, p, id FROM unnest($2::smallint[], $3::text[]) AS t(p, id)",
);
/// Side rows per [`CITUS_INSERT_SIDES`] statement at most: 15 parameters each, far under
/// PostgreSQL's 65,535, and a bounded number of statement texts per process.
pub(crate) const CITUS_SIDES_CHUNK: usize = 64;
/// Citus: side rows as multi-row `VALUES`, per row its account, id, from, to, amount, kind,
/// status, currency, reference, metadata, reverses, timeout (twice: the column and the
/// deadline), group and group position. Citus routes
/// each row to its account's shard (an `INSERT … SELECT FROM unnest` runs through the
/// coordinator, the slow path) and evaluates `now()` on the coordinator, so both sides carry
/// one `created_at` and one deadline (the last column's text closes with `created_at`'s
/// `now()`, which takes no parameter).
pub(crate) static CITUS_INSERT_SIDES: Values = Values::new(
    "INSERT INTO transfers (account_id, id, from_account, to_account, amount, kind, status, \
     currency, reference, metadata, reverses, timeout_s, expires_at, group_id, \
     group_position, created_at)",
    &[
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::bigint"),
        Col::cast("::bigint"),
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::jsonb"),
        Col::cast("::text"),
        Col::cast("::int"),
        Col::wrapped("now() + make_interval(secs => ", "::int)"),
        Col::cast("::text"),
        Col::wrapped("", "::smallint, now()"),
    ],
    concat!("RETURNING account_id, ", transfer_columns!()),
);

// ---- Settles and expiry -----------------------------------------------------------------------

/// A transfer's settle state (`$2` its `from_account`, from [`SIDES`]): on Citus its debit side.
pub(crate) const STATE: Sql = Sql::pair(
    concat!(
        "SELECT ",
        state_columns!(),
        " FROM transfers WHERE id = $1 AND from_account = $2"
    ),
    concat!(
        "SELECT ",
        state_columns!(),
        " FROM transfers WHERE account_id = $2 AND id = $1"
    ),
);
/// [`STATE`] of many ids, under the account locks (the batched engine).
pub(crate) const STATE_MANY: Sql = Sql::pair(
    concat!(
        "SELECT ",
        state_columns!(),
        " FROM transfers WHERE id = ANY($1)"
    ),
    concat!(
        "SELECT ",
        state_columns!(),
        " FROM transfers WHERE id = ANY($1) AND account_id = from_account"
    ),
);
/// The single-winner step: only a transfer still pending moves (both of its sides on Citus).
/// `$4`, `$5` its accounts, `$6` the transaction's time ([`NOW`]).
pub(crate) const SETTLE: Sql = Sql::pair(
    "UPDATE transfers SET status = $2, posted_amount = $3, settled_at = $6 \
     WHERE id = $1 AND from_account = $4 AND to_account = $5 AND status = 'pending'",
    "UPDATE transfers SET status = $2, posted_amount = $3, settled_at = $6 \
     WHERE account_id IN ($4, $5) AND id = $1 AND status = 'pending'",
);
/// Every hold a batch settled, in one statement; `$4` the transaction's time.
pub(crate) const SETTLE_MANY: Sql = Sql::same(
    "UPDATE transfers t \
     SET status = d.status, posted_amount = d.posted_amount, settled_at = $4 \
     FROM unnest($1::text[], $2::text[], $3::bigint[]) AS d(id, status, posted_amount) \
     WHERE t.id = d.id AND t.status = 'pending'",
);
/// Citus: both sides of each hold (`$1` the side's account), joined on the distribution column.
pub(crate) const CITUS_SETTLE_MANY: Sql = Sql::same(
    "UPDATE transfers t \
     SET status = d.status, posted_amount = d.posted_amount, settled_at = $5 \
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) \
          AS d(account_id, id, status, posted_amount) \
     WHERE t.account_id = d.account_id AND t.id = d.id AND t.status = 'pending'",
);
/// Due holds at `$2` (the transaction's time), oldest deadline first; not locked here (the
/// account locks come first). On Citus one row per transfer (its debit side), every shard read.
pub(crate) const DUE: Sql = Sql::pair(
    "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= $2 ORDER BY expires_at LIMIT $1",
    "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= $2 AND account_id = from_account \
     ORDER BY expires_at LIMIT $1",
);
/// [`DUE`] of the holds one account (`$3`) is a side of: what a refused movement reclaims.
pub(crate) const DUE_OF: Sql = Sql::pair(
    "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= $2 AND (from_account = $3 OR to_account = $3) \
     ORDER BY expires_at LIMIT $1",
    "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= $2 AND account_id = $3 \
     ORDER BY expires_at LIMIT $1",
);
/// Those of `$1` still pending and due at `$2` expire; on Citus both sides of each, returned
/// with their account.
pub(crate) const EXPIRE: Sql = Sql::pair(
    "UPDATE transfers SET status = 'expired', settled_at = $2 \
     WHERE id = ANY($1) AND status = 'pending' AND expires_at <= $2 \
     RETURNING id, from_account, to_account, amount, expires_at, currency",
    "UPDATE transfers SET status = 'expired', settled_at = $2 \
     WHERE id = ANY($1) AND status = 'pending' AND expires_at <= $2 \
     RETURNING account_id, id, from_account, to_account, amount, expires_at, currency",
);

// ---- Reversals ---------------------------------------------------------------------------------

/// What a reversal reads of its original (`$2` its `from_account`, from [`SIDES`]), under the
/// locks of its two accounts: on Citus its debit side.
pub(crate) const ORIGINAL: Sql = Sql::pair(
    concat!(
        "SELECT ",
        state_columns!(),
        ", reversed, reversals FROM transfers WHERE id = $1 AND from_account = $2"
    ),
    concat!(
        "SELECT ",
        state_columns!(),
        ", reversed, reversals FROM transfers WHERE account_id = $2 AND id = $1"
    ),
);
/// The original counts a reversal of `$2`: only a posted transfer with that much left moves
/// (both of its sides on Citus, `$3`, `$4` its accounts); the CHECK `reversed_within_posted`
/// stands behind it. Returns the counters after.
pub(crate) const REVERSE_ORIGINAL: Sql = Sql::pair(
    "UPDATE transfers SET reversed = reversed + $2, reversals = reversals + 1 \
     WHERE id = $1 AND from_account = $3 AND to_account = $4 AND status = 'posted' \
       AND reversed + $2 <= coalesce(posted_amount, amount) \
     RETURNING reversed, reversals",
    "UPDATE transfers SET reversed = reversed + $2, reversals = reversals + 1 \
     WHERE account_id IN ($3, $4) AND id = $1 AND status = 'posted' \
       AND reversed + $2 <= coalesce(posted_amount, amount) \
     RETURNING reversed, reversals",
);
/// The ids of an original's (`$1`) reversals, oldest first, at most `$3`: each moved from the
/// original's destination (`$2`), so on Citus one shard holds their debit sides.
pub(crate) const REVERSALS_OF: Sql = Sql::pair(
    "SELECT id FROM transfers WHERE reverses = $1 AND from_account = $2 \
     ORDER BY created_at, id LIMIT $3",
    "SELECT id FROM transfers WHERE account_id = $2 AND reverses = $1 \
     ORDER BY created_at, id LIMIT $3",
);

// ---- Entries ----------------------------------------------------------------------------------

/// The entries of one transaction, one statement on one node: per row its account, seq,
/// transfer, kind, direction, amount, currency and counters after; stamped with the write's
/// time, taken under the accounts' locks (see migrations/V20).
pub(crate) const INSERT_ENTRIES: Sql = Sql::same(
    "INSERT INTO entries (account_id, seq, transfer_id, kind, direction, amount, currency, \
     balance_after, held_after, pending_credits_after, at) \
     SELECT e.*, clock_timestamp() \
       FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], \
                   $6::bigint[], $7::text[], $8::bigint[], $9::bigint[], $10::bigint[]) \
            AS e(account_id, seq, transfer_id, kind, direction, amount, currency, \
                 balance_after, held_after, pending_credits_after)",
);
/// Entry rows per [`CITUS_INSERT_ENTRIES`] statement at most (10 parameters each).
pub(crate) const CITUS_ENTRIES_CHUNK: usize = 100;
/// Citus: [`INSERT_ENTRIES`] as multi-row `VALUES`, each row routed to its account's shard;
/// `clock_timestamp()` is evaluated on the coordinator (the last column's text closes with it).
pub(crate) static CITUS_INSERT_ENTRIES: Values = Values::new(
    "INSERT INTO entries (account_id, seq, transfer_id, kind, direction, amount, currency, \
     balance_after, held_after, pending_credits_after, at)",
    &[
        Col::cast("::bigint"),
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::bigint"),
        Col::cast("::bigint"),
        Col::wrapped("", "::bigint, clock_timestamp()"),
    ],
    "",
);
/// The seq of the latest entry of each account of `$1` (`$2`): the lab's movements, whose
/// counters another code wrote, get their entries without another `account.changed`.
pub(crate) const WRITE_ENTRY_SEQS: Sql = Sql::same(
    "UPDATE accounts a SET entry_seq = d.entry_seq \
       FROM unnest($1::bigint[], $2::bigint[]) AS d(id, entry_seq) WHERE a.id = d.id",
);

// ---- Repair -----------------------------------------------------------------------------------

/// An account's counters brought back to its journal, under its lock.
pub(crate) const REPAIR_ACCOUNT: Sql = Sql::same(concat!(
    "UPDATE accounts SET balance = $2, held = $3, pending_credits = $4, \
         event_position = event_position + 1, entry_seq = entry_seq + 1 \
         WHERE id = $1 RETURNING ",
    written_columns!()
));
/// The trace of a repair: what the counters were, what they became, and why.
pub(crate) const RECORD_REPAIR: Sql = Sql::same(
    "INSERT INTO account_repairs (account_id, balance_before, held_before, \
     pending_credits_before, balance_after, held_after, pending_credits_after, reason) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The Citus sides write the columns the single node's INSERT writes, plus the side's
    /// account and `created_at`; row `i` takes parameters 1 + 15i ..= 15 + 15i.
    #[test]
    fn the_citus_sides_number_their_parameters_per_row() {
        let two = CITUS_INSERT_SIDES.statement(2);
        assert!(two.starts_with("INSERT INTO transfers (account_id, id, from_account"));
        assert!(two.contains("VALUES ($1::bigint, $2::text,"));
        assert!(two.contains(
            "$8::text, $9::text, $10::jsonb, $11::text, $12::int, \
             now() + make_interval(secs => $13::int), $14::text, $15::smallint, now()), \
             ($16::bigint, $17::text,"
        ));
        assert!(two.contains("$30::smallint, now()) RETURNING account_id, "));
        assert!(!two.contains("$31"));
        assert_eq!(CITUS_INSERT_SIDES.width(), 15);
    }

    #[test]
    fn every_keyed_lock_names_one_account_on_citus() {
        for sql in [LOCK_ACCOUNTS, LOCK_ACCOUNTS_SKIP] {
            assert!(sql.single().contains("= ANY($1) ORDER BY id FOR UPDATE"));
            assert!(sql.citus().contains("WHERE id = $1 FOR UPDATE"));
        }
    }
}
