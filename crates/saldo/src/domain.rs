//! Domain newtypes: parse, don't validate. Every constructor rejects bad input with an
//! [`InputError`], so the engine never sees an invalid id, quantity or order.
//!
//! A leaf module: it imports nothing else from the crate (`error` re-exports [`InputError`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// Input rejected before any database work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("product id must be a positive integer, got {0}")]
    ProductIdNotPositive(i64),
    #[error("order id must be 1-64 characters from [A-Za-z0-9._:-]")]
    OrderIdInvalid,
    #[error("rereserve id must be 1-64 characters from [A-Za-z0-9._:-]")]
    RequestKeyInvalid,
    #[error("quantity must be positive, got {0}")]
    QuantityNotPositive(i64),
    #[error("quantity {quantity} is above the limit of {max} per product")]
    QuantityTooLarge { quantity: i64, max: i32 },
    #[error("an order may hold at most {max} items")]
    TooManyItems { max: usize },
    #[error("an order needs at least one item")]
    EmptyOrder,
    #[error("ttl {ttl_s}s is outside {min}..={max}s")]
    TtlOutOfRange { ttl_s: u64, min: u64, max: u64 },
    #[error("count {0} is outside 0..=1000000000")]
    CountOutOfRange(i64),
    #[error("delta {0} must be non-zero and at most 1000000000 in magnitude")]
    DeltaOutOfRange(i64),
    #[error("reason must be 1..={max} characters")]
    ReasonLength { max: usize },
    #[error("reason must not contain control characters (NUL, newline, tab, escape…)")]
    ReasonControlCharacter,
    #[error("account id must be a positive integer, got {0}")]
    AccountIdNotPositive(i64),
    #[error("transfer id must be 1-64 characters from [A-Za-z0-9._:-]")]
    TransferIdInvalid,
    #[error("limit {limit} is outside 1..={max}")]
    PageLimitOutOfRange { limit: i64, max: u32 },
    #[error("cursor is not one this list of {list} handed out; start again without a cursor")]
    CursorInvalid { list: &'static str },
    /// A stream name that is not `<product|order|sale|account|transfer>:<id>`.
    #[error(
        "stream {0:?} is not <product|order|sale|account|transfer>:<id> (an id of 1-64 characters \
         from [A-Za-z0-9._:-])"
    )]
    StreamInvalid(String),
    /// An event type the feed does not hold (a filter naming it would never match).
    #[error("event type {0:?} is unknown; known types: {1}")]
    EventTypeUnknown(String, String),
    #[error("a filter names at most {max} event types")]
    TooManyEventTypes { max: usize },
    #[error("amount {amount} is outside 1..={max}")]
    AmountOutOfRange { amount: i64, max: i64 },
    #[error("a transfer needs two different accounts")]
    SameAccount,
    #[error("timeout_s {timeout_s} is outside {min}..={max}")]
    TransferTimeoutOutOfRange { timeout_s: i64, min: u32, max: u32 },
    #[error("transfer group id must be 1-64 characters from [A-Za-z0-9._:-]")]
    GroupIdInvalid,
    #[error("a transfer group holds 1..={max} transfers, got {len}")]
    GroupSize { len: usize, max: usize },
    #[error("transfer {0} appears twice in the group")]
    GroupDuplicateTransfer(String),
    #[error("{limit} {value} is outside -{max}..={max}")]
    LimitOutOfRange {
        limit: &'static str,
        value: i64,
        max: i64,
    },
    #[error("max_balance {max_balance} is below min_balance {min_balance}")]
    LimitsInverted { min_balance: i64, max_balance: i64 },
    #[error(
        "opening balance {opening_balance} is outside the account's limits (min_balance \
         {min_balance}, max_balance {})",
        .max_balance.map_or_else(|| "none".to_owned(), |m| m.to_string())
    )]
    OpeningOutsideLimits {
        opening_balance: i64,
        min_balance: i64,
        max_balance: Option<i64>,
    },
    /// A currency code not of the shape `^[A-Z][A-Z0-9_]{2,11}$` (names what was sent, cut to
    /// 32 characters).
    #[error("currency {0:?} is not an ISO 4217 or asset code (^[A-Z][A-Z0-9_]{{2,11}}$)")]
    CurrencyInvalid(String),
    #[error("scale {scale} is outside 0..={max}")]
    ScaleOutOfRange { scale: i64, max: u8 },
    #[error("sale id must be 1-64 characters from [A-Za-z0-9._:-]")]
    SaleIdInvalid,
    #[error("location id must be 1-64 characters from [A-Za-z0-9._:-]")]
    LocationIdInvalid,
    #[error("priority {0} is outside -1000000..=1000000")]
    PriorityOutOfRange(i64),
    #[error("allocation must be \"single\" or \"split\"")]
    AllocationInvalid,
    #[error("product {0} appears with two different locations in one order")]
    LocationConflict(i64),
    #[error("a product may be stocked at {max} locations at most")]
    TooManyLocations { max: usize },
    #[error("maximum hold {max_hold_s}s is outside {min}..={max}s")]
    MaxHoldOutOfRange { max_hold_s: u64, min: u64, max: u64 },
    #[error("backorder_limit {0} is outside 0..={max}", max = MAX_BACKORDER_LIMIT)]
    BackorderLimitOutOfRange(i64),
    /// A webhook URL that is not an absolute `http`/`https` URL without userinfo, within the
    /// length limit (the reason says which).
    #[error("webhook url: {0}")]
    WebhookUrlInvalid(String),
    #[error("unknown event type {0:?}")]
    WebhookTypeUnknown(String),
    #[error("a webhook names at most {max} event types")]
    WebhookTooManyTypes { max: usize },
    #[error("webhook id {0:?} is not a UUID")]
    WebhookIdInvalid(String),
    #[error("reference must be 1..={max} characters", max = MAX_REFERENCE_LEN)]
    ReferenceLength,
    #[error("reference must not contain control characters (NUL, newline, tab, escape…)")]
    ReferenceControlCharacter,
    /// Metadata past one of its bounds; the text says which.
    #[error("metadata: {0}")]
    MetadataInvalid(String),
    #[error("return id must be 1-64 characters from [A-Za-z0-9._:-]")]
    ReturnIdInvalid,
    /// A bundle declared with itself among its components.
    #[error("product {0} cannot be a component of itself")]
    BundleOfItself(i64),
    /// A list of an order's lines (`product_ids`, a return's items) naming a product twice.
    #[error("product {0} is named twice")]
    DuplicateLine(i64),
    /// A stock state that is not one of [`StockState::ALL`] (shown cut to 32 characters).
    #[error("unknown stock state {0:?}: one of \"available\", \"damaged\", \"safety_stock\", \"incoming\"")]
    StateUnknown(String),
    #[error("move id must be 1-64 characters from [A-Za-z0-9._:-]")]
    MoveIdInvalid,
    /// A move whose source and destination are the same state at the same location.
    #[error("a move must change the state or the location of its units")]
    MoveGoesNowhere,
}

/// Most distinct items one order may hold.
pub const MAX_ITEMS_PER_ORDER: usize = 100;
/// Largest quantity of one product in one order (after summing repeated items).
pub const MAX_QUANTITY: i32 = 10_000;
/// Largest physical count or adjustment magnitude.
pub const MAX_STOCK_COUNT: i32 = 1_000_000_000;
/// Most units of one product that may be backordered at once (its `backorder_limit` at most).
/// Also bounds the reservation rows one arrival of units can fill (each holds at least one).
pub const MAX_BACKORDER_LIMIT: i32 = 100_000;
/// Longest and shortest reservation time-to-live.
pub const MAX_TTL_S: u64 = 24 * 60 * 60;
pub const MIN_TTL_S: u64 = 1;
/// How long a reservation may be held in all, extensions included, counted from when it was
/// made: the default, and the bounds of what an operator may set (`serve --max-hold`).
pub const DEFAULT_MAX_HOLD_S: u64 = 24 * 60 * 60;
pub const MIN_MAX_HOLD_S: u64 = 60;
pub const MAX_MAX_HOLD_S: u64 = 7 * 24 * 60 * 60;
/// Default reservation time-to-live (fifteen minutes covers card payments).
pub const DEFAULT_TTL_S: u64 = 15 * 60;
/// Longest adjustment reason.
pub const MAX_REASON_LEN: usize = 200;
/// Longest order id.
pub const MAX_ORDER_ID_LEN: usize = 64;

/// `Deserialize` through the validating constructor: a derived one would build the newtype from
/// any raw value, and a value deserialized from outside would skip the checks every other path
/// goes through.
macro_rules! deserialize_via {
    ($ty:ident, $raw:ty, $new:path) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $new(<$raw>::deserialize(deserializer)?).map_err(serde::de::Error::custom)
            }
        }
    };
}

deserialize_via!(ProductId, i64, ProductId::new);
deserialize_via!(OrderId, String, OrderId::new);
deserialize_via!(RequestKey, String, RequestKey::new);
deserialize_via!(SaleId, String, SaleId::new);
deserialize_via!(ReturnId, String, ReturnId::new);
deserialize_via!(LocationId, String, LocationId::new);
deserialize_via!(Quantity, i64, Quantity::new);
deserialize_via!(AccountId, i64, AccountId::new);
deserialize_via!(TransferId, String, TransferId::new);
deserialize_via!(Amount, i64, Amount::new);
deserialize_via!(Reference, String, Reference::new);
deserialize_via!(Metadata, BTreeMap<String, String>, Metadata::new);

/// A product: a positive 64-bit integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ProductId(i64);

impl ProductId {
    pub fn new(raw: i64) -> Result<Self, InputError> {
        if raw > 0 {
            Ok(ProductId(raw))
        } else {
            Err(InputError::ProductIdNotPositive(raw))
        }
    }
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ProductId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An order id: an opaque string of 1–64 characters from `[A-Za-z0-9._:-]` (a UUID fits).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct OrderId(String);

impl OrderId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(OrderId(raw))
        } else {
            Err(InputError::OrderIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The idempotency key of a re-reserve (`POST /v1/orders/{id}/rereserve`): the same alphabet
/// as order ids. An order's own reserve request is keyed by the order id; each re-reserve of
/// what expired or was released is a request of its own, and a replay of it with the same key
/// takes nothing again, whatever happened to the rows it wrote.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct RequestKey(String);

impl RequestKey {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(RequestKey(raw))
        } else {
            Err(InputError::RequestKeyInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A direct sale's id (`POST /v1/sales`): its idempotency key, in the order id alphabet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct SaleId(String);

impl SaleId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(SaleId(raw))
        } else {
            Err(InputError::SaleIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SaleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A return's id (`POST /v1/orders/{id}/returns`): its idempotency key, in the order id
/// alphabet; unique across orders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ReturnId(String);

impl ReturnId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(ReturnId(raw))
        } else {
            Err(InputError::ReturnIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReturnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A stock move's id (`POST /v1/products/{id}/moves`): its idempotency key, in the order id
/// alphabet; unique per product (the route is the product's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct MoveId(String);

impl MoveId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(MoveId(raw))
        } else {
            Err(InputError::MoveIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MoveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a unit of stock is (besides `reserved`, which only orders move): `available` (what a
/// take reads) or one of the non-sellable states (migration V21), which nothing reserves or
/// sells. A fixed set: one column per state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StockState {
    Available,
    Damaged,
    SafetyStock,
    Incoming,
}

impl StockState {
    /// Every state, in the order the answers list them.
    pub const ALL: [StockState; 4] = [
        StockState::Available,
        StockState::Damaged,
        StockState::SafetyStock,
        StockState::Incoming,
    ];

    /// The name clients use, which is also the column holding the state's units.
    pub fn as_str(self) -> &'static str {
        match self {
            StockState::Available => "available",
            StockState::Damaged => "damaged",
            StockState::SafetyStock => "safety_stock",
            StockState::Incoming => "incoming",
        }
    }

    /// The state named `raw` ([`InputError::StateUnknown`] otherwise).
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        StockState::ALL
            .into_iter()
            .find(|s| s.as_str() == raw)
            .ok_or_else(|| InputError::StateUnknown(raw.chars().take(32).collect()))
    }

    /// Its position in [`StockState::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Some lines of an order, by product: 1..=[`MAX_ITEMS_PER_ORDER`] distinct products, in
/// ascending order (a partial confirm or release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines(std::collections::BTreeSet<ProductId>);

impl Lines {
    /// Refuses an empty list, more than [`MAX_ITEMS_PER_ORDER`] products, and a product named
    /// twice (a client that names one twice meant something else: say so).
    pub fn new(products: impl IntoIterator<Item = i64>) -> Result<Self, InputError> {
        let mut set = std::collections::BTreeSet::new();
        for raw in products {
            if set.len() >= MAX_ITEMS_PER_ORDER {
                return Err(InputError::TooManyItems {
                    max: MAX_ITEMS_PER_ORDER,
                });
            }
            if !set.insert(ProductId::new(raw)?) {
                return Err(InputError::DuplicateLine(raw));
            }
        }
        if set.is_empty() {
            return Err(InputError::EmptyOrder);
        }
        Ok(Lines(set))
    }

    pub fn contains(&self, product: ProductId) -> bool {
        self.0.contains(&product)
    }

    /// The products in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = ProductId> + '_ {
        self.0.iter().copied()
    }
}

/// A stock location (a warehouse, a store): the order id alphabet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct LocationId(String);

impl LocationId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(LocationId(raw))
        } else {
            Err(InputError::LocationIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LocationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Locations one product may be stocked at, at most: an allocation reads and locks them all.
pub const MAX_LOCATIONS_PER_PRODUCT: usize = 64;
/// A location's priority lies in `-MAX_PRIORITY..=MAX_PRIORITY` (lower allocates first).
pub const MAX_PRIORITY: i32 = 1_000_000;

/// A location's allocation priority: lower first, ties by location id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Priority(i32);

impl Priority {
    pub fn new(raw: i64) -> Result<Self, InputError> {
        match i32::try_from(raw) {
            Ok(p) if (-MAX_PRIORITY..=MAX_PRIORITY).contains(&p) => Ok(Priority(p)),
            _ => Err(InputError::PriorityOutOfRange(raw)),
        }
    }
    pub fn get(self) -> i32 {
        self.0
    }
}

/// How a reservation item with no location of its own is allocated across locations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocationMode {
    /// Each item from one location: the first by priority that has enough.
    Single,
    /// Fill from locations in priority order (the default).
    #[default]
    Split,
}

impl AllocationMode {
    pub fn parse(raw: &str) -> Result<Self, InputError> {
        match raw {
            "single" => Ok(AllocationMode::Single),
            "split" => Ok(AllocationMode::Split),
            _ => Err(InputError::AllocationInvalid),
        }
    }
}

/// The id alphabet shared by order ids and transfer ids.
pub(crate) fn valid_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ORDER_ID_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// A quantity of one product in one order: 1..=[`MAX_QUANTITY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Quantity(i32);

impl Quantity {
    pub fn new(raw: i64) -> Result<Self, InputError> {
        if raw <= 0 {
            Err(InputError::QuantityNotPositive(raw))
        } else if raw > i64::from(MAX_QUANTITY) {
            Err(InputError::QuantityTooLarge {
                quantity: raw,
                max: MAX_QUANTITY,
            })
        } else {
            // In range by the checks above.
            Ok(Quantity(raw as i32))
        }
    }
    pub fn get(self) -> i32 {
        self.0
    }
}

/// A reservation time-to-live: [`MIN_TTL_S`]..=[`MAX_TTL_S`] seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(Duration);

impl Ttl {
    pub fn from_secs(s: u64) -> Result<Self, InputError> {
        if (MIN_TTL_S..=MAX_TTL_S).contains(&s) {
            Ok(Ttl(Duration::from_secs(s)))
        } else {
            Err(InputError::TtlOutOfRange {
                ttl_s: s,
                min: MIN_TTL_S,
                max: MAX_TTL_S,
            })
        }
    }
    /// For tests and the sweeper lab: a sub-second TTL, still bounded above.
    pub fn from_millis(ms: u64) -> Result<Self, InputError> {
        if (1..=MAX_TTL_S * 1000).contains(&ms) {
            Ok(Ttl(Duration::from_millis(ms)))
        } else {
            Err(InputError::TtlOutOfRange {
                ttl_s: ms / 1000,
                min: MIN_TTL_S,
                max: MAX_TTL_S,
            })
        }
    }
    pub fn as_duration(self) -> Duration {
        self.0
    }
}

/// The longest a reservation may be held since it was made, extensions included:
/// [`MIN_MAX_HOLD_S`]..=[`MAX_MAX_HOLD_S`] seconds. Bounds what an extension may ask for, so a
/// slow payment can keep its units for a while but a forgotten order never keeps them forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxHold(Duration);

impl MaxHold {
    pub fn from_secs(s: u64) -> Result<Self, InputError> {
        if (MIN_MAX_HOLD_S..=MAX_MAX_HOLD_S).contains(&s) {
            Ok(MaxHold(Duration::from_secs(s)))
        } else {
            Err(InputError::MaxHoldOutOfRange {
                max_hold_s: s,
                min: MIN_MAX_HOLD_S,
                max: MAX_MAX_HOLD_S,
            })
        }
    }
    pub fn as_duration(self) -> Duration {
        self.0
    }
}

impl Default for MaxHold {
    fn default() -> Self {
        MaxHold(Duration::from_secs(DEFAULT_MAX_HOLD_S))
    }
}

impl Default for Ttl {
    fn default() -> Self {
        Ttl(Duration::from_secs(DEFAULT_TTL_S))
    }
}

/// The items of one order, summed per product and sorted by product id: the order in which
/// every strategy locks stock rows, so two orders can never lock in a cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderItems(BTreeMap<ProductId, Quantity>);

impl OrderItems {
    /// Sums repeated products and checks the limits.
    pub fn new(items: impl IntoIterator<Item = (i64, i64)>) -> Result<Self, InputError> {
        let mut sums: BTreeMap<ProductId, i64> = BTreeMap::new();
        let mut count = 0usize;
        for (product, quantity) in items {
            count += 1;
            if count > MAX_ITEMS_PER_ORDER {
                return Err(InputError::TooManyItems {
                    max: MAX_ITEMS_PER_ORDER,
                });
            }
            let product = ProductId::new(product)?;
            Quantity::new(quantity)?;
            *sums.entry(product).or_default() += quantity;
        }
        if sums.is_empty() {
            return Err(InputError::EmptyOrder);
        }
        let mut out = BTreeMap::new();
        for (product, q) in sums {
            out.insert(product, Quantity::new(q)?);
        }
        Ok(OrderItems(out))
    }

    /// (product, quantity) in ascending product order.
    pub fn iter(&self) -> impl Iterator<Item = (ProductId, Quantity)> + '_ {
        self.0.iter().map(|(p, q)| (*p, *q))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, product: ProductId) -> Option<Quantity> {
        self.0.get(&product).copied()
    }
}

/// Largest amount one transfer, deposit, withdrawal or opening balance may move (in cents: ten
/// billion units of currency), so sums of many transfers stay far from `i64` overflow.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000;

/// A customer account: a positive 64-bit integer. Account 0 is the system account, which only
/// the ledger itself names (opening balances, deposits and withdrawals move money against it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct AccountId(i64);

impl AccountId {
    /// The system account of the double entry.
    pub const SYSTEM: AccountId = AccountId(0);

    /// A customer account id (> 0).
    pub fn new(raw: i64) -> Result<Self, InputError> {
        if raw > 0 {
            Ok(AccountId(raw))
        } else {
            Err(InputError::AccountIdNotPositive(raw))
        }
    }
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A client-chosen transfer id, the idempotency key of a transfer: same alphabet as order ids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TransferId(String);

impl TransferId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(TransferId(raw))
        } else {
            Err(InputError::TransferIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TransferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An amount of money moved by one transfer: 1..=[`MAX_AMOUNT`] (minor units, e.g. cents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Amount(i64);

impl Amount {
    pub fn new(raw: i64) -> Result<Self, InputError> {
        if (1..=MAX_AMOUNT).contains(&raw) {
            Ok(Amount(raw))
        } else {
            Err(InputError::AmountOutOfRange {
                amount: raw,
                max: MAX_AMOUNT,
            })
        }
    }
    pub fn get(self) -> i64 {
        self.0
    }
}

/// Shortest and longest life of a pending transfer (a hold): one second to thirty days.
pub const MIN_TRANSFER_TIMEOUT_S: u32 = 1;
pub const MAX_TRANSFER_TIMEOUT_S: u32 = 30 * 24 * 60 * 60;
/// A hold's life when the caller names none (the service's `--transfer-timeout` overrides it).
pub const DEFAULT_TRANSFER_TIMEOUT_S: u32 = 15 * 60;
/// Most transfers in one linked group.
pub const MAX_GROUP_TRANSFERS: usize = 100;
/// Largest magnitude of a balance limit: far inside `i64`, so `balance - held` and
/// `balance + pending_credits` checked against a limit never overflow.
pub const MAX_LIMIT: i64 = 1_000_000_000_000_000;

deserialize_via!(GroupId, String, GroupId::new);

/// How long a pending transfer holds its amount before the sweeper expires it:
/// [`MIN_TRANSFER_TIMEOUT_S`]..=[`MAX_TRANSFER_TIMEOUT_S`] seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TransferTimeout(u32);

impl TransferTimeout {
    pub fn from_secs(raw: i64) -> Result<Self, InputError> {
        let range = i64::from(MIN_TRANSFER_TIMEOUT_S)..=i64::from(MAX_TRANSFER_TIMEOUT_S);
        match u32::try_from(raw) {
            Ok(s) if range.contains(&raw) => Ok(TransferTimeout(s)),
            _ => Err(InputError::TransferTimeoutOutOfRange {
                timeout_s: raw,
                min: MIN_TRANSFER_TIMEOUT_S,
                max: MAX_TRANSFER_TIMEOUT_S,
            }),
        }
    }
    pub fn secs(self) -> u32 {
        self.0
    }
}

impl Default for TransferTimeout {
    fn default() -> Self {
        TransferTimeout(DEFAULT_TRANSFER_TIMEOUT_S)
    }
}

/// The id of a linked transfer group: the same alphabet as transfer ids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct GroupId(String);

impl GroupId {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        if valid_token(&raw) {
            Ok(GroupId(raw))
        } else {
            Err(InputError::GroupIdInvalid)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Where a transfer is in its life: `posted` at once, or `pending` until exactly one of post,
/// void or expiry settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferStatus {
    Pending,
    Posted,
    Voided,
    Expired,
}

impl TransferStatus {
    pub const ALL: [TransferStatus; 4] = [
        TransferStatus::Pending,
        TransferStatus::Posted,
        TransferStatus::Voided,
        TransferStatus::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TransferStatus::Pending => "pending",
            TransferStatus::Posted => "posted",
            TransferStatus::Voided => "voided",
            TransferStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<TransferStatus> {
        TransferStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for TransferStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one reservation (an order's line on one product) is in its life: `active` until exactly
/// one of confirm, release or expiry settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReservationStatus {
    Active,
    Confirmed,
    Released,
    Expired,
}

impl ReservationStatus {
    pub const ALL: [ReservationStatus; 4] = [
        ReservationStatus::Active,
        ReservationStatus::Confirmed,
        ReservationStatus::Released,
        ReservationStatus::Expired,
    ];

    /// The status column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationStatus::Active => "active",
            ReservationStatus::Confirmed => "confirmed",
            ReservationStatus::Released => "released",
            ReservationStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<ReservationStatus> {
        ReservationStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Holds its units (active) or sold them (confirmed).
    pub fn is_live(self) -> bool {
        matches!(
            self,
            ReservationStatus::Active | ReservationStatus::Confirmed
        )
    }
}

impl fmt::Display for ReservationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An account's balance limits, set when it is opened: `balance - held >= min_balance` (0: no
/// overdraft; negative: a credit line) and `balance + pending_credits <= max_balance` when set.
/// Both within ±[`MAX_LIMIT`], the maximum not below the minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BalanceLimits {
    min_balance: i64,
    max_balance: Option<i64>,
}

impl BalanceLimits {
    pub fn new(min_balance: i64, max_balance: Option<i64>) -> Result<Self, InputError> {
        for (limit, value) in [
            ("min_balance", Some(min_balance)),
            ("max_balance", max_balance),
        ] {
            if let Some(value) = value {
                if !(-MAX_LIMIT..=MAX_LIMIT).contains(&value) {
                    return Err(InputError::LimitOutOfRange {
                        limit,
                        value,
                        max: MAX_LIMIT,
                    });
                }
            }
        }
        if let Some(max_balance) = max_balance {
            if max_balance < min_balance {
                return Err(InputError::LimitsInverted {
                    min_balance,
                    max_balance,
                });
            }
        }
        Ok(BalanceLimits {
            min_balance,
            max_balance,
        })
    }
    pub fn min_balance(self) -> i64 {
        self.min_balance
    }
    pub fn max_balance(self) -> Option<i64> {
        self.max_balance
    }
}

impl Default for BalanceLimits {
    /// No overdraft, no ceiling: the ledger's rule before limits existed.
    fn default() -> Self {
        BalanceLimits {
            min_balance: 0,
            max_balance: None,
        }
    }
}

/// A reason given with a stock adjustment: 1..=[`MAX_REASON_LEN`] characters, none of them a
/// control character. Why: PostgreSQL refuses a NUL byte in `text` (it would surface as a 500),
/// and other control characters (newlines, escapes) forge lines in logs and reports that print
/// the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        let len = raw.chars().count();
        if len == 0 || len > MAX_REASON_LEN {
            Err(InputError::ReasonLength {
                max: MAX_REASON_LEN,
            })
        } else if raw.chars().any(char::is_control) {
            Err(InputError::ReasonControlCharacter)
        } else {
            Ok(Reason(raw))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Longest reference, in characters.
pub const MAX_REFERENCE_LEN: usize = 128;
/// Most keys of one metadata object.
pub const MAX_METADATA_KEYS: usize = 16;
/// Longest metadata key, in characters (at least 1).
pub const MAX_METADATA_KEY_LEN: usize = 64;
/// Longest metadata value, in characters.
pub const MAX_METADATA_VALUE_LEN: usize = 256;
/// Largest metadata object, in bytes of its compact JSON: what the key, value and count limits
/// allow at worst (4 bytes per character, escapes included; `"k":"v",` around each pair), so
/// that the limits an OpenAPI schema can state are the whole rule (a body valid by the schema
/// is never refused for its size). About 20 KiB.
pub const MAX_METADATA_BYTES: usize =
    MAX_METADATA_KEYS * (4 * (MAX_METADATA_KEY_LEN + MAX_METADATA_VALUE_LEN) + 6) + 2;

/// The caller's own id for a transfer, hold, group or account (a payment, an invoice, a cart):
/// 1..=[`MAX_REFERENCE_LEN`] characters, none of them a control character (a NUL would be a
/// 500 from PostgreSQL, a newline forges lines in logs). Not unique: many rows may share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Reference(String);

impl Reference {
    pub fn new(raw: impl Into<String>) -> Result<Self, InputError> {
        let raw = raw.into();
        let len = raw.chars().count();
        if len == 0 || len > MAX_REFERENCE_LEN {
            Err(InputError::ReferenceLength)
        } else if raw.chars().any(char::is_control) {
            Err(InputError::ReferenceControlCharacter)
        } else {
            Ok(Reference(raw))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A small JSON object of string values the caller attaches: at most [`MAX_METADATA_KEYS`]
/// keys of 1..=[`MAX_METADATA_KEY_LEN`] characters, values of at most
/// [`MAX_METADATA_VALUE_LEN`], no control character in either, and at most
/// [`MAX_METADATA_BYTES`] as compact JSON. Keys are kept sorted, so two objects with the same
/// pairs are equal whatever order they were sent in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    pub fn new(pairs: BTreeMap<String, String>) -> Result<Self, InputError> {
        let bad = |why: String| Err(InputError::MetadataInvalid(why));
        if pairs.len() > MAX_METADATA_KEYS {
            return bad(format!(
                "at most {MAX_METADATA_KEYS} keys, got {}",
                pairs.len()
            ));
        }
        for (k, v) in &pairs {
            let klen = k.chars().count();
            if klen == 0 || klen > MAX_METADATA_KEY_LEN {
                return bad(format!(
                    "a key must be 1..={MAX_METADATA_KEY_LEN} characters"
                ));
            }
            if v.chars().count() > MAX_METADATA_VALUE_LEN {
                return bad(format!(
                    "the value of {k:?} is over {MAX_METADATA_VALUE_LEN} characters"
                ));
            }
            if k.chars().chain(v.chars()).any(char::is_control) {
                return bad("keys and values must not contain control characters".into());
            }
        }
        let bytes = serde_json::to_vec(&pairs).map_or(usize::MAX, |b| b.len());
        if bytes > MAX_METADATA_BYTES {
            return bad(format!("{bytes} bytes as JSON, over {MAX_METADATA_BYTES}"));
        }
        Ok(Metadata(pairs))
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    pub fn pairs(&self) -> &BTreeMap<String, String> {
        &self.0
    }
    /// As a JSON object (what the `metadata` jsonb columns hold).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect(),
        )
    }
    /// From a JSON value: an object of string values within the bounds, else
    /// [`InputError::MetadataInvalid`].
    pub fn from_json(value: serde_json::Value) -> Result<Self, InputError> {
        let serde_json::Value::Object(object) = value else {
            return Err(InputError::MetadataInvalid("must be a JSON object".into()));
        };
        let mut pairs = BTreeMap::new();
        for (k, v) in object {
            let serde_json::Value::String(v) = v else {
                return Err(InputError::MetadataInvalid(format!(
                    "the value of {:?} is not a string",
                    k.chars().take(64).collect::<String>()
                )));
            };
            pairs.insert(k, v);
        }
        Metadata::new(pairs)
    }
}

/// The optional reference and metadata a caller attaches to a ledger row (a transfer, hold,
/// group or account): stored with it, returned with it, and part of its idempotency comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Tags {
    pub reference: Option<Reference>,
    pub metadata: Option<Metadata>,
}

impl Tags {
    /// Neither.
    pub const NONE: Tags = Tags {
        reference: None,
        metadata: None,
    };

    /// The `metadata` column's value.
    pub fn metadata_json(&self) -> Option<serde_json::Value> {
        self.metadata.as_ref().map(Metadata::to_json)
    }
}

/// No tags, for the paths that take none (deposits, withdrawals, openings).
pub static NO_TAGS: Tags = Tags::NONE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_summed_and_sorted() {
        let items = OrderItems::new([(2, 1), (1, 3), (2, 4)]).expect("valid");
        let v: Vec<(i64, i32)> = items.iter().map(|(p, q)| (p.get(), q.get())).collect();
        assert_eq!(v, [(1, 3), (2, 5)]);
    }

    #[test]
    fn bad_items_are_refused_with_distinct_errors() {
        assert_eq!(OrderItems::new([]), Err(InputError::EmptyOrder));
        assert_eq!(
            OrderItems::new([(1, 0)]),
            Err(InputError::QuantityNotPositive(0))
        );
        assert_eq!(
            OrderItems::new([(1, -2)]),
            Err(InputError::QuantityNotPositive(-2))
        );
        assert_eq!(
            OrderItems::new([(0, 1)]),
            Err(InputError::ProductIdNotPositive(0))
        );
        assert!(matches!(
            OrderItems::new([(1, i64::from(MAX_QUANTITY) + 1)]),
            Err(InputError::QuantityTooLarge { .. })
        ));
        // Summing may push a product over the limit too.
        assert!(matches!(
            OrderItems::new([(1, i64::from(MAX_QUANTITY)), (1, 1)]),
            Err(InputError::QuantityTooLarge { .. })
        ));
        let too_many = (1..=(MAX_ITEMS_PER_ORDER as i64 + 1)).map(|p| (p, 1));
        assert_eq!(
            OrderItems::new(too_many),
            Err(InputError::TooManyItems {
                max: MAX_ITEMS_PER_ORDER
            })
        );
        // Exactly at the limit is fine.
        assert!(OrderItems::new((1..=MAX_ITEMS_PER_ORDER as i64).map(|p| (p, 1))).is_ok());
    }

    #[test]
    fn order_ids_follow_the_alphabet() {
        assert!(OrderId::new("0b7c6f2e-1d2a-4c1b-9a57-3f1f0f6f9a10").is_ok());
        assert!(OrderId::new("a.b_c:d-1").is_ok());
        assert!(OrderId::new("").is_err());
        assert!(OrderId::new("x".repeat(65)).is_err());
        assert!(OrderId::new("x".repeat(64)).is_ok());
        assert!(OrderId::new("has space").is_err());
        assert!(OrderId::new("ç").is_err());
    }

    #[test]
    fn reasons_refuse_control_characters_and_bad_lengths() {
        assert!(Reason::new("recount after inventory: café ✓").is_ok());
        assert!(Reason::new("x".repeat(MAX_REASON_LEN)).is_ok());
        assert!(
            Reason::new("é".repeat(MAX_REASON_LEN)).is_ok(),
            "characters, not bytes"
        );
        for bad in [
            "a\0b",
            "\0",
            "line\nbreak",
            "tab\there",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}",
        ] {
            assert_eq!(
                Reason::new(bad),
                Err(InputError::ReasonControlCharacter),
                "{bad:?}"
            );
        }
        assert!(matches!(
            Reason::new(""),
            Err(InputError::ReasonLength { .. })
        ));
        assert!(matches!(
            Reason::new("x".repeat(MAX_REASON_LEN + 1)),
            Err(InputError::ReasonLength { .. })
        ));
    }

    #[test]
    fn ids_refuse_nul_and_control_characters() {
        for bad in ["a\0b", "\0", "a\nb", "a\u{1b}b", "a b"] {
            assert_eq!(
                OrderId::new(bad),
                Err(InputError::OrderIdInvalid),
                "{bad:?}"
            );
            assert_eq!(
                TransferId::new(bad),
                Err(InputError::TransferIdInvalid),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn deserializing_goes_through_the_constructors() {
        let ok: ProductId = serde_json::from_str("7").expect("valid id");
        assert_eq!(ok.get(), 7);
        assert!(serde_json::from_str::<ProductId>("0").is_err());
        assert!(serde_json::from_str::<Quantity>("0").is_err());
        assert!(serde_json::from_str::<Quantity>("10001").is_err());
        assert!(serde_json::from_str::<OrderId>("\"has space\"").is_err());
        assert!(serde_json::from_str::<RequestKey>("\"\"").is_err());
        assert!(serde_json::from_str::<TransferId>("\"a\\u0000b\"").is_err());
        assert!(serde_json::from_str::<AccountId>("0").is_err());
        assert!(serde_json::from_str::<Amount>("0").is_err());
        let id: OrderId = serde_json::from_str("\"order-1\"").expect("valid id");
        assert_eq!(
            serde_json::to_string(&id).expect("serialize"),
            "\"order-1\""
        );
    }

    #[test]
    fn ttl_is_bounded() {
        assert!(Ttl::from_secs(0).is_err());
        assert!(Ttl::from_secs(MAX_TTL_S + 1).is_err());
        assert!(Ttl::from_secs(900).is_ok());
    }

    #[test]
    fn references_and_metadata_are_bounded() {
        assert!(Reference::new("pay_123").is_ok());
        assert_eq!(Reference::new(""), Err(InputError::ReferenceLength));
        assert_eq!(
            Reference::new("x".repeat(MAX_REFERENCE_LEN + 1)),
            Err(InputError::ReferenceLength)
        );
        assert_eq!(
            Reference::new("a\nb"),
            Err(InputError::ReferenceControlCharacter)
        );
        let of = |n: usize, k: usize, v: usize| -> BTreeMap<String, String> {
            (0..n)
                .map(|i| (format!("{i:0k$}"), "v".repeat(v)))
                .collect()
        };
        assert!(Metadata::new(of(16, 2, 200)).is_ok());
        // The largest the schema's limits allow is within the byte bound too.
        assert!(Metadata::new(of(16, 64, 256)).is_ok());
        for bad in [of(17, 2, 1), of(1, 65, 1), of(1, 1, 257)] {
            assert!(matches!(
                Metadata::new(bad),
                Err(InputError::MetadataInvalid(_))
            ));
        }
        let empty_key: BTreeMap<String, String> = [(String::new(), "v".into())].into();
        assert!(Metadata::new(empty_key).is_err());
    }
}
