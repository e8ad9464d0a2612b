//! Request shapes more than one route takes: an order line (a re-reserve and a direct sale)
//! and a transfer (one on its own and each of a linked group).

use saldo::domain::{
    AccountId, Amount, Metadata, OrderItems, Reference, Tags, TransferId, TransferTimeout,
};
use saldo::ledger::{LinkedTransfer, TransferRequest};
use serde::Deserialize;
use utoipa::ToSchema;

use super::schema;
use crate::error::ApiError;

/// One line of an order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemRequest {
    #[schema(schema_with = schema::product_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub product_id: i64,
    #[schema(schema_with = schema::quantity)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub quantity: i64,
}

/// An order's lines, checked (a product named twice is summed).
pub(crate) fn order_items(items: &[ItemRequest]) -> Result<OrderItems, ApiError> {
    Ok(OrderItems::new(
        items.iter().map(|i| (i.product_id, i.quantity)),
    )?)
}

/// Move `amount` from one account to another, at once or as a hold (`pending`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferBody {
    #[schema(schema_with = schema::transfer_id)]
    pub id: String,
    #[schema(schema_with = schema::account_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub from: i64,
    /// Another account than `from`.
    #[schema(schema_with = schema::other_account_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub to: i64,
    #[schema(schema_with = schema::amount)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub amount: i64,
    /// Hold `amount` against `from` until posted, voided or expired, instead of moving it now.
    #[serde(default)]
    pub pending: bool,
    /// Seconds the hold lives (only with `pending`; default: the service's
    /// `--transfer-timeout`).
    #[serde(default, deserialize_with = "super::numbers::opt_i64")]
    #[schema(schema_with = schema::transfer_timeout_s)]
    pub timeout_s: Option<i64>,
    #[serde(default)]
    #[schema(schema_with = schema::reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

/// The optional `reference` and `metadata` of a body, checked (422 `invalid-input` past a
/// bound).
pub(crate) fn tags(
    reference: Option<String>,
    metadata: Option<serde_json::Value>,
) -> Result<Tags, ApiError> {
    Ok(Tags {
        reference: reference.map(Reference::new).transpose()?,
        metadata: metadata.map(Metadata::from_json).transpose()?,
    })
}

/// `tags` as an answer shows them: the reference as a string, the metadata as a JSON object.
pub(crate) fn shown_tags(tags: Tags) -> (Option<String>, Option<serde_json::Value>) {
    (
        tags.reference.map(|r| r.as_str().to_owned()),
        tags.metadata.as_ref().map(Metadata::to_json),
    )
}

impl TransferBody {
    /// The validated transfer; `default_timeout` for a hold that names none.
    pub fn parse(self, default_timeout: TransferTimeout) -> Result<LinkedTransfer, ApiError> {
        let pending = match (self.pending, self.timeout_s) {
            (false, Some(_)) => {
                return Err(ApiError::InvalidBody(
                    "timeout_s is only for a pending transfer (\"pending\": true)".into(),
                ))
            }
            (false, None) => None,
            (true, None) => Some(default_timeout),
            (true, Some(s)) => Some(TransferTimeout::from_secs(s)?),
        };
        Ok(LinkedTransfer {
            transfer: TransferRequest {
                id: TransferId::new(self.id)?,
                from: AccountId::new(self.from)?,
                to: AccountId::new(self.to)?,
                amount: Amount::new(self.amount)?,
                tags: tags(self.reference, self.metadata)?,
            },
            pending,
        })
    }
}
