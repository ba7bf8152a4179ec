//! Cursor arithmetic over a transcript, streamed in fixed-size buffers: verify the captured prefix,
//! find where complete lines end, hash the new prefix. Cursors sit on newline boundaries only.

use sha2::{Digest, Sha256};
use std::io::{self, Read};

pub const EMPTY_HASH: &str =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

pub fn hex_digest(h: Sha256) -> String {
    format!("sha256:{:x}", h.finalize())
}

/// What one pass over a transcript found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// `sha256:` of bytes `[0, cursor)`, or None when the file is shorter than the cursor.
    pub hash_at_cursor: Option<String>,
    /// Complete lines after the cursor.
    pub new_lines: u64,
    /// Offset just past the last `\n` at or after the cursor (== cursor when there is none).
    pub complete_end: u64,
    /// `sha256:` of bytes `[0, complete_end)`.
    pub hash_at_end: String,
    pub bytes_read: u64,
    /// Chunk ends after the cursor (see `scan_chunked`): (offset after a newline, complete lines from the
    /// cursor to it, `sha256:` of `[0, offset)`). The last chunk ends at `complete_end` and is not listed.
    pub boundaries: Vec<(u64, u64, String)>,
}

/// Reads the transcript from the start: hashes `[0, cursor)`, then counts complete lines after it and
/// hashes up to the last complete line, in one pass and constant memory.
pub fn scan<R: Read>(r: R, cursor: u64) -> io::Result<Scan> {
    scan_with(r, cursor, true)
}

/// As `scan`; without `hash` nothing is hashed (a first capture in a dry run needs only where complete
/// lines end) and the hashes are reported as empty strings, except `hash_at_cursor` for cursor 0.
pub fn scan_with<R: Read>(r: R, cursor: u64, hash: bool) -> io::Result<Scan> {
    scan_chunked(r, cursor, hash, None)
}

/// As `scan_with`, also cutting the part after the cursor into chunks of at least `chunk_bytes` that each
/// end on a newline (a single longer line is a chunk of its own), in the same pass.
pub fn scan_chunked<R: Read>(
    r: R,
    cursor: u64,
    hash: bool,
    chunk_bytes: Option<u64>,
) -> io::Result<Scan> {
    let cut = match chunk_bytes {
        Some(b) => Cut::Bytes(b),
        None => Cut::None,
    };
    scan_lines(r, cursor, hash, cut, None)
}

/// Where a scan cuts the part after the cursor into chunks, each ending on a newline.
pub enum Cut<'a> {
    None,
    /// Chunks of at least this many bytes (a single longer line is a chunk of its own).
    Bytes(u64),
    /// After a line when this says so: it is handed each complete line after the cursor as `OnLine`
    /// is (its bytes, the offset past its newline, its number from the cursor).
    By(&'a mut dyn FnMut(&[u8], u64, u64) -> bool),
}

impl Cut<'_> {
    /// Whether a chunk ends after line `n` (from the cursor), whose bytes are `line` and which ends at
    /// `end`, the last chunk having ended at `last`.
    fn after(&mut self, line: &[u8], end: u64, n: u64, last: u64) -> bool {
        match self {
            Cut::None => false,
            Cut::Bytes(cb) => end - last >= *cb,
            Cut::By(f) => f(line, end, n),
        }
    }
}

/// Each complete line after the cursor as a scan finds it: its bytes as `util::lines::LineReader` gives
/// them (without the newline and a trailing `\r`; empty when longer than `MAX_LINE_BYTES`; a leading
/// BOM is the reader's to strip), the offset just past its newline, its number counted from the cursor
/// (1-based), and whether a chunk ends after it.
pub type OnLine<'a> = &'a mut dyn FnMut(&[u8], u64, u64, bool);

/// As `scan_chunked`, cutting chunks as `cut` says and handing each complete line after the cursor to
/// `on_line` in the same pass: what reads the lines need not read the file again.
pub fn scan_lines<R: Read>(
    mut r: R,
    cursor: u64,
    hash: bool,
    mut cut: Cut<'_>,
    mut on_line: Option<OnLine>,
) -> io::Result<Scan> {
    let mut carry = Carry::default();
    let mut boundaries = Vec::new();
    let mut last_boundary = cursor;
    // Under the allocator's fixed mmap threshold (src/main.rs): a buffer above it was a fresh mapping,
    // and its page faults, for every transcript a cold sweep scans. The thread's own, when free.
    let mut buf = crate::util::lines::ReadBuffer::new(64 * 1024);
    let mut hasher = Sha256::new();
    let mut pos: u64 = 0;
    let mut at_cursor: Option<Sha256> = (cursor == 0).then(Sha256::new);
    let mut at_end = Sha256::new();
    let mut complete_end = cursor;
    let mut new_lines = 0;
    while let Some(n) = read_some(&mut r, &mut buf)? {
        let mut chunk = &buf[..n];
        // Bytes before the cursor only feed the hash.
        if pos < cursor {
            let take = ((cursor - pos) as usize).min(chunk.len());
            if hash {
                hasher.update(&chunk[..take]);
            }
            pos += take as u64;
            chunk = &chunk[take..];
            if pos == cursor {
                at_cursor = Some(hasher.clone());
                at_end = hasher.clone();
            }
        }
        if chunk.is_empty() {
            continue;
        }
        // The lines' bytes are needed by whoever is handed them.
        let lines_wanted = on_line.is_some() || matches!(cut, Cut::By(_));
        match memchr::memrchr(b'\n', chunk) {
            Some(last) => {
                let mut hashed = 0;
                match (&mut cut, on_line.as_mut()) {
                    (Cut::None, None) => {
                        new_lines += memchr::memchr_iter(b'\n', chunk).count() as u64
                    }
                    (cut, mut each) => {
                        let mut start = 0;
                        for nl in memchr::memchr_iter(b'\n', chunk) {
                            new_lines += 1;
                            let end = pos + nl as u64 + 1;
                            let line = match lines_wanted {
                                true => carry.line(&chunk[start..nl]),
                                false => &[],
                            };
                            let boundary = cut.after(line, end, new_lines, last_boundary);
                            if boundary {
                                let mut h = String::new();
                                if hash {
                                    hasher.update(&chunk[hashed..=nl]);
                                    hashed = nl + 1;
                                    h = hex_digest(hasher.clone());
                                }
                                boundaries.push((end, new_lines, h));
                                last_boundary = end;
                            }
                            if let Some(f) = each.as_mut() {
                                f(line, end, new_lines, boundary);
                            }
                            start = nl + 1;
                        }
                    }
                }
                if lines_wanted {
                    carry.keep(&chunk[last + 1..]);
                }
                if hash {
                    hasher.update(&chunk[hashed..=last]);
                    at_end = hasher.clone();
                    hasher.update(&chunk[last + 1..]);
                }
                complete_end = pos + last as u64 + 1;
            }
            None => {
                if lines_wanted {
                    carry.keep(chunk);
                }
                if hash {
                    hasher.update(chunk)
                }
            }
        }
        pos += chunk.len() as u64;
    }
    if cursor == 0 && complete_end == 0 {
        at_end = Sha256::new();
    }
    // Without hashing, only cursor 0 has a hash to report (that of nothing).
    let nothing = |_| match cursor {
        0 => EMPTY_HASH.to_string(),
        _ => String::new(),
    };
    let (hash_at_cursor, hash_at_end) = match hash {
        true => (at_cursor.map(hex_digest), hex_digest(at_end)),
        false => (at_cursor.map(nothing), String::new()),
    };
    Ok(Scan {
        hash_at_cursor,
        new_lines,
        complete_end,
        hash_at_end,
        bytes_read: pos,
        boundaries: trim(boundaries, complete_end),
    })
}

/// The next read into `buf`, retried when interrupted; None at the end.
fn read_some<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        match r.read(buf) {
            Ok(0) => return Ok(None),
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A line begun in an earlier buffer: its bytes (while they fit `MAX_LINE_BYTES`; past that, the
/// compact copy `util::salvage` makes of a line too long to keep) and its length.
#[derive(Default)]
struct Carry {
    bytes: Vec<u8>,
    len: usize,
    big: Option<crate::util::salvage::Compactor>,
}

impl Carry {
    /// The bytes of a line not ended in this buffer.
    fn keep(&mut self, tail: &[u8]) {
        if self.len == 0 {
            self.bytes.clear();
            self.big = None;
        }
        self.len += tail.len();
        if let Some(c) = &mut self.big {
            return c.push(tail);
        }
        if self.len < crate::util::lines::MAX_LINE_BYTES {
            return self.bytes.extend_from_slice(tail);
        }
        let mut c = crate::util::salvage::Compactor::default();
        c.push(&self.bytes);
        c.push(tail);
        self.bytes.clear();
        self.big = Some(c);
    }

    /// The line that ends with `last` (its bytes in this buffer, before the newline), as the line
    /// reader gives it; what was carried is spent.
    fn line<'b>(&'b mut self, last: &'b [u8]) -> &'b [u8] {
        let carried = std::mem::take(&mut self.len);
        // Longer than the reader keeps, its newline counted: its compact copy, as the reader's.
        if carried + last.len() >= crate::util::lines::MAX_LINE_BYTES {
            let mut c = match (self.big.take(), carried) {
                (Some(c), _) => c,
                (None, 0) => Default::default(),
                (None, _) => {
                    let mut c = crate::util::salvage::Compactor::default();
                    c.push(&self.bytes);
                    c
                }
            };
            c.push(crate::util::lines::without_cr(last));
            self.bytes = c.finish().unwrap_or_default();
            return &self.bytes;
        }
        if carried == 0 {
            return crate::util::lines::without_cr(last);
        }
        self.bytes.extend_from_slice(last);
        crate::util::lines::without_cr(&self.bytes)
    }
}

/// The last chunk ends at `complete_end`; a boundary there is not a separate chunk.
fn trim(mut b: Vec<(u64, u64, String)>, complete_end: u64) -> Vec<(u64, u64, String)> {
    if b.last().is_some_and(|l| l.0 >= complete_end) {
        b.pop();
    }
    b
}

/// The `capture_since` baseline for a transcript seen for the first time: the cursor sits before the
/// first record whose timestamp is at or after `since`; lines before it (with or without timestamps)
/// count as captured. No such record: everything complete counts as captured (never backfill).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    pub bytes: u64,
    pub lines: u64,
    pub bytes_read: u64,
}

pub fn baseline<R: Read>(
    r: R,
    since: chrono::DateTime<chrono::Utc>,
    timestamp: impl Fn(&serde_json::Value) -> Option<chrono::DateTime<chrono::Utc>>,
) -> io::Result<Baseline> {
    let mut reader = crate::util::lines::LineReader::new(r);
    let mut lines = 0;
    let mut end = 0;
    while let Some(line) = reader.next_line()? {
        if !line.terminated {
            break;
        }
        if let Some(ts) = crate::util::lines::parse_object(line.bytes).and_then(|v| timestamp(&v)) {
            if ts >= since {
                return Ok(Baseline {
                    bytes: line.start,
                    lines: line.number - 1,
                    bytes_read: reader.bytes_read(),
                });
            }
        }
        lines = line.number;
        end = line.end;
    }
    Ok(Baseline {
        bytes: end,
        lines,
        bytes_read: reader.bytes_read(),
    })
}

/// Hash of the first `len` bytes, streamed.
pub fn prefix_hash<R: Read>(r: R, len: u64) -> io::Result<Option<String>> {
    let mut h = Sha256::new();
    let copied = io::copy(&mut r.take(len), &mut h)?;
    Ok((copied == len).then(|| hex_digest(h)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(b: &[u8]) -> String {
        let mut h = Sha256::new();
        h.update(b);
        hex_digest(h)
    }

    #[test]
    fn scan_from_zero_and_from_a_cursor() {
        let data = b"a\nbb\nccc\npartial";
        let s = scan(&data[..], 0).unwrap();
        assert_eq!(s.hash_at_cursor.as_deref(), Some(EMPTY_HASH));
        assert_eq!((s.new_lines, s.complete_end), (3, 9));
        assert_eq!(s.hash_at_end, sha(b"a\nbb\nccc\n"));
        let s = scan(&data[..], 2).unwrap();
        assert_eq!(s.hash_at_cursor, Some(sha(b"a\n")));
        assert_eq!((s.new_lines, s.complete_end), (2, 9));
        assert_eq!(s.hash_at_end, sha(b"a\nbb\nccc\n"));
        // Nothing new after the cursor: the end stays at the cursor.
        let s = scan(&b"a\nxx"[..], 2).unwrap();
        assert_eq!((s.new_lines, s.complete_end), (0, 2));
        assert_eq!(s.hash_at_end, sha(b"a\n"));
        // Shorter than the cursor: no prefix hash.
        assert_eq!(scan(&b"a"[..], 2).unwrap().hash_at_cursor, None);
        assert_eq!(scan(&b""[..], 0).unwrap().hash_at_end, EMPTY_HASH);
    }

    /// Scans reuse their thread's read buffer: one after a longer file's, and one run from inside
    /// another's line callback (which then reads into a buffer of its own), see only their own bytes.
    #[test]
    fn a_reused_read_buffer_holds_nothing_of_the_last_scan() {
        let lines = |s: &[u8]| {
            let mut out = Vec::new();
            scan_lines(
                s,
                0,
                true,
                Cut::None,
                Some(&mut |l, end, n, _| out.push((l.to_vec(), end, n))),
            )
            .map(|scan| (scan.new_lines, scan.complete_end, scan.hash_at_end))
            .map(|scan| (scan, out))
            .unwrap()
        };
        let long: Vec<u8> = (0..20_000)
            .flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes())
            .collect();
        let short = b"{\"a\":1}\npartial";
        let fresh = lines(short);
        assert_eq!(fresh.0, (1, 8, sha(b"{\"a\":1}\n")));
        assert_eq!(fresh.1, vec![(b"{\"a\":1}".to_vec(), 8, 1)]);
        lines(&long);
        assert_eq!(lines(short), fresh);
        // Nested: the inner scan runs while the outer one holds the thread's buffer.
        let mut inner = Vec::new();
        let outer = scan_lines(
            &long[..],
            0,
            false,
            Cut::None,
            Some(&mut |_, _, n, _| {
                if n % 5000 == 0 {
                    inner.push(lines(short));
                }
            }),
        )
        .unwrap();
        assert_eq!(outer.new_lines, 20_000);
        assert_eq!(inner, vec![fresh.clone(); 4]);
        assert_eq!(lines(short), fresh);
    }

    #[test]
    fn scan_across_buffer_boundaries() {
        let mut data = Vec::new();
        for i in 0..100_000 {
            data.extend(format!("{{\"n\":{i}}}\n").as_bytes());
        }
        let cursor = data
            .iter()
            .take(300_000)
            .rposition(|b| *b == b'\n')
            .unwrap() as u64
            + 1;
        let s = scan(&data[..], cursor).unwrap();
        assert_eq!(s.hash_at_cursor, Some(sha(&data[..cursor as usize])));
        assert_eq!(s.complete_end, data.len() as u64);
        assert_eq!(s.hash_at_end, sha(&data));
        let before = data[..cursor as usize]
            .iter()
            .filter(|b| **b == b'\n')
            .count() as u64;
        assert_eq!(s.new_lines, 100_000 - before);
        assert_eq!(
            prefix_hash(&data[..], cursor).unwrap(),
            Some(sha(&data[..cursor as usize]))
        );
    }

    #[test]
    fn chunks_end_on_newlines_with_their_hashes() {
        let data = b"aaaa\nbb\ncccccccc\nd\ne\npartial";
        let s = scan_chunked(&data[..], 0, true, Some(6)).unwrap();
        // a\n (5) + bb\n (8) >= 6 -> boundary at 8; cccccccc\n (17): one long line -> 17; d\ne\n end at 21.
        let ends: Vec<(u64, u64)> = s.boundaries.iter().map(|b| (b.0, b.1)).collect();
        assert_eq!(ends, vec![(8, 2), (17, 3)]);
        assert_eq!(s.boundaries[0].2, sha(b"aaaa\nbb\n"));
        assert_eq!(s.boundaries[1].2, sha(b"aaaa\nbb\ncccccccc\n"));
        assert_eq!((s.complete_end, s.new_lines), (21, 5));
        // From a cursor, counted from there.
        let s = scan_chunked(&data[..], 8, true, Some(6)).unwrap();
        assert_eq!(
            s.boundaries.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>(),
            vec![(17, 1)]
        );
        // Small parts make no boundary.
        assert!(scan_chunked(&data[..], 0, true, Some(1000))
            .unwrap()
            .boundaries
            .is_empty());
    }

    /// A chunk ends where the callback says, after the line it was handed, with the hash up to there.
    #[test]
    fn a_cut_by_callback_ends_chunks_after_the_lines_it_names() {
        let data = b"aaaa\nbb\ncccccccc\nd\ne\npartial";
        let mut seen = Vec::new();
        let mut cut_after = |l: &[u8], end: u64, n: u64| {
            seen.push((String::from_utf8(l.to_vec()).unwrap(), end, n));
            l == b"bb" || l == b"d"
        };
        let s = scan_lines(&data[..], 5, true, Cut::By(&mut cut_after), None).unwrap();
        let ends: Vec<(u64, u64)> = s.boundaries.iter().map(|b| (b.0, b.1)).collect();
        assert_eq!(ends, vec![(8, 1), (19, 3)]);
        assert_eq!(s.boundaries[0].2, sha(b"aaaa\nbb\n"));
        assert_eq!(s.boundaries[1].2, sha(b"aaaa\nbb\ncccccccc\nd\n"));
        assert_eq!((s.complete_end, s.new_lines), (21, 4));
        let want = [
            ("bb", 8, 1),
            ("cccccccc", 17, 2),
            ("d", 19, 3),
            ("e", 21, 4),
        ];
        let want: Vec<(String, u64, u64)> = want
            .iter()
            .map(|(l, e, n)| (l.to_string(), *e, *n))
            .collect();
        assert_eq!(seen, want, "every complete line after the cursor, once");
    }

    #[test]
    fn baseline_starts_at_the_first_record_after_activation() {
        let since = chrono::DateTime::parse_from_rfc3339("2026-05-11T11:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let ts = |v: &serde_json::Value| {
            v.get("timestamp")
                .and_then(|t| t.as_str())
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                .map(|d| d.with_timezone(&chrono::Utc))
        };
        let old = "{\"timestamp\":\"2026-05-11T10:00:00Z\"}\n";
        let notime = "{\"type\":\"x\"}\n";
        let new = "{\"timestamp\":\"2026-05-11T11:05:00Z\"}\n";
        let data = format!("{old}{notime}{new}");
        let b = baseline(data.as_bytes(), since, ts).unwrap();
        assert_eq!((b.bytes, b.lines), ((old.len() + notime.len()) as u64, 2));
        // No timestamp at or after activation: everything complete is captured.
        let data = format!("{old}{notime}partial");
        let b = baseline(data.as_bytes(), since, ts).unwrap();
        assert_eq!((b.bytes, b.lines), ((old.len() + notime.len()) as u64, 2));
        let b = baseline(new.as_bytes(), since, ts).unwrap();
        assert_eq!((b.bytes, b.lines), (0, 0));
    }
}
