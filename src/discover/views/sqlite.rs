//! A SQLite store, read through a private copy: opening the app's database (even read-only) would
//! create `-wal` and `-shm` files beside it, and `immutable` would miss the rows only its WAL holds. The
//! database and its WAL are copied into a private directory (the same size and mtime before and after
//! the copy, else copied again), opened there with `query_only`, and the copy removed.
//!
//! The database is a stranger's data: no SQL it holds runs (`schema`), and its copy is bounded
//! (`copy`). Each session is handed on as it is read, its rows counted against the bounds of one session.

use super::read::{session_id, text_at, Bounds, Messages, ReadError, SessionRead, Sink};
use super::schema::{harden, schema_sql, MAX_LENGTH};
use crate::rules::views::ViewSpec;
use rusqlite::types::ValueRef;
use serde_json::{Map, Value};
use std::path::Path;

/// The most one store's queries may take (a hostile schema can make a query endless); a test may set
/// `ALMANAC_TEST_STORE_DEADLINE_MS`.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);
/// A value larger than this is left out of the message (`[N bytes left out]`): parsed, it would cost
/// many times its size.
pub const MAX_VALUE: usize = 32 << 20;
/// A database that is corrupt (or not one) counts as being written only this long after it changed, or
/// while a rollback journal is beside it; after that it needs attention.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(60);

fn deadline() -> std::time::Duration {
    std::env::var("ALMANAC_TEST_STORE_DEADLINE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEADLINE, std::time::Duration::from_millis)
}

fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> ReadError {
    use rusqlite::ErrorCode::*;
    let text = format!("{}: {what}: {e}", path.display());
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => ReadError::Busy(text),
        Some(DatabaseCorrupt | NotADatabase) if being_written(path) => ReadError::Busy(text),
        Some(OperationInterrupted) => ReadError::Bad(format!(
            "{}: {what} took longer than {}s and was stopped (a store whose queries never end is not read)",
            path.display(),
            deadline().as_secs()
        )),
        Some(DiskFull | CannotOpen | SystemIoFailure) => ReadError::Local(text),
        _ => ReadError::Bad(text),
    }
}

/// Whether a database that reads as corrupt may be one caught mid-write: it changed within `SETTLED`,
/// or a rollback journal is beside it.
fn being_written(path: &Path) -> bool {
    changed_lately(path) || std::fs::symlink_metadata(super::beside(path, "-journal")).is_ok()
}

/// Whether a file changed within `SETTLED` (or its age cannot be told): one that reads as broken may
/// be one caught mid-write, read again next sweep; after that, it is what it is.
pub fn changed_lately(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < SETTLED)
}

/// A row as an object: columns by name; `json_columns` parsed (kept as text when they are not JSON, or
/// would take more than one session's bound parsed), a blob as lower-case hex. With the bytes its
/// values hold and what its parsed JSON takes in memory.
fn row_object(
    row: &rusqlite::Row,
    names: &[String],
    json_columns: &[String],
) -> (Map<String, Value>, (u64, u64)) {
    let mut m = Map::new();
    let mut bytes = 0u64;
    let mut parsed = 0u64;
    for (i, name) in names.iter().enumerate() {
        let v = match row.get_ref(i) {
            Ok(ValueRef::Null) | Err(_) => Value::Null,
            Ok(ValueRef::Integer(n)) => Value::from(n),
            Ok(ValueRef::Real(f)) => Value::from(f),
            Ok(ValueRef::Text(t) | ValueRef::Blob(t)) if t.len() > MAX_VALUE => {
                Value::String(format!("[{} bytes left out]", t.len()))
            }
            Ok(ValueRef::Text(t)) => {
                bytes += t.len() as u64;
                let s = String::from_utf8_lossy(t);
                let cost = super::read::parsed_cost(t);
                if json_columns.iter().any(|c| c == name) && cost <= super::read::MAX_PARSED_BYTES {
                    parsed += cost;
                    serde_json::from_str(&s).unwrap_or_else(|_| Value::String(s.into_owned()))
                } else {
                    Value::String(s.into_owned())
                }
            }
            Ok(ValueRef::Blob(b)) => {
                bytes += 2 * b.len() as u64;
                Value::String(crate::util::ids::hex(b))
            }
        };
        bytes += name.len() as u64 + 8;
        m.insert(name.clone(), v);
    }
    (m, (bytes, parsed))
}

/// The rows of `sql`, each handed to `each` with its size as it is read; `each` stops the query by
/// returning false.
fn each_row(
    conn: &rusqlite::Connection,
    sql: &str,
    param: Option<&str>,
    json_columns: &[String],
    each: &mut dyn FnMut(Value, (u64, u64)) -> Result<bool, ReadError>,
) -> Result<(), QueryError> {
    let mut stmt = conn.prepare(sql)?;
    let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let params: Vec<&dyn rusqlite::ToSql> = match &param {
        Some(p) => vec![p as &dyn rusqlite::ToSql],
        None => Vec::new(),
    };
    let mut rows = stmt.query(params.as_slice())?;
    while let Some(row) = rows.next()? {
        let (m, bytes) = row_object(row, &names, json_columns);
        if !each(Value::Object(m), bytes).map_err(QueryError::Read)? {
            break;
        }
    }
    Ok(())
}

/// A query stopped by SQLite, or by what was done with a row.
enum QueryError {
    Sql(rusqlite::Error),
    Read(ReadError),
}

impl From<rusqlite::Error> for QueryError {
    fn from(e: rusqlite::Error) -> Self {
        QueryError::Sql(e)
    }
}

impl QueryError {
    fn into_read(self, path: &Path, what: &str) -> ReadError {
        match self {
            QueryError::Sql(e) => sql_error(path, what, e),
            QueryError::Read(e) => e,
        }
    }
}

/// Runs `f` on a private copy of the database at `path` (and its WAL), opened `query_only` with
/// almanac's SQL functions; the copy is removed after.
pub fn with_copy<T>(
    scratch: &Path,
    path: &Path,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    let (scratch, db) = super::copy::private_copy(scratch, path)?;

    let conn = rusqlite::Connection::open(&db).map_err(|e| sql_error(path, "open", e))?;
    harden(&conn).map_err(|e| sql_error(path, "open", e))?;
    crate::rules::views::register_functions(&conn).map_err(|e| sql_error(path, "open", e))?;
    // The deadline covers the schema's own check too: a hostile schema may be slow to read.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let handle = conn.get_interrupt_handle();
    let limit = deadline();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
            handle.interrupt();
        }
    });
    let out = schema_sql(&conn)
        .map_err(|e| sql_error(path, "reading its schema", e))
        .and_then(|found| match found.is_empty() {
            true => f(&conn),
            false => Err(ReadError::Bad(format!(
                "{}: the database defines {}: SQL almanac would run on the store's say-so: not read",
                path.display(),
                found.join(", ")
            ))),
        });
    drop(stop);
    let _ = watchdog.join();
    drop(conn);
    drop(scratch);
    out
}

/// The first column of each row `sql` lists, as text (a lookup's session ids), with its second column
/// where the query has one (the value a lookup without a sidecar gives).
pub fn list_ids(
    scratch: &Path,
    path: &Path,
    sql: &str,
) -> Result<Vec<(String, Option<String>)>, ReadError> {
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    with_copy(scratch, path, |conn| {
        // A row is a map by column name: the columns' order is the statement's.
        let names: Vec<String> = conn
            .prepare(sql)
            .map(|s| s.column_names().iter().map(|n| n.to_string()).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        each_row(conn, sql, None, &[], &mut |row, _| {
            let column = |k: usize| names.get(k).and_then(|n| row.get(n));
            if let Some(id) = text(column(0)) {
                out.push((id, text(column(1))));
            }
            Ok(out.len() <= super::read::MAX_MESSAGES)
        })
        .map_err(|e| e.into_read(path, "the ids query"))?;
        Ok(out)
    })
}

/// One session's messages: all of them, or why the session is not read (a bound passed, a value too
/// long for SQLite's limit). A busy store or a query past the deadline stops the whole read.
fn messages_of(
    conn: &rusqlite::Connection,
    path: &Path,
    (sql, id, json_columns): (&str, &str, &[String]),
) -> Result<Messages, ReadError> {
    let mut list = Vec::new();
    let mut bounds = Bounds::default();
    let mut refused = None;
    let read = each_row(
        conn,
        sql,
        Some(id),
        json_columns,
        &mut |row, (bytes, parsed)| {
            if let Err(why) = bounds.add(bytes).and_then(|()| bounds.parsed(parsed)) {
                refused = Some(why);
                return Ok(false);
            }
            list.push(row);
            Ok(true)
        },
    );
    match read {
        Ok(()) => Ok(match refused {
            Some(why) => Messages::Refused(why),
            None => Messages::Read(list),
        }),
        Err(QueryError::Sql(e)) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::TooBig) => {
            Ok(Messages::Refused(format!(
                "a value of the session is longer than {} (almanac's bound for one value): not read",
                crate::util::duration::approx_size(MAX_LENGTH as u64)
            )))
        }
        Err(e) => Err(e.into_read(path, "the messages query")),
    }
}

/// The sessions of a database, each handed to `sink` as it is read: each listed row is a session; a
/// session `unchanged` says the last read left as it is (same id and `updated`) is not queried for its
/// messages. `rel`, the database's path under its root, is what `session.id_from_path` reads.
pub fn read(
    spec: &ViewSpec,
    scratch: &Path,
    (path, rel): (&Path, &str),
    (sessions_sql, messages_sql, json_columns): (&str, &str, &[String]),
    unchanged: &dyn Fn(&str, Option<&str>) -> bool,
    sink: &mut Sink,
) -> Result<(), ReadError> {
    with_copy(scratch, path, |conn| {
        each_row(conn, sessions_sql, None, json_columns, &mut |session, _| {
            let Some(id) = session_id(spec, &session, (path, rel), &[]) else {
                return Ok(true);
            };
            let updated = spec.updated.as_ref().and_then(|p| text_at(p, &session));
            let messages = if unchanged(&id, updated.as_deref()) {
                Messages::Unchanged
            } else {
                messages_of(conn, path, (messages_sql, &id, json_columns))?
            };
            sink(SessionRead {
                id,
                session,
                messages,
                updated,
            });
            Ok(true)
        })
        .map_err(|e| e.into_read(path, "the sessions query"))
    })
}
