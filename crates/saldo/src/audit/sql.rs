//! Every SQL statement of the audits, in one place: the stock invariants (per product, from
//! its reservations and history), the ledger invariants (per account, from its journal; the
//! totals), and the Citus audit's own reads (pages of keys, the suspects of the double entry,
//! the prepared transactions in flight).
//!
//! A product's and an account's state are each one template written twice at compile time
//! ([`PRODUCT_STATE`], [`ACCOUNT_STATE`]): on one node the product's form filters through its
//! joins (and takes NULL for every product, which the audit uses); on Citus every table is
//! filtered by the distribution value itself, so Citus routes the query whole to that value's
//! shard group (one task, one snapshot; the Citus suite checks the plan).
//!
//! Text only: nothing here runs a statement. Values are always bound, never spliced in.

use crate::store::dialect::Sql;

/// Per product: its row and what reservations and history say it should hold, `$1` the
/// product. The fragments are the filters: `$product` for the tables named without an alias,
/// `$stock` for the stock row, and `$m`, `$r`, `$f`, `$i` put before the first condition on
/// movements, confirmed reservations, sold fills, sale items and return items (empty where the
/// join to the last count already filters them). Moves (migration V21) enter twice: a move that
/// changed `available` is a `move` movement (with the adjustments since the count), and each
/// state's units are the sum of every move into it, minus every move out of it, plus every
/// return into it (states are never counted, so their whole history is summed).
macro_rules! stock_state {
    ($product:literal, $stock:literal, $m:literal, $r:literal, $f:literal, $i:literal, $t:literal) => {
        concat!(
            "
WITH last_count AS (
    SELECT DISTINCT ON (product_id) product_id, id, quantity, created_at
      FROM stock_movements
     WHERE kind = 'count' AND location_id IS NULL AND ",
            $product,
            "
     ORDER BY product_id, id DESC),
adjusted AS (
    SELECT m.product_id, sum(m.quantity)::bigint AS delta
      FROM stock_movements m JOIN last_count c USING (product_id)
     WHERE ",
            $m,
            "m.kind IN ('adjustment', 'move') AND m.location_id IS NULL AND m.id > c.id
     GROUP BY m.product_id),
fills_sold AS (
    SELECT reservation_id, sum(quantity)::bigint AS quantity
      FROM backorder_fills
     WHERE sold AND ",
            $product,
            "
     GROUP BY reservation_id),
confirmed AS (
    SELECT r.product_id,
           sum(r.quantity - r.backordered - coalesce(f.quantity, 0))::bigint AS quantity
      FROM reservations r JOIN last_count c USING (product_id)
      LEFT JOIN fills_sold f ON f.reservation_id = r.id
     WHERE ",
            $r,
            "r.status = 'confirmed' AND r.settled_at > c.created_at
     GROUP BY r.product_id),
filled_sold AS (
    SELECT f.product_id, sum(f.quantity)::bigint AS quantity
      FROM backorder_fills f JOIN last_count c USING (product_id)
     WHERE ",
            $f,
            "f.sold AND f.movement_id >= c.id
     GROUP BY f.product_id),
sold AS (
    SELECT i.product_id, sum(i.quantity)::bigint AS quantity
      FROM sale_items i JOIN last_count c USING (product_id)
     WHERE ",
            $i,
            "i.sold_at > c.created_at
     GROUP BY i.product_id),
returned AS (
    SELECT t.product_id, sum(t.quantity)::bigint AS quantity
      FROM return_items t JOIN last_count c USING (product_id)
     WHERE ",
            $t,
            "t.returned_at > c.created_at AND t.state = 'available'
     GROUP BY t.product_id),
state_changes AS (
    SELECT product_id, to_state AS state, quantity::bigint AS units
      FROM stock_moves WHERE ",
            $product,
            "
    UNION ALL
    SELECT product_id, from_state, -quantity::bigint FROM stock_moves WHERE ",
            $product,
            "
    UNION ALL
    SELECT product_id, state, quantity::bigint FROM return_items
     WHERE state <> 'available' AND ",
            $product,
            "),
state_history AS (
    SELECT product_id,
           coalesce(sum(units) FILTER (WHERE state = 'damaged'), 0)::bigint AS damaged,
           coalesce(sum(units) FILTER (WHERE state = 'safety_stock'), 0)::bigint
             AS safety_stock,
           coalesce(sum(units) FILTER (WHERE state = 'incoming'), 0)::bigint AS incoming
      FROM state_changes GROUP BY product_id),
active AS (
    SELECT product_id, sum(quantity - backordered)::bigint AS quantity
      FROM reservations
     WHERE status = 'active' AND ",
            $product,
            "
     GROUP BY product_id),
live_backorders AS (
    SELECT product_id, sum(backordered)::bigint AS units
      FROM reservations
     WHERE backordered > 0 AND status IN ('active', 'confirmed')
       AND ",
            $product,
            "
     GROUP BY product_id)
SELECT s.product_id,
       s.available::bigint                                   AS available,
       s.reserved::bigint                                    AS reserved,
       s.version,
       coalesce(a.quantity, 0)                               AS active_reserved,
       s.backordered::bigint                                 AS backordered,
       s.backorder_limit::bigint                             AS backorder_limit,
       coalesce(lb.units, 0)                                 AS live_backordered,
       (s.available + s.reserved)::bigint                    AS on_hand,
       coalesce(c.quantity, 0) + coalesce(adj.delta, 0) - coalesce(cf.quantity, 0)
         - coalesce(sd.quantity, 0) - coalesce(fs.quantity, 0)
         + coalesce(rt.quantity, 0)                          AS expected_on_hand,
       s.damaged::bigint                                     AS damaged,
       coalesce(sh.damaged, 0)                               AS expected_damaged,
       s.safety_stock::bigint                                AS safety_stock,
       coalesce(sh.safety_stock, 0)                          AS expected_safety_stock,
       s.incoming::bigint                                    AS incoming,
       coalesce(sh.incoming, 0)                              AS expected_incoming
  FROM stock s
  LEFT JOIN last_count c USING (product_id)
  LEFT JOIN adjusted adj USING (product_id)
  LEFT JOIN confirmed cf USING (product_id)
  LEFT JOIN sold sd USING (product_id)
  LEFT JOIN filled_sold fs USING (product_id)
  LEFT JOIN returned rt USING (product_id)
  LEFT JOIN active a USING (product_id)
  LEFT JOIN live_backorders lb USING (product_id)
  LEFT JOIN state_history sh USING (product_id)
 WHERE ",
            $stock
        )
    };
}

/// [`stock_state!`] for one product or, with `$1` NULL, every product (one node).
macro_rules! stock_state_any {
    () => {
        stock_state!(
            "($1::bigint IS NULL OR product_id = $1)",
            "($1::bigint IS NULL OR s.product_id = $1)",
            "",
            "",
            "",
            "",
            ""
        )
    };
}

/// One product's [`stock_state!`] row (`$1`): what the repair reads under the product's row
/// lock and the Citus audit reads per product.
pub const PRODUCT_STATE: Sql = Sql::pair(
    stock_state_any!(),
    stock_state!(
        "product_id = $1",
        "s.product_id = $1",
        "m.product_id = $1 AND ",
        "r.product_id = $1 AND ",
        "f.product_id = $1 AND ",
        "i.product_id = $1 AND ",
        "t.product_id = $1 AND "
    ),
);

/// The divergent products (one node, `$1` NULL: every product), `$2` at most.
pub(crate) const STOCK_AUDIT: &str = concat!(
    "SELECT * FROM (",
    stock_state_any!(),
    ") st WHERE reserved <> active_reserved OR on_hand <> expected_on_hand \
     OR backordered <> live_backordered OR damaged <> expected_damaged \
     OR safety_stock <> expected_safety_stock OR incoming <> expected_incoming \
     ORDER BY product_id LIMIT $2"
);

/// The backorder invariants that no repair can restore (the limit, the arrival order; the
/// count of live backorders is a product-state invariant), divergent products only. The
/// out-of-order count: fills whose arrival is below their predecessor's (fill id order), plus
/// live backorders older than the newest arrival any fill reached.
pub(crate) const BACKORDER_AUDIT: &str = "
WITH ordered AS (
    SELECT product_id, arrival,
           lag(arrival) OVER (PARTITION BY product_id ORDER BY id) AS previous
      FROM backorder_fills),
backwards AS (
    SELECT product_id, count(*) AS n FROM ordered WHERE arrival < previous GROUP BY product_id),
reached AS (
    SELECT product_id, max(arrival) AS arrival FROM backorder_fills GROUP BY product_id),
skipped AS (
    SELECT r.product_id, count(*) AS n
      FROM reservations r JOIN reached f USING (product_id)
     WHERE r.backordered > 0 AND r.status IN ('active', 'confirmed')
       AND r.backorder_arrival < f.arrival
     GROUP BY r.product_id)
SELECT s.product_id, s.backordered::bigint AS backordered,
       s.backorder_limit::bigint AS backorder_limit,
       coalesce(b.n, 0) + coalesce(k.n, 0) AS out_of_order
  FROM stock s
  LEFT JOIN backwards b USING (product_id)
  LEFT JOIN skipped k USING (product_id)
 WHERE s.backordered > s.backorder_limit OR coalesce(b.n, 0) + coalesce(k.n, 0) > 0
 ORDER BY s.product_id
 LIMIT $1";

/// Each written product's latest movement (V22) against its row: the movement at the row's
/// version (every write makes one, numbered by the version it left) must say the row's
/// counters. A product at version 0 with no movement was never written by the engine (created
/// at zero, or by a fixture written without one): nothing to compare. A movement past the
/// version cannot be written twice (the next write's movement meets it on the primary key).
/// The join is on the distribution column, so on Citus each shard answers for its own
/// products. `$1`: most rows returned.
pub(crate) const MOVEMENT_AUDIT: &str = "
SELECT s.product_id, s.version, s.available::bigint AS available,
       s.reserved::bigint AS reserved, s.backordered::bigint AS backordered,
       m.seq, m.available_after::bigint AS available_after,
       m.reserved_after::bigint AS reserved_after,
       m.backordered_after::bigint AS backordered_after
  FROM stock s
  LEFT JOIN product_movements m ON m.product_id = s.product_id AND m.seq = s.version
 WHERE (m.seq IS NULL AND s.version > 0)
    OR m.available_after <> s.available OR m.reserved_after <> s.reserved
    OR m.backordered_after <> s.backordered
 ORDER BY s.product_id
 LIMIT $1";

/// The location invariants, per product: its row is the sum of its locations (states included),
/// each location's
/// `reserved` is the sum of the active allocations at it, and each allocated reservation's
/// allocations add up to what it holds on hand (its quantity less what is still backordered:
/// a fill at a location allocates what it fills there). `$1`: most rows returned.
pub(crate) const LOCATION_AUDIT: &str = "
WITH sums AS (
    SELECT product_id, sum(available)::bigint AS available, sum(reserved)::bigint AS reserved,
           sum(damaged)::bigint AS damaged, sum(safety_stock)::bigint AS safety_stock,
           sum(incoming)::bigint AS incoming
      FROM stock_locations GROUP BY product_id),
held AS (
    SELECT a.product_id, a.location_id, sum(a.quantity)::bigint AS quantity
      FROM reservation_allocations a JOIN reservations r ON r.id = a.reservation_id
     WHERE r.status = 'active'
     GROUP BY a.product_id, a.location_id),
per_row AS (
    SELECT r.product_id, (r.quantity - r.backordered)::bigint AS quantity,
           coalesce(sum(a.quantity), 0)::bigint AS allocated
      FROM reservations r LEFT JOIN reservation_allocations a ON a.reservation_id = r.id
     WHERE r.allocated
     GROUP BY r.id, r.product_id, r.quantity, r.backordered)
SELECT * FROM (
    SELECT s.product_id, 'available' AS invariant, coalesce(x.available, 0) AS expected,
           s.available::bigint AS actual
      FROM stock s LEFT JOIN sums x USING (product_id)
     WHERE s.located AND s.available <> coalesce(x.available, 0)
    UNION ALL
    SELECT s.product_id, 'reserved', coalesce(x.reserved, 0), s.reserved::bigint
      FROM stock s LEFT JOIN sums x USING (product_id)
     WHERE s.located AND s.reserved <> coalesce(x.reserved, 0)
    UNION ALL
    SELECT s.product_id, 'states',
           coalesce(x.damaged + x.safety_stock + x.incoming, 0),
           (s.damaged + s.safety_stock + s.incoming)::bigint
      FROM stock s LEFT JOIN sums x USING (product_id)
     WHERE s.located AND (s.damaged <> coalesce(x.damaged, 0)
        OR s.safety_stock <> coalesce(x.safety_stock, 0)
        OR s.incoming <> coalesce(x.incoming, 0))
    UNION ALL
    SELECT sl.product_id, 'location_reserved', sum(coalesce(h.quantity, 0))::bigint,
           sum(sl.reserved)::bigint
      FROM stock_locations sl LEFT JOIN held h USING (product_id, location_id)
     WHERE sl.reserved <> coalesce(h.quantity, 0)
     GROUP BY sl.product_id
    UNION ALL
    SELECT product_id, 'allocations', sum(quantity)::bigint, sum(allocated)::bigint
      FROM per_row WHERE quantity <> allocated
     GROUP BY product_id
) d ORDER BY product_id, invariant LIMIT $1";

/// Sums in numeric (a sum of bigints cannot overflow the audit itself), read as text:
/// tokio-postgres has no numeric type without another crate.
pub(crate) const LEDGER_TOTAL: &str = "SELECT coalesce(sum(balance), 0)::text AS total, \
     coalesce(sum(held), 0)::text AS held, \
     coalesce(sum(pending_credits), 0)::text AS pending_credits FROM accounts";

/// Per currency (one node): its customer accounts' balances plus the system account's
/// position in it (what its posted journal rows in that currency moved), and its customer
/// accounts' `held` and `pending_credits` (the system account holds nothing). Each must be
/// zero, and equal, on its own: money never changes currency, it is exchanged by one leg per
/// currency. Sums as text, see [`LEDGER_TOTAL`].
pub(crate) const LEDGER_CURRENCY_TOTALS: &str = "
WITH system AS (
    SELECT currency,
           sum(CASE WHEN to_account = 0 THEN coalesce(posted_amount, amount)
                    ELSE -coalesce(posted_amount, amount) END) AS net
      FROM transfers WHERE status = 'posted' AND (from_account = 0 OR to_account = 0)
     GROUP BY currency),
customers AS (
    SELECT currency, sum(balance) AS total, sum(held) AS held,
           sum(pending_credits) AS credits
      FROM accounts WHERE id <> 0 GROUP BY currency)
SELECT coalesce(c.currency, s.currency) AS currency,
       (coalesce(c.total, 0) + coalesce(s.net, 0))::text AS total,
       coalesce(c.held, 0)::text AS held,
       coalesce(c.credits, 0)::text AS pending_credits
  FROM customers c FULL JOIN system s USING (currency)
 ORDER BY 1";

/// The columns of an account's state (`AccountState::from_row`): its counters, limits and
/// currency, what its journal says the counters should be (sums as text, see
/// [`LEDGER_TOTAL`]), how many of its journal rows are in another currency than its own, and
/// its `entry_seq` with its latest entry's seq and counters (`latest_entry!`, joined as `e`).
macro_rules! account_state_columns {
    ($balance:literal, $held:literal, $credits:literal, $foreign:literal) => {
        concat!(
            "a.id, a.balance::text AS balance, a.held::text AS held, \
             a.pending_credits::text AS pending_credits, a.min_balance, a.max_balance, \
             a.currency, ",
            $balance,
            "::text AS expected, ",
            $held,
            "::text AS expected_held, ",
            $credits,
            "::text AS expected_pending_credits, ",
            $foreign,
            "::bigint AS foreign_rows, a.entry_seq, e.seq AS latest_seq, \
             e.balance_after AS latest_balance, e.held_after AS latest_held, \
             e.pending_credits_after AS latest_pending_credits"
        )
    };
}

/// The account's latest entry (`e`, none when it has none): the largest seq, one probe of the
/// entries' primary key. `$account` names the account (`a.id`, or `$1` where Citus must see
/// the distribution value).
macro_rules! latest_entry {
    ($account:literal) => {
        concat!(
            "
  LEFT JOIN LATERAL (SELECT seq, balance_after, held_after, pending_credits_after
                       FROM entries WHERE account_id = ",
            $account,
            " ORDER BY seq DESC LIMIT 1) e ON true"
        )
    };
}

/// Every divergent account (one node), in one snapshot with [`LEDGER_TOTAL`], `$1` at most.
/// Posted rows move `posted_amount` (NULL: the whole amount); pending rows move nothing yet
/// but count in `held` / `pending_credits`; voided and expired rows count nowhere.
pub(crate) const LEDGER_AUDIT: &str = concat!(
    "
WITH moves AS (
    SELECT to_account AS id, coalesce(posted_amount, amount) AS amount
      FROM transfers WHERE status = 'posted'
    UNION ALL
    SELECT from_account AS id, -coalesce(posted_amount, amount)
      FROM transfers WHERE status = 'posted'),
journal AS (
    SELECT id, sum(amount) AS net FROM moves GROUP BY id),
held AS (
    SELECT from_account AS id, sum(amount) AS held
      FROM transfers WHERE status = 'pending' GROUP BY from_account),
credits AS (
    SELECT to_account AS id, sum(amount) AS credits
      FROM transfers WHERE status = 'pending' GROUP BY to_account),
foreign_rows AS (
    SELECT x.id, count(*) AS n
      FROM (SELECT from_account AS id, currency FROM transfers
            UNION ALL
            SELECT to_account, currency FROM transfers) x
      JOIN accounts a ON a.id = x.id AND x.currency <> a.currency
     GROUP BY x.id)
SELECT ",
    account_state_columns!(
        "coalesce(j.net, 0)",
        "coalesce(h.held, 0)",
        "coalesce(c.credits, 0)",
        "coalesce(f.n, 0)"
    ),
    "
  FROM accounts a
  LEFT JOIN journal j USING (id)
  LEFT JOIN held h USING (id)
  LEFT JOIN credits c USING (id)
  LEFT JOIN foreign_rows f USING (id)",
    latest_entry!("a.id"),
    "
 WHERE a.balance <> coalesce(j.net, 0)
    OR a.held <> coalesce(h.held, 0)
    OR a.pending_credits <> coalesce(c.credits, 0)
    OR coalesce(f.n, 0) <> 0
    OR ((a.entry_seq <> 0 OR e.seq IS NOT NULL)
        AND (e.seq IS DISTINCT FROM a.entry_seq OR e.balance_after <> a.balance
             OR e.held_after <> a.held OR e.pending_credits_after <> a.pending_credits))
 ORDER BY a.id
 LIMIT $1"
);

/// One account's sums over the journal rows `t` joined to it.
macro_rules! account_sums {
    () => {
        account_state_columns!(
            "coalesce(sum(CASE WHEN t.status <> 'posted' THEN 0
                         WHEN t.to_account = a.id THEN coalesce(t.posted_amount, t.amount)
                         ELSE -coalesce(t.posted_amount, t.amount) END), 0)",
            "coalesce(sum(CASE WHEN t.status = 'pending' AND t.from_account = a.id
                         THEN t.amount ELSE 0 END), 0)",
            "coalesce(sum(CASE WHEN t.status = 'pending' AND t.to_account = a.id
                         THEN t.amount ELSE 0 END), 0)",
            "coalesce(sum(CASE WHEN t.currency <> a.currency THEN 1 ELSE 0 END), 0)"
        )
    };
}

/// One account (`$1`) against its own journal rows: on one node every row naming it; on Citus
/// its own side of each, all on its shard (`$1` on both tables, so it is routed whole): the
/// co-located check that each of its rows is in its currency.
pub const ACCOUNT_STATE: Sql = Sql::pair(
    concat!(
        "SELECT ",
        account_sums!(),
        "
  FROM accounts a
  LEFT JOIN transfers t ON t.from_account = a.id OR t.to_account = a.id",
        latest_entry!("a.id"),
        "
 WHERE a.id = $1
 GROUP BY a.id, a.balance, a.held, a.pending_credits, a.min_balance, a.max_balance,
          a.currency, a.entry_seq, e.seq, e.balance_after, e.held_after,
          e.pending_credits_after"
    ),
    concat!(
        "SELECT ",
        account_sums!(),
        "
  FROM accounts a
  LEFT JOIN transfers t ON t.account_id = a.id AND t.account_id = $1",
        latest_entry!("$1"),
        "
 WHERE a.id = $1
 GROUP BY a.id, a.balance, a.held, a.pending_credits, a.min_balance, a.max_balance,
          a.currency, a.entry_seq, e.seq, e.balance_after, e.held_after,
          e.pending_credits_after"
    ),
);

/// Every transfer whose reversal counters (`reversed`, `reversals`) differ from the reversals
/// that name it (their amounts summed, their rows counted), and every reversal naming a
/// transfer that is not there (`t_id` NULL), `$1` at most. Sums as text, see [`LEDGER_TOTAL`].
/// On Citus per side: a reversal moves money between its original's two accounts, so every
/// side of an original sits on the shard of the same account as the sides of its reversals,
/// and the join and the grouping are on the distribution column (each shard answers from its
/// own snapshot, which holds an original's side and its reversals' sides together: they are
/// written by one transaction per reversal, under the locks of those accounts).
pub(crate) const REVERSAL_AUDIT: Sql = Sql::pair(
    "
WITH r AS (
    SELECT reverses AS id, sum(amount) AS total, count(*) AS n
      FROM transfers WHERE reverses IS NOT NULL GROUP BY reverses)
SELECT coalesce(t.id, r.id) AS transfer_id, NULL::bigint AS account_id, t.id AS t_id,
       coalesce(r.total, 0)::text AS expected_reversed, coalesce(t.reversed, 0) AS reversed,
       coalesce(r.n, 0)::bigint AS expected_reversals, coalesce(t.reversals, 0)::bigint AS reversals
  FROM transfers t
  FULL JOIN r USING (id)
 WHERE t.id IS NULL
    OR t.reversed <> coalesce(r.total, 0) OR t.reversals <> coalesce(r.n, 0)
 ORDER BY 1 LIMIT $1",
    "
WITH r AS (
    SELECT account_id, reverses AS id, sum(amount) AS total, count(*) AS n
      FROM transfers WHERE reverses IS NOT NULL GROUP BY account_id, reverses)
SELECT coalesce(t.id, r.id) AS transfer_id, coalesce(t.account_id, r.account_id) AS account_id,
       t.id AS t_id,
       coalesce(r.total, 0)::text AS expected_reversed, coalesce(t.reversed, 0) AS reversed,
       coalesce(r.n, 0)::bigint AS expected_reversals, coalesce(t.reversals, 0)::bigint AS reversals
  FROM transfers t
  FULL JOIN r ON r.account_id = t.account_id AND r.id = t.id
 WHERE t.id IS NULL
    OR t.reversed <> coalesce(r.total, 0) OR t.reversals <> coalesce(r.n, 0)
 ORDER BY 1, 2 LIMIT $1",
);

/// One page of product ids above `$1` (a multi-shard read on Citus).
pub(crate) const PRODUCT_PAGE: &str =
    "SELECT product_id FROM stock WHERE product_id > $1 ORDER BY product_id LIMIT $2";
/// One page of account ids above `$1`.
pub(crate) const ACCOUNT_PAGE: &str = "SELECT id FROM accounts WHERE id > $1 ORDER BY id LIMIT $2";

/// Citus: the one-shot read of the double entry over every shard, with no common snapshot: per
/// transfer id, its sides summed up and its router row, kept when they disagree. Both inputs
/// are materialised (read once each, by Citus, shard by shard) and joined on the coordinator.
/// Min = max checks that both sides carry the same terms (a reversal's original and what was
/// reversed of a transfer included). `$1`: most ids returned.
pub(crate) const SUSPECTS: &str = "
WITH sides AS MATERIALIZED (
    SELECT id, count(*) AS n,
           sum(CASE WHEN account_id = from_account THEN 1 ELSE 0 END) AS debits,
           sum(CASE WHEN account_id = to_account THEN 1 ELSE 0 END) AS credits,
           min(from_account) AS from_min, max(from_account) AS from_max,
           min(to_account) AS to_min, max(to_account) AS to_max,
           min(amount) AS amount_min, max(amount) AS amount_max,
           min(kind) AS kind_min, max(kind) AS kind_max,
           min(status) AS status_min, max(status) AS status_max,
           min(currency) AS currency_min, max(currency) AS currency_max,
           count(posted_amount) AS posted_n,
           min(posted_amount) AS posted_min, max(posted_amount) AS posted_max,
           count(reverses) AS reverses_n,
           min(reverses) AS reverses_min, max(reverses) AS reverses_max,
           min(reversed) AS reversed_min, max(reversed) AS reversed_max
      FROM transfers GROUP BY id),
routes AS MATERIALIZED (
    SELECT id, from_account, to_account FROM transfer_ids)
SELECT coalesce(s.id, r.id) AS id
  FROM sides s FULL JOIN routes r ON r.id = s.id
 WHERE r.id IS NULL OR s.id IS NULL
    OR s.n <> 2 OR s.debits <> 1 OR s.credits <> 1
    OR s.from_min <> r.from_account OR s.from_max <> r.from_account
    OR s.to_min <> r.to_account OR s.to_max <> r.to_account
    OR s.amount_min <> s.amount_max OR s.kind_min <> s.kind_max
    OR s.status_min <> s.status_max OR s.currency_min <> s.currency_max
    OR s.posted_n NOT IN (0, 2) OR s.posted_min <> s.posted_max
    OR s.reverses_n NOT IN (0, 2) OR s.reverses_min <> s.reverses_max
    OR s.reversed_min <> s.reversed_max
 ORDER BY 1
 LIMIT $1";

/// Citus: the prepared transactions of this database on every node, as `node:gid` with the
/// relations each holds a lock on (a prepared transaction keeps its locks: on a worker, the
/// shards it wrote; its locks are found through the one on its own transaction id). The
/// workers' are read through Citus; the coordinator's (it may hold shards and reference tables)
/// and an unreachable worker's come with no relation list, which counts as "may touch
/// anything", and so does an empty one.
pub(crate) const IN_FLIGHT: &str = "
SELECT w.nodename || ':' || w.nodeport || ':' || (x ->> 'gid') AS key, x -> 'rels' AS rels
  FROM run_command_on_workers($w$
         SELECT coalesce(json_agg(json_build_object(
                  'gid', p.gid,
                  'rels', (SELECT coalesce(json_agg(DISTINCT l.relation::regclass::text), '[]')
                             FROM pg_locks l
                             JOIN pg_locks x ON x.virtualtransaction = l.virtualtransaction
                            WHERE x.locktype = 'transactionid'
                              AND x.transactionid = p.transaction
                              AND l.locktype = 'relation'))), '[]')
           FROM pg_prepared_xacts p WHERE p.database = current_database()$w$) w,
       json_array_elements(CASE WHEN w.success THEN w.result::json ELSE '[]' END) x
UNION ALL
SELECT 'coordinator:' || gid, NULL FROM pg_prepared_xacts WHERE database = current_database()
UNION ALL
SELECT 'unreachable:' || nodename || ':' || nodeport, NULL
  FROM run_command_on_workers('SELECT 1') WHERE NOT success";

/// Citus: the shards a 2PC writing transfer `$2` between accounts `$1` must hold: the journal
/// shard of each account and the id's `transfer_ids` shard.
pub(crate) const TRANSFER_SHARDS: &str = "
SELECT shard_name('transfers'::regclass,
                  get_shard_id_for_distribution_column('transfers', a))::text
  FROM unnest($1::bigint[]) a
UNION ALL
SELECT shard_name('transfer_ids'::regclass,
                  get_shard_id_for_distribution_column('transfer_ids', $2::text))::text";

/// Citus: an id's router row (routed by the id).
pub(crate) const TRANSFER_ROUTE: &str =
    "SELECT from_account, to_account FROM transfer_ids WHERE id = $1";
/// Citus: every side of an id (every shard of the journal, through its index on `id`).
pub(crate) const TRANSFER_SIDES: &str =
    "SELECT account_id, from_account, to_account, amount, kind, status, posted_amount, \
            currency, reverses, reversed FROM transfers WHERE id = $1 ORDER BY account_id";

#[cfg(test)]
mod tests {
    use super::*;

    /// The Citus form filters every table by the product itself and never by "any product";
    /// the single-node one filters through the joins and takes NULL for all.
    #[test]
    fn the_product_state_is_one_template_in_two_forms() {
        let (single, citus) = (PRODUCT_STATE.single(), PRODUCT_STATE.citus());
        assert!(!citus.contains("IS NULL OR"));
        assert_eq!(
            single.matches("($1::bigint IS NULL OR").count(),
            8,
            "5 filters, and the 3 reads of state_changes"
        );
        for alias in ["m", "r", "f", "i"] {
            let filter = format!("WHERE {alias}.product_id = $1 AND {alias}.");
            assert!(citus.contains(&filter), "{filter}");
            assert!(!single.contains(&filter), "{filter}");
        }
        assert!(citus.ends_with("WHERE s.product_id = $1"));
        assert!(STOCK_AUDIT.contains(single));
    }

    #[test]
    fn the_account_state_reads_the_same_columns_in_both_forms() {
        let columns = |sql: &str| sql[..sql.find("FROM accounts").expect("from")].to_owned();
        assert_eq!(
            columns(ACCOUNT_STATE.single()),
            columns(ACCOUNT_STATE.citus())
        );
        assert!(ACCOUNT_STATE.citus().contains("t.account_id = $1"));
    }
}
