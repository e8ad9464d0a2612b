//! Reads the [`Books`] straight from the database (never through the service), on one node or
//! on a Citus coordinator, where each transfer has a journal row per account side.

use tokio_postgres::Client;

use super::types::{AccountRow, Books, ReservationRow, StockRow, TransferRow};

/// Reads stock, reservations, the journal and the accounts.
pub async fn read_books(db: &Client) -> Result<Books, tokio_postgres::Error> {
    let citus: bool = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            &[],
        )
        .await?
        .get(0);
    let mut books = Books {
        sides: if citus { 2 } else { 1 },
        ..Books::default()
    };
    for row in db
        .query("SELECT product_id, available, reserved FROM stock", &[])
        .await?
    {
        let (available, reserved): (i32, i32) = (row.get(1), row.get(2));
        let stock = StockRow {
            available: available.into(),
            reserved: reserved.into(),
        };
        books.stock.insert(row.get(0), stock);
    }
    for row in db
        .query(
            "SELECT order_id, product_id, quantity, status FROM reservations",
            &[],
        )
        .await?
    {
        let quantity: i32 = row.get(2);
        books.reservations.push(ReservationRow {
            order: row.get(0),
            product: row.get(1),
            quantity: quantity.into(),
            status: row.get(3),
        });
    }
    books.transfers = transfers(db).await?;
    for row in db
        .query(
            "SELECT id, balance, held, pending_credits FROM accounts",
            &[],
        )
        .await?
    {
        let account = AccountRow {
            balance: row.get(1),
            held: row.get(2),
            pending_credits: row.get(3),
        };
        books.accounts.insert(row.get(0), account);
    }
    Ok(books)
}

/// Identical journal rows grouped, so that a transfer whose two Citus sides disagree shows up
/// as two transfers of one id.
async fn transfers(db: &Client) -> Result<Vec<TransferRow>, tokio_postgres::Error> {
    let rows = db
        .query(
            "SELECT id, from_account, to_account, amount, kind, status, posted_amount, count(*) \
             FROM transfers GROUP BY 1, 2, 3, 4, 5, 6, 7",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| TransferRow {
            id: row.get(0),
            from: row.get(1),
            to: row.get(2),
            amount: row.get(3),
            kind: row.get(4),
            status: row.get(5),
            posted_amount: row.get(6),
            copies: row.get(7),
        })
        .collect())
}
