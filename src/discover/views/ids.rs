//! A view's captured prefix is known by its messages' ids, not its bytes (`sweep::view_cursor`): the
//! hash over the ids of its first N messages, `ids:sha256:…`, wherever their bytes now end.

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

#[cfg(test)]
mod tests {
    #[test]
    fn a_message_id_is_read_from_the_start_of_its_line() {
        assert_eq!(
            super::id_of(br#"{"almanac_id":"a\"b","x":1}"#).as_deref(),
            Some("a\"b")
        );
        assert_eq!(super::id_of(br#"{"almanac_view":{}}"#), None);
    }
}
