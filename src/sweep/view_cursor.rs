//! The cursor in a view (`discover::views`): a view is made again whenever its store changes, and a
//! captured message may change in place (a reply that was still streaming), so its captured prefix is
//! not known by its bytes but by its message count and a hash over the ids of those messages
//! (`ids:sha256:…`). A cursor whose ids still lead the view sits after that many lines of it now,
//! whatever their bytes; otherwise the capture recovers from the last captured id, as a rewritten
//! JSONL prefix does.

use super::range::{CursorAt, RangeOutcome};
use crate::discover;
use crate::rules::views::VIEW_ID;
use sha2::{Digest, Sha256};
use std::io::BufRead;
use std::path::Path;

pub const IDS_PREFIX: &str = "ids:";

/// A message line's id: views write it first (`{"almanac_id":"…",`).
fn id_of(line: &[u8]) -> Option<String> {
    let rest = line
        .strip_prefix(b"{\"")?
        .strip_prefix(VIEW_ID.as_bytes())?;
    let rest = rest.strip_prefix(b"\":")?;
    let mut de = serde_json::Deserializer::from_slice(rest).into_iter::<String>();
    de.next()?.ok()
}

/// For each line count in `at` (ascending), the bytes those lines take and the ids hash of the messages
/// among them; None for a count past the view's end.
pub fn hashes(path: &Path, at: &[u64]) -> std::io::Result<Vec<Option<(u64, String)>>> {
    let mut r = std::io::BufReader::new(discover::open_transcript(path)?);
    let mut h = Sha256::new();
    let (mut lines, mut bytes) = (0u64, 0u64);
    let mut out = Vec::with_capacity(at.len());
    let mut want = at.iter().peekable();
    let mut buf = Vec::new();
    loop {
        while want.peek().is_some_and(|n| **n == lines) {
            want.next();
            out.push(Some((bytes, format!("{IDS_PREFIX}{}", hex(&h)))));
        }
        if want.peek().is_none() {
            break;
        }
        buf.clear();
        let n = r.read_until(b'\n', &mut buf)?;
        if n == 0 || buf.last() != Some(&b'\n') {
            break;
        }
        lines += 1;
        bytes += n as u64;
        if let Some(id) = id_of(&buf) {
            h.update(id.as_bytes());
            h.update(b"\n");
        }
    }
    out.resize(at.len(), None);
    Ok(out)
}

fn hex(h: &Sha256) -> String {
    format!("sha256:{:x}", h.clone().finalize())
}

/// Where the captured cursor of a view is now: after the same number of lines when their ids still
/// hash to the captured hash; None when they do not (or the view is shorter).
pub fn place(path: &Path, lines: u64, hash: &str) -> std::io::Result<Option<CursorAt>> {
    let found = hashes(path, &[lines])?.pop().flatten();
    Ok(found.and_then(|(bytes, ids)| {
        (ids == hash).then_some(CursorAt {
            bytes,
            lines,
            hash: ids,
        })
    }))
}

/// The outcome with every prefix hash in it made an ids hash (what the ledger keeps for a view).
pub fn to_ids(path: &Path, outcome: RangeOutcome) -> Result<RangeOutcome, String> {
    let err = |e: std::io::Error| e.to_string();
    Ok(match outcome {
        RangeOutcome::Capture(mut r) => {
            let mut at: Vec<u64> = vec![r.from_line_before];
            at.extend(r.boundaries.iter().map(|b| r.from_line_before + b.1));
            at.push(r.to_line);
            let hs = hashes(path, &at).map_err(err)?;
            let get = |i: usize| hs.get(i).cloned().flatten().map(|x| x.1);
            let Some(first) = get(0) else {
                return Ok(RangeOutcome::PrefixMismatch(
                    "the view changed while being read".into(),
                ));
            };
            r.hash_at_cursor = first;
            for (i, b) in r.boundaries.iter_mut().enumerate() {
                b.2 = get(i + 1).unwrap_or_default();
            }
            r.hash_at_end = get(hs.len() - 1).unwrap_or_default();
            if let Some(rec) = r.recovered.as_mut() {
                rec.at.hash = r.hash_at_cursor.clone();
            }
            RangeOutcome::Capture(r)
        }
        RangeOutcome::Unchanged {
            baseline,
            copied,
            recovered,
        } => {
            let fix = |c: Option<CursorAt>| -> Result<Option<CursorAt>, String> {
                let Some(mut c) = c else { return Ok(None) };
                let h = hashes(path, &[c.lines]).map_err(err)?.pop().flatten();
                c.hash = h.map(|x| x.1).unwrap_or_default();
                Ok(Some(c))
            };
            let recovered = match recovered {
                Some(mut rec) => {
                    rec.at = fix(Some(rec.at))?.expect("given");
                    Some(rec)
                }
                None => None,
            };
            RangeOutcome::Unchanged {
                baseline: fix(baseline)?,
                copied,
                recovered,
            }
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_cursor_survives_a_message_finished_in_place() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("v.jsonl");
        std::fs::write(
            &p,
            "{\"almanac_view\":{}}\n{\"almanac_id\":\"m1\",\"t\":\"hi\"}\n{\"almanac_id\":\"m2\",\"t\":\"par\"}\n",
        )
        .unwrap();
        let at = hashes(&p, &[3]).unwrap()[0].clone().unwrap();
        std::fs::write(
            &p,
            "{\"almanac_view\":{\"n\":2}}\n{\"almanac_id\":\"m1\",\"t\":\"hi\"}\n{\"almanac_id\":\"m2\",\"t\":\"partial, finished\"}\n{\"almanac_id\":\"m3\"}\n",
        )
        .unwrap();
        let c = place(&p, 3, &at.1).unwrap().expect("same ids");
        assert_eq!(c.lines, 3);
        assert!(c.bytes > at.0, "the bytes moved with the longer message");
        std::fs::write(
            &p,
            "{\"almanac_view\":{}}\n{\"almanac_id\":\"m1\"}\n{\"almanac_id\":\"mX\"}\n",
        )
        .unwrap();
        assert!(
            place(&p, 3, &at.1).unwrap().is_none(),
            "a different id is a mismatch"
        );
        assert_eq!(
            id_of(br#"{"almanac_id":"a\"b","x":1}"#).as_deref(),
            Some("a\"b")
        );
        assert_eq!(id_of(br#"{"almanac_view":{}}"#), None);
    }
}
