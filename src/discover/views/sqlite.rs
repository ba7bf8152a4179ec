//! A SQLite store, read through a private copy: opening the app's database (even read-only) would
//! create `-wal` and `-shm` files beside it, and `immutable` would miss the rows only its WAL holds. The
//! database and its WAL are copied into a private directory (the same size and mtime before and after
//! the copy, else copied again), opened there with `query_only`, and the copy removed.

use super::read::{session_id, text_at, ReadError, SessionRead};
use crate::rules::views::ViewSpec;
use rusqlite::types::ValueRef;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// How often a copy that saw the store change is made again before the sweep leaves it for the next.
const COPY_ATTEMPTS: u32 = 3;
/// The most one store's queries may take (a hostile schema can make a query endless); a test may set
/// `ALMANAC_TEST_STORE_DEADLINE_MS`.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);
/// A value larger than this is left out of the message (`[N bytes left out]`): parsed, it would cost
/// many times its size.
pub const MAX_VALUE: usize = 32 << 20;
/// The most messages one session's view holds; a store giving more is refused, naming it.
pub const MAX_MESSAGES: usize = 200_000;
/// A database that is corrupt (or not one) counts as being written only this long after it changed, or
/// while a rollback journal is beside it; after that it needs attention.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(60);

fn deadline() -> std::time::Duration {
    std::env::var("ALMANAC_TEST_STORE_DEADLINE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEADLINE, std::time::Duration::from_millis)
}

/// A private directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wal_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// (size, mtime) of the database and of its WAL (None when there is none).
type Stamp = (
    (u64, Option<std::time::SystemTime>),
    Option<(u64, Option<std::time::SystemTime>)>,
);

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    let wal = std::fs::metadata(wal_of(path)).ok();
    Ok((
        (m.len(), m.modified().ok()),
        wal.map(|w| (w.len(), w.modified().ok())),
    ))
}

fn copy_file(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut src = crate::util::untrusted::open_regular(from)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)?;
    Ok(())
}

/// Copies a process killed mid-read left behind (an hour old: no read takes that long).
fn remove_stale(scratch: &Path) {
    let Ok(rd) = std::fs::read_dir(scratch) else {
        return;
    };
    for e in rd.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600));
        if old
            && e.file_name()
                .to_string_lossy()
                .starts_with("almanac-sqlite-")
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A consistent copy of the database and its WAL in `dir`.
fn copy_store(path: &Path, dir: &Path) -> Result<PathBuf, ReadError> {
    let bad = |e: std::io::Error| ReadError::Bad(format!("{}: {e}", path.display()));
    let db = dir.join("store.db");
    if std::fs::metadata(path).is_ok_and(|m| sparse(&m)) {
        return Err(ReadError::Bad(format!(
            "{}: a sparse file far larger than the disk it uses: not a database an app wrote, not copied",
            path.display()
        )));
    }
    for attempt in 1..=COPY_ATTEMPTS {
        let _ = std::fs::remove_file(&db);
        let _ = std::fs::remove_file(wal_of(&db));
        let before = stamp(path).map_err(bad)?;
        copy_file(path, &db).map_err(bad)?;
        if before.1.is_some() {
            match copy_file(&wal_of(path), &wal_of(&db)) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => other.map_err(bad)?,
            }
        }
        if stamp(path).map_err(bad)? == before {
            return Ok(db);
        }
        if attempt < COPY_ATTEMPTS {
            std::thread::sleep(std::time::Duration::from_millis(50 * attempt as u64));
        }
    }
    Err(ReadError::Busy(format!(
        "{} changed while it was copied, {COPY_ATTEMPTS} times",
        path.display()
    )))
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
        _ => ReadError::Bad(text),
    }
}

/// Whether a database that reads as corrupt may be one caught mid-write: it changed within `SETTLED`,
/// or a rollback journal is beside it.
fn being_written(path: &Path) -> bool {
    let mut journal = path.as_os_str().to_owned();
    journal.push("-journal");
    let recent = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < SETTLED);
    recent || std::fs::symlink_metadata(Path::new(&journal)).is_ok()
}

/// A file much larger than the disk it uses (sparse): copying it would fill almanac's disk.
fn sparse(m: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        m.len() > (64 << 20) && m.blocks().saturating_mul(512) < m.len() / 2
    }
    #[cfg(not(unix))]
    {
        let _ = m;
        false
    }
}

/// A row as an object: columns by name; `json_columns` parsed (kept as text when they are not JSON),
/// a blob as lower-case hex.
fn row_object(
    row: &rusqlite::Row,
    names: &[String],
    json_columns: &[String],
) -> Map<String, Value> {
    let mut m = Map::new();
    for (i, name) in names.iter().enumerate() {
        let v = match row.get_ref(i) {
            Ok(ValueRef::Null) | Err(_) => Value::Null,
            Ok(ValueRef::Integer(n)) => Value::from(n),
            Ok(ValueRef::Real(f)) => Value::from(f),
            Ok(ValueRef::Text(t) | ValueRef::Blob(t)) if t.len() > MAX_VALUE => {
                Value::String(format!("[{} bytes left out]", t.len()))
            }
            Ok(ValueRef::Text(t)) => {
                let s = String::from_utf8_lossy(t);
                if json_columns.iter().any(|c| c == name) {
                    serde_json::from_str(&s).unwrap_or_else(|_| Value::String(s.into_owned()))
                } else {
                    Value::String(s.into_owned())
                }
            }
            Ok(ValueRef::Blob(b)) => Value::String(crate::util::ids::hex(b)),
        };
        m.insert(name.clone(), v);
    }
    m
}

fn query(
    conn: &rusqlite::Connection,
    sql: &str,
    param: Option<&str>,
    json_columns: &[String],
) -> rusqlite::Result<Vec<Value>> {
    let mut stmt = conn.prepare(sql)?;
    let names: Vec<String> = stmt.column_names().iter().map(|s| s.to_string()).collect();
    let params: Vec<&dyn rusqlite::ToSql> = match &param {
        Some(p) => vec![p as &dyn rusqlite::ToSql],
        None => Vec::new(),
    };
    let mut rows = stmt.query(params.as_slice())?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if out.len() == MAX_MESSAGES {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                format!("more than {MAX_MESSAGES} rows").into(),
            ));
        }
        out.push(Value::Object(row_object(row, &names, json_columns)));
    }
    Ok(out)
}

/// Runs `f` on a private copy of the database at `path` (and its WAL), opened `query_only` with
/// almanac's SQL functions; the copy is removed after.
pub fn with_copy<T>(
    scratch: &Path,
    path: &Path,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    crate::util::atomic::ensure_private_dir(scratch)
        .map_err(|e| ReadError::Bad(format!("{}: {e}", scratch.display())))?;
    remove_stale(scratch);
    let dir = scratch.join(format!(
        "almanac-sqlite-{}-{}",
        std::process::id(),
        crate::util::ids::random_hex(6)
    ));
    crate::platform::create_private_dir(&dir)
        .map_err(|e| ReadError::Bad(format!("{}: {e}", dir.display())))?;
    let scratch = Scratch(dir);
    let db = copy_store(path, &scratch.0)?;
    let conn = rusqlite::Connection::open(&db).map_err(|e| sql_error(path, "open", e))?;
    conn.pragma_update(None, "query_only", true)
        .map_err(|e| sql_error(path, "open", e))?;
    crate::rules::views::register_functions(&conn).map_err(|e| sql_error(path, "open", e))?;
    // The app's own schema holds no views: a view is SQL the store would have almanac run.
    let views: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'view'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| sql_error(path, "open", e))?;
    if views > 0 {
        return Err(ReadError::Bad(format!(
            "{}: the database defines {views} view(s), SQL almanac would run on its say-so: not read",
            path.display()
        )));
    }
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let handle = conn.get_interrupt_handle();
    let limit = deadline();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
            handle.interrupt();
        }
    });
    let out = f(&conn);
    drop(stop);
    let _ = watchdog.join();
    drop(conn);
    drop(scratch);
    out
}

/// The first column of each row `sql` lists, as text (a `project` lookup's session ids).
pub fn list_ids(scratch: &Path, path: &Path, sql: &str) -> Result<Vec<String>, ReadError> {
    with_copy(scratch, path, |conn| {
        let rows = query(conn, sql, None, &[]).map_err(|e| sql_error(path, "the ids query", e))?;
        Ok(rows
            .iter()
            .filter_map(|r| match r.as_object()?.values().next()? {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect())
    })
}

/// The sessions of a database: each listed row is a session; a session `unchanged` says the last read
/// left as it is (same id and `updated`) is not queried for its messages. `rel`, the database's path
/// under its root, is what `session.id_from_path` reads.
pub fn read(
    spec: &ViewSpec,
    scratch: &Path,
    (path, rel): (&Path, &str),
    (sessions_sql, messages_sql, json_columns): (&str, &str, &[String]),
    unchanged: &dyn Fn(&str, Option<&str>) -> bool,
) -> Result<Vec<SessionRead>, ReadError> {
    with_copy(scratch, path, |conn| {
        let rows = query(conn, sessions_sql, None, json_columns)
            .map_err(|e| sql_error(path, "the sessions query", e))?;
        let mut out = Vec::with_capacity(rows.len());
        for session in rows {
            let Some(id) = session_id(spec, &session, rel) else {
                continue;
            };
            let updated = spec.updated.as_ref().and_then(|p| text_at(p, &session));
            let messages = if unchanged(&id, updated.as_deref()) {
                None
            } else {
                Some(
                    query(conn, messages_sql, Some(&id), json_columns)
                        .map_err(|e| sql_error(path, "the messages query", e))?,
                )
            };
            out.push(SessionRead {
                id,
                session,
                messages,
                updated,
            });
        }
        Ok(out)
    })
}
