//! Citus test databases, reused. Making one takes seconds (a `CREATE DATABASE` and the
//! extension on every node, then every table's shards made by the migrations: 4–7 s on a
//! busy 2-core machine); emptying one takes about a second. So a database whose test is done
//! goes back to a short list of spares ([`Returned`]), and the next test that asks gets it back
//! exactly as migrated ([`take`]):
//! - unless anything besides rows changed on any node since it was migrated (a test's trigger,
//!   constraint, column, function, schema, database setting, node or shard placement): a
//!   digest of each node's catalogs, taken right after migrating ([`Baseline`]), must match,
//!   or the database is dropped and a fresh one made;
//! - every other session in it is ended first, and a two-phase commit left half done by one is
//!   resolved (`recover_prepared_transactions`), so nothing holds a lock on what is emptied;
//! - every table is truncated (identities restarted) except the migrations' history, the rows
//!   the migrations wrote (the system account, the feed's state) are put back as they were, and
//!   every other sequence restarts.
//!
//! At most [`MAX_SPARES`] wait; any more are dropped on every node, as every database was before
//! (a Citus database left behind keeps a maintenance daemon busy on every node).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::NoTls;

/// Spare databases kept at most: a test process runs two tests at a time (libtest's default
/// on 2 cores), a few of which use two databases.
pub const MAX_SPARES: usize = 4;

/// This process's limit, [`MAX_SPARES`] unless [`limit_spares`] lowered it.
static SPARE_LIMIT: AtomicUsize = AtomicUsize::new(MAX_SPARES);

/// Keeps at most `n` spares (never more than [`MAX_SPARES`]) from now on: for a test binary
/// that counts them, whose every Citus database beyond the limit costs a whole migration.
pub fn limit_spares(n: usize) {
    SPARE_LIMIT.store(n.min(MAX_SPARES), Ordering::Relaxed);
}

/// The spares this process keeps at most.
pub fn spare_limit() -> usize {
    SPARE_LIMIT.load(Ordering::Relaxed)
}

/// How long emptying a spare may wait for a lock or a statement before the spare is dropped.
const RESET_LIMIT_MS: u64 = 30_000;
/// How long a connection to a node may take: a node that does not answer in this time makes
/// the spare a refusal (it is dropped), never a test that hangs.
const CONNECT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A node's catalogs in one digest: everything a test could change besides rows.
const CATALOG_DIGEST: &str = "\
    SELECT md5(coalesce(string_agg(line, E'\\n' ORDER BY line), '')) FROM ( \
      SELECT format('schema %s', nspname) AS line FROM pg_namespace \
        WHERE nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%' \
      UNION ALL SELECT format('class %s %s %s', c.relname, c.relkind, c.relacl) \
        FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace \
      UNION ALL SELECT format('column %s %s %s %s %s %s', c.relname, a.attname, \
          a.atttypid::regtype, a.attnotnull, a.attisdropped, a.attgenerated) \
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
        WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 \
      UNION ALL SELECT format('default %s %s', c.relname, pg_get_expr(d.adbin, d.adrelid)) \
        FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid \
        WHERE c.relnamespace = 'public'::regnamespace \
      UNION ALL SELECT format('constraint %s %s %s', conrelid, conname, \
          pg_get_constraintdef(oid)) \
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace \
      UNION ALL SELECT format('trigger %s %s %s', c.relname, t.tgname, t.tgenabled) \
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
        WHERE c.relnamespace = 'public'::regnamespace \
      UNION ALL SELECT format('rule %s %s', c.relname, r.rulename) \
        FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class \
        WHERE c.relnamespace = 'public'::regnamespace \
      UNION ALL SELECT format('policy %s %s', polrelid, polname) FROM pg_policy \
      UNION ALL SELECT format('function %s %s', p.oid::regprocedure, md5(p.prosrc)) \
        FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace \
      UNION ALL SELECT format('setting %s %s', setrole, setconfig) FROM pg_db_role_setting \
        WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) \
      UNION ALL SELECT format('extension %s %s', extname, extversion) FROM pg_extension \
      UNION ALL SELECT format('node %s %s %s %s %s', nodeid, nodename, nodeport, isactive, \
          shouldhaveshards) FROM pg_dist_node \
      UNION ALL SELECT format('placement %s %s', shardid, groupid) FROM pg_dist_placement \
      UNION ALL SELECT format('distributed %s %s %s', logicalrelid, partmethod, colocationid) \
        FROM pg_dist_partition \
    ) lines";

/// The user tables of the database (the migrations' history aside): what a reset empties.
const TABLES: &str = "\
    SELECT c.relname FROM pg_class c \
    WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') \
      AND NOT c.relispartition AND c.relname <> 'refinery_schema_history' \
    ORDER BY c.relname";

/// The sequences no column owns (a column's restarts with its table's `RESTART IDENTITY`).
const FREE_SEQUENCES: &str = "\
    SELECT s.relname FROM pg_class s \
    WHERE s.relnamespace = 'public'::regnamespace AND s.relkind = 'S' \
      AND NOT EXISTS (SELECT 1 FROM pg_depend d \
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = s.oid \
                        AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')) \
    ORDER BY s.relname";

/// The insertable columns of a table (not generated, not dropped), in order.
const COLUMNS: &str = "\
    SELECT a.attname FROM pg_attribute a \
    WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
      AND a.attgenerated = '' \
    ORDER BY a.attnum";

/// A freshly migrated database as it was: each node's catalog digest, its tables, and the rows
/// the migrations wrote.
pub(super) struct Baseline {
    digests: Vec<String>,
    tables: Vec<String>,
    free_sequences: Vec<String>,
    /// (table, its insertable columns, its rows as a JSON array) for each table that had rows.
    seeds: Vec<Seed>,
}

struct Seed {
    table: String,
    columns: Vec<String>,
    rows: String,
}

/// A database, its name and how it was when migrated.
pub(super) struct Spare {
    pub(super) name: String,
    pub(super) baseline: Arc<Baseline>,
}

static SPARES: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

/// Why a spare could not be reused (it is dropped instead).
type Refusal = String;

fn failed(what: &str) -> impl Fn(tokio_postgres::Error) -> Refusal + '_ {
    move |e| format!("{what}: {e}")
}

/// Connects to `node` (a cluster member) in `database`; the connection ends with the client.
async fn connect(
    node: &pg_local::Cluster,
    database: &str,
) -> Result<tokio_postgres::Client, Refusal> {
    let mut config: tokio_postgres::Config =
        node.url(database).parse().map_err(failed("connect"))?;
    config.connect_timeout(CONNECT_LIMIT);
    let (client, connection) = config.connect(NoTls).await.map_err(failed("connect"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// Every node's catalog digest of `database`, coordinator first.
async fn digests(cluster: &pg_local::CitusCluster, database: &str) -> Result<Vec<String>, Refusal> {
    let mut out = Vec::new();
    for node in cluster.nodes() {
        let client = connect(node, database).await?;
        let row = client
            .query_one(CATALOG_DIGEST, &[])
            .await
            .map_err(failed("catalog digest"))?;
        out.push(row.get(0));
    }
    Ok(out)
}

async fn names(client: &tokio_postgres::Client, sql: &str) -> Result<Vec<String>, Refusal> {
    let rows = client.query(sql, &[]).await.map_err(failed(sql))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Quotes an identifier for SQL text (the names come from the catalogs).
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Baseline {
    /// How `database` is right after its migration (every node's digest, its tables, the rows
    /// the migrations wrote). `Err` means it cannot be reused; the test can still use it.
    pub(super) async fn capture(
        cluster: &pg_local::CitusCluster,
        database: &str,
    ) -> Result<Baseline, Refusal> {
        let client = connect(cluster.coordinator(), database).await?;
        let tables = names(&client, TABLES).await?;
        let free_sequences = names(&client, FREE_SEQUENCES).await?;
        let mut seeds = Vec::new();
        for table in &tables {
            let rows: String = client
                .query_one(
                    &format!(
                        "SELECT coalesce(json_agg(t), '[]')::text FROM {} t",
                        quoted(table)
                    ),
                    &[],
                )
                .await
                .map_err(failed("seed rows"))?
                .get(0);
            if rows != "[]" {
                let columns = client
                    .query(COLUMNS, &[table])
                    .await
                    .map_err(failed("columns"))?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                seeds.push(Seed {
                    table: table.clone(),
                    columns,
                    rows,
                });
            }
        }
        Ok(Baseline {
            digests: digests(cluster, database).await?,
            tables,
            free_sequences,
            seeds,
        })
    }
}

/// A spare database emptied back to its baseline, if one is waiting and can be; a spare that
/// cannot is dropped (reported on stderr) and the next one tried.
pub(super) async fn take(cluster: &Arc<pg_local::CitusCluster>) -> Option<Spare> {
    loop {
        let spare = lock_spares().pop()?;
        match reset(cluster, &spare).await {
            Ok(()) => return Some(spare),
            Err(why) => {
                eprintln!(
                    "Citus test database {} not reused ({why}): dropped",
                    spare.name
                );
                drop_now(cluster.clone(), spare.name).await;
            }
        }
    }
}

fn lock_spares() -> std::sync::MutexGuard<'static, Vec<Spare>> {
    // A panic while holding it cannot leave the list half-changed (push and pop only).
    SPARES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Drops `database` on every node (blocking work, off the runtime's threads).
async fn drop_now(cluster: Arc<pg_local::CitusCluster>, database: String) {
    let name = database.clone();
    let dropped = tokio::task::spawn_blocking(move || cluster.drop_database(&database)).await;
    if !matches!(dropped, Ok(Ok(()))) {
        eprintln!("dropping Citus test database {name} failed; it is left behind");
    }
}

/// Empties `spare` back to its baseline, or says why it cannot be.
async fn reset(cluster: &pg_local::CitusCluster, spare: &Spare) -> Result<(), Refusal> {
    let baseline = &spare.baseline;
    let client = connect(cluster.coordinator(), &spare.name).await?;
    client
        .batch_execute(&format!(
            "SET lock_timeout = {RESET_LIMIT_MS}; SET statement_timeout = {RESET_LIMIT_MS}"
        ))
        .await
        .map_err(failed("limits"))?;
    // The last test's sessions: their runtime has ended, but a backend may still be rolling
    // back. Waits (bounded) until each has exited.
    client
        .execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND backend_type = 'client backend'",
            &[],
        )
        .await
        .map_err(failed("ending the last test's sessions"))?;
    client
        .execute("SELECT recover_prepared_transactions()", &[])
        .await
        .map_err(failed("recover_prepared_transactions"))?;
    if digests(cluster, &spare.name).await? != baseline.digests {
        return Err("its catalogs changed since it was migrated".into());
    }
    let tables: Vec<String> = baseline.tables.iter().map(|t| quoted(t)).collect();
    let mut sql = format!("TRUNCATE {} RESTART IDENTITY CASCADE;", tables.join(", "));
    for sequence in &baseline.free_sequences {
        sql.push_str(&format!("ALTER SEQUENCE {} RESTART;", quoted(sequence)));
    }
    client
        .batch_execute(&sql)
        .await
        .map_err(failed("emptying"))?;
    for seed in &baseline.seeds {
        let columns: Vec<String> = seed.columns.iter().map(|c| quoted(c)).collect();
        let columns = columns.join(", ");
        let insert = format!(
            "INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE \
             SELECT {columns} FROM json_populate_recordset(NULL::{table}, $1::text::json)",
            table = quoted(&seed.table)
        );
        client
            .execute(&insert, &[&seed.rows])
            .await
            .map_err(failed("putting the migrations' rows back"))?;
    }
    Ok(())
}

/// Hands a Citus test database back when its `TestDb` is dropped: kept as a spare (at most
/// [`MAX_SPARES`]), or dropped on every node.
pub(super) struct Returned {
    pub(super) cluster: Arc<pg_local::CitusCluster>,
    pub(super) name: String,
    /// `None`: its baseline could not be taken, so it cannot be reused.
    pub(super) baseline: Option<Arc<Baseline>>,
}

impl Drop for Returned {
    fn drop(&mut self) {
        if let Some(baseline) = self.baseline.take() {
            let mut spares = lock_spares();
            if spares.len() < spare_limit() {
                spares.push(Spare {
                    name: std::mem::take(&mut self.name),
                    baseline,
                });
                return;
            }
        }
        // `WITH (FORCE)` ends the sessions still open (the pool's, a worker task's) and waits
        // at most 5 s for them to exit before failing: the drop is bounded. A failure only
        // leaves the database behind, so it is reported and not raised.
        if let Err(e) = self.cluster.drop_database(&self.name) {
            eprintln!("dropping Citus test database {}: {e}", self.name);
        }
    }
}
