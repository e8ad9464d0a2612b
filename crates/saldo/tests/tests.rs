//! Integration tests against a real PostgreSQL started by `pg-local` (see `saldo::testing`).

#[path = "suite/stock.rs"]
mod stock;
