//! The stock side's vocabulary: requests, outcomes, rows as callers see them, strategy names.
//!
//! The leaf of `stock`: every layer above (the data access in `rows`, the pure decisions in
//! `decide`, the flows, the strategies and the engine) speaks these types, and nothing here
//! imports any of them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::audit::Finding;
use crate::domain::{
    AllocationMode, InputError, LocationId, MoveId, OrderId, OrderItems, Priority, ProductId,
    Quantity, Reason, RequestKey, ReturnId, SaleId, StockState, Tags, Ttl, MAX_ITEMS_PER_ORDER,
};
use crate::error::Error;
use crate::ledger::repair::LedgerRepairReport;

/// A request to reserve every item of an order, or none.
#[derive(Debug, Clone)]
pub struct ReserveRequest {
    pub order_id: OrderId,
    pub items: OrderItems,
    pub ttl: Ttl,
    /// The caller's reference and metadata for the order, if any (part of the idempotency
    /// comparison; the order keeps them for good).
    pub tags: Tags,
}

/// Where a reservation's units may come from: per item a pinned location (only there), else
/// the request's allocation mode over the product's locations. Only products stocked per
/// location look at it; the default (split, nothing pinned) is what a request that says
/// nothing means, and a request that says nothing never takes the located path unless one of
/// its products is located. Not part of the idempotency key: a replay answers what the first
/// request allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub allocation: AllocationMode,
    pub pinned: BTreeMap<ProductId, LocationId>,
}

impl Placement {
    pub fn is_default(&self) -> bool {
        self.allocation == AllocationMode::Split && self.pinned.is_empty()
    }
}

/// Units of one item at one location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocationQuantity {
    pub location_id: LocationId,
    pub quantity: i32,
}

/// A product's stock at one location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockLocation {
    pub location_id: LocationId,
    pub available: i32,
    pub reserved: i32,
    /// Its units in the non-sellable states.
    pub states: States,
}

/// Units in the non-sellable states (migration V21): not available, never reserved or sold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct States {
    pub damaged: i32,
    pub safety_stock: i32,
    pub incoming: i32,
}

impl States {
    /// The units in `state` (`None` for `available`, which is not one of these).
    pub fn get(&self, state: StockState) -> Option<i32> {
        match state {
            StockState::Available => None,
            StockState::Damaged => Some(self.damaged),
            StockState::SafetyStock => Some(self.safety_stock),
            StockState::Incoming => Some(self.incoming),
        }
    }

    /// Reads the state columns of a stock or location row, by name (`prefix` + state).
    pub(crate) fn of_row(row: &tokio_postgres::Row, prefix: &str) -> Result<Self, Error> {
        let get = |state: StockState| -> Result<i32, Error> {
            Ok(row.try_get(format!("{prefix}{}", state.as_str()).as_str())?)
        };
        Ok(States {
            damaged: get(StockState::Damaged)?,
            safety_stock: get(StockState::SafetyStock)?,
            incoming: get(StockState::Incoming)?,
        })
    }
}

/// One end of a move: a state, at a location for a product stocked per location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Place {
    pub state: StockState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_id: Option<LocationId>,
}

/// A request to move units of a product from one place to another; idempotent by `move_id`.
#[derive(Debug, Clone)]
pub struct MoveRequest {
    pub move_id: MoveId,
    pub product_id: ProductId,
    pub quantity: Quantity,
    pub from: Place,
    pub to: Place,
    pub reason: Reason,
}

/// A bundle: its components, and how many whole bundles their `available` units make now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bundle {
    pub product_id: ProductId,
    /// Derived: the least, over the components, of their `available` over their quantity.
    pub available: i32,
    pub components: Vec<BundleComponent>,
}

/// One component of a [`Bundle`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleComponent {
    pub product_id: ProductId,
    /// Units one bundle takes.
    pub quantity: i32,
    /// The component's own `available` when it was read.
    pub available: i32,
}

/// What a move did (or, replayed, what it did the first time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub move_id: MoveId,
    pub product_id: ProductId,
    pub quantity: i32,
    pub from: Place,
    pub to: Place,
    pub reason: String,
    pub moved_at: DateTime<Utc>,
    /// True when the move had been made before: nothing moved now.
    pub replayed: bool,
}

/// A request to take again what an order lost (expired or released before payment): "a
/// confirm reports the missing items, the caller may reserve them again", made explicit so that
/// a late retry of the order's reserve request never takes stock a second time.
#[derive(Debug, Clone)]
pub struct RereserveRequest {
    pub order_id: OrderId,
    /// This re-reserve's own idempotency key: a replay with the same key takes nothing again.
    pub rereserve_id: RequestKey,
    /// Which products, how many; `None` takes again every product the order lost, with the
    /// quantities it had. Each named product must be one the order lost.
    pub items: Option<OrderItems>,
    pub ttl: Ttl,
}

/// Status of one reservation row (see [`ReservationStatus`]).
pub use crate::domain::ReservationStatus as Status;

/// Reads a status column. The schema's CHECK allows only the four statuses, so anything else
/// means the schema and the code disagree: an error, never a guess.
pub(crate) fn parse_status(s: &str) -> Result<Status, Error> {
    Status::parse(s).ok_or_else(|| {
        Error::invariant(format!(
            "reservation status {s:?} is not one the schema allows"
        ))
    })
}

/// One product's part of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservedItem {
    pub product_id: ProductId,
    pub quantity: i32,
    pub status: Status,
    pub expires_at: DateTime<Utc>,
    /// Of `quantity`, the units not on hand yet (a backorder; `stock::backorders`): filled
    /// oldest first when units arrive. Absent from the JSON when 0, so an order of a product
    /// without a backorder policy answers exactly as before backorders existed.
    #[serde(skip_serializing_if = "is_zero")]
    pub backordered: i32,
    /// Where the allocated units came from (products stocked per location only; empty
    /// otherwise). Backordered units have no location until a fill gives them one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<LocationQuantity>,
    /// Of a confirmed line's units, those that came back (`stock::returns`). Absent from the
    /// JSON when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub returned: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Units a confirmed order still waits for: its backorder, filled (straight to sold) when
/// units arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PendingItem {
    pub product_id: ProductId,
    pub quantity: i32,
}

/// An order's state after `reserve` or `rereserve`: per product, its latest reservation row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reservation {
    pub order_id: OrderId,
    pub items: Vec<ReservedItem>,
    /// True when the request had been made before and changed nothing now (its items show what
    /// became of it since: active, confirmed, released or expired).
    pub replayed: bool,
    /// The order's reference and metadata, as its first request gave them.
    #[serde(flatten)]
    pub tags: Tags,
}

/// What `confirm` did: what the order now holds as sold, and what it lost before payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfirmOutcome {
    pub order_id: OrderId,
    pub confirmed: Vec<ReservedItem>,
    /// Products whose reservation expired or was released before the confirm: re-reserve or refund.
    pub missing: Vec<ReservedItem>,
    /// Backordered units of the confirmed items: sold, but not on hand yet (distinct from
    /// `missing`: nothing to re-reserve or refund, they ship when they arrive). Absent from the
    /// JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingItem>,
}

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseOutcome {
    pub order_id: OrderId,
    pub released: Vec<ReservedItem>,
}

/// A product's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stock {
    pub product_id: ProductId,
    pub available: i32,
    pub reserved: i32,
    pub version: i64,
    /// Most units that may be backordered (0: none, the default).
    pub backorder_limit: i32,
    /// Units backordered now: Σ backorders of live (active and confirmed) reservations.
    pub backordered: i32,
}

/// Names of the strategies the service may run: every one keeps every invariant under
/// concurrency. The race lab's naive strategies are not here: they live in `saldo-lab`
/// (`LabStrategy`), so nothing in this crate can build or serve them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyName {
    Atomic,
    Pessimistic,
    Optimistic,
    Batched,
}

impl StrategyName {
    /// Every strategy, in the order the lab prints them.
    pub const ALL: &'static [StrategyName] = &[
        StrategyName::Atomic,
        StrategyName::Pessimistic,
        StrategyName::Optimistic,
        StrategyName::Batched,
    ];

    pub fn parse(s: &str) -> Option<StrategyName> {
        StrategyName::ALL.iter().copied().find(|n| n.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyName::Atomic => "atomic",
            StrategyName::Pessimistic => "pessimistic",
            StrategyName::Optimistic => "optimistic",
            StrategyName::Batched => "batched",
        }
    }
}

impl std::fmt::Display for StrategyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A product's stock row as a take read it: enough to decide where an item the strategy could
/// not take from `available` goes (refused, backordered, or allocated over locations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub available: i32,
    pub backorder_limit: i32,
    pub backordered: i32,
    /// Stocked per location: its units are allocated over its locations, never taken from the
    /// row alone.
    pub located: bool,
}

/// A request to sell every item, or none.
#[derive(Debug, Clone)]
pub struct SaleRequest {
    pub sale_id: SaleId,
    pub items: OrderItems,
    /// The caller's reference and metadata, if any (part of the idempotency comparison).
    pub tags: Tags,
}

/// One product of a sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SoldItem {
    pub product_id: ProductId,
    pub quantity: i32,
    /// Where the units were sold from (products stocked per location only; empty, and absent
    /// from the JSON, otherwise), by location id.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<LocationQuantity>,
}

/// What a sale did (or, replayed, what it did the first time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sale {
    pub sale_id: SaleId,
    /// Per product, ascending.
    pub items: Vec<SoldItem>,
    pub sold_at: DateTime<Utc>,
    /// True when the sale had been made before: nothing was taken now.
    pub replayed: bool,
    /// Its reference and metadata, as stored.
    #[serde(flatten)]
    pub tags: Tags,
}

/// One product of a return: how many units come back, and where (a product stocked per
/// location; `None`: where its line was allocated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnItemRequest {
    pub product_id: ProductId,
    pub quantity: Quantity,
    pub location_id: Option<LocationId>,
    /// Where the units go: `available` (the default) or a non-sellable state.
    pub state: StockState,
}

/// A return's items: 1..=[`MAX_ITEMS_PER_ORDER`] products, each once, in ascending product id
/// (the lock order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReturnItems(Vec<ReturnItemRequest>);

impl ReturnItems {
    pub fn new(items: impl IntoIterator<Item = ReturnItemRequest>) -> Result<Self, InputError> {
        let mut out: BTreeMap<ProductId, ReturnItemRequest> = BTreeMap::new();
        for item in items {
            if out.len() >= MAX_ITEMS_PER_ORDER {
                return Err(InputError::TooManyItems {
                    max: MAX_ITEMS_PER_ORDER,
                });
            }
            let product = item.product_id;
            if out.insert(product, item).is_some() {
                return Err(InputError::DuplicateLine(product.get()));
            }
        }
        if out.is_empty() {
            return Err(InputError::EmptyOrder);
        }
        Ok(ReturnItems(out.into_values().collect()))
    }

    /// In ascending product id.
    pub fn iter(&self) -> impl Iterator<Item = &ReturnItemRequest> {
        self.0.iter()
    }
}

/// A request to bring confirmed units of an order back to `available`; idempotent by
/// `return_id`.
#[derive(Debug, Clone)]
pub struct ReturnRequest {
    pub return_id: ReturnId,
    pub order_id: OrderId,
    pub items: ReturnItems,
    pub reason: Reason,
}

/// One product of a return, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReturnedItem {
    pub product_id: ProductId,
    pub quantity: i32,
    /// Where the units went (products stocked per location only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_id: Option<LocationId>,
    /// The state the units went into.
    pub state: StockState,
}

/// What a return did (or, replayed, what it did the first time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Return {
    pub return_id: ReturnId,
    pub order_id: OrderId,
    /// Per product, ascending.
    pub items: Vec<ReturnedItem>,
    pub reason: String,
    pub returned_at: DateTime<Utc>,
    /// True when the return had been made before: nothing came back now.
    pub replayed: bool,
}

/// What an extension did: the order's current items, the extended ones with their new expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtendOutcome {
    pub order_id: OrderId,
    /// The active items, now expiring at `now + ttl`.
    pub extended: Vec<ReservedItem>,
}

/// A product's totals and its locations (empty for a product never given a location).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocatedStock {
    pub stock: Stock,
    /// The product's units in the non-sellable states (the sums of its locations').
    pub states: States,
    pub locations: Vec<StockLocation>,
    /// A bundle's components (its `available` then derived from theirs); `None` for a plain
    /// product.
    pub bundle: Option<Bundle>,
}

/// A location and its allocation priority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub location_id: LocationId,
    pub priority: Priority,
    /// When it was retired (it then takes no count, priority or stock); `None` while in use.
    pub retired_at: Option<DateTime<Utc>>,
}

/// A product's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub available: i64,
    pub reserved: i64,
    /// Units backordered (Σ live backorders; 0 for a product without backorders).
    pub backordered: i64,
}

/// What became (or would become) of one product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairAction {
    /// Dry run: this is what `apply` would write.
    Planned,
    /// Written, with its `repair: …` movement.
    Applied,
    /// Left alone: the row changed between the plan and the lock (its version moved).
    Changed,
    /// Left alone: the history says fewer units on hand than are actively reserved, or more
    /// than a count may hold; no row value can satisfy both invariants. Count the product.
    /// For a product stocked per location, also: no one reading of its locations agrees with
    /// the history (see [`crate::stock::repair`]); count its locations.
    Unrepairable,
}

/// A location's counters in a repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LocationCounts {
    pub available: i64,
    pub reserved: i64,
}

/// One location of a product stocked per location whose row a repair changes (or would).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocationRepair {
    pub location_id: LocationId,
    pub before: LocationCounts,
    pub after: LocationCounts,
}

/// One divergent product: its row as planned from, and the counters it should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProductRepair {
    pub product_id: ProductId,
    /// The row's version the plan was made against.
    pub version: i64,
    pub before: Counts,
    pub after: Counts,
    /// A product stocked per location: the location rows the repair changes (or would), in
    /// location order; empty otherwise, and when unrepairable.
    pub locations: Vec<LocationRepair>,
    pub action: RepairAction,
}

impl ProductRepair {
    /// Old and new values (`backordered` only when it moves, so a product without backorders
    /// reads as before) and the version: what the movement's reason and the CLI say.
    pub fn describe(&self) -> String {
        let backordered = if self.before.backordered == self.after.backordered {
            String::new()
        } else {
            format!(
                ", backordered {} -> {}",
                self.before.backordered, self.after.backordered
            )
        };
        // The count only: the locations are in the report, and a reason is bounded.
        let locations = match self.locations.len() {
            0 => String::new(),
            1 => ", 1 location".to_owned(),
            n => format!(", {n} locations"),
        };
        format!(
            "available {} -> {}, reserved {} -> {}{backordered}{locations} (version {})",
            self.before.available,
            self.after.available,
            self.before.reserved,
            self.after.reserved,
            self.version
        )
    }
}

/// A whole repair: every divergent product, what the ledger repair did, and what the audit
/// says afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    pub applied: bool,
    pub products: Vec<ProductRepair>,
    /// The ledger's part: per divergent account, and what no write can fix, with why.
    pub ledger: LedgerRepairReport,
    /// The whole audit after the repair, stock and ledger (dry run: the audit as it stands):
    /// empty only when everything is clean.
    pub remaining: Vec<Finding>,
}

// ---- The engine's own rows (not part of any answer) ------------------------------------------

/// One reservation row as the engine decides on it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub id: Uuid,
    pub order_id: String,
    /// `None` for rows written by the order's own reserve request; the re-reserve's key else.
    pub request_key: Option<String>,
    /// Transaction start of the request that wrote the row: rows of one request share it.
    pub created_at: DateTime<Utc>,
    /// The row has `reservation_allocations` (written by the located path).
    pub allocated: bool,
    /// Stored active but past its expiry: expired for every operation (its `item` says
    /// `expired`), its units still counted reserved until a transaction that holds it (or the
    /// sweeper) settles it as expired.
    pub lapsed: bool,
    /// The order's event position when this row was last written (the greatest over an order's
    /// rows is the position of its latest event).
    pub order_position: i64,
    /// The order's reference and metadata on the rows of its first request; none on others.
    pub tags: Tags,
    pub item: ReservedItem,
}

/// One allocation of a reservation row.
#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    pub reservation_id: Uuid,
    pub product: i64,
    pub location: LocationId,
    pub quantity: i32,
}

/// A live backorder waiting for units, as a fill reads it (locked).
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub id: Uuid,
    pub order_id: String,
    pub product_id: ProductId,
    pub status: Status,
    pub backordered: i32,
    pub arrival: i64,
}

/// One backorder filled by an arrival: `units` of it, sold at once when it was confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fill {
    pub id: Uuid,
    pub order_id: String,
    pub product_id: ProductId,
    pub arrival: i64,
    pub units: i32,
    pub sold: bool,
    /// The order's event position of this fill (its `backorder.filled` event).
    pub position: i64,
}
