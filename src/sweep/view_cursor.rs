//! The cursor in a view (`discover::views`): a view is made again whenever its store changes, and a
//! captured message may change in place (a reply that was still streaming), so its captured prefix is
//! not known by its bytes but by its message count and a hash over the ids of those messages
//! (`ids:sha256:…`). A cursor whose ids still lead the view sits after that many lines of it now,
//! whatever their bytes; otherwise the capture recovers from the last captured id, as a rewritten
//! JSONL prefix does.

use super::range::{CursorAt, RangeOutcome};
pub use crate::discover::views::ids::{hashes, IDS_PREFIX};
use std::path::Path;

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
    }
}
