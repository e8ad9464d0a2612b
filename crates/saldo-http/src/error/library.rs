//! What each library error answers over HTTP: one entry per [`saldo::Error`] variant, giving
//! its status, problem `type` slug and title, and the extension members that name its subject
//! (`product_id`, `order_id`, `account`, …). The detail is the error's own message unless the
//! entry says otherwise.
//!
//! The entries are grouped by family, one function each: bad input and unknown names (422,
//! 404), stock refusals, order refusals, money refusals (409, a few 422), answers that nothing
//! was applied or that the outcome is unknown (503, `Retry-After`), and bugs (500). A family
//! answers `None` for a variant that is not its own. The variant walk in
//! `tests/suite/errors.rs` names every variant, so one added to the library without an entry
//! here (it would answer 500) fails there.

use saldo::Error;
use serde_json::Value;
use tokio_postgres::error::SqlState;

use super::parts::Parts;

/// The problem `e` answers.
pub(super) fn parts(e: &Error) -> Parts {
    input_or_unknown(e)
        .or_else(|| stock(e))
        .or_else(|| stock_layout(e))
        .or_else(|| orders(e))
        .or_else(|| money(e))
        .or_else(|| transfers(e))
        .or_else(|| not_applied(e))
        .or_else(|| bug(e))
        .unwrap_or_else(Parts::internal)
        .or_detail(|| e.to_string())
}

/// Input the domain refused, and names nothing has.
fn input_or_unknown(e: &Error) -> Option<Parts> {
    Some(match e {
        // A cursor of another list, shape or filters: its own type, so a client knows to
        // start the list again without one.
        Error::Input(saldo::InputError::CursorInvalid { list }) => {
            Parts::invalid("cursor-invalid", "Cursor invalid").with("list", list)
        }
        Error::Input(_) => Parts::invalid("invalid-input", "Invalid input"),
        Error::UnknownProduct(p) => {
            Parts::not_found("unknown-product", "Unknown product").with("product_id", p)
        }
        Error::NotABundle(p) => {
            Parts::not_found("not-a-bundle", "Product is not a bundle").with("product_id", p)
        }
        Error::UnknownLocation {
            product_id,
            location_id,
        } => Parts::not_found("unknown-location", "Product not stocked at that location")
            .with("product_id", product_id)
            .with("location_id", location_id),
        Error::NoSuchLocation(l) => {
            Parts::not_found("unknown-location", "Unknown location").with("location_id", l)
        }
        Error::UnknownOrder(o) => {
            Parts::not_found("unknown-order", "Unknown order").with("order_id", o)
        }
        Error::UnknownAccount(a) => {
            Parts::not_found("unknown-account", "Unknown account").with("account", a)
        }
        Error::NoBalanceAt { account, at } => {
            Parts::not_found("no-balance-at", "No balance at that time")
                .with("account", account)
                .with("at", at)
        }
        Error::UnknownTransfer(t) => {
            Parts::not_found("unknown-transfer", "Unknown transfer").with("transfer_id", t)
        }
        Error::UnknownWebhook(id) => {
            Parts::not_found("unknown-webhook", "Unknown webhook").with("webhook_id", id)
        }
        Error::TooManyWebhooks { max } => {
            Parts::conflict("too-many-webhooks", "Too many webhooks").with("max", max)
        }
        Error::WebhookTargetRefused(_) => {
            Parts::invalid("webhook-target-refused", "Webhook target refused")
        }
        Error::WebhookKeyMismatch => Parts::unavailable(
            "webhook-key-mismatch",
            "Webhook key differs between services",
        ),
        _ => return None,
    })
}

/// A product's stock refused the change.
fn stock(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::InsufficientStock {
            product_id,
            requested,
            available,
        } => Parts::conflict("insufficient-stock", "Insufficient stock")
            .with("product_id", product_id)
            .with("requested", requested)
            .with("available", available),
        Error::CountBelowReserved {
            product_id,
            count,
            reserved,
        } => Parts::conflict("count-below-reserved", "Count below reserved units")
            .with("product_id", product_id)
            .with("count", count)
            .with("reserved", reserved),
        Error::AdjustmentWouldGoNegative {
            product_id,
            delta,
            available,
        } => Parts::conflict("would-go-negative", "Adjustment would make stock negative")
            .with("product_id", product_id)
            .with("delta", delta)
            .with("available", available),
        Error::StockWouldExceedLimit {
            product_id,
            on_hand_after,
            max,
            ..
        } => Parts::conflict("stock-limit", "Stock would exceed its limit")
            .with("product_id", product_id)
            .with("on_hand_after", on_hand_after)
            .with("max", max),
        Error::BackorderLimitBelowBackordered {
            product_id,
            limit,
            backordered,
        } => Parts::conflict(
            "backorder-limit-below-backordered",
            "Backorder limit below the units backordered",
        )
        .with("product_id", product_id)
        .with("backorder_limit", limit)
        .with("backordered", backordered),
        _ => return None,
    })
}

/// What a product's layout (per location, backorders, Citus) or its version refused.
fn stock_layout(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::StockedByLocation(p) => {
            Parts::conflict("stocked-by-location", "Product stocked per location")
                .with("product_id", p)
        }
        Error::ProductIsBundle(p) => {
            Parts::conflict("product-is-bundle", "Product is a bundle").with("product_id", p)
        }
        Error::BundleHoldsStock(p) => Parts::conflict(
            "bundle-holds-stock",
            "Product holds stock, is stocked per location or takes backorders",
        )
        .with("product_id", p),
        Error::ComponentOfBundle {
            product_id,
            bundle_id,
        } => Parts::conflict("component-of-bundle", "Product is a component of a bundle")
            .with("product_id", product_id)
            .with("bundle_id", bundle_id),
        Error::LocationRetired(l) => {
            Parts::conflict("location-retired", "Location retired").with("location_id", l)
        }
        Error::LocationNotEmpty {
            location_id,
            available,
            reserved,
            in_states,
        } => Parts::conflict("location-not-empty", "Location still holds units")
            .with("location_id", location_id)
            .with("available", available)
            .with("reserved", reserved)
            .with("in_states", in_states),
        Error::UnsupportedOnCitus(operation) => {
            Parts::conflict("unsupported-on-citus", "Operation not supported on Citus")
                .with("operation", operation)
        }
        // The units may still be there: the same request may succeed (`Retry-After`).
        Error::VersionConflict {
            product_id,
            attempts,
        } => Parts::conflict("version-conflict", "Version conflict, try again")
            .with("product_id", product_id)
            .with("attempts", attempts)
            .retry(),
        _ => return None,
    })
}

/// One idempotency key used again with another payload: the same `type` for every kind of
/// key, the field naming which.
fn idempotency_conflict(key: &str, id: impl serde::Serialize) -> Parts {
    Parts::conflict("idempotency-conflict", "Idempotency conflict").with(key, id)
}

/// An order's reservations refused the change.
fn orders(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::IdempotencyConflict(o) => idempotency_conflict("order_id", o),
        Error::SaleConflict(s) => idempotency_conflict("sale_id", s),
        Error::NothingToRereserve(o) => {
            Parts::conflict("nothing-to-rereserve", "Nothing to re-reserve").with("order_id", o)
        }
        Error::NotRereservable {
            order_id,
            product_id,
            ..
        } => Parts::conflict("not-rereservable", "Product cannot be re-reserved")
            .with("order_id", order_id)
            .with("product_id", product_id),
        Error::ReservationExpired {
            order_id,
            product_id,
        } => Parts::conflict("reservation-expired", "Reservation expired")
            .with("order_id", order_id)
            .with("product_id", product_id),
        Error::NotReleasable {
            order_id,
            product_id,
            status,
        } => Parts::conflict("order-not-releasable", "Order not releasable")
            .with("order_id", order_id)
            .with("product_id", product_id)
            .with("reservation_status", status.as_str()),
        Error::NotInOrder {
            order_id,
            product_id,
        } => Parts::not_found("not-in-order", "Product not in the order")
            .with("order_id", order_id)
            .with("product_id", product_id),
        Error::ReturnConflict(r) => idempotency_conflict("return_id", r),
        Error::MoveConflict(m) => idempotency_conflict("move_id", m),
        Error::MoveShort {
            product_id,
            state,
            location_id,
            held,
            requested,
        } => {
            let parts = Parts::conflict("move-exceeds-stock", "Move exceeds what its source holds")
                .with("product_id", product_id)
                .with("state", state)
                .with("held", held)
                .with("requested", requested);
            match location_id {
                Some(l) => parts.with("location_id", l),
                None => parts,
            }
        }
        Error::ReturnExceedsConfirmed {
            order_id,
            product_id,
            confirmed,
            returned,
            requested,
        } => Parts::conflict(
            "return-exceeds-confirmed",
            "Return exceeds what was confirmed",
        )
        .with("order_id", order_id)
        .with("product_id", product_id)
        .with("confirmed", confirmed)
        .with("returned", returned)
        .with("requested", requested),
        Error::NothingToExtend(o) => {
            Parts::conflict("nothing-to-extend", "Nothing to extend").with("order_id", o)
        }
        Error::HoldLimitExceeded {
            order_id,
            product_id,
            max_hold_s,
        } => Parts::invalid("hold-limit", "Past the maximum hold")
            .with("order_id", order_id)
            .with("product_id", product_id)
            .with("max_hold_s", max_hold_s),
        _ => return None,
    })
}

/// An account's limits refused the movement; the account already exists.
fn money(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::AccountExists(a) => {
            Parts::conflict("account-exists", "Account exists").with("account", a)
        }
        Error::InsufficientFunds {
            account,
            requested,
            balance,
            held,
            min_balance,
        } => Parts::conflict("insufficient-funds", "Insufficient funds")
            .with("account", account)
            .with("limit", "min_balance")
            .with("min_balance", min_balance)
            .with("requested", requested)
            .with("balance", balance)
            .with("held", held),
        Error::MaxBalanceExceeded {
            account,
            requested,
            balance,
            pending_credits,
            max_balance,
        } => Parts::conflict("max-balance-exceeded", "Max balance exceeded")
            .with("account", account)
            .with("limit", "max_balance")
            .with("max_balance", max_balance)
            .with("requested", requested)
            .with("balance", balance)
            .with("pending_credits", pending_credits),
        Error::BalanceOutOfRange { account } => {
            Parts::conflict("balance-out-of-range", "Balance out of range").with("account", account)
        }
        Error::CurrencyMismatch {
            from,
            to,
            from_currency,
            to_currency,
            from_scale,
            to_scale,
        } => Parts::conflict("currency-mismatch", "Currency mismatch")
            .with("from", from)
            .with("to", to)
            .with("from_currency", from_currency)
            .with("to_currency", to_currency)
            .with("from_scale", from_scale)
            .with("to_scale", to_scale),
        _ => return None,
    })
}

/// A transfer, a hold or a linked group refused.
fn transfers(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::TransferConflict(t) => idempotency_conflict("transfer_id", t),
        Error::GroupConflict(g) => idempotency_conflict("group_id", g),
        Error::TransferNotPending {
            id,
            status,
            posted_amount,
        } => Parts::conflict("transfer-not-pending", "Transfer not pending")
            .with("transfer_id", id)
            .with("transfer_status", status)
            .with("posted_amount", posted_amount),
        Error::PostExceedsHold {
            id,
            requested,
            held,
        } => Parts::invalid("post-exceeds-hold", "Post exceeds the hold")
            .with("transfer_id", id)
            .with("requested", requested)
            .with("held", held),
        Error::TransferNotPosted { id, status } => {
            Parts::conflict("transfer-not-posted", "Transfer not posted")
                .with("transfer_id", id)
                .with("transfer_status", status)
        }
        // A conflict with the transfer's state (what earlier reversals left), not bad input.
        Error::ReversalExceedsPosted {
            id,
            posted,
            reversed,
            requested,
        } => Parts::conflict(
            "reversal-exceeds-posted",
            "Reversal exceeds what was posted",
        )
        .with("transfer_id", id)
        .with("posted_amount", posted)
        .with("reversed_amount", reversed)
        .with("requested", requested),
        // The group answers as its first failure does, naming the transfer and its position.
        Error::GroupRefused {
            group,
            index,
            transfer,
            source,
        } => parts(source)
            .detail(e.to_string())
            .with("group_id", group)
            .with("failed_index", index)
            .with("failed_transfer_id", transfer),
        _ => return None,
    })
}

/// Not now: nothing was applied (say so with `applied`), or a COMMIT's answer was lost and
/// only a replay tells (`applied: null`).
fn not_applied(e: &Error) -> Option<Parts> {
    Some(match e {
        Error::Overloaded(_) => Parts::unavailable("overloaded", "Overloaded, try again"),
        Error::ProductLocked(p) => database_timeout().with("product_id", p),
        Error::DeadlineExceeded { .. } => Parts::unavailable(
            "deadline-exceeded",
            "Not applied: the request's deadline passed",
        )
        .detail(format!("{e}; sending the same request again is safe"))
        .with("applied", false),
        Error::OutcomeUnknown { .. } => Parts::unavailable(
            "outcome-unknown",
            "Outcome unknown: replay the request to learn it",
        )
        .with("applied", Value::Null),
        Error::Pool(_) => database_unavailable("no database connection could be had in time"),
        Error::CursorExpired { cursor } => Parts::new(
            axum::http::StatusCode::GONE,
            "cursor-expired",
            "Cursor older than the events kept",
        )
        .detail(format!(
            "events after cursor {cursor} were pruned by retention, so the feed cannot say \
             what changed since: take the feed's end first (GET /v1/events?after=end answers \
             `next`), resynchronise your copy from the list endpoints (GET /v1/products, \
             /v1/orders, /v1/accounts), then follow the feed from that `next` (a change made \
             while you resynchronised is then seen again, never missed)"
        ))
        .with("cursor", cursor),
        Error::ConnectionLost { .. } => {
            database_unavailable("the database connection was lost before the commit")
        }
        Error::RetriesExhausted {
            attempts, sqlstate, ..
        } => contention(sqlstate).detail(format!(
            "the transaction was rerun {attempts} times and still conflicted"
        )),
        Error::Database(db) => database(db),
        _ => return None,
    })
}

/// Bugs and broken deployments: 500, the cause in the log only.
fn bug(e: &Error) -> Option<Parts> {
    match e {
        Error::Migration(_) | Error::Invariant(_) => Some(Parts::internal()),
        _ => None,
    }
}

/// A database error by its SQLSTATE: timeouts and contention (nothing applied, retry), a lost
/// connection, or (any other) a bug.
fn database(e: &tokio_postgres::Error) -> Parts {
    // No SQLSTATE: the connection itself failed.
    let Some(code) = e.code() else {
        return database_unavailable("the database connection failed");
    };
    if *code == SqlState::LOCK_NOT_AVAILABLE || *code == SqlState::QUERY_CANCELED {
        database_timeout()
            .detail("a lock or statement timeout expired; nothing was applied")
            .with("sqlstate", code.code())
    } else if *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::T_R_SERIALIZATION_FAILURE
    {
        contention(code.code()).detail("the transaction conflicted with another one")
    } else if server_went_away(code) || saldo::error::is_citus_node_failure(e) {
        database_unavailable("the database connection failed")
    } else {
        Parts::internal()
    }
}

/// The server went away mid-request: the connection failed (class 08), or the server is
/// shutting down or crashed (57P01/57P02/57P03). (Any other error followed by the loss of the
/// connection, such as a Citus coordinator's internal error when its postmaster dies, reaches
/// here as the library's `ConnectionLost`, known by the connection's state, not its text; and
/// Citus's own "a node went away" errors, XX000 from its executor, are told by their source file:
/// `saldo::error::is_citus_node_failure`.)
fn server_went_away(code: &SqlState) -> bool {
    let class = code.code();
    class.starts_with("08") || class.starts_with("57P")
}

/// A lock or statement timeout: the transaction was rolled back.
fn database_timeout() -> Parts {
    Parts::unavailable("database-timeout", "Database timeout, try again").with("applied", false)
}

/// A deadlock or serialization failure that retrying did not get past.
fn contention(sqlstate: &str) -> Parts {
    Parts::unavailable("contention", "Too much contention, try again").with("sqlstate", sqlstate)
}

/// No connection, or one that failed before COMMIT was sent (a COMMIT whose answer was lost is
/// the library's `OutcomeUnknown`): nothing was applied.
pub(super) fn database_unavailable(detail: &str) -> Parts {
    Parts::unavailable("database-unavailable", "Database unavailable")
        .detail(detail)
        .with("applied", false)
}
