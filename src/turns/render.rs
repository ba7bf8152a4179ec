//! The conversation a capture agent reads: a part of a transcript rendered from the rule set's `turns`
//! section, so that the agent reads (and the user pays for) the conversation, not the JSONL around it.
//!
//! Every user prompt and every assistant text in full (each cut at `MESSAGE_MAX` bytes, marked); each
//! tool call as its name and main argument; each tool result as its first `RESULT_HEAD` characters and
//! its size; a record the rules ignore that holds text (a reminder, a local command) as such, its head
//! only; every other record left out and counted. Each entry starts with where it is in the original:
//! `[L123]`, transcript line 123 (`[M12]`, message 12, for a view, whose line 1 is its header), so the
//! agent can open exactly that line for what an entry cut. Text repeated under another record kind (a
//! Codex answer written as an event and as a response item, a queued prompt written again when it is
//! sent) is shown once.

use super::Sink;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};

/// The most of one prompt or answer shown (a longer one is cut, and says where to read the rest).
pub const MESSAGE_MAX: usize = 64 * 1024;
/// Characters of a tool result shown.
pub const RESULT_HEAD: usize = 200;
/// Characters of a call's argument and of a record that is not a prompt shown.
pub const ARGUMENT_MAX: usize = 300;
pub const NOTE_HEAD: usize = 300;
/// Queued prompts remembered until they are sent.
const MAX_QUEUED: usize = 64;

/// How an entry names its place in the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cite {
    /// `[L123]`: a JSONL transcript's line.
    Line,
    /// `[M12]`: a view's message (its line 13; line 1 is the view's header).
    Message,
}

impl Cite {
    pub fn at(self, line: u64) -> String {
        match self {
            Cite::Line => format!("L{line}"),
            Cite::Message => format!("M{}", line.saturating_sub(1)),
        }
    }

    /// How the rendering's header explains `[L123]` / `[M12]`.
    pub fn legend(self) -> &'static str {
        match self {
            Cite::Line => "[L123] is line 123 of the transcript",
            Cite::Message => "[M12] is message 12 of the session",
        }
    }
}

/// What a rendering showed and left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shown {
    pub prompts: u64,
    pub answers: u64,
    pub calls: u64,
    pub results: u64,
    /// Records the rules ignore that hold text (shown as not a prompt).
    pub notes: u64,
    /// Prompts and answers cut at `MESSAGE_MAX`.
    pub cut: u64,
    /// Records shown by another (the same text under another record kind).
    pub repeats: u64,
    /// Records of a skipped region (a subagent's, a copied history).
    pub skipped: u64,
    /// Records that are none of the above: metadata, snapshots, progress, hooks.
    pub left_out: u64,
}

fn hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// `text` on one line: whitespace runs as one space, at most `max` characters (then `…`).
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    for word in text.split_whitespace() {
        if n > 0 {
            if n >= max {
                out.push('…');
                return out;
            }
            out.push(' ');
            n += 1;
        }
        for c in word.chars() {
            if n >= max {
                out.push('…');
                return out;
            }
            out.push(c);
            n += 1;
        }
    }
    out
}

/// A size in words: `512 bytes`, `12.3 KB`, `4.1 MB`.
pub fn size(bytes: usize) -> String {
    match bytes {
        b if b < 1000 => format!("{b} bytes"),
        b if b < 1_000_000 => format!("{:.1} KB", b as f64 / 1e3),
        b => format!("{:.1} MB", b as f64 / 1e6),
    }
}

/// A `Sink` that writes the entries of a part to `out`, counting what it writes.
pub struct Render<W: Write> {
    out: W,
    written: u64,
    error: Option<io::Error>,
    cite: Cite,
    /// `turns.merge_repeated_prompts`: the same prompt again before any answer is not shown again.
    merge: bool,
    shown: Shown,
    /// Whether the current line showed an entry (or was skipped).
    emitted: bool,
    /// Answers shown since the last prompt (their text's hash).
    answers: HashSet<u64>,
    /// The last prompt shown, and whether anything answered it since.
    last_prompt: Option<(u64, bool)>,
    /// Queued prompts shown and not yet sent: their text's hash and line.
    queued: VecDeque<(u64, u64)>,
}

impl<W: Write> Render<W> {
    pub fn new(out: W, cite: Cite, merge_repeated_prompts: bool) -> Render<W> {
        Render {
            out,
            written: 0,
            error: None,
            cite,
            merge: merge_repeated_prompts,
            shown: Shown::default(),
            emitted: false,
            answers: HashSet::new(),
            last_prompt: None,
            queued: VecDeque::new(),
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn shown(&self) -> Shown {
        self.shown
    }

    fn put(&mut self, text: &str) {
        if self.error.is_some() {
            return;
        }
        match self.out.write_all(text.as_bytes()) {
            Ok(()) => self.written += text.len() as u64,
            Err(e) => self.error = Some(e),
        }
    }

    /// A prompt or an answer in full (up to `MESSAGE_MAX`), under its heading.
    fn prose(&mut self, line: u64, who: &str, text: &str) {
        let at = self.cite.at(line);
        self.put(&format!("\n[{at}] {who}:\n"));
        let (kept, cut) = super::cut_str(text.trim_end(), MESSAGE_MAX);
        self.put(kept);
        if cut {
            self.shown.cut += 1;
            let rest = text.trim_end().len() - kept.len();
            self.put(&format!(
                "\n[… {rest} more bytes not shown: read [{at}] in the original]"
            ));
        }
        self.put("\n");
        self.emitted = true;
    }

    /// The footer: what this part left out. Then the writer, what was shown, and the bytes written.
    pub fn finish(mut self) -> io::Result<(W, Shown, u64)> {
        let s = self.shown;
        let records = |n: u64, one: &str, many: &str| match n {
            1 => format!("1 record {one}"),
            n => format!("{n} records {many}"),
        };
        let mut parts = Vec::new();
        if s.left_out > 0 {
            let what = "no prompt, answer, tool call or result (metadata, file snapshots, progress, hooks)";
            parts.push(records(
                s.left_out,
                &format!("that is {what}"),
                &format!("that are {what}"),
            ));
        }
        if s.skipped > 0 {
            let what = "of a subagent or of a copied history";
            parts.push(records(s.skipped, what, what));
        }
        if s.repeats > 0 {
            parts.push(records(
                s.repeats,
                "repeating text shown above",
                "repeating text shown above",
            ));
        }
        if !parts.is_empty() {
            self.put(&format!("\nLeft out: {}.\n", parts.join("; ")));
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok((self.out, s, self.written))
    }
}

impl<W: Write> Sink for Render<W> {
    const RENDERS: bool = true;

    fn prompt(&mut self, line: u64, text: &str, queued: bool) {
        let h = hash(text);
        if !queued {
            // A queued prompt written again when it is sent: shown where it was queued.
            if let Some(i) = self.queued.iter().position(|q| q.0 == h) {
                let (_, at) = self.queued.remove(i).expect("found");
                let (here, then) = (self.cite.at(line), self.cite.at(at));
                self.put(&format!(
                    "\n[{here}] user: the queued prompt of [{then}], sent\n"
                ));
                self.shown.repeats += 1;
                self.emitted = true;
                self.last_prompt = Some((h, false));
                self.answers.clear();
                return;
            }
            if self.merge && self.last_prompt == Some((h, false)) {
                self.shown.repeats += 1;
                self.emitted = true;
                return;
            }
        }
        let who = match queued {
            true => "user (queued)",
            false => "user",
        };
        self.prose(line, who, text);
        self.shown.prompts += 1;
        if queued {
            self.queued.push_back((h, line));
            if self.queued.len() > MAX_QUEUED {
                self.queued.pop_front();
            }
        } else {
            self.last_prompt = Some((h, false));
            self.answers.clear();
        }
    }

    fn answer(&mut self, line: u64, text: &str, _group: Option<&str>) {
        if let Some(p) = &mut self.last_prompt {
            p.1 = true;
        }
        if !self.answers.insert(hash(text)) {
            self.shown.repeats += 1;
            self.emitted = true;
            return;
        }
        self.prose(line, "assistant", text);
        self.shown.answers += 1;
    }

    fn call(&mut self, line: u64, name: &str, argument: Option<&str>) {
        if let Some(p) = &mut self.last_prompt {
            p.1 = true;
        }
        let at = self.cite.at(line);
        let name = one_line(name, ARGUMENT_MAX);
        match argument.map(|a| one_line(a, ARGUMENT_MAX)) {
            Some(a) if !a.is_empty() => self.put(&format!("[{at}] tool {name}: {a}\n")),
            _ => self.put(&format!("[{at}] tool {name}\n")),
        }
        self.shown.calls += 1;
        self.emitted = true;
    }

    fn result(&mut self, line: u64, text: &str) {
        let at = self.cite.at(line);
        let head = one_line(text, RESULT_HEAD);
        self.put(&format!("[{at}] result, {}: {head}\n", size(text.len())));
        self.shown.results += 1;
        self.emitted = true;
    }

    fn note(&mut self, line: u64, text: &str) {
        let at = self.cite.at(line);
        let head = one_line(text, NOTE_HEAD);
        self.put(&format!("[{at}] not a prompt: {head}\n"));
        self.shown.notes += 1;
        self.emitted = true;
    }

    fn skipped(&mut self, _line: u64) {
        self.shown.skipped += 1;
        self.emitted = true;
    }

    fn resent(&mut self, _line: u64) {
        self.shown.repeats += 1;
        self.emitted = true;
    }

    fn end_line(&mut self, _line: u64) {
        if !self.emitted {
            self.shown.left_out += 1;
        }
        self.emitted = false;
    }
}

/// Renders the part `reader` holds, whose first line is transcript line `first_line`, to `out`: its
/// entries and the footer. Only complete lines count. Returns the writer, what was shown and the bytes
/// written.
pub fn part<R: io::Read, W: Write>(
    rule: &crate::rules::RuleSet,
    turns: &crate::rules::TurnsRule,
    reader: R,
    first_line: u64,
    cite: Cite,
    out: W,
) -> io::Result<(W, Shown, u64)> {
    let opts = super::Options {
        keep: super::Keep::Counts,
        ..super::Options::default()
    };
    let sink = Render::new(out, cite, turns.merge_repeated_prompts);
    let mut r = super::Reader::with_sink(rule, turns, first_line, 0, &opts, sink);
    let mut lines = crate::util::lines::LineReader::new(reader);
    while let Some(l) = lines.next_line()? {
        if !l.terminated {
            break;
        }
        r.line(first_line + l.number - 1, l.end, l.bytes);
    }
    let (_, sink) = r.finish_with_sink(lines.bytes_read());
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_whitespace_and_cuts_on_characters() {
        assert_eq!(one_line("  a\n\n b\tc  ", 10), "a b c");
        assert_eq!(one_line("héllo wörld", 7), "héllo w…");
        assert_eq!(one_line("abc", 3), "abc");
        assert_eq!(one_line("abc d", 3), "abc…");
        assert_eq!(size(999), "999 bytes");
        assert_eq!(size(12_345), "12.3 KB");
    }

    #[test]
    fn repeats_are_shown_once_and_queued_prompts_point_back() {
        let mut r = Render::new(Vec::new(), Cite::Line, true);
        for (line, f) in [
            (
                1,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(1, "hi", false)) as Box<dyn Fn(&mut _)>,
            ),
            (
                2,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(2, "hi", false)),
            ),
            (
                3,
                Box::new(|r: &mut Render<Vec<u8>>| r.answer(3, "hello", None)),
            ),
            (
                4,
                Box::new(|r: &mut Render<Vec<u8>>| r.answer(4, "hello", None)),
            ),
            (
                5,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(5, "later", true)),
            ),
            (
                6,
                Box::new(|r: &mut Render<Vec<u8>>| r.call(6, "Read", Some("/a.rs"))),
            ),
            (
                7,
                Box::new(|r: &mut Render<Vec<u8>>| r.result(7, "fn main() {}\n")),
            ),
            (8, Box::new(|_: &mut Render<Vec<u8>>| {})),
            (
                9,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(9, "later", false)),
            ),
        ] {
            f(&mut r);
            r.end_line(line);
        }
        let (out, shown, written) = r.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(written, text.len() as u64);
        assert_eq!(
            text,
            "\n[L1] user:\nhi\n\n[L3] assistant:\nhello\n\n[L5] user (queued):\nlater\n\
             [L6] tool Read: /a.rs\n[L7] result, 13 bytes: fn main() {}\n\n[L9] user: the queued prompt of [L5], sent\n\
             \nLeft out: 1 record that is no prompt, answer, tool call or result (metadata, file snapshots, progress, hooks); \
             3 records repeating text shown above.\n"
        );
        assert_eq!(
            (shown.prompts, shown.answers, shown.repeats, shown.left_out),
            (2, 1, 3, 1)
        );
    }

    #[test]
    fn a_long_message_is_cut_and_says_where_the_rest_is() {
        let mut r = Render::new(Vec::new(), Cite::Message, false);
        let long = "x".repeat(MESSAGE_MAX + 10);
        r.answer(13, &long, None);
        let (out, shown, _) = r.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("\n[M12] assistant:\nxxx"),
            "{}",
            &text[..40]
        );
        assert!(text.ends_with("[… 10 more bytes not shown: read [M12] in the original]\n"));
        assert_eq!(shown.cut, 1);
    }
}
