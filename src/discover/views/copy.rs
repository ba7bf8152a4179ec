//! A SQLite store's private copy: the database and its WAL copied into a directory of almanac's own
//! (the same size and mtime before and after, else copied again), so that nothing is written beside the
//! app's files. Bounded before a byte is copied: a sparse file, a WAL far larger than its database, or
//! more than `MAX_COPY_BYTES` in all is not copied, and there must be room for it. A copy that fails on
//! almanac's own disk is tried again on the next sweep (`ReadError::Local`), not blamed on the store.
//! Each copy's directory is locked while it is read: the next read removes one a killed process left.

use super::read::ReadError;
use std::path::{Path, PathBuf};

/// How often a copy that saw the store change is made again before the sweep leaves it for the next.
const COPY_ATTEMPTS: u32 = 3;

/// The most a store's copy (database and WAL) may take; a test may set `ALMANAC_TEST_MAX_COPY_BYTES`.
pub const MAX_COPY_BYTES: u64 = 16 << 30;

/// A WAL larger than this many times its database, and than `WAL_FLOOR`, is not one an app wrote.
const WAL_FACTOR: u64 = 16;
const WAL_FLOOR: u64 = 64 << 20;

/// Free space a copy leaves on almanac's disk at the least.
const FREE_MARGIN: u64 = 64 << 20;

/// The prefix of a copy's private directory under the scratch directory.
const COPY_DIR: &str = "almanac-sqlite-";

/// The lock a copy's reader holds inside its directory while it reads.
const COPY_LOCK: &str = "reading.lock";

fn max_copy() -> u64 {
    std::env::var("ALMANAC_TEST_MAX_COPY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_COPY_BYTES)
}

/// A private directory, locked while it is read and removed when dropped.
pub(super) struct Scratch {
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
    super::beside(path, "-wal")
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
pub(super) fn local(dir: &Path, what: &str, e: &dyn std::fmt::Display) -> ReadError {
    let free = crate::platform::free_space(dir)
        .map(|n| format!("{} free", crate::util::duration::approx_size(n)))
        .unwrap_or_else(|| "free space unknown".into());
    ReadError::Local(format!(
        "almanac's own disk failed {what} in {} ({free}): {e}; nothing is wrong with the store",
        dir.display()
    ))
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
            crate::util::duration::approx_size(wal_len),
            crate::util::duration::approx_size(db.len())
        )));
    }
    let need = db.len().saturating_add(wal_len);
    if need > max_copy() {
        return Err(bad(format!(
            "the database and its WAL ({}) are more than almanac copies of one store ({})",
            crate::util::duration::approx_size(need),
            crate::util::duration::approx_size(max_copy())
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
                crate::util::duration::approx_size(need),
                crate::util::duration::approx_size(FREE_MARGIN)
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
                    crate::util::duration::approx_size(max_copy())
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

/// A file far larger than the disk it uses (sparse, all holes): copying it would fill almanac's disk.
/// Sixteen times, not two: a file system that compresses (ZFS, btrfs) stores a real database in a
/// fraction of its length too.
fn sparse(m: &std::fs::Metadata) -> bool {
    crate::platform::allocated_bytes(m)
        .is_some_and(|on_disk| m.len() > (64 << 20) && on_disk < m.len() / 16)
}

/// A private copy of the database at `path` (and its WAL) in a new locked directory under `scratch`
/// (made if need be; copies killed readers left there are removed first); the directory goes when the
/// `Scratch` is dropped.
pub(super) fn private_copy(scratch: &Path, path: &Path) -> Result<(Scratch, PathBuf), ReadError> {
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
    Ok((scratch, db))
}
