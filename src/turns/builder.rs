//! The turns a read builds up as records go by: counts, the open turn, queued prompts, the kept
//! records and their bounds.

use super::skip::Skipper;
use super::{
    cut, cut_str, Checkpoint, Keep, OpenTurn, Options, Prompt, TurnRecord, Turns,
    CHECKPOINT_PROMPT_BYTES, DROP_OLDEST_ON_OVERFLOW,
};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

pub(super) struct Builder<'a> {
    pub(super) opts: &'a Options,
    pub(super) turns: Vec<TurnRecord>,
    pub(super) marker: Option<TurnRecord>,
    pub(super) current: Option<Current>,
    /// Queued prompts not yet written again as prompts (cut text), newest last; bounded.
    pub(super) queued: Vec<String>,
    /// With `turns.queue`: queued prompts held until delivered, oldest first; bounded.
    pub(super) held: std::collections::VecDeque<super::HeldPrompt>,
    /// ...and those the queue delivered, waiting for the record that carries their text.
    pub(super) sent: Vec<super::HeldPrompt>,
    /// Whether queued prompts are held until delivered (`turns.queue`).
    pub(super) hold_queued: bool,
    /// `turns.queue.command`: group 1 is the command a prompt record runs.
    pub(super) command: Option<&'a regex::Regex>,
    /// The first and the latest prompt, cut for the checkpoint...
    pub(super) prompts: (Option<Prompt>, Option<Prompt>),
    /// ...the latest kept as text until a checkpoint asks (a buffer reused prompt after prompt, not a
    /// shared string made for each): `prompts.1` when None.
    pub(super) latest: Option<String>,
    /// `turns.resends_prompt`: the line of the record announcing that the running turn's prompt is
    /// written again; the next prompt record decides whether it is that prompt.
    pub(super) resent: Option<u64>,
    /// Whether a checkpoint keeps the running turn's prompt once it is answered (`resends_prompt`
    /// compares with it); otherwise only an unanswered one's, which a repeat or a queue compares with.
    pub(super) keep_answered_prompt: bool,
    pub(super) out: Turns,
}

/// At most this many queued prompts are remembered.
const MAX_QUEUED: usize = 64;

/// Appends to a queue kept at `MAX_QUEUED`, dropping the oldest.
fn push_bounded<T>(v: &mut Vec<T>, x: T) {
    v.push(x);
    if v.len() > MAX_QUEUED {
        v.remove(0);
    }
}

/// Where the prompt a record with text `key` carries is among `held`: the same text, else (with
/// `command`, group 1 the command the record runs) one typed as that command and its arguments.
fn position_of<'h, H>(held: H, key: &str, command: Option<&regex::Regex>) -> Option<usize>
where
    H: IntoIterator<Item = &'h super::HeldPrompt>,
    H::IntoIter: Clone,
{
    let mut held = held.into_iter();
    if let Some(i) = held.clone().position(|h| h.text.as_deref() == Some(key)) {
        return Some(i);
    }
    let cmd = command?.captures(key)?.get(1)?.as_str().trim();
    held.position(|h| {
        h.text.as_deref().is_some_and(|t| {
            let t = t.trim_start();
            t.strip_prefix(cmd)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
        })
    })
}

pub(super) struct Current {
    pub(super) rec: TurnRecord,
    pub(super) assistant: String,
    /// The assistant blocks taken so far, as (group, sha256 of the text): a long turn is linear, and
    /// holds no text twice. Emptied once the text is cut (no later block can change it).
    pub(super) seen: HashSet<(Option<String>, [u8; 32])>,
    /// Resumed from a checkpoint whose turn was answered before it.
    pub(super) answered: bool,
}

impl Current {
    /// Nothing answered it yet: no assistant text, no tool.
    pub(super) fn quiet(&self) -> bool {
        !self.answered && self.assistant.is_empty() && self.rec.tools.is_empty()
    }
}

impl<'a> Builder<'a> {
    pub(super) fn start(&mut self, line: u64, ts: Option<String>, user: Option<String>) {
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
        if let Some(mut u) = user {
            self.out.user_turns += 1;
            let hint = cut_str(&u, CHECKPOINT_PROMPT_BYTES).0;
            self.prompts.0.get_or_insert_with(|| hint.into());
            let latest = self.latest.get_or_insert_with(String::new);
            latest.clear();
            latest.push_str(hint);
            let (kept, was_cut) = cut_str(&u, self.opts.user_max);
            if was_cut {
                u.truncate(kept.len());
                rec.truncated.push("user");
            }
            rec.user = Some(u);
        }
        self.current = Some(Current {
            rec,
            assistant: String::new(),
            seen: HashSet::new(),
            answered: false,
        });
    }

    /// Goes on from `c`: its counts, its open turn and queued prompts.
    pub(super) fn resume(&mut self, c: &Checkpoint) {
        self.out.user_turns = c.user_turns;
        self.out.total_turns = c.total_turns;
        self.queued = c.queued.clone();
        self.held = c.held.iter().filter(|h| !h.sent).cloned().collect();
        self.sent = c.held.iter().filter(|h| h.sent).cloned().collect();
        self.prompts = (c.first_prompt.clone(), c.last_prompt.clone());
        self.latest = None;
        self.resent = c.resent.then_some(c.line);
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
    pub(super) fn checkpoint(&self, offset: u64, line: u64, skipper: &Skipper) -> Checkpoint {
        Checkpoint {
            offset,
            line,
            user_turns: self.out.user_turns,
            total_turns: self.out.total_turns,
            open: self.current.as_ref().map(|c| OpenTurn {
                prompt: (c.quiet() || self.keep_answered_prompt)
                    .then(|| c.rec.user.clone())
                    .flatten(),
                answered: !c.quiet(),
            }),
            queued: self.queued.clone(),
            skip_open: skipper.open,
            skip_until_armed: skipper.open.is_some() && skipper.until_armed,
            // Without times, as the open turn: a read resumed from here has no record times before
            // it, and a counts-only read never has them.
            held: (self.sent.iter().chain(&self.held))
                .map(|h| super::HeldPrompt {
                    ts: None,
                    ..h.clone()
                })
                .collect(),
            armed: skipper.armed.clone(),
            resent: self.resent.is_some(),
            first_prompt: self.prompts.0.clone(),
            last_prompt: match &self.latest {
                Some(l) => Some(l.as_str().into()),
                None => self.prompts.1.clone(),
            },
        }
    }

    /// A `turns.resends_prompt` record on `line`: the app writes the running turn's prompt again next.
    pub(super) fn resend(&mut self, line: u64) {
        self.resent = Some(line);
    }

    /// Whether the prompt `text` on `line` is the running turn's prompt written again after a
    /// `resends_prompt` record (not a new prompt). The first prompt record after that record decides.
    pub(super) fn resent(&mut self, line: u64, text: &str) -> bool {
        if self.resent.is_none_or(|at| at >= line) {
            return false;
        }
        self.resent = None;
        let key = cut_str(text, self.opts.user_max).0;
        self.current
            .as_ref()
            .is_some_and(|c| c.rec.user.as_deref() == Some(key))
    }

    /// A user prompt on `line`; `queued` when its record is a queue entry.
    pub(super) fn prompt(
        &mut self,
        line: u64,
        ts: Option<String>,
        text: String,
        queued: bool,
        merge: bool,
    ) {
        let key = cut_str(&text, self.opts.user_max).0;
        let quiet = |c: &Current| c.quiet();
        if self.hold_queued {
            if queued {
                // Held until delivered (`deliver`, or a prompt record with its text).
                self.hold(line, ts, Some(key.to_string()), false);
                return;
            }
            // The record that carries a prompt the queue already took into the running turn
            // (`inject`: enqueue, remove, then a queued_command attachment with its text, 2.1.220):
            // that prompt, counted where it was queued, not a second one.
            if let Some(i) = self.queued.iter().position(|q| q == key) {
                self.queued.remove(i);
                return;
            }
            // A prompt record: it carries a delivered prompt (counted here, after any delivered
            // before it that no record carried), or one still queued (delivered by it), or a new one.
            match position_of(&self.sent, key, self.command) {
                Some(i) => {
                    self.sent.remove(i);
                    self.flush_sent();
                }
                // Carried before the queue said so: it leaves the queue (no later record pops it).
                // A delivered prompt this record does not carry keeps waiting for its own: Claude's
                // desktop app (2.1.2xx) writes a later prompt's enqueue and dequeue at the top of the
                // file. One no record carries counts where it was queued, at the end of the read.
                None => self.unhold(key),
            }
            self.start(line, ts, Some(text));
            return;
        }
        if queued {
            push_bounded(&mut self.queued, key.to_string());
        } else if let Some(i) = self.queued.iter().position(|q| q == key) {
            // The queue delivers a prompt it wrote before: the same prompt. Still unanswered, its turn
            // moves to this record.
            self.queued.remove(i);
            if let Some(c) = self.current.as_mut().filter(|c| quiet(c)) {
                if c.rec.user.as_deref() == Some(key) {
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
                .is_some_and(|c| quiet(c) && c.rec.user.as_deref() == Some(key));
        if !repeat {
            self.start(line, ts, Some(text));
        }
    }

    /// A queued record (with its text, or None) takes its place in the queue (`turns.queue`);
    /// `dropped`: one `ignore` drops, which never counts.
    pub(super) fn hold(
        &mut self,
        line: u64,
        ts: Option<String>,
        text: Option<String>,
        dropped: bool,
    ) {
        let text = text.map(|t| cut_str(&t, self.opts.user_max).0.to_string());
        self.held.push_back(super::HeldPrompt {
            text,
            line,
            ts,
            sent: false,
            dropped,
        });
        if self.held.len() > MAX_QUEUED {
            self.held.pop_front();
        }
    }

    /// The queue hands its oldest prompt to the model. It is a prompt (unless `ignore` dropped it):
    /// counted at the record that carries its text (which usually follows, once the turn
    /// before it has ended, or later), or where it was queued if no such record comes in the read.
    /// `now` (`inject`): taken into the running turn, it counts now, and a record carrying its text
    /// after this is that prompt.
    pub(super) fn deliver(&mut self, now: bool) {
        let Some(mut h) = self.held.pop_front() else {
            return;
        };
        let (false, Some(text)) = (h.dropped, h.text.clone()) else {
            return;
        };
        if now {
            self.flush_sent();
            push_bounded(&mut self.queued, text.clone());
            self.start(h.line, h.ts, Some(text));
            return;
        }
        h.sent = true;
        push_bounded(&mut self.sent, h);
    }

    /// A prompt record `ignore` drops carries `text`: a held prompt with that text leaves the queue.
    pub(super) fn carried(&mut self, text: &str) {
        self.unhold(cut_str(text, self.opts.user_max).0);
    }

    /// The held prompt whose text is `key` (cut as compared) leaves the queue.
    fn unhold(&mut self, key: &str) {
        if let Some(i) = position_of(&self.held, key, self.command) {
            self.held.remove(i);
        }
    }

    /// The delivered prompts no record carried: each a turn where it was queued.
    pub(super) fn flush_sent(&mut self) {
        for h in std::mem::take(&mut self.sent) {
            if let Some(text) = h.text {
                self.start(h.line, h.ts, Some(text));
            }
        }
    }

    /// Every held prompt is taken back (never sent).
    pub(super) fn withdraw(&mut self) {
        self.held.clear();
    }

    pub(super) fn current(&mut self, line: u64, ts: &Option<String>) -> &mut Current {
        if self.current.is_none() {
            // Assistant text or tools before any prompt (a part starting mid-turn): a turn without a user.
            self.start(line, ts.clone(), None);
        }
        self.current.as_mut().expect("just started")
    }

    pub(super) fn assistant(
        &mut self,
        line: u64,
        ts: &Option<String>,
        group: Option<String>,
        text: String,
    ) {
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

    pub(super) fn tool(&mut self, line: u64, ts: &Option<String>, name: String) {
        if matches!(self.opts.keep, Keep::Counts | Keep::Prompts) {
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

    pub(super) fn finish(&mut self) {
        let Some(mut c) = self.current.take() else {
            return;
        };
        if !c.assistant.is_empty() {
            c.rec.assistant = Some(std::mem::take(&mut c.assistant));
        }
        match self.opts.keep {
            Keep::All => {}
            Keep::Prompts if c.rec.user.is_none() => return,
            Keep::Prompts => {}
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
