//! The InnoDB lab's database: a pool on one server (the private one of `mariadb-local`, or a
//! `mysql://` URL), a scratch database of its own (created, reset, dropped), the isolation level
//! of every transaction, and the whole-transaction retry on the two retryable errors.
//!
//! Rows affected: MySQL and MariaDB count the rows an UPDATE *changed*, not the rows it matched,
//! unless the client sets `CLIENT_FOUND_ROWS` (mysql_async: `client_found_rows`, default off;
//! JDBC's Connector/J turns it on by default). The lab leaves it off, as most drivers do, and
//! every strategy's UPDATE changes the row it matches (it moves `available`), so the two counts
//! agree there; [`crate::innodb::differences::rows_affected`] shows where they do not.

use std::future::Future;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, OptsBuilder, Pool, PoolConstraints, PoolOpts, TxOpts};
use rand::Rng;

/// Attempts of one transaction (the first and its reruns) on 1213/1205 before the error reaches
/// the caller. 200 naive crossed transfers on two rows keep choosing victims: with 30, five
/// of them ran out in a CI run on a loaded machine (about 2,250 retries in all).
pub const RETRY_ATTEMPTS: u32 = 100;
/// Longest pause between two attempts of one transaction.
pub const MAX_BACKOFF_MS: u64 = 250;
/// Connections the lab's pool opens at most (buyers beyond it wait for one).
pub const POOL_MAX: usize = 64;
/// Longest wait for a connection, or for one buyer's or transfer's whole work.
pub const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// Seconds a session waits for a row lock before 1205 (the lab sets it per session).
pub const LOCK_WAIT_TIMEOUT_S: u32 = 10;

/// MariaDB/MySQL: deadlock found, the transaction was rolled back.
pub const ER_LOCK_DEADLOCK: u16 = 1213;
/// MariaDB/MySQL: lock wait timeout exceeded (only the statement is rolled back, by default).
pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;

#[derive(Debug, thiserror::Error)]
pub enum InnoDbError {
    #[error("MariaDB: {0}")]
    Sql(#[from] mysql_async::Error),
    #[error("starting the private MariaDB: {0}")]
    Server(#[from] mariadb_local::Error),
    #[error("{what} took longer than {OP_TIMEOUT:?}")]
    Timeout { what: &'static str },
    #[error("{0}")]
    Input(String),
    /// A race parameter outside its bound (the same check as the PostgreSQL lab's).
    #[error(transparent)]
    OutOfRange(#[from] crate::race::types::OutOfRange),
    #[error("a task of the race failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// The server error code of `error`, if it is one.
pub fn server_code(error: &InnoDbError) -> Option<u16> {
    match error {
        InnoDbError::Sql(mysql_async::Error::Server(e)) => Some(e.code),
        _ => None,
    }
}

/// Whether a transaction that failed with server error `code` may be rerun from its start:
/// 1213 (deadlock: InnoDB rolled the whole transaction back) and 1205 (lock wait timeout: the
/// lab rolls back the rest). SQL Server's deadlock victim is also 1205 there (message 1205),
/// which is one more reason to classify by code per server, never by number alone across them.
pub fn retryable_code(code: u16) -> bool {
    matches!(code, ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT)
}

/// [`retryable_code`] of an error.
pub fn is_retryable(error: &InnoDbError) -> bool {
    server_code(error).is_some_and(retryable_code)
}

/// The two isolation levels the lab runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// InnoDB's default.
    RepeatableRead,
    ReadCommitted,
}

impl Isolation {
    pub const ALL: &'static [Isolation] = &[Isolation::RepeatableRead, Isolation::ReadCommitted];

    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::RepeatableRead => "repeatable-read",
            Isolation::ReadCommitted => "read-committed",
        }
    }

    pub fn parse(text: &str) -> Result<Isolation, InnoDbError> {
        Isolation::ALL
            .iter()
            .copied()
            .find(|i| i.as_str() == text)
            .ok_or_else(|| {
                InnoDbError::Input(format!(
                    "isolation {text:?}: expected repeatable-read or read-committed"
                ))
            })
    }

    /// Options of a transaction at this level (`SET TRANSACTION ISOLATION LEVEL …; START
    /// TRANSACTION`).
    pub fn tx(self) -> TxOpts {
        let mut opts = TxOpts::new();
        opts.with_isolation_level(match self {
            Isolation::RepeatableRead => IsolationLevel::RepeatableRead,
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
        });
        opts
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE stock (product_id BIGINT PRIMARY KEY, available BIGINT NOT NULL, \
     reserved BIGINT NOT NULL DEFAULT 0, version BIGINT NOT NULL DEFAULT 0, \
     CONSTRAINT available_not_negative CHECK (available >= 0)) ENGINE=InnoDB",
    "CREATE TABLE reservations (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
     order_id VARCHAR(64) NOT NULL UNIQUE, product_id BIGINT NOT NULL, quantity BIGINT NOT NULL) \
     ENGINE=InnoDB",
    "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE transfers (id VARCHAR(64) PRIMARY KEY, from_id BIGINT NOT NULL, \
     to_id BIGINT NOT NULL, amount BIGINT NOT NULL) ENGINE=InnoDB",
];

/// The lab's scratch database on one server, and the pool into it.
#[derive(Debug, Clone)]
pub struct Lab {
    pool: Pool,
    database: String,
    /// Options into the scratch database, for connections outside the pool.
    opts: OptsBuilder,
}

impl Lab {
    /// Connects to the server of `opts`, creates a scratch database `saldo_lab_<random>` with
    /// the lab's schema, and pools connections into it.
    pub async fn create(opts: OptsBuilder) -> Result<Lab, InnoDbError> {
        let database = format!("saldo_lab_{:08x}", rand::rng().random::<u32>());
        let mut admin = Conn::new(opts.clone()).await?;
        admin
            .query_drop(format!("CREATE DATABASE `{database}`"))
            .await?;
        admin.disconnect().await?;
        let constraints = PoolConstraints::new(0, POOL_MAX)
            .ok_or_else(|| InnoDbError::Input("pool constraints".into()))?;
        let opts = opts
            .db_name(Some(database.clone()))
            .pool_opts(PoolOpts::default().with_constraints(constraints))
            .init(vec![format!(
                "SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}"
            )]);
        let lab = Lab {
            pool: Pool::new(opts.clone()),
            database,
            opts,
        };
        let mut conn = lab.conn().await?;
        for statement in SCHEMA {
            conn.query_drop(*statement).await?;
        }
        Ok(lab)
    }

    /// Options for the private server's socket and user.
    pub fn opts_for(server: &mariadb_local::MariaDb) -> OptsBuilder {
        OptsBuilder::default()
            .socket(Some(server.socket().display().to_string()))
            .user(Some(mariadb_local::USER))
            .pass(Some(server.password()))
    }

    /// Options from a `mysql://user:password@host:port/` URL (`?socket=` for a Unix socket).
    pub fn opts_from_url(url: &str) -> Result<OptsBuilder, InnoDbError> {
        let opts = mysql_async::Opts::from_url(url).map_err(mysql_async::Error::from)?;
        Ok(OptsBuilder::from_opts(opts))
    }

    /// One pooled connection, bounded by [`OP_TIMEOUT`].
    pub async fn conn(&self) -> Result<Conn, InnoDbError> {
        bounded("getting a connection", self.pool.get_conn()).await?
    }

    /// A connection of its own (not pooled) into the scratch database, with `adjust` applied
    /// to its options (say, `client_found_rows(true)`); bounded by [`OP_TIMEOUT`].
    pub async fn single(
        &self,
        adjust: impl FnOnce(OptsBuilder) -> OptsBuilder,
    ) -> Result<Conn, InnoDbError> {
        bounded("connecting", Conn::new(adjust(self.opts.clone()))).await?
    }

    pub fn database(&self) -> &str {
        &self.database
    }

    /// Empties every table and stocks product 1 with `units`.
    pub async fn reset_stock(&self, units: i64) -> Result<(), InnoDbError> {
        let mut conn = self.conn().await?;
        for table in ["stock", "reservations", "accounts", "transfers"] {
            conn.query_drop(format!("TRUNCATE TABLE {table}")).await?;
        }
        conn.exec_drop(
            "INSERT INTO stock (product_id, available) VALUES (1, ?)",
            (units,),
        )
        .await?;
        Ok(())
    }

    /// Drops the scratch database and closes the pool.
    pub async fn drop_database(self) -> Result<(), InnoDbError> {
        let mut conn = self.conn().await?;
        conn.query_drop(format!("DROP DATABASE `{}`", self.database))
            .await?;
        drop(conn);
        self.pool.disconnect().await?;
        Ok(())
    }
}

/// `work` bounded by [`OP_TIMEOUT`].
pub async fn bounded<T>(
    what: &'static str,
    work: impl Future<Output = Result<T, mysql_async::Error>>,
) -> Result<Result<T, InnoDbError>, InnoDbError> {
    match tokio::time::timeout(OP_TIMEOUT, work).await {
        Ok(result) => Ok(result.map_err(InnoDbError::from)),
        Err(_) => Err(InnoDbError::Timeout { what }),
    }
}

/// Retries of one whole transaction, by server code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retries {
    pub deadlocks: u64,
    pub lock_timeouts: u64,
}

/// Runs `attempt` (one whole transaction on a fresh connection) until it succeeds or fails
/// with a non-retryable error, at most [`RETRY_ATTEMPTS`] times (or once when `retry` is off),
/// sleeping a random 1..=2^(n+1) ms (capped at [`MAX_BACKOFF_MS`]) between attempts. Returns the outcome and
/// the retries it took.
pub async fn with_retry<T, F, Fut>(retry: bool, mut attempt: F) -> (Result<T, InnoDbError>, Retries)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, InnoDbError>>,
{
    let mut retries = Retries::default();
    let attempts = if retry { RETRY_ATTEMPTS } else { 1 };
    let mut n = 0;
    loop {
        n += 1;
        let result = attempt().await;
        let code = match &result {
            Err(e) if is_retryable(e) && n < attempts => server_code(e),
            _ => return (result, retries),
        };
        if code == Some(ER_LOCK_DEADLOCK) {
            retries.deadlocks += 1;
        } else {
            retries.lock_timeouts += 1;
        }
        let cap = (2u64 << n.min(8)).min(MAX_BACKOFF_MS);
        let jitter = rand::rng().random_range(1..=cap);
        tokio::time::sleep(Duration::from_millis(jitter)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlocks_and_lock_wait_timeouts_are_retryable_and_nothing_else_is() {
        assert!(retryable_code(ER_LOCK_DEADLOCK));
        assert!(retryable_code(ER_LOCK_WAIT_TIMEOUT));
        // Duplicate key, CHECK violated, no such table, server gone, syntax.
        for code in [1062, 4025, 3819, 1146, 2006, 1064, 0] {
            assert!(!retryable_code(code), "{code}");
        }
        let timeout = InnoDbError::Timeout { what: "x" };
        assert!(!is_retryable(&timeout));
    }

    fn server_error(code: u16) -> InnoDbError {
        InnoDbError::Sql(mysql_async::Error::Server(mysql_async::ServerError {
            code,
            message: "test".into(),
            state: "40001".into(),
        }))
    }

    #[tokio::test]
    async fn the_retry_reruns_deadlocks_and_lock_timeouts_only_and_is_bounded() {
        // Two retryable failures, then success: three attempts, both counted by code.
        let mut codes = vec![ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT].into_iter();
        let (result, retries) = with_retry(true, || {
            let next = codes.next();
            async move { next.map_or(Ok(()), |code| Err(server_error(code))) }
        })
        .await;
        assert!(result.is_ok());
        assert_eq!((retries.deadlocks, retries.lock_timeouts), (1, 1));
        // A duplicate key is returned at once.
        let (result, retries) =
            with_retry(true, || async { Err::<(), _>(server_error(1062)) }).await;
        assert_eq!(result.as_ref().err().and_then(server_code), Some(1062));
        assert_eq!(retries, Retries::default());
        // Without the retry the deadlock reaches the caller.
        let (result, _) = with_retry(false, || async {
            Err::<(), _>(server_error(ER_LOCK_DEADLOCK))
        })
        .await;
        assert_eq!(
            result.as_ref().err().and_then(server_code),
            Some(ER_LOCK_DEADLOCK)
        );
    }

    #[test]
    fn a_url_may_name_a_unix_socket() {
        let opts = Lab::opts_from_url("mysql://u:p@localhost:3306/?socket=/tmp/x.sock")
            .map(mysql_async::Opts::from)
            .expect("url");
        assert_eq!(opts.socket(), Some("/tmp/x.sock"));
        assert!(
            !opts.client_found_rows(),
            "rows affected count changed rows"
        );
        assert!(Lab::opts_from_url("postgres://x").is_err());
    }

    #[test]
    fn isolation_levels_parse_from_their_names() {
        for &level in Isolation::ALL {
            assert_eq!(Isolation::parse(level.as_str()).ok(), Some(level));
        }
        assert!(Isolation::parse("serializable").is_err());
    }
}
