//! The pruned parse itself: one pass over a line's bytes that checks all of it as JSON and builds only
//! the members a `Need` keeps, so a 50 KB tool result costs a scan of its bytes (a vector search), not a
//! tree, nor serde's visitor calls for every nested value.
//!
//! It accepts exactly what `serde_json::from_slice::<Value>` accepts, and where checking that itself
//! would cost more than it saves it asks serde_json: every kept string with an escape, every kept number,
//! every number with an exponent or a long integer part (f64 range), every `Need::All` subtree. A
//! skipped string with a `\uD800`-`\uDFFF` escape (serde_json refuses a lone surrogate only in a string
//! it builds) gives `Scan::Unsure`: the caller parses the line whole. Nesting deeper than serde_json's
//! limit (127 open arrays or objects) is refused wherever it is, skipped members included.

use super::doc::Pruned;
use super::needs::Need;
use serde_json::Value;
use std::borrow::Cow;

/// Why a line was not scanned to a value.
#[derive(Debug, PartialEq)]
pub enum Scan {
    /// Not JSON (or not one value): a whole parse refuses it too.
    Invalid,
    /// Something this scanner does not decide by itself: parse the line whole.
    Unsure,
}

type R<T> = Result<T, Scan>;

/// serde_json's `remaining_depth` starts at 128 and fails when an open bracket brings it to 0.
const MAX_DEPTH: u32 = 127;

/// The whole of `bytes` as one JSON value (JSON whitespace around it), pruned to `need`.
pub fn scan<'a>(bytes: &'a [u8], need: &Need) -> R<Pruned<'a>> {
    let mut s = Scanner { b: bytes, i: 0 };
    s.ws();
    let v = s.value(need, 0)?;
    s.ws();
    match s.i == bytes.len() {
        true => Ok(v),
        false => Err(Scan::Invalid),
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&self) -> R<u8> {
        self.b.get(self.i).copied().ok_or(Scan::Invalid)
    }

    /// One value at `self.i` (no whitespace before it), kept as `need` says.
    fn value(&mut self, need: &Need, depth: u32) -> R<Pruned<'a>> {
        let start = self.i;
        match (need, self.peek()?) {
            (Need::All, _) => {
                self.skip(depth)?;
                self.serde(start)
            }
            (_, b'{') => self.object(need, depth + 1),
            (_, b'[') => self.array(need, depth + 1),
            (_, b'"') => {
                let escaped = self.string()?;
                self.string_value(start, escaped).map(Pruned::String)
            }
            (_, b'-' | b'0'..=b'9') => {
                self.number()?;
                self.serde(start)
            }
            _ => self.literal(),
        }
    }

    /// The value from `start` to here, as serde_json reads it.
    fn serde(&self, start: usize) -> R<Pruned<'a>> {
        serde_json::from_slice::<Value>(&self.b[start..self.i])
            .map(Pruned::from_value)
            .map_err(|_| Scan::Invalid)
    }

    /// Steps into the array or object at `self.i`, at `depth`; whether it is empty (and stepped over).
    fn open(&mut self, depth: u32, close: u8) -> R<bool> {
        if depth > MAX_DEPTH {
            return Err(Scan::Invalid);
        }
        self.i += 1;
        self.ws();
        let empty = self.peek()? == close;
        self.i += empty as usize;
        Ok(empty)
    }

    fn object(&mut self, need: &Need, depth: u32) -> R<Pruned<'a>> {
        let mut out = Vec::new();
        if self.open(depth, b'}')? {
            return Ok(Pruned::Object(out));
        }
        // Each kept member's slot, while every one has one and there are at most `SLOTS`: the need's
        // keys are sorted by name, so the members are put in order by their slots, not their names.
        let mut slots = Slots::default();
        loop {
            if self.peek()? != b'"' {
                return Err(Scan::Invalid);
            }
            let start = self.i;
            let escaped = self.string()?;
            let b: &'a [u8] = self.b;
            let raw = &b[start + 1..self.i - 1];
            // The key's bytes are checked UTF-8 already (`string`): a key no rule reads is not made text.
            let member = match escaped {
                false => need.slot(raw).map(|(i, n)| (None, i, n)),
                true => {
                    let k = self.string_value(start, true)?;
                    need.slot(k.as_bytes()).map(|(i, n)| (Some(k), i, n))
                }
            };
            self.ws();
            if self.peek()? != b':' {
                return Err(Scan::Invalid);
            }
            self.i += 1;
            self.ws();
            match member {
                Some((k, slot, n)) => {
                    let v = self.value(n, depth)?;
                    let k = match k {
                        Some(k) => k,
                        None => Cow::Borrowed(checked(raw)),
                    };
                    slots.push(slot);
                    out.push((k, v));
                }
                None => self.skip(depth)?,
            }
            if self.closed(b'}')? {
                return Ok(slots.order(out));
            }
        }
    }

    /// After a member or an element: a comma (and the next one), or `close`. Whether it was `close`.
    fn closed(&mut self, close: u8) -> R<bool> {
        self.ws();
        match self.peek()? {
            b',' => {
                self.i += 1;
                self.ws();
                Ok(false)
            }
            c if c == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(Scan::Invalid),
        }
    }

    fn array(&mut self, need: &Need, depth: u32) -> R<Pruned<'a>> {
        let el = need.element();
        let mut out = Vec::new();
        if self.open(depth, b']')? {
            return Ok(Pruned::Array(out));
        }
        loop {
            out.push(self.value(el, depth)?);
            if self.closed(b']')? {
                return Ok(Pruned::Array(out));
            }
        }
    }

    /// Checks one value and steps over it, building nothing. `depth` is that of its container.
    fn skip(&mut self, depth: u32) -> R<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => self.number(),
            b'{' | b'[' => self.skip_nested(depth),
            _ => self.literal().map(drop),
        }
    }

    /// An array or object and all it holds, without recursion: a stack of what is open.
    fn skip_nested(&mut self, depth: u32) -> R<()> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            // At a value.
            match self.peek()? {
                c @ (b'{' | b'[') => {
                    if depth + open.len() as u32 + 1 > MAX_DEPTH {
                        return Err(Scan::Invalid);
                    }
                    self.i += 1;
                    open.push(c);
                    self.ws();
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.peek()? == close {
                        self.i += 1;
                        open.pop();
                    } else {
                        if c == b'{' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                b'"' => drop(self.string()?),
                b'-' | b'0'..=b'9' => self.number()?,
                _ => drop(self.literal()?),
            }
            // After a value: a comma and the next one, or the end of what is open.
            loop {
                let Some(&c) = open.last() else {
                    return Ok(());
                };
                self.ws();
                match (self.peek()?, c) {
                    (b',', _) => {
                        self.i += 1;
                        self.ws();
                        if c == b'{' {
                            self.key()?;
                        }
                        break;
                    }
                    (b'}', b'{') | (b']', b'[') => {
                        self.i += 1;
                        open.pop();
                    }
                    _ => return Err(Scan::Invalid),
                }
            }
        }
    }

    /// A member's key and its colon, up to its value.
    fn key(&mut self) -> R<()> {
        if self.peek()? != b'"' {
            return Err(Scan::Invalid);
        }
        self.string()?;
        self.ws();
        if self.peek()? != b':' {
            return Err(Scan::Invalid);
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    /// Steps over the string at `self.i` (its opening quote), checking it as serde_json does: no
    /// control character, valid escapes, valid UTF-8. Whether it holds an escape.
    ///
    /// Most strings of a record are keys and values of plain ASCII (ids, times, paths, text without a
    /// newline): a vector step per 16 bytes finds their closing quote, inline (`plain_ascii`). The general step
    /// (`string_at`) is a call whose entry and exit cost more than a short string's check (a prompt
    /// line has two dozen strings).
    #[inline(always)]
    fn string(&mut self) -> R<bool> {
        if let Some(len) = plain_ascii(self.b, self.i + 1) {
            self.i += len + 2;
            return Ok(false);
        }
        self.string_at()
    }

    #[inline(never)]
    fn string_at(&mut self) -> R<bool> {
        let b = self.b;
        let start = self.i + 1;
        let mut i = start;
        let mut escaped = false;
        let mut high = false;
        loop {
            let at = stop(b, i, &mut high).ok_or(Scan::Invalid)?;
            match b[at] {
                b'"' => {
                    i = at;
                    break;
                }
                b'\\' => {
                    escaped = true;
                    i = self.escape(at)?;
                }
                _ => return Err(Scan::Invalid),
            }
        }
        if high {
            std::str::from_utf8(&b[start..i]).map_err(|_| Scan::Invalid)?;
        }
        self.i = i + 1;
        Ok(escaped)
    }

    /// The escape at `i` (its backslash); where the string goes on.
    fn escape(&self, i: usize) -> R<usize> {
        match self.b.get(i + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(i + 2),
            Some(b'u') => {
                let hex = self.b.get(i + 2..i + 6).ok_or(Scan::Invalid)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return Err(Scan::Invalid);
                }
                // A surrogate half: valid only in a pair, which serde_json decides.
                if matches!(hex[0], b'd' | b'D')
                    && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
                {
                    return Err(Scan::Unsure);
                }
                Ok(i + 6)
            }
            _ => Err(Scan::Invalid),
        }
    }

    /// The string that began at `start` and was just stepped over.
    fn string_value(&self, start: usize, escaped: bool) -> R<Cow<'a, str>> {
        let span: &'a [u8] = &self.b[start..self.i];
        match escaped {
            false => Ok(Cow::Borrowed(checked(&span[1..span.len() - 1]))),
            true => serde_json::from_slice(span)
                .map(Cow::Owned)
                .map_err(|_| Scan::Invalid),
        }
    }

    /// Steps over a number, checking its grammar; one serde_json would not fit in an f64 is refused.
    fn number(&mut self) -> R<()> {
        let b = self.b;
        let start = self.i;
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let int = match b.get(i) {
            Some(b'0') => {
                i += 1;
                1
            }
            Some(b'1'..=b'9') => digits(&mut i),
            _ => return Err(Scan::Invalid),
        };
        if b.get(i) == Some(&b'.') {
            i += 1;
            if digits(&mut i) == 0 {
                return Err(Scan::Invalid);
            }
        }
        let mut exponent = false;
        if let Some(b'e' | b'E') = b.get(i) {
            exponent = true;
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            if digits(&mut i) == 0 {
                return Err(Scan::Invalid);
            }
        }
        if (exponent || int > 300) && serde_json::from_slice::<Value>(&b[start..i]).is_err() {
            return Err(Scan::Invalid);
        }
        self.i = i;
        Ok(())
    }

    fn literal(&mut self) -> R<Pruned<'a>> {
        let rest = &self.b[self.i..];
        let (v, n) = if rest.starts_with(b"true") {
            (Pruned::Bool(true), 4)
        } else if rest.starts_with(b"false") {
            (Pruned::Bool(false), 5)
        } else if rest.starts_with(b"null") {
            (Pruned::Null, 4)
        } else {
            return Err(Scan::Invalid);
        };
        self.i += n;
        Ok(v)
    }
}

/// At most this many kept members of an object are ordered by their slots; more by their names.
const SLOTS: usize = 24;

/// The slots of an object's kept members, in line order, while each has one (`n` is past `SLOTS`
/// once one has none or there are too many).
#[derive(Default)]
struct Slots {
    n: usize,
    of: [u8; SLOTS],
}

impl Slots {
    fn push(&mut self, slot: Option<usize>) {
        match slot {
            Some(s) if self.n < SLOTS && s <= u8::MAX as usize => {
                self.of[self.n] = s as u8;
                self.n += 1;
            }
            _ => self.n = SLOTS + 1,
        }
    }

    /// The object of `members` (the kept ones, in line order): sorted by name and each name once, its
    /// last value kept, as `Pruned::object` makes it, but by comparing slots, not names.
    fn order<'a>(mut self, mut members: Vec<(Cow<'a, str>, Pruned<'a>)>) -> Pruned<'a> {
        if self.n > SLOTS {
            return Pruned::object(members);
        }
        let of = &mut self.of[..self.n];
        // An insertion sort, stable: of repeats, the last in line order ends last.
        for i in 1..of.len() {
            let mut j = i;
            while j > 0 && of[j - 1] > of[j] {
                of.swap(j - 1, j);
                members.swap(j - 1, j);
                j -= 1;
            }
        }
        // Now sorted by name too (a slot is its name's place): a repeated name keeps its last value.
        match of.windows(2).any(|w| w[0] == w[1]) {
            true => Pruned::sorted_object(members),
            false => Pruned::Object(members),
        }
    }
}

/// The 16 bytes of `b` at `i` (`i + 16 <= b.len()`) as bit masks, bit `n` for byte `i + n`: its quotes,
/// its backslashes and control characters, and its bytes over 0x7f. The one vector step of both
/// string steps.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block(b: &[u8], i: usize) -> (u32, u32, u32) {
    use std::arch::x86_64::*;
    assert!(i + 16 <= b.len());
    // SAFETY: SSE2 is part of x86_64; the load reads the 16 bytes `b[i..i + 16]` (asserted above).
    unsafe {
        let x = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
        let control = _mm_set1_epi8(0x1f);
        let low = _mm_cmpeq_epi8(_mm_max_epu8(x, control), control);
        let odd = _mm_or_si128(low, _mm_cmpeq_epi8(x, _mm_set1_epi8(b'\\' as i8)));
        (
            _mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_set1_epi8(b'"' as i8))) as u32,
            _mm_movemask_epi8(odd) as u32,
            _mm_movemask_epi8(x) as u32,
        )
    }
}

/// The length of the string whose text starts at `i` in `b`, when every byte before its closing quote
/// is plain ASCII (no backslash, no control character, no byte over 0x7f): such a string is checked
/// whole by one vector step per 16 bytes. None for anything else (the general step decides it, from
/// the start), and within 16 bytes of the line's end.
#[inline(always)]
fn plain_ascii(b: &[u8], i: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        let mut j = i;
        while j + 16 <= b.len() {
            let (quote, odd, high) = block(b, j);
            let bad = odd | high;
            if quote != 0 {
                let at = quote.trailing_zeros();
                return (bad & ((1u32 << at) - 1) == 0).then_some(j - i + at as usize);
            }
            if bad != 0 {
                return None;
            }
            j += 16;
        }
        None
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (b, i);
        None
    }
}

/// Where in `b`, from `i`, the next quote, backslash or control character is (what ends a run of a
/// string's plain bytes), noting in `high` whether a byte from `i` up to it is not ASCII. One pass,
/// 16 bytes at a time: a tool result's text stops at every `\n` escape, so a search for the quote and
/// backslash, a second pass for control characters and a third for non-ASCII bytes cost a call each
/// per stop.
fn stop(b: &[u8], mut i: usize, high: &mut bool) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    while i + 16 <= b.len() {
        let (quote, odd, top) = block(b, i);
        let found = quote | odd;
        if found != 0 {
            let at = found.trailing_zeros();
            *high |= top & ((1u32 << at) - 1) != 0;
            return Some(i + at as usize);
        }
        *high |= top != 0;
        i += 16;
    }
    while let Some(&x) = b.get(i) {
        if x == b'"' || x == b'\\' || x < 0x20 {
            return Some(i);
        }
        *high |= x >= 0x80;
        i += 1;
    }
    None
}

/// The text of a string `Scanner::string` stepped over without finding an escape: it checked those
/// bytes already (ASCII, or valid UTF-8 when one was not ASCII), so they are not checked again (a
/// second pass over every kept key and value was a few percent of a turn read).
fn checked(b: &[u8]) -> &str {
    debug_assert!(std::str::from_utf8(b).is_ok());
    // SAFETY: only called on a string's bytes that `Scanner::string` checked as UTF-8 (see above).
    unsafe { std::str::from_utf8_unchecked(b) }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
