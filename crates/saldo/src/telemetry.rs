//! Metric names and the few helpers that record them, through the `metrics` facade (the
//! exporter belongs to the service). Labels are bounded: operation names and SQLSTATEs only,
//! never a product or an order id.
//!
//! [`describe`] is the library's half of the registration the service does at startup: a HELP
//! text for every family, and every counter registered at zero with each label value it can
//! take, so a scraper sees `saldo_tx_retries_total{…} 0` before the first retry (a rate over a
//! series that appears only with its first event misses that event). A new metric gets its
//! name here, a row in [`FAMILIES`], and its known label values in the lists below; the
//! `operation` label takes its values from [`Operation::SERVED`].

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use tokio_postgres::error::SqlState;

use crate::error::Error;
use crate::operation::Operation;

pub const TX_RETRIES: &str = "saldo_tx_retries_total";
pub const TX_GIVEUPS: &str = "saldo_tx_giveups_total";
pub const CHECK_VIOLATIONS: &str = "saldo_check_violations_total";
pub const RESERVATIONS: &str = "saldo_reservations_total";
pub const SETTLED: &str = "saldo_reservations_settled_total";
pub const EXTENSIONS: &str = "saldo_reservation_extensions_total";
pub const SALES: &str = "saldo_sales_total";
pub const CONFIRMED_WITH_MISSING: &str = "saldo_orders_confirmed_with_missing_total";
pub const STOCK_LOCK_WAIT: &str = "saldo_stock_lock_wait_seconds";
pub const VERSION_CONFLICTS: &str = "saldo_stock_version_conflicts_total";
pub const TRANSFERS: &str = "saldo_ledger_transfers_total";
/// Transactions run through `retry::in_transaction` (once per call, whatever its attempts): the
/// denominator of the retry rate.
pub const TRANSACTIONS: &str = "saldo_tx_total";
/// Operations answered "not applied" because their deadline came first, by operation.
pub const DEADLINE_EXCEEDED: &str = "saldo_deadline_exceeded_total";
/// COMMITs whose answer was lost (deadline or connection): the caller was told to replay.
pub const OUTCOME_UNKNOWN: &str = "saldo_outcome_unknown_total";
/// Duration of one transaction of the batched stock engine (a batch, or an order run alone;
/// retries included) and the orders it answered, by operation.
pub const BATCH_SECONDS: &str = "saldo_batch_seconds";
pub const BATCH_ORDERS: &str = "saldo_batch_orders";
/// The same for the batched ledger engine.
pub const LEDGER_BATCH_SECONDS: &str = "saldo_ledger_batch_seconds";
pub const LEDGER_BATCH_OPERATIONS: &str = "saldo_ledger_batch_operations";
/// Events committed by write transactions, by stream type (counted after COMMIT).
pub const EVENTS_WRITTEN: &str = "saldo_events_written_total";
/// Events the sequencer put in the feed.
pub const EVENTS_SEQUENCED: &str = "saldo_events_sequenced_total";
/// Events retention deleted from the feed.
pub const EVENTS_PRUNED: &str = "saldo_events_pruned_total";
/// Age of the oldest committed event not yet in the feed (0 when none).
pub const EVENT_FEED_LAG: &str = "saldo_event_feed_lag_seconds";
/// Webhook delivery attempts by outcome (`ok`: answered 2xx; `failed`: anything else).
pub const WEBHOOK_DELIVERIES: &str = "saldo_webhook_deliveries_total";
/// Webhook subscriptions whose attempts ran out (resume them).
pub const WEBHOOKS_FAILING: &str = "saldo_webhooks_failing";
/// Age of the oldest feed event some subscription has not received yet.
pub const WEBHOOK_OLDEST_UNDELIVERED: &str = "saldo_webhook_oldest_undelivered_seconds";
/// `outcome` values of [`WEBHOOK_DELIVERIES`].
pub const WEBHOOK_OUTCOMES: &[&str] = &["ok", "failed"];

/// The SQLSTATEs that rerun a transaction (deadlock detected, serialization failure, and the
/// unique violation of an event stream position two transactions took at once).
pub const RETRY_SQLSTATES: &[&str] = &["40P01", "40001", "23505"];
/// `outcome` values of [`RESERVATIONS`] (see `stock::flows::reserve::outcome`).
pub const RESERVATION_OUTCOMES: &[&str] = &[
    "reserved",
    "replayed",
    "insufficient_stock",
    "idempotency_conflict",
    "not_rereservable",
    "unknown_order",
    "deadline_exceeded",
    "product_locked",
    "outcome_unknown",
    "version_conflict",
    "unknown_product",
    "unknown_location",
    "invalid",
    "error",
];
/// `outcome` values of [`EXTENSIONS`] (see `stock::flows::extend`).
pub const EXTENSION_OUTCOMES: &[&str] = &[
    "extended",
    "expired",
    "hold_limit",
    "nothing_to_extend",
    "unknown_order",
    "error",
];
/// `outcome` values of [`SALES`] (see `stock::flows::sales`).
pub const SALE_OUTCOMES: &[&str] = &[
    "sold",
    "replayed",
    "insufficient_stock",
    "unknown_product",
    "unknown_location",
    "idempotency_conflict",
    "error",
];
/// `stream_type` values of [`EVENTS_WRITTEN`] (`store::outbox::StreamType::ALL`; a test there
/// keeps them equal).
pub const EVENT_STREAM_TYPES: &[&str] =
    &["product", "order", "sale", "account", "transfer", "move"];
/// `status` values of [`SETTLED`].
pub const SETTLED_STATUSES: &[&str] = &["confirmed", "released", "expired"];
/// `kind` and `outcome` values of [`TRANSFERS`] (see `ledger::observe`).
pub const TRANSFER_KINDS: &[&str] = &[
    "transfer",
    "opening",
    "deposit",
    "withdrawal",
    "hold",
    "group",
    "post",
    "void",
    "reverse",
];
pub const TRANSFER_OUTCOMES: &[&str] = &[
    "applied",
    "replayed",
    "insufficient_funds",
    "unknown_account",
    "account_exists",
    "conflict",
    "out_of_range",
    "currency_mismatch",
    "max_balance",
    "not_pending",
    "not_posted",
    "exceeds_posted",
    "unknown_transfer",
    "group_refused",
    "invalid",
    "error",
];

/// Whether a family counts or measures.
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every library metric family: name, kind, unit, HELP text.
const FAMILIES: &[(&str, Kind, Unit, &str)] = &[
    (
        TRANSACTIONS,
        Kind::Counter,
        Unit::Count,
        "Transactions run by operation (once per call, however many attempts).",
    ),
    (
        TX_RETRIES,
        Kind::Counter,
        Unit::Count,
        "Transactions rerun from BEGIN after a deadlock (40P01) or serialization failure (40001).",
    ),
    (
        TX_GIVEUPS,
        Kind::Counter,
        Unit::Count,
        "Transactions that failed with 40P01/40001 on their last allowed attempt.",
    ),
    (
        CHECK_VIOLATIONS,
        Kind::Counter,
        Unit::Count,
        "CHECK constraint violations that reached a caller: a write without its condition.",
    ),
    (
        DEADLINE_EXCEEDED,
        Kind::Counter,
        Unit::Count,
        "Operations answered not applied because their deadline came first.",
    ),
    (
        OUTCOME_UNKNOWN,
        Kind::Counter,
        Unit::Count,
        "COMMITs whose answer was lost: the caller was told to replay.",
    ),
    (
        RESERVATIONS,
        Kind::Counter,
        Unit::Count,
        "Reserve requests by outcome.",
    ),
    (
        SALES,
        Kind::Counter,
        Unit::Count,
        "Direct sales (available straight to sold) by outcome.",
    ),
    (
        EXTENSIONS,
        Kind::Counter,
        Unit::Count,
        "Hold extensions by outcome (expired: the sweeper won the race).",
    ),
    (
        SETTLED,
        Kind::Counter,
        Unit::Count,
        "Reservation rows settled, by status: confirmed, released or expired.",
    ),
    (
        CONFIRMED_WITH_MISSING,
        Kind::Counter,
        Unit::Count,
        "Confirms that found items expired or released before payment (refund or re-reserve).",
    ),
    (
        VERSION_CONFLICTS,
        Kind::Counter,
        Unit::Count,
        "Optimistic stock updates that found another version.",
    ),
    (
        TRANSFERS,
        Kind::Counter,
        Unit::Count,
        "Ledger movements by kind and outcome.",
    ),
    (
        STOCK_LOCK_WAIT,
        Kind::Histogram,
        Unit::Seconds,
        "Time a stock write waited for its rows, by strategy.",
    ),
    (
        BATCH_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "Duration of one batched transaction, by operation.",
    ),
    (
        BATCH_ORDERS,
        Kind::Histogram,
        Unit::Count,
        "Orders in one batched transaction, by operation.",
    ),
    (
        LEDGER_BATCH_SECONDS,
        Kind::Histogram,
        Unit::Seconds,
        "Duration of one batched ledger transaction.",
    ),
    (
        LEDGER_BATCH_OPERATIONS,
        Kind::Histogram,
        Unit::Count,
        "Ledger operations in one batched transaction.",
    ),
    (
        EVENTS_WRITTEN,
        Kind::Counter,
        Unit::Count,
        "Events committed by write transactions, by stream type (counted after COMMIT).",
    ),
    (
        EVENTS_SEQUENCED,
        Kind::Counter,
        Unit::Count,
        "Events the sequencer put in the feed.",
    ),
    (
        EVENTS_PRUNED,
        Kind::Counter,
        Unit::Count,
        "Events deleted from the feed by retention.",
    ),
    (
        EVENT_FEED_LAG,
        Kind::Gauge,
        Unit::Seconds,
        "Age of the oldest committed event not yet in the feed (0 when none), as of the last \
         background sequencer pass.",
    ),
    (
        WEBHOOK_DELIVERIES,
        Kind::Counter,
        Unit::Count,
        "Webhook delivery attempts by outcome (ok: the receiver answered 2xx).",
    ),
    (
        WEBHOOKS_FAILING,
        Kind::Gauge,
        Unit::Count,
        "Webhook subscriptions whose attempts ran out: nothing is sent until resumed.",
    ),
    (
        WEBHOOK_OLDEST_UNDELIVERED,
        Kind::Gauge,
        Unit::Seconds,
        "Age of the oldest feed event a webhook subscription has not received yet.",
    ),
];

/// Registers the HELP text of every library metric and every counter at zero with its known
/// label values. Needs the process's recorder installed first; idempotent.
pub fn describe() {
    for (name, kind, unit, help) in FAMILIES {
        match kind {
            Kind::Counter => describe_counter!(*name, *unit, *help),
            Kind::Gauge => describe_gauge!(*name, *unit, *help),
            Kind::Histogram => describe_histogram!(*name, *unit, *help),
        }
    }
    for &outcome in WEBHOOK_OUTCOMES {
        metrics::counter!(WEBHOOK_DELIVERIES, "outcome" => outcome).increment(0);
    }
    metrics::gauge!(WEBHOOKS_FAILING).set(0.0);
    metrics::gauge!(WEBHOOK_OLDEST_UNDELIVERED).set(0.0);
    for operation in Operation::SERVED.iter().map(|o| o.as_str()) {
        for family in [
            TRANSACTIONS,
            CHECK_VIOLATIONS,
            DEADLINE_EXCEEDED,
            OUTCOME_UNKNOWN,
        ] {
            metrics::counter!(family, "operation" => operation).increment(0);
        }
        for &sqlstate in RETRY_SQLSTATES {
            for family in [TX_RETRIES, TX_GIVEUPS] {
                metrics::counter!(family, "operation" => operation, "sqlstate" => sqlstate)
                    .increment(0);
            }
        }
    }
    let by_outcome = [
        (RESERVATIONS, RESERVATION_OUTCOMES),
        (SALES, SALE_OUTCOMES),
        (EXTENSIONS, EXTENSION_OUTCOMES),
    ];
    for (family, outcomes) in by_outcome {
        for &outcome in outcomes {
            metrics::counter!(family, "outcome" => outcome).increment(0);
        }
    }
    for &status in SETTLED_STATUSES {
        metrics::counter!(SETTLED, "status" => status).increment(0);
    }
    for &kind in TRANSFER_KINDS {
        for &outcome in TRANSFER_OUTCOMES {
            metrics::counter!(TRANSFERS, "kind" => kind, "outcome" => outcome).increment(0);
        }
    }
    metrics::counter!(CONFIRMED_WITH_MISSING).increment(0);
    metrics::counter!(VERSION_CONFLICTS).increment(0);
    for &kind in EVENT_STREAM_TYPES {
        metrics::counter!(EVENTS_WRITTEN, "stream_type" => kind).increment(0);
    }
    metrics::counter!(EVENTS_SEQUENCED).increment(0);
    metrics::counter!(EVENTS_PRUNED).increment(0);
    metrics::gauge!(EVENT_FEED_LAG).set(0.0);
}

/// Events of one stream type a COMMIT made durable.
pub(crate) fn events_written(stream_type: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(EVENTS_WRITTEN, "stream_type" => stream_type).increment(n);
    }
}

pub(crate) fn events_sequenced(n: usize) {
    if n > 0 {
        metrics::counter!(EVENTS_SEQUENCED).increment(n as u64);
    }
}

pub(crate) fn events_pruned(n: u64) {
    if n > 0 {
        metrics::counter!(EVENTS_PRUNED).increment(n);
    }
}

pub(crate) fn event_feed_lag(seconds: f64) {
    metrics::gauge!(EVENT_FEED_LAG).set(seconds);
}

/// One webhook delivery attempt: ok (2xx) or failed.
pub(crate) fn webhook_delivery(ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!(WEBHOOK_DELIVERIES, "outcome" => outcome).increment(1);
}

/// The webhook gauges, as last observed.
pub(crate) fn webhook_gauges(failing: i64, oldest_undelivered_s: f64) {
    metrics::gauge!(WEBHOOKS_FAILING).set(failing as f64);
    metrics::gauge!(WEBHOOK_OLDEST_UNDELIVERED).set(oldest_undelivered_s);
}

/// One call of `retry::in_transaction`.
pub(crate) fn transaction(operation: Operation) {
    metrics::counter!(TRANSACTIONS, "operation" => operation.as_str()).increment(1);
}

pub(crate) fn tx_retry(operation: Operation, sqlstate: &str) {
    metrics::counter!(TX_RETRIES, "operation" => operation.as_str(), "sqlstate" => sqlstate.to_owned())
        .increment(1);
}

pub(crate) fn tx_giveup(operation: Operation, sqlstate: &str) {
    metrics::counter!(TX_GIVEUPS, "operation" => operation.as_str(), "sqlstate" => sqlstate.to_owned())
        .increment(1);
}

/// Counts CHECK violations: each one is a code path that tried to write without the condition.
pub(crate) fn observe_error(operation: Operation, e: &Error) {
    if e.sqlstate() == Some(&SqlState::CHECK_VIOLATION) {
        metrics::counter!(CHECK_VIOLATIONS, "operation" => operation.as_str()).increment(1);
        tracing::error!(operation = operation.as_str(), error = %e, "CHECK constraint violated");
    }
}

pub(crate) fn reservation_outcome(outcome: &'static str) {
    metrics::counter!(RESERVATIONS, "outcome" => outcome).increment(1);
}

pub(crate) fn sale_outcome(outcome: &'static str) {
    metrics::counter!(SALES, "outcome" => outcome).increment(1);
}

pub(crate) fn extension_outcome(outcome: &'static str) {
    metrics::counter!(EXTENSIONS, "outcome" => outcome).increment(1);
}

pub(crate) fn settled(status: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(SETTLED, "status" => status).increment(n);
    }
}

/// One optimistic UPDATE that found another version (a re-read follows, or VersionConflict).
pub(crate) fn version_conflict() {
    metrics::counter!(VERSION_CONFLICTS).increment(1);
}
