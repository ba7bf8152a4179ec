//! What of a stranger's database almanac lets SQLite do: no SQL the schema holds runs (a view, a
//! generated column, a virtual table of a module SQLite does not ship is found and the store refused),
//! and the connection is hardened (read only, triggers and views off, an untrusted schema, nothing
//! attached, values and memory bounded).

/// The longest string, blob or row SQLite makes or reads on almanac's connection (`SQLITE_LIMIT_LENGTH`,
/// 1 GB by default): a longer value fails its session's query (and a session row that long, the
/// store's). Well above what one session may hold (`MAX_SESSION_BYTES`), so a real store's large value
/// is left out of its message rather than failing the read.
pub(super) const MAX_LENGTH: i32 = 256 << 20;

/// The most SQLite may allocate in this process: a query past it fails rather than the sweep.
const HEAP_LIMIT: i64 = 1 << 30;

/// The virtual table modules SQLite itself ships: a table of another module is code almanac lacks, named
/// by the store.
const KNOWN_MODULES: &[&str] = &["fts3", "fts4", "fts5", "rtree", "rtree_i32"];

/// The connection made what almanac needs and no more: read only, no trigger or view, the schema
/// untrusted (its functions limited to SQLite's innocuous ones), nothing attached, values bounded.
pub(super) fn harden(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::config::DbConfig as C;
    use rusqlite::limits::Limit as L;
    for (setting, on) in [
        (C::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false),
        (C::SQLITE_DBCONFIG_ENABLE_TRIGGER, false),
        (C::SQLITE_DBCONFIG_ENABLE_VIEW, false),
        (C::SQLITE_DBCONFIG_DEFENSIVE, true),
    ] {
        conn.set_db_config(setting, on)?;
    }
    for (limit, value) in [
        (L::SQLITE_LIMIT_LENGTH, MAX_LENGTH),
        (L::SQLITE_LIMIT_SQL_LENGTH, 1 << 20),
        (L::SQLITE_LIMIT_ATTACHED, 0),
        (L::SQLITE_LIMIT_TRIGGER_DEPTH, 1),
        (L::SQLITE_LIMIT_VARIABLE_NUMBER, 8),
        (L::SQLITE_LIMIT_WORKER_THREADS, 0),
    ] {
        conn.set_limit(limit, value)?;
    }
    // SAFETY: sets SQLite's process-wide allocation limit; any thread may call it at any time.
    unsafe {
        rusqlite::ffi::sqlite3_hard_heap_limit64(HEAP_LIMIT);
    }
    conn.pragma_update(None, "query_only", true)?;
    conn.pragma_update(None, "cell_size_check", true)
}

/// What in the database's schema is SQL that a read would run: views, generated columns (hidden 2 or 3
/// in `table_xinfo`) and virtual tables of modules SQLite does not ship. Triggers stay: no read fires
/// one, the connection cannot write, and triggers are off on it (real Crush databases define some).
pub(super) fn schema_sql(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT type, name, COALESCE(sql, '') FROM sqlite_master WHERE type IN ('view', 'table')",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    for row in rows {
        let (kind, name, sql) = row?;
        let name = crate::util::term::visible(&name).into_owned();
        if kind == "view" {
            found.push(format!("the view `{name}`"));
            continue;
        }
        let Some(module) = virtual_module(&sql) else {
            continue;
        };
        let known = module
            .as_deref()
            .is_some_and(|m| KNOWN_MODULES.contains(&m.to_ascii_lowercase().as_str()));
        if !known {
            let m = module.unwrap_or_else(|| "that almanac cannot read".into());
            let m = crate::util::term::visible(&m).into_owned();
            found.push(format!("the virtual table `{name}` of the module `{m}`"));
        }
    }
    let mut stmt = conn.prepare(
        "SELECT m.name, x.name FROM sqlite_master AS m JOIN pragma_table_xinfo(m.name) AS x \
         WHERE m.type = 'table' AND COALESCE(m.sql, '') NOT LIKE 'CREATE VIRTUAL%' AND x.hidden IN (2, 3)",
    )?;
    let generated = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    for g in generated {
        let (table, column) = g?;
        let (table, column) = (
            crate::util::term::visible(&table).into_owned(),
            crate::util::term::visible(&column).into_owned(),
        );
        found.push(format!("the generated column `{table}.{column}`"));
    }
    Ok(found)
}

/// For a `CREATE VIRTUAL TABLE` statement, its module (None inside when the statement does not read as
/// SQLite reads it: refused, as an unknown module is); None for any other statement. Tokenised as SQLite
/// does (comments, quoted names), so a name or comment holding `USING fts5` is not taken for the module.
fn virtual_module(sql: &str) -> Option<Option<String>> {
    let mut t = Tokens { rest: sql };
    let word = |w: Option<String>, kw: &str| w.is_some_and(|w| w.eq_ignore_ascii_case(kw));
    if !word(t.next(), "create") || !word(t.next(), "virtual") {
        return None;
    }
    if !word(t.next(), "table") {
        return Some(None);
    }
    let mut next = t.next();
    if next
        .as_deref()
        .is_some_and(|w| w.eq_ignore_ascii_case("if"))
    {
        if !word(t.next(), "not") || !word(t.next(), "exists") {
            return Some(None);
        }
        next = t.next();
    }
    // The table's name, schema-qualified or not.
    if next.is_none() {
        return Some(None);
    }
    let mut next = t.next();
    if next.as_deref() == Some(".") {
        t.next();
        next = t.next();
    }
    if !word(next, "using") {
        return Some(None);
    }
    Some(t.next().filter(|m| !m.is_empty() && m != "("))
}

/// SQL tokens as SQLite's tokenizer splits them: whitespace and comments skipped, a quoted name
/// (`"…"`, `` `…` ``, `[…]`, `'…'`) one token without its quotes, a word one token, else one character.
struct Tokens<'a> {
    rest: &'a str,
}

impl Tokens<'_> {
    fn next(&mut self) -> Option<String> {
        loop {
            self.rest = self.rest.trim_start();
            if let Some(r) = self.rest.strip_prefix("--") {
                self.rest = r.split_once('\n').map_or("", |(_, after)| after);
            } else if let Some(r) = self.rest.strip_prefix("/*") {
                self.rest = r.split_once("*/").map_or("", |(_, after)| after);
            } else {
                break;
            }
        }
        let c = self.rest.chars().next()?;
        let close = match c {
            '"' => Some('"'),
            '`' => Some('`'),
            '\'' => Some('\''),
            '[' => Some(']'),
            _ => None,
        };
        if let Some(close) = close {
            let mut out = String::new();
            let mut chars = self.rest[1..].char_indices();
            while let Some((i, ch)) = chars.next() {
                if ch == close {
                    // A doubled quote is one quote in the name (not for `[…]`).
                    if close != ']' && self.rest[1 + i + 1..].starts_with(close) {
                        out.push(close);
                        chars.next();
                        continue;
                    }
                    self.rest = &self.rest[1 + i + 1..];
                    return Some(out);
                }
                out.push(ch);
            }
            self.rest = "";
            return Some(out);
        }
        let len = self
            .rest
            .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '$'))
            .unwrap_or(self.rest.len())
            .max(c.len_utf8());
        let (tok, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(tok.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_own_sql_is_found_and_what_sqlite_ships_is_not() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (a TEXT, b TEXT GENERATED ALWAYS AS (upper(a)) STORED,
                             c TEXT GENERATED ALWAYS AS (lower(a)) VIRTUAL);
             CREATE TABLE plain (x);
             CREATE TRIGGER tr AFTER INSERT ON plain BEGIN DELETE FROM plain; END;
             CREATE VIEW v AS SELECT 1;
             CREATE VIRTUAL TABLE docs USING fts5(body);
             PRAGMA writable_schema = ON;
             INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql)
               VALUES ('table', 'odd', 'odd', 0, 'create virtual table odd using \"Evil_Mod\"(x)');
             PRAGMA writable_schema = OFF;",
        )
        .unwrap();
        let mut found = schema_sql(&conn).unwrap();
        found.sort();
        assert_eq!(
            found,
            [
                "the generated column `t.b`",
                "the generated column `t.c`",
                "the view `v`",
                "the virtual table `odd` of the module `Evil_Mod`",
            ]
        );
    }

    #[test]
    fn a_virtual_tables_module_is_read_as_sqlite_reads_it() {
        let m = |sql: &str| virtual_module(sql);
        assert_eq!(m("CREATE TABLE t (x)"), None);
        assert_eq!(
            m("CREATE VIRTUAL TABLE d USING fts5(body)"),
            Some(Some("fts5".into()))
        );
        assert_eq!(
            m("create virtual table if not exists main.\"d\" using \"FTS5\" (x)"),
            Some(Some("FTS5".into()))
        );
        assert_eq!(
            m("CREATE VIRTUAL TABLE \"a USING fts5\" USING evil(x)"),
            Some(Some("evil".into()))
        );
        assert_eq!(
            m("CREATE VIRTUAL TABLE a /* USING fts5 */ USING evil(x)"),
            Some(Some("evil".into()))
        );
        assert_eq!(
            m("CREATE VIRTUAL TABLE a -- USING fts5\n USING [evil] (x)"),
            Some(Some("evil".into()))
        );
        assert_eq!(m("CREATE VIRTUAL TABLE a (x)"), Some(None));
    }

    #[test]
    fn a_hardened_connection_reads_and_refuses_what_would_write_or_attach() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (zeroblob(1000));")
            .unwrap();
        harden(&conn).unwrap();
        let n: i64 = conn
            .query_row("SELECT length(x) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1000);
        assert!(conn.execute("INSERT INTO t VALUES (1)", []).is_err());
        assert!(conn.execute_batch("ATTACH ':memory:' AS other").is_err());
        let long = conn.query_row("SELECT zeroblob(?1)", [i64::from(MAX_LENGTH) + 1], |r| {
            r.get::<_, Vec<u8>>(0)
        });
        assert!(long.is_err());
    }
}
