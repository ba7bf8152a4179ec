//! A ledger rebuilt from the run records after `capture-ledger.json` did not parse, so a corrupt ledger
//! does not make the sweep capture every transcript again from line 1:
//!
//! - each app + session's latest `done` run gives its cursor (`toByte`, `toLine`, `prefixHash`; the entry
//!   has no file id, so the sweep verifies the prefix as for any entry);
//! - a queued or running run that starts at that cursor becomes the entry's pending run again (reconcile
//!   then settles it as usual), so a run still in flight is not queued twice;
//! - every run's `agentSessionId` is almanac's own session again.
//!
//! What no run record tells (a transcript whose runs were pruned, or one never captured) the sweep holds
//! as `cursor-lost` until the user decides (`hold_unknown`).

use super::entry::{EntryStatus, LedgerEntry, PendingChunk};
use super::record::{self, RunRecord, RunStatus};
use super::{key, Ledger};
use crate::reason::Reason;
use std::collections::BTreeMap;
use std::path::Path;

/// How much the run records gave back.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rebuilt {
    pub cursors: usize,
    pub agent_sessions: usize,
}

/// A ledger from the run records in `runs`.
pub fn from_runs(runs: &Path) -> (Ledger, Rebuilt) {
    let mut ledger = Ledger::default();
    let mut by_session: BTreeMap<String, Vec<RunRecord>> = BTreeMap::new();
    // `list` is sorted by run id, which is creation time.
    for r in record::list(runs) {
        if let Some(id) = &r.agent_session_id {
            ledger.agent_sessions.insert(id.clone());
        }
        by_session
            .entry(key(&r.app, &r.session_id))
            .or_default()
            .push(r);
    }
    let mut cursors = 0;
    for (k, runs) in by_session {
        let Some(done) = runs.iter().rposition(|r| r.status == RunStatus::Done) else {
            continue;
        };
        let d = &runs[done];
        let mut e = LedgerEntry::fresh(&d.app, &d.session_id, &d.transcript_path);
        e.place_cursor(d.to_byte, d.to_line, d.prefix_hash.clone(), false);
        e.last_captured_at = d.finished_at.clone();
        e.last_run_id = Some(d.run_id.clone());
        resume_in_flight(&mut e, &runs[done + 1..], d.to_byte);
        ledger.entries.insert(k, e);
        cursors += 1;
    }
    let rebuilt = Rebuilt {
        cursors,
        agent_sessions: ledger.agent_sessions.len(),
    };
    (ledger, rebuilt)
}

/// Runs after the cursor that are still queued or running, each starting where the one before ends:
/// the entry waits for them again.
fn resume_in_flight(e: &mut LedgerEntry, later: &[RunRecord], mut at: u64) {
    let mut first = true;
    for r in later {
        if !matches!(r.status, RunStatus::Queued | RunStatus::Running) || r.from_byte != at {
            continue;
        }
        let chunk = PendingChunk {
            run_id: r.run_id.clone(),
            to_size: r.to_byte,
            to_line: r.to_line,
            prefix_hash: r.prefix_hash.clone(),
            last_record_id: None,
        };
        if first {
            e.mark_pending(chunk, &r.created_at);
            first = false;
        } else {
            e.add_later_chunk(chunk);
        }
        at = r.to_byte;
    }
}

/// Words for a transcript no run record knows, with what the user can do about it.
pub fn cursor_lost_detail(transcript: &str, moved_to: &str) -> String {
    format!(
        "the repo's ledger did not parse (kept as {moved_to}) and no run record shows how much of this \
         transcript was captured, so it is not captured until you decide: `almanac capture reset \
         --skip-existing {transcript}` treats what it holds now as captured, `almanac capture reset \
         {transcript}` captures it again from line 1"
    )
}

/// After a rebuild, holds each of `found` (key, app, session id, path) that has no entry: an entry that
/// needs attention (`cursor-lost`) at line 0, which the sweep skips until `capture reset`. Returns how
/// many were held. Clears the rebuild mark, so this happens once.
pub fn hold_unknown<'a>(
    ledger: &mut Ledger,
    found: impl IntoIterator<Item = (String, &'a str, &'a str, String)>,
) -> usize {
    let Some(moved_to) = ledger.rebuilt_from.take() else {
        return 0;
    };
    let mut held = 0;
    for (k, app, sid, path) in found {
        if ledger.entries.contains_key(&k) {
            continue;
        }
        let mut e = LedgerEntry::fresh(app, sid, &path);
        e.needs_attention(Reason::CursorLost, cursor_lost_detail(&path, &moved_to));
        ledger.entries.insert(k, e);
        held += 1;
    }
    held
}

/// What checking a ledger without a valid seal against the sealed run records found and changed.
#[derive(Debug, Clone)]
pub struct Unsealed {
    /// Why the seal does not hold, in words.
    pub why: String,
    /// Entries set back to what the run records prove: a run in flight the entry no longer waited for,
    /// or a cursor ahead of every finished run (lines that would otherwise never be captured).
    pub corrected: Vec<String>,
    /// Entries no run record knows (their runs pruned, placed at the activation baseline, marked
    /// captured by `capture reset --skip-existing`, or made up): kept as they are.
    pub unverified: usize,
    /// Agent session ids no run record names: no longer taken for almanac's own.
    pub dropped_sessions: usize,
}

impl Unsealed {
    /// The attention item's words.
    pub fn detail(&self, ledger: &Path, live: bool) -> String {
        let mut d = format!(
            "{} does not carry this user's seal ({}): an earlier almanac wrote it, or something else \
             changed it (the capture agent may write under .almanac/). It was checked against the sealed run \
             records: ",
            ledger.display(),
            self.why
        );
        if self.corrected.is_empty() {
            d.push_str("nothing contradicts them");
        } else {
            d.push_str(&format!(
                "{} entr{} set back to what the run records prove ({})",
                self.corrected.len(),
                if self.corrected.len() == 1 {
                    "y"
                } else {
                    "ies"
                },
                self.corrected.join(", ")
            ));
        }
        d.push_str(&format!(
            "; {} agent session id{} no run record names no longer count as almanac's own; {} entr{} no \
             run record knows kept as they are (`almanac capture sessions` lists them; `almanac capture \
             reset <transcript>` captures one again). {}",
            self.dropped_sessions,
            if self.dropped_sessions == 1 { "" } else { "s" },
            self.unverified,
            if self.unverified == 1 { "y is" } else { "ies are" },
            if live {
                "It is sealed again now."
            } else {
                "A live sweep seals it again."
            }
        ));
        d
    }
}

/// Checks a ledger whose seal does not hold against the sealed run records in `runs`, changing only
/// what they contradict (see `Unsealed`); unknown fields and entries no record knows stay as they are.
pub fn check_unsealed(ledger: &mut Ledger, runs: &Path, why: String) -> Unsealed {
    let (proven, _) = from_runs(runs);
    let before = ledger.agent_sessions.len();
    ledger
        .agent_sessions
        .retain(|s| proven.agent_sessions.contains(s));
    let mut corrected = Vec::new();
    let known: std::collections::HashSet<String> = proven.entries.keys().cloned().collect();
    for (k, r) in proven.entries {
        let fix = match ledger.entries.get(&k) {
            None => true,
            Some(e) => {
                let in_flight = r.pending_run_id.as_deref();
                in_flight.is_some_and(|id| !e.waits_for(id))
                    || (e.status != EntryStatus::Pending
                        && e.last_captured_size > r.last_captured_size)
            }
        };
        if fix {
            match ledger.entries.get_mut(&k) {
                Some(e) => {
                    // The entry's own history (attempts, file identity, record ids) is kept; its cursor
                    // and pending run are the run records'.
                    e.place_cursor(
                        r.last_captured_size,
                        r.last_captured_line,
                        r.last_captured_prefix_hash.clone(),
                        false,
                    );
                    e.last_record_id = None;
                    e.file_id = None;
                    e.seen_mtime_ns = None;
                    e.status = r.status;
                    e.last_run_id = r.last_run_id.clone();
                    e.pending_run_id = r.pending_run_id.clone();
                    e.pending_to_size = r.pending_to_size;
                    e.pending_to_line = r.pending_to_line;
                    e.pending_prefix_hash = r.pending_prefix_hash.clone();
                    e.pending_started_at = r.pending_started_at.clone();
                    e.pending_last_record_id = None;
                    e.pending_rest = r.pending_rest.clone();
                }
                None => {
                    ledger.entries.insert(k.clone(), r);
                }
            }
            corrected.push(k);
        }
    }
    let unverified = ledger
        .entries
        .iter()
        .filter(|(k, e)| {
            !known.contains(*k) && (e.last_captured_size > 0 || e.status == EntryStatus::Pending)
        })
        .count();
    Unsealed {
        why,
        corrected,
        unverified,
        dropped_sessions: before - ledger.agent_sessions.len(),
    }
}

/// Whether an entry is held because a corrupt ledger lost its cursor.
pub fn is_held(e: &LedgerEntry) -> bool {
    e.status == EntryStatus::NeedsAttention
        && e.attention.as_deref() == Some(Reason::CursorLost.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Ledger, LedgerEntry};

    fn run(id: &str, status: RunStatus, from: u64, to: u64) -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "version": 1, "runId": id, "status": status, "repoRoot": "/r", "app": "claude",
            "sessionId": "s1", "transcriptPath": "/t/s1.jsonl", "fromLine": from / 10 + 1,
            "toLine": to / 10, "fromByte": from, "toByte": to, "prefixHash": format!("sha256:{to}"),
            "agent": "claude", "agentSessionId": format!("agent-{id}"),
            "createdAt": "2026-11-30T00:00:00.000Z", "finishedAt": "2026-11-30T01:00:00.000Z",
            "promptPath": "", "logPath": ""
        }))
        .unwrap()
    }

    #[test]
    fn the_latest_done_run_gives_the_cursor_and_a_run_in_flight_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        for r in [
            run("run_1", RunStatus::Done, 0, 100),
            run("run_2", RunStatus::Done, 100, 200),
            run("run_3", RunStatus::Failed, 200, 300),
            run("run_4", RunStatus::Queued, 200, 300),
        ] {
            record::write(dir.path(), &r).unwrap();
        }
        let (ledger, rebuilt) = from_runs(dir.path());
        assert_eq!((rebuilt.cursors, rebuilt.agent_sessions), (1, 4));
        let e = &ledger.entries[&key("claude", "s1")];
        assert_eq!((e.last_captured_size, e.last_captured_line), (200, 20));
        assert_eq!(e.last_captured_prefix_hash, "sha256:200");
        assert!(e.waits_for("run_4"));
        assert!(e.file_id.is_none(), "the prefix is verified by the sweep");
    }

    #[test]
    fn unknown_transcripts_are_held_once() {
        let mut ledger = Ledger::default();
        ledger.rebuilt_from = Some("/r/capture-ledger.json.corrupt-x".into());
        ledger.entries.insert(
            key("claude", "known"),
            LedgerEntry::fresh("claude", "known", "/t/k.jsonl"),
        );
        let found = || {
            vec![
                (
                    key("claude", "known"),
                    "claude",
                    "known",
                    "/t/k.jsonl".into(),
                ),
                (key("claude", "new"), "claude", "new", "/t/n.jsonl".into()),
            ]
        };
        assert_eq!(hold_unknown(&mut ledger, found()), 1);
        assert!(is_held(&ledger.entries[&key("claude", "new")]));
        assert!(!is_held(&ledger.entries[&key("claude", "known")]));
        assert!(ledger.rebuilt_from.is_none());
        assert_eq!(
            hold_unknown(&mut ledger, found()),
            0,
            "only right after a rebuild"
        );
    }

    #[test]
    fn unknown_fields_round_trip() {
        let text = r#"{"version":1,"updatedAt":"t","future":{"a":1},"entries":{"claude:s1":{
            "path":"/t","app":"claude","sessionId":"s1","status":"done","lastCapturedSize":0,
            "lastCapturedLine":0,"lastCapturedPrefixHash":"sha256:x","attempts":0,"later":[1,2]}}}"#;
        let l: Ledger = serde_json::from_str(text).unwrap();
        let back: serde_json::Value = serde_json::to_value(&l).unwrap();
        assert_eq!(back["future"], serde_json::json!({"a": 1}));
        assert_eq!(
            back["entries"]["claude:s1"]["later"],
            serde_json::json!([1, 2])
        );
        let again: Ledger = serde_json::from_value(back).unwrap();
        assert_eq!(again.entries, l.entries);
    }
}
