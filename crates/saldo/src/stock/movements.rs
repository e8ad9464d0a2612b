//! The vocabulary of a product's movements (V22): what made a write of its stock row
//! ([`MoveKind`]) and a movement as a statement reads it ([`Movement`]); a leaf beside
//! `model`. The flows name the cause of their writes with [`MoveKind::cause`] before writing;
//! the store's journal (`store::journal`) records one movement per stock-row write.

use chrono::{DateTime, Utc};

use crate::domain::ProductId;
use crate::store::journal::Cause;

/// What made a movement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveKind {
    /// The counters a product had when movements began (V22), or a fixture's.
    Opening,
    /// A stock count (an arrival), with the backorders it filled.
    Count,
    /// An adjustment by a signed quantity, with the backorders it filled.
    Adjustment,
    Reserve,
    Confirm,
    Release,
    Expire,
    Sale,
    Return,
    Repair,
    /// A backorder limit set (its counters unchanged).
    Policy,
    /// A move of units between `available` and the non-sellable states (V21; a move between
    /// two states that are not `available` leaves these counters as they were).
    Move,
    /// A write whose flow named no cause (none does: the tests look for it).
    Other,
}

impl MoveKind {
    pub const ALL: [MoveKind; 13] = [
        MoveKind::Opening,
        MoveKind::Count,
        MoveKind::Adjustment,
        MoveKind::Reserve,
        MoveKind::Confirm,
        MoveKind::Release,
        MoveKind::Expire,
        MoveKind::Sale,
        MoveKind::Return,
        MoveKind::Repair,
        MoveKind::Policy,
        MoveKind::Move,
        MoveKind::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MoveKind::Opening => "opening",
            MoveKind::Count => "count",
            MoveKind::Adjustment => "adjustment",
            MoveKind::Reserve => "reserve",
            MoveKind::Confirm => "confirm",
            MoveKind::Release => "release",
            MoveKind::Expire => "expire",
            MoveKind::Sale => "sale",
            MoveKind::Return => "return",
            MoveKind::Repair => "repair",
            MoveKind::Policy => "policy",
            MoveKind::Move => "move",
            MoveKind::Other => crate::store::journal::UNNAMED,
        }
    }

    pub fn parse(s: &str) -> Option<MoveKind> {
        MoveKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The cause a flow sets on its transaction before writing (`Tx::cause`).
    pub fn cause(self) -> Cause {
        Cause::new(self.as_str())
    }
}

/// One line of a product's stock statement: what happened, the change, and the counters right
/// after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement {
    pub product: ProductId,
    /// The stock row's version after the write: gap-free per product.
    pub seq: i64,
    pub kind: MoveKind,
    pub order_id: Option<String>,
    pub sale_id: Option<String>,
    pub return_id: Option<String>,
    /// The stock move's id (kind `move`).
    pub move_id: Option<String>,
    /// The change: these counters minus the previous movement's (none before: zero).
    pub available_delta: i32,
    pub reserved_delta: i32,
    pub backordered_delta: i32,
    pub available_after: i32,
    pub reserved_after: i32,
    pub backordered_after: i32,
    pub at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for k in MoveKind::ALL {
            assert_eq!(MoveKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(MoveKind::parse("moved"), None);
    }
}
