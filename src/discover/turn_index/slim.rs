//! What memory holds of the turn index's entries (`Slim`), read from the index file's lines without
//! building them whole, and where in those lines each entry's prompts are.

use super::Prompts;
use serde::Deserialize;

/// What memory holds of an entry the index file has: enough to tell an unchanged transcript, give its
/// count and read its prompts; the rest (the state a read goes on from) stays in the file, on the line
/// at `at`, and is read again when needed. At 100k transcripts the entries whole took 60 MB; these take
/// 7.2 MB.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slim {
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) path_hash: u64,
    pub(super) size: u64,
    /// Nanoseconds since the epoch (an entry whose mtime is outside i64's 292 years is not kept).
    pub(super) mtime_ns: i64,
    pub(super) at: u64,
    pub(super) len: u32,
    /// (An entry of more is not kept: its file is counted again.)
    pub(super) user_turns: u32,
    /// Where the first and the latest prompt's JSON strings are in the line.
    pub(super) first: Span,
    pub(super) last: Span,
    /// Index into `TurnIndex::apps`.
    pub(super) app: u16,
    /// Still the entry of its file: not replaced by one counted now, nor forgotten (`update`).
    pub(super) kept: bool,
    /// Its file was counted in this listing (`update`).
    pub(super) seen: bool,
}

const _: () = assert!(std::mem::size_of::<Slim>() == 72);

/// A JSON string's place in an entry's line: `len` 0 for no prompt, `NOT_FOUND` when the line must be
/// parsed whole to find it.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(2))]
pub(super) struct Span {
    pub(super) at: u32,
    pub(super) len: u16,
}

pub(super) const NOT_FOUND: u16 = u16::MAX;

/// Where a prompt's JSON string is in `line`, the line its entry was parsed from: taken from where
/// the parsed text lies in the line when it has no escape (it is borrowed from it), else searched for.
/// The index file is written by serde_json, whose output holds `"key":` only where a key is (inside a
/// string a quote is escaped), and the string found there is checked to be the prompt.
pub(super) fn span(line: &[u8], key: &str, prompt: Option<&std::borrow::Cow<str>>) -> Span {
    use std::borrow::Cow;
    let not_found = Span {
        at: 0,
        len: NOT_FOUND,
    };
    let fits = |start: usize, end: usize| -> Option<Span> {
        Some(Span {
            at: u32::try_from(start).ok()?,
            len: u16::try_from(end - start)
                .ok()
                .filter(|l| *l != NOT_FOUND)?,
        })
    };
    let want = match prompt {
        None => return Span { at: 0, len: 0 },
        Some(Cow::Borrowed(text)) => {
            let inside = (text.as_ptr() as usize).checked_sub(line.as_ptr() as usize);
            let quoted = inside.filter(|&i| {
                i >= 1 && line.get(i - 1) == Some(&b'"') && line.get(i + text.len()) == Some(&b'"')
            });
            return quoted
                .and_then(|i| fits(i - 1, i + text.len() + 1))
                .unwrap_or(not_found);
        }
        Some(Cow::Owned(text)) => text.as_str(),
    };
    let needle = format!("\"{key}\":");
    let found = memchr::memmem::rfind_iter(line, needle.as_bytes()).find_map(|k| {
        let start = k + needle.len();
        // (JSON whitespace before the string is no part of it.)
        let ws = line[start..]
            .iter()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
        let start = start + ws;
        let mut strings =
            serde_json::Deserializer::from_slice(&line[start..]).into_iter::<String>();
        let s = strings.next()?.ok()?;
        (s == want).then_some(())?;
        fits(start, start + strings.byte_offset())
    });
    found.unwrap_or(not_found)
}

/// What is kept of the entry on the index file's line at `at` (`line`); None for a line that is not
/// JSON, lacks a member memory keeps, or is of none of `apps` (no walked file could match it). Only
/// those members are taken, the others skipped without being built (parsing each line whole took
/// 460 ms of CPU at 100k). A line whose other members are wrong is found out when a read would go on
/// from it (`read_entry` parses it whole) and the file is counted from the start instead.
pub(super) fn slim(line: &[u8], at: u64, apps: &[Box<str>]) -> Option<Slim> {
    use std::borrow::Cow;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Line<'a> {
        dev: u64,
        ino: u64,
        path_hash: u64,
        #[serde(borrow)]
        app: Cow<'a, str>,
        size: u64,
        mtime_ns: i64,
        #[serde(borrow)]
        checkpoint: Of<'a>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Of<'a> {
        user_turns: u64,
        #[serde(borrow, default)]
        first_prompt: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        last_prompt: Option<Cow<'a, str>>,
    }
    let e: Line = serde_json::from_slice(line).ok()?;
    let c = &e.checkpoint;
    Some(Slim {
        dev: e.dev,
        ino: e.ino,
        path_hash: e.path_hash,
        size: e.size,
        mtime_ns: e.mtime_ns,
        at,
        len: u32::try_from(line.len()).ok()?,
        user_turns: u32::try_from(c.user_turns).ok()?,
        first: span(line, "firstPrompt", c.first_prompt.as_ref()),
        last: span(line, "lastPrompt", c.last_prompt.as_ref()),
        app: u16::try_from(apps.iter().position(|a| **a == *e.app)?).ok()?,
        kept: true,
        seen: false,
    })
}

impl Slim {
    /// Where this entry's prompts are in the index file.
    pub(super) fn prompts(&self) -> Prompts {
        let (first, last) = (self.first, self.last);
        let line = Prompts::Line {
            at: self.at,
            len: self.len,
        };
        if first.len == NOT_FOUND || last.len == NOT_FOUND {
            return line;
        }
        // The latest prompt follows the first in the line (as serde_json writes them), or one is none.
        let (start, first_len) = match first.len {
            0 => (last.at, 0),
            n => (first.at, n),
        };
        let gap = match last.len {
            0 => Some(0),
            _ => last
                .at
                .checked_sub(start + first_len as u32)
                .and_then(|g| u16::try_from(g).ok()),
        };
        match gap {
            Some(gap) => Prompts::Indexed {
                at: self.at + start as u64,
                first: first_len,
                gap,
                last: last.len,
            },
            None => line,
        }
    }
}

pub(super) fn key(e: &Slim) -> (u64, u64) {
    (e.dev, e.ino)
}
