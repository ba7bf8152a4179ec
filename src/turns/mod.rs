//! Session turns, derived from transcripts through a rule set's `turns` section: a bounded record per
//! turn (a user prompt, the assistant text and tool names that answer it), as in the contexo capture
//! buffer, but read from the transcript instead of filled by a hook.
//!
//! Bounds (the buffer's): user text cut at 2 KiB and assistant text at 4 KiB on a character boundary,
//! `truncated` naming the field; at most 500 turn records, and when a transcript has more, the oldest
//! are dropped 100 at a time behind one overflow marker record (which says how many).

use crate::rules::pruned::parse_pruned;
use crate::rules::{RuleSet, TurnsRule};
use crate::util::lines::LineReader;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{self, Read};

mod skip;
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
    /// The skip region open there, and which skips had their `after` record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_open: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub armed: Vec<bool>,
    /// The first and the latest user prompt read so far, each cut to `CHECKPOINT_PROMPT_BYTES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt: Option<Prompt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_prompt: Option<Prompt>,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenTurn {
    /// Its prompt (cut as compared) while nothing answered it yet: a repeat or a queued prompt's
    /// delivery compares with it. None once answered, or for a turn without a prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub answered: bool,
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn cut(s: &str, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s.to_string(), false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s[..end].to_string(), true)
}

struct Builder<'a> {
    opts: &'a Options,
    turns: Vec<TurnRecord>,
    marker: Option<TurnRecord>,
    current: Option<Current>,
    /// Queued prompts not yet written again as prompts (cut text), newest last; bounded.
    queued: Vec<String>,
    /// The first and the latest prompt, cut for the checkpoint.
    prompts: (Option<Prompt>, Option<Prompt>),
    out: Turns,
}

/// At most this many queued prompts are remembered.
const MAX_QUEUED: usize = 64;

struct Current {
    rec: TurnRecord,
    assistant: String,
    /// The assistant blocks taken so far, as (group, sha256 of the text): a long turn is linear, and
    /// holds no text twice. Emptied once the text is cut (no later block can change it).
    seen: HashSet<(Option<String>, [u8; 32])>,
    /// Resumed from a checkpoint whose turn was answered before it.
    answered: bool,
}

impl Current {
    /// Nothing answered it yet: no assistant text, no tool.
    fn quiet(&self) -> bool {
        !self.answered && self.assistant.is_empty() && self.rec.tools.is_empty()
    }
}

impl<'a> Builder<'a> {
    fn start(&mut self, line: u64, ts: Option<String>, user: Option<String>) {
        self.finish();
        self.out.total_turns += 1;
        let mut rec = TurnRecord {
            kind: "turn",
            turn: self.out.total_turns,
            line,
            ts,
            user: None,
            assistant: None,
            tools: Vec::new(),
            truncated: Vec::new(),
            dropped: None,
            dropped_turns: None,
        };
        if let Some(u) = user {
            self.out.user_turns += 1;
            let hint: Prompt = cut(&u, CHECKPOINT_PROMPT_BYTES).0.into();
            self.prompts.0.get_or_insert_with(|| hint.clone());
            self.prompts.1 = Some(hint);
            let (text, was_cut) = cut(&u, self.opts.user_max);
            if was_cut {
                rec.truncated.push("user");
            }
            rec.user = Some(text);
        }
        self.current = Some(Current {
            rec,
            assistant: String::new(),
            seen: HashSet::new(),
            answered: false,
        });
    }

    /// Goes on from `c`: its counts, its open turn and queued prompts.
    fn resume(&mut self, c: &Checkpoint) {
        self.out.user_turns = c.user_turns;
        self.out.total_turns = c.total_turns;
        self.queued = c.queued.clone();
        self.prompts = (c.first_prompt.clone(), c.last_prompt.clone());
        self.current = c.open.as_ref().map(|o| Current {
            rec: TurnRecord {
                kind: "turn",
                turn: c.total_turns,
                line: c.line,
                ts: None,
                user: o.prompt.clone(),
                assistant: None,
                tools: Vec::new(),
                truncated: Vec::new(),
                dropped: None,
                dropped_turns: None,
            },
            assistant: String::new(),
            seen: HashSet::new(),
            answered: o.answered,
        });
    }

    /// The state to go on from after line `line`, ending at byte `offset`.
    fn checkpoint(&self, offset: u64, line: u64, skipper: &Skipper) -> Checkpoint {
        Checkpoint {
            offset,
            line,
            user_turns: self.out.user_turns,
            total_turns: self.out.total_turns,
            open: self.current.as_ref().map(|c| OpenTurn {
                prompt: c.quiet().then(|| c.rec.user.clone()).flatten(),
                answered: !c.quiet(),
            }),
            queued: self.queued.clone(),
            skip_open: skipper.open,
            armed: skipper.armed.clone(),
            first_prompt: self.prompts.0.clone(),
            last_prompt: self.prompts.1.clone(),
        }
    }

    /// A user prompt on `line`; `queued` when its record is a queue entry.
    fn prompt(&mut self, line: u64, ts: Option<String>, text: String, queued: bool, merge: bool) {
        let key = cut(&text, self.opts.user_max).0;
        let quiet = |c: &Current| c.quiet();
        if queued {
            self.queued.push(key.clone());
            if self.queued.len() > MAX_QUEUED {
                self.queued.remove(0);
            }
        } else if let Some(i) = self.queued.iter().position(|q| *q == key) {
            // The queue delivers a prompt it wrote before: the same prompt. Still unanswered, its turn
            // moves to this record.
            self.queued.remove(i);
            if let Some(c) = self.current.as_mut().filter(|c| quiet(c)) {
                if c.rec.user.as_deref() == Some(key.as_str()) {
                    c.rec.line = line;
                    c.rec.ts = ts;
                }
            }
            return;
        }
        // `merge_repeated_prompts`: the same prompt written twice in a row (two record kinds for one
        // message) is one turn.
        let repeat = merge
            && self
                .current
                .as_ref()
                .is_some_and(|c| quiet(c) && c.rec.user.as_deref() == Some(key.as_str()));
        if !repeat {
            self.start(line, ts, Some(text));
        }
    }

    fn current(&mut self, line: u64, ts: &Option<String>) -> &mut Current {
        if self.current.is_none() {
            // Assistant text or tools before any prompt (a part starting mid-turn): a turn without a user.
            self.start(line, ts.clone(), None);
        }
        self.current.as_mut().expect("just started")
    }

    fn assistant(&mut self, line: u64, ts: &Option<String>, group: Option<String>, text: String) {
        let max = self.opts.assistant_max;
        let keep_text = self.opts.keep == Keep::All;
        let c = self.current(line, ts);
        if !keep_text {
            c.answered = true;
            return;
        }
        // Cut already: nothing more is taken, repeated or not.
        if c.rec.truncated.contains(&"assistant") {
            return;
        }
        // Streamed or replayed blocks: the same text under the same message id counts once.
        let hash: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if !c.seen.insert((group, hash)) {
            return;
        }
        if !c.assistant.is_empty() {
            c.assistant.push_str("\n\n");
        }
        c.assistant.push_str(&text);
        if c.assistant.len() > max {
            let (t, _) = cut(&c.assistant, max);
            c.assistant = t;
            c.rec.truncated.push("assistant");
            c.seen = HashSet::new();
        }
    }

    fn tool(&mut self, line: u64, ts: &Option<String>, name: String) {
        if self.opts.keep == Keep::Counts {
            // Only the counts: a tool answers the turn (or starts one), its name is not kept.
            self.current(line, ts).answered = true;
            return;
        }
        if !self.out.tools.contains(&name) {
            self.out.tools.push(name.clone());
        }
        let c = self.current(line, ts);
        if !c.rec.tools.contains(&name) {
            c.rec.tools.push(name);
        }
    }

    fn finish(&mut self) {
        let Some(mut c) = self.current.take() else {
            return;
        };
        if !c.assistant.is_empty() {
            c.rec.assistant = Some(std::mem::take(&mut c.assistant));
        }
        match self.opts.keep {
            Keep::All => {}
            Keep::Counts => return,
            Keep::Summary => {
                // The first and the latest with a prompt.
                if c.rec.user.is_some() {
                    if self.turns.len() == 2 {
                        self.turns.pop();
                    }
                    self.turns.push(c.rec);
                }
                return;
            }
        }
        if self.turns.len() >= self.opts.max_turns {
            let n = DROP_OLDEST_ON_OVERFLOW.min(self.turns.len()).max(1);
            let gone: Vec<TurnRecord> = self.turns.drain(..n).collect();
            let first = gone.first().map(|t| t.turn).unwrap_or(0);
            let last = gone.last().map(|t| t.turn).unwrap_or(0);
            let m = self.marker.get_or_insert(TurnRecord {
                kind: "overflow",
                turn: 0,
                line: gone.first().map(|t| t.line).unwrap_or(0),
                ts: None,
                user: None,
                assistant: None,
                tools: Vec::new(),
                truncated: Vec::new(),
                dropped: Some(0),
                dropped_turns: Some((first, last)),
            });
            m.dropped = Some(m.dropped.unwrap_or(0) + gone.len() as u64);
            m.dropped_turns = Some((m.dropped_turns.map(|d| d.0).unwrap_or(first), last));
        }
        self.turns.push(c.rec);
    }
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
    let mut b = Builder {
        opts,
        turns: Vec::new(),
        marker: None,
        current: None,
        queued: Vec::new(),
        prompts: (None, None),
        out: Turns::default(),
    };
    let mut lines = LineReader::new(reader);
    let mut skipper = Skipper::new(&turns.skip);
    let base = opts.resume.as_ref().map_or(0, |c| c.offset);
    // The last complete line read: (offset just past it, its number).
    let mut through = (base, first_line - 1);
    if let Some(c) = &opts.resume {
        b.resume(c);
        if c.armed.len() == skipper.armed.len() {
            skipper.armed.clone_from(&c.armed);
            skipper.open = c.skip_open.filter(|i| *i < turns.skip.len());
        }
    }
    let filter = turns.filter.as_ref().expect("compiled with its rules");
    while let Some(l) = lines.next_line()? {
        let line = first_line + l.number - 1;
        if !l.terminated {
            break;
        }
        through = (base + l.end, line);
        if line <= skip_through {
            if skipper.waiting() && filter.may_arm(l.bytes, &skipper.armed) {
                if let Some(record) = parse_pruned(l.bytes, &turns.reads) {
                    skipper.arm(&record);
                }
            }
            continue;
        }
        // A line no rule can hold on changes nothing: not parsed.
        // Counting, once the open turn is answered only a line that can start a turn changes a count.
        let answered = b.current.as_ref().is_some_and(|c| !c.quiet());
        let prompts_only = opts.keep == Keep::Counts && answered;
        if !filter.wanted(l.bytes, (skipper.open, &skipper.armed), prompts_only) {
            continue;
        }
        let Some(record) = parse_pruned(l.bytes, &turns.reads) else {
            continue;
        };
        if skipper.skips(line, &record) || turns.ignore.iter().any(|p| p.holds(&record)) {
            continue;
        }
        // Only `capture turns` shows a turn's time, assistant text, message group and tool names; a
        // summary or a count needs none of them (with counts only, a tool only answers the turn).
        let all = opts.keep == Keep::All;
        let ts = match all {
            true => rule.record_time(&record).map(crate::policy::iso),
            false => None,
        };
        if let Some((queued, text)) = turns
            .user
            .iter()
            .filter(|t| t.applies(&record))
            .find_map(|t| t.text(&record).map(|x| (t.queued, x)))
        {
            b.prompt(line, ts.clone(), text, queued, turns.merge_repeated_prompts);
        } else if !all {
            if turns
                .assistant
                .iter()
                .any(|t| t.applies(&record) && t.has_text(&record))
            {
                b.assistant(line, &ts, None, String::new());
            }
        } else {
            for t in turns.assistant.iter().filter(|t| t.applies(&record)) {
                if let Some(text) = t.text(&record) {
                    let group = t.group.as_ref().and_then(|g| {
                        g.select(&record)
                            .into_iter()
                            .find_map(|v| v.as_str().map(str::to_string))
                    });
                    b.assistant(line, &ts, group, text);
                    break;
                }
            }
        }
        // A count needs a tool only while the turn is unanswered (or none is open).
        let tools_matter =
            opts.keep != Keep::Counts || b.current.as_ref().is_none_or(|c| c.quiet());
        for (when, name) in turns.tools.iter().filter(|_| tools_matter) {
            if when.as_ref().is_none_or(|w| w.holds(&record)) {
                for v in name.select(&record) {
                    if let Some(n) = v.as_str().filter(|n| !n.is_empty()) {
                        b.tool(line, &ts, n.to_string());
                    }
                }
            }
        }
        if opts
            .stop_after_turns
            .is_some_and(|n| b.out.total_turns >= n)
        {
            break;
        }
    }
    b.out.checkpoint = b.checkpoint(through.0, through.1, &skipper);
    b.finish();
    b.out.bytes_read = lines.bytes_read();
    let mut records: Vec<TurnRecord> = b.marker.into_iter().collect();
    records.extend(b.turns);
    b.out.records = records;
    Ok(b.out)
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
