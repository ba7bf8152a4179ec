//! The pruned parse of a record too long to hold (a line over `util::lines::MAX_LINE_BYTES`: a first
//! prompt with pasted screenshots), streamed: its bytes are read once through a small buffer, every
//! member no rule reads is skipped as it goes by, and only what a `Need` keeps is built, with each kept
//! string cut at `MAX_STRING` bytes and at most `MAX_KEPT` bytes kept in all. So the head scan finds a
//! session id and cwd behind megabytes of base64 with bounded memory.
//!
//! Like `scan`, it builds an object only from valid JSON; unlike it, it reads once and never goes back,
//! so a cut string (or what `MAX_KEPT` left out) is not the whole value: rules that test the rest of a
//! huge string do not see it.

use super::needs::Need;
use serde_json::{Map, Number, Value};
use std::io::{BufRead, BufReader, Read};

/// A kept string longer than this is cut (at a character boundary).
pub const MAX_STRING: usize = 1 << 20;
/// What one record may keep in all (each kept value costs its text, or 16 bytes).
pub const MAX_KEPT: usize = 8 << 20;
/// As `scan`: serde_json's nesting limit.
const MAX_DEPTH: u32 = 127;

/// The JSON value `r` holds (whitespace around it), pruned to `need`; None when it is not one JSON value.
pub fn parse_streamed(r: &mut dyn Read, need: &Need) -> Option<Value> {
    let mut s = Stream {
        r: BufReader::with_capacity(64 << 10, r),
        kept: 0,
    };
    s.ws().ok()?;
    let v = s.value(Some(need), 0).ok()?;
    s.ws().ok()?;
    match s.peek().ok()? {
        None => v,
        Some(_) => None,
    }
}

struct Stream<R> {
    r: BufReader<R>,
    kept: usize,
}

/// Not JSON (or an I/O error): the record is skipped.
struct Bad;

type R<T> = Result<T, Bad>;

impl<Rd: Read> Stream<Rd> {
    fn peek(&mut self) -> R<Option<u8>> {
        let buf = self.r.fill_buf().map_err(|_| Bad)?;
        Ok(buf.first().copied())
    }

    fn next(&mut self) -> R<u8> {
        let b = self.peek()?.ok_or(Bad)?;
        self.r.consume(1);
        Ok(b)
    }

    fn expect(&mut self, word: &[u8]) -> R<()> {
        for w in word {
            if self.next()? != *w {
                return Err(Bad);
            }
        }
        Ok(())
    }

    fn ws(&mut self) -> R<()> {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek()? {
            self.r.consume(1);
        }
        Ok(())
    }

    /// Whether one more value of `cost` bytes may be kept.
    fn keep(&mut self, cost: usize) -> bool {
        if self.kept + cost > MAX_KEPT {
            return false;
        }
        self.kept += cost;
        true
    }

    /// One value; kept (Some) when `need` is Some and the budget allows.
    fn value(&mut self, need: Option<&Need>, depth: u32) -> R<Option<Value>> {
        match self.peek()?.ok_or(Bad)? {
            b'{' => self.object(need, depth),
            b'[' => self.array(need, depth),
            b'"' => {
                let s = self.string(need.is_some())?;
                Ok(s.filter(|s| self.keep(s.len().max(16))).map(Value::String))
            }
            b't' => self
                .expect(b"true")
                .map(|()| self.scalar(need, Value::Bool(true))),
            b'f' => self
                .expect(b"false")
                .map(|()| self.scalar(need, Value::Bool(false))),
            b'n' => self
                .expect(b"null")
                .map(|()| self.scalar(need, Value::Null)),
            _ => {
                let n = self.number()?;
                Ok(match need {
                    Some(_) => Some(Value::Number(n)).filter(|_| self.keep(16)),
                    None => None,
                })
            }
        }
    }

    fn scalar(&mut self, need: Option<&Need>, v: Value) -> Option<Value> {
        need.and_then(|_| self.keep(16).then_some(v))
    }

    fn object(&mut self, need: Option<&Need>, depth: u32) -> R<Option<Value>> {
        if depth >= MAX_DEPTH {
            return Err(Bad);
        }
        self.r.consume(1);
        let mut map = need.map(|_| Map::new());
        self.ws()?;
        if self.peek()? == Some(b'}') {
            self.r.consume(1);
            return Ok(map.map(Value::Object));
        }
        loop {
            self.ws()?;
            if self.peek()? != Some(b'"') {
                return Err(Bad);
            }
            let key = self.string(true)?.ok_or(Bad)?;
            self.ws()?;
            if self.next()? != b':' {
                return Err(Bad);
            }
            self.ws()?;
            let child = need.and_then(|n| n.member(&key));
            let v = self.value(child, depth + 1)?;
            if let (Some(m), Some(v)) = (map.as_mut(), v) {
                m.insert(key, v);
            }
            self.ws()?;
            match self.next()? {
                b',' => continue,
                b'}' => break,
                _ => return Err(Bad),
            }
        }
        Ok(map.filter(|_| self.keep(16)).map(Value::Object))
    }

    fn array(&mut self, need: Option<&Need>, depth: u32) -> R<Option<Value>> {
        if depth >= MAX_DEPTH {
            return Err(Bad);
        }
        self.r.consume(1);
        let mut items = need.map(|_| Vec::new());
        let child = need.map(Need::element);
        self.ws()?;
        if self.peek()? == Some(b']') {
            self.r.consume(1);
            return Ok(items.map(Value::Array));
        }
        loop {
            self.ws()?;
            let v = self.value(child, depth + 1)?;
            if let (Some(items), Some(v)) = (items.as_mut(), v) {
                items.push(v);
            }
            self.ws()?;
            match self.next()? {
                b',' => continue,
                b']' => break,
                _ => return Err(Bad),
            }
        }
        Ok(items.filter(|_| self.keep(16)).map(Value::Array))
    }

    /// A string at the cursor (`"` next): its text when `keep` (cut at `MAX_STRING` bytes), else
    /// read through. Escapes are decoded as serde_json decodes them; a lone surrogate is refused.
    fn string(&mut self, keep: bool) -> R<Option<String>> {
        self.r.consume(1);
        let mut out: Vec<u8> = Vec::new();
        let push = |out: &mut Vec<u8>, bytes: &[u8]| {
            if keep && out.len() < MAX_STRING {
                let room = MAX_STRING - out.len();
                out.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        };
        loop {
            let buf = self.r.fill_buf().map_err(|_| Bad)?;
            if buf.is_empty() {
                return Err(Bad);
            }
            // Plain bytes up to the next quote or backslash go in one step.
            let stop = buf
                .iter()
                .position(|b| *b == b'"' || *b == b'\\' || *b < 0x20);
            let n = stop.unwrap_or(buf.len());
            push(&mut out, &buf[..n]);
            self.r.consume(n);
            if stop.is_none() {
                continue;
            }
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(Bad),
                    };
                    let mut tmp = [0u8; 4];
                    push(&mut out, c.encode_utf8(&mut tmp).as_bytes());
                }
                // A control character inside a string is not JSON.
                _ => return Err(Bad),
            }
        }
        if !keep {
            return Ok(None);
        }
        // Cut at a character boundary; the text must be UTF-8, as serde_json requires.
        match String::from_utf8(out) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.as_bytes().len() >= MAX_STRING => {
                let valid = e.utf8_error().valid_up_to();
                let mut b = e.into_bytes();
                b.truncate(valid);
                Ok(Some(String::from_utf8(b).map_err(|_| Bad)?))
            }
            Err(_) => Err(Bad),
        }
    }

    fn hex4(&mut self) -> R<u16> {
        let mut v = 0u16;
        for _ in 0..4 {
            let d = (self.next()? as char).to_digit(16).ok_or(Bad)?;
            v = v * 16 + d as u16;
        }
        Ok(v)
    }

    fn unicode_escape(&mut self) -> R<char> {
        let hi = self.hex4()?;
        if !(0xD800..0xDC00).contains(&hi) {
            return char::from_u32(u32::from(hi)).ok_or(Bad);
        }
        self.expect(b"\\u")?;
        let lo = self.hex4()?;
        if !(0xDC00..0xE000).contains(&lo) {
            return Err(Bad);
        }
        let c = 0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
        char::from_u32(c).ok_or(Bad)
    }

    /// A number's text, checked by serde_json (at most 64 bytes of it: longer is not a number anyone
    /// writes in a transcript's head).
    fn number(&mut self) -> R<Number> {
        let mut text = Vec::new();
        while let Some(b) = self.peek()? {
            if !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')) {
                break;
            }
            if text.len() >= 64 {
                return Err(Bad);
            }
            text.push(b);
            self.r.consume(1);
        }
        match serde_json::from_slice::<Value>(&text) {
            Ok(Value::Number(n)) => Ok(n),
            _ => Err(Bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the shipped Claude rule set's head scan reads.
    fn claude_head_need() -> Need {
        let catalog = crate::rules::load(&[]).unwrap();
        catalog.get("claude").unwrap().head_reads.clone()
    }

    #[test]
    fn agrees_with_the_whole_parse_on_what_it_keeps() {
        let need = claude_head_need();
        for line in [
            r#"{"type":"user","sessionId":"s1","cwd":"/w/a","message":{"role":"user","content":[{"type":"image","source":{"data":"AAAA"}},{"type":"text","text":"hi \"there\"\n\u00e9 almanac-capture-run: run_x\n"}]}}"#,
            r#"{"cwd":"/w/b","sessionId":"s2","n":[1,2.5,-3e2,true,false,null],"x":{"y":{"z":[{}]}}}"#,
            r#"  {"type":"summary"}  "#,
        ] {
            let whole: Value = serde_json::from_str(line).unwrap();
            let pruned = crate::rules::pruned::parse_pruned_value(line.as_bytes(), &need).unwrap();
            let streamed = parse_streamed(&mut line.as_bytes(), &need).unwrap();
            assert_eq!(streamed, pruned, "{line}");
            assert!(whole.is_object());
        }
        // A surrogate pair in a kept string (the pruned scan hands such a line to serde_json whole).
        let pair = r#"{"sessionId":"s\ud83d\ude00"}"#;
        let v = parse_streamed(&mut pair.as_bytes(), &need).unwrap();
        assert_eq!(v["sessionId"], "s\u{1f600}");
        for bad in [
            r#"{"a":1"#,
            r#"{"a":1}}"#,
            r#"{"a":"\ud800"}"#,
            "{\"a\":\"x\ny\"}",
            r#"{"a":01x}"#,
        ] {
            assert_eq!(parse_streamed(&mut bad.as_bytes(), &need), None, "{bad}");
        }
    }

    #[test]
    fn a_huge_record_is_read_with_bounded_memory() {
        let need = claude_head_need();
        // 40 MiB of base64 in an image block, then the fields the head needs.
        let mut line = br#"{"type":"user","message":{"role":"user","content":[{"type":"image","source":{"type":"base64","data":""#.to_vec();
        line.extend(std::iter::repeat_n(b'Q', 40 << 20));
        line.extend(br#""}},{"type":"text","text":"look"}]},"sessionId":"s9","cwd":"/w/big"}"#);
        let v = parse_streamed(&mut &line[..], &need).expect("parses");
        assert_eq!(v["sessionId"], "s9");
        assert_eq!(v["cwd"], "/w/big");
        let kept = serde_json::to_vec(&v).unwrap().len();
        assert!(kept <= MAX_STRING + 4096, "kept {kept} bytes");
    }
}
