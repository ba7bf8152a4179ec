//! `runs/ledger.journal`: what the worker adds to the ledger while it drains the queue, appended one line
//! at a time instead of rewriting the whole ledger, so a run's bookkeeping costs the same whatever the
//! ledger's size. Today it holds almanac's own agent session ids (`{"agentSession": "<id>"}`), which
//! must be on disk before the agent starts; entries' cursors need no journal, they follow from the run
//! records (`RepoState::reconcile`).
//!
//! Every `ledger::load` applies it, so a sweep sees an id the moment it is appended. Every save (under the
//! repo lock, like every append) applies it again, writes the ledger, and only then empties it: a crash
//! between the two leaves lines the next load applies again, which changes nothing (set insertions). A
//! torn last line (a crash mid-append) does not parse and is skipped.
//!
//! Each line is sealed (`mac`, `ledger::seal`): the capture agent can write here, and an id it added
//! would keep that session from ever being captured. A line without a valid MAC is ignored. The file is
//! read without following a link and at most `MAX_JOURNAL_BYTES` of it (a save empties it).

use super::seal::{check_hex, mac_hex, JOURNAL_DOMAIN};
use super::{runs_dir, Ledger};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

pub const JOURNAL_FILE: &str = "ledger.journal";
/// What is read of the journal at most: one run adds about 150 bytes, and every save empties it.
pub const MAX_JOURNAL_BYTES: u64 = 16 << 20;

pub fn journal_path(repo: &Path) -> PathBuf {
    runs_dir(repo).join(JOURNAL_FILE)
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    agent_session: String,
    #[serde(default)]
    mac: String,
}

/// Appends `id` and syncs it to disk. The caller holds the repo lock.
pub fn append_agent_session(repo: &Path, id: &str) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(&Line {
        agent_session: id.to_string(),
        mac: mac_hex(JOURNAL_DOMAIN, &[id.as_bytes()])?,
    })
    .map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = crate::util::atomic::open_append_private(&journal_path(repo))?;
    f.write_all(&line)?;
    f.sync_data()
}

/// Applies the journal to `ledger`; returns whether it added anything. No journal: nothing to do.
pub fn apply(repo: &Path, ledger: &mut Ledger) -> std::io::Result<bool> {
    let f = match crate::util::untrusted::open_regular(&journal_path(repo)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut added = false;
    for line in std::io::BufReader::new(f.take(MAX_JOURNAL_BYTES)).split(b'\n') {
        let Ok(l) = serde_json::from_slice::<Line>(&line?) else {
            continue;
        };
        if check_hex(JOURNAL_DOMAIN, &[l.agent_session.as_bytes()], &l.mac).is_ok() {
            added |= ledger.agent_sessions.insert(l.agent_session);
        }
    }
    Ok(added)
}

/// The ledger now on disk holds everything the journal held: empty it. The caller holds the repo lock.
pub fn compacted(repo: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(journal_path(repo)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_ids_are_loaded_saved_into_the_ledger_and_then_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        std::fs::create_dir_all(runs_dir(repo)).unwrap();
        crate::ledger::add_agent_session(repo, "a1").unwrap();
        crate::ledger::add_agent_session(repo, "a2").unwrap();
        // A torn last line is skipped, and so are lines without a valid MAC (written by the agent).
        std::fs::OpenOptions::new()
            .append(true)
            .open(journal_path(repo))
            .unwrap()
            .write_all(
                b"{\"agentSession\":\"planted\"}\n{\"agentSession\":\"forged\",\"mac\":\"00\"}\n{\"agentSess",
            )
            .unwrap();
        let now = chrono::Utc::now();
        let mut l = crate::ledger::load(repo, now, true).unwrap().ledger;
        assert!(l.agent_sessions.contains("a1") && l.agent_sessions.contains("a2"));
        assert_eq!(l.agent_sessions.len(), 2, "{:?}", l.agent_sessions);
        assert!(
            !crate::ledger::ledger_path(repo).exists(),
            "no ledger write"
        );
        crate::ledger::save(repo, &mut l, now).unwrap();
        assert!(!journal_path(repo).exists());
        let l = crate::ledger::load(repo, now, true).unwrap().ledger;
        assert_eq!(l.agent_sessions.len(), 2);
    }
}
