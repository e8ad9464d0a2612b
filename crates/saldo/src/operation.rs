//! Every operation the library runs against the database, by name.
//!
//! An [`Operation`] names each transaction ([`crate::store::retry::in_transaction`]), each
//! single read taken through [`crate::store::retry::checkout`], the queue a batched job waits in,
//! and the errors that say what was not applied ([`crate::Error::DeadlineExceeded`],
//! [`crate::Error::OutcomeUnknown`]). Its text is the `operation` label of the metrics, and
//! [`Operation::SERVED`] is the list the metrics register at zero: a new operation is a new
//! variant here, nothing else to keep in step. A leaf: imports nothing from the crate.

use std::fmt;

/// Declares [`Operation`], its names and [`Operation::SERVED`] from one list, so the three cannot
/// drift apart.
macro_rules! operations {
    (
        served: { $($served:ident => $served_name:literal,)* }
        lab: { $($(#[$lab_doc:meta])* $lab:ident => $lab_name:literal,)* }
    ) => {
        /// The name of one kind of database work.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Operation {
            $($served,)*
            $($(#[$lab_doc])* $lab,)*
        }

        impl Operation {
            /// Every operation a running service can perform: the label values the metrics
            /// register at zero ([`crate::telemetry::describe`]). The lab's own are left out.
            pub const SERVED: &'static [Operation] = &[$(Operation::$served,)*];

            /// The name in metrics, logs and error messages.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Operation::$served => $served_name,)*
                    $(Operation::$lab => $lab_name,)*
                }
            }
        }
    };
}

operations! {
    served: {
        // Stock.
        Reserve => "reserve",
        ReserveBatch => "reserve_batch",
        Confirm => "confirm",
        ConfirmBatch => "confirm_batch",
        Release => "release",
        LockProbe => "lock_probe",
        Order => "order",
        Extend => "extend",
        Sell => "sell",
        Return => "return",
        Move => "move",
        Sweep => "sweep",
        SetCount => "set_count",
        Adjust => "adjust",
        SetPolicy => "set_policy",
        SetLocationCount => "set_location_count",
        SetLocationPriority => "set_location_priority",
        RetireLocation => "retire_location",
        DeclareBundle => "declare_bundle",
        StockRead => "stock",
        Repair => "repair",
        // Money.
        OpenAccount => "open_account",
        Deposit => "deposit",
        Withdraw => "withdraw",
        Transfer => "transfer",
        Hold => "hold",
        Post => "post",
        Void => "void",
        Reverse => "reverse",
        TransferGroup => "transfer_group",
        ExpireHolds => "expire_holds",
        LedgerBatch => "ledger_batch",
        LedgerRead => "ledger_read",
        // Operators.
        AuditStock => "audit_stock",
        AuditLedger => "audit_ledger",
        Locks => "locks",
        Deadlocks => "deadlocks",
        ListProducts => "list_products",
        ListOrders => "list_orders",
        ListLocations => "list_locations",
        ListAccounts => "list_accounts",
        ListTransfers => "list_transfers",
        ListEntries => "list_entries",
        ListMovements => "list_movements",
        // The event feed.
        Events => "events",
        PruneEvents => "prune_events",
        SequenceEvents => "sequence_events",
        // Webhooks: the admin routes and the delivery worker.
        Webhooks => "webhooks",
        WebhookDelivery => "webhook_delivery",
        // A service request as a whole, when its operation outlives the request's deadline.
        Request => "request",
    }
    lab: {
        /// The lab's and the bench's fixtures (bulk resets and loads; never served).
        Fixture => "fixture",
        /// The race lab's own statements (its naive exhibits and its checks; never served).
        Lab => "lab",
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Operation;

    #[test]
    fn names_are_distinct_and_the_lab_is_not_served() {
        let mut names: Vec<&str> = Operation::SERVED.iter().map(|o| o.as_str()).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "two operations share a name");
        assert!(!Operation::SERVED.contains(&Operation::Lab));
        assert!(!Operation::SERVED.contains(&Operation::Fixture));
    }
}
