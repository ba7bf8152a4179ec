//! The repo's ledger as the worker last read or wrote it. A worker draining many runs would otherwise
//! parse and rewrite the whole ledger twice per run. The file is read again only when another process (a
//! sweep, `capture reset`) replaced it since, which a stat tells (every save is a rename: a new inode),
//! and is then reconciled with the run records, so nothing this worker finished is lost. Saving is
//! deferred (at most `SAVE_EVERY` apart, and always before the worker lets go of the queue): the run
//! record is written first and is what counts; a sweep reconciles any entry the worker did not get to
//! save. Agent session ids go to the journal (`ledger::journal`) and into the ledger held here, so a run
//! costs the same whatever the ledger's size.
//!
//! The agent may overwrite or delete what is under `.almanac/`. A ledger that no longer parses, or is
//! gone, or a `runs/` directory deleted (and perhaps made again by a sweep) while this worker held a good
//! copy is never taken as it now is: the copy held here is written back, with what the disk adds that
//! can be trusted (entries it does not have, a run a sweep queued from the held cursor, agent sessions),
//! and the event is logged and left in the ledger for the next sweep to report (`ledger-overwritten`).

use crate::ledger::{self, EntryStatus, RepoState};
use crate::platform::FileId;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) struct Held {
    /// The file as this worker last read or wrote it: (device, inode, size, mtime in ns).
    stamp: Option<(FileId, u64, i128)>,
    pub ledger: ledger::Ledger,
    pub dirty: bool,
    saved_at: Instant,
    /// Whether `ledger` is a copy read from (or written to) the repo, worth restoring.
    have: bool,
    /// (device, inode) of `runs/` when last seen: a different one means it was deleted.
    runs_id: Option<FileId>,
    /// `runs/` itself, held open: a deleted directory's inode is not freed while it is open, so a
    /// `runs/` made again after it never gets the same (device, inode). (ext4 hands a freed inode
    /// straight back: `rm -rf runs; mkdir runs` gave the same inode on this project's machines.)
    runs_fd: Option<std::fs::File>,
    /// Set when `runs/` was found deleted; the next `current` restores the held copy.
    wiped: Option<String>,
}

fn dir_id(dir: &Path) -> Option<FileId> {
    std::fs::symlink_metadata(dir)
        .ok()
        .map(|m| crate::platform::file_id(dir, &m))
}

const SAVE_EVERY: Duration = Duration::from_secs(2);

fn stamp(repo: &Path) -> std::io::Result<Option<(FileId, u64, i128)>> {
    let path = ledger::ledger_path(repo);
    match std::fs::metadata(&path) {
        Ok(m) => Ok(Some((
            crate::platform::file_id(&path, &m),
            m.len(),
            crate::platform::times_ns(&m).0,
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
            have: false,
            runs_id: None,
            runs_fd: None,
            wiped: None,
        }
    }

    /// Before writing anything after a run: the store must still be safe (`ledger::guard`); a `runs/`
    /// the agent deleted is made again (a real, private directory) and `worker.log` reopened there.
    /// `Err` says why nothing may be written.
    pub fn check_store(&mut self, repo: &Path, run_id: &str) -> Result<(), String> {
        ledger::guard::check_runs_dir(repo)?;
        let runs = ledger::runs_dir(repo);
        crate::util::atomic::private_dir(&runs).map_err(|e| format!("{}: {e}", runs.display()))?;
        self.note_wipe(repo, run_id);
        Ok(())
    }

    /// Notices a `runs/` that is not the one last seen (deleted, and made again by us or a sweep).
    fn note_wipe(&mut self, repo: &Path, during: &str) {
        let now = dir_id(&ledger::runs_dir(repo));
        if self.runs_id.is_some() && now != self.runs_id && self.wiped.is_none() {
            reopen_log(repo);
            let why = format!(
                "{} was deleted while {during} ran (by the agent?); recreated, and the ledger this worker \
                 held written back",
                ledger::runs_dir(repo).display()
            );
            super::worker::note(&why);
            self.wiped = Some(why);
        }
        // Opened again only when it changed: a run's look at the store costs one stat.
        if now != self.runs_id || self.runs_fd.is_none() {
            // Never through a link: a `runs/` that became a link is not ours to hold.
            self.runs_fd = crate::platform::open_dir_no_follow(&ledger::runs_dir(repo));
        }
        self.runs_id = now;
    }

    /// The current ledger; the caller holds the repo lock.
    pub fn current(&mut self, repo: &Path) -> std::io::Result<&mut ledger::Ledger> {
        self.note_wipe(repo, "a run");
        let on_disk = stamp(repo)?;
        if on_disk.is_none() || on_disk != self.stamp || self.wiped.is_some() {
            let now = chrono::Utc::now();
            let mut state = RepoState::load(repo, now, true)?;
            let unsealed = state.unsealed.take().filter(|_| self.have);
            let lost = self.wiped.take().or_else(|| match &state.corrupt {
                None if unsealed.is_some() => unsealed.as_ref().map(|u| {
                    format!(
                        "{} was rewritten while this worker ran, not by almanac ({})",
                        ledger::ledger_path(repo).display(),
                        u.why
                    )
                }),
                Some(c) => Some(format!(
                    "{} was overwritten: it did not parse ({}); kept as {}",
                    ledger::ledger_path(repo).display(),
                    c.error,
                    c.moved_to.display()
                )),
                None if on_disk.is_none() && self.stamp.is_some() => Some(format!(
                    "{} was deleted while this worker ran",
                    ledger::ledger_path(repo).display()
                )),
                None if self.have => dropped_run(&self.ledger, &state.ledger).map(|run| {
                    // `runs/` was emptied (its worker.log too) or the file overwritten.
                    reopen_log(repo);
                    format!(
                        "{} was deleted or replaced while this worker ran: it no longer waits for {run}",
                        ledger::ledger_path(repo).display()
                    )
                }),
                None => None,
            });
            if let Some(why) = &lost {
                if let Some(u) = &unsealed {
                    // Of a ledger rewritten behind almanac's back, only what the run records prove is
                    // taken: the entries they set back (agent sessions were already filtered).
                    state.ledger.entries.retain(|k, _| u.corrected.contains(k));
                }
                if self.have {
                    merge_into_held(&self.ledger, &mut state.ledger);
                    super::worker::note(&format!("{why}; wrote back the ledger this worker held"));
                } else {
                    super::worker::note(why);
                }
                state.ledger.overwritten.push(why.clone());
                state.dirty = true;
            }
            state.reconcile(now, Some(&super::orphan::settle));
            self.dirty = state.changed();
            self.ledger = state.ledger;
            self.stamp = on_disk;
            self.have = true;
            if lost.is_some() {
                self.save(repo, true);
            }
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

/// A run the held copy waits for that the ledger on disk no longer waits for, and does not name as the
/// run it last settled either. Sweeps, `capture reset` and `prune` leave a pending entry alone; a sweep
/// settles one only from its finished run record (then the entry names that run as its last), which this
/// worker writes just before it records the outcome itself. Anything else is a lost ledger. (An agent
/// that empties `runs/` and a sweep that then writes a ledger from nothing look like an ordinary change
/// of the file: this is what tells them apart. `rm -rf` of a directory the worker is writing to may
/// leave the directory itself, so its identity is not enough.)
fn dropped_run(held: &ledger::Ledger, disk: &ledger::Ledger) -> Option<String> {
    held.entries.iter().find_map(|(k, h)| {
        let run = h.pending_run_id.as_ref()?;
        let settled = disk
            .entries
            .get(k)
            .is_some_and(|e| e.waits_for(run) || e.last_run_id.as_deref() == Some(run.as_str()));
        (!settled).then(|| run.clone())
    })
}

/// The ledger to write back after the file was overwritten or deleted: the copy the worker held, plus
/// what `disk` (the file now, or what the sealed run records rebuilt) adds that it can trust: entries the
/// held copy does not have, a run queued from the held cursor where the held entry waits for none, and
/// agent sessions. The result replaces `disk`.
fn merge_into_held(held: &ledger::Ledger, disk: &mut ledger::Ledger) {
    let mut out = held.clone();
    for (k, e) in std::mem::take(&mut disk.entries) {
        let take = match out.entries.get(&k) {
            None => true,
            // Nothing is written back over an entry that is newer than the held one, which waits for no
            // run of this worker: as far along, and settled or queued by a later run (run ids sort by
            // time), e.g. another session's entry a sweep moved on meanwhile.
            Some(h) => {
                let newer = h.status != EntryStatus::Pending
                    && e.last_captured_size >= h.last_captured_size
                    && e.last_run_id.is_some()
                    && e.last_run_id > h.last_run_id;
                newer
                    || h.status != EntryStatus::Pending
                        && e.status == EntryStatus::Pending
                        && e.last_captured_size == h.last_captured_size
                        && e.last_captured_prefix_hash == h.last_captured_prefix_hash
            }
        };
        if take {
            out.entries.insert(k, e);
        }
    }
    out.agent_sessions
        .extend(std::mem::take(&mut disk.agent_sessions));
    out.overwritten.append(&mut disk.overwritten);
    out.rebuilt_from = None;
    *disk = out;
}

/// Points the worker's output (stdout, stderr) at `runs/worker.log` again after `runs/` was deleted.
fn reopen_log(repo: &Path) {
    if let Ok(f) = crate::util::atomic::open_append_private(&ledger::worker_log_path(repo)) {
        crate::platform::redirect_output(&f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{LedgerEntry, PendingChunk};

    fn entry(size: u64) -> LedgerEntry {
        let mut e = LedgerEntry::fresh("claude", "s", "/t/s.jsonl");
        e.last_captured_size = size;
        e
    }

    fn waiting(size: u64, run: &str) -> LedgerEntry {
        let mut e = entry(size);
        let chunk = PendingChunk {
            run_id: run.into(),
            to_size: size + 10,
            to_line: 2,
            prefix_hash: "sha256:x".into(),
            last_record_id: None,
        };
        e.mark_pending(chunk, "2026-12-04T00:00:00.000Z");
        e
    }

    fn ledger(entries: &[(&str, LedgerEntry)]) -> ledger::Ledger {
        let mut l = ledger::Ledger::default();
        for (k, e) in entries {
            l.entries.insert(k.to_string(), e.clone());
        }
        l
    }

    /// A sweep that settled this worker's run from its record is not a lost ledger; a ledger that forgot
    /// the run is.
    #[test]
    fn a_run_a_sweep_settled_is_not_a_dropped_run() {
        let held = ledger(&[("a", waiting(0, "run_1"))]);
        let mut settled = waiting(0, "run_1");
        settled.complete("run_1", "2026-12-04T00:00:01.000Z");
        assert_eq!(dropped_run(&held, &ledger(&[("a", settled.clone())])), None);
        let mut failed = waiting(0, "run_1");
        failed.fail("run_1", "exit 3");
        assert_eq!(dropped_run(&held, &ledger(&[("a", failed)])), None);
        // ...and queued again by a later sweep only after a run of its own: still its settling.
        assert_eq!(
            dropped_run(&held, &ledger(&[("a", waiting(0, "run_1"))])),
            None
        );
        // A ledger written from nothing, or without the entry: lost.
        assert_eq!(
            dropped_run(&held, &ledger(&[("a", waiting(0, "run_2"))])).as_deref(),
            Some("run_1")
        );
        assert_eq!(dropped_run(&held, &ledger(&[])).as_deref(), Some("run_1"));
    }

    /// Written back after a lost ledger: the held entries, but not over a newer one of another session.
    #[test]
    fn nothing_is_written_back_over_a_newer_entry() {
        let mut older = entry(100);
        older.last_run_id = Some("run_1".into());
        let mut newer = entry(200);
        newer.last_run_id = Some("run_5".into());
        let held = ledger(&[("mine", waiting(0, "run_4")), ("other", older.clone())]);
        let mut disk = ledger(&[("mine", waiting(0, "run_6")), ("other", newer.clone())]);
        merge_into_held(&held, &mut disk);
        assert_eq!(disk.entries["other"], newer, "the newer entry is kept");
        assert!(
            disk.entries["mine"].waits_for("run_4"),
            "the held run is not given up"
        );
        // An entry that went back (a ledger written from nothing) is not newer.
        let mut disk = ledger(&[("other", entry(0))]);
        merge_into_held(&held, &mut disk);
        assert_eq!(disk.entries["other"], older);
    }
}
