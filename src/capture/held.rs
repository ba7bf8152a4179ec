//! The repo's ledger as the worker last read or wrote it. A worker draining many runs would otherwise
//! parse and rewrite the whole ledger twice per run. The file is read again only when another process (a
//! sweep, `capture reset`) replaced it since, which a stat tells (every save is a rename: a new inode),
//! and is then reconciled with the run records, so nothing this worker finished is lost. Saving is
//! deferred (at most `SAVE_EVERY` apart, and always before the worker lets go of the queue): the run
//! record is written first and is what counts; a sweep reconciles any entry the worker did not get to
//! save. Agent session ids go to the journal (`ledger::journal`) and into the ledger held here, so a run
//! costs the same whatever the ledger's size.

use crate::ledger::{self, RepoState};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) struct Held {
    /// The file as this worker last read or wrote it: (device, inode, size, mtime in ns).
    stamp: Option<(u64, u64, u64, i64)>,
    pub ledger: ledger::Ledger,
    pub dirty: bool,
    saved_at: Instant,
}

const SAVE_EVERY: Duration = Duration::from_secs(2);

fn stamp(repo: &Path) -> std::io::Result<Option<(u64, u64, u64, i64)>> {
    match std::fs::metadata(ledger::ledger_path(repo)) {
        Ok(m) => Ok(Some((
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl Held {
    pub fn new() -> Held {
        Held {
            stamp: None,
            ledger: ledger::Ledger::default(),
            dirty: false,
            saved_at: Instant::now(),
        }
    }

    /// The current ledger; the caller holds the repo lock.
    pub fn current(&mut self, repo: &Path) -> std::io::Result<&mut ledger::Ledger> {
        let on_disk = stamp(repo)?;
        if on_disk.is_none() || on_disk != self.stamp {
            let now = chrono::Utc::now();
            let mut state = RepoState::load(repo, now, true)?;
            state.reconcile(now, true);
            self.dirty = state.changed();
            self.ledger = state.ledger;
            self.stamp = on_disk;
        }
        Ok(&mut self.ledger)
    }

    /// Saves when changed and `force` or due; the caller holds the repo lock.
    pub fn save(&mut self, repo: &Path, force: bool) {
        if !self.dirty || !(force || self.saved_at.elapsed() >= SAVE_EVERY) {
            return;
        }
        let saved = crate::util::fault::disk_full("post-run")
            .and_then(|()| ledger::save(repo, &mut self.ledger, chrono::Utc::now()))
            .and_then(|()| stamp(repo));
        match saved {
            Ok(s) => {
                self.stamp = s;
                self.dirty = false;
                self.saved_at = Instant::now();
            }
            Err(e) => super::worker::note(&format!("cannot save the ledger: {e}")),
        }
    }
}
