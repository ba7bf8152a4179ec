//! The one lock type: an OS file lock (flock) on a lock file, released by the kernel when the process
//! dies, so a crash never leaves a stale lock. The holder's pid and start time are written into the file
//! for messages only. The lock file is never deleted (unlinking races with a process opening it).

use serde::{Deserialize, Serialize};
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    #[serde(rename = "startedAt")]
    pub started_at: String,
}

pub struct FileLock {
    file: File,
    pub path: PathBuf,
}

fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        super::atomic::ensure_private_dir(dir)?;
    }
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    // A lock file is rewritten with the holder's pid: never through a link to someone's file.
    crate::platform::open_no_follow(crate::platform::private_mode(&mut o, 0o600), path)
}

impl FileLock {
    /// Takes the lock if it is free; `Ok(Err(holder))` when another process holds it.
    pub fn try_acquire(path: &Path) -> std::io::Result<Result<FileLock, Option<Holder>>> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Ok(Self::claimed(file, path))),
            Err(TryLockError::WouldBlock) => Ok(Err(read_holder(path))),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    /// Waits at most `wait` for the lock; `Ok(Err(holder))` when another process still holds it then.
    pub fn acquire_within(
        path: &Path,
        wait: std::time::Duration,
    ) -> std::io::Result<Result<FileLock, Option<Holder>>> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            match Self::try_acquire(path)? {
                Ok(lock) => return Ok(Ok(lock)),
                Err(holder) if std::time::Instant::now() >= deadline => return Ok(Err(holder)),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(25)),
            }
        }
    }

    /// Waits for the lock.
    pub fn acquire(path: &Path) -> std::io::Result<FileLock> {
        let file = open(path)?;
        file.lock()?;
        Ok(Self::claimed(file, path))
    }

    /// Writes who holds the lock into the file, for messages. Not synced to disk: the words are only
    /// read while the lock is held (a crash releases the lock and leaves them stale either way), and a
    /// sync per lock cost a sweep 50 locks' worth of journal commits, the first of them 50 ms.
    fn claimed(mut file: File, path: &Path) -> FileLock {
        let holder = Holder {
            pid: std::process::id(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = file.write_all(
            serde_json::to_string(&holder)
                .unwrap_or_default()
                .as_bytes(),
        );
        FileLock {
            file,
            path: path.to_path_buf(),
        }
    }

    /// Whether some process holds the lock right now (takes and drops it when free).
    pub fn is_held(path: &Path) -> bool {
        // Opened without create: checking never writes (a dry run must leave no trace).
        match crate::platform::open_no_follow(
            std::fs::OpenOptions::new().read(true).write(true),
            path,
        ) {
            Ok(f) => match f.try_lock() {
                Ok(()) => {
                    let _ = f.unlock();
                    false
                }
                Err(_) => true,
            },
            Err(_) => false,
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

pub fn read_holder(path: &Path) -> Option<Holder> {
    let mut s = String::new();
    File::open(path).ok()?.read_to_string(&mut s).ok()?;
    serde_json::from_str(&s).ok()
}
