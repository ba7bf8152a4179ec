//! A SQLite store, read through a private copy: opening the app's database (even read-only) would
//! create `-wal` and `-shm` files beside it, and `immutable` would miss the rows only its WAL holds. The
//! database and its WAL are copied into a private directory (the same size and mtime before and after
//! the copy, else copied again), opened there with `query_only`, and the copy removed.
//!
//! The database is a stranger's data: no SQL it holds runs. One that defines a view, a generated column
//! or a virtual table of a module SQLite does not ship is refused; on the connection triggers and views
//! are off, the schema is untrusted (`trusted_schema`), nothing can be attached, and a string, blob or
//! row is at most `MAX_LENGTH`. A copy is bounded too: a sparse file, a WAL far larger than its
//! database, or more than `MAX_COPY_BYTES` in all is not copied, and a copy that fails on almanac's own
//! disk is tried again on the next sweep (`ReadError::Local`), not blamed on the store.

use super::read::{session_id, text_at, Bounds, Messages, ReadError, SessionRead, Sink};
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
/// The longest string, blob or row SQLite makes or reads on almanac's connection (`SQLITE_LIMIT_LENGTH`,
/// 1 GB by default): a longer value fails its session's query (and a session row that long, the
/// store's). Well above what one session may hold (`MAX_SESSION_BYTES`), so a real store's large value
/// is left out of its message rather than failing the read.
const MAX_LENGTH: i32 = 256 << 20;
/// The most SQLite may allocate in this process: a query past it fails rather than the sweep.
const HEAP_LIMIT: i64 = 1 << 30;
/// The most a store's copy (database and WAL) may take; a test may set `ALMANAC_TEST_MAX_COPY_BYTES`.
pub const MAX_COPY_BYTES: u64 = 16 << 30;
/// A WAL larger than this many times its database, and than `WAL_FLOOR`, is not one an app wrote.
const WAL_FACTOR: u64 = 16;
const WAL_FLOOR: u64 = 64 << 20;
/// Free space a copy leaves on almanac's disk at the least.
const FREE_MARGIN: u64 = 64 << 20;
/// The virtual table modules SQLite itself ships: a table of another module is code almanac lacks, named
/// by the store.
const KNOWN_MODULES: &[&str] = &["fts3", "fts4", "fts5", "rtree", "rtree_i32"];
/// A database that is corrupt (or not one) counts as being written only this long after it changed, or
/// while a rollback journal is beside it; after that it needs attention.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(60);
/// The prefix of a copy's private directory under the scratch directory.
const COPY_DIR: &str = "almanac-sqlite-";
/// The lock a copy's reader holds inside its directory while it reads.
const COPY_LOCK: &str = "reading.lock";

fn deadline() -> std::time::Duration {
    std::env::var("ALMANAC_TEST_STORE_DEADLINE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(DEADLINE, std::time::Duration::from_millis)
}

fn max_copy() -> u64 {
    std::env::var("ALMANAC_TEST_MAX_COPY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_COPY_BYTES)
}

/// A private directory, locked while it is read and removed when dropped.
struct Scratch {
    dir: PathBuf,
    lock: Option<crate::util::lock::FileLock>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Unlocked first: Windows removes no file that is open.
        drop(self.lock.take());
        let _ = std::fs::remove_dir_all(&self.dir);
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

/// Why a copy stopped: the store's file could not be read, almanac's copy could not be written, or the
/// copy passed what is left of its budget.
enum CopyFault {
    Store(std::io::Error),
    Local(std::io::Error),
    Budget,
}

/// Copies `from` to a new file `to`, taking what it copies from `budget`.
fn copy_file(from: &Path, to: &Path, budget: &mut u64) -> Result<(), CopyFault> {
    use std::io::{Read, Write};
    let mut src = crate::util::untrusted::open_regular(from).map_err(CopyFault::Store)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(CopyFault::Local)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyFault::Store(e)),
        };
        *budget = budget.checked_sub(n as u64).ok_or(CopyFault::Budget)?;
        crate::util::fault::disk_full("store-copy").map_err(CopyFault::Local)?;
        dst.write_all(&buf[..n]).map_err(CopyFault::Local)?;
    }
}

/// Copies a process killed mid-read left behind: every copy directory whose reader no longer holds its
/// lock, whatever its age (one made a moment ago whose reader has not locked it yet is left).
fn remove_stale(scratch: &Path) {
    let Ok(rd) = std::fs::read_dir(scratch) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with(COPY_DIR) {
            continue;
        }
        let lock = e.path().join(COPY_LOCK);
        let stale = match std::fs::symlink_metadata(&lock) {
            Ok(_) => !crate::util::lock::FileLock::is_held(&lock),
            Err(_) => e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > std::time::Duration::from_secs(60)),
        };
        if stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Almanac's own disk failed a copy: read again on the next sweep, the words naming the disk's free space.
fn local(dir: &Path, what: &str, e: &dyn std::fmt::Display) -> ReadError {
    let free = crate::platform::free_space(dir)
        .map(|n| format!("{} free", human_size(n)))
        .unwrap_or_else(|| "free space unknown".into());
    ReadError::Local(format!(
        "almanac's own disk failed {what} in {} ({free}): {e}; nothing is wrong with the store",
        dir.display()
    ))
}

fn human_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n => format!("{n} bytes"),
    }
}

/// What is wrong with the database's files as they are, before any byte is copied: a sparse file, a
/// WAL far larger than its database, more than the copy budget.
fn refuse_files(path: &Path) -> Result<u64, ReadError> {
    let bad = |why: String| ReadError::Bad(format!("{}: {why}: not copied", path.display()));
    let db = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    let wal = std::fs::metadata(wal_of(path)).ok();
    for (name, m) in [("the database", Some(&db)), ("its WAL", wal.as_ref())] {
        if m.is_some_and(sparse) {
            return Err(bad(format!(
                "{name} is a sparse file far larger than the disk it uses, not one an app wrote"
            )));
        }
    }
    let wal_len = wal.as_ref().map_or(0, |w| w.len());
    if wal_len > WAL_FLOOR.max(db.len().saturating_mul(WAL_FACTOR)) {
        return Err(bad(format!(
            "its WAL ({}) is more than {WAL_FACTOR} times the database ({}), not one an app wrote",
            human_size(wal_len),
            human_size(db.len())
        )));
    }
    let need = db.len().saturating_add(wal_len);
    if need > max_copy() {
        return Err(bad(format!(
            "the database and its WAL ({}) are more than almanac copies of one store ({})",
            human_size(need),
            human_size(max_copy())
        )));
    }
    Ok(need)
}

/// A consistent copy of the database and its WAL in `dir`.
fn copy_store(path: &Path, dir: &Path) -> Result<PathBuf, ReadError> {
    let bad = |e: std::io::Error| ReadError::Bad(format!("{}: {e}", path.display()));
    let db = dir.join("store.db");
    let need = refuse_files(path)?;
    if let Some(free) = crate::platform::free_space(dir) {
        if free < need.saturating_add(FREE_MARGIN) {
            let e = format!(
                "the copy needs {} and {} more must stay free",
                human_size(need),
                human_size(FREE_MARGIN)
            );
            return Err(local(dir, "a copy of the store", &e));
        }
    }
    for attempt in 1..=COPY_ATTEMPTS {
        let _ = std::fs::remove_file(&db);
        let _ = std::fs::remove_file(wal_of(&db));
        let before = stamp(path).map_err(bad)?;
        let mut budget = max_copy();
        let mut copied = copy_file(path, &db, &mut budget);
        if copied.is_ok() && before.1.is_some() {
            copied = match copy_file(&wal_of(path), &wal_of(&db), &mut budget) {
                Err(CopyFault::Store(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            };
        }
        match copied {
            Ok(()) => {}
            Err(CopyFault::Store(e)) => return Err(bad(e)),
            Err(CopyFault::Local(e)) => return Err(local(dir, "a copy of the store", &e)),
            Err(CopyFault::Budget) => {
                return Err(ReadError::Bad(format!(
                    "{}: grew past almanac's copy budget of {} while it was copied: not read",
                    path.display(),
                    human_size(max_copy())
                )))
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
        Some(DiskFull | CannotOpen | SystemIoFailure) => ReadError::Local(text),
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

/// A file far larger than the disk it uses (sparse, all holes): copying it would fill almanac's disk.
/// Sixteen times, not two: a file system that compresses (ZFS, btrfs) stores a real database in a
/// fraction of its length too.
fn sparse(m: &std::fs::Metadata) -> bool {
    crate::platform::allocated_bytes(m)
        .is_some_and(|on_disk| m.len() > (64 << 20) && on_disk < m.len() / 16)
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

/// The connection made what almanac needs and no more: read only, no trigger or view, the schema
/// untrusted (its functions limited to SQLite's innocuous ones), nothing attached, values bounded.
fn harden(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
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
fn schema_sql(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<String>> {
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

/// Runs `f` on a private copy of the database at `path` (and its WAL), opened `query_only` with
/// almanac's SQL functions; the copy is removed after.
pub fn with_copy<T>(
    scratch: &Path,
    path: &Path,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, ReadError>,
) -> Result<T, ReadError> {
    crate::util::atomic::ensure_private_dir(scratch)
        .map_err(|e| local(scratch, "making its private directory", &e))?;
    remove_stale(scratch);
    let dir = scratch.join(format!(
        "{COPY_DIR}{}-{}",
        std::process::id(),
        crate::util::ids::random_hex(6)
    ));
    crate::platform::create_private_dir(&dir)
        .map_err(|e| local(scratch, "making a private directory", &e))?;
    let mut scratch = Scratch { dir, lock: None };
    let lock = crate::util::lock::FileLock::try_acquire(&scratch.dir.join(COPY_LOCK));
    match lock {
        Ok(Ok(l)) => scratch.lock = Some(l),
        Ok(Err(_)) => {
            return Err(ReadError::Busy(format!(
                "{} is in use",
                scratch.dir.display()
            )))
        }
        Err(e) => return Err(local(&scratch.dir, "locking its copy", &e)),
    }
    let db = copy_store(path, &scratch.dir)?;
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

/// The first column of each row `sql` lists, as text (a `project` lookup's session ids).
pub fn list_ids(scratch: &Path, path: &Path, sql: &str) -> Result<Vec<String>, ReadError> {
    with_copy(scratch, path, |conn| {
        let mut out = Vec::new();
        each_row(conn, sql, None, &[], &mut |row, _| {
            match row.as_object().and_then(|r| r.values().next()) {
                Some(Value::String(s)) if !s.is_empty() => out.push(s.clone()),
                Some(Value::Number(n)) => out.push(n.to_string()),
                _ => {}
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
                human_size(MAX_LENGTH as u64)
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
            let Some(id) = session_id(spec, &session, rel) else {
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
