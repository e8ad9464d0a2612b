//! The account list: customer accounts by ascending id (the system account 0 is the ledger's
//! own and is never listed). The transfer search is [`super::transfers`].

use super::{corrupt, paginate, read, Cursor, ListKind, Page, PageLimit};
use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::rows::accounts::account_from_row;
use crate::ledger::Account;
use crate::operation::Operation;
use crate::store::handle::Store;

/// `$1` is 0 on the first page, so the system account never shows.
const ACCOUNTS: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance, \
     currency, scale, reference, metadata FROM accounts WHERE id > $1 ORDER BY id LIMIT $2";

/// Accounts by ascending id, after `cursor` (a [`ListKind::Accounts`] cursor).
pub async fn accounts(
    store: &Store,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<Account>, Error> {
    let read_rows = limit.get() as usize + 1;
    let accounts = read(
        store,
        Operation::ListAccounts,
        ACCOUNTS,
        Cursor::numeric_key(cursor),
        read_rows,
        |row| {
            let id = AccountId::new(row.try_get("id")?).map_err(|e| corrupt("accounts", e))?;
            account_from_row(id, row)
        },
    )
    .await?;
    Ok(paginate(
        accounts,
        limit,
        read_rows,
        |_| true,
        |a| Cursor::Numeric(ListKind::Accounts, a.id.get()),
    ))
}
