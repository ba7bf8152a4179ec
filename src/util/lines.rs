//! The one JSONL line reader. Splits at the byte level on `\n` (never decodes the whole file), strips a
//! UTF-8 BOM on line 1 and a trailing `\r`, and reports whether each line was terminated: an unterminated
//! last line means the writer may be mid-append, so it never counts as a complete line.

use std::io::{self, Read};

pub struct LineReader<R: Read> {
    inner: Growing<R>,
    buf: Vec<u8>,
    next_start: u64,
    line_no: u64,
    bytes_read: u64,
    max_line: usize,
    /// `next_line_salvaged`'s copy of an oversized line.
    salvaged: Vec<u8>,
}

/// Lines longer than this are skipped, not held: memory stays bounded whatever a transcript holds.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// A line without its trailing `\r` (the line reader gives lines so; so must what stands in for it).
pub fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A reader's first line without a leading UTF-8 BOM.
pub fn without_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

pub struct LineRef<'a> {
    /// 1-based line number.
    pub number: u64,
    /// Byte offset of the line's first byte.
    pub start: u64,
    /// Byte offset just past the line's `\n` (or past its last byte when unterminated).
    pub end: u64,
    /// Content without the `\n`, a trailing `\r` or (line 1) a BOM. Empty for an oversized line.
    pub bytes: &'a [u8],
    pub terminated: bool,
    /// The line was longer than the reader's limit: it was read through but not kept.
    pub oversized: bool,
}

impl<R: Read> LineReader<R> {
    pub fn new(inner: R) -> Self {
        Self::with_max_line(inner, MAX_LINE_BYTES)
    }

    pub fn with_max_line(inner: R, max_line: usize) -> Self {
        LineReader {
            inner: Growing::new(inner),
            buf: Vec::new(),
            next_start: 0,
            line_no: 0,
            bytes_read: 0,
            max_line,
            salvaged: Vec::new(),
        }
    }

    /// Reads up to and including the next `\n`, keeping at most `max_line` bytes in `buf`.
    fn read_line_bounded(&mut self) -> io::Result<(usize, bool)> {
        let mut total = 0;
        let mut oversized = false;
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok((total, oversized));
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !oversized {
                if self.buf.len() + take > self.max_line {
                    oversized = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            if oversized && done {
                self.buf.push(b'\n');
            }
            self.inner.consume(take);
            total += take;
            if done {
                return Ok((total, oversized));
            }
        }
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// As `next_line`, except that a line longer than the limit is not only skipped: `stream` is given a
    /// reader over its bytes (without the newline, a trailing `\r` or a leading BOM kept as they are)
    /// as they are read, and what it returns comes back with the line. It need not read it all; the
    /// rest is read through. Memory stays bounded by what `stream` keeps.
    pub fn next_line_streaming<T>(
        &mut self,
        stream: impl FnOnce(&mut dyn Read) -> T,
    ) -> io::Result<Option<(LineRef<'_>, Option<T>)>> {
        self.buf.clear();
        // Up to the limit as `read_line_bounded` reads, then the rest through `stream`.
        let mut total = 0;
        let mut done = false;
        while !done && self.buf.len() <= self.max_line {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break;
            }
            let (take, nl) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            self.buf.extend_from_slice(&chunk[..take]);
            self.inner.consume(take);
            total += take;
            done = nl;
        }
        let content_len = self.buf.len() - usize::from(done);
        if content_len <= self.max_line {
            // Not oversized: the line as `next_line` gives it.
            if total == 0 {
                return Ok(None);
            }
            return Ok(self.finish_line(total).map(|l| (l, None)));
        }
        let prefix = std::mem::take(&mut self.buf);
        let bom = if self.line_no == 0 && prefix.starts_with(b"\xEF\xBB\xBF") {
            3
        } else {
            0
        };
        let mut rest = LineRest {
            prefix: &prefix[..content_len],
            at: bom,
            inner: &mut self.inner,
            read: 0,
            // The newline already read ends the line.
            ended: done,
        };
        let out = stream(&mut rest);
        io::copy(&mut rest, &mut io::sink())?;
        let (read, ended) = (rest.read, rest.ended);
        self.buf = prefix;
        self.buf.clear();
        total += read;
        if ended {
            self.buf.push(b'\n');
        }
        self.bytes_read += total as u64;
        self.line_no += 1;
        let start = self.next_start;
        self.next_start += total as u64;
        Ok(Some((
            LineRef {
                number: self.line_no,
                start,
                end: self.next_start,
                bytes: &[],
                terminated: ended,
                oversized: true,
            },
            Some(out),
        )))
    }

    /// The line of `n` bytes now in `buf` (not oversized), counted.
    fn finish_line(&mut self, n: usize) -> Option<LineRef<'_>> {
        self.bytes_read += n as u64;
        self.line_no += 1;
        let start = self.next_start;
        self.next_start += n as u64;
        let terminated = self.buf.last() == Some(&b'\n');
        let mut content: &[u8] = &self.buf;
        if terminated {
            content = &content[..content.len() - 1];
        }
        content = without_cr(content);
        if self.line_no == 1 {
            content = without_bom(content);
        }
        Some(LineRef {
            number: self.line_no,
            start,
            end: self.next_start,
            bytes: content,
            terminated,
            oversized: false,
        })
    }

    /// As `next_line`, except that a line over the limit is read for what it says: its bytes are the
    /// compact copy `salvage` makes of it (long strings cut, images named), and `oversized` is still
    /// set. Empty when it is not JSON. What reads records for their text uses this: a prompt with
    /// pasted screenshots is still a prompt.
    pub fn next_line_salvaged(&mut self) -> io::Result<Option<LineRef<'_>>> {
        let found = self.next_line_streaming(super::salvage::salvage)?;
        let Some((l, copy)) = found else {
            return Ok(None);
        };
        let (number, start, end, terminated, oversized) =
            (l.number, l.start, l.end, l.terminated, l.oversized);
        let bytes: &[u8] = match copy {
            Some(copy) => {
                self.salvaged = copy.unwrap_or_default();
                &self.salvaged
            }
            None => {
                let mut content: &[u8] = &self.buf;
                if terminated {
                    content = &content[..content.len() - 1];
                }
                content = without_cr(content);
                if number == 1 {
                    content = without_bom(content);
                }
                content
            }
        };
        Ok(Some(LineRef {
            number,
            start,
            end,
            bytes,
            terminated,
            oversized,
        }))
    }

    pub fn next_line(&mut self) -> io::Result<Option<LineRef<'_>>> {
        self.buf.clear();
        let (n, oversized) = self.read_line_bounded()?;
        if n == 0 {
            return Ok(None);
        }
        if oversized {
            self.bytes_read += n as u64;
            self.line_no += 1;
            let start = self.next_start;
            self.next_start += n as u64;
            return Ok(Some(LineRef {
                number: self.line_no,
                start,
                end: self.next_start,
                bytes: &[],
                terminated: self.buf.last() == Some(&b'\n'),
                oversized: true,
            }));
        }
        Ok(self.finish_line(n))
    }
}

thread_local! {
    static READ_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A read buffer of `len` bytes for a whole-file scan, the thread's own when it is free: a cold sweep
/// scans thousands of transcripts, and zeroing a new 64 KiB buffer for each was a pass over 64 KiB
/// per file (1 GB at 10k sessions with subagents). It holds what the thread's last scan read; a scan
/// uses only what its own reads fill. Handed back to the thread when dropped.
pub struct ReadBuffer(Vec<u8>);

impl ReadBuffer {
    pub fn new(len: usize) -> ReadBuffer {
        let mut b = READ_BUFFER.take();
        if b.len() != len {
            b = vec![0; len];
        }
        ReadBuffer(b)
    }
}

impl std::ops::Deref for ReadBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for ReadBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        READ_BUFFER.set(std::mem::take(&mut self.0));
    }
}

/// The first read asks for this much; each later one for twice the last, up to `READ_MAX`.
const READ_FIRST: usize = 8 * 1024;
const READ_MAX: usize = 64 * 1024;

/// The bytes of an oversized line: what `next_line_streaming` read before it knew, then the rest up to
/// (not including) the newline, which it consumes.
struct LineRest<'a, R: Read> {
    prefix: &'a [u8],
    at: usize,
    inner: &'a mut Growing<R>,
    /// Bytes consumed from `inner` (the newline included).
    read: usize,
    ended: bool,
}

impl<R: Read> Read for LineRest<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at < self.prefix.len() {
            let n = out.len().min(self.prefix.len() - self.at);
            out[..n].copy_from_slice(&self.prefix[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        if self.ended {
            return Ok(0);
        }
        let chunk = self.inner.fill_buf()?;
        if chunk.is_empty() {
            return Ok(0);
        }
        let nl = memchr::memchr(b'\n', chunk);
        let n = nl.unwrap_or(chunk.len()).min(out.len());
        out[..n].copy_from_slice(&chunk[..n]);
        let mut consumed = n;
        // Everything before the newline is given: the newline ends the line.
        if nl == Some(n) {
            self.ended = true;
            consumed += 1;
        }
        self.inner.consume(consumed);
        self.read += consumed;
        Ok(n)
    }
}

/// A read buffer that starts small and grows: a head scan settled by a file's first records (most of
/// them) reads 8 KiB, not 64 KiB, of each of thousands of transcripts; a whole-file read soon asks
/// for 64 KiB at a time. Under glibc's mmap threshold (`main.rs`), so it is heap memory.
struct Growing<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
}

impl<R: Read> Growing<R> {
    fn new(inner: R) -> Self {
        Growing {
            inner,
            buf: Vec::new(),
            pos: 0,
            filled: 0,
        }
    }

    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.filled {
            let want = match self.buf.len() {
                0 => READ_FIRST,
                n => (2 * n).min(READ_MAX),
            };
            self.buf.resize(want, 0);
            self.filled = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        Ok(&self.buf[self.pos..self.filled])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.filled);
    }
}

/// Parses one JSONL line into a JSON object. Blank lines, invalid JSON (including invalid UTF-8) and
/// non-object values (arrays, strings, numbers) yield `None`; the caller counts them and moves on. A lone
/// surrogate escape (`\ud83d` without its pair: Node's `JSON.stringify` writes one for a string cut
/// inside a surrogate pair, and serde_json refuses it) is read as U+FFFD.
pub fn parse_object(bytes: &[u8]) -> Option<serde_json::Value> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let parsed = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Err(_) if memchr::memmem::find(bytes, b"\\u").is_some() => {
            serde_json::from_slice(&lone_surrogates_replaced(bytes)?)
        }
        parsed => parsed,
    };
    match parsed {
        Ok(v @ serde_json::Value::Object(_)) => Some(v),
        _ => None,
    }
}

/// `bytes` with every `\uD800`-`\uDFFF` escape that is not half of a pair written as `\ufffd`; None
/// when there is none.
fn lone_surrogates_replaced(bytes: &[u8]) -> Option<Vec<u8>> {
    let unit = |at: usize| -> Option<u32> {
        let h = bytes.get(at..at + 6)?;
        if &h[..2] != b"\\u" {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(&h[2..]).ok()?, 16).ok()
    };
    let (mut out, mut copied, mut i) = (Vec::new(), 0, 0);
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF)
                if unit(i + 6).is_some_and(|lo| (0xDC00..0xE000).contains(&lo)) =>
            {
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.extend_from_slice(&bytes[copied..i]);
                out.extend_from_slice(b"\\ufffd");
                i += 6;
                copied = i;
            }
            // Any other escape, `\\` included: stepped over whole.
            _ => i += 2,
        }
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(&bytes[copied..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8]) -> Vec<(u64, u64, u64, Vec<u8>, bool)> {
        let mut r = LineReader::new(input);
        let mut out = vec![];
        while let Some(l) = r.next_line().unwrap() {
            out.push((l.number, l.start, l.end, l.bytes.to_vec(), l.terminated));
        }
        out
    }

    #[test]
    fn a_lone_surrogate_is_read_as_a_replacement_character() {
        // As Node writes a string cut inside a surrogate pair; a pair and an escaped backslash stay.
        let v = parse_object(
            br#"{"a":"cut \ud83d","b":"ok \ud83d\ude00","c":"\\ud83d","d":"\udc00x"}"#,
        )
        .expect("read");
        assert_eq!(v["a"], "cut \u{FFFD}");
        assert_eq!(v["b"], "ok 😀");
        assert_eq!(v["c"], "\\ud83d");
        assert_eq!(v["d"], "\u{FFFD}x");
        assert!(parse_object(br#"{"a":"\ud83d"#).is_none(), "still not JSON");
    }

    #[test]
    fn bom_crlf_and_partial_tail() {
        let lines = collect(b"\xEF\xBB\xBF{\"a\":1}\r\n\n{\"b\"");
        assert_eq!(lines[0], (1, 0, 12, b"{\"a\":1}".to_vec(), true));
        assert_eq!(lines[1], (2, 12, 13, b"".to_vec(), true));
        assert_eq!(lines[2], (3, 13, 17, b"{\"b\"".to_vec(), false));
    }

    #[test]
    fn an_oversized_line_is_streamed_whole_and_the_next_one_read_as_usual() {
        let mut input = b"{\"a\":1}\n".to_vec();
        let long: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        input.extend(&long);
        input.extend(b"\n{\"b\":2}\nlast");
        let mut r = LineReader::with_max_line(&input[..], 100);
        let seen = |r: &mut dyn Read| {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            v
        };
        let (first, got) = r.next_line_streaming(seen).unwrap().unwrap();
        assert!(!first.oversized && first.bytes == b"{\"a\":1}" && got.is_none());
        let (big, got) = r.next_line_streaming(seen).unwrap().unwrap();
        assert!(big.oversized && big.terminated);
        assert_eq!((big.number, big.start, big.end), (2, 8, 1009));
        assert_eq!(
            got.unwrap(),
            long,
            "every byte of the line, without its newline"
        );
        // A reader that stops early: the rest is read through.
        let mut r2 = LineReader::with_max_line(&input[..], 100);
        r2.next_line().unwrap();
        let (_, n) = r2
            .next_line_streaming(|r: &mut dyn Read| r.read(&mut [0u8; 10]).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(n, Some(10));
        assert_eq!(r2.next_line().unwrap().unwrap().bytes, b"{\"b\":2}");
        let (third, _) = r.next_line_streaming(seen).unwrap().unwrap();
        assert_eq!(third.bytes, b"{\"b\":2}");
        let (last, _) = r.next_line_streaming(seen).unwrap().unwrap();
        assert!(!last.terminated && last.bytes == b"last");
        assert!(r.next_line_streaming(seen).unwrap().is_none());
        assert_eq!(r.bytes_read(), input.len() as u64);
    }

    #[test]
    fn oversized_lines_are_skipped_not_held() {
        let mut input = b"{\"a\":1}\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        input.extend(b"\n{\"b\":2}\n");
        let mut r = LineReader::with_max_line(&input[..], 100);
        let first = r.next_line().unwrap().unwrap();
        assert!(!first.oversized && first.bytes == b"{\"a\":1}");
        let big = r.next_line().unwrap().unwrap();
        assert!(big.oversized && big.terminated && big.bytes.is_empty());
        assert_eq!((big.start, big.end), (8, 1009));
        let last = r.next_line().unwrap().unwrap();
        assert_eq!((last.number, last.bytes), (3, &b"{\"b\":2}"[..]));
        assert!(r.next_line().unwrap().is_none());
    }

    /// Hands out at most `piece` bytes per read, and counts what it handed out.
    struct Pieces<'a> {
        data: &'a [u8],
        piece: usize,
        given: std::rc::Rc<std::cell::Cell<usize>>,
    }

    impl Read for Pieces<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = out.len().min(self.piece).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.given.set(self.given.get() + n);
            Ok(n)
        }
    }

    #[test]
    fn the_first_read_is_small_and_later_ones_grow() {
        let mut input = b"{\"first\":1}\n".to_vec();
        let long = format!("{{\"long\":\"{}\"}}", "y".repeat(200_000));
        input.extend(long.as_bytes());
        input.extend(b"\n{\"last\":2}\n");
        let given = std::rc::Rc::new(std::cell::Cell::new(0));
        let pieces = Pieces {
            data: &input,
            piece: usize::MAX,
            given: given.clone(),
        };
        let mut r = LineReader::new(pieces);
        assert_eq!(r.next_line().unwrap().unwrap().bytes, b"{\"first\":1}");
        assert_eq!(
            given.get(),
            READ_FIRST,
            "a head settled by line 1 reads 8 KiB"
        );
        let l = r.next_line().unwrap().unwrap();
        assert_eq!(l.bytes, long.as_bytes());
        assert_eq!((l.start, l.number), (12, 2));
        let last = r.next_line().unwrap().unwrap();
        assert_eq!(
            (last.bytes, last.end),
            (&b"{\"last\":2}"[..], input.len() as u64)
        );
        assert!(r.next_line().unwrap().is_none());
        assert_eq!(given.get(), input.len());
        // Reads that return less than asked (a pipe, a file being written) give the same lines.
        for piece in [1, 7, 8192, 70_000] {
            let pieces = Pieces {
                data: &input,
                piece,
                given: std::rc::Rc::new(std::cell::Cell::new(0)),
            };
            let mut r = LineReader::new(pieces);
            let mut got = vec![];
            while let Some(l) = r.next_line().unwrap() {
                got.push(l.bytes.to_vec());
            }
            assert_eq!(got.len(), 3, "piece {piece}");
            assert_eq!(got[1], long.as_bytes(), "piece {piece}");
        }
    }

    #[test]
    fn objects_only() {
        assert!(parse_object(b"{\"a\":1}").is_some());
        assert!(parse_object(b"[1,2]").is_none());
        assert!(parse_object(b"\"str\"").is_none());
        assert!(parse_object(b"42").is_none());
        assert!(parse_object(b"   ").is_none());
        assert!(parse_object(b"{\"a\":\"\xff\"}").is_none());
    }
}
