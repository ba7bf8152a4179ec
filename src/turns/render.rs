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
use crate::rules::conversation::{Call, ResultText};
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};

/// The most of one prompt or answer shown (a longer one is cut, and says where to read the rest).
pub const MESSAGE_MAX: usize = 64 * 1024;
/// Characters of a tool result shown.
pub const RESULT_HEAD: usize = 80;
/// Characters of a call's argument and of a record that is not a prompt shown.
pub const ARGUMENT_MAX: usize = 300;
pub const NOTE_HEAD: usize = 200;
/// The most of a turn's last thinking and of a subagent's or a task's report shown.
pub const THINKING_MAX: usize = 2 * 1024;
pub const REPORT_MAX: usize = 2 * 1024;
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
    /// Results shown as failed, and those shown by their size alone (they only acknowledge a call).
    pub failed: u64,
    pub brief: u64,
    /// Turns' last thinking shown (no answer followed it), and reports of subagents and tasks.
    pub thinking: u64,
    pub reports: u64,
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

pub use super::text::{one_line, size};

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
    /// Lines over the line reader's limit: their line, size and whether they were read (in part).
    oversized: Vec<(u64, u64, bool)>,
    /// The latest thinking with no answer after it: shown if the turn ends so (at the next prompt or
    /// the part's end).
    thinking: Option<(u64, String)>,
    /// Reports shown (their text's hash): a report queued and then delivered is one.
    reports: HashSet<u64>,
    /// One-line entries (a call and its result, or one result or note) collapse when they say what
    /// the unit before them said: the unit being read (each entry's citation and text), the last unit
    /// written (its texts), and how often it has come again since (count, the last one's citation).
    unit: Vec<(String, String)>,
    last_unit: Vec<String>,
    again: Option<(u64, String)>,
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
            oversized: Vec::new(),
            thinking: None,
            reports: HashSet::new(),
            unit: Vec::new(),
            last_unit: Vec::new(),
            again: None,
        }
    }

    /// A one-line entry (`[at] text`): a call starts a unit, a result after its call ends it.
    fn line_entry(&mut self, at: String, text: String, starts_unit: bool) {
        let joins = !starts_unit && self.unit.len() == 1 && self.unit[0].1.starts_with("tool ");
        if !joins {
            self.end_unit();
        }
        self.unit.push((at, text));
    }

    /// The unit read so far, written, or counted as the last one again.
    fn end_unit(&mut self) {
        if self.unit.is_empty() {
            return;
        }
        let unit = std::mem::take(&mut self.unit);
        let same = unit.len() == self.last_unit.len()
            && unit.iter().zip(&self.last_unit).all(|((_, t), l)| t == l);
        if same {
            let (n, _) = self.again.get_or_insert((0, String::new()));
            *n += 1;
            self.again.as_mut().expect("set").1 = unit[0].0.clone();
            self.shown.repeats += unit.len() as u64;
            return;
        }
        self.flush_again();
        for (at, text) in &unit {
            self.put(&format!("[{at}] {text}\n"));
        }
        self.last_unit = unit.into_iter().map(|(_, t)| t).collect();
    }

    /// The line that says the last unit came again, so many times.
    fn flush_again(&mut self) {
        if let Some((n, last)) = self.again.take() {
            let what = match self.last_unit.len() {
                1 => "the same again",
                _ => "the same call and result again",
            };
            self.put(&format!("[{last}] {what}, ×{n}\n"));
        }
    }

    /// Before an entry of another kind (prose, a report): the unit read so far ends, and the next one
    /// is compared with nothing.
    fn end_units(&mut self) {
        self.end_unit();
        self.flush_again();
        self.last_unit.clear();
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
        self.end_units();
        let at = self.cite.at(line);
        self.put(&format!("\n[{at}] {who}:\n"));
        let (kept, cut) = super::cut_str(text.trim_end(), MESSAGE_MAX);
        self.put(&super::text::indented(kept));
        if cut {
            self.shown.cut += 1;
            let rest = text.trim_end().len() - kept.len();
            self.put(&format!(
                "[… {rest} more bytes not shown: read [{at}] in the original]\n"
            ));
        }
        self.emitted = true;
    }

    /// The turn's last thinking, when no answer followed it: what the agent was about when it stopped.
    fn flush_thinking(&mut self) {
        if let Some((line, text)) = self.thinking.take() {
            self.end_units();
            let (kept, cut) = super::cut_str(text.trim(), THINKING_MAX);
            let at = self.cite.at(line);
            self.put(&format!(
                "\n[{at}] assistant (thinking; the turn ends without an answer{}):\n",
                if cut { ", its start" } else { "" }
            ));
            self.put(&super::text::indented(kept));
            self.shown.thinking += 1;
        }
    }

    /// The footer: what this part left out. Then the writer, what was shown, and the bytes written.
    pub fn finish(mut self) -> io::Result<(W, Shown, u64)> {
        self.flush_thinking();
        self.end_units();
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
        if !self.oversized.is_empty() {
            let lines: Vec<String> = (self.oversized.iter().take(20))
                .map(|(line, bytes, read)| {
                    let how = match read {
                        true => "read in part: long values cut, images named",
                        false => "not read: not JSON",
                    };
                    format!(
                        "[{}] ({}, {how})",
                        self.cite.at(*line),
                        size(*bytes as usize)
                    )
                })
                .collect();
            self.put(&format!(
                "\nOver almanac's {} line limit: {}{}.\n",
                crate::util::duration::format_size(crate::util::lines::MAX_LINE_BYTES as u64),
                lines.join(", "),
                if self.oversized.len() > 20 {
                    ", …"
                } else {
                    ""
                }
            ));
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok((self.out, s, self.written))
    }
}

impl<W: Write> Sink for Render<W> {
    const RENDERS: bool = true;

    fn prompt(&mut self, line: u64, text: &str, queued: bool, label: Option<&str>) {
        if !queued {
            self.flush_thinking();
        }
        let h = hash(text);
        if !queued {
            // A queued prompt written again when it is sent: shown where it was queued.
            if let Some(i) = self.queued.iter().position(|q| q.0 == h) {
                let (_, at) = self.queued.remove(i).expect("found");
                let (here, then) = (self.cite.at(line), self.cite.at(at));
                self.end_units();
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
        let who = match (queued, label) {
            (true, _) => "user (queued)".to_string(),
            (false, Some(l)) => format!("user ({})", one_line(l, ARGUMENT_MAX)),
            (false, None) => "user".to_string(),
        };
        self.prose(line, &who, text);
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
        self.thinking = None;
        if !self.answers.insert(hash(text)) {
            self.shown.repeats += 1;
            self.emitted = true;
            return;
        }
        self.prose(line, "assistant", text);
        self.shown.answers += 1;
    }

    fn call(&mut self, line: u64, call: &Call) {
        if let Some(p) = &mut self.last_prompt {
            p.1 = true;
        }
        let at = self.cite.at(line);
        let name = one_line(&call.name, ARGUMENT_MAX);
        // An argument of several lines (every file a patch touches, a script) gets more room.
        let room =
            |a: &str| (a.lines().count() * ARGUMENT_MAX).clamp(ARGUMENT_MAX, 4 * ARGUMENT_MAX);
        let mut text = match call.argument.as_deref().map(|a| one_line(a, room(a))) {
            Some(a) if !a.is_empty() => format!("tool {name}: {a}"),
            _ => format!("tool {name}"),
        };
        if let Some(why) = call.reason.as_deref().map(|r| one_line(r, ARGUMENT_MAX)) {
            text.push_str(&format!(" (the agent's reason: {why})"));
        }
        self.line_entry(at, text, true);
        self.shown.calls += 1;
        self.emitted = true;
    }

    fn result(&mut self, line: u64, result: &ResultText<'_>) {
        let at = self.cite.at(line);
        let shown = super::text::result_shown(result, RESULT_HEAD);
        let bytes = size(result.text.len());
        let text = match (&shown.failed, &shown.exit) {
            (true, exit) => {
                let exit = exit
                    .as_deref()
                    .map(|e| format!(" (exit {e})"))
                    .unwrap_or_default();
                let why = shown.error.as_deref().unwrap_or(&shown.head);
                self.shown.failed += 1;
                format!("result, failed{exit}, {bytes}: {why}")
            }
            _ if shown.brief => {
                self.shown.brief += 1;
                format!("result, {bytes}")
            }
            _ => format!("result, {bytes}: {}", shown.head),
        };
        self.line_entry(at, text, false);
        self.shown.results += 1;
        self.emitted = true;
    }

    fn thinking(&mut self, line: u64, text: &str) {
        if !text.trim().is_empty() {
            self.thinking = Some((line, text.to_string()));
        }
        self.emitted = true;
    }

    fn report(&mut self, line: u64, text: &str, label: Option<&str>) {
        self.emitted = true;
        if !self.reports.insert(hash(text.trim())) {
            self.shown.repeats += 1;
            return;
        }
        self.end_units();
        let at = self.cite.at(line);
        let (kept, cut) = super::cut_str(text.trim(), REPORT_MAX);
        let label = label.map(|l| format!(" ({})", one_line(l, ARGUMENT_MAX)));
        self.put(&format!("[{at}] report{}:\n", label.unwrap_or_default()));
        self.put(&super::text::indented(kept));
        if cut {
            self.put(&format!("[… read [{at}] in the original for the rest]\n"));
        }
        self.shown.reports += 1;
    }

    fn compaction(&mut self, line: u64, text: &str) {
        self.emitted = true;
        self.end_units();
        let at = self.cite.at(line);
        let (kept, cut) = super::cut_str(text.trim(), REPORT_MAX);
        self.put(&format!(
            "[{at}] the session compacted; the client's summary of it{}:\n",
            if cut { " (its start)" } else { "" }
        ));
        self.put(&super::text::indented(kept));
        self.shown.notes += 1;
    }

    fn note(&mut self, line: u64, text: &str) {
        let at = self.cite.at(line);
        let head = one_line(text, NOTE_HEAD);
        self.line_entry(at, format!("not a prompt: {head}"), true);
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

    fn oversized(&mut self, line: u64, bytes: u64, read: bool) {
        self.oversized.push((line, bytes, read));
        if !read {
            self.end_units();
            let at = self.cite.at(line);
            self.put(&format!(
                "[{at}] a record of {} almanac could not read: over its line limit, and not JSON\n",
                size(bytes as usize)
            ));
            self.emitted = true;
        }
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
    while let Some(l) = lines.next_line_salvaged()? {
        if !l.terminated {
            break;
        }
        let line = first_line + l.number - 1;
        if l.oversized {
            let read = !l.bytes.is_empty();
            r.sink_mut().oversized(line, l.end - l.start, read);
        }
        r.line(line, l.end, l.bytes);
    }
    let (_, sink) = r.finish_with_sink(lines.bytes_read());
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result of a rule with no failure, preamble or brief settings.
    fn plain(text: &str) -> ResultText<'static> {
        static RULE: std::sync::LazyLock<crate::rules::conversation::ResultRule> =
            std::sync::LazyLock::new(|| crate::rules::conversation::ResultRule {
                when: None,
                each: None,
                text: Vec::new(),
                failed: None,
                exit_code: Vec::new(),
                error: Vec::new(),
                preamble: None,
                brief: None,
            });
        ResultText {
            text: text.to_string(),
            failed: false,
            exit_code: None,
            error: None,
            rule: &RULE,
        }
    }

    #[test]
    fn repeats_are_shown_once_and_queued_prompts_point_back() {
        let mut r = Render::new(Vec::new(), Cite::Line, true);
        for (line, f) in [
            (
                1,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(1, "hi", false, None))
                    as Box<dyn Fn(&mut _)>,
            ),
            (
                2,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(2, "hi", false, None)),
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
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(5, "later", true, None)),
            ),
            (
                6,
                Box::new(|r: &mut Render<Vec<u8>>| {
                    r.call(
                        6,
                        &Call {
                            name: "Read".into(),
                            argument: Some("/a.rs".into()),
                            reason: None,
                        },
                    )
                }),
            ),
            (
                7,
                Box::new(|r: &mut Render<Vec<u8>>| r.result(7, &plain("fn main() {}\n"))),
            ),
            (8, Box::new(|_: &mut Render<Vec<u8>>| {})),
            (
                9,
                Box::new(|r: &mut Render<Vec<u8>>| r.prompt(9, "later", false, None)),
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
            "\n[L1] user:\n  hi\n\n[L3] assistant:\n  hello\n\n[L5] user (queued):\n  later\n\
             [L6] tool Read: /a.rs\n[L7] result, 13 bytes: fn main() {}\n\n[L9] user: the queued prompt of [L5], sent\n\
             \nLeft out: 1 record that is no prompt, answer, tool call or result (metadata, file snapshots, progress, hooks); \
             3 records repeating text shown above.\n"
        );
        assert_eq!(
            (shown.prompts, shown.answers, shown.repeats, shown.left_out),
            (2, 1, 3, 1)
        );
    }

    /// A call and its result that come again as they were (a poll, a retried command) are one line
    /// with ×N, as is a lone result the same as the lone one before; anything else between starts over.
    #[test]
    fn the_same_call_and_result_again_collapse_into_one_line() {
        let mut r = Render::new(Vec::new(), Cite::Line, false);
        let wait = Call {
            name: "wait".into(),
            argument: Some("20".into()),
            reason: None,
        };
        r.prompt(1, "go", false, None);
        for line in [2, 4, 6, 8] {
            r.call(line, &wait);
            r.result(line + 1, &plain("still running"));
        }
        r.call(10, &wait);
        r.result(11, &plain("done: 3 passed"));
        r.result(12, &plain("done: 3 passed"));
        r.answer(13, "All green.", None);
        r.call(14, &wait);
        r.result(15, &plain("still running"));
        let (out, shown, written) = r.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(written, text.len() as u64);
        assert_eq!(
            text,
            "\n[L1] user:\n  go\n[L2] tool wait: 20\n[L3] result, 13 bytes: still running\n\
             [L8] the same call and result again, ×3\n\
             [L10] tool wait: 20\n[L11] result, 14 bytes: done: 3 passed\n\
             [L12] result, 14 bytes: done: 3 passed\n\
             \n[L13] assistant:\n  All green.\n\
             [L14] tool wait: 20\n[L15] result, 13 bytes: still running\n\
             \nLeft out: 6 records repeating text shown above.\n"
        );
        assert_eq!((shown.calls, shown.results, shown.repeats), (6, 7, 6));
    }

    #[test]
    fn a_long_message_is_cut_and_says_where_the_rest_is() {
        let mut r = Render::new(Vec::new(), Cite::Message, false);
        let long = "x".repeat(MESSAGE_MAX + 10);
        r.answer(13, &long, None);
        let (out, shown, _) = r.finish().unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("\n[M12] assistant:\n  xxx"),
            "{}",
            &text[..40]
        );
        assert!(text.ends_with("[… 10 more bytes not shown: read [M12] in the original]\n"));
        assert_eq!(shown.cut, 1);
    }
}
