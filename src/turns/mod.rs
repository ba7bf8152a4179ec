//! Session turns, derived from transcripts through a rule set's `turns` section: a bounded record per
//! turn (a user prompt, the assistant text and tool names that answer it), as in the contexo capture
//! buffer, but read from the transcript instead of filled by a hook.
//!
//! Bounds (the buffer's): user text cut at 2 KiB and assistant text at 4 KiB on a character boundary,
//! `truncated` naming the field; at most 500 turn records, and when a transcript has more, the oldest
//! are dropped 100 at a time behind one overflow marker record (which says how many).

use crate::rules::doc::Pruned;
use crate::rules::pruned::parse_pruned;
use crate::rules::{RuleSet, TurnsRule};
use crate::util::lines::LineReader;
use serde::Serialize;
use serde_json::Value;
use std::io::{self, Read};

mod builder;
pub mod render;
mod sink;
pub use sink::Sink;
mod skip;
pub mod text;
use builder::Builder;
use skip::Skipper;

pub const USER_MAX_BYTES: usize = 2 * 1024;
pub const ASSISTANT_MAX_BYTES: usize = 4 * 1024;
pub const MAX_TURNS: usize = 500;
pub const DROP_OLDEST_ON_OVERFLOW: usize = 100;
/// The first and the latest prompt a checkpoint remembers (the turn index keeps one per transcript).
pub const CHECKPOINT_PROMPT_BYTES: usize = 120;

/// A prompt a checkpoint remembers: shared, not copied, by the turn index and the rows it serves.
pub type Prompt = std::sync::Arc<str>;

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// `turn` for a turn, `overflow` for the marker that stands for dropped turns.
    pub kind: &'static str,
    /// 1-based turn number within the part read.
    pub turn: u64,
    /// Line of the user prompt (or of the first record of a turn without one).
    pub line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Which fields were cut to their bound.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<&'static str>,
    /// Overflow marker only: how many of the oldest turns were dropped, and their range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_turns: Option<(u64, u64)>,
}

pub struct Options {
    /// Continue a read that stopped here (the reader starts at `resume.offset`): the counts go on from
    /// it; turn records start with the turn that was open there.
    pub resume: Option<Checkpoint>,
    pub max_turns: usize,
    pub user_max: usize,
    pub assistant_max: usize,
    /// Stop reading once this many turns (with a prompt, assistant text or a tool) are seen: the
    /// no-new-content check only needs to know whether there is one.
    pub stop_after_turns: Option<u64>,
    /// Which turn records to keep (the counts are the same whatever is kept).
    pub keep: Keep,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Keep {
    /// The latest `max_turns`, behind an overflow marker (`capture turns`).
    #[default]
    All,
    /// The first and the last turn with a prompt, without assistant text: what `summarize` reads.
    Summary,
    /// None, and no tool names: only the counts (the turn index, a dry run).
    Counts,
    /// The latest `max_turns` with a prompt, without assistant text or tools: the prompts of the part
    /// captured before, which a rendering lists for context.
    Prompts,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            resume: None,
            max_turns: MAX_TURNS,
            user_max: USER_MAX_BYTES,
            assistant_max: ASSISTANT_MAX_BYTES,
            stop_after_turns: None,
            keep: Keep::All,
        }
    }
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Turns {
    /// The overflow marker (if any) first, then the kept turns, oldest first.
    pub records: Vec<TurnRecord>,
    /// Turns with a user prompt, including dropped ones.
    pub user_turns: u64,
    pub total_turns: u64,
    /// Tool names over the whole part, in order of first use (none with `Keep::Counts`).
    pub tools: Vec<String>,
    #[serde(skip)]
    pub bytes_read: u64,
    /// Where this read stopped (after its last complete line) and what a later read needs to go on.
    #[serde(skip)]
    pub checkpoint: Checkpoint,
}

/// The state of a turn read after a complete line: enough for a later read of what follows to count
/// exactly what one read of the whole file counts (the turn index of `capture sessions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// Byte offset just past the last complete line read, and that line's number.
    pub offset: u64,
    pub line: u64,
    pub user_turns: u64,
    pub total_turns: u64,
    /// The turn still open there, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<OpenTurn>,
    /// Queued prompts not yet written again as prompts (cut as compared).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<String>,
    /// The skip region open there (and whether its `until_after` record was read), and which skips
    /// had their `after` record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_open: Option<usize>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_until_armed: bool,
    /// Queued prompts held until delivered (`turns.queue`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldPrompt>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub armed: Vec<bool>,
    /// A `turns.resends_prompt` record was read since the last prompt: the next prompt record may
    /// be the open turn's prompt written again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resent: bool,
    /// The first and the latest user prompt read so far, each cut to `CHECKPOINT_PROMPT_BYTES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<Prompt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt: Option<Prompt>,
}

/// A queued prompt not delivered yet (`turns.queue`): its place in the queue, its text (cut as
/// compared; None for a queued record without text) and where it was queued. A prompt record that
/// carries a held prompt's text takes it out of the queue.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldPrompt {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub line: u64,
    /// When it was queued; never kept in a checkpoint.
    #[serde(skip)]
    pub ts: Option<String>,
    /// The queue delivered it (`deliver`): it waits for the prompt record that carries its text, and
    /// counts where it was queued if none comes before the next prompt (or the end).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sent: bool,
    /// `ignore` drops it (a queued local command, a task notification): it only holds its place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenTurn {
    /// Its prompt (cut as compared) while nothing answered it yet: a repeat or a queued prompt's
    /// delivery compares with it. None once answered (unless the rules have `resends_prompt`, which
    /// compares with it later), or for a turn without a prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub answered: bool,
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn cut(s: &str, max: usize) -> (String, bool) {
    let (kept, was_cut) = cut_str(s, max);
    (kept.to_string(), was_cut)
}

/// `cut`, borrowed.
pub fn cut_str(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// Reads turns from `reader`, whose first line is line `first_line` of the transcript; lines after
/// `skip_through` (a transcript line number) only. Only complete lines count.
pub fn extract<R: Read>(
    rule: &RuleSet,
    turns: &TurnsRule,
    reader: R,
    first_line: u64,
    skip_through: u64,
    opts: &Options,
) -> io::Result<Turns> {
    let mut r = Reader::new(rule, turns, first_line, skip_through, opts);
    let mut lines = LineReader::new(reader);
    while let Some(l) = lines.next_line_salvaged()? {
        if !l.terminated || !r.line(first_line + l.number - 1, l.end, l.bytes) {
            break;
        }
    }
    Ok(r.finish(lines.bytes_read()))
}

/// A read of turns that is handed its lines one at a time (`extract` hands it a reader's; a sweep that
/// counts while it finds where lines end hands it those it finds).
pub struct Reader<'a, S: Sink = ()> {
    rule: &'a RuleSet,
    turns: &'a TurnsRule,
    opts: &'a Options,
    skip_through: u64,
    b: Builder<'a>,
    skipper: Skipper<'a>,
    filter: &'a crate::rules::prefilter::Prefilter,
    /// Where a resumed read began: line ends are given from there.
    base: u64,
    /// The last complete line read: (offset just past it, its number).
    through: (u64, u64),
    sink: S,
}

impl<'a> Reader<'a> {
    /// A read whose first line is transcript line `first_line`, counting lines after `skip_through`.
    pub fn new(
        rule: &'a RuleSet,
        turns: &'a TurnsRule,
        first_line: u64,
        skip_through: u64,
        opts: &'a Options,
    ) -> Reader<'a> {
        Reader::with_sink(rule, turns, first_line, skip_through, opts, ())
    }
}

impl<'a, S: Sink> Reader<'a, S> {
    /// As `new`, telling `sink` what each record is.
    pub fn with_sink(
        rule: &'a RuleSet,
        turns: &'a TurnsRule,
        first_line: u64,
        skip_through: u64,
        opts: &'a Options,
        sink: S,
    ) -> Reader<'a, S> {
        let mut b = Builder {
            opts,
            turns: Vec::new(),
            marker: None,
            current: None,
            queued: Vec::new(),
            held: Default::default(),
            sent: Vec::new(),
            hold_queued: turns.queue.is_some(),
            command: turns.queue.as_ref().and_then(|q| q.command.as_ref()),
            prompts: (None, None),
            latest: None,
            resent: None,
            keep_answered_prompt: turns.resends_prompt.is_some(),
            out: Turns::default(),
        };
        let mut skipper = Skipper::new(&turns.skip);
        let base = opts.resume.as_ref().map_or(0, |c| c.offset);
        if let Some(c) = &opts.resume {
            b.resume(c);
            if c.armed.len() == skipper.armed.len() {
                skipper.armed.clone_from(&c.armed);
                skipper.open = c.skip_open.filter(|i| *i < turns.skip.len());
                skipper.until_armed = c.skip_until_armed
                    || skipper
                        .open
                        .is_some_and(|i| turns.skip[i].until_after.is_none());
            }
        }
        Reader {
            rule,
            turns,
            opts,
            skip_through,
            b,
            skipper,
            filter: turns.filter.as_ref().expect("compiled with its rules"),
            base,
            through: (base, first_line - 1),
            sink,
        }
    }

    pub fn sink(&self) -> &S {
        &self.sink
    }

    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Complete line `line` of the transcript, which ends `end` bytes into what this read was given
    /// (`bytes`: without its newline, a trailing `\r` or a leading BOM). Whether to go on (false once
    /// `stop_after_turns` turns were seen).
    pub fn line(&mut self, line: u64, end: u64, bytes: &[u8]) -> bool {
        self.through = (self.base + end, line);
        if line <= self.skip_through {
            if self.skipper.waiting() && self.filter.may_arm(bytes, &self.skipper.armed) {
                if let Some(record) = parse_pruned(bytes, &self.turns.reads) {
                    self.skipper.arm(&record);
                }
            }
            return true;
        }
        let go_on = self.record(line, bytes);
        self.sink.end_line(line);
        go_on
    }

    /// The record on `line`, past `skip_through`: whether to go on.
    fn record(&mut self, line: u64, bytes: &[u8]) -> bool {
        // A line no rule can hold on changes nothing: not parsed.
        // Counting, once the open turn is answered only a line that can start a turn changes a count.
        let answered = self.b.current.as_ref().is_some_and(|c| !c.quiet());
        let counting = matches!(self.opts.keep, Keep::Counts | Keep::Prompts);
        let prompts_only = counting && answered;
        let skips = (self.skipper.open, &self.skipper.armed[..]);
        let wanted = match S::RENDERS {
            true => self.filter.wanted_for_render(bytes, line, skips),
            false => self.filter.wanted(bytes, line, skips, prompts_only),
        };
        if !wanted {
            return true;
        }
        let need = match S::RENDERS {
            true => &self.turns.render_reads,
            false => &self.turns.reads,
        };
        let Some(record) = parse_pruned(bytes, need) else {
            return true;
        };
        if self.skipper.skips(line, &record) {
            self.sink.skipped(line);
            return true;
        }
        if self.queue_event(&record) {
            return true;
        }
        if (self.turns.resends_prompt.as_ref()).is_some_and(|p| p.holds(&record)) {
            self.b.resend(line);
        }
        let prompt = |record: &Pruned<'_>| {
            self.turns
                .user
                .iter()
                .filter(|t| t.applies(record))
                .find_map(|t| t.prompts(record).map(|x| (t.queued, x, t.label.as_deref())))
        };
        let queued_here = |record: &Pruned<'_>| {
            self.turns.queue.is_some()
                && self
                    .turns
                    .user
                    .iter()
                    .any(|t| t.queued && t.applies(record))
        };
        if S::RENDERS {
            // A compaction summary is the client's, never a prompt or an answer: shown as what it is.
            let mut compaction = self.turns.compaction.iter().filter(|t| t.applies(&record));
            if let Some(text) = compaction.find_map(|t| t.text(&record)) {
                self.sink.compaction(line, &text);
                return true;
            }
        }
        if self.turns.ignore.iter().any(|p| p.holds(&record)) {
            // Dropped, but with a queue a queued record still holds its place, and a prompt record
            // still delivers what it carries (a task notification the queue held).
            let carried = prompt(&record);
            if self.turns.queue.is_some() {
                match &carried {
                    Some((true, texts, _)) => {
                        for text in texts {
                            self.b.hold(line, None, Some(text.clone()), true);
                        }
                    }
                    Some((false, texts, _)) => texts.iter().for_each(|t| self.b.carried(t)),
                    None if queued_here(&record) => self.b.hold(line, None, None, true),
                    None => {}
                }
            }
            if S::RENDERS {
                self.render_ignored(line, &record, carried.map(|(_, t, _)| t.join("\n\n")));
            }
            return true;
        }
        let prompt = prompt(&record);
        if prompt.is_none() && queued_here(&record) {
            // A queued record without text (what an IDE writes) holds its place too.
            self.b.hold(line, None, None, false);
            return true;
        }
        // Only `capture turns` shows a turn's time, assistant text, message group and tool names; a
        // summary or a count needs none of them (with counts only, a tool only answers the turn).
        let all = self.opts.keep == Keep::All;
        let ts = match all {
            true => self.rule.record_time(&record).map(crate::policy::iso),
            false => None,
        };
        if let Some((queued, texts, label)) = prompt {
            for text in texts {
                if self.b.resent(line, &text) {
                    self.sink.resent(line);
                    continue;
                }
                self.sink.prompt(line, &text, queued, label);
                self.b.prompt(
                    line,
                    ts.clone(),
                    text,
                    queued,
                    self.turns.merge_repeated_prompts,
                );
            }
        }
        // A record may hold a prompt and its answer both (an Auggie exchange): the answer after it.
        if S::RENDERS && S::CALLS {
            let mut thinking = self.turns.thinking.iter().filter(|t| t.applies(&record));
            if let Some(text) = thinking.find_map(|t| t.text(&record)) {
                self.sink.thinking(line, &text);
            }
        }
        self.answer(line, &record, &ts, all);
        self.tools(line, &record, &ts);
        if S::RENDERS && S::CALLS {
            // A subagent's report comes back as its call's result: shown as a report, not cut to a
            // result's head.
            let mut reports = self.turns.reports.iter().filter(|t| t.applies(&record));
            match reports.find_map(|t| t.text(&record).map(|x| (t, x))) {
                Some((t, text)) => self.sink.report(line, &text, t.label.as_deref()),
                None => {
                    for r in self.turns.results.iter().filter(|r| r.applies(&record)) {
                        r.texts(&record, |t| self.sink.result(line, &t));
                    }
                }
            }
        }
        if self
            .opts
            .stop_after_turns
            .is_some_and(|n| self.b.out.total_turns >= n)
        {
            return false;
        }
        true
    }

    /// What a rendering shows of a record `ignore` drops: a subagent's or a task's report, else the text
    /// it holds (`carried`, a prompt's, or an answer's) as a note.
    fn render_ignored(&mut self, line: u64, record: &Pruned<'_>, carried: Option<String>) {
        let mut reports = self.turns.reports.iter().filter(|t| t.applies(record));
        if let Some((t, text)) = reports.find_map(|t| t.text(record).map(|x| (t, x))) {
            return self.sink.report(line, &text, t.label.as_deref());
        }
        let text = carried.or_else(|| {
            let mut a = self.turns.assistant.iter().filter(|t| t.applies(record));
            a.find_map(|t| t.text(record))
        });
        if let Some(t) = text {
            self.sink.note(line, &t);
        }
    }

    /// A queue record (`deliver`, `inject`, `withdraw`) applied to the open prompts: whether it was one.
    fn queue_event(&mut self, record: &Pruned<'_>) -> bool {
        let Some(q) = &self.turns.queue else {
            return false;
        };
        let holds =
            |p: &Option<crate::rules::Predicate>| p.as_ref().is_some_and(|p| p.holds(record));
        if holds(&q.deliver) {
            self.b.deliver(false);
        } else if holds(&q.inject) {
            self.b.deliver(true);
        } else if holds(&q.withdraw) {
            self.b.withdraw();
        } else {
            return false;
        }
        true
    }

    /// An assistant record: its text and message group when `all` is kept or a sink renders it, else
    /// only that it answers.
    fn answer(&mut self, line: u64, record: &Pruned<'_>, ts: &Option<String>, all: bool) {
        if !all && !S::RENDERS {
            if self
                .turns
                .assistant
                .iter()
                .any(|t| t.applies(record) && t.has_text(record))
            {
                self.b.assistant(line, ts, None, String::new());
            }
            return;
        }
        for t in self.turns.assistant.iter().filter(|t| t.applies(record)) {
            if let Some(text) = t.text(record) {
                let group = t.group.as_ref().and_then(|g| {
                    let mut group = None;
                    g.any(record, |v| {
                        group = v.as_str().map(str::to_string);
                        group.is_some()
                    });
                    group
                });
                self.sink.answer(line, &text, group.as_deref());
                match all {
                    true => self.b.assistant(line, ts, group, text),
                    false => self.b.assistant(line, ts, None, String::new()),
                }
                break;
            }
        }
    }

    /// The record's tool calls; a count needs a tool only while the turn is unanswered (or none is open).
    fn tools(&mut self, line: u64, record: &Pruned<'_>, ts: &Option<String>) {
        let counting = matches!(self.opts.keep, Keep::Counts | Keep::Prompts);
        let tools_matter = !counting || self.b.current.as_ref().is_none_or(|c| c.quiet());
        let calls = S::RENDERS && S::CALLS;
        if !tools_matter && !calls {
            return;
        }
        let (b, sink) = (&mut self.b, &mut self.sink);
        for t in self.turns.tools.iter().filter(|t| t.applies(record)) {
            match calls {
                true => t.calls(record, |call| {
                    sink.call(line, &call);
                    b.tool(line, ts, call.name);
                }),
                false => t.names(record, |name| b.tool(line, ts, name)),
            }
        }
    }

    /// The turns read; `bytes_read`: what was read to give the lines.
    pub fn finish(self, bytes_read: u64) -> Turns {
        self.finish_with_sink(bytes_read).0
    }

    /// As `finish`, with the sink back.
    pub fn finish_with_sink(mut self, bytes_read: u64) -> (Turns, S) {
        let (offset, line) = self.through;
        self.b.out.checkpoint = self.b.checkpoint(offset, line, &self.skipper);
        // Delivered prompts no record carried count where they were queued (the checkpoint keeps
        // them waiting: a later read may still find their record).
        self.b.flush_sent();
        self.b.finish();
        self.b.out.bytes_read = bytes_read;
        let mut records: Vec<TurnRecord> = self.b.marker.into_iter().collect();
        records.extend(self.b.turns);
        self.b.out.records = records;
        (self.b.out, self.sink)
    }
}

/// The most recent user -> assistant exchange with its tools; None when no turn has assistant text yet.
pub fn latest_exchange(t: &Turns) -> Option<&TurnRecord> {
    t.records
        .iter()
        .rev()
        .find(|r| r.kind == "turn" && r.assistant.is_some())
}

/// A short, bounded account of a transcript part for the capture prompt.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartSummary {
    pub user_turns: u64,
    /// Turns of any kind: with a prompt, assistant text or a tool (0: nothing new to capture).
    #[serde(skip)]
    pub turns: u64,
    pub first_user: Option<String>,
    pub last_user: Option<String>,
    pub tools: Vec<String>,
}

pub fn summarize(t: &Turns) -> PartSummary {
    let users: Vec<&TurnRecord> = t.records.iter().filter(|r| r.user.is_some()).collect();
    let bound = |r: Option<&&TurnRecord>| r.and_then(|r| r.user.as_deref()).map(|u| cut(u, 300).0);
    PartSummary {
        user_turns: t.user_turns,
        turns: t.total_turns,
        first_user: bound(users.first()),
        last_user: if users.len() > 1 {
            bound(users.last())
        } else {
            None
        },
        tools: t.tools.iter().take(20).cloned().collect(),
    }
}

/// Whether a record value holds a user prompt, for tests and `rules explain`.
pub fn is_user_prompt(turns: &TurnsRule, record: &Value) -> bool {
    turns
        .user
        .iter()
        .any(|t| t.applies(record) && t.text(record).is_some())
}

#[cfg(test)]
mod tests;
