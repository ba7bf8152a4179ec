//! `capture-ledger.json`: load (a file that does not parse is renamed aside, never replaced in place)
//! and save (atomically; the caller holds the repo lock).
//!
//! The file is sealed (`ledger::seal`): its last member is `"mac"`, the MAC of the file's bytes without
//! that member, so any change made by anything but this user's almanac (the capture agent may write
//! under `.almanac/`) is seen on the next load. A ledger whose seal is missing or wrong is not thrown
//! away: it is checked against the sealed run records (`rebuild::check_unsealed`), reported
//! (`ledger-unsealed`), and sealed by the next save. It is read without following a link and at most
//! `MAX_LEDGER_BYTES` of it.

use super::{ledger_path, lock_repo, LedgerEntry};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const LEDGER_VERSION: u32 = 1;
pub const LEDGER_FILE: &str = "capture-ledger.json";
/// A ledger larger than this is refused (`ledger-unreadable`), not read: at 100k transcripts in one repo
/// it is about 60 MiB.
pub const MAX_LEDGER_BYTES: u64 = 1 << 30;

/// The seal as `save` writes it, the file's last member: `,\n  "mac": "<64 hex digits>"\n}\n`.
const MAC_HEAD: &[u8] = b",\n  \"mac\": \"";
const MAC_TAIL: &[u8] = b"\"\n}\n";
/// How the unsealed body (`json_bytes` of the ledger) ends.
const BODY_END: &[u8] = b"\n}\n";

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
    /// Set when this ledger was rebuilt from run records after the file did not parse, until a live sweep
    /// has held the transcripts no run record knows (`cursor-lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebuilt_from: Option<String>,
    /// What a worker found done to this ledger while an agent ran (overwritten, deleted) and wrote back
    /// from the copy it held: the next live sweep reports each (`ledger-overwritten`) and clears them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overwritten: Vec<String>,
    /// Fields this version does not know (written by a later minor change): kept on rewrite.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
    /// The seal as read (never written through serde: `save` appends it, `load` checks the bytes).
    #[serde(default, skip_serializing)]
    mac: Option<serde_json::Value>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            version: LEDGER_VERSION,
            updated_at: String::new(),
            entries: BTreeMap::new(),
            agent_sessions: Default::default(),
            rebuilt_from: None,
            overwritten: Vec::new(),
            extra: Default::default(),
            mac: None,
        }
    }
}

/// A ledger as loaded, with what happened to a corrupt file.
pub struct Loaded {
    pub ledger: Ledger,
    /// Set when the file did not parse: where it was (or, in a dry run, would be) moved.
    pub corrupt: Option<Corrupt>,
    /// Set when the file parsed but does not carry this user's seal: what checking it found.
    pub unsealed: Option<super::rebuild::Unsealed>,
}

impl Loaded {
    fn of(ledger: Ledger) -> Loaded {
        Loaded {
            ledger,
            corrupt: None,
            unsealed: None,
        }
    }
}

pub struct Corrupt {
    pub moved_to: PathBuf,
    pub error: String,
    /// What the run records gave back.
    pub rebuilt: super::rebuild::Rebuilt,
}

/// A ledger written by a newer almanac: left exactly as it is, and nothing in its repo is captured.
#[derive(Debug)]
pub struct NewerLedger {
    pub path: PathBuf,
    pub version: u64,
}

impl std::fmt::Display for NewerLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} was written by a newer almanac (ledger version {}; this almanac reads version {LEDGER_VERSION}); \
             it is left as it is and nothing in this repo is captured: upgrade almanac",
            self.path.display(),
            self.version
        )
    }
}

impl std::error::Error for NewerLedger {}

/// The newer ledger an error from `load` stands for, if it is one.
pub fn newer_version(e: &std::io::Error) -> Option<&NewerLedger> {
    e.get_ref().and_then(|r| r.downcast_ref::<NewerLedger>())
}

/// Whether the repo's ledger was written by a newer almanac (read only; any other problem is not).
pub fn is_newer(repo: &Path) -> Option<NewerLedger> {
    let text = read(repo).ok()??;
    check_version(&ledger_path(repo), &text).err()
}

/// A file whose `version` is above ours is a newer ledger; anything else is for the full parse to judge.
fn check_version(path: &Path, text: &[u8]) -> Result<(), NewerLedger> {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: u64,
    }
    match serde_json::from_slice::<VersionOnly>(text) {
        Ok(v) if v.version > u64::from(LEDGER_VERSION) => Err(NewerLedger {
            path: path.to_path_buf(),
            version: v.version,
        }),
        _ => Ok(()),
    }
}

/// Loads the ledger, with the journal's additions (`journal`) applied. A ledger of a newer version is an
/// error (`newer_version` tells it apart) and is never touched. A file that does not parse (or has
/// version 0) is renamed to `capture-ledger.json.corrupt-<UTC timestamp>` when `rename` is true, and what
/// the run records tell is returned in its place (`rebuild::from_runs`).
pub fn load(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
    rename: bool,
) -> std::io::Result<Loaded> {
    let (mut loaded, seal) = load_file(repo, now, rename)?;
    if let Err(why) = seal {
        let runs = super::runs_dir(repo);
        loaded.unsealed = Some(super::rebuild::check_unsealed(
            &mut loaded.ledger,
            &runs,
            why,
        ));
    }
    super::journal::apply(repo, &mut loaded.ledger)?;
    Ok(loaded)
}

/// The ledger file's bytes (None when there is none), never through a link and at most
/// `MAX_LEDGER_BYTES`.
fn read(repo: &Path) -> std::io::Result<Option<Vec<u8>>> {
    crate::util::untrusted::read_optional(&ledger_path(repo), MAX_LEDGER_BYTES)
}

/// The ledger's bytes as `save` writes them: `body` (the unsealed JSON) with its seal as last member.
fn sealed(mut body: Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mac = super::seal::mac_hex(super::seal::LEDGER_DOMAIN, &[&body])?;
    if !body.ends_with(BODY_END) {
        return Err(std::io::Error::other(
            "a ledger's JSON ends with a closing brace",
        ));
    }
    body.truncate(body.len() - BODY_END.len());
    body.extend_from_slice(MAC_HEAD);
    body.extend_from_slice(mac.as_bytes());
    body.extend_from_slice(MAC_TAIL);
    Ok(body)
}

/// Ok when `text` is a ledger this user's almanac sealed as it is; otherwise why not, in words.
fn check_seal(text: &[u8]) -> Result<(), String> {
    let n = text.len();
    let seal_len = MAC_HEAD.len() + 64 + MAC_TAIL.len();
    let body_len = n.saturating_sub(seal_len);
    if n < seal_len || !text.ends_with(MAC_TAIL) || !text[body_len..].starts_with(MAC_HEAD) {
        return Err("it carries no seal".into());
    }
    let mac = std::str::from_utf8(&text[body_len + MAC_HEAD.len()..n - MAC_TAIL.len()])
        .map_err(|_| "its seal is not text".to_string())?;
    super::seal::check_hex(
        super::seal::LEDGER_DOMAIN,
        &[&text[..body_len], BODY_END],
        mac,
    )
}

/// What `capture sessions` shows of each entry, by key: the line captured through and the status, as
/// `load(repo, now, false)` gives them, without holding the entries (two ledgers of 2,000 entries
/// parsed at once were a fifth of a 100k listing's memory). Each entry is parsed whole, and every other
/// member as `Ledger` types it, so a file `load` calls corrupt fails here too; that file, a newer one
/// and one this cannot read go to `load` itself. The journal is not read: it adds only agent session
/// ids, which these facts do not hold.
pub fn entry_facts(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
) -> std::io::Result<std::collections::HashMap<String, (u64, &'static str)>> {
    type Facts = std::collections::HashMap<String, (u64, &'static str)>;
    fn fact(e: &LedgerEntry) -> (u64, &'static str) {
        (e.last_captured_line, e.status.code())
    }
    /// `Ledger`, its entries kept as facts (unknown members are accepted, as `extra` takes any).
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)] // parsed to be checked as `Ledger` checks them
    struct Light {
        version: u32,
        updated_at: String,
        entries: EntryFacts,
        #[serde(default)]
        agent_sessions: std::collections::BTreeSet<String>,
        #[serde(default)]
        rebuilt_from: Option<String>,
        #[serde(default)]
        overwritten: Vec<String>,
    }
    struct EntryFacts(Facts);
    impl<'de> Deserialize<'de> for EntryFacts {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = EntryFacts;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a map of ledger entries")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> Result<EntryFacts, A::Error> {
                    let mut out = Facts::new();
                    while let Some((k, e)) = m.next_entry::<String, LedgerEntry>()? {
                        out.insert(k, fact(&e));
                    }
                    Ok(EntryFacts(out))
                }
            }
            d.deserialize_map(V)
        }
    }
    let whole = |l: Loaded| {
        l.ledger
            .entries
            .into_iter()
            .map(|(k, e)| (k, fact(&e)))
            .collect()
    };
    let text = match read(repo) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(Facts::new()),
        Err(_) => return load(repo, now, false).map(whole),
    };
    match serde_json::from_slice::<Light>(&text) {
        Ok(l) if l.version == LEDGER_VERSION => Ok(l.entries.0),
        _ => {
            drop(text);
            load(repo, now, false).map(whole)
        }
    }
}

/// The ledger file alone, as `load` describes it, with whether its seal holds (a missing or corrupt file
/// has nothing to check).
fn load_file(
    repo: &Path,
    now: chrono::DateTime<chrono::Utc>,
    rename: bool,
) -> std::io::Result<(Loaded, Result<(), String>)> {
    let path = ledger_path(repo);
    let Some(text) = read(repo)? else {
        return Ok((Loaded::of(Ledger::default()), Ok(())));
    };
    // Parsed whole first: a ledger of our version needs no separate look at its version (a second
    // pass over the file); anything else is checked for a newer version before it is called corrupt.
    let error = match serde_json::from_slice::<Ledger>(&text) {
        Ok(mut l) if l.version == LEDGER_VERSION => {
            l.mac = None;
            return Ok((Loaded::of(l), check_seal(&text)));
        }
        Ok(l) => format!("unknown ledger version {}", l.version),
        Err(e) => e.to_string(),
    };
    check_version(&path, &text).map_err(std::io::Error::other)?;
    let moved_to = path.with_file_name(format!(
        "{LEDGER_FILE}.corrupt-{}",
        now.format("%Y%m%dT%H%M%S%3fZ")
    ));
    if rename {
        std::fs::rename(&path, &moved_to)?;
    }
    let (mut ledger, rebuilt) = super::rebuild::from_runs(&super::runs_dir(repo));
    ledger.rebuilt_from = Some(moved_to.display().to_string());
    let mut loaded = Loaded::of(ledger);
    loaded.corrupt = Some(Corrupt {
        moved_to,
        error,
        rebuilt,
    });
    Ok((loaded, Ok(())))
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
    let text = sealed(crate::util::atomic::json_bytes(ledger)?)?;
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

#[cfg(test)]
mod tests {
    use super::super::EntryStatus;
    use super::*;

    /// `entry_facts` gives each entry's line and status as `load` does, whatever the file: a good
    /// ledger, one with an entry `load` refuses (both rebuild from the run records), one with unknown
    /// members, a missing one, a newer one (both fail).
    #[test]
    fn entry_facts_are_what_load_gives() {
        let now = chrono::Utc::now();
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        std::fs::create_dir_all(super::super::runs_dir(repo)).unwrap();
        let facts_of_load = |repo: &Path| -> std::io::Result<Vec<(String, u64, &'static str)>> {
            let l = load(repo, now, false)?;
            let mut v: Vec<_> = l
                .ledger
                .entries
                .into_iter()
                .map(|(k, e)| (k, e.last_captured_line, e.status.code()))
                .collect();
            v.sort();
            Ok(v)
        };
        let facts = |repo: &Path| -> std::io::Result<Vec<(String, u64, &'static str)>> {
            let mut v: Vec<_> = entry_facts(repo, now)?
                .into_iter()
                .map(|(k, (line, status))| (k, line, status))
                .collect();
            v.sort();
            Ok(v)
        };
        let same = |what: &str| match (facts(repo), facts_of_load(repo)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "{what}");
                a.len()
            }
            (Err(_), Err(_)) => 0,
            (a, b) => panic!("{what}: {a:?} against {b:?}"),
        };
        assert_eq!(same("no ledger"), 0);

        let mut ledger = Ledger::default();
        for (i, status) in [
            EntryStatus::Done,
            EntryStatus::Pending,
            EntryStatus::NeedsAttention,
        ]
        .into_iter()
        .enumerate()
        {
            let mut e = LedgerEntry::fresh("claude", &format!("s{i}"), "/t.jsonl");
            e.status = status;
            e.last_captured_line = 10 * i as u64 + 3;
            ledger.entries.insert(format!("claude:s{i}"), e);
        }
        let good = serde_json::to_value(&ledger).unwrap();
        let write = |v: &serde_json::Value| {
            std::fs::write(ledger_path(repo), serde_json::to_vec(v).unwrap()).unwrap()
        };
        write(&good);
        assert_eq!(same("a good ledger"), 3);

        let mut unknown = good.clone();
        unknown["laterField"] = serde_json::json!({"any": [1, 2]});
        unknown["entries"]["claude:s1"]["laterEntryField"] = serde_json::json!(true);
        write(&unknown);
        assert_eq!(same("unknown members"), 3);

        // One entry `load` refuses: the whole file is corrupt to both (rebuilt from no run records).
        let mut bad = good.clone();
        bad["entries"]["claude:s2"]["attempts"] = serde_json::json!("three");
        write(&bad);
        assert_eq!(same("a bad entry"), 0);
        let mut bad = good.clone();
        bad["agentSessions"] = serde_json::json!("not a list");
        write(&bad);
        assert_eq!(same("a bad member beside the entries"), 0);

        let mut newer = good.clone();
        newer["version"] = serde_json::json!(LEDGER_VERSION + 1);
        write(&newer);
        assert!(
            entry_facts(repo, now).is_err(),
            "a newer ledger is not read"
        );
        assert_eq!(same("a newer ledger"), 0);
    }
}
