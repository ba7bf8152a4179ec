//! A record too large to keep whole (a line over `lines::MAX_LINE_BYTES`: a prompt with pasted
//! screenshots) is still read for what it says: its bytes are copied as they go by, except that a
//! string longer than `LONG` bytes is cut there and says how much more it held, and one that is an
//! image's data is `[image, 1.2 MiB]`. The rules read the copy as they read any record, so its prompt
//! is shown and counted like any other, by every reader (the line reader's and a sweep's scan alike);
//! memory stays bounded by the copy, never by the line.

use std::io::Read;

/// The most of one string kept (a prompt or an answer is shown up to 64 KiB anyway).
pub const LONG: usize = 64 * 1024;
/// The copy's own bound: a line of a million short strings is not kept whole either.
const MAX_COPY: usize = 8 << 20;

/// The compact copy of the line `r` holds (read to its end); None when the copy would pass its bound.
/// What is not JSON stays not JSON: the copy is parsed as any line is.
pub fn salvage(r: &mut dyn Read) -> Option<Vec<u8>> {
    let mut c = Compactor::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => c.push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    c.finish()
}

/// The compact copy of a line, made as its bytes are handed over (by a reader, or by a scan that
/// meets a line longer than it keeps): everything as written, except what a string holds past `LONG`
/// bytes, which ends the string in a note of its size (an image's data: `[image, 1.2 MiB]`, all of it).
#[derive(Default)]
pub struct Compactor {
    out: Vec<u8>,
    in_string: bool,
    escaped: bool,
    /// Where the open string's text starts in `out`, and its bytes so far.
    string_at: usize,
    string_len: usize,
    too_big: bool,
}

impl Compactor {
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if !self.in_string {
                if b == b'"' {
                    self.in_string = true;
                    self.string_at = self.out.len() + 1;
                    self.string_len = 0;
                }
                self.put(b);
                continue;
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.end_string();
                self.in_string = false;
                self.put(b);
                continue;
            }
            self.string_len += 1;
            if self.string_len <= LONG {
                self.put(b);
            }
        }
    }

    fn put(&mut self, b: u8) {
        match self.out.len() < MAX_COPY {
            true => self.out.push(b),
            false => self.too_big = true,
        }
    }

    /// The open string ends: past `LONG` bytes, what was kept of it ends in a note.
    fn end_string(&mut self) {
        if self.string_len <= LONG {
            return;
        }
        let size = super::duration::approx_size(self.string_len as u64);
        let kept = &self.out[self.string_at.min(self.out.len())..];
        let note = match is_image_data(kept) {
            true => {
                self.out.truncate(self.string_at);
                format!("[image, {size}]")
            }
            false => {
                // Cut where no escape is split, and on a character boundary.
                let mut end = self.out.len();
                if let Some(b) = kept.iter().rposition(|b| *b == b'\\') {
                    if self.string_at + b + 6 > end {
                        end = self.string_at + b;
                    }
                }
                while end > self.string_at && (self.out[end - 1] & 0xC0) == 0x80 {
                    end -= 1;
                }
                if end > self.string_at && self.out[end - 1] >= 0xC0 {
                    end -= 1;
                }
                self.out.truncate(end);
                format!(" [… {size} in all; the rest is not read: the record is over almanac's line limit]")
            }
        };
        let escaped = serde_json::to_string(&note).unwrap_or_default();
        for &b in escaped
            .as_bytes()
            .get(1..escaped.len().saturating_sub(1))
            .unwrap_or(&[])
        {
            self.put(b);
        }
    }

    /// The copy, or None when it passed its bound.
    pub fn finish(self) -> Option<Vec<u8>> {
        (!self.too_big).then_some(self.out)
    }
}

/// Whether a string's start is base64 of an image (PNG, JPEG, GIF, WebP), bare or as a data URL.
fn is_image_data(start: &[u8]) -> bool {
    let s = match start.strip_prefix(b"data:image/") {
        Some(rest) => return rest.iter().take(40).any(|b| *b == b','),
        None => start,
    };
    [&b"iVBORw0KGgo"[..], b"/9j/", b"R0lGOD", b"UklGR"]
        .iter()
        .any(|sig| s.starts_with(sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_record_keeps_its_text_and_names_its_images() {
        let image = format!("iVBORw0KGgo{}", "A".repeat(3 * LONG));
        let pasted = "x".repeat(2 * LONG);
        let line = format!(
            r#"{{"type":"user","message":{{"content":[{{"type":"text","text":"look at this \"bug\" \u00e9"}},{{"type":"image","source":{{"data":"{image}"}}}},{{"type":"text","text":"{pasted}"}}],"n":[1,-2.5e3,true,null]}}}}"#
        );
        let copy = salvage(&mut line.as_bytes()).expect("read");
        // Handed over in any pieces, the copy is the same.
        let mut c = Compactor::default();
        line.as_bytes().chunks(1000).for_each(|p| c.push(p));
        assert_eq!(c.finish().unwrap(), copy);
        assert!(copy.len() < 2 * LONG, "{}", copy.len());
        let v: serde_json::Value = serde_json::from_slice(&copy).expect("JSON");
        let content = &v["message"]["content"];
        assert_eq!(content[0]["text"], "look at this \"bug\" é");
        assert_eq!(content[1]["source"]["data"], "[image, 196619 bytes]");
        assert!(!String::from_utf8_lossy(&copy).contains("AAAA"));
        let text = content[2]["text"].as_str().unwrap();
        assert!(
            text.starts_with("xxxx") && text.contains("131072 bytes in all"),
            "{}",
            &text[text.len() - 120..]
        );
        assert_eq!(
            v["message"]["n"],
            serde_json::json!([1, -2.5e3, true, null])
        );
    }

    #[test]
    fn what_is_not_one_json_value_stays_not_json() {
        let long = "x".repeat(2 * LONG);
        for bad in [
            format!("{{\"a\":\"{long}\"}} {{}}"),
            format!("{{\"a\":\"{long}"),
            format!("[\"{long}\",2"),
            format!("{{\"a\" \"{long}\"}}"),
        ] {
            let copy = salvage(&mut bad.as_bytes()).expect("copied");
            assert!(copy.len() < LONG + 200);
            assert!(
                crate::util::lines::parse_object(&copy).is_none(),
                "{bad:.40}"
            );
        }
    }
}
