//! The test harness: one private PostgreSQL per test process (started by `pg-local`), a
//! migrated template database, and a fresh database cloned from it for every test, in tens of
//! milliseconds. Real PostgreSQL, no mocks: locking behaviour is what the tests are about.
//!
//! `SALDO_TEST_ISOLATION=serializable` starts the cluster with
//! `default_transaction_isolation = serializable`, the behaviour a distributed SQL engine shows.
//! [`test_db_serializable`] always uses a second cluster started that way, so one test binary
//! can rerun the suites under serializable isolation within a plain `cargo test`.
//!
//! Test clusters run with `deadlock_timeout = 50ms` (the persistent cluster keeps 1 s): the
//! naive-transfer tests provoke deadlocks on purpose and must stay fast.
//!
//! The pieces import one way: `db` (a test database and what tests do with it) at the bottom,
//! `single` (the one-node clusters) and `citus` (the Citus cluster) on it, and this module only
//! re-exports.
//!
//! [`until_caught`] reruns a demonstration that a naive strategy fails (a race, so not certain
//! in one run) a bounded number of times until the failure shows.

mod caught;
pub use caught::{until_caught, NAIVE_ATTEMPTS};

mod citus;
mod citus_reuse;
mod db;
mod single;

pub use citus::{
    accounts_on_two_workers, citus_cluster, citus_db, citus_db_with_pool, citus_server, worker_of,
};
pub use citus_reuse::{limit_spares, spare_limit, MAX_SPARES as CITUS_SPARES};
pub use db::{ledger_divergences, RowLock, TestDb};
pub use single::{
    cluster_pid, serializable_cluster_pid, test_db, test_db_serializable,
    test_db_serializable_with_pool, test_db_with_pool, SERIALIZABLE_MAX_ATTEMPTS,
    SERIALIZABLE_POOL,
};
