//! Metric names and the few helpers that record them, through the `metrics` facade (the
//! exporter belongs to the service). Labels are bounded: operation names and SQLSTATEs only,
//! never a product or an order id.

use tokio_postgres::error::SqlState;

use crate::error::Error;

pub const TX_RETRIES: &str = "saldo_tx_retries_total";
pub const TX_GIVEUPS: &str = "saldo_tx_giveups_total";
pub const CHECK_VIOLATIONS: &str = "saldo_check_violations_total";
pub const RESERVATIONS: &str = "saldo_reservations_total";
pub const SETTLED: &str = "saldo_reservations_settled_total";
pub const CONFIRMED_WITH_MISSING: &str = "saldo_orders_confirmed_with_missing_total";
pub const STOCK_LOCK_WAIT: &str = "saldo_stock_lock_wait_seconds";
pub const VERSION_CONFLICTS: &str = "saldo_stock_version_conflicts_total";
pub const TRANSFERS: &str = "saldo_ledger_transfers_total";
/// Operations answered "not applied" because their deadline came first, by operation.
pub const DEADLINE_EXCEEDED: &str = "saldo_deadline_exceeded_total";
/// COMMITs whose answer was lost (deadline or connection): the caller was told to replay.
pub const OUTCOME_UNKNOWN: &str = "saldo_outcome_unknown_total";

pub(crate) fn tx_retry(operation: &'static str, sqlstate: &str) {
    metrics::counter!(TX_RETRIES, "operation" => operation, "sqlstate" => sqlstate.to_owned())
        .increment(1);
}

pub(crate) fn tx_giveup(operation: &'static str, sqlstate: &str) {
    metrics::counter!(TX_GIVEUPS, "operation" => operation, "sqlstate" => sqlstate.to_owned())
        .increment(1);
}

/// Counts CHECK violations: each one is a code path that tried to write without the condition.
pub(crate) fn observe_error(operation: &'static str, e: &Error) {
    if e.sqlstate() == Some(&SqlState::CHECK_VIOLATION) {
        metrics::counter!(CHECK_VIOLATIONS, "operation" => operation).increment(1);
        tracing::error!(operation, error = %e, "CHECK constraint violated");
    }
}

pub(crate) fn reservation_outcome(outcome: &'static str) {
    metrics::counter!(RESERVATIONS, "outcome" => outcome).increment(1);
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
