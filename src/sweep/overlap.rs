//! Identity and overlap (docs/state.md, "Identity and overlap"): records a transcript copied from a session this
//! repo already captured (a Claude Code fork, an old-style resume) are not captured twice, and a rewrite
//! before the cursor that kept the last captured record resumes after it. Compares the rule's
//! `record_id` of records; remembers per captured session only its first and last record ids.

use crate::discover::{self, FoundFile};
use crate::ledger::LedgerEntry;
use crate::rules::RuleSet;
use crate::util::lines::{parse_object, LineReader};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// A captured session of this repo whose first record id is known.
#[derive(Debug, Clone)]
pub struct Known {
    pub app: String,
    pub session_id: String,
    pub first: String,
    /// Its transcript, and the spans of it that it captured or has queued, less those it copied.
    pub path: String,
    pub claimed: Vec<(u64, u64)>,
}

/// The sessions of a ledger that remember record ids (what the overlap check compares). A session
/// claims the records it captured or has queued: lines a run of it will capture are its own as much as
/// those it captured.
pub fn known(entries: &BTreeMap<String, LedgerEntry>) -> Vec<Known> {
    entries
        .values()
        .filter_map(|e| {
            Some(Known {
                app: e.app.clone(),
                session_id: e.session_id.clone(),
                first: e.first_record_id.clone()?,
                path: e.path.clone(),
                claimed: e.claims_before(e.claimed_to()),
            })
        })
        .collect()
}

/// Lines at the start of a first-seen transcript copied from a session already captured.
#[derive(Debug, Clone)]
pub struct Copied {
    pub session_id: String,
    /// Where the copied records begin (the cursor before them), and the cursor just after the last.
    pub from: u64,
    pub bytes: u64,
    pub lines: u64,
    pub last_id: String,
}

/// The first record id of a transcript (within the rule's head limit), and the bytes read for it.
pub fn first_id(rule: &RuleSet, path: &Path, bytes_read: &mut u64) -> io::Result<Option<String>> {
    if rule.record_id.is_none() {
        return Ok(None);
    }
    let mut lines = LineReader::new(discover::open_transcript(path)?.take(rule.head.max_bytes));
    let mut records = 0;
    let mut found = None;
    while let Some(l) = lines.next_line()? {
        if let Some(v) = parse_object(l.bytes) {
            found = rule.record_id_of(&v);
            records += 1;
            if found.is_some() || records >= rule.head.max_records {
                break;
            }
        }
    }
    *bytes_read += lines.bytes_read();
    Ok(found)
}

/// The cursor (bytes, lines) just after the complete line holding the record `id`, if the file has one.
pub fn after_id(
    rule: &RuleSet,
    path: &Path,
    id: &str,
    bytes_read: &mut u64,
) -> io::Result<Option<(u64, u64)>> {
    let mut lines = LineReader::new(discover::open_transcript(path)?);
    let mut found = None;
    while let Some(l) = lines.next_line()? {
        // Cheap test first: only lines that hold the id are parsed.
        if !l.terminated || memchr::memmem::find(l.bytes, id.as_bytes()).is_none() {
            continue;
        }
        if parse_object(l.bytes)
            .and_then(|v| rule.record_id_of(&v))
            .as_deref()
            == Some(id)
        {
            found = Some((l.end, l.number));
            break;
        }
    }
    *bytes_read += lines.bytes_read();
    Ok(found)
}

/// Where a transcript of a session family (whose first record is another session's first: a fork, an
/// old-style resume, or the session they came from) stands against the records the family's other
/// sessions claimed (captured, or queued): those are theirs, never captured twice.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// The claimed records right at the start of the part: the cursor goes after them.
    pub copied: Option<Copied>,
    /// Where the first claimed record after them begins (bytes, lines before it): the part ends there,
    /// and the next sweep skips the claimed ones.
    pub until: Option<(u64, u64)>,
}

/// For a first-seen transcript whose first record starts a captured session of the same app (one head
/// read; the rest only then).
pub fn copied_from(
    rule: &RuleSet,
    file: &FoundFile,
    own_session: Option<&str>,
    known: &[Known],
    bytes_read: &mut u64,
) -> io::Result<Option<Shared>> {
    if !discover::records::compares(rule) || !known.iter().any(|k| other(k, file, own_session)) {
        return Ok(None);
    }
    let Some(first) = first_id(rule, &file.path, bytes_read)? else {
        return Ok(None);
    };
    shared(rule, file, (&first, (0, 0)), own_session, known, bytes_read)
}

/// For the entry of a transcript of a session family: the other sessions may have captured or queued
/// records it holds past its cursor since (they had them pending when it was first seen, both were first
/// seen by one sweep, or the other captured its copy of them first).
pub fn copied_past(
    rule: &RuleSet,
    file: &FoundFile,
    entry: &LedgerEntry,
    known: &[Known],
    bytes_read: &mut u64,
) -> io::Result<Option<Shared>> {
    let Some(first) = entry
        .first_record_id
        .as_deref()
        .filter(|_| discover::records::compares(rule))
    else {
        return Ok(None);
    };
    let own = Some(entry.session_id.as_str());
    let start = (entry.last_captured_size, entry.last_captured_line);
    shared(rule, file, (first, start), own, known, bytes_read)
}

/// A known session of the file's app other than its own.
fn other(k: &Known, file: &FoundFile, own_session: Option<&str>) -> bool {
    *k.app == *file.app && Some(k.session_id.as_str()) != own_session
}

/// The file read from `start` (bytes, lines) against the records the sessions of its family (those
/// starting with record `first`) claimed, each read from its own transcript; None when it has no family.
fn shared(
    rule: &RuleSet,
    file: &FoundFile,
    (first, start): (&str, (u64, u64)),
    own_session: Option<&str>,
    known: &[Known],
    bytes_read: &mut u64,
) -> io::Result<Option<Shared>> {
    let family: Vec<&Known> = known
        .iter()
        .filter(|k| other(k, file, own_session) && k.first == first)
        .collect();
    if family.is_empty() {
        return Ok(None);
    }
    let mut owner: HashMap<String, String> = HashMap::new();
    for k in family {
        for &span in &k.claimed {
            // A transcript that cannot be read claims nothing it can show.
            if let Ok(ids) = discover::records::ids_between(rule, Path::new(&k.path), span) {
                *bytes_read += span.1 - span.0;
                for id in ids {
                    owner.entry(id).or_insert_with(|| k.session_id.clone());
                }
            }
        }
    }
    let claimed: HashSet<String> = owner.keys().cloned().collect();
    let (block, until) = discover::records::claimed_spans(rule, &file.path, start, &claimed)?;
    let copied = block.map(|(bytes, lines, last_id)| Copied {
        session_id: owner[&last_id].clone(),
        from: start.0,
        bytes,
        lines,
        last_id,
    });
    Ok(Some(Shared { copied, until }))
}

/// The id of the last record with one that ends at or before byte `to` (read backwards, a window at a
/// time, each four times the last), or None.
///
/// The first window is 16 KiB: the line before a chunk's end nearly always has an id, and a live sweep
/// that starts thousands of chunks read 256 KiB (or the whole transcript) back from each end. A longer
/// last line costs one more read per fourfold.
pub fn last_id_before(rule: &RuleSet, path: &Path, to: u64) -> Option<String> {
    rule.record_id.as_ref()?;
    let mut f = discover::open_transcript(path).ok()?;
    let mut window: u64 = 16 * 1024;
    loop {
        let start = to.saturating_sub(window);
        f.seek(SeekFrom::Start(start)).ok()?;
        let mut buf = vec![0u8; (to - start) as usize];
        f.read_exact(&mut buf).ok()?;
        // A window that does not start the file may start mid-line: drop its first partial line.
        let body = match start {
            0 => &buf[..],
            _ => &buf[memchr::memchr(b'\n', &buf)? + 1..],
        };
        let id = body
            .split(|b| *b == b'\n')
            .rev()
            .find_map(|l| parse_object(l).and_then(|v| rule.record_id_of(&v)));
        if id.is_some() || start == 0 || window >= 64 << 20 {
            return id;
        }
        window *= 4;
    }
}

/// The record ids a live sweep remembers for the runs it queues: the transcript's first record id (when
/// its entry has none yet) and each chunk's last one.
#[derive(Debug, Default)]
pub struct ChunkIds {
    pub first: Option<String>,
    pub last: Vec<Option<String>>,
}

pub fn chunk_ids(
    rule: &RuleSet,
    file: &FoundFile,
    entry: Option<&LedgerEntry>,
    chunk_ends: impl Iterator<Item = u64>,
) -> ChunkIds {
    if rule.record_id.is_none() {
        return ChunkIds::default();
    }
    let first = match entry.and_then(|e| e.first_record_id.clone()) {
        Some(f) => Some(f),
        None => first_id(rule, &file.path, &mut 0).ok().flatten(),
    };
    ChunkIds {
        first,
        last: chunk_ends
            .map(|to| last_id_before(rule, &file.path, to))
            .collect(),
    }
}

/// The prompt's words for where a range's lines came from: a rewrite before the captured part that kept
/// its last record; or, for a first-seen transcript (`first_seen`), the lines it copied from a session
/// already captured, or the session it was forked from (the rule's `fork_of` and `fork_line` fields).
pub fn context(
    rule: &RuleSet,
    file: &FoundFile,
    first_seen: bool,
    r: &super::range::Range,
    candidates: &[super::gather::Candidate],
) -> Option<String> {
    if let Some(rc) = &r.recovered {
        return Some(format!(
            "This transcript was rewritten before the part already captured: {}. Lines before that \
             were captured earlier, perhaps as they read then.",
            rc.detail
        ));
    }
    if let Some(c) = &r.copied {
        return Some(format!(
            "Lines 1 to {} of this transcript are copied from session {} (a fork or resume of it), which \
             captured them (or has a run queued for them): do not document them again; read them only for \
             context.",
            c.lines, c.session_id
        ));
    }
    if !first_seen {
        return None;
    }
    rule.fields.iter().find(|f| f.name == "fork_of")?;
    let head = discover::read_head(rule, file).ok()?;
    let parent = head.get("fork_of")?;
    let at = head
        .get("fork_line")
        .map(|l| format!(", branching off where its record {l} begins"))
        .unwrap_or_default();
    let rollout = candidates
        .iter()
        .find(|(f, ex)| f.app == file.app && ex.session_id.as_deref() == Some(parent))
        .map(|(f, _)| format!(" (transcript {})", f.path.display()))
        .unwrap_or_default();
    Some(format!(
        "This session was forked from session {parent}{rollout}{at}; the parent's conversation is \
         not copied here. Capture this transcript's own lines; read the parent only for context."
    ))
}

#[cfg(test)]
mod tests {
    use super::last_id_before;
    use std::io::Write;

    /// The id is found however long the lines before the end are: past a last line longer than the
    /// first window, and back past lines without one.
    #[test]
    fn the_last_id_before_an_end_is_found_past_long_lines() {
        let catalog = crate::rules::load(&[]).unwrap();
        let claude = catalog.get("claude").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let big = "x".repeat(100 * 1024);
        let lines = [
            r#"{"type":"user","uuid":"u-1","message":{"content":"hi"}}"#.to_string(),
            format!(r#"{{"type":"assistant","uuid":"u-2","message":{{"content":"{big}"}}}}"#),
            format!(r#"{{"type":"progress","data":"{big}"}}"#),
            r#"{"type":"summary","summary":"no id"}"#.to_string(),
            format!(r#"{{"type":"user","uuid":"u-5","message":{{"content":"{big}"}}}}"#),
        ];
        let mut f = std::fs::File::create(&path).unwrap();
        let mut ends = Vec::new();
        let mut at = 0u64;
        for l in &lines {
            writeln!(f, "{l}").unwrap();
            at += l.len() as u64 + 1;
            ends.push(at);
        }
        drop(f);
        let id = |to| last_id_before(claude, &path, to);
        assert_eq!(id(ends[0]).as_deref(), Some("u-1"));
        assert_eq!(id(ends[1]).as_deref(), Some("u-2"));
        // Two lines without an id (one of them 100 KiB) before the end: u-2 is further back.
        assert_eq!(id(ends[3]).as_deref(), Some("u-2"));
        assert_eq!(id(ends[4]).as_deref(), Some("u-5"));
    }
}
