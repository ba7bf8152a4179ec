//! A transcript's records by their stable ids (a rule set's `record_id`, e.g. Claude Code's `$.uuid`,
//! which a fork or an old-style resume copies unchanged): which ids a session claimed (captured or
//! queued), and where another transcript's copy of them ends. What the sweep's overlap check and the
//! worker's check before a run share (docs/state.md, "Identity and overlap").

use crate::rules::needs::{Need, Needs};
use crate::rules::pruned::parse_pruned;
use crate::rules::RuleSet;
use crate::util::lines::LineReader;
use std::collections::HashSet;
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

/// The ids of the records in bytes `[from, to)` of `path` (`from` on a line's start): what a session
/// claimed there.
pub fn ids_between(
    rule: &RuleSet,
    path: &Path,
    (from, to): (u64, u64),
) -> io::Result<HashSet<String>> {
    let mut out = HashSet::new();
    let Some(need) = need(rule) else {
        return Ok(out);
    };
    each_line(path, (from, to), 1, |bytes, _, _| {
        out.extend(id_of(rule, &need, bytes));
        true
    })?;
    Ok(out)
}

/// How the records of `path` from byte `from` (after line `lines_before`) stand against `claimed`: the
/// cursor after the block of claimed records right there (records without an id go along), with the
/// last claimed id; and, after that block, where the first record with a claimed id begins (its byte,
/// and the lines before it).
pub type Claimed = (Option<(u64, u64, String)>, Option<(u64, u64)>);

pub fn claimed_spans(
    rule: &RuleSet,
    path: &Path,
    (from, lines_before): (u64, u64),
    claimed: &HashSet<String>,
) -> io::Result<Claimed> {
    let Some(need) = need(rule) else {
        return Ok((None, None));
    };
    let (mut block, mut later) = (None, None);
    let (mut in_block, mut start) = (true, from);
    each_line(path, (from, u64::MAX), lines_before + 1, |bytes, end, n| {
        let id = id_of(rule, &need, bytes);
        let is_claimed = id.as_ref().is_some_and(|i| claimed.contains(i));
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
    Ok((block, later))
}

/// The first record of bytes `[from, to)` of `path` whose id is one of `claimed`, as (its line, id).
pub fn first_claimed(
    rule: &RuleSet,
    path: &Path,
    (from, lines_before, to): (u64, u64, u64),
    claimed: &HashSet<String>,
) -> io::Result<Option<(u64, String)>> {
    let Some(need) = need(rule) else {
        return Ok(None);
    };
    let mut found = None;
    each_line(path, (from, to), lines_before + 1, |bytes, _, n| {
        found = id_of(rule, &need, bytes)
            .filter(|id| claimed.contains(id))
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
        let (block, later) = claimed_spans(rule, &fork, (0, 0), &claimed).unwrap();
        let (bytes, lines, id) = block.unwrap();
        assert_eq!((lines, id.as_str(), later), (3, "b", None));
        assert_eq!(
            &f[..bytes as usize],
            f.split_inclusive('\n').take(3).collect::<String>()
        );
        let all = ids_between(rule, &parent, (0, p.len() as u64)).unwrap();
        let (block, _) = claimed_spans(rule, &fork, (0, 0), &all).unwrap();
        let (_, lines, id) = block.unwrap();
        assert_eq!(
            (lines, id.as_str()),
            (4, "c"),
            "a, b and c; not the fork's own x"
        );
        // From a cursor (after line 3): c is claimed.
        let at = f.split_inclusive('\n').take(3).map(str::len).sum::<usize>() as u64;
        let (block, _) = claimed_spans(rule, &fork, (at, 3), &all).unwrap();
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
        let none = HashSet::from(["x".to_string()]);
        // A claimed record after records of its own: the block is empty, the part ends before it.
        let (block, later) = claimed_spans(rule, &fork, (0, 0), &none).unwrap();
        assert_eq!(block, None);
        assert_eq!(later, Some((own, 4)));
    }
}
