//! `capture-ledger.json`: load (a file that does not parse is renamed aside, never replaced in place)
//! and save (atomically; the caller holds the repo lock).

use super::{ledger_path, lock_repo, LedgerEntry};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const LEDGER_VERSION: u32 = 1;
pub const LEDGER_FILE: &str = "capture-ledger.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub version: u32,
    pub updated_at: String,
    /// Keyed `<app>:<session id>`.
    pub entries: BTreeMap<String, LedgerEntry>,
    /// Session ids of almanac's own capture agents in this repo: never captured. Kept here (as well as in
    /// run records) so a sweep need not read every run record, and so pruning runs forgets nothing.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub agent_sessions: std::collections::BTreeSet<String>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            version: LEDGER_VERSION,
            updated_at: String::new(),
            entries: BTreeMap::new(),
            agent_sessions: Default::default(),
        }
    }
}

/// A ledger as loaded, with what happened to a corrupt file.
pub struct Loaded {
    pub ledger: Ledger,
    /// Set when the file did not parse: where it was (or, in a dry run, would be) moved.
    pub corrupt: Option<Corrupt>,
}

pub struct Corrupt {
    pub moved_to: PathBuf,
    pub error: String,
}

/// Loads the ledger, with the journal's additions (`journal`) applied.
pub fn load(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
    rename: bool,
) -> std::io::Result<Loaded> {
    let mut loaded = load_file(repo, now, rename)?;
    super::journal::apply(repo, &mut loaded.ledger)?;
    Ok(loaded)
}

/// Loads the ledger file. A file that does not parse (or has an unknown version) is renamed to
/// `capture-ledger.json.corrupt-<UTC timestamp>` when `rename` is true, and a fresh ledger is returned.
fn load_file(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
    rename: bool,
) -> std::io::Result<Loaded> {
    let path = ledger_path(repo);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Loaded {
                ledger: Ledger::default(),
                corrupt: None,
            })
        }
        Err(e) => return Err(e),
    };
    let error = match serde_json::from_slice::<Ledger>(&text) {
        Ok(l) if l.version == LEDGER_VERSION => {
            return Ok(Loaded {
                ledger: l,
                corrupt: None,
            })
        }
        Ok(l) => format!("unknown ledger version {}", l.version),
        Err(e) => e.to_string(),
    };
    let moved_to = path.with_file_name(format!(
        "{LEDGER_FILE}.corrupt-{}",
        now.format("%Y%m%dT%H%M%S%3fZ")
    ));
    if rename {
        std::fs::rename(&path, &moved_to)?;
    }
    Ok(Loaded {
        ledger: Ledger::default(),
        corrupt: Some(Corrupt { moved_to, error }),
    })
}

pub fn save(
    repo: &Path,
    ledger: &mut Ledger,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<()> {
    save_bytes(repo, ledger, now).map(drop)
}

/// As `save`, returning the bytes written.
pub fn save_bytes(
    repo: &Path,
    ledger: &mut Ledger,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<Vec<u8>> {
    super::journal::apply(repo, ledger)?;
    ledger.updated_at = crate::policy::iso(now);
    let text = crate::util::atomic::json_bytes(ledger)?;
    crate::util::atomic::write_atomic(&ledger_path(repo), &text)?;
    crate::util::fault::point("ledger-saved");
    super::journal::compacted(repo)?;
    Ok(text)
}

/// Records an agent session id as ours, under the repo lock (the worker calls this before the agent can
/// write a transcript, or as soon as the agent reports its id): one line appended to the journal, not a
/// rewrite of the ledger.
pub fn add_agent_session(repo: &Path, session_id: &str) -> std::io::Result<()> {
    let _guard = lock_repo(repo)?;
    super::journal::append_agent_session(repo, session_id)
}
