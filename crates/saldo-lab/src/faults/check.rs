//! The history check: a settled [`Record`] history against the database read directly
//! ([`read_books`]) and the service's own audit ([`audit`]). Each [`Check`] names one promise:
//!
//! - no answer was an internal error (a 5xx other than 503), and every outcome was learned;
//! - every acknowledged operation applied exactly once, as asked;
//! - nothing answered "not applied" applied, and nothing nobody was told about was written;
//! - units conserved: counted + restocked = available + reserved + confirmed, per product, with
//!   reserved and confirmed what the answers said;
//! - money conserved: every balance its opening plus what the answers moved, the sum zero;
//! - no hold both posted and voided, no reservation both confirmed and released;
//! - `GET /v1/admin/audit` clean.
//!
//! [`check`] is a pure function of the history, the opening and the books, so that each check
//! can be shown to fail on a broken history or a tampered book (`check/tests.rs`).

mod books;
mod ledger;
mod stock;
mod types;

use std::time::Duration;

pub use books::read_books;
pub use types::{
    AccountRow, Books, Check, Opening, ReservationRow, StockRow, TransferRow, Violation,
};

use crate::faults::history::{Record, Verdict};
use crate::faults::http::{self, Answer, Request};
use types::Found;

/// Every broken promise of `history` (settled) against `books`; empty when all hold.
pub fn check(history: &[Record], opening: &Opening, books: &Books) -> Vec<Violation> {
    let mut found = Found::default();
    answers(history, &mut found);
    let units = stock::check(history, books, &mut found);
    stock::units(opening, books, &units, &mut found);
    let moves = ledger::check(history, books, &mut found);
    ledger::money(opening, books, &moves, &mut found);
    found.0
}

/// No internal error among the answers (replays included); every outcome learned.
fn answers(history: &[Record], found: &mut Found) {
    for record in history {
        for answer in record.answers() {
            if let Answer::Status(status @ (500..=502 | 504..=599), body) = answer {
                found.add(
                    Check::NoInternalError,
                    format!("{:?} was answered {status}: {body}", record.op),
                );
            }
        }
        if record.outcome() == Verdict::Unknown {
            found.add(
                Check::Settled,
                format!(
                    "{:?}: outcome still unknown after {} replays",
                    record.op,
                    record.replays.len()
                ),
            );
        }
    }
}

/// `GET /v1/admin/audit` on the service at `addr`: a violation unless it answers 200 with
/// `"ok": true`.
pub async fn audit(addr: &str, admin_token: &str) -> Vec<Violation> {
    let request = Request {
        method: "GET",
        path: "/v1/admin/audit".into(),
        body: None,
    };
    let answer = http::send(addr, admin_token, &request, AUDIT_TIMEOUT).await;
    match &answer {
        Answer::Status(200, body) if body["ok"] == serde_json::json!(true) => Vec::new(),
        _ => vec![Violation {
            check: Check::Audit,
            detail: format!("the audit answered {answer:?}"),
        }],
    }
}

/// The audit waits (bounded) for 2PCs in flight on Citus; this bounds the whole request.
const AUDIT_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests;
