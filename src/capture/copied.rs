//! Before a run starts: of a session that shares its first records with another session of the repo (a
//! fork, an old-style resume, or the session it was forked from), the run may hold no record the other
//! one claimed, that is captured or queued by a run older than this one. Two first seen by one sweep, or
//! a fork seen while its source still had the copied lines pending, would otherwise both capture them
//! (docs/state.md, "Identity and overlap"). Such a run is cancelled, spending no attempt, and the next
//! sweep moves its cursor past those records (`sweep::overlap::copied_past`).

use crate::discover::records;
use crate::ledger::{key, Ledger, LedgerEntry};
use crate::reason::Reason;
use crate::rules::Catalog;
use std::path::Path;

/// The rule sets, loaded once a worker first needs them (None when they cannot be).
pub struct Rules {
    home: std::path::PathBuf,
    loaded: Option<Option<Catalog>>,
}

impl Rules {
    pub fn new(almanac_home: &Path) -> Rules {
        Rules {
            home: almanac_home.to_path_buf(),
            loaded: None,
        }
    }

    fn get(&mut self) -> Option<&Catalog> {
        let home = &self.home;
        self.loaded
            .get_or_insert_with(|| crate::rules::load(&crate::rules::rule_dirs(home, None)).ok())
            .as_ref()
    }
}

/// The spans of its transcript `o` claimed before run `run_id` was queued: up to the end of its queued
/// runs when the first of them is older, else of what it captured; less what it copied.
fn claimed_before(o: &LedgerEntry, run_id: &str) -> Vec<(u64, u64)> {
    let queued_earlier = o.pending_run_id.as_deref().is_some_and(|p| p < run_id);
    let to = match queued_earlier {
        true => o.claimed_to(),
        false => o.last_captured_size,
    };
    o.claims_before(to)
}

/// Why run `r` must not capture its lines, if another session of its family claimed one of its records.
pub fn claimed_elsewhere(
    rules: &mut Rules,
    ledger: &Ledger,
    r: &crate::ledger::RunRecord,
) -> Option<String> {
    let me = ledger.entries.get(&key(&r.app, &r.session_id))?;
    let first = me.first_record_id.as_deref()?;
    let family: Vec<&LedgerEntry> = ledger
        .entries
        .values()
        .filter(|o| o.app == r.app && o.session_id != r.session_id)
        .filter(|o| o.first_record_id.as_deref() == Some(first))
        .collect();
    if family.is_empty() {
        return None;
    }
    let rule = rules.get()?.get(&r.app).filter(|r| records::compares(r))?;
    for o in family {
        let mut ids = std::collections::HashSet::new();
        for span in claimed_before(o, &r.run_id) {
            // A transcript that cannot be read claims nothing it can show.
            ids.extend(records::ids_between(rule, Path::new(&o.path), span).unwrap_or_default());
        }
        if ids.is_empty() {
            continue;
        }
        let span = (r.from_byte, r.from_line.saturating_sub(1), r.to_byte);
        let path = Path::new(&r.transcript_path);
        if let Ok(Some((line, id))) = records::first_claimed(rule, path, span, &ids) {
            return Some(format!(
                "{}: line {line} holds record {id}, which session {} captured or has queued (this \
                 transcript copied it, or it copied this one); the next sweep captures from after the \
                 records they share",
                Reason::CapturedElsewhere,
                o.session_id
            ));
        }
    }
    None
}
