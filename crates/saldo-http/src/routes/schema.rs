//! The schemas of bounded inputs, each built from the constant the code checks
//! (`saldo::domain`, `saldo::listing`, `saldo::ledger`, the routes' own limits), so the OpenAPI
//! document cannot drift from the checks. The request types name them with `schema_with`.

use saldo::domain::{
    MAX_AMOUNT, MAX_BACKORDER_LIMIT, MAX_ITEMS_PER_ORDER, MAX_LIMIT, MAX_METADATA_BYTES,
    MAX_METADATA_KEYS, MAX_METADATA_KEY_LEN, MAX_METADATA_VALUE_LEN, MAX_ORDER_ID_LEN,
    MAX_PRIORITY, MAX_QUANTITY, MAX_REASON_LEN, MAX_REFERENCE_LEN, MAX_STOCK_COUNT,
    MAX_TRANSFER_TIMEOUT_S, MAX_TTL_S, MIN_TRANSFER_TIMEOUT_S, MIN_TTL_S,
};
use saldo::ledger::{MAX_LIST, OPENING_PREFIX};
use saldo::listing::{ListKind, MAX_PAGE_LIMIT};
use utoipa::openapi::schema::{
    Array, KnownFormat, Object, ObjectBuilder, OneOf, Ref, Schema, SchemaFormat, SchemaType, Type,
};

use crate::metrics::MAX_TOP;

/// The id alphabet of order, transfer and re-reserve ids (`saldo::domain::valid_token`).
pub fn id_pattern() -> String {
    format!("^[A-Za-z0-9._:-]{{1,{MAX_ORDER_ID_LEN}}}$")
}

fn integer(min: i64, max: i64, nullable: bool, description: &str) -> ObjectBuilder {
    let kind = if nullable {
        SchemaType::from_iter([Type::Integer, Type::Null])
    } else {
        SchemaType::Type(Type::Integer)
    };
    Object::builder()
        .schema_type(kind)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(description))
}

fn string(pattern: String, max_len: usize, description: &str) -> Schema {
    string_of(pattern, 1, max_len, description, None)
}

fn string_of(
    pattern: String,
    min_len: usize,
    max_len: usize,
    description: &str,
    example: Option<&str>,
) -> Schema {
    Object::builder()
        .schema_type(Type::String)
        .min_length(Some(min_len))
        .max_length(Some(max_len))
        .pattern(Some(pattern))
        .description(Some(description))
        .examples(example)
        .build()
        .into()
}

// Examples name the fixtures `.ci/contract` creates (product 1, accounts 1 and 2), so
// schemathesis's example phase reaches past "unknown product" into the real work.

/// A caller's reference: 1..=128 characters, no control character.
pub fn reference() -> Schema {
    nullable_reference(
        "The caller's own id for it (a payment, an invoice, a cart); not unique. Part of the \
         idempotency comparison.",
        "inv-2026-0042",
    )
}

/// An account's reference: the same rules as [`reference`]; an account opens once, so there
/// is no idempotency comparison to take part in.
pub fn account_reference() -> Schema {
    nullable_reference(
        "The caller's own id for the account (a customer, a wallet); not unique.",
        "cust-42",
    )
}

fn nullable_reference(description: &str, example: &str) -> Schema {
    let mut schema = string_of(
        format!("^[^\\u0000-\\u001F\\u007F-\\u009F]{{1,{MAX_REFERENCE_LEN}}}$"),
        1,
        MAX_REFERENCE_LEN,
        description,
        Some(example),
    );
    if let Schema::Object(o) = &mut schema {
        o.schema_type = SchemaType::from_iter([Type::String, Type::Null]);
    }
    schema
}

/// Metadata: an object of string values within its bounds.
pub fn metadata() -> Schema {
    // The same rules `Metadata::new` keeps, so a generator of valid bodies never meets a 422.
    let no_control =
        |max: usize, min: usize| format!("^[^\\u0000-\\u001F\\u007F-\\u009F]{{{min},{max}}}$");
    let value = Object::builder()
        .schema_type(Type::String)
        .max_length(Some(MAX_METADATA_VALUE_LEN))
        .pattern(Some(no_control(MAX_METADATA_VALUE_LEN, 0)));
    let key = Object::builder()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_METADATA_KEY_LEN))
        .pattern(Some(no_control(MAX_METADATA_KEY_LEN, 1)));
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .max_properties(Some(MAX_METADATA_KEYS))
        .property_names(Some(key))
        .additional_properties(Some(value))
        .description(Some(format!(
            "String values the caller attaches: at most {MAX_METADATA_KEYS} keys of \
             1..={MAX_METADATA_KEY_LEN} characters, values of at most \
             {MAX_METADATA_VALUE_LEN}, no control characters, at most {MAX_METADATA_BYTES} \
             bytes as compact JSON. Part of the idempotency comparison."
        )))
        .build()
        .into()
}

pub fn product_id() -> Schema {
    integer(1, i64::MAX, false, "Product id (> 0)")
        .examples([1])
        .build()
        .into()
}

const ACCOUNT_ID: &str = "Account id (> 0; 0 is the ledger's system account)";

pub fn account_id() -> Schema {
    integer(1, i64::MAX, false, ACCOUNT_ID)
        .examples([1])
        .build()
        .into()
}

/// An account id whose example differs from [`account_id`]'s, for a transfer's `to`.
pub fn other_account_id() -> Schema {
    integer(1, i64::MAX, false, ACCOUNT_ID)
        .examples([2])
        .build()
        .into()
}

fn id(description: &str, example: &str) -> Schema {
    string_of(
        id_pattern(),
        1,
        MAX_ORDER_ID_LEN,
        description,
        Some(example),
    )
}

pub fn order_id() -> Schema {
    id(
        "Order id: the idempotency key of its reservation",
        "order-1",
    )
}

pub fn sale_id() -> Schema {
    id("Sale id: the idempotency key of a direct sale", "sale-1")
}

pub fn rereserve_id() -> Schema {
    id("This re-reserve's own idempotency key", "order-1-again")
}

/// Transfer ids share the order id alphabet; the ledger keeps `opening:` for itself.
pub fn transfer_id() -> Schema {
    string_of(
        format!("^(?!{OPENING_PREFIX})[A-Za-z0-9._:-]{{1,{MAX_ORDER_ID_LEN}}}$"),
        1,
        MAX_ORDER_ID_LEN,
        "The idempotency key (shared by transfers, deposits and withdrawals); may not \
         start with `opening:`",
        Some("pay-1"),
    )
}

pub fn quantity() -> Schema {
    integer(
        1,
        i64::from(MAX_QUANTITY),
        false,
        "Units; a product repeated in one order is summed, and the sum has the same limit",
    )
    .examples([1])
    .build()
    .into()
}

pub fn location_id() -> Schema {
    id("Location id (a warehouse, a store)", "north")
}

/// A reservation item's location: the id, or null/absent for "saldo allocates".
pub fn item_location_id() -> Schema {
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .min_length(Some(1))
        .max_length(Some(MAX_ORDER_ID_LEN))
        .pattern(Some(id_pattern()))
        .description(Some(
            "Take this item only from this location (products stocked per location); absent or \
             null: saldo allocates",
        ))
        .build()
        .into()
}

pub fn allocation() -> Schema {
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(["single", "split"]))
        .description(Some(
            "How items without a location are allocated across a product's locations (lower \
             priority first, then by id): `single` takes each item from the first location that \
             has enough, `split` (the default: absent or null) fills from locations in order",
        ))
        .build()
        .into()
}

pub fn priority() -> Schema {
    integer(
        -i64::from(MAX_PRIORITY),
        i64::from(MAX_PRIORITY),
        false,
        "Allocation order: lower first, ties by location id",
    )
    .examples([0])
    .build()
    .into()
}

pub fn reserve_items() -> Schema {
    let mut array = Array::new(Ref::from_schema_name("ReserveItemRequest"));
    array.min_items = Some(1);
    array.max_items = Some(MAX_ITEMS_PER_ORDER);
    array.description = Some(
        "The order's lines; a product named twice is summed, and may not name two different \
         locations"
            .to_owned(),
    );
    array.into()
}

fn items_array(nullable: bool, description: &str) -> Schema {
    let items = Ref::from_schema_name("ItemRequest");
    let array = if nullable {
        Array::new_nullable(items)
    } else {
        Array::new(items)
    };
    let mut array = array;
    array.min_items = Some(1);
    array.max_items = Some(MAX_ITEMS_PER_ORDER);
    array.description = Some(description.to_owned());
    array.into()
}

/// A partial confirm's or release's lines.
pub fn product_ids() -> Schema {
    let mut array = Array::new_nullable(product_id());
    array.min_items = Some(1);
    array.max_items = Some(MAX_ITEMS_PER_ORDER);
    array.unique_items = true;
    array.description = Some(
        "The order's lines to act on, by product (each once, each a line of the order); \
         absent: the whole order"
            .to_owned(),
    );
    array.into()
}

pub fn return_id() -> Schema {
    id(
        "Return id: the idempotency key of a return (unique across orders)",
        "return-1",
    )
}

pub fn return_items() -> Schema {
    let mut array = Array::new(Ref::from_schema_name("ReturnItemBody"));
    array.min_items = Some(1);
    array.max_items = Some(MAX_ITEMS_PER_ORDER);
    array.description = Some("What comes back, each product once".to_owned());
    array.into()
}

/// The state returned units go to: only `available` for now.
pub fn return_state() -> Schema {
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(STATES))
        .description(Some(
            "The stock state the units go back to: `available` (the default: absent or null) \
             or a non-sellable state",
        ))
        .build()
        .into()
}

/// The stock states' names (`saldo::domain::StockState::ALL`).
const STATES: [&str; 4] = ["available", "damaged", "safety_stock", "incoming"];

pub fn stock_state() -> Schema {
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::String]))
        .enum_values(Some(STATES))
        .description(Some(
            "A stock state: `available` (sellable) or a non-sellable state (never reserved or \
             sold)",
        ))
        .build()
        .into()
}

pub fn move_id() -> Schema {
    id(
        "Move id: the idempotency key of a move (unique per product)",
        "move-1",
    )
}

pub fn items() -> Schema {
    items_array(false, "The order's lines")
}

/// A bundle's components.
pub fn bundle_components() -> Schema {
    items_array(
        false,
        "The bundle's components and the units one bundle takes of each (a product named \
         twice is summed); none may be the bundle itself or another bundle",
    )
}

pub fn rereserve_items() -> Schema {
    items_array(
        true,
        "Which lost products and how many; every product the order lost, with its \
         quantity, when absent or null",
    )
}

pub fn ttl_s() -> Schema {
    let max = i64::try_from(MAX_TTL_S).unwrap_or(i64::MAX);
    let min = i64::try_from(MIN_TTL_S).unwrap_or(1);
    integer(
        min,
        max,
        true,
        "Reservation lifetime in seconds; the server's default when absent or null",
    )
    .build()
    .into()
}

pub fn extend_ttl_s() -> Schema {
    let max = i64::try_from(MAX_TTL_S).unwrap_or(i64::MAX);
    let min = i64::try_from(MIN_TTL_S).unwrap_or(1);
    integer(
        min,
        max,
        false,
        "Seconds from now until the hold lapses; the server's maximum hold since the \
         reservation was made still applies (422 `hold-limit`)",
    )
    .build()
    .into()
}

pub fn amount() -> Schema {
    integer(1, MAX_AMOUNT, false, "Minor units (e.g. cents)")
        .examples([100])
        .build()
        .into()
}

pub fn opening_balance() -> Schema {
    integer(
        0,
        MAX_AMOUNT,
        false,
        "Minor units moved from the system account; within the account's own \
         min_balance ..= max_balance",
    )
    .build()
    .into()
}

pub fn min_balance() -> Schema {
    integer(
        -MAX_LIMIT,
        MAX_LIMIT,
        false,
        "`balance - held` may not go below it: 0 (the default) allows no overdraft, a \
         negative value is a credit line",
    )
    .build()
    .into()
}

pub fn max_balance() -> Schema {
    integer(
        -MAX_LIMIT,
        MAX_LIMIT,
        true,
        "`balance + pending_credits` may not go above it; absent or null: no ceiling",
    )
    .build()
    .into()
}

pub fn transfer_timeout_s() -> Schema {
    integer(
        i64::from(MIN_TRANSFER_TIMEOUT_S),
        i64::from(MAX_TRANSFER_TIMEOUT_S),
        true,
        "Seconds the hold lives (only with `pending`); the service's --transfer-timeout \
         when absent or null",
    )
    .build()
    .into()
}

pub fn post_amount() -> Schema {
    integer(
        1,
        MAX_AMOUNT,
        true,
        "Minor units, at most the held amount; absent or null: the whole amount (the rest \
         is released)",
    )
    .build()
    .into()
}

pub fn reverse_amount() -> Schema {
    integer(
        1,
        MAX_AMOUNT,
        true,
        "Minor units to move back, at most what is left of the transfer (posted minus \
         reversed); absent or null: all that is left",
    )
    .build()
    .into()
}

pub fn count() -> Schema {
    integer(
        0,
        i64::from(MAX_STOCK_COUNT),
        false,
        "On-hand units (available + reserved)",
    )
    .build()
    .into()
}

pub fn backorder_limit() -> Schema {
    integer(
        0,
        i64::from(MAX_BACKORDER_LIMIT),
        false,
        "Most units that may be backordered at once (0: none). Not below the units \
         backordered now (409 `backorder-limit-below-backordered`)",
    )
    .build()
    .into()
}

/// Non-zero, bounded in magnitude: two ranges, as JSON Schema has no "not zero" of its own
/// that generators handle well.
pub fn delta() -> Schema {
    let max = i64::from(MAX_STOCK_COUNT);
    let mut one_of = OneOf::new();
    one_of
        .items
        .push(integer(-max, -1, false, "A write-off").build().into());
    one_of
        .items
        .push(integer(1, max, false, "A restock").build().into());
    one_of.description = Some("Restock (> 0) or write-off (< 0); never 0".into());
    one_of.into()
}

/// Any characters but control characters (Unicode category Cc), as `saldo::domain::Reason`.
pub fn reason() -> Schema {
    string(
        format!("^[^\\u0000-\\u001F\\u007F-\\u009F]{{1,{MAX_REASON_LEN}}}$"),
        MAX_REASON_LEN,
        "Why; no control characters",
    )
}

pub fn page_limit() -> Schema {
    integer(
        1,
        i64::from(MAX_PAGE_LIMIT),
        false,
        "Rows per page (default 100)",
    )
    .build()
    .into()
}

fn cursor(kind: ListKind) -> Schema {
    string_of(
        kind.cursor_pattern(),
        kind.cursor_min_len(),
        kind.cursor_max_len(),
        "Opaque: the `next_cursor` of the previous page, unchanged",
        None,
    )
}

pub fn products_cursor() -> Schema {
    cursor(ListKind::Products)
}

pub fn accounts_cursor() -> Schema {
    cursor(ListKind::Accounts)
}

pub fn orders_cursor() -> Schema {
    cursor(ListKind::Orders)
}

pub fn locations_cursor() -> Schema {
    cursor(ListKind::Locations)
}

/// The transfer search's cursor: it also carries the filters it was handed out under.
pub fn transfers_cursor() -> Schema {
    let mut schema = cursor(ListKind::Transfers);
    if let Schema::Object(o) = &mut schema {
        o.description = Some(
            "Opaque: the `next_cursor` of the previous page, unchanged, with the same filters \
             (a cursor of other filters or another list is 422 `cursor-invalid`)"
                .to_owned(),
        );
    }
    schema
}

/// The transfer search's `account`: either side.
pub fn account_filter() -> Schema {
    integer(
        1,
        i64::MAX,
        false,
        "Only transfers from or to this account (either side)",
    )
    .examples([1])
    .build()
    .into()
}

/// The transfer search's `reference`: exact match.
pub fn reference_filter() -> Schema {
    string_of(
        format!("^[^\\u0000-\\u001F\\u007F-\\u009F]{{1,{MAX_REFERENCE_LEN}}}$"),
        1,
        MAX_REFERENCE_LEN,
        "Only transfers with this reference (exact match)",
        Some("inv-2026-0042"),
    )
}

pub fn transfers_limit() -> Schema {
    integer(1, MAX_LIST, false, "How many transfers (default 50)")
        .build()
        .into()
}

pub fn top() -> Schema {
    integer(
        1,
        i64::try_from(MAX_TOP).unwrap_or(i64::MAX),
        false,
        "How many products (default 10)",
    )
    .build()
    .into()
}

/// `after` of the event feed: a cursor the feed handed out (`saldo::events::Cursor`), `start`
/// or `end`.
pub fn events_after() -> Schema {
    string_of(
        "^(start|end|e2\\.[0-9a-fA-F]{1,15})$".to_owned(),
        3,
        18,
        "Read after this cursor (an event's `cursor` or a page's `next`); `end`: only what comes \
         after now; `start`: from the oldest event kept",
        Some("start"),
    )
}

/// `stream` of the event feed (`saldo::events::parse_stream`).
pub fn event_stream() -> Schema {
    string_of(
        format!("^(product|order|sale|account|transfer):[A-Za-z0-9._:-]{{1,{MAX_ORDER_ID_LEN}}}$"),
        3,
        "transfer:".len() + MAX_ORDER_ID_LEN,
        "Only the events of one stream: `product:42`, `order:o-1`, `sale:s-1`, `account:5`, \
         `transfer:t-1`",
        Some("product:1"),
    )
}

/// `type` of the event feed: known types (`saldo::events::known_types`), at most
/// `saldo::events::MAX_FILTER_TYPES` (repeated, or comma-separated in one value).
pub fn event_types() -> Schema {
    let one = Object::builder()
        .schema_type(Type::String)
        .enum_values(Some(saldo::events::known_types()))
        .build();
    Array::builder()
        .items(one)
        .max_items(Some(saldo::events::MAX_FILTER_TYPES))
        .description(Some(
            "Only events of these types: repeat the parameter (or separate types with commas)",
        ))
        .build()
        .into()
}

/// A statement's cursor: the account and time range are in it too.
pub fn entries_cursor() -> Schema {
    let mut schema = cursor(ListKind::Entries);
    if let Schema::Object(o) = &mut schema {
        o.description = Some(
            "Opaque: the `next_cursor` of the previous page, unchanged, for the same account, \
             `from` and `to` (a cursor of another statement or another list is 422 \
             `cursor-invalid`)"
                .to_owned(),
        );
    }
    schema
}

/// A product's stock statement's cursor: the product and time range are in it too.
pub fn movements_cursor() -> Schema {
    let mut schema = cursor(ListKind::Movements);
    if let Schema::Object(o) = &mut schema {
        o.description = Some(
            "Opaque: the `next_cursor` of the previous page, unchanged, for the same product, \
             `from` and `to` (a cursor of another statement or another list is 422 \
             `cursor-invalid`)"
                .to_owned(),
        );
    }
    schema
}

pub fn movements_from() -> Schema {
    time("Only movements written at or after this time")
}

pub fn movements_to() -> Schema {
    time("Only movements written before this time")
}

/// An RFC 3339 time within what the ledger keeps (`saldo::listing::entries`).
fn time(description: &str) -> Schema {
    Object::builder()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
        .max_length(Some(64))
        .description(Some(format!(
            "{description} (RFC 3339, `+` of an offset percent-encoded; a time before {} \
             is before every entry, one after {} after every entry)",
            saldo::listing::entries::EARLIEST,
            saldo::listing::entries::LATEST
        )))
        .build()
        .into()
}

pub fn entries_from() -> Schema {
    time("Only entries written at or after this time")
}

pub fn entries_to() -> Schema {
    time("Only entries written before this time")
}

pub fn balance_at() -> Schema {
    time("The instant to answer for")
}
