//! One run of a shop scenario, from the requests to the books: firing every request at once
//! from one starting line ([`at_once`]: each request's preparation, a naive read included,
//! happens before the line), sorting the answers ([`Answers`]: granted, refused, other errors
//! by kind) and reading the books afterwards ([`books`]: the products' counts and the stock
//! audit). Each scenario module says only what its requests are and what it checks.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use saldo::domain::ProductId;
use saldo::error::Error;
use saldo::stock::{admin, Store};
use tokio::sync::Barrier;

use crate::race::types::{error_kind, join_bounded, LabError};

/// Fires `requests` requests at once and returns each one's answer, in order. Request `i`
/// first runs `prepare(i)` (building its request, or a naive read and decision), then waits
/// at one starting line shared by all of them, then runs `go(i, prepared)`: every request of
/// the run starts together however long each took to get a connection, and every naive read
/// happens before any request writes, so a lost update shows on every run. The line is passed
/// whatever `prepare` returned, so a failed preparation cannot hold the others. Bounded by
/// [`RUN_TIMEOUT`](crate::race::types::RUN_TIMEOUT).
pub async fn at_once<P, T, Prepare, Prepared, Go, Gone>(
    requests: u32,
    prepare: Prepare,
    go: Go,
) -> Result<Vec<T>, LabError>
where
    Prepare: Fn(u32) -> Prepared,
    Prepared: Future<Output = P> + Send + 'static,
    Go: Fn(u32, P) -> Gone + Clone + Send + 'static,
    Gone: Future<Output = T> + Send,
    P: Send + 'static,
    T: Send + 'static,
{
    let start = Arc::new(Barrier::new(requests as usize));
    let tasks = (0..requests)
        .map(|i| {
            let (prepared, go, start) = (prepare(i), go.clone(), start.clone());
            tokio::spawn(async move {
                let prepared = prepared.await;
                start.wait().await;
                go(i, prepared).await
            })
        })
        .collect();
    join_bounded(tasks).await
}

/// How a run's requests were answered.
#[derive(Debug)]
pub struct Answers<T> {
    /// The granted answers, each with its request's index.
    pub granted: Vec<(u32, T)>,
    /// The indices of the requests refused the scenario's way (e.g. out of stock).
    pub refused: Vec<u32>,
    /// Every other error, by kind ([`error_kind`]).
    pub errors: BTreeMap<String, u64>,
}

impl<T> Answers<T> {
    /// Sorts `answers` (request `i`'s at index `i`); `refusal` says which errors are the
    /// scenario's clean refusal.
    pub fn sort(answers: Vec<Result<T, Error>>, refusal: impl Fn(&Error) -> bool) -> Answers<T> {
        let mut sorted = Answers {
            granted: Vec::new(),
            refused: Vec::new(),
            errors: BTreeMap::new(),
        };
        for (i, answer) in (0..).zip(answers) {
            match answer {
                Ok(granted) => sorted.granted.push((i, granted)),
                Err(e) if refusal(&e) => sorted.refused.push(i),
                Err(e) => *sorted.errors.entry(error_kind(&e)).or_default() += 1,
            }
        }
        sorted
    }

    /// Granted answers that satisfy `which`.
    pub fn granted_where(&self, which: impl Fn(&T) -> bool) -> u64 {
        self.granted.iter().filter(|(_, t)| which(t)).count() as u64
    }

    pub fn refused(&self) -> u64 {
        self.refused.len() as u64
    }
}

/// The stock scenarios' clean refusal: not enough stock.
pub fn out_of_stock(e: &Error) -> bool {
    matches!(e, Error::InsufficientStock { .. })
}

/// The books after a run: the raced products' counts, summed, and the stock audit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Books {
    pub available: i64,
    pub reserved: i64,
    pub backordered: i64,
    pub audit_divergences: u64,
}

/// [`Books`] of `products` on `store`'s database.
pub async fn books(store: &Store, products: &[i64]) -> Result<Books, LabError> {
    let mut books = Books::default();
    for &product in products {
        let s = admin::get(store, ProductId::new(product).map_err(Error::from)?).await?;
        books.available += i64::from(s.available);
        books.reserved += i64::from(s.reserved);
        books.backordered += i64::from(s.backordered);
    }
    books.audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(books)
}
