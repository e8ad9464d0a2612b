//! Which schema a database gets. On one PostgreSQL: the portable migrations of `migrations/`.
//! On a Citus coordinator: the same list, with each Citus twin of `migrations-citus/` (same
//! version, same name) in place of its portable migration, so the tables come out distributed
//! (ARCHITECTURE.md, "On Citus"). A migration without a twin runs as it is on both: Citus
//! propagates `ALTER TABLE … ADD COLUMN` and checks. A new migration needs a twin when it creates
//! a table (it must be distributed or made a reference table), a trigger, a foreign key between
//! tables that are not co-located, or a unique index without the distribution column; the twin
//! says in its header what it replaces and what refuses the same writes instead.
//!
//! On Citus every migration runs as one `DO` block that `EXECUTE`s its statements one at a time:
//! Citus forwards a DDL statement to the workers as the text it came in, and a text of several
//! statements (what a migration file is) is refused there ("cannot insert multiple commands into
//! a prepared statement"). [`statements`] splits a file the way PostgreSQL's lexer would (quotes,
//! dollar quotes, comments).

use refinery::Migration;

use crate::error::Error;

mod portable {
    refinery::embed_migrations!("../../migrations");
}

mod citus {
    refinery::embed_migrations!("../../migrations-citus");
}

/// How the schema is laid out on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One PostgreSQL: the portable migrations.
    Single,
    /// A Citus coordinator: the tables distributed (and the Citus twins of the migrations).
    Citus,
}

impl Layout {
    /// The name operators see: `single` or `citus`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Single => "single",
            Layout::Citus => "citus",
        }
    }
}

/// [`Layout::Citus`] when the Citus extension is installed in the connected database.
pub async fn detect(client: &tokio_postgres::Client) -> Result<Layout, Error> {
    let citus: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            &[],
        )
        .await?
        .get(0);
    Ok(if citus { Layout::Citus } else { Layout::Single })
}

/// The migrations of `layout`, in version order.
pub fn migrations(layout: Layout) -> Vec<Migration> {
    let portable = portable::migrations::runner().get_migrations().clone();
    if layout == Layout::Single {
        return portable;
    }
    let twins = citus::migrations::runner().get_migrations().clone();
    portable
        .into_iter()
        .map(|m| {
            let m = twins
                .iter()
                .find(|t| t.version() == m.version())
                .cloned()
                .unwrap_or(m);
            let sql = one_statement_at_a_time(m.sql().unwrap_or_default());
            // The name is refinery's own `V<version>__<name>`, which it parsed once already.
            Migration::unapplied(&format!("V{}__{}", m.version(), m.name()), &sql)
                .expect("an embedded migration's name parses")
        })
        .collect()
}

/// Dollar-quote tags of the generated `DO` block; a statement containing one is refused (it
/// would end the quote early), which [`tests`] checks for every embedded migration.
const BLOCK_TAG: &str = "$saldo_migration$";
const STATEMENT_TAG: &str = "$saldo_statement$";

/// `sql` as one `DO` block executing each of its statements on its own.
fn one_statement_at_a_time(sql: &str) -> String {
    let mut block = format!("DO {BLOCK_TAG} BEGIN\n");
    for statement in statements(sql) {
        assert!(
            !statement.contains(BLOCK_TAG) && !statement.contains(STATEMENT_TAG),
            "a migration statement contains saldo's dollar-quote tag"
        );
        block.push_str(&format!(
            "EXECUTE {STATEMENT_TAG}{statement}{STATEMENT_TAG};\n"
        ));
    }
    block.push_str(&format!("END {BLOCK_TAG};\n"));
    block
}

/// The statements of `sql`, split at semicolons outside quotes, dollar quotes and comments,
/// without the ones that are only comments or blanks.
pub fn statements(sql: &str) -> Vec<&str> {
    let bytes = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i, mut code) = (0, 0, false);
    let mut push = |from: usize, to: usize, code: bool| {
        let text = sql[from..to].trim();
        if code && !text.is_empty() {
            out.push(text);
        }
    };
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
            }
            quote @ (b'\'' | b'"') => {
                code = true;
                // A doubled quote inside is an escaped one: the scan just continues after it.
                i = sql[i + 1..]
                    .find(char::from(quote))
                    .map_or(bytes.len(), |n| i + 1 + n + 1);
            }
            b'$' => {
                code = true;
                let tag_end = sql[i + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map(|n| i + 1 + n);
                match tag_end.filter(|&e| bytes[e] == b'$') {
                    Some(e) => {
                        let tag = &sql[i..=e];
                        i = sql[e + 1..]
                            .find(tag)
                            .map_or(bytes.len(), |n| e + 1 + n + tag.len());
                    }
                    None => i += 1,
                }
            }
            b';' => {
                push(start, i, code);
                (start, code) = (i + 1, false);
                i += 1;
            }
            c => {
                code |= !c.is_ascii_whitespace();
                i += 1;
            }
        }
    }
    push(start, bytes.len(), code);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_only_outside_quotes_and_comments() {
        let sql = "-- a comment; not a statement\n\
                   CREATE TABLE t (s text CHECK (s <> ';'), \"a;b\" int); /* x; y */\n\
                   SELECT 'it''s; fine';\n\
                   CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $f$ SELECT 1; $f$;\n\
                   -- trailing comment only";
        assert_eq!(
            statements(sql),
            [
                "-- a comment; not a statement\nCREATE TABLE t (s text CHECK (s <> ';'), \"a;b\" int)",
                "/* x; y */\nSELECT 'it''s; fine'",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $f$ SELECT 1; $f$",
            ]
        );
        assert!(statements("-- nothing\n  ;  ").is_empty());
    }

    /// Every embedded migration turns into a block (no statement holds saldo's tags).
    #[test]
    fn every_migration_becomes_one_block() {
        for m in migrations(Layout::Citus) {
            let sql = m.sql().expect("sql");
            assert!(sql.starts_with("DO "), "{m}");
            assert!(sql.matches("EXECUTE ").count() >= 1, "{m}");
        }
    }

    /// A twin replaces exactly one portable migration of the same version and name: a twin
    /// without one (a typo, a renumbered migration) would silently never run.
    #[test]
    fn every_citus_twin_has_its_portable_migration() {
        let portable = migrations(Layout::Single);
        let twins = citus::migrations::runner().get_migrations().clone();
        assert!(!twins.is_empty());
        for twin in &twins {
            let original = portable
                .iter()
                .find(|m| m.version() == twin.version())
                .unwrap_or_else(|| panic!("{twin} has no portable migration"));
            assert_eq!(original.name(), twin.name(), "{twin}");
        }
        let distributed = migrations(Layout::Citus);
        assert_eq!(distributed.len(), portable.len());
        for (m, d) in portable.iter().zip(&distributed) {
            assert_eq!(m.version(), d.version());
        }
    }
}
