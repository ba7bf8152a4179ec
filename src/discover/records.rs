//! A transcript's records by their stable ids (a rule set's `record_id`, e.g. Claude Code's `$.uuid`,
//! which a fork or an old-style resume copies unchanged): which ids a session claimed (captured or
//! queued), and where another transcript's copy of them ends. What the sweep's overlap check and the
//! worker's check before a run share (docs/state.md, "Identity and overlap").

use crate::rules::needs::{Need, Needs};
use crate::rules::pruned::parse_pruned;
use crate::rules::RuleSet;
use crate::util::lines::LineReader;
use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Whether a rule set's transcripts are compared by record id. Not a view's (a store that is not
/// append-only JSONL): its message ids may be hashes of their content, which two sessions share by
/// chance (the same first prompt), and its cursor is the messages' ids anyway.
pub fn compares(rule: &RuleSet) -> bool {
    rule.record_id.is_some() && !rule.has_views()
}

/// What of a record its id needs (the rest of the line is checked, not built).
fn need(rule: &RuleSet) -> Option<Need> {
    let p = rule.record_id.as_ref()?;
    let mut n = Needs::default();
    n.scalar(p);
    Some(n.finish())
}

/// The id of the record on a line, read through `need`.
fn id_of(rule: &RuleSet, need: &Need, line: &[u8]) -> Option<String> {
    let record = parse_pruned(line, need)?;
    let mut found = None;
    rule.record_id.as_ref()?.any(&record, |v| {
        found = v.as_str().map(str::to_string);
        found.is_some()
    });
    found
}

/// Each complete line of bytes `[from, to)` of `path` (whose first is line `first_line`) with its end
/// and number, until `f` says stop.
fn each_line(
    path: &Path,
    (from, to): (u64, u64),
    first_line: u64,
    mut f: impl FnMut(&[u8], u64, u64) -> bool,
) -> io::Result<()> {
    let mut file = super::open_transcript(path)?;
    file.seek(SeekFrom::Start(from))?;
    let mut lines = LineReader::new(file.take(to.saturating_sub(from)));
    while let Some(l) = lines.next_line()? {
        if !l.terminated || !f(l.bytes, from + l.end, first_line + l.number - 1) {
            break;
        }
    }
    Ok(())
}

/// What a session claimed: each record's id, with its content (`content_of`). A record is the one
/// claimed only when both match: a file that takes a session's record ids for text of its own claims
/// nothing of that session's.
pub type Claims = HashMap<String, Content>;

/// A record's content as a copy keeps it: what the rule set's turn reading takes of it (the rendering's
/// fields, which never include the session id a copy changes; not its time, which says when, not
/// what), hashed.
pub type Content = [u8; 32];

/// What of a record its content is (`content_of`): the rendering's fields without the record's time.
pub fn content_need(rule: &RuleSet) -> Option<Need> {
    rule.turns.as_ref().map(|t| t.render_needs(&[]))
}

pub fn content_of(need: Option<&Need>, line: &[u8]) -> Content {
    use sha2::{Digest, Sha256};
    let value = match need {
        Some(n) => crate::rules::pruned::parse_pruned(line, n).map(|p| p.to_value()),
        None => crate::util::lines::parse_object(line),
    };
    let bytes = value
        .map(|v| serde_json::to_vec(&v).unwrap_or_default())
        .unwrap_or_else(|| line.to_vec());
    Sha256::digest(&bytes).into()
}

/// Whether the record on `line`, whose id is `id`, is one `claimed` holds: `Some(true)` when its
/// content matches too, `Some(false)` for a conflict (the id, other content), None when the id is not
/// claimed.
fn claim_of(content: Option<&Need>, claimed: &Claims, id: &str, line: &[u8]) -> Option<bool> {
    claimed.get(id).map(|c| *c == content_of(content, line))
}

/// The ids and contents of the records in bytes `[from, to)` of `path` (`from` on a line's start):
/// what a session claimed there.
pub fn ids_between(rule: &RuleSet, path: &Path, (from, to): (u64, u64)) -> io::Result<Claims> {
    let mut out = Claims::new();
    let Some(need) = need(rule) else {
        return Ok(out);
    };
    let content = content_need(rule);
    each_line(path, (from, to), 1, |bytes, _, _| {
        if let Some(id) = id_of(rule, &need, bytes) {
            out.insert(id, content_of(content.as_ref(), bytes));
        }
        true
    })?;
    Ok(out)
}

/// How the records of `path` from byte `from` (after line `lines_before`) stand against `claimed`: the
/// cursor after the block of claimed records right there (records without an id go along), with the
/// last claimed id; after that block, where the first claimed record begins (its byte, and the lines
/// before it); and each record read on the way that has a claimed id but other content (its line and
/// id): not the claimed record, so captured here too.
pub struct Claimed {
    pub block: Option<(u64, u64, String)>,
    pub later: Option<(u64, u64)>,
    pub conflicts: Vec<(u64, String)>,
}

pub fn claimed_spans(
    rule: &RuleSet,
    path: &Path,
    (from, lines_before): (u64, u64),
    claimed: &Claims,
) -> io::Result<Claimed> {
    let (mut block, mut later, mut conflicts) = (None, None, Vec::new());
    let Some(need) = need(rule) else {
        return Ok(Claimed {
            block,
            later,
            conflicts,
        });
    };
    let (mut in_block, mut start) = (true, from);
    let content = content_need(rule);
    each_line(path, (from, u64::MAX), lines_before + 1, |bytes, end, n| {
        let id = id_of(rule, &need, bytes);
        let claim = id
            .as_deref()
            .and_then(|i| claim_of(content.as_ref(), claimed, i, bytes));
        if let (Some(false), Some(i)) = (claim, &id) {
            conflicts.push((n, i.clone()));
        }
        let is_claimed = claim == Some(true);
        match (in_block, id) {
            (true, Some(id)) if is_claimed => block = Some((end, n, id)),
            (true, None) => {}
            (true, Some(_)) => in_block = false,
            (false, _) if is_claimed => {
                later = Some((start, n - 1));
                return false;
            }
            (false, _) => {}
        }
        start = end;
        true
    })?;
    Ok(Claimed {
        block,
        later,
        conflicts,
    })
}

/// The first record of bytes `[from, to)` of `path` whose id is one of `claimed`, as (its line, id).
pub fn first_claimed(
    rule: &RuleSet,
    path: &Path,
    (from, lines_before, to): (u64, u64, u64),
    claimed: &Claims,
) -> io::Result<Option<(u64, String)>> {
    let Some(need) = need(rule) else {
        return Ok(None);
    };
    let mut found = None;
    let content = content_need(rule);
    each_line(path, (from, to), lines_before + 1, |bytes, _, n| {
        found = id_of(rule, &need, bytes)
            .filter(|id| claim_of(content.as_ref(), claimed, id, bytes) == Some(true))
            .map(|id| (n, id));
        found.is_none()
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude() -> crate::rules::Catalog {
        crate::rules::load(&[]).unwrap()
    }

    fn line(uuid: Option<&str>, text: &str) -> String {
        match uuid {
            Some(u) => format!("{{\"type\":\"user\",\"uuid\":\"{u}\",\"parentUuid\":\"p-{u}\",\"message\":{{\"content\":\"{text}\"}}}}\n"),
            None => format!("{{\"type\":\"mode\",\"note\":\"{text}\"}}\n"),
        }
    }

    #[test]
    fn a_copy_ends_after_the_claimed_records_in_a_row_and_a_part_before_the_next() {
        let cat = claude();
        let rule = cat.get("claude").unwrap();
        let d = tempfile::tempdir().unwrap();
        let parent = d.path().join("p.jsonl");
        let fork = d.path().join("f.jsonl");
        let p: String = ["a", "b", "c", "d"]
            .iter()
            .map(|u| line(Some(u), u))
            .collect();
        std::fs::write(&parent, &p).unwrap();
        // The fork: a record without an id first, then a, b, c copied, then its own.
        let f = format!(
            "{}{}{}{}{}",
            line(None, "mode"),
            line(Some("a"), "a"),
            line(Some("b"), "b"),
            line(Some("c"), "c"),
            line(Some("x"), "own")
        );
        std::fs::write(&fork, &f).unwrap();
        // The parent claimed its first two records (captured), later all four (queued).
        let two = p.split_inclusive('\n').take(2).map(str::len).sum::<usize>() as u64;
        let claimed = ids_between(rule, &parent, (0, two)).unwrap();
        assert_eq!(claimed.len(), 2);
        let Claimed { block, later, .. } = claimed_spans(rule, &fork, (0, 0), &claimed).unwrap();
        let (bytes, lines, id) = block.unwrap();
        assert_eq!((lines, id.as_str(), later), (3, "b", None));
        assert_eq!(
            &f[..bytes as usize],
            f.split_inclusive('\n').take(3).collect::<String>()
        );
        let all = ids_between(rule, &parent, (0, p.len() as u64)).unwrap();
        let block = claimed_spans(rule, &fork, (0, 0), &all).unwrap().block;
        let (_, lines, id) = block.unwrap();
        assert_eq!(
            (lines, id.as_str()),
            (4, "c"),
            "a, b and c; not the fork's own x"
        );
        // From a cursor (after line 3): c is claimed.
        let at = f.split_inclusive('\n').take(3).map(str::len).sum::<usize>() as u64;
        let block = claimed_spans(rule, &fork, (at, 3), &all).unwrap().block;
        assert_eq!(block.map(|b| b.1), Some(4));
        // A parentUuid naming a claimed record is not that record.
        let own = f.len() as u64 - line(Some("x"), "own").len() as u64;
        assert_eq!(
            first_claimed(rule, &fork, (own, 4, f.len() as u64), &all).unwrap(),
            None
        );
        assert_eq!(
            first_claimed(rule, &fork, (0, 0, f.len() as u64), &claimed).unwrap(),
            Some((2, "a".to_string()))
        );
        // Nothing claimed first: no copy.
        let none = ids_between(rule, &fork, (own, f.len() as u64)).unwrap();
        assert_eq!(none.len(), 1);
        // A claimed record after records of its own: the block is empty, the part ends before it.
        let Claimed { block, later, .. } = claimed_spans(rule, &fork, (0, 0), &none).unwrap();
        assert_eq!(block, None);
        assert_eq!(later, Some((own, 4)));
    }

    /// A file that takes a session's record ids for text of its own claims none of its records, and
    /// the session's own records with those ids are not the file's: each is named as a conflict.
    #[test]
    fn a_record_with_a_claimed_id_and_other_text_is_not_the_claimed_one() {
        let cat = claude();
        let rule = cat.get("claude").unwrap();
        let d = tempfile::tempdir().unwrap();
        let planted = d.path().join("planted.jsonl");
        let real = d.path().join("real.jsonl");
        let p = format!(
            "{}{}",
            line(Some("a"), "a"),
            line(Some("b"), "not what b said")
        );
        std::fs::write(&planted, &p).unwrap();
        let r = format!("{}{}", line(Some("a"), "a"), line(Some("b"), "b"));
        std::fs::write(&real, &r).unwrap();
        let claimed = ids_between(rule, &planted, (0, p.len() as u64)).unwrap();
        let c = claimed_spans(rule, &real, (0, 0), &claimed).unwrap();
        let a = line(Some("a"), "a").len() as u64;
        assert_eq!(
            c.block,
            Some((a, 1, "a".to_string())),
            "a is the same record"
        );
        assert_eq!(c.later, None, "b is not claimed");
        assert_eq!(c.conflicts, vec![(2, "b".to_string())]);
        assert_eq!(
            first_claimed(rule, &real, (a, 1, r.len() as u64), &claimed).unwrap(),
            None
        );
        // The session id a copy changes is not its content, nor is the record's time.
        let need = content_need(rule);
        let copy = line(Some("b"), "b").replace(
            "\"type\"",
            "\"sessionId\":\"other\",\"timestamp\":\"2026-12-07T10:00:00Z\",\"type\"",
        );
        assert_eq!(
            content_of(need.as_ref(), copy.trim_end().as_bytes()),
            content_of(need.as_ref(), line(Some("b"), "b").trim_end().as_bytes())
        );
    }
}
