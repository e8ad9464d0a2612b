//! Reading the `reference` and `metadata` columns every tagged row has (transfers, transfer
//! groups, accounts, reservation rows, sales): one parse, so a stored value the domain would
//! refuse is an error everywhere alike.

use crate::domain::{InputError, Metadata, Reference, Tags};
use crate::error::Error;

/// The `reference` and `metadata` columns of a row (the schema's CHECKs admit only valid
/// ones: anything else is an error, never a guess).
pub(crate) fn from_row(row: &tokio_postgres::Row) -> Result<Tags, Error> {
    let stored = |e: InputError| Error::invariant(format!("stored tags: {e}"));
    let reference = row
        .try_get::<_, Option<String>>("reference")?
        .map(|r| Reference::new(r).map_err(stored))
        .transpose()?;
    let metadata = row
        .try_get::<_, Option<serde_json::Value>>("metadata")?
        .map(|m| Metadata::from_json(m).map_err(stored))
        .transpose()?;
    Ok(Tags {
        reference,
        metadata,
    })
}
